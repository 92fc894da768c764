"""The parts of a run that the localization finds (``explain`` without a baseline), judged as code
paths: what the localized check reports, the tool_responses check asks of the localized search,
and the cause reads of the localized check's first findings."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from dataclasses import dataclass

from mismatchctl.analysis.diagnose.check import FAIL, OK, CheckEvidence, absent, renamed, worst
from mismatchctl.analysis.diagnose.contrasts import Ratio, ci_text, hotter, relative
from mismatchctl.analysis.diagnose.levels import (
    LEVEL,
    LOCAL_CI_LOW,
    LOCAL_FACTOR,
    LOCAL_FAIL,
    LOCAL_MIN_SHARE,
    TOOL_CI_LOW,
)
from mismatchctl.analysis.diagnose.text import share
from mismatchctl.engines import plan as K
from mismatchctl.stats import TURN_KIND_LABELS
from mismatchctl.stats import registry as M
from mismatchctl.stats.cube.cube import Cube
from mismatchctl.stats.localize.explain import contrast_within
from mismatchctl.stats.localize.result import Explanation, Finding, finding_label, ratio_text

TOOL_DIMS = frozenset({K.TURN, K.TURN_KIND})
"""Dimensions whose findings speak of the turns after tool responses (``tool_responses``); a
finding on any other dimension (steps, gpus, positions, engine order, sequence attributes) is
a code path that only part of the run takes."""


def code_path(f: Finding) -> bool:
    """A finding on something other than the turns (and the probability bin), or on the first
    turns alone (no tool response before them: what they take that the later turns do not is
    the prompt's path, not the tool output's)."""
    return any(d not in TOOL_DIMS and d != K.BIN for d in f.where) or first_turns(f.where)


def first_turns(where: dict[str, str]) -> bool:
    """A finding's place is the first turns alone (``turn 0`` or ``turn_kind first``)."""
    return where.get(K.TURN) == "0" or where.get(K.TURN_KIND) == "first"


def cell_level(expl: Explanation, f: Finding) -> float:
    """The finding's own vllm_kl (its K3 mass over its tokens)."""
    return f.mass_share * expl.vllm_kl * expl.tokens / f.tokens if f.tokens else math.nan


@dataclass(frozen=True, kw_only=True)
class FindingRow(CheckEvidence):
    """A finding of the localization as evidence (``stats/localize_result.Finding``): where
    (dimension -> value), its sentence, its shares of the tokens, the K3 mass and the excess,
    its rate ratio to the rest with the interval, and its own vllm_kl."""

    where: dict[str, str]
    sentence: str
    token_share: float = renamed(M.TOKEN_SHARE.key)
    mass_share: float
    excess_share: float | None
    rate_ratio: float
    rate_ratio_ci: tuple[float, float]
    vllm_kl: float = renamed(M.VLLM_KL.key)


def finding_row(expl: Explanation, f: Finding) -> FindingRow:
    return FindingRow(
        where=f.where,
        sentence=f.sentence,
        token_share=f.token_share,
        mass_share=f.mass_share,
        excess_share=f.excess_share,
        rate_ratio=f.rate_ratio,
        rate_ratio_ci=f.rate_ratio_ci,
        vllm_kl=cell_level(expl, f),
    )


@dataclass(frozen=True, kw_only=True)
class WithinLater(CheckEvidence):
    """A part found that is hotter than the rest of the later turns: where, and its rate ratio
    to their other tokens with the interval."""

    where: dict[str, str]
    rate_ratio: float
    rate_ratio_ci: tuple[float, float]


@dataclass(frozen=True, kw_only=True)
class LocalRun(CheckEvidence):
    """One run's localization as the localized check judges it: every finding, those that are
    code paths at the localized pattern (``code_path_findings``), and (written when true or
    found) ``first_turns``: the top part is the first turns alone; ``later_turns``: the parts are
    the later turns seen by position; ``within_later_turns``: a part hotter than the rest of the
    later turns."""

    findings: list[FindingRow]
    code_path_findings: list[FindingRow]
    first_turns: bool | None = absent()
    later_turns: bool | None = absent()
    within_later_turns: WithinLater | None = absent()


TURN_PLACES = frozenset({K.TURN, K.TURN_KIND, K.KV_POSITION, K.TURN_POSITION})
"""Dimensions that place a token among the turns: a part of the run found on one of them may
be the turns after tool responses seen from there (long KV lengths live in later turns)."""


