"""Checks of the inference-path layer: where in the tokens, turns and hardware the mismatch lives."""

from __future__ import annotations

import math
import statistics
from typing import Any

import numpy as np

from mismatchctl.analysis import diagnose_thresholds as T
from mismatchctl.analysis.checks_localize import later_turns, localized_run
from mismatchctl.analysis.checks_template import template_fault
from mismatchctl.analysis.checks_trajectory import split_kind
from mismatchctl.analysis.diagnose_base import (
    FAIL,
    NA,
    OK,
    PATH,
    WARN,
    Check,
    Context,
    advice_if,
    ci_text,
    fmt,
    grade,
    pct,
    relative,
    worst,
)
from mismatchctl.analysis.report import Group
from mismatchctl.engines import plan as K
from mismatchctl.stats import TURN_KIND_LABELS, bin_label
from mismatchctl.stats import registry as M
from mismatchctl.stats.localize_result import ratio_text

LOW_PROB_ADVICE = (
    "the mismatch lives in tokens the engine sampled as unlikely: check the precision of "
    "the sampler's logits (fp32 lm_head on both sides), consider a smaller top-p (fewer such "
    "tokens, some bias), and prefer a sequence-level correction over a token-level one"
)


def low_probability(ctx: Context) -> Check:
    title = "KL concentrated in low-probability tokens"
    edges = ctx.report.bin_edges
    low = [g for g in ctx.report.split(K.BIN) if edges[g.by[K.BIN] + 1] <= T.LOW_PROB]
    token_share = sum(g.metrics.get(M.TOKEN_SHARE) or 0.0 for g in low)
    kl_share = sum(g.metrics.get(M.KL_SHARE) or 0.0 for g in low)
    concentration = kl_share / token_share if token_share else None
    vk = ctx.vllm_kl
    evidence: dict[str, Any] = {
        "p_infer_below": T.LOW_PROB,
        M.TOKEN_SHARE: token_share,
        M.KL_SHARE: kl_share,
        "concentration": concentration,
        M.VLLM_KL: vk,
        "bins": [_bin(edges, g) for g in low],
    }
    pattern = (
        concentration is not None
        and kl_share >= T.LOWPROB_KL_SHARE
        and concentration >= T.LOWPROB_CONCENTRATION
    )
    verdict = grade(pattern and (vk or 0) > T.MEDIUM_MAX, pattern and (vk or 0) > T.LOW_MAX)
    finding = (
        f"tokens with p_infer < {T.LOW_PROB:g} are {pct(token_share)} of tokens and hold "
        f"{pct(kl_share)} of the K3 mass (vllm_kl {fmt(vk)})"
    )
    return Check(
        PATH, "low_probability", title, verdict, finding, evidence,
        advice_if(verdict, LOW_PROB_ADVICE),
    )  # fmt: skip


def _bin(edges: np.ndarray, g: Group) -> dict[str, Any]:
    m = g.metrics
    return {
        "bin": bin_label(edges, g.by[K.BIN]),
        **{k: m.get(k) for k in (M.TOKEN_SHARE, M.KL_SHARE)},
    }


