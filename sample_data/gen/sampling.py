"""Logit processors of the engine's sampler, with vLLM's SamplingParams semantics.

A stack whose engine applies one of them and reports the *processed* logprob (the logprob of the
distribution it sampled from) while the trainer scores the plain `log_softmax(logits / T)` has a
semantic mismatch: the reported logprob is not the policy's. Order as in vLLM's sampler: logit
bias and bad words, then the penalties (on the raw logits), then the temperature, then min-p and
top-k (and top-p, `EngineConfig.top_p`) on the tempered distribution, each renormalised.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Processors:
    """The engine-side processors; the defaults leave the logits as they are."""

    top_k: int = 0  # 0: off; keep the k most likely tokens
    min_p: float = 0.0  # drop tokens whose probability is below min_p x the top probability
    repetition_penalty: float = 1.0  # tokens of the context: positive logits / p, negative x p
    frequency_penalty: float = 0.0  # minus f x (times the token was generated in this request)
    presence_penalty: float = 0.0  # minus p if the token was generated in this request
    logit_bias: tuple[tuple[int, float], ...] = ()  # (token id, added to its logit)
    bad_ids: tuple[int, ...] = ()  # token ids that may never be sampled


class TokenHistory:
    """Per batch row: which tokens the context holds (prompt and output, for the repetition
    penalty) and how often each was generated in this request (frequency/presence penalties)."""

    def __init__(self, contexts: list[list[int]], vocab: int) -> None:
        self.seen = torch.zeros(len(contexts), vocab, dtype=torch.bool)
        for row, ctx in enumerate(contexts):
            self.seen[row, torch.tensor(ctx, dtype=torch.long)] = True
        self.counts = torch.zeros(len(contexts), vocab, dtype=torch.float32)

    def add(self, tokens: torch.Tensor) -> None:
        rows = torch.arange(tokens.shape[0])
        self.seen[rows, tokens] = True
        self.counts[rows, tokens] += 1.0

    def select(self, rows: torch.Tensor) -> None:
        """Keep only some rows (finished sequences leave the decode batch)."""
        self.seen = self.seen.index_select(0, rows)
        self.counts = self.counts.index_select(0, rows)


def apply_penalties(
    logits: torch.Tensor, proc: Processors, history: TokenHistory | None
) -> torch.Tensor:
    """Logit bias, bad words and the penalties on fp32 raw logits [B, V] (a new tensor)."""
    out = logits.clone()
    for token, bias in proc.logit_bias:
        out[:, token] += bias
    if proc.bad_ids:
        out[:, list(proc.bad_ids)] = float("-inf")
    if history is None:
        return out
    if proc.repetition_penalty != 1.0:
        penalised = torch.where(
            out > 0, out / proc.repetition_penalty, out * proc.repetition_penalty
        )
        out = torch.where(history.seen, penalised, out)
    if proc.frequency_penalty:
        out = out - proc.frequency_penalty * history.counts
    if proc.presence_penalty:
        out = out - proc.presence_penalty * (history.counts > 0).float()
    return out


def truncate(processed: torch.Tensor, proc: Processors) -> torch.Tensor:
    """min-p and top-k on tempered logprobs [B, V], renormalised over the kept tokens."""
    keep = torch.ones_like(processed, dtype=torch.bool)
    if proc.min_p > 0.0:
        top = processed.amax(dim=-1, keepdim=True)
        keep &= processed >= top + torch.log(torch.tensor(proc.min_p))
    if proc.top_k > 0:
        kth = processed.topk(proc.top_k, dim=-1).values[:, -1:]
        keep &= processed >= kth
    if bool(keep.all()):
        return processed
    return torch.log_softmax(processed.masked_fill(~keep, float("-inf")), dim=-1)