def by_later_turns(
    hits: list[Finding],
    later: Ratio,
    inside: dict[int, Ratio] | None = None,
) -> bool:
    """Every part found is placed among the turns and is not hotter than the later turns as a
    whole (its interval reaches down to their ratio, itself above ``TOOL_CI_LOW``) nor, within
    the later turns, than their other tokens (``inside``: hit index -> that contrast, see
    :func:`within_later`; none or under the localized pattern): the parts are the turns after
    tool responses seen by position, not a code path. A code path that only long contexts take
    is hotter than the later turns' shorter ones, and one elsewhere (a gpu, some steps alone)
    is not placed among the turns."""
    if later is None or later[1][0] < TOOL_CI_LOW or not hits:
        return False
    inside = inside or {}
    return all(
        TURN_PLACES.intersection(f.where)
        and f.rate_ratio_ci[0] <= later[0]
        and not hotter(inside.get(i))
        for i, f in enumerate(hits)
    )


def within_later(cube: Cube | None, f: Finding) -> Ratio:
    """A finding's part of the later turns against their other tokens at the same token
    probabilities (``stats.localize.contrast_within``): for a finding on one dimension beside
    the turns and the probability bin (``turn_position 16-63``, ``turn_kind later, kv_position
    128-255``); None otherwise, or without a cube. Tool turns that are each worse make every
    part of them alike (about 1); a path that only their long contexts take makes its part
    hotter than the rest of them."""
    if cube is None:
        return None
    spec = cube.spec
    named = {spec.dims[d].name: [int(c) for c in codes] for d, codes in f.region.items()}
    others = [n for n in named if n not in TOOL_DIMS and n != K.BIN]
    if len(others) != 1 or first_turns(f.where):
        return None
    (dim,) = others
    within = {K.TURN: named[K.TURN]} if K.TURN in named else {
        K.TURN_KIND: [TURN_KIND_LABELS.index("later")]
    }  # fmt: skip
    if K.BIN in named:
        within[K.BIN] = named[K.BIN]
    try:
        return contrast_within(cube, within, dim, named[dim], K.BIN, LEVEL)
    except KeyError:  # a dimension the cube does not hold
        return None


def firsts_on_gpus(runs: Iterable[LocalRun]) -> bool:
    """Whether each run's first code-path finding (the search's largest specific excess; the
    later ones may be it seen through other dimensions) lies on some gpus, alone or with other
    dimensions (``localized_run``'s evidence; runs with none are skipped)."""
    firsts = [run.code_path_findings[0] for run in runs if run.code_path_findings]
    return bool(firsts) and all(K.GPU in f.where for f in firsts)


def firsts_on_attribute(runs: Iterable[LocalRun]) -> tuple[str, str] | None:
    """The sample attribute (name, values) that every run's top code-path finding lies on, alone
    or with other dimensions (``data_source`` from ``attr:data_source``), or None."""
    found = set()
    for run in runs:
        if run.code_path_findings:
            where = run.code_path_findings[0].where
            attrs = [
                (k[len(K.ATTR_PREFIX) :], v)
                for k, v in where.items()
                if k.startswith(K.ATTR_PREFIX)
            ]
            if not attrs:
                return None
            found.add(attrs[0])
    return found.pop() if len(found) == 1 else None


def firsts_on_first_turns(runs: Iterable[LocalRun]) -> bool:
    """Whether each run's top code-path finding is the first turns alone (``localized_run``'s
    evidence ``first_turns``; runs with no code-path finding are skipped)."""
    firing = [run for run in runs if run.code_path_findings]
    return bool(firing) and all(run.first_turns for run in firing)


def holds(f: Finding) -> bool:
    """A part holds ``LOCAL_MIN_SHARE`` of the run's K3 mass beyond the rest's rate."""
    return (f.excess_share or 0.0) >= LOCAL_MIN_SHARE


