"""The hardware: the mismatch follows one gpu model or node (its kernels, its driver)."""

from __future__ import annotations

import math
from collections.abc import Callable

from mismatchctl.analysis.diagnose.cause_evidence import other_gpus_advice
from mismatchctl.analysis.diagnose.causes.hypothesis import Support, part_share, worst_of
from mismatchctl.analysis.diagnose.causes.parts import (
    first_findings,
    on_gpus,
    path_on_one_gpu,
    where_text,
)
from mismatchctl.analysis.diagnose.check import FAIL, OK, Check, evidence_of, fired
from mismatchctl.analysis.diagnose.checks import baseline, hardware, localized
from mismatchctl.analysis.diagnose.context import CheckModule, Context, baseline_on_other_gpus
from mismatchctl.analysis.diagnose.contrasts import ci_text, relative
from mismatchctl.analysis.diagnose.levels import LEVEL, LOCAL_CI_LOW
from mismatchctl.analysis.diagnose.text import pct
from mismatchctl.engines import plan as K
from mismatchctl.stats.gpu_shuffle import gpu_split
from mismatchctl.stats.hot_sequences import HotSequenceState
from mismatchctl.stats.localize.explain import contrast_within
from mismatchctl.stats.localize.result import ratio_text

KEY = "hardware"
CLASS = "hardware"
LABEL = "the hardware (one gpu model or node)"
SIGNATURE = (
    "the excess on one gpu's (or node's) sequences, the same configuration fine on the others"
)
TELLS_APART = (
    "a code path that only one gpu generation takes is that hardware's (the fix is the same "
    "kernel setting); a policy or precision loss spreads over every gpu"
)
EVERY_TOKEN = False
EXPLAINS = ("sequences", "policy", "tool_turns", "growth")
CORRECTION = "no: move the run, or switch the kernel path those gpus take"
READS: tuple[CheckModule, ...] = (hardware, localized, baseline)


def own_test(ctx: Context) -> bool:
    """Whether the ``hardware`` check alarms on its own test (the same responses dealt to the
    gpus at random within each run and step), which a cause of every token cannot set off
    (``peel.gpu_beside_level``)."""
    return fired(ctx.result(hardware))


def outside_part(
    ctx: Context,
    region: dict[str, list[int]],
    restrict: Callable[[HotSequenceState], HotSequenceState],
    text: str,
) -> Support | None:
    """The ``hardware`` check's own tests on the tokens outside a part named first (the second
    pass, ``outside.second_pass``): the responses' tokens there split by gpu beyond what the
    same responses dealt to the gpus at random give (``SPLIT_ALPHA``), the hottest gpu (or
    group) ``GPU_FACTOR_WARN`` times the others' K3 per token there, and its interval against
    them at the same token probabilities above ``LOCAL_CI_LOW`` (a decade: fail). None when
    they do not all hold, or the cube holds no table of the gpus beside the part's dimensions.

    A louder fault of a part hides a device's kernel everywhere else: a re-rendered tool
    response (115x alone) beside one device of four splitting KV a key late past 96 keys (the
    Granite member's sweep, ``s-pair-tpl-gpu``): over the whole run that device is 1.2x the
    others (95% CI 0.92-1.6), the template's later turns on every device; in the first turns
    it is the device's alone (docs/diagnose.md "A fault's size, swept")."""
    t = hardware.T
    states = [restrict(st) for st in ctx.state.hot_sequences.runs().values()]
    split = gpu_split(states) if states else None
    if ctx.cube is None or split is None or not split.p_value < t.SPLIT_ALPHA:
        return None
    try:
        codes = [ctx.gpu_code(g) for g in split.hot]
    except ValueError:
        return None
    found = contrast_within(ctx.cube, region, K.GPU, codes, K.BIN, LEVEL)
    if found is None:
        return None
    ratio, ci = found
    verdict = relative(split.ratio, ci, t.GPU_FACTOR_WARN, LOCAL_CI_LOW, math.inf)
    if verdict == OK:
        return None
    if ci[0] >= t.GPU_FACTOR_FAIL:
        verdict = FAIL
    gpus = ", ".join(split.hot)
    return Support(
        verdict=verdict,
        share=None,
        because=(
            f"outside the named part, in {text}: gpu {gpus} {ratio_text(split.ratio)}x the "
            f"other gpus' K3 per token, {ratio_text(ratio)}x at the same token probabilities "
            f"({ci_text(ci)}); the same {split.responses} responses dealt to the gpus at "
            f"random split as far in {pct(split.p_value)} of {split.draws} draws"
        ),
        checks=(hardware.NAME,),
        ratio=ratio,
        ci=ci,
        where=f"gpu {gpus} in {text}",
        region=_gpu_region(ctx, list(split.hot)),
    )


