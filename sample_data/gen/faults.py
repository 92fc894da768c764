"""Numeric faults of the inference path, each where it happens in a real engine.

`NumericPath` names them; `install_path` puts them into an engine's (bf16) copy of the model:
the KV cache's storage (fp8), chunked prefill, a stale prefix cache, the prefill's last position,
the decode path's rotary positions (gen/model.py's `PathHooks`), and the kernels of the linear
layers (split-K reductions, tensor-parallel all-reduce, fp8 weights), and an MoE router's
precision; the model's own arithmetic (rotary base, softmax scale, norms, MLP quantization, a
sliding window: gen/model_faults.py) and preemption by recompute (gen/engine.py). The defaults
are the plain path.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from gen.model import PathHooks, TinyLM, dense_attention
from gen.model_faults import install_model_faults, rope_inv_freq, window_keys, window_mask
from gen.moe import MoEBlock

FP8 = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}


@dataclass(frozen=True)
class NumericPath:
    kv_cache: str = ""  # "e4m3" / "e5m2": the KV cache stores fp8 (per-tensor scale 1.0)
    kv_cache_values_only: bool = False  # only V is stored in fp8
    chunk: int = 0  # chunked prefill: chunk size in positions (0: one pass)
    chunk_fault: str = ""  # "fp8": earlier chunks' KV as e4m3; "merge": combine forgets row
    # sums; "swap": the combine swaps the two parts' log-sum-exps
    prefix_cache: bool = False  # cached prompt KV computed with the engine's stale weights
    prefill_last: str = ""  # "pad_key": the last prompt position also sees a padding slot;
    # "no_self": it does not see its own key (the prefill's last position, off by one)
    decode_rope: str = ""  # "bf16": decode angles pos x freq in bf16; "shift": position - 1
    tp: int = 1  # row-parallel layers (proj, fc2) in tp shards, partial sums added in bf16
    batch_splits: int = 0  # decode batches below `batch_below`: split-K in the activations'
    batch_below: int = 8  # dtype with batch_splits // batch size splits
    batch_drop_tail: bool = False  # ... whose kernel never reads the K % splits last inputs
    lm_head: str = ""  # "fp8": W8A8 e4m3 lm_head; "bf16acc": split-K 16 summed in bf16
    weights_fp8: bool = False  # every linear layer's weights rounded to e4m3 (per channel)
    router: str = ""  # MoE: "e4m3" router logits rounded to fp8 before the softmax
    # the model's own arithmetic (gen/model_faults.py)
    rope_theta: float = 0.0  # the engine's rotary base (0: the trainer's)
    attn_scale: float = 1.0  # the engine's softmax scale over the trainer's
    norm_eps: float = 0.0  # the engine's LayerNorm epsilon (0: the trainer's)
    norm_bf16: bool = False  # the engine's LayerNorms keep their statistics in bf16
    mlp_bits: int = 0  # the MLPs' weights int8 / int4 weight-only (per output channel)
    mlp_act_layer: int = 0  # the MLP layer whose fc2 input goes through e4m3 ...
    mlp_act_amax: float = 0.0  # ... with this static range (0: none); beyond it saturates
    window: int = 0  # sliding-window attention over this many slots (prefill and decode)
    preempt_at: int = 0  # at this decode step some rows are evicted and recomputed by a
    preempt_every: int = 0  # prefill: every this-many'th row of the decode batch (gen/engine.py)

    @property
    def hooked(self) -> bool:
        return bool(
            self.kv_cache
            or self.chunk
            or self.prefix_cache
            or self.prefill_last
            or self.decode_rope
            or self.window
        )


def fp8_round(
    x: torch.Tensor, kind: str = "e4m3", scale: torch.Tensor | float = 1.0
) -> torch.Tensor:
    """x through fp8 and back (x / scale cast with saturation, times scale), in x's dtype."""
    dtype = FP8[kind]
    top = torch.finfo(dtype).max
    y = (x.float() / scale).clamp(-top, top).to(dtype).float() * scale
    return y.to(x.dtype)


def channel_scale(w: torch.Tensor, kind: str = "e4m3") -> torch.Tensor:
    """Per-output-channel scale [out, 1] mapping each row's max magnitude to fp8's max."""
    amax = w.float().abs().amax(dim=-1, keepdim=True).clamp_min(1e-12)
    return amax / torch.finfo(FP8[kind]).max


