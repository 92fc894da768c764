"""The later turns' K3 rate over the first turns', without the heaviest responses: whether a
turn contrast is many responses' or a few heavy ones'.

From the per (sequence, cell) sums of ``stats/hot_sequences.py`` (a cell is the turn kind x
the probability bin: codes ``0..bins-1`` the first turns, ``bins..2 bins-1`` the later ones):
the ratio of the two turn kinds' K3 per token over the whole selection, with the sequences of
largest K3 left out. A mixture of experts' K3 is heavy-tailed by response (a flipped route
moves every later token of its response): the five heaviest of 192 responses hold 16-47% of its
K3, against 9-17% on a dense model, so a contrast of two sets of responses can rest on a few."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mismatchctl.stats.hot_sequences import HotSequenceState

N_ALL, K3 = 0, 4  # the state's columns: every token, their K3


@dataclass(frozen=True)
class HeavyTurns:
    """The later over the first turns' K3 rate without the ``left_out`` heaviest responses
    (None when a turn kind keeps no token or no K3), and the share of the later turns' K3 those
    responses held."""

    ratio: float | None
    left_out: int
    later_share: float


def later_over_first(states: list[HotSequenceState], bins: int, leave_out: int) -> HeavyTurns:
    """The later turns' K3 per token over the first turns' over every sequence of ``states``
    but the ``leave_out`` of largest K3 (both turn kinds; ties by their order)."""
    k3s, ns = [], []
    for st in states:
        rows = len(st.step)
        later = st.cell >= bins
        cols = []
        for kind in (~later, later):
            for c in (K3, N_ALL):
                cols.append(np.bincount(st.row[kind], st.sums[kind, c], rows))
        k3s.append(np.stack([cols[0], cols[2]], 1))
        ns.append(np.stack([cols[1], cols[3]], 1))
    k3 = np.concatenate(k3s) if k3s else np.zeros((0, 2))
    n = np.concatenate(ns) if ns else np.zeros((0, 2))
    order = np.argsort(-k3.sum(axis=1), kind="stable")
    drop = order[: max(0, min(leave_out, len(order)))]
    keep = np.ones(len(k3), bool)
    keep[drop] = False
    total_later = float(k3[:, 1].sum())
    share = float(k3[drop, 1].sum()) / total_later if total_later > 0 else math.nan
    a, b = k3[keep].sum(axis=0), n[keep].sum(axis=0)
    ratio = None
    if b[0] > 0 and b[1] > 0 and a[0] > 0:
        ratio = float((a[1] / b[1]) / (a[0] / b[0]))
    return HeavyTurns(ratio, len(drop), share)