def localized_run(
    expl: Explanation,
    later: Ratio = None,
    cube: Cube | None = None,
) -> tuple[str, str, LocalRun]:
    """The localized verdict of one run, its sentence and evidence; ``later``: the later turns'
    contrast, ``cube`` the run's, see :func:`by_later_turns` (evidence ``later_turns``, and
    ``within_later_turns`` when a part found is hotter than the rest of the later turns, said
    in the sentence); ``first_turns`` (True) when the top part is the first turns alone."""
    paths = [f for f in expl.findings if code_path(f)]
    graded = [
        (
            relative(
                f.rate_ratio, f.rate_ratio_ci, LOCAL_FACTOR, LOCAL_CI_LOW, LOCAL_FAIL,
                cell_level(expl, f),
            ),
            f,
        )
        for f in paths
    ]  # fmt: skip
    hits = [(v, f) for v, f in graded if v == FAIL or (v != OK and holds(f))]
    evidence = LocalRun(
        findings=[finding_row(expl, f) for f in expl.findings],
        code_path_findings=[finding_row(expl, f) for _, f in hits],
    )
    small = [f for v, f in graded if v != OK and not holds(f)]
    if not hits:
        finding = "no part of the run is hotter than the rest at the same token probabilities"
        if small:
            f = small[0]
            finding = (
                f"the hottest part, {finding_label(f)}, is {ratio_text(f.rate_ratio)}x the "
                f"rest ({ci_text(f.rate_ratio_ci)}) but holds {share(f.excess_share)} of the "
                f"run's K3 mass beyond the rest's rate: under the {share(LOCAL_MIN_SHARE)} "
                "that makes a part the run's fault"
            )
        elif paths:
            f = paths[0]
            finding = (
                f"the hottest part, {finding_label(f)}, is {ratio_text(f.rate_ratio)}x the "
                f"rest ({ci_text(f.rate_ratio_ci)}): under the {LOCAL_FACTOR:g}x that marks "
                "a code path"
            )
        elif expl.findings:  # every finding is on the turns
            f = expl.findings[0]
            finding = (
                f"the hottest part is among the turns, {finding_label(f)}: "
                f"{ratio_text(f.rate_ratio)}x the rest ({ci_text(f.rate_ratio_ci)}); no code "
                "path (the turns after tool responses: the tool_responses check)"
            )
        return OK, finding, evidence
    verdict = worst([v for v, _ in hits])
    top = next(f for v, f in hits if v == verdict)
    finding = (
        f"{finding_label(top)}: {ratio_text(top.rate_ratio)}x the rest of the run at the same "
        f"token probabilities ({ci_text(top.rate_ratio_ci)}), {share(top.token_share)} of "
        f"the tokens carrying {share(top.mass_share)} of the K3 mass"
    )
    if len(hits) > 1:
        finding += f"; {len(hits) - 1} more part(s)"
    if first_turns(top.where):
        evidence = dataclasses.replace(evidence, first_turns=True)
    if later is None:
        return verdict, finding, evidence
    parts = [f for _, f in hits]
    inside = {
        i: within_later(cube, f)
        for i, f in enumerate(parts)
        if TURN_PLACES.intersection(f.where) and later[1][0] >= TOOL_CI_LOW
    }
    hot = next((i for i, c in inside.items() if hotter(c)), None)
    found = None if hot is None else (parts[hot].where, *inside[hot])  # type: ignore[misc]
    if by_later_turns(parts, later, inside):
        found = long_kv_in_later(cube)  # the parts may be a KV path the search saw askew
        if found is None:
            evidence = dataclasses.replace(evidence, later_turns=True)
            finding += (
                f"; no hotter than the later turns as a whole ({ratio_text(later[0])}x the "
                "first turns: the tool_responses check)"
            )
            return verdict, finding, evidence
    if found is not None:
        where, ratio, ci = found
        within = WithinLater(where=where, rate_ratio=ratio, rate_ratio_ci=ci)
        evidence = dataclasses.replace(evidence, within_later_turns=within)
        label = ", ".join(f"{k} {v}" for k, v in where.items())
        finding += (
            f"; within the later turns, {label} is {ratio_text(ratio)}x their other tokens "
            f"({ci_text(ci)}): a path those turns take there, not the tool turns as a whole"
        )
    return verdict, finding, evidence


def long_kv_in_later(
    cube: Cube | None,
) -> tuple[dict[str, str], float, tuple[float, float]] | None:
    """The later turns' long KV positions against their other tokens at the same token
    probabilities: for each KV bin, the bins from it up (``kv_position >= edge``), judged at
    the localized pattern with the interval Bonferroni-corrected over the edges tried; the
    one with the highest interval low end, or None. Tool turns that are each worse are alike
    at every KV position; a kernel that only long contexts take makes the far positions of
    the later turns hotter than their near ones, whatever parts the search reported."""
    if cube is None or K.KV_POSITION not in (d.name for d in cube.spec.dims):
        return None
    spec = cube.spec
    d = spec.index(K.KV_POSITION)
    n = spec.levels(d)
    if n < 2 or spec.blocked(d):
        return None
    later = {K.TURN_KIND: [TURN_KIND_LABELS.index("later")]}
    level = 1 - (1 - LEVEL) / (n - 1)
    best = None
    for j in range(1, n):
        codes = list(range(j, n))
        c = contrast_within(cube, later, K.KV_POSITION, codes, K.BIN, level)
        if hotter(c) and (best is None or c[1][0] > best[2][0]):  # type: ignore[index]
            best = ({K.KV_POSITION: spec.level_label(d, codes)}, *c)  # type: ignore[misc]
    return best  # type: ignore[return-value]
