"""The most likely cause: every cause of the catalogue (``causes/``) weighed by the share of the
excess it explains (``causes/weigh.py``); the best supported is named, with the evidence that
decided it, its runner-ups and why they lost, and a second cause when one is independently
supported."""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from mismatchctl.analysis.diagnose.causes.catalogue import reads
from mismatchctl.analysis.diagnose.causes.row import CauseRow
from mismatchctl.analysis.diagnose.causes.weigh import (
    MIN_SHARE,
    Weighing,
    weigh,
    weighing_rows,
)
from mismatchctl.analysis.diagnose.check import (
    OBJECTIVE,
    Check,
    CheckEvidence,
    Every,
    absent,
    evidence_of,
    flat,
)
from mismatchctl.analysis.diagnose.context import CheckModule, Context

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


@dataclass(frozen=True, kw_only=True)
class Evidence(CheckEvidence):
    """The weighing (``causes/weigh.py``): the named cause's row (its keys), or when none is
    named ``key`` (``none`` or ``unexplained``) and ``verdict``; the second causes
    (``also``), every other cause with why it lost (``runner_ups``); ``next`` (unexplained
    only): what to try."""

    named: CauseRow | None = flat(optional=True)
    key: str | None = absent()
    verdict: str | None = absent()
    also: list[CauseRow]
    runner_ups: list[CauseRow]
    next: str | None = absent()

    @property
    def cause(self) -> str:
        """The key of the cause named (``none``, ``unexplained``)."""
        return self.named.key if self.named is not None else self.key or "none"

    @property
    def advice(self) -> str | None:
        """What to try next: the named cause's, or what to do about an unexplained excess."""
        return self.named.next if self.named is not None else self.next


def named(ctx: Context) -> str:
    """The key of the cause this check named (for the checks that read it)."""
    found = evidence_of(ctx.result(NAME), Evidence)
    assert found is not None  # the cause check always applies
    return found.cause


def run(ctx: Context) -> Check:
    found = weigh(ctx)
    head, also, runner_ups = weighing_rows(ctx, found)
    if head is not None:
        evidence = Evidence(named=head, also=also, runner_ups=runner_ups)
    else:
        evidence = Evidence(
            key="unexplained" if found.unexplained else "none",
            verdict=found.verdict,
            also=also,
            runner_ups=runner_ups,
            next=_unexplained_advice(ctx) if found.unexplained else None,
        )
    return Check(LAYER, NAME, TITLE, found.verdict, finding(found), evidence, evidence.advice)


def _unexplained_advice(ctx: Context) -> str:
    base = ctx.baseline
    label = shlex.quote(ctx.label)
    if base is not None:
        return (
            f"`mismatchctl explain {label} --baseline {shlex.quote(base.label)}` shows where "
            "the excess over the baseline lives; the causes' runner-ups say what each explains; "
            f"`mismatchctl tokens {label}` lists the tokens that carry most of it (an excess in "
            "a handful of tokens is no part of the run)"
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
