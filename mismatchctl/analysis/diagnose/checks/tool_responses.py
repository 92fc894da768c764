"""Amplification after tool responses: the later turns' vllm_kl over the first turns', as a
whole and at the same token probabilities, and the drop of the log-ppl correlation."""

from __future__ import annotations

import math
from dataclasses import dataclass

from mismatchctl.analysis.diagnose.as_baseline import as_hot_in_baseline, as_hot_text
from mismatchctl.analysis.diagnose.check import (
    FAIL,
    NA,
    OK,
    PATH,
    WARN,
    Check,
    CheckEvidence,
    absent,
    advice_if,
)
from mismatchctl.analysis.diagnose.checks import turn_edges
from mismatchctl.analysis.diagnose.context import CheckModule, Context
from mismatchctl.analysis.diagnose.contrasts import Ratio, ci_text, later_turns, relative
from mismatchctl.analysis.diagnose.levels import TOOL_CI_LOW
from mismatchctl.analysis.diagnose.parts import localized_run
from mismatchctl.analysis.diagnose.steps import REGIMES, SPIKES, split_kind
from mismatchctl.analysis.diagnose.text import fmt, pct
from mismatchctl.engines import plan as K
from mismatchctl.stats import TURN_KIND_LABELS
from mismatchctl.stats import registry as M
from mismatchctl.stats.heavy_turns import HeavyTurns, later_over_first
from mismatchctl.stats.localize.result import ratio_text

NAME = "tool_responses"
LAYER = PATH
TITLE = "Amplification after tool responses"
ORDER = 170
READS: tuple[CheckModule, ...] = (turn_edges,)


@dataclass(frozen=True)
class Thresholds:
    """With ``levels.TOOL_CI_LOW``, the low end of the ratio's interval needed to warn."""

    TOOL_RATIO_WARN: float = 1.75
    TOOL_RATIO_FAIL: float = 5.0
    """later/first vllm_kl ratio. The tool-response amplification of BACKGROUND.md; 2x is a
    clear gap between two token populations of one run: warn from 1.75x (below it, as
    ``LOCAL_FACTOR``) with the interval's low end above ``TOOL_CI_LOW``; an interval above 5x a
    dominant one (fail; also the warning pattern with later turns above ``MEDIUM_MAX``)."""

    PEARSON_DROP_WARN: float = 0.05
    """Drop of the log-ppl Pearson correlation from first to later turns (healthy correlations
    sit near 0.99: a 0.05 drop is the gap between a bf16 and an fp32 head, five times over)."""

    PEARSON_MIN_SEQUENCES: int = 30
    """Sequences with later turns needed to judge the Pearson drop (a correlation of fewer is
    noise)."""

    HEAVY_SHARE: float = 0.02
    HEAVY_LEAST: int = 2
    """A ratio under ``TOOL_RATIO_FAIL`` warns only when the later turns are hotter at the same
    token probabilities too (``same_probs_excess``): a ratio of the mix alone (the later turns
    sample more unlikely tokens, each no worse) is said in the finding and raises no alarm. One
    step of a healthy run varies its mix from step to step: on a third machine's draw of the
    calibration corpus five healthy runs' single steps warned at 1.9-2.7x (95% CI from 1.3),
    1.0-1.6x at the same probabilities (their intervals from 0.62-1.2), the whole runs under
    1.75x. Every fault named the turns after tool responses in any corpus holds a rate (the
    same tokens' interval from 1.34x).

    The later turns' ratio warns only when it holds (``TOOL_RATIO_WARN``) without the
    heaviest ``HEAVY_SHARE`` of the responses (at least ``HEAVY_LEAST``; by their K3 over both
    turn kinds, ``stats/heavy_turns.py``): a ratio of many responses, not of a few heavy ones.
    A mixture of experts' K3 is heavy-tailed by response (a flipped route moves every later
    token of its response; the five heaviest of 192 hold 16-47% of its K3, a dense model's
    9-17%), and its sequence-clustered interval does not see how few carry it: a healthy MoE
    scored by a bf16 trainer (``m-h-b`` of ``family.py --moe --trainer bf16``) warned at 2.0
    (95% CI 1.3-2.9), 1.3 without its four heaviest. Without their heaviest 2% the healthy and
    improved runs of every corpus stay at 1.6 or under; the template and tool-turn faults keep
    their 2.7-66x. Of the 405 diagnoses of 20 corpora where the check fired, two faults of
    other classes whose later turns warned by a few responses are quiet here now: a batch-
    variant kernel (``cp-batchvar-subtle``, 2.1 to 1.5, which was named the turns after tool
    responses alone, and is now unseen) and one gpu's split-KV path with a bf16 trainer
    (``hw-l20-splitkv-subtle-bt``, 2.0 to 1.4, named the hardware as before)."""


