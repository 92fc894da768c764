"""The typed result of ``explain`` and its plain sentences (the analysis layer renders them)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from mismatchctl.stats.decompose import Decomposition

BASELINE, INTERNAL = "baseline", "internal"
CELLS, FEW_SEQUENCES, UNIFORM, UNLOCATED, NONE = (
    "cells", "few_sequences", "uniform", "unlocated", "none"
)  # fmt: skip


Region = dict[int, tuple[int, ...]]  # dimension index -> its codes


@dataclass
class BaselineRegions:
    """The baseline's side of a finding's estimate, for the bootstrap: its region on the
    shared dimensions (None: the stratum only), that region's one-dimension marginals (the
    shrinkage prior) and the shrinkage weights."""

    region: Region | None
    marginals: list[Region]
    weights: tuple[float, list[float]]


@dataclass
class Finding:
    """One localized cause: a conjunction of up to three dimensions, each with a set of values.

    ``rate_ratio``: with a baseline, the cell's mean K3 over the baseline's in the same cell at
    the same token mix (probability bins); without, over the rest of the selection at the same
    token probabilities. ``excess_share``: of the selection's excess over the baseline (with a
    baseline; None when there is no overall excess), of the selection's K3 mass (without).
    ``specificity``/``z``: how much hotter than the rest of the selection the cell was, relative
    to the baseline, when the search picked it, and the z of that test. ``region``: dimension
    index -> exact codes (for the bootstrap)."""

    where: dict[str, str]
    tokens: int
    sequences: int
    token_share: float
    mass_share: float
    expected: float
    excess: float
    excess_share: float | None
    rate_ratio: float
    rate_ratio_ci: tuple[float, float]
    specificity: float
    z: float
    surprise: float
    sentence: str = ""
    region: Region = field(default_factory=dict, repr=False)
    baseline: BaselineRegions | None = field(default=None, repr=False)
    rate_ratio_ci_method: str = "delta"
    # the same tokens named otherwise, found too (turn 1 when the only later turn is turn 1)
    same_as: list[dict[str, str]] = field(default_factory=list)
    # later findings no hotter than this one and not hot outside it: it, seen otherwise
    seen_as: list[dict[str, str]] = field(default_factory=list)
    # how many sequences' worth of K3 the region holds (A^2 / sum y_i^2; at most that when the
    # region spans several token values): a lead holds fewer than a finding may
    effective_sequences: float | None = None
    # ``where`` as a person reads it: many ranges or values named by their structure
    # (``stats/value_names.py``); ``where`` keeps every range
    named: dict[str, str] = field(default_factory=dict)
    # the same for ``same_as`` and ``seen_as`` (the sentences' names; not in the JSON)
    same_as_named: list[dict[str, str]] = field(default_factory=list, repr=False)
    seen_as_named: list[dict[str, str]] = field(default_factory=list, repr=False)


@dataclass
class UniformDim:
    """The homogeneity test of one dimension's cells (``uniform``: it explains nothing)."""

    dim: str
    uniform: bool
    cells: int
    coverage: float
    rate_ratio: float
    rate_ratio_ci: tuple[float, float]
    spread: float  # DerSimonian-Laird between-cell factor, exp(tau)
    q: float
    p_value: float
    excess_share: float | None = None  # the tested cells' share of the excess over the baseline
    excess_elsewhere: bool = False  # under ``uniform_excess_share``: not uniform (localize.uniform)


@dataclass
class CellShare:
    """A cell's share of the tokens and of the K3 mass (the lift table; new cells)."""

    where: dict[str, str]
    tokens: int
    token_share: float
    mass_share: float
    lift: float


