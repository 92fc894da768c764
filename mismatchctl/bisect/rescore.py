"""A sequence's token logprobs under a setting.

A sequence is its token ids (prompt, responses, tool responses) and the indices of the tokens to
score (the model tokens: never the first, which has nothing before it). Token ``i`` is scored by
the logits at ``i - 1``, made float32 and processed as the setting's sampler would (temperature,
top-p, top-k), then log-softmaxed: the logprob an engine reports for a sampled token."""

from __future__ import annotations

import copy
import inspect
from dataclasses import dataclass
from typing import Any

import numpy as np

from mismatchctl.bisect.kvcache import Rounder, quantizing_cache
from mismatchctl.bisect.model import Loaded, torch_module
from mismatchctl.bisect.settings import Setting


@dataclass
class Sequence:
    """``ids``: the whole sequence's token ids; ``prompt``: tokens before the first scored one
    (what an engine prefills); ``targets``: indices of the tokens to score, ascending."""

    ids: np.ndarray
    prompt: int
    targets: np.ndarray


class Variant:
    """The loaded model as a setting runs it: a copy in the setting's dtype (the float32 model
    itself when it is one), the lm_head and final norm kept in float32 when asked, the
    attention implementation the setting names."""

    def __init__(self, loaded: Loaded, setting: Setting) -> None:
        torch = torch_module()
        self.loaded, self.setting = loaded, setting
        module = loaded.module
        if setting.dtype != "float32" or setting.attention is not None:
            module = copy.deepcopy(module).to(getattr(torch, setting.dtype))
        if setting.attention is not None:
            module.set_attn_implementation(setting.attention)
        if setting.lm_head_fp32:
            _lm_head_fp32(module)
        self.module = module

    @property
    def device(self) -> str:
        return self.loaded.device

    def forward(self, ids: Any, **kwargs: Any) -> tuple[Any, Any]:
        """(logits, the transformers output: None for a factory's module)."""
        if not self.loaded.hf:
            out = self.module(ids)
            return getattr(out, "logits", out), None
        out = self.module(input_ids=ids, **kwargs)
        return out.logits, out


def attention_of(module: Any) -> str | None:
    """The attention implementation transformers runs a model with (None: not a transformers
    model, or one that does not say)."""
    return getattr(getattr(module, "config", None), "_attn_implementation", None)


def _lm_head_fp32(module: Any) -> None:
    """The final norm and the output embeddings in float32; the lm_head's input cast up."""
    torch = torch_module()
    head = module.get_output_embeddings()
    head.to(torch.float32)
    head.register_forward_pre_hook(lambda _m, args: tuple(a.float() for a in args))
    norm = getattr(module.get_decoder(), "norm", None)
    if norm is not None:
        norm.to(torch.float32)


def logprobs(variant: Variant, seq: Sequence) -> np.ndarray:
    """The targets' logprobs (float64) of one sequence alone."""
    torch = torch_module()
    if variant.setting.incremental:
        return engine_logprobs(variant, [seq])[0]
    with torch.inference_mode():
        ids = torch.as_tensor(seq.ids[None], device=variant.device)
        logits = variant.forward(ids)[0][0]
        rows = logits[torch.as_tensor(seq.targets - 1, device=variant.device)]
        return _score(rows, seq.ids[seq.targets], variant.setting)


def batch_logprobs(variant: Variant, batch: list[Sequence], side: str = "left") -> list[np.ndarray]:
    """Each sequence's targets' logprobs, the sequences padded on ``side`` into one batch (an
    attention mask, positions counted from each one's first token)."""
    torch = torch_module()
    width = max(len(s.ids) for s in batch)
    ids = np.zeros((len(batch), width), dtype=np.int64)
    mask = np.zeros((len(batch), width), dtype=np.int64)
    offset = [width - len(s.ids) if side == "left" else 0 for s in batch]
    for b, s in enumerate(batch):
        ids[b, offset[b] : offset[b] + len(s.ids)] = s.ids
        mask[b, offset[b] : offset[b] + len(s.ids)] = 1
    with torch.inference_mode():
        t_mask = torch.as_tensor(mask, device=variant.device)
        positions = (t_mask.cumsum(-1) - 1).clamp(min=0)
        logits = variant.forward(torch.as_tensor(ids, device=variant.device),
                                 attention_mask=t_mask, position_ids=positions)[0]  # fmt: skip
        out = []
        for b, s in enumerate(batch):
            rows = logits[b][torch.as_tensor(offset[b] + s.targets - 1, device=variant.device)]
            out.append(_score(rows, s.ids[s.targets], variant.setting))
    return out


