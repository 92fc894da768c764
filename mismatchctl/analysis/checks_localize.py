"""Checks of the inference-path layer that judge parts of a run against the rest of it, or the
selection against a baseline, at the same token probabilities (``explain``; docs/explain.md):
relative findings with intervals, whatever the absolute level (diagnose_thresholds)."""

from __future__ import annotations

import math
import shlex
from collections.abc import Iterable
from typing import Any

from mismatchctl.analysis import diagnose_thresholds as T
from mismatchctl.analysis.checks_template import template_fault
from mismatchctl.analysis.checks_trajectory import (
    GROWTH_STEPS_ADVICE,
    steps_are_growth,
    tagged_lags,
)
from mismatchctl.analysis.diagnose_base import (
    NA,
    OK,
    PATH,
    Check,
    Context,
    advice_if,
    baseline_on_other_gpus,
    ci_text,
    fmt,
    relative,
    worst,
)
from mismatchctl.engines import plan as K
from mismatchctl.stats import TURN_KIND_LABELS
from mismatchctl.stats import registry as M
from mismatchctl.stats.cube import Cube
from mismatchctl.stats.localize import contrast_within
from mismatchctl.stats.localize_result import (
    Explanation,
    Finding,
    finding_label,
    ratio_text,
    uniform_sentence,
)

TOOL_DIMS = frozenset({K.TURN, K.TURN_KIND})
"""Dimensions whose findings speak of the turns after tool responses (``tool_responses``); a
finding on any other dimension (steps, gpus, positions, engine order, sequence attributes) is
a code path that only part of the run takes."""

CODE_PATH_ADVICE = (
    "fix or disable that path, not the objective: the attention backend or its split-KV / "
    "cascade kernels (vLLM disable_cascade_attn=True), batch-invariant kernels, the engine "
    "version; importance sampling would only reweight the damage"
)


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


def finding_row(expl: Explanation, f: Finding) -> dict[str, Any]:
    return {
        "where": f.where,
        "sentence": f.sentence,
        M.TOKEN_SHARE.key: f.token_share,
        "mass_share": f.mass_share,
        "excess_share": f.excess_share,
        "rate_ratio": f.rate_ratio,
        "rate_ratio_ci": list(f.rate_ratio_ci),
        M.VLLM_KL.key: cell_level(expl, f),
    }


def localized(ctx: Context) -> Check:
    """A part of a run (steps, a gpu, positions, an engine batch...) hotter than the rest."""
    title = "A code path localized to part of a run"
    if not ctx.runs:
        return Check(PATH, "localized", title, NA, "no run to localize")
    later = later_turns(ctx)
    results = {name: localized_run(view.local, later, view.cube) for name, view in ctx.runs.items()}
    verdict = worst([v for v, _, _ in results.values()])
    shown = [run for run, (v, _, _) in results.items() if v == verdict]
    many = len(results) > 1
    finding = "; ".join((f"{run}: " if many else "") + results[run][1] for run in shown[:3])
    firing = [e for v, _, e in results.values() if v != OK]
    evidence = {
        "runs": {run: e for run, (_, _, e) in results.items()},
        "later_turns": bool(firing) and all(e.get("later_turns") for e in firing),
    }
    advice = STALE_LOCAL_ADVICE if stale(ctx) else CODE_PATH_ADVICE
    if firsts_on_gpus(firing):
        advice = GPU_LOCAL_ADVICE
    if firsts_on_first_turns(firing):
        advice = FIRST_TURNS_LOCAL_ADVICE
    attribute = firsts_on_attribute(firing)
    if attribute is not None:
        advice = attribute_advice(ctx.label, *attribute)
    if evidence["later_turns"]:
        advice = LATER_TURNS_LOCAL_ADVICE
    if steps_are_growth(ctx, evidence["runs"]):
        advice = GROWTH_STEPS_ADVICE
    if ends_fault(ctx):
        advice = ENDS_LOCAL_ADVICE
    if template_fault(ctx):
        advice = TEMPLATE_LOCAL_ADVICE
    return Check(PATH, "localized", title, verdict, finding, evidence, advice_if(verdict, advice))


def ends_fault(ctx: Context) -> bool:
    """The turn_ends check found the mismatch at the turns' last token (the stop)."""
    found = ctx.done.get("turn_ends")
    return found is not None and found.verdict not in (OK, NA)


ENDS_LOCAL_ADVICE = (
    "the mismatch sits at the last token of the turns (the turn_ends check): a hot part of the "
    "run by position is the stop handling seen from elsewhere; fix that first, then diagnose "
    "again"
)


