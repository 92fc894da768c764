"""Inference engine (bf16, KV cache, batched sampling) and trainer scorer (fp32, full forward)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from gen.faults import FaultHooks, NumericPath, install_path
from gen.model import AttentionKernel, KVCache, ModelConfig, TinyLM
from gen.moe import NO_ROUTE, MoELM, make_model
from gen.sampling import Processors, TokenHistory, apply_penalties, truncate

NEWLINE = 10


@dataclass(frozen=True)
class EngineConfig:
    """The knobs of the inference path; each run of the sample data changes one of them."""

    temperature: float = 0.9
    top_p: float = 1.0
    logprobs_mode: str = "processed"  # "raw": log_softmax of the logits before temperature/top-p
    dtype: torch.dtype = torch.bfloat16
    lm_head_fp32: bool = False
    kv_fp32: bool = False  # fp32 KV cache and fp32 attention (the rest stays in `dtype`)
    kernel: AttentionKernel = field(default_factory=AttentionKernel)
    processors: Processors | None = None  # engine-side logit processors (gen/sampling.py)
    path: NumericPath | None = None  # where the numeric path departs from the plain one


@dataclass(frozen=True)
class TurnLimits:
    max_new: int  # hard limit of one model turn
    min_new: int  # a newline after this many tokens ends the turn (the stop byte)


def build_model(cfg: ModelConfig, state: dict[str, torch.Tensor], dtype: torch.dtype) -> TinyLM:
    model = make_model(cfg)
    model.load_state_dict(state)
    model.eval()
    return model.to(dtype)


def sample_tokens(
    logits: torch.Tensor,
    cfg: EngineConfig,
    gen: torch.Generator,
    history: TokenHistory | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one token per row; return it and the logprob the engine reports for it.

    Like vLLM's sampler, logits are upcast to fp32 before temperature and softmax. Top-p keeps the
    smallest prefix of the sorted distribution whose mass reaches top_p and renormalises it.
    `cfg.processors` (gen/sampling.py) act on the logits before the temperature (bias, bad words,
    penalties, with the rows' `history`) and after it (min-p, top-k).
    """
    logits = logits.float()
    raw = logits
    if cfg.processors is not None:
        logits = apply_penalties(logits, cfg.processors, history)
    processed = torch.log_softmax(logits / cfg.temperature, dim=-1)
    if cfg.processors is not None:
        processed = truncate(processed, cfg.processors)
    if cfg.top_p < 1.0:
        probs = processed.exp()
        sorted_p, order = probs.sort(dim=-1, descending=True)
        before = sorted_p.cumsum(dim=-1) - sorted_p  # mass strictly before each token
        keep_sorted = before < cfg.top_p
        keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
        processed = torch.log_softmax(processed.masked_fill(~keep, float("-inf")), dim=-1)
    cdf = processed.double().exp().cumsum(dim=-1)
    u = torch.rand(logits.shape[0], 1, generator=gen, dtype=torch.float64) * cdf[:, -1:]
    tokens = torch.searchsorted(cdf, u, right=True).clamp_max(logits.shape[-1] - 1).squeeze(1)
    reported = torch.log_softmax(raw, dim=-1) if cfg.logprobs_mode == "raw" else processed
    return tokens, reported.gather(1, tokens[:, None]).squeeze(1)