def support(ctx: Context) -> Support | None:
    gpu, local = ctx.result(hardware), ctx.result(localized)
    other = _other_generation(ctx)
    if other is not None:
        return other
    held = path_on_one_gpu(ctx) if fired(local) else None
    if held is not None and local is not None:
        name, found = held
        first = next((f for f in first_findings(local) if f.where == found["where"]), None)
        ratio, ci = found["ratio"]
        own = _gpu_share(gpu) if fired(gpu) and gpu is not None else 0.0
        return Support(
            verdict=worst_of([local, gpu if fired(gpu) else None]),
            share=max(own or 0.0, (first.excess_share if first else None) or 0.0),
            because=f"{local.finding}; within that part, gpu {name} is {ratio:.3g}x the other "
            f"gpus at the same token probabilities", checks=(localized.NAME,), ratio=ratio,
            ci=(ci[0], ci[1]), where=f"gpu {name}, {where_text(found['where'])}",
            variant=f"a code path only gpu {name} takes", region=_gpu_region(ctx, [name]),
        )  # fmt: skip
    e = evidence_of(gpu, hardware.Evidence)
    if gpu is None or gpu.verdict == "n/a" or e is None:
        return None
    ratio, ci = e.rate_ratio_vs_rest, e.rate_ratio_vs_rest_ci
    share = _gpu_share(gpu)
    found = next((f for f in first_findings(local) if on_gpus(f.where)), None)
    if found is not None and fired(local):
        share = max(share or 0.0, found.excess_share or 0.0)
    factors = e.factor_over_others_median or {}
    top = e.hot_gpus or [max(factors, key=lambda g: factors[g] or 0.0)] if factors else []
    hit = fired(gpu) or (found is not None and fired(local))
    return Support(
        verdict=gpu.verdict if fired(gpu) else local.verdict if hit and local else "ok",
        share=share if hit else 0.0,
        because=gpu.finding if fired(gpu) else local.finding if hit and local else gpu.finding,
        checks=tuple(c.name for c in (gpu, local) if fired(c)),
        ratio=ratio,
        ci=None if ci is None else (ci[0], ci[1]),
        where=where_text(found.where) if found else f"gpu {', '.join(top)}",
        region=_gpu_region(ctx, top),
    )


def _gpu_region(ctx: Context, gpus: list[str]) -> dict[str, list[int]] | None:
    """The cube codes of these gpus (the part the second pass leaves out), None if unknown."""
    try:
        return {K.GPU: [ctx.gpu_code(g) for g in gpus]} if gpus else None
    except ValueError:
        return None


def _gpu_share(gpu: Check) -> float | None:
    """The share of the run's mass the hot gpu(s) explain (the hardware check's evidence)."""
    e = evidence_of(gpu, hardware.Evidence)
    return part_share(e.hot_mass_share, e.rate_ratio_vs_rest) if e is not None else None


def _other_generation(ctx: Context) -> Support | None:
    """A uniform excess over a baseline that ran on other gpus: another generation's kernels
    (or a policy: the data cannot tell them apart); it explains the excess over the baseline."""
    base, gpus = ctx.result(baseline), baseline_on_other_gpus(ctx)
    e = evidence_of(base, baseline.Evidence)
    if gpus is None or not fired(base) or base is None or e is None:
        return None
    if e.excess_shape != "uniform":
        return None
    ratio, ci = e.rate_ratio, e.rate_ratio_ci
    return Support(
        verdict=base.verdict,
        share=part_share(1.0, ratio),
        because=base.finding,
        checks=(baseline.NAME,),
        ratio=ratio,
        ci=None if ci is None else (ci[0], ci[1]),
        where=f"gpu {', '.join(gpus[0])} (the baseline: {', '.join(gpus[1])})",
        variant="another gpu generation than the baseline's",
    )


def advice(ctx: Context, found: Support) -> str:
    gpus = baseline_on_other_gpus(ctx)
    if found.variant and gpus is not None:
        return other_gpus_advice(*gpus)
    gpu = ctx.result(hardware)
    return (gpu.next if gpu is not None and gpu.next else None) or (
        f"the mismatch follows the hardware ({found.where}): compare the same configuration on "
        "another gpu, and the kernels that gpu takes (vLLM disable_cascade_attn=True, "
        "batch-invariant kernels)"
    )
