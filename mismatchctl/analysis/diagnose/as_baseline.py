"""A part of the run judged against the baseline's same tokens: with ``--baseline``, a part as
hot in the known-good run as in this one is the stack's own, not a fault (a healthy stack's
mismatch grows with the KV position and in the later turns as its contexts lengthen)."""

from __future__ import annotations

from mismatchctl.analysis.diagnose.check import OK
from mismatchctl.analysis.diagnose.checks import baseline
from mismatchctl.analysis.diagnose.context import Context, RunView, baseline_on_other_gpus
from mismatchctl.analysis.diagnose.contrasts import Ratio, ci_text, relative
from mismatchctl.engines import plan as K
from mismatchctl.stats.localize.explain import contrast_baseline
from mismatchctl.stats.localize.result import ratio_text


def as_hot_in_baseline(ctx: Context, region: dict[str, list[int]]) -> Ratio:
    """The part's rate over the baseline's same tokens at the same token mix, when it is no
    excess by the ``baseline`` check's thresholds (1.5x with the interval above 1.2); None
    without a baseline of the same gpus, when the contrast cannot be made, or when the part is
    hotter than the baseline's. The healthy multi-turn runs past the model's trained positions
    (docs/diagnose.md) put their long-KV part at 0.95-1.03x a baseline of the same shape; the
    calibrated paths' parts are 2.6-13x theirs (the interval's low end 1.8 and up)."""
    view = ctx.baseline
    if view is None or view.cube is None or ctx.cube is None or not region:
        return None
    if baseline_on_other_gpus(ctx) is not None:
        return None
    found = contrast_baseline(ctx.cube, view.cube, region, K.BIN)
    if found is None:
        return None
    t = baseline.T
    ratio, ci = found
    if relative(ratio, ci, t.BASELINE_FACTOR, t.BASELINE_CI_LOW, t.BASELINE_FAIL) != OK:
        return None
    return ratio, ci


def as_hot_text(ratio: float, ci: tuple[float, float]) -> str:
    """What the finding says of such a part."""
    return (
        f"; as hot in the baseline's same tokens ({ratio_text(ratio)}x, {ci_text(ci)}): the "
        "stack's own, not a fault"
    )


def region_of(view: RunView, where: dict[str, str]) -> dict[str, list[int]] | None:
    """The cube codes (dimension -> search-level codes) of the run's localized finding at
    ``where``, None when its search holds none."""
    spec = view.cube.spec
    for f in view.local.findings:
        if f.where == where:
            return {  # the finding's exact codes as the search tables' (blocks)
                spec.dims[d].name: sorted({int(b) for b in spec.block_of(d)[list(codes)]})
                for d, codes in f.region.items()
            }
    return None
