"""The most likely cause, named from what the other checks found, with its remedy: the first
cause whose checks fire, in the order to fix them (``name_cause``). The causes are named here:
each a key (``Cause.key``, the evidence ``cause``), the checks that point at it, and its
remedy."""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from dataclasses import dataclass

from mismatchctl.analysis.diagnose.advice import (
    CODE_PATH_ADVICE,
    FIRST_TURNS_LOCAL_ADVICE,
    HARDWARE_ADVICE,
    LOW_PROB_ADVICE,
    POLICY_SIGNS_ADVICE,
    PROCESSED_HINT,
    REPLAY_ADVICE,
    STALE_ADVICE,
    STOP_ADVICE,
    TEMPLATE_ADVICE,
    attribute_advice,
)
from mismatchctl.analysis.diagnose.cause_evidence import (
    excess_in_rare_bins,
    gpu_only,
    growth_by_steps,
    later_by_position_advice,
    names_of,
    other_gpus_advice,
)
from mismatchctl.analysis.diagnose.check import (
    DATA,
    FAIL,
    OBJECTIVE,
    OK,
    SEMANTIC,
    WARN,
    Check,
    CheckModule,
    Every,
    fired,
    worst,
)
from mismatchctl.analysis.diagnose.checks import (
    baseline,
    hardware,
    hot_sequences,
    localized,
    low_probability,
    policy_signs,
    regimes,
    routing_flips,
    spikes,
    spiral,
    staleness,
    token_classes,
    tool_responses,
    trend,
    turn_edges,
    turn_ends,
)
from mismatchctl.analysis.diagnose.checks.policy_signs import CODE_PATH_CHECKS
from mismatchctl.analysis.diagnose.context import Context, baseline_on_other_gpus
from mismatchctl.analysis.diagnose.levels import MEDIUM_MAX
from mismatchctl.analysis.diagnose.parts import (
    firsts_on_attribute,
    firsts_on_first_turns,
)
from mismatchctl.analysis.diagnose.text import fmt

NAME = "cause"
LAYER = OBJECTIVE
TITLE = "Most likely cause"
ORDER = 300
READS: tuple[CheckModule | Every, ...] = (
    Every(DATA),
    Every(SEMANTIC),
    baseline,
    localized,
    low_probability,
    tool_responses,
    hardware,
    hot_sequences,
    routing_flips,
    spikes,
    regimes,
    trend,
    spiral,
    staleness,
    policy_signs,
)
"""Every check of the data and semantic layers (a failure there is the first cause), and those
that point at a cause."""


@dataclass(frozen=True)
class Thresholds:
    """None of its own: ``MEDIUM_MAX`` for a mismatch with no cause found, and the thresholds of
    the checks it reads where it asks what they ask (low_probability's ``LOWPROB_CONCENTRATION``
    for the rare tokens' excess over a baseline, the steps' ``REGIME_FACTOR`` for steps that
    follow a gpu)."""


T = Thresholds()

# the data-integrity checks that name a chat-template, rendering or tokenization fault
TEMPLATE_CHECKS: tuple[CheckModule, ...] = (turn_edges, token_classes)


@dataclass
class Cause:
    key: str  # data, template, turn ends, semantic, policy, routing, code path, hardware,
    # sequences, tool responses, low probability, growth, unlocalized, none
    verdict: str
    finding: str
    remedy: str | None
    checks: list[str]


def _hits(ctx: Context, checks: Iterable[CheckModule]) -> list[Check]:
    return [found for c in checks if fired(found := ctx.result(c))]


def _layer_hits(ctx: Context, layer: str, verdicts: tuple[str, ...]) -> list[Check]:
    return [c for c in ctx.results(layer) if c.verdict in verdicts]