def engine_logprobs(variant: Variant, batch: list[Sequence]) -> list[np.ndarray]:
    """Each sequence's targets' logprobs through the engine's path, the sequences decoded
    together as an engine's batch: the prompts prefilled (left-padded; in chunks with the
    setting's ``chunk``), then one token of each at a time through the KV cache (a finished
    sequence's row is fed token 0, never read). Rows are scored as they come: one row of logits
    per sequence alive at a time."""
    torch = torch_module()
    with torch.inference_mode():
        if variant.loaded.hf:
            return _hf_engine(variant, batch)
        return _stepwise(variant, batch)


def stepwise_logprobs(variant: Variant, batch: list[Sequence]) -> list[np.ndarray]:
    """:func:`engine_logprobs` (a factory module's engine path, or a transformers model's)."""
    return engine_logprobs(variant, batch)


def _stepwise(variant: Variant, batch: list[Sequence]) -> list[np.ndarray]:
    torch = torch_module()
    kv = Rounder(variant.setting.kv) if variant.setting.kv is not None else None
    width = max(s.prompt for s in batch)
    ids = np.zeros((len(batch), width), dtype=np.int64)
    for b, s in enumerate(batch):
        ids[b, width - s.prompt :] = s.ids[: s.prompt]
    t_ids = torch.as_tensor(ids, device=variant.device)
    logits, cache = variant.module.prefill(t_ids, kv, _valid(batch, width, variant.device))

    def step(tokens: Any, k: int) -> Any:
        nonlocal cache
        logits, cache = variant.module.decode(tokens, cache, kv)
        return logits

    return _decode(variant, batch, logits, step)


def _decode(variant: Variant, batch: list[Sequence], logits: Any, step: Any) -> list[np.ndarray]:
    """From the prefill's last logits, one token of each sequence at a time (``step(tokens,
    k)``: the logits after feeding each row's token ``prompt + k``), scoring the rows as they
    come."""
    torch = torch_module()
    out = [np.empty(len(s.targets)) for s in batch]
    steps = max(int(s.targets[-1]) - s.prompt for s in batch)
    for k in range(steps + 1):  # logits row k predicts token prompt + k of each sequence
        _take(logits, batch, k, out, variant.setting)
        if k == steps:
            break
        nxt = [int(s.ids[s.prompt + k]) if s.prompt + k < len(s.ids) else 0 for s in batch]
        logits = step(torch.as_tensor(nxt, device=variant.device), k)
    return out


def _hf_engine(variant: Variant, batch: list[Sequence]) -> list[np.ndarray]:
    """A transformers model's engine path: the prompts laid out in blocks of ``chunk`` columns
    (each prompt's chunks from its own first token, its last chunk ending at the last column;
    without a chunk one block: left padding), prefilled a block at a time into the cache
    (stored as the setting says), then decoded; padding is masked wherever it falls."""
    torch = torch_module()
    ids, valid, pos = _prompt_blocks(batch, variant.setting.chunk)
    dev = variant.device
    t_ids, mask = torch.as_tensor(ids, device=dev), torch.as_tensor(valid, device=dev)
    t_pos = torch.as_tensor(pos, device=dev)
    # the cache is updated in place: the same object is handed to every forward
    cache = {_cache_keyword(variant.module): quantizing_cache(variant.module, variant.setting.kv)}
    chunk = variant.setting.chunk or ids.shape[1]
    for lo in range(0, ids.shape[1], chunk):
        logits, _ = variant.forward(t_ids[:, lo : lo + chunk], attention_mask=mask[:, : lo + chunk],
                                    position_ids=t_pos[:, lo : lo + chunk], use_cache=True,
                                    **cache)  # fmt: skip
    prompts = torch.as_tensor([s.prompt for s in batch], device=dev)[:, None]
    ones = torch.ones((len(batch), 1), dtype=mask.dtype, device=dev)

    def step(tokens: Any, k: int) -> Any:
        nonlocal mask
        mask = torch.cat([mask, ones], dim=1)
        logits, _ = variant.forward(tokens[:, None], attention_mask=mask,
                                    position_ids=prompts + k, use_cache=True, **cache)  # fmt: skip
        return logits[:, -1]

    return _decode(variant, batch, logits[:, -1], step)