T = Thresholds()
LATER = TURN_KIND_LABELS.index("later")


@dataclass(frozen=True, kw_only=True)
class Evidence(CheckEvidence):
    """The first turns' and the later turns' vllm_kl, the later over the first as a whole with
    its interval, both log-ppl Pearson correlations and their drop, the later turns' share of
    the tokens; the ratio at the same token probabilities with its interval, and whether its
    interval clears ``TOOL_CI_LOW`` (``same_probs_excess``); written when the advice defers to
    another check: ``template`` (the turn_edges check fired) or ``code_path`` (what points at
    a code path)."""

    first_vllm_kl: float | None
    later_vllm_kl: float | None
    later_first_ratio: float | None
    later_first_ratio_ci: tuple[float, float] | None
    first_log_ppl_pearson: float | None
    later_log_ppl_pearson: float | None
    pearson_drop: float | None
    later_token_share: float
    same_probs_ratio: float | None
    same_probs_ratio_ci: tuple[float, float] | None
    same_probs_excess: bool
    template: bool | None = absent()
    code_path: str | None = absent()
    without_heaviest: float | None = absent()
    """Written when the ratio warned and falls under ``TOOL_RATIO_WARN`` without the heaviest
    responses (``HEAVY_SHARE``): the ratio then, the verdict ok."""