@dataclass
class Explanation:
    mode: str  # "baseline" or "internal"
    tokens: int
    vllm_kl: float
    rate_ratio: float | None  # the whole selection's, mix-adjusted (with a baseline)
    rate_ratio_ci: tuple[float, float] | None
    excess: float | None
    findings: list[Finding]
    uniform: list[UniformDim]
    decomposition: list[Decomposition]
    new: list[CellShare]
    unshared: list[str]  # dimensions the baseline's rate is not conditioned on
    lift: list[CellShare]
    tested: int  # candidate cells tested (the Bonferroni count)
    z_family: float
    stratum: str | None
    baseline_spread: dict[str, float]  # per shared dimension, exp(tau) of its cells
    baseline_tokens: int | None = None
    baseline_vllm_kl: float | None = None
    level: float = 0.95  # of the intervals
    bootstrap_replicates: int = 200
    notes: list[str] = field(default_factory=list)
    stratum_index: int | None = field(default=None, repr=False)
    # with no finding and a significant excess over the baseline: the cells that carry it, held
    # by fewer sequences than a finding needs (``localize.explain(leads=True)``)
    leads: list[Finding] = field(default_factory=list)
    effective_sequences: float | None = None  # the target's K3 mass, in sequences' worth

    @property
    def located(self) -> str:
        """Where the excess lives, in one word: ``cells`` (findings), ``few_sequences`` (leads:
        cells held by a few sequences), ``uniform`` (a significant excess over the baseline that
        every dimension tested spreads evenly), ``unlocated`` (a significant excess no cell holds
        and not every dimension spreads evenly), ``none`` (no significant excess)."""
        if self.findings:
            return CELLS
        if self.leads:
            return FEW_SEQUENCES
        if not self.significant_excess:
            return NONE
        if self.uniform and all(u.uniform for u in self.uniform):
            return UNIFORM
        return UNLOCATED

    @property
    def significant_excess(self) -> bool:
        """The whole selection's rate ratio to the baseline is above 1, its interval too (also
        when the baseline was too few sequences' worth to localize against)."""
        ci = self.rate_ratio_ci
        return ci is not None and ci[0] > 1

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values (NaN and infinities become None)."""
        out = asdict(self)
        out.pop("stratum_index")
        for f in (*out["findings"], *out["leads"]):
            for private in ("region", "baseline", "same_as_named", "seen_as_named"):
                f.pop(private)
        out["located"] = self.located
        return _clean(out)


def _clean(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def where_text(where: dict[str, str]) -> str:
    return ", ".join(f"{k} {v}" for k, v in where.items())


def finding_label(f: Finding) -> str:
    """Where a finding is, the other names of the same tokens (``turn 1 (= turn_kind
    later)``) and the later findings it explains (``(also seen as kv_position 32-63)``), each
    as a person reads it (``Finding.named``)."""
    same_as = _readable(f.same_as, f.same_as_named)
    seen_as = _readable(f.seen_as, f.seen_as_named)
    same = "".join(f" (= {where_text(w)})" for w in same_as)
    seen = "; ".join(where_text(w) for w in seen_as[:SEEN_SHOWN])
    if len(seen_as) > SEEN_SHOWN:
        seen += f" and {len(seen_as) - SEEN_SHOWN} more"
    return where_text(f.named or f.where) + same + (f" (also seen as {seen})" if seen else "")


def _readable(exact: list[dict[str, str]], named: list[dict[str, str]]) -> list[dict[str, str]]:
    return named if len(named) == len(exact) else exact


SEEN_SHOWN = 2  # of a finding's other views named in its label (the JSON has them all)


def sentence(f: Finding, mode: str, level: float) -> str:
    """One plain sentence, e.g. ``kv_position 1024-2047, step 2,6: 6% of tokens carry 71% of
    the excess; 9.3x the baseline's rate (95% CI 6.1-14)``."""
    lo, hi = f.rate_ratio_ci
    ci = f"{level:.0%} CI {ratio_text(lo)}-{ratio_text(hi)}"
    head = f"{finding_label(f)}: {_pct(f.token_share)} of tokens carry "
    if mode == BASELINE:
        carried = (
            f"{_pct(f.excess_share)} of the excess"
            if f.excess_share is not None and math.isfinite(f.excess_share)
            else f"{_pct(f.mass_share)} of the K3 mass"
        )
        return f"{head}{carried}; {ratio_text(f.rate_ratio)}x the baseline's rate ({ci})"
    return (
        f"{head}{_pct(f.mass_share)} of the K3 mass; {ratio_text(f.rate_ratio)}x the rate of the rest "
        f"at the same token probabilities ({ci})"
    )