class SplitKLinear(nn.Module):
    """A linear layer whose input dimension is cut into splits: each split's partial product
    (fp32 accumulation) is rounded to the activations' dtype and the partials are added in that
    dtype, in order, as a split-K GEMM with a low-precision workspace or a bf16 all-reduce of
    tensor-parallel shards does. `decode_below` > 0: only decode calls (one position) with fewer
    rows than that split, into `splits // rows` parts (a batch-size heuristic). `drop_tail`: the
    kernel's tail bug: splits of floor(K / parts) inputs, the K % parts last inputs never read."""

    def __init__(
        self, linear: nn.Linear, splits: int, decode_below: int = 0, drop_tail: bool = False
    ) -> None:
        super().__init__()
        self.weight = linear.weight
        self.bias = linear.bias
        self.splits = splits
        self.decode_below = decode_below
        self.drop_tail = drop_tail

    def n_splits(self, x: torch.Tensor) -> int:
        if not self.decode_below:
            return self.splits
        if x.dim() != 3 or x.shape[1] != 1 or x.shape[0] >= self.decode_below:
            return 1
        return max(1, self.splits // x.shape[0])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = self.n_splits(x)
        if n <= 1:
            return F.linear(x, self.weight, self.bias)
        k = x.shape[-1]
        n = min(n, k)
        size = k // n if self.drop_tail else -(-k // n)
        pad = n * size - k  # the last split is shorter: zero padding adds nothing to it
        xs = F.pad(x.float(), (0, pad)).unflatten(-1, (n, size))
        ws = F.pad(self.weight.float(), (0, pad)).view(self.weight.shape[0], n, size)
        partial = torch.einsum("...sc,osc->...so", xs, ws).to(x.dtype)
        out = partial[..., 0, :]
        for i in range(1, n):
            out = out + partial[..., i, :]  # each addition rounds to the workspace dtype
        return out if self.bias is None else out + self.bias


class Fp8ActLinear(nn.Module):
    """W8A8: the weight rounded to e4m3 per tensor, each input row quantized on the fly."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        w = linear.weight
        scale = w.float().abs().amax().clamp_min(1e-12) / torch.finfo(FP8["e4m3"]).max
        self.weight = nn.Parameter(fp8_round(w, "e4m3", scale), requires_grad=False)
        self.bias = linear.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        amax = x.float().abs().amax(dim=-1, keepdim=True).clamp_min(1e-12)
        xq = fp8_round(x, "e4m3", amax / torch.finfo(FP8["e4m3"]).max)
        return F.linear(xq, self.weight, self.bias)


class FaultHooks(PathHooks):
    """The KV-cache, prefill and decode faults of a `NumericPath`. For a stale prefix cache the
    engine sets `stale` before each prefill: per layer the stale K/V [B, H, T, D] and the
    positions [B, T] served from the cache."""

    def __init__(self, path: NumericPath, cfg_freqs: torch.Tensor) -> None:
        self.path = path
        self.inv_freq = cfg_freqs
        self.stale: tuple[list[torch.Tensor], list[torch.Tensor], torch.Tensor] | None = None

    def prefill_mask(self, allowed: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        if self.path.window:
            allowed = window_mask(allowed, self.path.window)
        kind = self.path.prefill_last
        if not kind:
            return allowed
        allowed = allowed.clone()
        if kind == "no_self":
            allowed[:, :, -1, -1] = False
        elif kind == "pad_all":  # the last query row ignores the padding mask
            allowed[:, :, -1, :] = True
        else:  # the slot just left of each row's first token, if the row is padded
            first = valid.long().argmax(dim=1)
            rows = (first > 0).nonzero().squeeze(1)
            allowed[rows, :, -1, first[rows] - 1] = True
        return allowed

    def prefill_kv(
        self, layer: int, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if self.stale is None:
            return k, v
        keys, values, cached = self.stale
        where = cached[:, None, :, None]
        return torch.where(where, keys[layer], k), torch.where(where, values[layer], v)

    def cache_kv(
        self, layer: int, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        path = self.path
        if path.kv_cache:
            kq = k if path.kv_cache_values_only else fp8_round(k, path.kv_cache)
            return kq, fp8_round(v, path.kv_cache)
        if path.chunk and path.chunk_fault == "fp8" and positions.shape[1] > 1:
            early = self.earlier_chunks(positions)[:, None, :, None]
            return torch.where(early, fp8_round(k), k), torch.where(early, fp8_round(v), v)
        return k, v

    def earlier_chunks(self, positions: torch.Tensor) -> torch.Tensor:
        """[B, T]: positions in a chunk before the row's last one (written by an earlier pass)."""
        chunk = positions // self.path.chunk
        return chunk < chunk.amax(dim=1, keepdim=True)

    def prefill_attention(
        self,
        layer: int,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        allowed: torch.Tensor,
        positions: torch.Tensor,
    ) -> torch.Tensor:
        if not self.path.chunk or not self.path.chunk_fault:
            return dense_attention(q, k, v, allowed)
        chunk = positions // self.path.chunk
        before = (chunk[:, None, :, None] > chunk[:, None, None, :]) & allowed  # key in an
        same = allowed & ~before  # earlier chunk than the query; else in the query's chunk
        if self.path.chunk_fault in ("merge", "swap"):
            return merged_chunks(q, k, v, before, same, self.path.chunk_fault)
        kq, vq = fp8_round(k), fp8_round(v)  # earlier chunks are read back from the fp8 cache
        scale = 1.0 / q.shape[-1] ** 0.5
        scores = torch.where(before, q @ kq.transpose(-1, -2), q @ k.transpose(-1, -2)) * scale
        p = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
        return (p * before) @ vq + (p * same) @ v

    def decode_keys(self, key_valid: torch.Tensor) -> torch.Tensor:
        return window_keys(key_valid, self.path.window) if self.path.window else key_valid

    def decode_rope(
        self, model: TinyLM, positions: torch.Tensor, dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if self.path.decode_rope == "shift":
            return model._rope((positions - 1).clamp_min(0), dtype)
        if self.path.decode_rope in ("bf16", "bf16_freq"):
            if self.path.decode_rope == "bf16":  # positions, frequencies and angles in bf16
                angles = positions.to(torch.bfloat16)[..., None] * self.inv_freq.bfloat16()
            else:  # only the frequencies stored in bf16 (a buffer cast with the weights)
                angles = positions.double()[..., None] * self.inv_freq.bfloat16().double()
            angles = angles.float()
            return torch.cos(angles).unsqueeze(1).to(dtype), torch.sin(angles).unsqueeze(1).to(
                dtype
            )
        return model._rope(positions, dtype)


def merged_chunks(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    before: torch.Tensor,
    same: torch.Tensor,
    bug: str = "",
) -> torch.Tensor:
    """Attention over the earlier chunks and over the query's own chunk, each on its own (fp32),
    merged by their log-sum-exps. `bug` "merge": the combine weights each part by its max score
    alone (its row sum forgotten); "swap": each part is weighted with the other's log-sum-exp."""
    scores = (q.float() @ k.float().transpose(-1, -2)) / q.shape[-1] ** 0.5
    parts, weights = [], []
    for mask in (before, same):
        s = scores.masked_fill(~mask, float("-inf"))
        m = s.amax(dim=-1, keepdim=True)
        m_safe = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        p = torch.exp(s - m_safe)
        total = p.sum(dim=-1, keepdim=True)
        parts.append((p @ v.float()) / total.clamp_min(1e-30))
        lse = m if bug == "merge" else m + torch.log(total.clamp_min(1e-30))
        weights.append(torch.where(total > 0, lse, torch.full_like(m, float("-inf"))))
    if bug == "swap":  # only where both parts exist: a lone part keeps its own weight
        both = torch.isfinite(weights[0]) & torch.isfinite(weights[1])
        weights = [
            torch.where(both, weights[1], weights[0]),
            torch.where(both, weights[0], weights[1]),
        ]
    top = torch.maximum(weights[0], weights[1])
    w = [torch.exp(x - top) for x in weights]
    out = (w[0] * parts[0] + w[1] * parts[1]) / (w[0] + w[1])
    return out.to(q.dtype)


def install_path(model: TinyLM, path: NumericPath) -> None:
    """Put the path's faults into the engine's copy of the model (in place)."""
    if path.hooked:
        model.hooks = FaultHooks(path, rope_inv_freq(model.cfg.head_dim, path.rope_theta))
    install_model_faults(model, path)
    for block in model.blocks:
        if path.weights_fp8:
            for lin in linears(block):
                lin.weight.data = fp8_round(lin.weight.data, "e4m3", channel_scale(lin.weight))
        if path.tp > 1:
            block.proj = SplitKLinear(block.proj, path.tp)
            if hasattr(block, "fc2"):
                block.fc2 = SplitKLinear(block.fc2, path.tp)
        if path.batch_splits:
            for name in ("qkv", "proj", "fc1", "fc2"):
                if hasattr(block, name):
                    lin = getattr(block, name)
                    split = SplitKLinear(
                        lin, path.batch_splits, path.batch_below, path.batch_drop_tail
                    )
                    setattr(block, name, split)
        if path.router and isinstance(block, MoEBlock):
            block.router_dtype = FP8[path.router]
    if path.weights_fp8:
        model.lm_head.weight.data = fp8_round(
            model.lm_head.weight.data, "e4m3", channel_scale(model.lm_head.weight)
        )
    if path.lm_head == "fp8":
        model.lm_head = Fp8ActLinear(model.lm_head)  # type: ignore[assignment]
    elif path.lm_head == "bf16acc":
        model.lm_head = SplitKLinear(model.lm_head, 16)  # type: ignore[assignment]


def linears(block: nn.Module) -> list[nn.Linear]:
    return [
        m
        for m in block.modules()
        if isinstance(m, nn.Linear) and m is not getattr(block, "router", None)
    ]
