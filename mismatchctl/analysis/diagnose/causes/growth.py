"""A growth over training: the mismatch rate at the same token probabilities rises along the
steps (the numerics getting worse, a path taken more and more often)."""

from __future__ import annotations

import shlex

from mismatchctl.analysis.diagnose.causes.hypothesis import Support
from mismatchctl.analysis.diagnose.check import fired
from mismatchctl.analysis.diagnose.checks import trend
from mismatchctl.analysis.diagnose.context import CheckModule, Context
from mismatchctl.analysis.diagnose.steps import smooth_growth

KEY = "growth"
CLASS = "growth"
LABEL = "a growth over training"
SIGNATURE = (
    "the per-step rate at the same token mix rising along a line (not a jump at one step); "
    "mix (the policy moved toward tokens always mismatched) vs rate (the numerics got worse) "
    "by explain's decomposition"
)
TELLS_APART = (
    "a change at one step (two levels) is a path switched on or a reload: a code path or the "
    "policy; a growth of the token mix alone leaves the rate at the same token mix flat"
)
EVERY_TOKEN = False
EXPLAINS = ("sequences",)
CORRECTION = "a correction only holds it back: find what grows (explain late against early)"
READS: tuple[CheckModule, ...] = (trend,)


def support(ctx: Context) -> Support | None:
    found = ctx.result(trend)
    if found is None or found.verdict == "n/a":
        return None
    views = [v for v in ctx.runs.values() if v.trend is not None]
    smooth = bool(views) and all(smooth_growth(v) for v in views)
    share = 0.0
    for v in views:
        t = v.trend
        assert t is not None
        if t.end > 0 and t.rise > 1:  # the mass above the first step's fitted level
            share = max(share, 1.0 - 2.0 / (1.0 + t.rise))
    hit = fired(found) and smooth
    return Support(
        verdict=found.verdict if hit else "ok",
        share=share if hit else 0.0,
        because=found.finding,
        checks=(trend.NAME,),
        where="the later steps",
    )


def advice(ctx: Context, found: Support) -> str:
    label = shlex.quote(ctx.label.split("@")[0])
    return (
        "the mismatch grows as training goes on: "
        f"`mismatchctl explain '{label}@steps=LATE' --baseline '{label}@steps=EARLY'` splits "
        "the rise into mix (the policy moved toward tokens that were always mismatched: lower "
        "probabilities, longer sequences, more tool turns) and rate (the numerics got worse, a "
        "path taken more often); a rate growth is a code path or precision to fix, a mix growth "
        "a reason for a sequence-level correction"
    )