def uniform_sentence(u: UniformDim, mode: str) -> str:
    ratio = f"{ratio_text(u.rate_ratio)}x the baseline's rate" if mode == BASELINE else "one rate"
    if u.uniform:
        return f"{u.dim} explains nothing: its {u.cells} values are consistent with {ratio}"
    if u.excess_elsewhere:
        return (
            f"{u.dim} is not uniform: its {u.cells} values with enough tokens to test "
            f"({_pct(u.coverage)} of the tokens) are at {ratio} and hold "
            f"{_pct(u.excess_share)} of the excess; the rest sits in its values too small to "
            "test one by one"
        )
    return f"{u.dim} is not uniform (its values' rates spread by a factor {ratio_text(u.spread)})"


def _pct(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "n/a"
    return f"{x:.0%}" if abs(x) >= 0.095 else f"{x:.1%}" if abs(x) >= 0.001 else f"{x * 100:.2g}%"


def ratio_text(x: float | None) -> str:
    """Two significant digits (``9.3``, ``14``, ``1000``)."""
    if x is None or not math.isfinite(x):
        return "n/a"
    if x == 0:
        return "0"
    digits = max(0, 1 - math.floor(math.log10(abs(x))))
    return f"{round(x, digits):.{digits}f}"


def lead_sentence(f: Finding, mode: str, level: float, floor: float) -> str:
    """A lead's sentence: a finding's, and how few sequences hold it."""
    worth = "n/a" if f.effective_sequences is None else f"{f.effective_sequences:.1f}"
    return (
        f"{sentence(f, mode, level)}; held by {worth} sequences' worth of K3, fewer than the "
        f"{floor:g} a finding needs"
    )


def unlocated_sentence(x: Explanation, target: str) -> str:
    """What ``explain`` says when no cell is a finding: where the excess lives all the same
    (``Explanation.located``), never "nothing hotter" beside a significant overall excess."""
    located = x.located
    whole = f"{ratio_text(x.rate_ratio)}x the baseline's rate ({_ci_text(x)})"
    sequences = _few_sequences(x, target)
    if located == FEW_SEQUENCES:
        return (
            f"the selection is {whole}, and the cells below carry the excess, each held by too "
            f"few sequences to be a finding{sequences}"
        )
    if located == UNIFORM:
        dims = ", ".join(u.dim for u in x.uniform)
        return (
            f"the whole selection is {whole}, spread evenly: uniform over every dimension "
            f"tested ({dims}), as a policy difference (e.g. stale weights) spreads it, not a "
            "code path"
        )
    if located == UNLOCATED:
        return (
            f"the selection is {whole}, but no cell holds the excess significantly and not every "
            f"dimension spreads it evenly (Dimensions, below){sequences}"
        )
    if x.baseline_vllm_kl == 0 and x.vllm_kl > 0:
        return (
            "no cell of the selection is significantly hotter than the rest of it; the baseline "
            "has no mismatch at all (vllm_kl exactly 0), so all of the selection's is excess "
            "over it"
        )
    if x.rate_ratio is not None:
        return (
            "no cell of the selection is significantly hotter than its reference, nor is the "
            f"selection as a whole: {whole}"
        )
    return "no cell of the selection is significantly hotter than its reference"


def _ci_text(x: Explanation) -> str:
    if x.rate_ratio_ci is None:
        return "no interval"
    lo, hi = x.rate_ratio_ci
    return f"{x.level:.0%} CI {ratio_text(lo)}-{ratio_text(hi)}"


def _few_sequences(x: Explanation, target: str) -> str:
    """``; its K3 mass is 7.6 sequences' worth: ...``: who to read next."""
    n = x.effective_sequences
    if n is None or not math.isfinite(n):
        return ""
    return (
        f"; its K3 mass is {n:.1f} sequences' worth: `mismatchctl tokens '{target}' "
        "--sequences` lists the sequences that carry the most"
    )
