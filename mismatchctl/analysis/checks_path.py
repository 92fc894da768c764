"""Checks of the inference-path layer: where in the tokens, turns and hardware the mismatch lives."""

from __future__ import annotations

import statistics
from typing import Any

import numpy as np

from mismatchctl.analysis import diagnose_thresholds as T
from mismatchctl.analysis.diagnose_base import NA, PATH, Check, Context, advice_if, fmt, grade, pct
from mismatchctl.analysis.report import Group
from mismatchctl.engines import plan as K
from mismatchctl.stats import bin_label
from mismatchctl.stats import registry as M


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
    advice = (
        "the mismatch lives in tokens the engine sampled as unlikely: check the precision of "
        "the sampler's logits (fp32 lm_head on both sides), consider a smaller top-p (fewer such "
        "tokens, some bias), and prefer a sequence-level correction over a token-level one"
    )
    return Check(
        PATH, "low_probability", title, verdict, finding, evidence, advice_if(verdict, advice)
    )


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
    ratio = b / a if a and b is not None else None
    pa, pb = first.get(M.LOG_PPL_PEARSON), later.get(M.LOG_PPL_PEARSON)
    drop = pa - pb if pa is not None and pb is not None else None
    evidence = {
        "first_vllm_kl": a,
        "later_vllm_kl": b,
        "later_first_ratio": ratio,
        "first_log_ppl_pearson": pa,
        "later_log_ppl_pearson": pb,
        "pearson_drop": drop,
        "later_token_share": later[M.TOKENS] / (later[M.TOKENS] + first[M.TOKENS]),
    }
    big = (b or 0) > T.LOW_MAX
    fail = ratio is not None and ratio >= T.TOOL_RATIO_FAIL and (b or 0) > T.MEDIUM_MAX
    warn = big and (
        (ratio is not None and ratio >= T.TOOL_RATIO_WARN)
        or (drop is not None and drop >= T.PEARSON_DROP_WARN)
    )
    verdict = grade(fail, warn)
    finding = (
        f"vllm_kl later/first = {fmt(ratio)} ({fmt(b)} vs {fmt(a)}); log-ppl Pearson "
        f"{fmt(pa)} first vs {fmt(pb)} later"
    )
    advice = (
        "turns after tool responses sample more low-probability tokens: use a sequence-level "
        "correction (token-level ones still collapsed in multi-turn runs), and look at the tool "
        "outputs of the worst sequences; fewer tool calls per rollout delay collapse"
    )
    return Check(
        PATH, "tool_responses", title, verdict, finding, evidence, advice_if(verdict, advice)
    )


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
    fail = factor >= T.GPU_FACTOR_FAIL and vk > T.LOW_MAX
    warn = (factor >= T.GPU_FACTOR_WARN and vk > T.LOW_MAX) or severe["concentrated_on"] is not None
    evidence = {M.VLLM_KL: gpus, "factor_over_others_median": factors, **severe}
    finding = f"{top}: vllm_kl {fmt(vk)}, {fmt(factor)}x the median of the other gpus"
    if severe["concentrated_on"] is not None:
        finding += f"; {severe['concentrated_on']} holds most severe batches"
    advice = (
        f"the mismatch follows the hardware ({top}): vLLM's cascade attention hit a "
        "FlashAttention-2 split-KV bug on non-Hopper GPUs (A100, L20): try "
        "disable_cascade_attn=True, or move the run to Hopper GPUs; "
        f"`mismatchctl compare gpu={_other(gpus, top)} gpu={top}` shows where they differ"
    )
    verdict = grade(fail, warn)
    return Check(PATH, "hardware", title, verdict, finding, evidence, advice_if(verdict, advice))


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
    if total >= T.MIN_SEVERE_FOR_CONCENTRATION:
        gpu = max(severe, key=severe.__getitem__)
        if (
            severe[gpu] / total >= T.SEVERE_GPU_SHARE
            and batches[gpu] / all_batches < T.SEVERE_GPU_SHARE
        ):
            holder = gpu
    return {"severe_batches": severe, M.BATCHES: batches, "concentrated_on": holder}
