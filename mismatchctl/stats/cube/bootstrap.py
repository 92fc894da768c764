"""The findings' sequence bootstrap over the regions of at most ``max_findings`` findings
(``stats/localize.py``), mergeable and deterministic: from the sequences' cells that the cube's
pass keeps (``stats/cube_cells.py``: no second read of the tokens), or from tokens.

Each sequence gets, in every replicate, a Poisson(1) weight drawn from a hash of its key and the
replicate number (the Poisson bootstrap of Hanley & MacGibbon 2006 and Chamandy et al. 2012:
independent weights per sequence, so any partition of the sequences accumulates the same sums
in any order, across threads, parts and machines). The key is a 64-bit hash of the run's name
and the sequence's id (:func:`sequence_keys`), so a sequence gets the same weights whichever
pass, part or worker reads it.

Per replicate, region and stratum the accumulator holds the weighted tokens and K3 mass; the
finalization runs the very estimators of the point estimates (``localize_estimates``) on every
replicate and takes percentile intervals. The shrinkage weights of the baseline's ratios stay
those of the point estimate.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field

import numpy as np

from mismatchctl.stats.cube.cells import SequenceCells
from mismatchctl.stats.cube.cube import kernel_layout, sequence_runs
from mismatchctl.stats.cube.spec import CubeSpec
from mismatchctl.stats.localize.estimates import Sums, versus_baseline, versus_rest
from mismatchctl.stats.localize.result import BASELINE, Explanation

MAX_POISSON = 20  # Poisson(1) draws above 20 have probability < 1e-19
POISSON_CDF = np.cumsum(
    [math.exp(-1.0) / math.factorial(k) for k in range(MAX_POISSON + 1)], dtype=np.float64
)
Region = dict[int, tuple[int, ...]]  # dimension index -> its codes in the region


_MASK = (1 << 64) - 1


def splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser on uint64 arrays (the kernel's :func:`cube_kernels.splitmix64`)."""
    x = np.asarray(x, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = x + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def sequence_keys(run: str, seq_ids: np.ndarray) -> np.ndarray:
    """Stable 64-bit keys of sequences: a hash of the run's name mixed with each id (the same
    on every machine and in every process)."""
    base = int.from_bytes(hashlib.blake2b(run.encode("utf-8"), digest_size=8).digest(), "little")
    ids = np.asarray(seq_ids).astype(np.int64).view(np.uint64)
    return splitmix64(np.uint64(base) ^ splitmix64(ids))


def poisson_weights(keys: np.ndarray, replicates: int) -> np.ndarray:
    """The (replicates x sequences) Poisson(1) weights of the kernel, in numpy (for checks and
    small data): the uniform from a hash's top 53 bits, inverted through ``POISSON_CDF``."""
    keys = np.asarray(keys, dtype=np.uint64)
    out = np.empty((replicates, len(keys)), dtype=np.int64)
    for b in range(replicates):
        with np.errstate(over="ignore"):
            salt = np.uint64(b + 1) * np.uint64(0x9E3779B97F4A7C15)
        h = splitmix64(keys ^ salt)
        u = (h >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)
        out[b] = np.searchsorted(POISSON_CDF, u, side="left")
    return out


@dataclass
class RegionAccumulator:
    """Weighted sums of regions per replicate and stratum: ``state`` is (replicates, regions,
    strata, 2) with tokens then K3. Merge is addition."""

    spec: CubeSpec
    regions: list[Region]
    stratum: int | None
    replicates: int
    state: np.ndarray = field(default=None, repr=False)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        strata = 1 if self.stratum is None else self.spec.dims[self.stratum].size
        shape = (self.replicates, len(self.regions), strata, 2)
        if self.state is None:
            self.state = np.zeros(shape, dtype=np.float64)
        elif self.state.shape != shape:
            raise ValueError(
                f"accumulator state must have shape {shape} (found {self.state.shape})"
            )

    def add(
        self,
        lr: np.ndarray,
        lt: np.ndarray,
        seq: np.ndarray,
        token_codes: np.ndarray,
        seq_codes: np.ndarray,
        seq_keys: np.ndarray,
    ) -> None:
        """Add whole sequences (as ``Cube.add``); ``seq_keys``: each row of ``seq_codes``'s key
        (:func:`sequence_keys`)."""
        from mismatchctl.stats.cube import kernels as cube_kernels
        from mismatchctl.stats.cube.cube import _checked

        lr, lt, seq, tok, seqc = _checked(self.spec, lr, lt, seq, token_codes, seq_codes)
        keys = np.ascontiguousarray(seq_keys, dtype=np.uint64)
        if keys.shape != (len(seqc),):
            raise ValueError(
                f"seq_keys must hold one key per row of seq_codes ({len(seqc)}; found {keys.shape})"
            )
        if len(lr) == 0 or not self.regions:
            return
        starts, rows = sequence_runs(seq)
        allowed, roff = self._layout()
        cube_kernels.region_accumulate(
            self.state, lr, lt, starts, rows, keys, tok, seqc, allowed, roff,
            self._kernel_stratum(), POISSON_CDF,
        )  # fmt: skip

    def add_cells(self, cells: SequenceCells) -> None:
        """Add whole sequences from their cells (``Cube.add`` with ``seq_keys`` keeps them): the
        same sums as :meth:`add` of their tokens, a sequence's K3 in a region summed over its
        cells instead of its tokens (equal up to float rounding)."""
        from mismatchctl.stats.cube import kernels as cube_kernels

        if cells.seq_codes.shape[1:] != (self.spec.n_seq_dims,):
            raise ValueError(
                f"cells must hold codes of the {self.spec.n_seq_dims} sequence dimensions "
                f"(found {cells.seq_codes.shape})"
            )
        if cells.sequences == 0 or not self.regions:
            return
        tmul, tcard = kernel_layout(self.spec)[:2]
        allowed, roff = self._layout()
        cube_kernels.region_accumulate_cells(
            self.state, cells.ptr, cells.keys, cells.combo, cells.tokens, cells.k3, tmul, tcard,
            cells.seq_codes, allowed, roff, self._kernel_stratum(), POISSON_CDF,
        )  # fmt: skip

    def merge(self, other: RegionAccumulator) -> RegionAccumulator:
        if (other.spec, other.regions, other.stratum, other.replicates) != (
            self.spec, self.regions, self.stratum, self.replicates,
        ):  # fmt: skip
            raise ValueError("accumulators of different regions cannot be merged")
        return RegionAccumulator(
            self.spec, self.regions, self.stratum, self.replicates, self.state + other.state
        )

    def sums(self, region: int) -> Sums:
        """The replicates' sums of one region (replicates x strata)."""
        return Sums(self.state[:, region, :, 0], self.state[:, region, :, 1])

    def _layout(self) -> tuple[np.ndarray, np.ndarray]:
        """The kernel's membership masks: ``allowed[roff[r, k] + code]``, dimensions in the
        kernel's order (token dimensions, then sequence dimensions); -1: unconstrained."""
        spec = self.spec
        order = [spec.n_seq_dims + k for k in range(spec.n_token_dims)] + list(
            range(spec.n_seq_dims)
        )
        parts, roff, off = [], np.full((len(self.regions), len(order)), -1, np.int64), 0
        for r, region in enumerate(self.regions):
            for k, d in enumerate(order):
                if d in region:
                    mask = np.zeros(spec.dims[d].size, np.bool_)
                    mask[list(region[d])] = True
                    parts.append(mask)
                    roff[r, k] = off
                    off += len(mask)
        allowed = np.concatenate(parts) if parts else np.zeros(1, np.bool_)
        return allowed, roff

    def _kernel_stratum(self) -> int:
        if self.stratum is None:
            return -1
        spec = self.spec
        if spec.is_token_dim(self.stratum):
            return self.stratum - spec.n_seq_dims
        return spec.n_token_dims + self.stratum


@dataclass
class FindingPlan:
    """Indices of one finding's regions in the plan's region lists, and the shrinkage weights
    of its baseline ratio."""

    t_region: int
    t_all: int
    b_region: int | None
    b_marginals: list[int]
    b_all: int | None
    weights: tuple[float, list[float]]


@dataclass
class BootstrapPlan:
    """What the bootstrap accumulates (``target_regions`` over the target's sequences,
    ``baseline_regions`` over the baseline's) and how each finding is estimated."""

    mode: str
    stratum: int | None
    replicates: int
    level: float
    target_regions: list[Region]
    baseline_regions: list[Region]
    findings: list[FindingPlan]

    def accumulators(self, spec: CubeSpec) -> tuple[RegionAccumulator, RegionAccumulator | None]:
        """Empty accumulators of both sides (None for the baseline without one)."""
        t = RegionAccumulator(spec, self.target_regions, self.stratum, self.replicates)
        if self.mode != BASELINE:
            return t, None
        return t, RegionAccumulator(spec, self.baseline_regions, self.stratum, self.replicates)


def plan_bootstrap(expl: Explanation, replicates: int | None = None) -> BootstrapPlan:
    """The bootstrap of an explanation's findings."""
    t_regions: list[Region] = []
    b_regions: list[Region] = []

    def index(regions: list[Region], region: Region) -> int:
        if region not in regions:
            regions.append(region)
        return regions.index(region)

    findings = []
    for f in expl.findings:
        b = f.baseline
        findings.append(
            FindingPlan(
                index(t_regions, f.region),
                index(t_regions, {}),
                None if b is None or b.region is None else index(b_regions, b.region),
                [] if b is None else [index(b_regions, m) for m in b.marginals],
                None if b is None else index(b_regions, {}),
                (1.0, []) if b is None else b.weights,
            )
        )
    n_rep = expl.bootstrap_replicates if replicates is None else replicates
    return BootstrapPlan(
        expl.mode, expl.stratum_index, n_rep, expl.level, t_regions, b_regions, findings
    )


@dataclass
class FindingInterval:
    """Percentile intervals of one finding over the replicates whose estimate is finite."""

    rate_ratio_ci: tuple[float, float] | None
    excess_share_ci: tuple[float, float] | None
    replicates: int


def finalize(
    plan: BootstrapPlan, target: RegionAccumulator, baseline: RegionAccumulator | None = None
) -> list[FindingInterval]:
    """The findings' bootstrap intervals, in the plan's order."""
    if plan.mode == BASELINE and baseline is None:
        raise ValueError("a baseline explanation's bootstrap needs the baseline's accumulator")
    out = []
    for f in plan.findings:
        t_r, t_all = target.sums(f.t_region), target.sums(f.t_all)
        if plan.mode == BASELINE:
            assert baseline is not None and f.b_all is not None
            b_r = None if f.b_region is None else baseline.sums(f.b_region)
            b_m = [baseline.sums(m) for m in f.b_marginals]
            est = versus_baseline(t_r, t_all, b_r, b_m, baseline.sums(f.b_all), f.weights)
        else:
            est = versus_rest(t_r, t_all)
        ratio = _interval(est.rate_ratio, plan.level)
        share = _interval(est.excess_share, plan.level)
        out.append(FindingInterval(ratio, share, int(np.isfinite(est.rate_ratio).sum())))
    return out


def _interval(values: np.ndarray, level: float) -> tuple[float, float] | None:
    v = np.asarray(values, np.float64)
    v = v[np.isfinite(v)]
    if len(v) == 0:
        return None
    lo, hi = np.percentile(v, [50 * (1 - level), 50 * (1 + level)])
    return float(lo), float(hi)
