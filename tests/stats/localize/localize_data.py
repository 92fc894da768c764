"""Synthetic token data with planted causes, for the localization tests.

Responses of ``mean_len`` tokens on average, after prompts of 64-1536 tokens, with 0-3 tool calls
(tool responses of 20-400 tokens occupy KV positions but are not model tokens). Rollout
logprobs come from a mixture: most tokens near p = 1, a share at moderate p, a tail of
low-probability tokens (twice as frequent after a tool response, as the studies found). The
trainer side carries heavy-tailed noise whose scale grows with -lr, like bf16 noise:
``r = sigma (0.02 + |lr|) t`` (Student-t with ``dof`` degrees of freedom, clipped to +-30), so
K3 is heavy-tailed and dominated by the low-probability tokens (with 5 degrees of freedom the
100 largest of 1M tokens carry about 15% of the mass; with 3 the share swings from 25% to 55%
between seeds, too unstable to plant a 2x cause in). A localized cause multiplies every
K3 of its region by ``magnitude`` exactly (each token's r moved, keeping its sign, to where
``expm1(r) - r`` is ``magnitude`` times larger: the heavy tail keeps its shape); a policy cause
scales the noise of every token:

- ``kv``: KV positions >= ``kv_min`` in ``fault_steps``;
- ``template``: the first 8 tokens of every turn after a tool response;
- ``gpu``: every token of gpu A100;
- ``later``: every token of the turns after a tool response;
- ``stale``: every token's noise x magnitude (excess everywhere, more for large |r|);
- ``improve``: every token's noise x magnitude (below 1);
- causes joined with ``+`` apply together.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np

from mismatchctl.stats.bins import LOG_EDGES, assign_bins, bin_label
from mismatchctl.stats.cube.cube import Cube
from mismatchctl.stats.cube.spec import CubeSpec, Dim

KV_BINS = 12  # log2 bins of the KV position: 0-127, 128-255, ..., 131072+
TPOS_BINS = 8  # bins of the position in the turn: 0-7, 8-15, 16-31, ..., 512+


@dataclass(frozen=True)
class Plan:
    cause: str = "healthy"
    magnitude: float = 1.0
    steps: int = 8
    seqs_per_step: int = 256
    mean_len: int = 400
    sigma: float = 0.008
    dof: int = 5
    seed: int = 0
    fault_steps: tuple[int, ...] = (2, 6)
    kv_min: int = 1024
    tags: bool = True


class Tokens(NamedTuple):
    lr: np.ndarray
    lt: np.ndarray
    seq: np.ndarray
    tok: np.ndarray
    seqc: np.ndarray
    region: dict[str, np.ndarray]  # each planted cause's per-token mask


def spec(plan: Plan) -> CubeSpec:
    kv_labels = (
        "0-127",
        *[f"{64 << k}-{(128 << k) - 1}" for k in range(1, KV_BINS - 1)],
        "131072+",
    )
    tpos_labels = ("0-7", *[f"{4 << k}-{(8 << k) - 1}" for k in range(1, TPOS_BINS - 1)], "512+")
    seq_dims = [
        Dim("step", plan.steps),
        Dim("gpu", 2, ("H20", "A100"), ordered=False),
        Dim("length", 6, (*[f"{64 << k}-{(128 << k) - 1}" for k in range(5)], "2048+")),
        Dim("order", 8),
    ]
    if plan.tags:
        seq_dims.append(Dim("tag:dataset", 3, ("math", "code", "chat"), ordered=False))
    return CubeSpec(
        token_dims=(
            Dim("turn", 4, ("0", "1", "2", "3+")),
            Dim("turn_kind", 2, ("first", "later"), function_of="turn", function_map=(0, 1, 1, 1)),
            Dim("bin", len(LOG_EDGES) - 1, tuple(bin_label(LOG_EDGES, k) for k in range(12))),
            Dim("kv_position", KV_BINS, kv_labels),
            Dim("turn_position", TPOS_BINS, tpos_labels),
        ),
        seq_dims=tuple(seq_dims),
    )


def generate(plan: Plan) -> Tokens:
    rng = np.random.default_rng(plan.seed)
    n_seq = plan.steps * plan.seqs_per_step
    lengths = rng.integers(plan.mean_len // 4, 2 * plan.mean_len, n_seq)
    seq = np.repeat(np.arange(n_seq), lengths)
    starts = np.r_[0, np.cumsum(lengths)[:-1]]
    pos = np.arange(len(seq)) - starts[seq]
    cuts = np.sort(rng.random((n_seq, 3)) * lengths[:, None], axis=1).astype(np.int64)
    calls = rng.choice(4, n_seq, p=[0.3, 0.3, 0.25, 0.15])
    cuts = np.where(np.arange(3)[None, :] < calls[:, None], cuts, np.iinfo(np.int64).max)
    cuts = np.sort(cuts, axis=1)
    turn = (pos[:, None] >= cuts[seq]).sum(axis=1)
    tool = rng.integers(20, 400, (n_seq, 3))
    tool_before = np.cumsum(np.where(np.isin(cuts, [np.iinfo(np.int64).max]), 0, tool), axis=1)
    turn_start = np.where(turn > 0, np.take_along_axis(cuts[seq], np.maximum(turn - 1, 0)[:, None], 1)[:, 0], 0)  # fmt: skip
    tpos = pos - turn_start
    shift = np.where(turn > 0, np.take_along_axis(tool_before[seq], np.maximum(turn - 1, 0)[:, None], 1)[:, 0], 0)  # fmt: skip
    kv = rng.integers(64, 1536, n_seq)[seq] + pos + shift
    lr = _rollout(rng, turn)
    step = np.repeat(np.arange(plan.steps), plan.seqs_per_step)
    gpu = rng.integers(0, 2, n_seq)
    region = _regions(plan, kv, step[seq], turn, tpos, gpu[seq])
    causes = plan.cause.split("+")
    scale = plan.sigma * (plan.magnitude if {"stale", "improve"} & set(causes) else 1.0)
    r = scale * (0.02 + np.abs(lr)) * np.clip(rng.standard_t(plan.dof, len(seq)), -30, 30)
    for cause in causes:
        if cause in region:
            r[region[cause]] = scaled_k3(r[region[cause]], plan.magnitude)
    lt = lr + r
    tok = np.column_stack([
        np.minimum(turn, 3), turn > 0, assign_bins(np.exp(lr), LOG_EDGES),
        np.clip(np.log2(np.maximum(kv, 1)).astype(np.int64) - 6, 0, KV_BINS - 1),
        np.minimum(np.maximum(np.log2(np.maximum(tpos, 1)).astype(np.int64) - 2, 0), TPOS_BINS - 1),
    ]).astype(np.int16)  # fmt: skip
    order = np.tile(np.arange(plan.seqs_per_step) * 8 // plan.seqs_per_step, plan.steps)
    cols = [step, gpu, np.clip(np.log2(lengths).astype(np.int64) - 6, 0, 5), order]
    if plan.tags:
        cols.append(rng.integers(0, 3, n_seq))
    return Tokens(lr, lt, seq, tok, np.column_stack(cols), region)


def _rollout(rng: np.random.Generator, turn: np.ndarray) -> np.ndarray:
    n = len(turn)
    u = rng.random(n)
    tail = np.where(turn > 0, 0.10, 0.05)
    lr = -rng.exponential(0.02, n)
    mid = (u >= 0.72) & (u < 1 - tail)
    low = u >= 1 - tail
    lr[mid] = -rng.exponential(0.6, int(mid.sum()))
    lr[low] = -np.minimum(rng.exponential(5.0, int(low.sum())), 40.0)
    return lr


def _regions(
    plan: Plan,
    kv: np.ndarray,
    step: np.ndarray,
    turn: np.ndarray,
    tpos: np.ndarray,
    gpu: np.ndarray,
) -> dict[str, np.ndarray]:
    return {
        "kv": (kv >= plan.kv_min) & np.isin(step, plan.fault_steps),
        "template": (turn >= 1) & (tpos < 8),
        "later": turn >= 1,
        "gpu": gpu == 1,
    }


def k3(r: np.ndarray) -> np.ndarray:
    return np.expm1(r) - r


def scaled_k3(r: np.ndarray, factor: float) -> np.ndarray:
    """The log ratios of the same signs whose K3 is ``factor`` times that of ``r`` (bisection:
    K3 is monotone on each side of 0, ``sqrt(2 K3) <= |r| <= K3 + 1`` for r < 0 and
    ``r <= sqrt(2 K3)`` for r > 0)."""
    want = factor * k3(r)
    neg = r < 0
    lo = np.where(neg, -(want + 2.0), 0.0)
    hi = np.where(neg, 0.0, np.sqrt(2.0 * want) + 1.0)
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        # for r < 0 a larger K3 lies further left: mid becomes lo where K3(mid) is above there
        to_lo = (k3(mid) > want) == neg
        lo_next, hi_next = np.where(to_lo, mid, lo), np.where(to_lo, hi, mid)
        if np.array_equal(lo_next, lo) and np.array_equal(hi_next, hi):
            break  # every bracket down to adjacent floats: more rounds change no bit
        lo, hi = lo_next, hi_next
    return 0.5 * (lo + hi)


def cube_of(plan: Plan) -> tuple[Cube, Tokens]:
    tokens = generate(plan)
    cube = Cube.from_tokens(spec(plan), tokens.lr, tokens.lt, tokens.seq, tokens.tok, tokens.seqc)
    return cube, tokens


def pair(plan: Plan, baseline_seed: int = 10_000) -> tuple[Cube, Cube]:
    """The target of ``plan`` and a healthy baseline drawn independently."""
    target, _ = cube_of(plan)
    base, _ = cube_of(replace(plan, cause="healthy", magnitude=1.0, seed=plan.seed + baseline_seed))
    return target, base