TEMPLATE_LOCAL_ADVICE = (
    "the mismatch sits at the start of the turns after tool responses (the turn_edges check): "
    "a hot part of the run by position is that rendering fault seen from elsewhere; fix the "
    "template first, then diagnose again"
)

GPU_LOCAL_ADVICE = (
    "the part found lies on one gpu generation's tokens: the hardware, or a code path only "
    "that generation takes (kernels differ between them); see the hardware and cause checks"
)

STALE_LOCAL_ADVICE = (
    "the rollouts were made with older weights (the staleness check): a part of the run hotter "
    "than the rest may be where the policy moved most between versions (a larger update, a "
    "learning-rate change), not a code path; fix the weight lag first, then diagnose again"
)


FIRST_TURNS_LOCAL_ADVICE = (
    "the first turns (no tool response before them) are hotter than the turns after tool "
    "responses at the same token probabilities: what only they have is the prompt; compare the "
    "prompt's token ids on both sides (chat template, system prompt, BOS and special tokens) and "
    "how each side prefills it (chunked prefill, prefix caching); then diagnose again"
)


LATER_TURNS_LOCAL_ADVICE = (
    "no part found is hotter than the turns after tool responses as a whole: it is those turns "
    "seen by position (long KV lengths live in them), not a code path; see the tool_responses "
    "check"
)


TURN_PLACES = frozenset({K.TURN, K.TURN_KIND, K.KV_POSITION, K.TURN_POSITION})
"""Dimensions that place a token among the turns: a part of the run found on one of them may
be the turns after tool responses seen from there (long KV lengths live in later turns)."""


def later_turns(ctx: Context) -> tuple[float, tuple[float, float]] | None:
    """The later turns' rate against the first turns' at the same token probabilities and its
    95% interval (``tool_responses``), or None (no later turns, no cube)."""
    return ctx.contrast({K.TURN_KIND: [TURN_KIND_LABELS.index("later")]})


def by_later_turns(
    hits: list[Finding],
    later: tuple[float, tuple[float, float]] | None,
    inside: dict[int, tuple[float, tuple[float, float]] | None] | None = None,
) -> bool:
    """Every part found is placed among the turns and is not hotter than the later turns as a
    whole (its interval reaches down to their ratio, itself above ``TOOL_CI_LOW``) nor, within
    the later turns, than their other tokens (``inside``: hit index -> that contrast, see
    :func:`within_later`; none or under the localized pattern): the parts are the turns after
    tool responses seen by position, not a code path. A code path that only long contexts take
    is hotter than the later turns' shorter ones, and one elsewhere (a gpu, some steps alone)
    is not placed among the turns."""
    if later is None or later[1][0] < T.TOOL_CI_LOW or not hits:
        return False
    inside = inside or {}
    return all(
        TURN_PLACES.intersection(f.where)
        and f.rate_ratio_ci[0] <= later[0]
        and not _hotter(inside.get(i))
        for i, f in enumerate(hits)
    )


def _hotter(found: tuple[float, tuple[float, float]] | None) -> bool:
    """A contrast that shows the localized pattern (``LOCAL_FACTOR``, ``LOCAL_CI_LOW``)."""
    if found is None:
        return False
    return relative(found[0], found[1], T.LOCAL_FACTOR, T.LOCAL_CI_LOW, math.inf) != OK


def within_later(cube: Cube | None, f: Finding) -> tuple[float, tuple[float, float]] | None:
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
        return contrast_within(cube, within, dim, named[dim], K.BIN, T.LEVEL)
    except KeyError:  # a dimension the cube does not hold
        return None


def stale(ctx: Context) -> bool:
    """Some rollouts of the selection came from older weights (a weight version column or a
    weight-lag tag)."""
    lags = ctx.state.weight_lags.tokens
    return any(lag for lag, n in lags.items() if lag and n > 0) or any(tagged_lags(ctx).values())


def firsts_on_gpus(runs: Iterable[dict[str, Any]]) -> bool:
    """Whether each run's first code-path finding (the search's largest specific excess; the
    later ones may be it seen through other dimensions) lies on some gpus, alone or with other
    dimensions (``localized_run``'s evidence; runs with none are skipped)."""
    firsts = [run["code_path_findings"][0] for run in runs if run["code_path_findings"]]
    return bool(firsts) and all(K.GPU in f["where"] for f in firsts)


def firsts_on_attribute(runs: Iterable[dict[str, Any]]) -> tuple[str, str] | None:
    """The sample attribute (name, values) that every run's top code-path finding lies on, alone
    or with other dimensions (``data_source`` from ``attr:data_source``), or None."""
    found = set()
    for run in runs:
        if run["code_path_findings"]:
            where = run["code_path_findings"][0]["where"]
            attrs = [
                (k[len(K.ATTR_PREFIX) :], v)
                for k, v in where.items()
                if k.startswith(K.ATTR_PREFIX)
            ]
            if not attrs:
                return None
            found.add(attrs[0])
    return found.pop() if len(found) == 1 else None