def tool_responses(ctx: Context) -> Check:
    title = "Amplification after tool responses"
    kinds = {g.by[K.TURN_KIND]: g.metrics for g in ctx.report.split(K.TURN_KIND)}
    first, later = kinds.get("first"), kinds.get("later")
    if not later or not later.get(M.TOKENS) or not first:
        return Check(PATH, "tool_responses", title, NA, "no model tokens after a tool response")
    a, b = first.get(M.VLLM_KL), later.get(M.VLLM_KL)
    found = ctx.contrast({K.TURN_KIND: [TURN_KIND_LABELS.index("later")]}, stratum=None)
    ratio, ci = found if found is not None else (b / a if a and b is not None else None, None)
    pa, pb = first.get(M.LOG_PPL_PEARSON), later.get(M.LOG_PPL_PEARSON)
    drop = pa - pb if pa is not None and pb is not None else None
    later_sequences = later.get(M.SEQUENCES) or 0
    evidence = {
        "first_vllm_kl": a,
        "later_vllm_kl": b,
        "later_first_ratio": ratio,
        "later_first_ratio_ci": None if ci is None else list(ci),
        "first_log_ppl_pearson": pa,
        "later_log_ppl_pearson": pb,
        "pearson_drop": drop,
        "later_token_share": later[M.TOKENS] / (later[M.TOKENS] + first[M.TOKENS]),
    }
    # the same contrast at the same token probabilities: the study's amplification is a change
    # of the mix (more low-probability tokens); a ratio that stays is each token's own
    same = later_turns(ctx)
    same_ratio, same_ci = same if same is not None else (None, None)
    evidence["same_probs_ratio"] = same_ratio
    evidence["same_probs_ratio_ci"] = None if same_ci is None else list(same_ci)
    verdict = relative(ratio, ci, T.TOOL_RATIO_WARN, T.TOOL_CI_LOW, T.TOOL_RATIO_FAIL, b)
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
    own = same_ci is not None and same_ci[0] >= T.TOOL_CI_LOW
    evidence["same_probs_excess"] = own
    advice = (
        (
            f"the later turns' tokens are {ratio_text(same_ratio)}x worse than the first turns' "
            "at the same token probabilities, not only more often unlikely: look at how the two "
            "sides take in the tool output (its token ids on both sides, the engine's prefill "
            "and prefix caching of it) in the worst later turns (`mismatchctl tokens "
            f"{ctx.label} --where turn_kind=later`); meanwhile a sequence-level correction "
            "(token-level ones still collapsed in multi-turn runs)"
        )
        if own
        else "turns after tool responses sample more low-probability tokens: use a "
        "sequence-level correction (token-level ones still collapsed in multi-turn runs), and "
        "look at the tool outputs of the worst sequences; fewer tool calls per rollout delay "
        "collapse"
    )
    path = code_path_signal(ctx, same)
    if template_fault(ctx):
        evidence["template"] = True
        advice = (
            "the later turns' excess sits in their first tokens (the turn_edges check): a "
            "chat-template or rendering fault; fix it, a correction would only reweight it"
        )
    elif path is not None:
        evidence["code_path"] = path
        advice = (
            f"{path}: fix that path first, the later turns' excess may be its doing (long KV "
            "lengths live in later turns), and diagnose again; a correction would only "
            "reweight it"
        )
    return Check(
        PATH, "tool_responses", title, verdict, finding, evidence, advice_if(verdict, advice)
    )


HARDWARE_ADVICE = (
    "kernels differ between gpu generations (vLLM's cascade attention hit a FlashAttention-2 "
    "split-KV bug on non-Hopper GPUs such as A100 and L20): try disable_cascade_attn=True or "
    "batch-invariant kernels, or move the run to the gpus that match the baseline"
)


def code_path_signal(ctx: Context, later: tuple[float, tuple[float, float]] | None) -> str | None:
    """What points at a code path in the selection (a localized part of a run that is not the
    later turns seen by position, ``later`` being their contrast; or steps that split into
    spikes or regimes), or None."""
    for name, view in ctx.runs.items():
        verdict, _, evidence = localized_run(view.local, later, view.cube)
        if verdict in (WARN, FAIL) and not evidence.get("later_turns"):
            return f"a code path is localized in {name} (the localized check)"
        kind = split_kind(view)
        if kind in ("spikes", "regimes"):
            return f"{name}'s steps split into {kind} (the {kind} check)"
    return None


def hardware(ctx: Context) -> Check:
    title = "A gpu with a higher mismatch"
    gpus = {
        g.by[K.GPU]: g.metrics.get(M.VLLM_KL)
        for g in ctx.report.split(K.GPU)
        if g.by[K.GPU] is not None and g.metrics.get(M.VLLM_KL) is not None
    }
    if len(gpus) < 2:
        return Check(
            PATH, "hardware", title, NA,
            f"{len(gpus)} gpu tagged: nothing to compare",
            {"gpus": gpus},
            "tag runs with --tag gpu=NAME at ingest (or keep a gpu column) to compare hardware",
        )  # fmt: skip
    factors = {g: _factor(v, [x for h, x in gpus.items() if h != g]) for g, v in gpus.items()}
    top = max(factors, key=lambda g: factors[g] or 0.0)
    severe = _severe_concentration(ctx)
    vk, factor = gpus[top], factors[top] or 0.0
    found = ctx.contrast({K.GPU: [ctx.gpu_code(top)]})
    ci = None if found is None else found[1]
    verdict = relative(factor, ci, T.GPU_FACTOR_WARN, T.LOCAL_CI_LOW, math.inf, vk)
    group = _hot_group(ctx, gpus) if verdict == OK else None
    if group is not None:  # most gpus at one level, the others far below it
        hot, factor, found = group
        ci = found[1]
        verdict = relative(factor, ci, T.GPU_FACTOR_WARN, T.LOCAL_CI_LOW, math.inf, vk)
    if verdict != OK and ci is not None and ci[0] >= T.GPU_FACTOR_FAIL:
        verdict = FAIL
    if severe["concentrated_on"] is not None:
        verdict = worst([verdict, WARN])
    evidence = {
        M.VLLM_KL: gpus,
        "factor_over_others_median": factors,
        "rate_ratio_vs_rest": None if found is None else found[0],
        "rate_ratio_vs_rest_ci": None if ci is None else list(ci),
        **severe,
    }
    finding = (
        f"{top}: vllm_kl {fmt(vk)}, {fmt(factor)}x the median of the other gpus "
        f"({ratio_text(None if found is None else found[0])}x the rest at the same token "
        f"probabilities, {ci_text(ci)})"
    )
    if group is not None and verdict != OK:
        evidence["hot_gpus"] = hot
        cold = ", ".join(g for g in gpus if g not in hot)
        finding = (
            f"{', '.join(hot)}: vllm_kl {fmt(factor)}x that of {cold} "
            f"({ratio_text(found[0])}x at the same token probabilities, {ci_text(ci)}); no "
            "gpu stands out from the median of the others, because most of them are hot"
        )
    if severe["concentrated_on"] is not None:
        finding += f"; {severe['concentrated_on']} holds most severe batches"
    advice = (
        f"the mismatch follows the hardware ({top}): {HARDWARE_ADVICE}; "
        f"`mismatchctl compare gpu={_other(gpus, top)} gpu={top}` shows where they differ"
    )
    return Check(PATH, "hardware", title, verdict, finding, evidence, advice_if(verdict, advice))


