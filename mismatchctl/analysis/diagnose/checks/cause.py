"""The most likely cause: every cause of the catalogue (``causes/``) weighed by the share of the
excess it explains (``causes/weigh.py``); the best supported is named, with the evidence that
decided it, its runner-ups and why they lost, and a second cause when one is independently
supported."""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from mismatchctl.analysis.diagnose.causes.catalogue import reads
from mismatchctl.analysis.diagnose.causes.weigh import (
    MIN_SHARE,
    Weighing,
    weigh,
    weighing_dict,
)
from mismatchctl.analysis.diagnose.check import OBJECTIVE, Check, CheckModule, Every
from mismatchctl.analysis.diagnose.context import Context

NAME = "cause"
LAYER = OBJECTIVE
TITLE = "Most likely cause"
ORDER = 300
READS: tuple[CheckModule | Every, ...] = reads()
"""Every check a cause of the catalogue reads."""


@dataclass(frozen=True)
class Thresholds:
    """None of its own: the weighing's ``MIN_SHARE`` and ``ALSO_SHARE`` (``causes/weigh.py``)
    and each check's own."""


T = Thresholds()

FIXABLE = (
    "policy",
    "routing",
    "code_path",
    "hardware",
    "sequences",
    "semantics",
    "data",
    "template",
    "stop",
    "precision",
)
"""The causes whose fix is the remedy, a correction at most a stopgap (the objective check)."""


def named(ctx: Context) -> str:
    """The key of the cause this check named (for the checks that read it)."""
    found = ctx.result(NAME)
    assert found is not None  # the cause check always applies
    return found.evidence["key"]


def run(ctx: Context) -> Check:
    found = weigh(ctx)
    evidence = weighing_dict(ctx, found)
    if found.unexplained:
        evidence["next"] = _unexplained_advice(ctx)
    return Check(LAYER, NAME, TITLE, found.verdict, finding(found), evidence, evidence.get("next"))


def _unexplained_advice(ctx: Context) -> str:
    base = ctx.baseline
    label = shlex.quote(ctx.label)
    if base is not None:
        return (
            f"`mismatchctl explain {label} --baseline {shlex.quote(base.label)}` shows where "
            "the excess over the baseline lives; the causes' runner-ups say what each explains"
        )
    return (
        "give a known-good run with --baseline: a policy mismatch and a uniformly less exact "
        "numeric path look alike without one; compare the weight versions of both sides"
    )


def finding(found: Weighing) -> str:
    """The cause, what it explains and the evidence that decided it, in one sentence."""
    if found.unexplained:
        candidates = [w for w in found.runner_ups if w.support.alarm][:2]
        if not candidates:
            return "unexplained: the run is worse than it should be, and no cause's checks fire"
        names = ", ".join(f"{w.cause.LABEL} ({_pct(w.support.share)})" for w in candidates)
        return f"unexplained: no cause explains {_pct(MIN_SHARE)} of the excess ({names})"
    if found.named is None:
        return "no cause found: no cause's checks fire"
    w = found.named
    s = w.support
    head = w.cause.LABEL + (f": {s.variant}" if s.variant else "")
    text = f"{head}: explains {_pct(s.share)} of the excess; {s.because}"
    if found.also:
        text += "; also " + ", ".join(a.cause.LABEL for a in found.also)
    return text


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.0f}%"
