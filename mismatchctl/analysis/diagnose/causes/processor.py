"""A logit processor in a part of the run: the part a code path would be named for, whose excess
is mass removed on one side (a bad-words mask, a truncation too faint for the run-wide checks)
rather than noise of a larger scale (``stats/signed_parts.py``).

A code path's excess is two-signed: noise on the logits of either side keeps the mean ratio
``E_q[p/q]`` at 1, whatever its scale, so the part's mean of ``exp(r) - 1`` stays within its
sampling error, itself at most about the part's K3. A mask on the sampling side renormalises
each context's kept tokens by its banned mass ``b``: their ``r`` is ``log(1 - b)``, the mean
ratio falls by ``b`` and the K3 rises by only ``b^2 / 2``, and most of the part's tokens fall
below zero. The test, against the rest of the run at the same probability bins:

- the part's mean ratio lies below the rest's at ``DEFICIT_Z`` standard errors or more
  (groups of sequences the clusters), and more of its tokens lie below zero at ``BELOW_Z``;
- the deficit is at least ``DEFICIT_PER_K3`` times the part's excess K3 per token.

Over the corpus (seed 0) and the held-out one (seed 7), every part a code path or a template
fault alarmed on, alone and against the baseline: ``sem-badwords-subtle``'s first 16 tokens of
each turn lack 13x their excess K3 (mean ratio 0.0052 below the rest's, 64% of the tokens below
zero against 54%); the code paths' parts at most 1.6x with a deficit within 1.3 standard
errors (``cp-prefix-subtle``). A part on steps, lengths, gpus or engine batches is not weighed
(the cells do not hold them); measured on the tokens by hand, those with a significant deficit
lack 0.7x (``stop-zero-turn-ends``, a side storing 0.0 at the turns' ends) and 0.2x (the
held-out ``combo-stale-splitkv``'s split-KV steps, 146x the rest: loud noise whose sample
misses the rare large positive ``r``)."""

from __future__ import annotations

import numpy as np

from mismatchctl.analysis.diagnose.causes.hypothesis import Support
from mismatchctl.analysis.diagnose.context import Context
from mismatchctl.analysis.explain import CUBE_TURN_POSITION_EDGES
from mismatchctl.engines import plan as K
from mismatchctl.stats.signed_parts import FIELDS, TURN_POSITION_EDGES, OneSigned, one_signed
from mismatchctl.stats.splits import TURN_INDEX_LABELS, TURN_KIND_LABELS

DEFICIT_Z = 3.0
"""The part's mean ratio below the rest's at the same bins by this many standard errors."""

BELOW_Z = 3.0
"""The part's share of tokens below zero above the rest's at the same bins by this many."""

DEFICIT_PER_K3 = 4.0
"""The deficit of the part's mean ratio per unit of its excess K3 per token: 13x in
``sem-badwords-subtle``'s part, 1.6x at most in a code path's (the module's docstring)."""


def mass_removed(ctx: Context, found: Support) -> OneSigned | None:
    """The signed test of the part ``found`` names (its ``region``), when its excess is mass
    removed on one side: None when it is not, or when the part lies on a dimension the signed
    sums do not hold (steps, a gpu, lengths, the engine batches, an attribute)."""
    if not found.alarm or not found.region:
        return None
    tested = measure(ctx, found.region)
    return tested if tested is not None and removed(tested) else None


def removed(found: OneSigned) -> bool:
    """The part's excess is mass removed (the thresholds above)."""
    return (
        found.deficit_z <= -DEFICIT_Z
        and found.below_z >= BELOW_Z
        and found.excess_k3 > 0
        and found.deficit_per_k3 >= DEFICIT_PER_K3
    )


def measure(ctx: Context, region: dict[str, list[int]]) -> OneSigned | None:
    """The part (cube dimension -> search-level codes) against the rest of the selection."""
    sums = ctx.state.signed.total()
    part = None if sums is None else cells_in(ctx, region, sums.shape[1:-1])
    return None if part is None or sums is None else one_signed(sums, part)


def cells_in(
    ctx: Context, region: dict[str, list[int]], shape: tuple[int, ...]
) -> np.ndarray | None:
    """The signed cells inside a part of the cube (a mask of ``shape``); None when the part
    lies on a dimension the cells do not hold (steps, gpus, lengths, batches, attributes)."""
    cube = ctx.cube
    if cube is None:
        return None
    grids = np.indices(shape)
    part = np.ones(shape, bool)
    for name, levels in region.items():
        d = cube.spec.index(name)
        codes = cube.spec.codes_of(d, levels)
        mask = _mask(grids, name, codes, cube.spec.dims[d].labels)
        if mask is None:
            return None
        part &= mask
    return part


def sentence(found: OneSigned) -> str:
    """What the user reads: the deficit, its size against the excess, the signs."""
    return (
        f"the part's mean ratio exp(r) is {found.deficit:+.2g} against the rest at the same "
        f"token probabilities (z = {found.deficit_z:.1f}), {found.deficit_per_k3:.2g}x its "
        f"excess K3 per token, and {100 * found.below:.0f}% of its tokens lie below zero "
        f"({100 * found.below_expected:.0f}% expected): mass removed on one side, one-signed, "
        "as a logit processor or a mask removes it (a code path's noise keeps the mean ratio "
        "at 1)"
    )


def _mask(
    grids: np.ndarray, name: str, codes: np.ndarray, labels: tuple[str, ...]
) -> np.ndarray | None:
    """The cells (``grids``: each cell's code on each of ``FIELDS``) inside the cube codes
    ``codes`` of dimension ``name`` (``labels``: its labels); None for a dimension the cells do
    not hold."""
    turn = grids[FIELDS.index(K.TURN)]
    if name in (K.BIN, K.KV_POSITION):  # the cube's codes are the cells' (the same bins)
        return np.isin(grids[FIELDS.index(name)], codes)
    if name == K.TURN:
        return np.isin(turn, [TURN_INDEX_LABELS.index(labels[c]) for c in codes])
    if name == K.TURN_KIND:
        kinds = [TURN_KIND_LABELS.index(labels[c]) for c in codes]
        return np.isin((turn > 0).astype(np.int64), kinds)
    if name == K.TURN_POSITION:
        return np.isin(grids[FIELDS.index(name)], _finer(codes))
    return None


def _finer(codes: np.ndarray) -> list[int]:
    """The signed cells' turn-position codes inside the cube's codes (finer bins, same edges)."""
    cube = (*CUBE_TURN_POSITION_EDGES, None)
    inside = []
    for j, lo in enumerate(TURN_POSITION_EDGES):
        for c in codes:
            hi = cube[int(c) + 1]
            if cube[int(c)] <= lo and (hi is None or lo < hi):
                inside.append(j)
    return inside