def _hot_group(
    ctx: Context, gpus: dict[str, float]
) -> tuple[list[str], float, tuple[float, tuple[float, float]]] | None:
    """When more than one gpu is hot: the gpus ranked by vllm_kl, the hottest ``k`` (two or more,
    leaving at least one) whose contrast with the others at the same token probabilities has the
    largest z; with their pooled vllm_kl over the others'. None with fewer than three gpus (the
    hottest against the other is the check's own test) or no contrast."""
    if len(gpus) < 3:
        return None
    tokens = {g.by[K.GPU]: g.metrics.get(M.TOKENS) or 0 for g in ctx.report.split(K.GPU)}
    ranked = sorted(gpus, key=gpus.__getitem__, reverse=True)
    best: tuple[float, list[str], float, tuple[float, tuple[float, float]]] | None = None
    for k in range(2, len(ranked)):
        hot, cold = ranked[:k], ranked[k:]
        found = ctx.contrast({K.GPU: [ctx.gpu_code(g) for g in hot]})
        if found is None or not found[0] > 0 or not found[1][0] > 0:
            continue
        z = math.log(found[0]) / max(math.log(found[1][1] / found[1][0]), 1e-12)
        level = [_pooled(gpus, tokens, side) for side in (hot, cold)]
        if level[1] and (best is None or z > best[0]):
            best = (z, hot, level[0] / level[1], found)
    return None if best is None else best[1:]


def _pooled(gpus: dict[str, float], tokens: dict[str, float], which: list[str]) -> float:
    n = sum(tokens.get(g, 0) for g in which)
    return sum(gpus[g] * tokens.get(g, 0) for g in which) / n if n else 0.0


def _factor(value: float, others: list[float]) -> float | None:
    base = statistics.median(others) if others else None
    return value / base if base else None


def _other(gpus: dict[str, float], top: str) -> str:
    return min((g for g in gpus if g != top), key=gpus.__getitem__)


def _severe_concentration(ctx: Context) -> dict[str, Any]:
    """Severe batches (run x gpu x step) per gpu, and the gpu holding most of them, if any."""
    rows = [h for h in ctx.report.hardware or [] if h.gpu is not None and h.batches]
    severe = {
        h.gpu: round((h.step_summary.get(M.BAND_SHARE["severe"]) or 0.0) * h.batches) for h in rows
    }
    batches = {h.gpu: h.batches for h in rows}
    total, all_batches = sum(severe.values()), sum(batches.values())
    holder = None
    if total:
        gpu = max(severe, key=severe.__getitem__)
        share = batches[gpu] / all_batches
        p = binomial_tail(severe[gpu], total, share)
        if severe[gpu] / total >= T.SEVERE_GPU_SHARE and share < T.SEVERE_GPU_SHARE:
            holder = gpu if p < T.SEVERE_GPU_ALPHA else None
    return {"severe_batches": severe, M.BATCHES: batches, "concentrated_on": holder}


def binomial_tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p): the chance that one gpu holding a share p of the
    batches holds k or more of n severe ones."""
    return float(sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k, n + 1)))