def run(ctx: Context) -> Check:
    kinds = {g.by[K.TURN_KIND]: g.metrics for g in ctx.report.split(K.TURN_KIND)}
    first, later = kinds.get("first"), kinds.get("later")
    if not later or not later.get(M.TOKENS) or not first:
        return Check(LAYER, NAME, TITLE, NA, "no model tokens after a tool response")
    a, b = first.get(M.VLLM_KL), later.get(M.VLLM_KL)
    found = ctx.contrast({K.TURN_KIND: [LATER]}, stratum=None)
    ratio, ci = found if found is not None else (b / a if a and b is not None else None, None)
    pa, pb = first.get(M.LOG_PPL_PEARSON), later.get(M.LOG_PPL_PEARSON)
    drop = pa - pb if pa is not None and pb is not None else None
    later_sequences = later.get(M.SEQUENCES) or 0
    # the same contrast at the same token probabilities: the study's amplification is a change
    # of the mix (more low-probability tokens); a ratio that stays is each token's own
    same = later_turns(ctx)
    same_ratio, same_ci = same if same is not None else (None, None)
    verdict = relative(ratio, ci, T.TOOL_RATIO_WARN, TOOL_CI_LOW, T.TOOL_RATIO_FAIL, b)
    own = same_ci is not None and same_ci[0] >= TOOL_CI_LOW
    mix = verdict == WARN and same_ci is not None and not own  # the mix alone: no warning
    if mix:
        verdict = OK
    heavy = _heavy(ctx) if verdict != OK else None
    if heavy is not None:
        verdict = OK
    if (
        verdict == OK
        and drop is not None
        and drop >= T.PEARSON_DROP_WARN
        and later_sequences >= T.PEARSON_MIN_SEQUENCES
    ):
        verdict = WARN
    finding = (
        f"vllm_kl later/first = {ratio_text(ratio)} ({fmt(b)} vs {fmt(a)}; {ci_text(ci)}); "
        f"log-ppl Pearson {fmt(pa)} first vs {fmt(pb)} later"
    )
    if same_ratio is not None:
        finding += (
            f"; {ratio_text(same_ratio)}x at the same token probabilities ({ci_text(same_ci)})"
        )
    if mix:
        finding += (
            ": the later turns' excess is their mix of token probabilities, not a rate (the "
            "same tokens' interval reaches under 1.25x)"
        )
    if heavy is not None:
        finding += (
            f"; {ratio_text(heavy.ratio)} without the {heavy.left_out} heaviest responses "
            f"(they hold {pct(heavy.later_share)} of the later turns' K3): a few heavy "
            "responses, not the turns"
        )
    # with --baseline, later turns as hot as the baseline's are the stack's own
    as_base = None if verdict == OK else as_hot_in_baseline(ctx, {K.TURN_KIND: [LATER]})
    if as_base is not None:
        verdict, finding = OK, finding + as_hot_text(*as_base)
    advice = (
        (
            f"the later turns' tokens are {ratio_text(same_ratio)}x worse than the first turns' "
            "at the same token probabilities, not only more often unlikely: look at how the two "
            "sides take in the tool output (its token ids on both sides, the engine's prefill "
            "and prefix caching of it) in the worst later turns (`mismatchctl tokens "
            f"{ctx.label} --where turn_kind=later`): a rate at the same probabilities is another "
            "rendering or path, which no correction fixes"
        )
        if own
        else "turns after tool responses sample more low-probability tokens: use a "
        "sequence-level correction (token-level ones still collapsed in multi-turn runs), and "
        "look at the tool outputs of the worst sequences; fewer tool calls per rollout delay "
        "collapse"
    )
    path = code_path_signal(ctx, same)
    template = turn_edges.template_fault(ctx)
    if template:
        advice = (
            "the later turns' excess sits in their first tokens (the turn_edges check): a "
            "chat-template or rendering fault; fix it, a correction would only reweight it"
        )
    elif path is not None:
        advice = (
            f"{path}: fix that path first, the later turns' excess may be its doing (long KV "
            "lengths live in later turns), and diagnose again; a correction would only "
            "reweight it"
        )
    evidence = Evidence(
        first_vllm_kl=a,
        later_vllm_kl=b,
        later_first_ratio=ratio,
        later_first_ratio_ci=ci,
        first_log_ppl_pearson=pa,
        later_log_ppl_pearson=pb,
        pearson_drop=drop,
        later_token_share=later[M.TOKENS] / (later[M.TOKENS] + first[M.TOKENS]),
        same_probs_ratio=same_ratio,
        same_probs_ratio_ci=same_ci,
        same_probs_excess=own,
        template=True if template else None,
        code_path=None if template else path,
        **({"without_heaviest": heavy.ratio} if heavy is not None else {}),
    )
    return Check(LAYER, NAME, TITLE, verdict, finding, evidence, advice_if(verdict, advice))


def _heavy(ctx: Context) -> HeavyTurns | None:
    """The later over the first turns' K3 rate without the heaviest responses
    (``HEAVY_SHARE``) when it falls under ``TOOL_RATIO_WARN``; None when it holds, or without
    the per-sequence sums."""
    states = list(ctx.state.hot_sequences.runs().values())
    cube = ctx.cube
    if not states or cube is None:
        return None
    bins = cube.spec.dims[cube.spec.index(K.BIN)].size
    count = sum(len(st.step) for st in states)
    leave_out = max(T.HEAVY_LEAST, math.ceil(T.HEAVY_SHARE * count))
    found = later_over_first(states, bins, leave_out)
    if found.ratio is None or found.ratio >= T.TOOL_RATIO_WARN:
        return None
    return found


def code_path_signal(ctx: Context, later: Ratio) -> str | None:
    """What points at a code path in the selection (a localized part of a run that is not the
    later turns seen by position, ``later`` being their contrast; or steps that split into
    spikes or regimes), or None."""
    for name, view in ctx.runs.items():
        verdict, _, evidence = localized_run(view.local, later, view.cube)
        if verdict in (WARN, FAIL) and not evidence.later_turns:
            return f"a code path is localized in {name} (the localized check)"
        kind = split_kind(view)
        if kind in (SPIKES, REGIMES):
            return f"{name}'s steps split into {kind} (the {kind} check)"
    return None