class InferenceEngine:
    """Batched generation of one model turn for many contexts at once (left padding, KV cache)."""

    def __init__(
        self,
        model_cfg: ModelConfig,
        state: dict[str, torch.Tensor],
        cfg: EngineConfig,
        stale_state: dict[str, torch.Tensor] | None = None,
    ) -> None:
        self.cfg = cfg
        self.model = build_model(model_cfg, state, cfg.dtype)
        if cfg.lm_head_fp32:
            self.model.lm_head_fp32 = state["lm_head.weight"].float().clone()
        self.model.kv_fp32 = cfg.kv_fp32
        # a prefix cache that survived the weight sync: its KV was computed with `stale_state`
        self.stale_model: TinyLM | None = None
        if cfg.path is not None:
            install_path(self.model, cfg.path)
            if cfg.path.prefix_cache:
                assert stale_state is not None, "a stale prefix cache needs the stale weights"
                self.stale_model = build_model(model_cfg, stale_state, cfg.dtype)
        # an MoE model's routes of the last generate(), per context: int16 [rows, layers, top_k]
        # for the positions [0, len(context) + generated - 1) (each input position's experts)
        self.routes: list[np.ndarray] | None = None

    @torch.no_grad()
    def generate(
        self,
        contexts: list[list[int]],
        limits: TurnLimits,
        gen: torch.Generator,
        cached: list[int] | None = None,
    ) -> list[tuple[list[int], list[float]]]:
        """One turn for each context: the generated tokens and their reported logprobs.

        `cached`: per context, how many leading tokens hit the (stale) prefix cache."""
        n = len(contexts)
        length = max(len(c) for c in contexts)
        tokens = torch.zeros(n, length, dtype=torch.long)
        valid = torch.zeros(n, length, dtype=torch.bool)
        for i, ctx in enumerate(contexts):
            tokens[i, length - len(ctx) :] = torch.tensor(ctx)
            valid[i, length - len(ctx) :] = True
        if self.stale_model is not None and cached is not None:
            self.serve_stale_prefix(tokens, valid, [len(c) for c in contexts], cached)
        logits, cache = self.model.prefill(tokens, valid, capacity=length + limits.max_new)
        if isinstance(self.model.hooks, FaultHooks):
            self.model.hooks.stale = None
        history = None
        if self.cfg.processors is not None:
            history = TokenHistory(contexts, self.model.cfg.vocab)
        moe = isinstance(self.model, MoELM)
        trace = (
            [[r[v]] for r, v in zip(self.model.routes(), valid.numpy(), strict=True)] if moe else []
        )
        out: list[tuple[list[int], list[float]]] = [([], []) for _ in range(n)]
        active = torch.arange(n)
        for t in range(limits.max_new):
            new, lps = sample_tokens(logits, self.cfg, gen, history)
            if history is not None:
                history.add(new)
            done = []
            for row, (tok, lp) in enumerate(zip(new.tolist(), lps.tolist(), strict=True)):
                seq = out[int(active[row])]
                seq[0].append(tok)
                seq[1].append(lp)
                done.append(t + 1 >= limits.max_new or (tok == NEWLINE and t + 1 >= limits.min_new))
            keep = torch.tensor([not d for d in done])
            if not keep.any():
                break
            if not keep.all():
                # finished sequences leave the decode batch (continuous batching)
                rows = keep.nonzero().squeeze(1)
                active, new, cache = active[rows], new[rows], cache.select(rows)
                if history is not None:
                    history.select(rows)
            logits = self.model.decode(new, cache, self.cfg.kernel)
            path = self.cfg.path
            if path is not None and path.preempt_every and t + 1 == path.preempt_at:
                assert not moe, "recompute preemption is simulated for dense models only"
                logits = self.recompute(tokens, valid, out, active, cache, logits)
            if moe:  # the decode inputs' routes, row by row of the active batch
                for row, routes in zip(active.tolist(), self.model.routes(), strict=True):
                    trace[row].append(routes)
        self.routes = [np.concatenate(rows) for rows in trace] if moe else None
        return out

    def recompute(
        self,
        tokens: torch.Tensor,
        valid: torch.Tensor,
        out: list[tuple[list[int], list[float]]],
        active: torch.Tensor,
        cache: KVCache,
        logits: torch.Tensor,
    ) -> torch.Tensor:
        """Preemption by recompute (vLLM's default): every `preempt_every`'th row of the decode
        batch loses its KV blocks, and on resuming a prefill of its whole sequence (the prompt
        and the tokens generated so far) rebuilds them and gives its next logits."""
        assert self.cfg.path is not None
        rows = torch.arange(len(active)) % self.cfg.path.preempt_every == 0
        done = torch.tensor([out[int(r)][0] for r in active[rows]], dtype=torch.long)
        seqs = torch.cat([tokens[active[rows]], done], dim=1)
        seq_valid = torch.cat([valid[active[rows]], torch.ones_like(done, dtype=torch.bool)], 1)
        fresh_logits, fresh = self.model.prefill(seqs, seq_valid, cache.keys[0].shape[2])
        for old, new in zip(cache.keys + cache.values, fresh.keys + fresh.values, strict=True):
            old[rows] = new
        recomputed = torch.zeros_like(logits)
        recomputed[rows] = fresh_logits.to(logits.dtype)
        return torch.where(rows[:, None], recomputed, logits)

    def serve_stale_prefix(
        self, tokens: torch.Tensor, valid: torch.Tensor, lengths: list[int], cached: list[int]
    ) -> None:
        """Let the next prefill take the first `cached` tokens' K/V of each row from the stale
        prefix cache (the row's last token is always recomputed, as vLLM does)."""
        assert self.stale_model is not None and isinstance(self.model.hooks, FaultHooks)
        width = tokens.shape[1]
        _, stale = self.stale_model.prefill(tokens, valid, capacity=width)
        col = torch.arange(width)[None, :]
        offset = torch.tensor([width - n for n in lengths])[:, None]
        hits = torch.tensor([min(c, n - 1) for c, n in zip(cached, lengths, strict=True)])
        served = valid & (col - offset < hits[:, None])
        self.model.hooks.stale = (stale.keys, stale.values, served)


