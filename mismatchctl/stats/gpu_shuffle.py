"""Whether the gpus split the responses' K3 beyond what the same responses dealt to the gpus at
random would: a permutation test of the hardware check's contrast.

The hardware check ranks the gpus by their K3 per token and contrasts the hottest one (or the
hottest few) with the rest; its interval is clustered by sequence, which assumes enough
responses on each side to average a heavy tail. A mixture of experts' K3 is heavy-tailed by
response (a flipped route moves every later token of its response), and on one step of a
healthy four-gpu run (32 responses, 8 a gpu) the five heaviest responses held 57% of the K3:
none of them on one gpu (a chance of one in five) made the other three 3.5x that one, the
interval 1.7-5.8. Choosing the most extreme split of several gpus is a selection of its own.

The statistic is the split the check reads: the gpus ranked by K3 per token, the largest ratio
of the hottest ``k`` (pooled) over the others' for ``k`` = 1 .. gpus - 1. Its p-value is the
share of draws, each dealing every response's gpu anew among the responses of its run and step
(each gpu keeps its count there), whose statistic is as large, the observed one counted (so
never 0). Exact sums of whole responses: tokens move with their response."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mismatchctl.stats.hot_sequences import HotSequenceState

N_ALL, K3 = 0, 4  # the state's columns: every token, their K3

DRAWS = 999
"""Random deals of the gpus: a p-value of 0.001 at the least ..."""

MIN_DRAWS = 199
DRAW_BUDGET = 20_000_000
"""... fewer on a large selection, ``DRAW_BUDGET`` responses dealt in all but never under
``MIN_DRAWS`` deals (a p-value of 0.005 at the least, under the hardware check's 1%): about a
second and a half for 100,000 responses on one core, where a thousand deals took eleven."""

SEED = 20261130
"""The draws' seed: the same selection gives the same p-value."""

MAX_CELLS = 4_000_000
"""Draws x responses at the most in one block of the shuffle (memory: 32 MB of codes)."""


@dataclass(frozen=True)
class GpuSplit:
    """The observed split (its ratio, the hot gpus), the p-value of a split as large among the
    random deals, the draws and the responses dealt."""

    ratio: float
    hot: tuple[str, ...]
    p_value: float
    draws: int
    responses: int


def gpu_split(states: list[HotSequenceState], draws: int | None = None) -> GpuSplit | None:
    """The split of ``states``' responses by gpu and its permutation p-value (``draws`` deals;
    None: ``DRAWS``, fewer on a large selection); None with fewer than two gpus named, or no
    K3 on the colder side."""
    k3, n, gpu, stratum = _responses(states)
    labels = sorted({g for g in gpu if g is not None})
    if len(labels) < 2:
        return None
    named = np.array([g is not None for g in gpu], bool)
    k3, n, stratum = k3[named], n[named], stratum[named]
    codes = np.array([labels.index(g) for g in gpu[named]], np.int64)
    observed, hot = _split(k3, n, codes[None, :], len(labels))
    if not np.isfinite(observed[0]):
        return None
    if draws is None:
        draws = min(DRAWS, max(MIN_DRAWS, DRAW_BUDGET // max(len(codes), 1)))
    order = np.argsort(stratum, kind="stable")  # each stratum's responses together
    k3, n, codes, stratum = k3[order], n[order], codes[order], stratum[order]
    bounds = np.flatnonzero(np.diff(stratum)) + 1
    segments = list(zip(np.r_[0, bounds], np.r_[bounds, len(codes)], strict=True))
    rng = np.random.default_rng(SEED)
    as_large = 0
    block = max(1, MAX_CELLS // max(len(codes), 1))
    done = 0
    while done < draws:
        m = min(block, draws - done)
        dealt = np.broadcast_to(codes, (m, len(codes))).copy()
        for a, b in segments:  # each run and step's gpus dealt anew among its responses
            dealt[:, a:b] = rng.permuted(dealt[:, a:b], axis=1)
        found, _ = _split(k3, n, dealt, len(labels))
        as_large += int((found >= observed[0] * (1 - 1e-12)).sum())
        done += m
    return GpuSplit(
        ratio=float(observed[0]),
        hot=tuple(labels[i] for i in hot),
        p_value=(as_large + 1) / (draws + 1),
        draws=draws,
        responses=len(codes),
    )


def _responses(
    states: list[HotSequenceState],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per response: its K3, its tokens, its gpu label and its stratum (run and step, coded)."""
    k3s, ns, gpus, strata = [], [], [], []
    offset = 0
    for st in states:
        rows = len(st.step)
        k3s.append(np.bincount(st.row, st.sums[:, K3], rows))
        ns.append(np.bincount(st.row, st.sums[:, N_ALL], rows))
        gpus.append(np.asarray(st.gpu, object))
        key = st.run.astype(np.int64) * (int(st.step.max(initial=0)) + 1) + st.step
        _, code = np.unique(key, return_inverse=True)
        strata.append(code + offset)
        offset += int(code.max(initial=-1)) + 1
    if not k3s:
        return np.zeros(0), np.zeros(0), np.zeros(0, object), np.zeros(0, np.int64)
    return (
        np.concatenate(k3s),
        np.concatenate(ns),
        np.concatenate(gpus),
        np.concatenate(strata).astype(np.float64),
    )


def _split(
    k3: np.ndarray, n: np.ndarray, dealt: np.ndarray, gpus: int
) -> tuple[np.ndarray, tuple[int, ...]]:
    """For each deal (a row of ``dealt``: each response's gpu code), the largest ratio of the
    hottest ``k`` gpus' pooled K3 per token over the others'; and the first deal's hot gpus."""
    rows = dealt.shape[0]
    flat = dealt + np.arange(rows)[:, None] * gpus
    a = np.bincount(flat.ravel(), np.broadcast_to(k3, dealt.shape).ravel(), rows * gpus)
    b = np.bincount(flat.ravel(), np.broadcast_to(n, dealt.shape).ravel(), rows * gpus)
    a, b = a.reshape(rows, gpus), b.reshape(rows, gpus)
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = np.where(b > 0, a / b, -np.inf)
    rank = np.argsort(-rate, axis=1, kind="stable")
    a_sorted = np.take_along_axis(a, rank, 1)
    b_sorted = np.take_along_axis(b, rank, 1)
    a_hot, b_hot = np.cumsum(a_sorted, 1)[:, :-1], np.cumsum(b_sorted, 1)[:, :-1]
    a_rest = a_sorted.sum(1, keepdims=True) - a_hot
    b_rest = b_sorted.sum(1, keepdims=True) - b_hot
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = (a_hot / b_hot) / (a_rest / b_rest)
    ratio = np.where(np.isfinite(ratio), ratio, -np.inf)
    best = ratio.argmax(1)
    top = ratio[np.arange(rows), best]
    hot = tuple(int(g) for g in rank[0, : best[0] + 1])
    return np.where(np.isfinite(top), top, np.nan), hot


__all__ = ["DRAWS", "DRAW_BUDGET", "MIN_DRAWS", "GpuSplit", "gpu_split"]
