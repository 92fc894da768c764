"""A small byte-level causal transformer and its two numeric paths.

* the **trainer path** (`TinyLM.forward`): one full teacher-forced forward pass, fp32, causal mask;
* the **inference path** (`TinyLM.prefill` / `TinyLM.decode`): run on a bf16 copy of the weights
  with a preallocated KV cache, left-padded batches and incremental decoding.

Both paths share the same module so the only differences are the numeric ones (dtype, KV cache,
attention kernel), as in a real RL stack.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class ModelConfig:
    vocab: int = 256  # raw bytes
    d_model: int = 128
    n_layers: int = 4
    n_heads: int = 4
    d_ff: int = 512
    max_len: int = 320  # training context; rollouts are built to never exceed it

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


@dataclass(frozen=True)
class AttentionKernel:
    """Which decode attention kernel the inference engine uses.

    `split_kv` mimics flash-decoding: the KV sequence is cut into splits of `split_size`, each split
    is reduced on its own (fp32 accumulators, exp2 like FlashAttention), and the partial results are
    merged with their log-sum-exps. As in flash-decoding's heuristic, the split path is taken only
    when the decode batch is too small to keep the device busy: fewer than
    `min_active_for_single_pass` active sequences. `merge_bug` injects an off-by-one in the merge:
    each split's partial output is rescaled with the log-sum-exp of the previous split. Only the
    decode batches that take the split path (late in a turn, when few sequences are still
    generating) are wrong, so only some steps are.
    """

    split_kv: bool = False
    split_size: int = 64
    min_active_for_single_pass: int = 10  # 10 sequences x 4 heads = 40 pretend compute units
    merge_bug: bool = False
    # flash-decoding splits only long KV sequences: below this KV length the single pass is used
    min_kv_for_split: int = 0
    # the combine rescales each split by its running max alone, forgetting its row sum
    merge_drops_rowsum: bool = False


ROPE_THETA = 10000.0  # the rotary base the model was trained with


def rope_tables(cfg: ModelConfig, theta: float = ROPE_THETA) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin tables [max_len, head_dim/2] for rotary position embeddings (fp32)."""
    half = cfg.head_dim // 2
    inv_freq = 1.0 / (theta ** (torch.arange(half, dtype=torch.float64) / half))
    angles = torch.arange(cfg.max_len, dtype=torch.float64)[:, None] * inv_freq[None, :]
    return torch.cos(angles).float(), torch.sin(angles).float()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate x [B, H, T, D] with per-token tables cos/sin [B, 1, T, D/2] (same dtype as x)."""
    x1, x2 = x[..., ::2], x[..., 1::2]
    out = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
    return out.flatten(-2)


def dense_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor
) -> torch.Tensor:
    """Plain softmax attention in the inputs' dtype; `allowed` broadcasts to the scores."""
    scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))
    scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def split_kv_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    key_valid: torch.Tensor,
    kernel: AttentionKernel,
) -> torch.Tensor:
    """Flash-decoding attention for one query token: q [B,H,1,D], k/v [B,H,L,D], key_valid [B,L].

    Partial results are accumulated in fp32 (like the real kernels) and cast back at the end.
    """
    bsz, heads, length, dim = k.shape
    size = kernel.split_size
    n_splits = -(-length // size)
    pad = n_splits * size - length
    log2e = 1.0 / math.log(2.0)
    # scores in base 2, as kernels that use exp2 do
    s2 = (q.float() @ k.float().transpose(-1, -2)).squeeze(2) * (log2e / math.sqrt(dim))
    valid = F.pad(key_valid, (0, pad), value=False)[:, None, :].expand(bsz, heads, -1)
    s2 = F.pad(s2, (0, pad), value=float("-inf")).masked_fill(~valid, float("-inf"))
    s2 = s2.view(bsz, heads, n_splits, size)
    vf = F.pad(v.float(), (0, 0, 0, pad)).view(bsz, heads, n_splits, size, dim)
    m = s2.amax(dim=-1, keepdim=True)  # -inf for a fully masked split (left padding)
    m_safe = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    p = torch.exp2(s2 - m_safe)
    l_sum = p.sum(dim=-1)  # [B,H,S]
    o = (p.unsqueeze(-2) @ vf).squeeze(-2) / l_sum.clamp_min(1e-30).unsqueeze(-1)  # [B,H,S,D]
    lse2 = torch.where(l_sum > 0, m.squeeze(-1) + torch.log2(l_sum.clamp_min(1e-30)), float("-inf"))
    if kernel.merge_drops_rowsum:
        # the bug: the combine uses the split's max where it needs max + log2(row sum)
        lse2 = torch.where(l_sum > 0, m.squeeze(-1), float("-inf"))
    w = torch.exp2(lse2 - lse2.amax(dim=-1, keepdim=True))  # 0 for fully masked splits
    if kernel.merge_bug:
        # the bug: an off-by-one in the combine loop rescales split i with the LSE of split i-1
        w = w.roll(1, dims=-1)
    out = (w.unsqueeze(-1) * o).sum(dim=-2) / w.sum(dim=-1, keepdim=True)
    return out.unsqueeze(2).to(q.dtype)


def split_kv_rows(kernel: AttentionKernel, kv_length: torch.Tensor) -> torch.Tensor | None:
    """Which decode rows take the split-KV path: None (no row: the single pass for the batch),
    or [B] bool. Flash-decoding style: only when few sequences are active; with
    `min_kv_for_split`, only the rows whose own KV length (keys incl. the new one) reaches it."""
    if not kernel.split_kv or kv_length.shape[0] >= kernel.min_active_for_single_pass:
        return None
    return kv_length >= kernel.min_kv_for_split


def decode_attention(
    q: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    key_valid: torch.Tensor,
    kernel: AttentionKernel,
    split_rows: torch.Tensor | None,
) -> torch.Tensor:
    """One decode step's attention: the single pass, the split-KV kernel, or per row one of
    them (`split_rows`)."""
    dense = None
    if split_rows is None or not bool(split_rows.all()):
        dense = dense_attention(q, keys, values, key_valid[:, None, None, :])
    if split_rows is None or not bool(split_rows.any()):
        assert dense is not None
        return dense
    split = split_kv_attention(q, keys, values, key_valid, kernel)
    if dense is None:
        return split
    return torch.where(split_rows[:, None, None, None], split, dense)


class PathHooks:
    """Where an inference engine's numeric path departs from the plain one (gen/faults.py
    overrides these). Each method here is the plain path; a model without hooks skips them."""

    def prefill_mask(self, allowed: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """The prefill's attention mask [B, 1, T, T] (True: the query may see the key)."""
        return allowed

    def prefill_kv(
        self, layer: int, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The prefill's K/V [B, H, T, D] as attended and cached (e.g. reused from a cache)."""
        return k, v

    def prefill_attention(
        self,
        layer: int,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        allowed: torch.Tensor,
        positions: torch.Tensor,
    ) -> torch.Tensor:
        """The prefill's attention; `positions` [B, T] are the rows' position ids."""
        return dense_attention(q, k, v, allowed)

    def cache_kv(
        self, layer: int, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """What the KV cache stores of freshly computed K/V at `positions` [B, T]."""
        return k, v

    def decode_rope(
        self, model: TinyLM, positions: torch.Tensor, dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The rotary tables of the decode tokens at `positions` [B, 1]."""
        return model._rope(positions, dtype)

    def decode_keys(self, key_valid: torch.Tensor) -> torch.Tensor:
        """The keys [B, L] a decode token may attend to (the cache's valid slots, itself last)."""
        return key_valid


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.build_ffn(cfg)

    def build_ffn(self, cfg: ModelConfig) -> None:
        self.fc1 = nn.Linear(cfg.d_model, cfg.d_ff)
        self.fc2 = nn.Linear(cfg.d_ff, cfg.d_model)

    def qkv_heads(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        bsz, length, _ = x.shape
        qkv = self.qkv(self.ln1(x)).view(bsz, length, 3, self.cfg.n_heads, self.cfg.head_dim)
        q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v

    def finish(self, x: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
        bsz, _, length, _ = attn.shape
        x = x + self.proj(attn.transpose(1, 2).reshape(bsz, length, self.cfg.d_model))
        return x + self.ffn(self.ln2(x))

    def ffn(self, h: torch.Tensor) -> torch.Tensor:
        """The feed-forward part on the normalised input (a mixture of experts in gen/moe.py)."""
        return self.fc2(F.gelu(self.fc1(h)))


@dataclass
class KVCache:
    """Preallocated per-layer K/V [B, H, capacity, D]; all rows share `length` (left padding)."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    key_valid: torch.Tensor  # [B, capacity] bool
    positions: torch.Tensor  # [B] position id of the next token
    length: int

    def select(self, rows: torch.Tensor) -> KVCache:
        """Keep only some batch rows (finished sequences leave the decode batch)."""
        return KVCache(
            keys=[k.index_select(0, rows) for k in self.keys],
            values=[v.index_select(0, rows) for v in self.values],
            key_valid=self.key_valid.index_select(0, rows),
            positions=self.positions.index_select(0, rows),
            length=self.length,
        )


class TinyLM(nn.Module):
    block_class: type[Block] = Block  # gen/moe.py: blocks with a mixture-of-experts feed-forward

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab, cfg.d_model)
        self.blocks = nn.ModuleList(self.block_class(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab, bias=False)
        cos, sin = rope_tables(cfg)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.lm_head_fp32: torch.Tensor | None = None  # set by the engine for an fp32 lm_head
        self.kv_fp32 = False  # set by the engine: fp32 KV cache and fp32 attention
        self.hooks: PathHooks | None = None  # set by the engine: a departing numeric path

    def _rope(
        self, positions: torch.Tensor, dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor]:
        cos = self.rope_cos[positions].unsqueeze(1).to(dtype)
        sin = self.rope_sin[positions].unsqueeze(1).to(dtype)
        return cos, sin

    def head(self, x: torch.Tensor) -> torch.Tensor:
        """lm_head in the weights' dtype, or in fp32 if an fp32 copy of the head was attached."""
        x = self.ln_f(x)
        if self.lm_head_fp32 is not None:
            return x.float() @ self.lm_head_fp32.t()
        return self.lm_head(x)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Teacher-forced forward (training, trainer path): logits [B, T, V]; right padding ok."""
        length = tokens.shape[1]
        positions = torch.arange(length).expand_as(tokens)
        dtype = self.tok_emb.weight.dtype
        cos, sin = self._rope(positions, dtype)
        x = self.tok_emb(tokens)
        for block in self.blocks:
            q, k, v = block.qkv_heads(x, cos, sin)
            # fused causal kernel, as a trainer would use (flash attention)
            x = block.finish(x, F.scaled_dot_product_attention(q, k, v, is_causal=True))
        return self.head(x)

    def prefill(
        self, tokens: torch.Tensor, valid: torch.Tensor, capacity: int
    ) -> tuple[torch.Tensor, KVCache]:
        """Left-padded prompt batch -> logits of the last position [B, V] and a filled KV cache."""
        bsz, length = tokens.shape
        dtype = self.tok_emb.weight.dtype
        positions = (valid.long().cumsum(dim=1) - 1).clamp_min(0)
        cos, sin = self._rope(positions, dtype)
        causal = torch.ones(length, length, dtype=torch.bool).tril()
        # pad queries see only themselves so their softmax row is defined; they are never used
        allowed = (causal & valid[:, None, None, :]) | torch.eye(length, dtype=torch.bool)
        hooks = self.hooks
        if hooks is not None:
            allowed = hooks.prefill_mask(allowed, valid)
        shape = (bsz, self.cfg.n_heads, capacity, self.cfg.head_dim)
        kv_dtype = torch.float32 if self.kv_fp32 else dtype
        keys = [torch.zeros(shape, dtype=kv_dtype) for _ in self.blocks]
        values = [torch.zeros(shape, dtype=kv_dtype) for _ in self.blocks]
        x = self.tok_emb(tokens)
        for i, block in enumerate(self.blocks):
            q, k, v = block.qkv_heads(x, cos, sin)
            stored = (k, v)
            if hooks is not None:
                k, v = hooks.prefill_kv(i, k, v)
                stored = hooks.cache_kv(i, k, v, positions)
            keys[i][:, :, :length] = stored[0]
            values[i][:, :, :length] = stored[1]
            if self.kv_fp32:
                q, k, v = q.float(), k.float(), v.float()
            if hooks is None:
                attn = dense_attention(q, k, v, allowed)
            else:
                attn = hooks.prefill_attention(i, q, k, v, allowed, positions)
            x = block.finish(x, attn.to(dtype))
        key_valid = torch.zeros(bsz, capacity, dtype=torch.bool)
        key_valid[:, :length] = valid
        cache = KVCache(keys, values, key_valid, positions[:, -1] + 1, length)
        return self.head(x[:, -1:, :]).squeeze(1), cache

    def decode(self, token: torch.Tensor, cache: KVCache, kernel: AttentionKernel) -> torch.Tensor:
        """One incremental decoding step for the batch rows in `cache`; returns logits [B, V]."""
        dtype = self.tok_emb.weight.dtype
        hooks = self.hooks
        if hooks is None:
            cos, sin = self._rope(cache.positions[:, None], dtype)
        else:
            cos, sin = hooks.decode_rope(self, cache.positions[:, None], dtype)
        pos = cache.length
        cache.key_valid[:, pos] = True
        split_rows = split_kv_rows(kernel, cache.positions + 1)
        key_valid = cache.key_valid[:, : pos + 1]
        if hooks is not None:
            key_valid = hooks.decode_keys(key_valid)
        x = self.tok_emb(token[:, None])
        for i, block in enumerate(self.blocks):
            q, k, v = block.qkv_heads(x, cos, sin)
            if hooks is not None:
                k, v = hooks.cache_kv(i, k, v, cache.positions[:, None])
            cache.keys[i][:, :, pos : pos + 1] = k
            cache.values[i][:, :, pos : pos + 1] = v
            keys, values = cache.keys[i][:, :, : pos + 1], cache.values[i][:, :, : pos + 1]
            if self.kv_fp32:
                q = q.float()
            attn = decode_attention(q, keys, values, key_valid, kernel, split_rows)
            x = block.finish(x, attn.to(dtype))
        cache.length = pos + 1
        cache.positions = cache.positions + 1
        return self.head(x).squeeze(1)