class WaveEngine(InferenceEngine):
    """An engine that admits at most `max_batch` requests at once (vLLM's max_num_seqs): a
    turn's requests are served in waves, so the decode batches are smaller."""

    def __init__(
        self,
        model_cfg: ModelConfig,
        state: dict[str, torch.Tensor],
        cfg: EngineConfig,
        stale_state: dict[str, torch.Tensor] | None = None,
        max_batch: int = 8,
    ) -> None:
        super().__init__(model_cfg, state, cfg, stale_state)
        self.max_batch = max_batch

    def generate(
        self,
        contexts: list[list[int]],
        limits: TurnLimits,
        gen: torch.Generator,
        cached: list[int] | None = None,
    ) -> list[tuple[list[int], list[float]]]:
        out: list[tuple[list[int], list[float]]] = []
        routes: list[np.ndarray] = []
        for start in range(0, len(contexts), self.max_batch):
            part = slice(start, start + self.max_batch)
            out += super().generate(contexts[part], limits, gen, cached[part] if cached else None)
            routes += self.routes or []
        self.routes = routes or None
        return out


TRAINER_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
"""The trainer's forward: fp32 (the corpora's), or bf16 as FSDP's mixed precision computes it
(its logits upcast to fp32 before the log-softmax, as verl and the others do)."""


class TrainerScorer:
    """Teacher-forced scoring of full sequences under the sampling temperature, in fp32 (or the
    ``dtype`` given: bf16, its logits upcast)."""

    def __init__(
        self,
        model_cfg: ModelConfig,
        state: dict[str, torch.Tensor],
        temperature: float,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        self.model = build_model(model_cfg, state, dtype)
        self.temperature = temperature
        # an MoE model's routes of the last score(), per sequence: int16 [len, layers, top_k]
        self.routes: list[np.ndarray] | None = None

    @torch.no_grad()
    def score(
        self, sequences: list[list[int]], chunk: int = 16, replay: list[np.ndarray] | None = None
    ) -> list[list[float]]:
        """Per sequence, logprob of token j at index j (index 0 is a dummy 0.0).

        `replay` (MoE): per sequence, expert ids [rows, layers, top_k] for its first positions
        that the trainer uses instead of its own choice (rollout routing replay, R3)."""
        result: list[list[float]] = []
        routes: list[np.ndarray] = []
        for start in range(0, len(sequences), chunk):
            part = sequences[start : start + chunk]
            length = max(len(s) for s in part)
            tokens = torch.zeros(len(part), length, dtype=torch.long)
            for i, seq in enumerate(part):
                tokens[i, : len(seq)] = torch.tensor(seq)  # right padding: causal, never attended
            if replay is not None:
                assert isinstance(self.model, MoELM)
                self.model.force(self._forced(replay[start : start + chunk], length))
            logp = torch.log_softmax(self.model(tokens).float() / self.temperature, dim=-1)
            picked = logp[:, :-1].gather(2, tokens[:, 1:, None]).squeeze(2)
            for i, seq in enumerate(part):
                result.append([0.0, *picked[i, : len(seq) - 1].tolist()])
            if isinstance(self.model, MoELM):
                self.model.force(None)
                chosen = self.model.routes()
                routes.extend(chosen[i, : len(seq)] for i, seq in enumerate(part))
        self.routes = routes if isinstance(self.model, MoELM) else None
        return result

    def _forced(self, routes: list[np.ndarray], length: int) -> torch.Tensor:
        assert isinstance(self.model, MoELM)
        cfg = self.model.cfg
        shape = (len(routes), length, cfg.n_layers, cfg.top_k)
        forced = torch.full(shape, NO_ROUTE, dtype=torch.long)
        for i, rows in enumerate(routes):
            forced[i, : len(rows)] = torch.from_numpy(rows.astype(np.int64))
        return forced