def _prompt_blocks(
    batch: list[Sequence], chunk: int | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ids, valid, positions) ``[batch, blocks x chunk]`` of the prompts in chunks: chunk ``j``
    of a prompt of ``n`` chunks in block ``blocks - n + j``, at the block's end."""
    size = chunk or max(s.prompt for s in batch)
    blocks = max(-(-s.prompt // size) for s in batch)
    ids = np.zeros((len(batch), blocks * size), dtype=np.int64)
    valid, pos = np.zeros_like(ids), np.zeros_like(ids)
    for b, s in enumerate(batch):
        n = -(-s.prompt // size)
        for j in range(n):
            lo, hi = j * size, min((j + 1) * size, s.prompt)
            end = (blocks - n + j + 1) * size
            ids[b, end - (hi - lo) : end] = s.ids[lo:hi]
            valid[b, end - (hi - lo) : end] = 1
            pos[b, end - (hi - lo) : end] = np.arange(lo, hi)
    return ids, valid, pos


def _valid(batch: list[Sequence], width: int, device: str) -> Any:
    torch = torch_module()
    valid = torch.zeros((len(batch), width), dtype=torch.bool, device=device)
    for b, s in enumerate(batch):
        valid[b, width - s.prompt :] = True
    return valid


def _take(logits: Any, batch: list[Sequence], k: int, out: list[np.ndarray], setting: Setting):
    """Score, in one call, the rows of ``logits`` whose sequence has a target at ``prompt + k``
    (the targets ascend: each sequence's next unscored target is where its scores end)."""
    torch = torch_module()
    rows, tokens, where = [], [], []
    for b, s in enumerate(batch):
        at = int(np.searchsorted(s.targets, s.prompt + k))
        if at < len(s.targets) and s.targets[at] == s.prompt + k:
            rows.append(b)
            tokens.append(s.ids[s.prompt + k])
            where.append(at)
    if not rows:
        return
    picked = _score(logits[torch.as_tensor(rows, device=logits.device)], np.asarray(tokens),
                    setting)  # fmt: skip
    for b, at, x in zip(rows, where, picked, strict=True):
        out[b][at] = x


def _cache_keyword(module: Any) -> str:
    """``cache`` (transformers 5.x) or ``past_key_values`` (before, and deprecated since)."""
    return "cache" if "cache" in inspect.signature(module.forward).parameters else "past_key_values"


def _score(rows: Any, tokens: np.ndarray, setting: Setting) -> np.ndarray:
    """The logprob of each token under its row of logits, processed as the sampler would."""
    torch = torch_module()
    x = rows.float()
    if setting.temperature is not None:
        x = x / setting.temperature
    lp = torch.log_softmax(x, dim=-1)
    index = torch.as_tensor(tokens, device=lp.device)[:, None]
    picked = lp.gather(1, index)[:, 0]
    if setting.top_p is not None:
        picked = picked - _top_p_mass(lp, index, setting.top_p)
    if setting.top_k is not None:
        picked = picked - _top_k_mass(lp, index, setting.top_k)
    return picked.double().cpu().numpy()


def _top_p_mass(lp: Any, index: Any, top_p: float) -> Any:
    """log of the probability kept by top-p (the most probable tokens until their mass reaches
    ``top_p``; the token itself always kept: it was sampled), to renormalise by."""
    torch = torch_module()
    sorted_lp, order = lp.sort(dim=-1, descending=True)
    p = sorted_lp.exp()
    before = p.cumsum(-1) - p  # the mass of the tokens more probable than each
    keep = before < top_p
    keep_token = torch.zeros_like(keep).scatter(1, index, True).gather(1, order)
    kept = torch.where(keep | keep_token, sorted_lp, torch.full_like(sorted_lp, -torch.inf))
    return torch.logsumexp(kept, dim=-1)


def _top_k_mass(lp: Any, index: Any, top_k: int) -> Any:
    """log of the probability kept by top-k (the ``top_k`` most probable tokens; the token
    itself always kept: it was sampled), to renormalise by."""
    torch = torch_module()
    k = min(top_k, lp.shape[-1])
    top = lp.topk(k, dim=-1).values
    own = lp.gather(1, index)
    inside = own >= top[:, -1:]  # a tie at the k-th value counts as kept
    extra = torch.where(inside, torch.full_like(own, -torch.inf), own)
    return torch.logsumexp(torch.cat([top, extra], dim=-1), dim=-1)