def attribute_advice(label: str, name: str, values: str) -> str:
    """What to do about a part of the run that is the samples of some attribute values."""
    look = f"`mismatchctl tokens {shlex.quote(label)} --where attr:{name}={values}`"
    if "," in values:
        look = f"`mismatchctl tokens {shlex.quote(label)} --where attr:{name}=VALUE`"
    return (
        f"the part found is the samples with {name} {values}: what those requests take that "
        "the others do not (their prompt template or tokenization, a per-source sampling "
        "setting, the replica or engine that served them, their context lengths), rather than "
        f"a kernel every request takes; compare their tokens on both sides ({look}), then "
        "diagnose again"
    )


def firsts_on_first_turns(runs: Iterable[dict[str, Any]]) -> bool:
    """Whether each run's top code-path finding is the first turns alone (``localized_run``'s
    evidence ``first_turns``; runs with no code-path finding are skipped)."""
    firing = [run for run in runs if run["code_path_findings"]]
    return bool(firing) and all(run.get("first_turns") for run in firing)


def localized_run(
    expl: Explanation,
    later: tuple[float, tuple[float, float]] | None = None,
    cube: Cube | None = None,
) -> tuple[str, str, dict[str, Any]]:
    """The localized verdict of one run, its sentence and evidence; ``later``: the later turns'
    contrast, ``cube`` the run's, see :func:`by_later_turns` (evidence ``later_turns``, and
    ``within_later_turns`` when a part found is hotter than the rest of the later turns, said
    in the sentence); ``first_turns`` (True) when the top part is the first turns alone."""
    paths = [f for f in expl.findings if code_path(f)]
    graded = [
        (
            relative(
                f.rate_ratio, f.rate_ratio_ci, T.LOCAL_FACTOR, T.LOCAL_CI_LOW, T.LOCAL_FAIL,
                cell_level(expl, f),
            ),
            f,
        )
        for f in paths
    ]  # fmt: skip
    hits = [(v, f) for v, f in graded if v != OK]
    evidence: dict[str, Any] = {
        "findings": [finding_row(expl, f) for f in expl.findings],
        "code_path_findings": [finding_row(expl, f) for _, f in hits],
    }
    if not hits:
        finding = "no part of the run is hotter than the rest at the same token probabilities"
        if paths:
            f = paths[0]
            finding = (
                f"the hottest part, {finding_label(f)}, is {ratio_text(f.rate_ratio)}x the "
                f"rest ({ci_text(f.rate_ratio_ci)}): under the {T.LOCAL_FACTOR:g}x that marks "
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
        f"token probabilities ({ci_text(top.rate_ratio_ci)}), {_share(top.token_share)} of "
        f"the tokens carrying {_share(top.mass_share)} of the K3 mass"
    )
    if len(hits) > 1:
        finding += f"; {len(hits) - 1} more part(s)"
    if first_turns(top.where):
        evidence["first_turns"] = True
    if later is None:
        return verdict, finding, evidence
    parts = [f for _, f in hits]
    inside = {
        i: within_later(cube, f)
        for i, f in enumerate(parts)
        if TURN_PLACES.intersection(f.where) and later[1][0] >= T.TOOL_CI_LOW
    }
    hot = next((i for i, c in inside.items() if _hotter(c)), None)
    found = None if hot is None else (parts[hot].where, *inside[hot])  # type: ignore[misc]
    if by_later_turns(parts, later, inside):
        found = long_kv_in_later(cube)  # the parts may be a KV path the search saw askew
        if found is None:
            evidence["later_turns"] = True
            finding += (
                f"; no hotter than the later turns as a whole ({ratio_text(later[0])}x the "
                "first turns: the tool_responses check)"
            )
            return verdict, finding, evidence
    if found is not None:
        where, ratio, ci = found
        evidence["within_later_turns"] = {
            "where": where, "rate_ratio": ratio, "rate_ratio_ci": list(ci)
        }  # fmt: skip
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
    level = 1 - (1 - T.LEVEL) / (n - 1)
    best = None
    for j in range(1, n):
        codes = list(range(j, n))
        c = contrast_within(cube, later, K.KV_POSITION, codes, K.BIN, level)
        if _hotter(c) and (best is None or c[1][0] > best[2][0]):  # type: ignore[index]
            best = ({K.KV_POSITION: spec.level_label(d, codes)}, *c)  # type: ignore[misc]
    return best  # type: ignore[return-value]


