"""Checks of the objective layer: the most likely cause, named from what the other layers found,
with its remedy; then whether an objective-side correction is warranted and would help."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

from mismatchctl.analysis import diagnose_thresholds as T
from mismatchctl.analysis.checks_data import PROCESSED_HINT
from mismatchctl.analysis.checks_ends import STOP_ADVICE
from mismatchctl.analysis.checks_localize import (
    CODE_PATH_ADVICE,
    FIRST_TURNS_LOCAL_ADVICE,
    attribute_advice,
    firsts_on_attribute,
    firsts_on_first_turns,
    firsts_on_gpus,
)
from mismatchctl.analysis.checks_path import HARDWARE_ADVICE, LOW_PROB_ADVICE
from mismatchctl.analysis.checks_policy import CODE_PATH_CHECKS, POLICY_SIGNS_ADVICE
from mismatchctl.analysis.checks_routing import REPLAY_ADVICE
from mismatchctl.analysis.checks_template import TEMPLATE_ADVICE
from mismatchctl.analysis.checks_trajectory import (
    STALE_ADVICE,
    regimes_are_growth,
    steps_are_growth,
)
from mismatchctl.analysis.diagnose_base import (
    DATA,
    FAIL,
    MAX_LISTED,
    OBJECTIVE,
    OK,
    SEMANTIC,
    WARN,
    Check,
    Context,
    baseline_on_other_gpus,
    fmt,
    pct,
    worst,
)
from mismatchctl.engines import plan as K
from mismatchctl.stats import registry as M

# the data-integrity checks that name a chat-template, rendering or tokenization fault
TEMPLATE_CHECKS = ("turn_edges", "token_classes")


@dataclass
class Cause:
    key: str  # data, template, turn ends, semantic, policy, routing, code path, hardware,
    # sequences, tool responses, low probability, growth, unlocalized, none
    verdict: str
    finding: str
    remedy: str | None
    checks: list[str]


def _hits(ctx: Context, names: tuple[str, ...] | list[str]) -> list[Check]:
    return [ctx.done[n] for n in names if n in ctx.done and ctx.done[n].verdict in (WARN, FAIL)]


def _layer_hits(ctx: Context, layer: str, verdicts: tuple[str, ...]) -> list[Check]:
    return [c for c in ctx.done.values() if c.layer == layer and c.verdict in verdicts]


def name_cause(ctx: Context) -> Cause:
    """The first cause whose checks fire, in the order to fix them (BACKGROUND.md): data, a
    chat-template or rendering fault, the stop handled differently (the turns' last token), the
    two sides' distributions, stale weights, MoE routing flips carrying the mismatch, the policy
    (a uniform excess over a baseline), a code path, another policy (responses leaning one way,
    once no code path explains them), some sequences (requests) hotter than their peers, the
    tool turns, the unlikely tokens, a growth with no other explanation."""
    data = [
        c for c in _layer_hits(ctx, DATA, (FAIL,)) if c.name not in (*TEMPLATE_CHECKS, "turn_ends")
    ]
    if data:
        return _cause("data", data, "fix the data problems first; every other number mixes them in")
    template = _hits(ctx, TEMPLATE_CHECKS)
    if template:
        advice = template[0].next or TEMPLATE_ADVICE
        return _cause("template", template, advice, "chat template or rendering")
    ends = _hits(ctx, ["turn_ends"])
    if ends:
        return _cause("turn ends", ends, STOP_ADVICE, "stop handling (the turns' last token)")
    semantic = _layer_hits(ctx, SEMANTIC, (WARN, FAIL))
    if semantic:
        return _cause("semantic", semantic, PROCESSED_HINT)
    stale = _hits(ctx, ["staleness"])
    if stale:
        return _cause("policy", stale, STALE_ADVICE, "stale weights")
    routing = _hits(ctx, ["routing_flips"])
    if routing:  # measured on the tokens themselves: before what a baseline or a search infers
        return _cause("routing", routing, REPLAY_ADVICE, "MoE routing flips")
    base = ctx.done.get("baseline")
    shape = base.evidence.get("excess_shape") if base is not None else None
    # a localized part that is the later turns seen by position is the tool turns' (below)
    paths = [c for c in _hits(ctx, CODE_PATH_CHECKS) if not c.evidence.get("later_turns")]
    paths = [c for c in paths if not _growth_by_steps(ctx, c)]  # a growth seen step by step
    some = _hits(ctx, ["hot_sequences"])  # an excess in some requests is not the policy's
    # responses leaning one way: another policy, once no code path explains the run (a biased
    # kernel can make the sequences it hits lean too: the sample spiky-6's faulty step)
    signs = _hits(ctx, ["policy_signs"]) + _hits(ctx, ["baseline"])
    if base is not None and base.verdict in (WARN, FAIL) and shape == "uniform" and not paths:
        if signs[0].name == "policy_signs":
            return _cause("policy", signs, POLICY_SIGNS_ADVICE, "another policy")
        if some:
            return _cause("sequences", some, some[0].next, "some requests")
        other = baseline_on_other_gpus(ctx)
        if other is not None:
            return _cause(
                "hardware", [base], _other_gpus_advice(*other),
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
        if _gpu_only(ctx, paths):
            hardware = next((c for c in paths if c.name == "hardware"), paths[0])
            # the localized check's own advice names a code path: a gpu needs the hardware's
            remedy = hardware.next if hardware.name == "hardware" else None
            return _cause(
                "hardware", [hardware, *(c for c in paths if c is not hardware)],
                remedy or HARDWARE_ADVICE,
            )  # fmt: skip
        local = next((c for c in paths if c.name == "localized"), None)
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
        deferred = [c for c in _hits(ctx, ["tool_responses"]) if c.evidence.get("code_path")]
        return _cause("code path", paths + deferred, CODE_PATH_ADVICE)
    if signs and signs[0].name == "policy_signs":  # with a baseline that sees an excess, it too
        return _cause("policy", signs, POLICY_SIGNS_ADVICE, "another policy")
    for key, names in (
        ("sequences", ["hot_sequences"]),
        ("tool responses", ["tool_responses"]),
        ("low probability", ["low_probability"]),
        ("growth", ["trend", "spiral"]),
    ):
        hits = _hits(ctx, names)
        if hits:
            return _cause(key, hits, hits[0].next, "some requests" if key == "sequences" else None)
        later = [c for c in _hits(ctx, ["localized"]) if c.evidence.get("later_turns")]
        if key == "tool responses" and later:  # the later turns, found by position only
            return _cause(key, later, _later_by_position_advice(ctx))
        if key == "low probability" and _excess_in_rare_bins(ctx, base):
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
    if vk > T.MEDIUM_MAX:
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


def _later_by_position_advice(ctx: Context) -> str:
    label = shlex.quote(ctx.label)
    return (
        "the later turns, seen by position, are hotter than the rest at the same token "
        "probabilities (the localized check), a little under the tool_responses check's "
        f"{T.TOOL_RATIO_WARN:g}x as a whole: look at the worst later turns (`mismatchctl tokens "
        f"{label} --where turn_kind=later`), how the two sides take in the tool output (its "
        "token ids on both sides, the engine's prefill and prefix caching of it); a code path "
        f"that only long contexts take looks the same: `mismatchctl explain {label}` by "
        "kv_position"
    )


def _excess_in_rare_bins(ctx: Context, base: Check | None) -> bool:
    """The run is worse than the baseline, but its probability bins with enough tokens to test
    are not: the excess sits in the bins too small to test, and the low-probability bins hold
    ``LOWPROB_CONCENTRATION`` times their share of tokens in K3 (the rare tokens, below the
    level at which the low-probability check alone warns)."""
    if base is None or base.verdict not in (WARN, FAIL):
        return False
    if base.evidence.get("concentrated_in") != K.BIN:
        return False
    low = ctx.done.get("low_probability")
    concentration = low.evidence.get("concentration") if low is not None else None
    return concentration is not None and concentration >= T.LOWPROB_CONCENTRATION


def _gpu_only(ctx: Context, paths: list[Check]) -> bool:
    """The code-path findings point at gpus: the hardware check; the localized check's first
    finding in each run (the search's largest specific excess; the later ones may be that one
    seen through other dimensions, which the cube cannot always tell) on some gpus, alone or
    with other dimensions (a long-context kernel that only one gpu generation takes is that
    hardware's); and elevated steps that are the hottest gpu's (``_steps_follow_gpu``)."""
    names = {c.name for c in paths}
    if names - {"hardware", "localized", *STEP_CHECKS} or not names & {"hardware", "localized"}:
        return False
    steps = [c for c in paths if c.name in STEP_CHECKS]
    if steps and not _steps_follow_gpu(ctx, steps):
        return False
    local = next((c for c in paths if c.name == "localized"), None)
    return local is None or firsts_on_gpus(local.evidence["runs"].values())


STEP_CHECKS = ("regimes", "spikes")


def _other_gpus_advice(mine: list[str], theirs: list[str]) -> str:
    return (
        f"the run ran on {', '.join(mine)}, the baseline on {', '.join(theirs)}: an excess "
        "spread over every part of the run is what another gpu generation's kernels give (or a "
        "policy mismatch: the data cannot tell them apart); compare with a baseline on the same "
        f"gpus (or a few steps of this run on {theirs[0]}), and the weight versions of both sides; "
        f"{HARDWARE_ADVICE}"
    )


def _growth_by_steps(ctx: Context, check: Check) -> bool:
    """A code-path hit that is only a smooth growth seen step by step: the regimes check, or a
    localized check whose first finding in each run is a set of steps, where every run it
    speaks of rises (the trend check) and follows its line at least as closely as any change
    point (``StepTrend.smooth``). A fault that switches on at one step keeps its two levels and
    stays a code path; a part of the run at other dimensions (a gpu, long KV positions) too."""
    if check.name == "regimes":
        return regimes_are_growth(ctx)
    if check.name == "localized":
        return steps_are_growth(ctx, check.evidence["runs"])
    return False


def _steps_follow_gpu(ctx: Context, steps: list[Check]) -> bool:
    """The elevated steps of the step checks are the hottest gpu's (one run; that gpu by the
    hardware check): on the other gpus together, those steps' vllm_kl is under
    ``REGIME_FACTOR`` times the other steps' (a gpu whose fault grows over the run makes a
    step change of the whole run; a fault of some steps on every gpu stays a code path)."""
    hardware = ctx.done.get("hardware")
    factors = hardware.evidence.get("factor_over_others_median") if hardware else None
    if len(ctx.runs) != 1 or not factors:
        return False
    hot = max(factors, key=lambda g: factors[g] or 0.0)
    for check in steps:
        (run,) = check.evidence["runs"].values()
        elevated = {str(s) for s in run.get("elevated_steps", [])}
        if not elevated or len(elevated) >= MAX_LISTED:  # none, or the list is cut short
            return False
        sums = {True: [0.0, 0.0], False: [0.0, 0.0]}  # elevated? -> [tokens, K3 mass]
        for g in ctx.report.split(K.GPU, K.STEP):
            n, vk = g.metrics.get(M.TOKENS), g.metrics.get(M.VLLM_KL)
            if g.by[K.GPU] in (hot, None) or not n or vk is None:
                continue
            row = sums[str(g.by[K.STEP]) in elevated]
            row[0] += n
            row[1] += vk * n
        (n_e, a_e), (n_o, a_o) = sums[True], sums[False]
        if not (n_e and n_o and a_o > 0):
            return False
        if (a_e / n_e) / (a_o / n_o) >= T.REGIME_FACTOR:
            return False
    return True


def _cause(key: str, checks: list[Check], remedy: str | None, label: str | None = None) -> Cause:
    verdict = worst([c.verdict for c in checks])
    top = next(c for c in checks if c.verdict == verdict)
    detail = top.finding if top.finding.startswith(top.name) else f"{top.name}: {top.finding}"
    name = label or key
    finding = detail if name == top.name else f"{name}: {detail}"
    return Cause(key, verdict, finding, remedy, [c.name for c in checks])


def cause(ctx: Context) -> Check:
    found = name_cause(ctx)
    evidence = {"cause": found.key, "checks": found.checks}
    return Check(
        OBJECTIVE, "cause", "Most likely cause", found.verdict, found.finding, evidence,
        found.remedy if found.verdict in (WARN, FAIL) else None,
    )  # fmt: skip


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


def objective(ctx: Context) -> Check:
    """Is an objective-side correction warranted, and would it help?"""
    title = "Is a correction warranted?"
    severe = ctx.done.get("severe_batches")
    shares = [
        e["severe_share"] for e in (severe.evidence if severe else {}).get("runs", {}).values()
    ]
    severe_share = max(shares, default=0.0)
    vk = ctx.vllm_kl or 0.0
    found = ctx.done["cause"].evidence["cause"]
    evidence: dict[str, Any] = {
        M.VLLM_KL: vk,
        "severe_share_max": severe_share,
        "seq_mis_2": ctx.seq_mis,
        "cause": found,
    }
    upstream = [c for c in ctx.done.values() if c.layer in (DATA, SEMANTIC) and c.verdict == FAIL]
    if upstream:
        names = ", ".join(c.name for c in upstream)
        return Check(
            OBJECTIVE, "objective", title, WARN,
            f"not yet: {names} failed; a correction would hide a data or semantic problem",
            evidence, "fix the data and semantic problems first, then diagnose again",
        )  # fmt: skip
    needed = vk > T.MEDIUM_MAX or severe_share >= T.SEVERE_FAIL_SHARE
    sane, why = _sane(ctx)
    evidence["correction_sane"] = sane
    fix = f"fix the cause ({found}, see the cause check)" if found in FIXABLE else None
    if not needed:
        word = "optional" if vk > T.LOW_MAX else "not needed"
        finding = (
            f"{word}: vllm_kl {fmt(vk)}, at most {pct(severe_share)} of a run's batches severe"
        )
        if fix:
            finding += f"; {fix}: a correction would only reweight it"
        return Check(OBJECTIVE, "objective", title, OK, finding, evidence, None)
    head = f"vllm_kl {fmt(vk)}, up to {pct(severe_share)} of a run's batches severe"
    if not sane:
        return Check(
            OBJECTIVE, "objective", title, WARN,
            f"{head}, but a correction would discard the signal ({why})",
            evidence, (fix or "find the cause (`mismatchctl explain`)")
            + ": no correction keeps enough of the batch to learn from",
        )  # fmt: skip
    finding = f"yes: {head}{_seq_mis_text(ctx)}"
    advice = _advice(ctx, severe_share)
    if fix:
        finding = f"as a stopgap: {head}{_seq_mis_text(ctx)}"
        advice = f"{fix}; until then, {advice}"
    return Check(OBJECTIVE, "objective", title, WARN, finding, evidence, advice)


def _sane(ctx: Context) -> tuple[bool, str]:
    """Whether seq-mis at C = 2 keeps enough of the batch (diagnose_thresholds: objective)."""
    m = ctx.seq_mis
    if m is None:
        return True, ""
    ess, rejected = m.get(M.ESS), m.get(M.SEQUENCE_FRACTION)
    if ess is not None and ess < T.MIN_CORRECTION_ESS:
        return False, f"seq-mis at C = 2 leaves an ESS of {pct(ess)}"
    if rejected is not None and rejected > T.MAX_CORRECTION_REJECTED:
        return False, f"seq-mis at C = 2 rejects {pct(rejected)} of the sequences"
    return True, ""


def _seq_mis_text(ctx: Context) -> str:
    if ctx.seq_mis is None:
        return ""
    return (
        f"; seq-mis at C = 2 would reject {pct(ctx.seq_mis[M.SEQUENCE_FRACTION])} of the "
        f"sequences (ESS {pct(ctx.seq_mis[M.ESS])})"
    )


def _advice(ctx: Context, severe_share: float) -> str:
    label = shlex.quote(ctx.label)
    text = f"try `mismatchctl whatif {label} --method seq-mis --threshold 2`"
    if 0 < severe_share < T.SEVERE_FAIL_SHARE * 3:
        text += f", or a batch filter: `mismatchctl whatif {label} --method batch-filter:0.1`"
    return text


__all__ = ["cause", "name_cause", "objective"]
