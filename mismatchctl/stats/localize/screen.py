"""The refiner's finer regions of one dimension, all at once: which are counted among the regions
examined and the z of each against the rest of its region (``Refiner._candidate``'s tests, as
arrays over the candidates).

The parsimony's *down* move tries, for every dimension, each single value and each range from
either end; with 128 blocks of steps that is hundreds of regions per move, each built and tested
one at a time. Here their sums are one product of a membership matrix with the dimension's
column (``Refiner.along``), and the tests are the same formulas on arrays. The sums add in
another order than a region's own sum, so a z computed here may differ from the region's in its
last bits: the refiner takes every region whose z comes within :data:`MARGIN` of its threshold
and tests it again the usual way (``_candidate``); the count of regions examined (the
Bonferroni count) depends only on token and sequence counts, which are exact either way.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

import numpy as np

from mismatchctl.stats.cube.cube import Field
from mismatchctl.stats.localize.math import div, own_var, relvar
from mismatchctl.stats.localize.regions import region_moments, restrict
from mismatchctl.stats.localize.search import Search, effective_sequences, log_z
from mismatchctl.stats.localize.tables import Masks, SideTables
from mismatchctl.stats.localize.thresholds import LocalizeThresholds


class Refiner(Protocol):
    """What the screen reads of ``localize.refine.Refiner`` (a protocol, so that the refiner can
    import the screen without the screen importing it back): its search, the side's tables and
    the thresholds."""

    s: Search
    t: SideTables
    th: LocalizeThresholds


MARGIN = 1e-6  # z within this of the threshold: tested again region by region


class Screen(NamedTuple):
    """Per candidate: counted among the regions examined (supported, with a rest that is not a
    sliver), and its z against the rest of the region (-1 when not ``min_specificity`` times
    hotter, as ``Refiner.within``)."""

    counted: np.ndarray
    z: np.ndarray


class _Sums(NamedTuple):
    mom: np.ndarray
    m: np.ndarray
    vsum: np.ndarray
    sdsum: np.ndarray
    g: np.ndarray
    cbar: np.ndarray  # NaN: exact moments

    def own(self) -> np.ndarray:
        interpolated = self.vsum + np.nan_to_num(self.cbar) * np.maximum(
            self.sdsum * self.sdsum - self.vsum, 0.0
        )
        return np.where(np.isnan(self.cbar), own_var(self.mom), interpolated)


def screen(ref: Refiner, region: Masks, d: int, col: dict, subsets: list[np.ndarray]) -> Screen:
    """``Refiner._candidate`` of every value set in ``subsets`` (without the baseline's share
    of the z, as there)."""
    t, th = ref.t, ref.th
    levels = t.spec.levels(d)
    inside = np.zeros((len(subsets), levels), bool)
    for i, values in enumerate(subsets):
        inside[i, values] = True
    allowed = region[d] if d in region else np.ones(levels, bool)
    rest = (allowed & (col["mom"][:, Field.TOKENS] > 0))[None, :] & ~inside
    part, other = _sums(ref, col, d, inside), _sums(ref, col, d, rest)
    n = part.mom[:, Field.TOKENS]
    counted = rest.any(axis=1) & (n >= th.min_tokens) & (part.g >= th.min_sequences)
    counted &= other.mom[:, Field.TOKENS] >= th.min_tokens
    counted &= effective_sequences(part.mom) >= th.min_effective_sequences
    counted &= n <= th.max_token_share * t.total_n
    counted &= other.m >= th.min_refine_share * (part.m + other.m)
    counted &= _baseline_supported(ref, region, d, subsets, counted)
    a_p, a_r = part.mom[:, Field.K3], other.mom[:, Field.K3]
    s = div(div(a_p, part.m, np.nan), div(a_r, other.m, np.nan), np.nan)
    var = relvar(part.own(), a_p) + relvar(other.own(), a_r)
    z = np.where(s >= th.min_specificity, log_z(s, var), -1.0)
    return Screen(counted, z)


def _sums(ref: Refiner, col: dict, d: int, member: np.ndarray) -> _Sums:
    """``Refiner.combine`` of each row of ``member`` (the values of ``d`` in it)."""
    w = member.astype(np.float64)
    k = member.sum(axis=1)
    token = ref.t.spec.is_token_dim(d) & (k > 1)
    cbar = np.full(len(k), np.nan if col["cbar"] is None else float(col["cbar"]))
    if ref.t.spec.is_token_dim(d):
        cbar = np.where(token, np.fmax(np.nan_to_num(cbar), ref.t.cbar[d]), cbar)
    g_max = np.where(member, col["g"][None, :], 0.0).max(axis=1, initial=0.0)
    return _Sums(
        w @ col["mom"], w @ col["m"], w @ col["vsum"], w @ col["sdsum"],
        np.where(token, g_max, w @ col["g"]), cbar,
    )  # fmt: skip


def _baseline_supported(
    ref: Refiner, region: Masks, d: int, subsets: list[np.ndarray], wanted: np.ndarray
) -> np.ndarray:
    """Whether the baseline's region of each candidate (on the shared dimensions) has
    ``min_sequences`` (``Refiner.baseline_parts``), computed where ``wanted``."""
    base = ref.s.baseline
    out = np.ones(len(subsets), bool)
    if base is None or not wanted.any():
        return out
    stratum = ref.s.stratum
    if d not in base.compared:  # the same baseline region for every candidate
        shared = restrict(region, base.compared)
        if any(e != stratum for e in shared):
            out[:] = region_moments(base.b, shared).g >= ref.th.min_sequences
        return out
    for i in np.flatnonzero(wanted):
        mask = np.zeros(ref.t.spec.levels(d), bool)
        mask[subsets[i]] = True
        shared = restrict({**region, d: mask}, base.compared)
        if any(e != stratum for e in shared):
            out[i] = region_moments(base.b, shared).g >= ref.th.min_sequences
    return out