def _share(x: float | None) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{100 * x:.0f}%"


def baseline(ctx: Context) -> Check:
    """The selection's mismatch against ``--baseline`` at its own token mix."""
    title = "Against the baseline"
    view = ctx.baseline
    if view is None:
        return Check(
            PATH, "baseline", title, NA, "no baseline given", {},
            "give a known-good run (or the same run's early steps) with --baseline REF: every "
            "excess is then judged against it",
        )  # fmt: skip
    e = view.explanation
    ratio, ci = e.rate_ratio, e.rate_ratio_ci
    evidence = {
        "baseline": view.label,
        M.VLLM_KL.key: e.vllm_kl,
        "baseline_vllm_kl": e.baseline_vllm_kl,
        "rate_ratio": ratio,
        "rate_ratio_ci": None if ci is None else list(ci),
        "findings": [finding_row(e, f) for f in e.findings],
        "uniform": [u.dim for u in e.uniform if u.uniform],
        "decomposition": [
            {"dim": d.dim, "mix": d.mix, "rate": d.rate, "interaction": d.interaction}
            for d in e.decomposition
        ],
        "notes": e.notes,
    }
    head = (
        f"vllm_kl {fmt(e.vllm_kl)} vs {fmt(e.baseline_vllm_kl)} on {view.label}: "
        f"{ratio_text(ratio)}x its rate at the same token mix ({ci_text(ci)})"
    )
    if ratio is None or ci is None:
        return Check(PATH, "baseline", title, NA, head + "; no rate ratio", evidence)
    if ci[1] < T.IMPROVED_CI_HIGH:
        evidence["improved"] = True
        return Check(PATH, "baseline", title, OK, head + ": an improvement", evidence)
    verdict = relative(ratio, ci, T.BASELINE_FACTOR, T.BASELINE_CI_LOW, T.BASELINE_FAIL, e.vllm_kl)
    if verdict == OK:
        return Check(PATH, "baseline", title, OK, head + ": no excess to speak of", evidence)
    shape = excess_shape(e)
    evidence["excess_shape"] = shape
    explain = f"`mismatchctl explain {ctx.label} --baseline {view.label}`"
    advice = {
        "localized": f"the excess is localized: see the localized finding and {explain}",
        "concentrated": "the excess sits in a few tokens (see the low-probability check, "
        f"`mismatchctl tokens {ctx.label}` and {explain}), not in the policy",
    }.get(
        shape,
        "the excess is spread over every part of the run: compare the weights the engine "
        "sampled with against the trainer's (see the cause check)",
    )
    other = baseline_on_other_gpus(ctx) if shape == "uniform" else None
    if other is not None:
        advice = (
            f"the excess is spread over every part of the run, which ran on {', '.join(other[0])} "
            f"while the baseline ran on {', '.join(other[1])}: another gpu generation's kernels "
            "or the policy (see the cause check)"
        )
    where = ""
    if e.findings and shape == "localized":
        where = f"; most of it in {finding_label(e.findings[0])}"
    elif shape == "uniform":
        names = ", ".join(u.dim for u in e.uniform if u.uniform)
        where = f"; spread uniformly ({names} explain nothing)"
    elif shape == "concentrated":
        u = next(u for u in e.uniform if u.excess_elsewhere)
        evidence["concentrated_in"] = u.dim
        where = f"; not a uniform excess: {uniform_sentence(u, e.mode)}"
    return Check(PATH, "baseline", title, verdict, head + where, evidence, advice)


def excess_shape(e: Explanation) -> str:
    """``localized`` when one finding carries ``LOCALIZED_EXCESS_SHARE`` of the excess;
    ``concentrated`` when a dimension's values with enough tokens to test hold too little of it
    (``uniform_excess_share`` of stats/localize_thresholds.py: the excess sits in values too
    small to test, such as the rare tokens' bins); ``uniform`` when at least
    ``UNIFORM_DIMS_MIN`` dimensions explain nothing; else ``mixed``."""
    top = max((f.excess_share or 0.0 for f in e.findings), default=0.0)
    if top >= T.LOCALIZED_EXCESS_SHARE:
        return "localized"
    if any(u.excess_elsewhere for u in e.uniform):
        return "concentrated"
    if sum(u.uniform for u in e.uniform) >= T.UNIFORM_DIMS_MIN:
        return "uniform"
    return "mixed"


__all__ = [
    "attribute_advice",
    "baseline",
    "code_path",
    "excess_shape",
    "firsts_on_attribute",
    "firsts_on_first_turns",
    "firsts_on_gpus",
    "localized",
    "localized_run",
]