def name_cause(ctx: Context) -> Cause:
    """The first cause whose checks fire, in the order to fix them (BACKGROUND.md): data, a
    chat-template or rendering fault, the stop handled differently (the turns' last token), the
    two sides' distributions, stale weights, MoE routing flips carrying the mismatch, the policy
    (a uniform excess over a baseline), a code path, another policy (responses leaning one way,
    once no code path explains them), some sequences (requests) hotter than their peers, the
    tool turns, the unlikely tokens, a growth with no other explanation."""
    data = [
        c
        for c in _layer_hits(ctx, DATA, (FAIL,))
        if c.name not in names_of(*TEMPLATE_CHECKS, turn_ends)
    ]
    if data:
        return _cause("data", data, "fix the data problems first; every other number mixes them in")
    template = _hits(ctx, TEMPLATE_CHECKS)
    if template:
        advice = template[0].next or TEMPLATE_ADVICE
        return _cause("template", template, advice, "chat template or rendering")
    ends = _hits(ctx, [turn_ends])
    if ends:
        return _cause("turn ends", ends, STOP_ADVICE, "stop handling (the turns' last token)")
    semantic = _layer_hits(ctx, SEMANTIC, (WARN, FAIL))
    if semantic:
        return _cause("semantic", semantic, PROCESSED_HINT)
    stale = _hits(ctx, [staleness])
    if stale:
        return _cause("policy", stale, STALE_ADVICE, "stale weights")
    routing = _hits(ctx, [routing_flips])
    if routing:  # measured on the tokens themselves: before what a baseline or a search infers
        return _cause("routing", routing, REPLAY_ADVICE, "MoE routing flips")
    base = ctx.result(baseline)
    shape = base.evidence.get("excess_shape") if base is not None else None
    # a localized part that is the later turns seen by position is the tool turns' (below)
    paths = [c for c in _hits(ctx, CODE_PATH_CHECKS) if not c.evidence.get("later_turns")]
    paths = [c for c in paths if not growth_by_steps(ctx, c)]  # a growth seen step by step
    some = _hits(ctx, [hot_sequences])  # an excess in some requests is not the policy's
    # responses leaning one way: another policy, once no code path explains the run (a biased
    # kernel can make the sequences it hits lean too: the sample spiky-6's faulty step)
    signs = _hits(ctx, [policy_signs]) + _hits(ctx, [baseline])
    if base is not None and base.verdict in (WARN, FAIL) and shape == "uniform" and not paths:
        if signs[0].name == policy_signs.NAME:
            return _cause("policy", signs, POLICY_SIGNS_ADVICE, "another policy")
        if some:
            return _cause("sequences", some, some[0].next, "some requests")
        other = baseline_on_other_gpus(ctx)
        if other is not None:
            return _cause(
                "hardware", [base], other_gpus_advice(*other),
                "uniform excess over a baseline on other gpus",
            )  # fmt: skip
        return _cause(
            "policy", [base],
            "the excess over the baseline is the same everywhere: the rollouts' policy is not "
            "the trainer's (stale or wrong weights, a weight sync that did not land, another "
            "checkpoint or LoRA state): compare the weight versions of both sides; importance "
            "sampling would not fix it",
            "uniform excess over the baseline",
        )  # fmt: skip
    if paths:
        if gpu_only(ctx, paths):
            gpu = next((c for c in paths if c.name == hardware.NAME), paths[0])
            # the localized check's own advice names a code path: a gpu needs the hardware's
            remedy = gpu.next if gpu.name == hardware.NAME else None
            return _cause(
                "hardware", [gpu, *(c for c in paths if c is not gpu)],
                remedy or HARDWARE_ADVICE,
            )  # fmt: skip
        local = next((c for c in paths if c.name == localized.NAME), None)
        runs = local.evidence["runs"].values() if local is not None else []
        ordered = [local, *(c for c in paths if c is not local)] if local is not None else paths
        if local is not None and firsts_on_first_turns(runs):
            return _cause(
                "code path", ordered, FIRST_TURNS_LOCAL_ADVICE, "code path (the first turns)"
            )
        attribute = firsts_on_attribute(runs) if local is not None else None
        if attribute is not None:
            return _cause(
                "code path", ordered, attribute_advice(ctx.label, *attribute),
                f"code path (the samples with {attribute[0]} {attribute[1]})",
            )  # fmt: skip
        # the tool turns' excess that the tool check lays at the path's door is the path's too
        deferred = [c for c in _hits(ctx, [tool_responses]) if c.evidence.get("code_path")]
        return _cause("code path", paths + deferred, CODE_PATH_ADVICE)
    # with a baseline that sees an excess, it too
    if signs and signs[0].name == policy_signs.NAME:
        return _cause("policy", signs, POLICY_SIGNS_ADVICE, "another policy")
    for key, checks in (
        ("sequences", [hot_sequences]),
        ("tool responses", [tool_responses]),
        ("low probability", [low_probability]),
        ("growth", [trend, spiral]),
    ):
        hits = _hits(ctx, checks)
        if hits:
            return _cause(key, hits, hits[0].next, "some requests" if key == "sequences" else None)
        later = [c for c in _hits(ctx, [localized]) if c.evidence.get("later_turns")]
        if key == "tool responses" and later:  # the later turns, found by position only
            return _cause(key, later, later_by_position_advice(ctx))
        if key == "low probability" and excess_in_rare_bins(ctx, base):
            assert base is not None
            return _cause(
                key, [base], LOW_PROB_ADVICE, "low probability (the excess in the rare tokens)"
            )
    if base is not None and base.verdict in (WARN, FAIL):
        return _cause(
            "unlocalized", [base],
            f"`mismatchctl explain {shlex.quote(ctx.label)} --baseline "
            f"{shlex.quote(str(base.evidence.get('baseline')))}` shows where the excess is",
        )  # fmt: skip
    data_warn = _layer_hits(ctx, DATA, (WARN,))
    if data_warn:
        return _cause("data", data_warn, data_warn[0].next)
    vk = ctx.vllm_kl or 0.0
    if vk > MEDIUM_MAX:
        return Cause(
            "unlocalized", WARN,
            f"vllm_kl {fmt(vk)} with no localized part, no semantic sign and no weight lag: a "
            "policy mismatch or a uniformly imprecise numeric path",
            "give a known-good run with --baseline to tell them apart, and check the weight "
            "versions of both sides",
            [],
        )  # fmt: skip
    return Cause(
        "none", OK, "no cause found: nothing localized, no semantic or policy sign", None, []
    )


def _cause(key: str, checks: list[Check], remedy: str | None, label: str | None = None) -> Cause:
    verdict = worst([c.verdict for c in checks])
    top = next(c for c in checks if c.verdict == verdict)
    detail = top.finding if top.finding.startswith(top.name) else f"{top.name}: {top.finding}"
    name = label or key
    finding = detail if name == top.name else f"{name}: {detail}"
    return Cause(key, verdict, finding, remedy, [c.name for c in checks])


FIXABLE = (
    "policy",
    "routing",
    "code path",
    "hardware",
    "sequences",
    "semantic",
    "data",
    "template",
)
"""The causes whose fix is the remedy, a correction at most a stopgap (the objective check)."""


def named(ctx: Context) -> str:
    """The key of the cause this check named (for the checks that read it)."""
    found = ctx.result(NAME)
    assert found is not None  # the cause check always applies
    return found.evidence["cause"]


def run(ctx: Context) -> Check:
    found = name_cause(ctx)
    evidence = {"cause": found.key, "checks": found.checks}
    return Check(
        LAYER, NAME, TITLE, found.verdict, found.finding, evidence,
        found.remedy if found.verdict in (WARN, FAIL) else None,
    )  # fmt: skip
