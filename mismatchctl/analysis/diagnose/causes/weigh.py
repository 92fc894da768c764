"""Every cause of the catalogue weighed on the same scale: the named cause is the best supported,
the others are its runner-ups with why they lost, and a second cause is named beside it when it
is independently supported (docs/diagnose.md "How the cause is chosen")."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from mismatchctl.analysis.diagnose.causes import policy, precision, stop
from mismatchctl.analysis.diagnose.causes.catalogue import CAUSES
from mismatchctl.analysis.diagnose.causes.drift import drifting_level
from mismatchctl.analysis.diagnose.causes.drift import runner_up as drift_runner_up
from mismatchctl.analysis.diagnose.causes.hypothesis import (
    AGAINST,
    QUIET,
    CauseModule,
    Support,
    Weighed,
)
from mismatchctl.analysis.diagnose.causes.outside import (
    level_over_part,
    requests_beside_part,
    second_pass,
)
from mismatchctl.analysis.diagnose.causes.peel import (
    beside_lean,
    explains,
    gpu_beside_level,
    in_part,
    level_leans,
    level_shape,
    path_over_lean,
    peeled,
    truncation_tail,
)
from mismatchctl.analysis.diagnose.causes.row import CauseRow
from mismatchctl.analysis.diagnose.causes.varying_level import (
    split_unread,
    steps_part,
    varying_level,
    varying_second,
)
from mismatchctl.analysis.diagnose.causes.whole_steps import beside as steps_beside
from mismatchctl.analysis.diagnose.causes.whole_steps import by_change as steps_by_change
from mismatchctl.analysis.diagnose.causes.whole_steps import runner_up as steps_runner_up
from mismatchctl.analysis.diagnose.check import FAIL, OK, WARN, evidence_of, fired
from mismatchctl.analysis.diagnose.checks import baseline
from mismatchctl.analysis.diagnose.context import Context
from mismatchctl.analysis.diagnose.levels import MEDIUM_MAX

MIN_SHARE = 0.2
"""Against a baseline the run exceeds, a cause must explain a fifth of that excess (the run's mass
above the baseline's rate, ``1 - 1/ratio`` of it) to be named; else the verdict is
"unexplained", with the candidates listed. Without a baseline the excess is only what the alarmed
causes claim, and the best of them is named."""

ALSO_SHARE = 0.25
"""A second cause is named beside the first when it alarms on its own checks, explains at least
a quarter of the excess (over a baseline, of the run's mass above it), and is neither set off by
the first cause's fault (its ``EXPLAINS``, less what peeling the first separates:
``peel.py``) nor the other way round. A cause whose evidence is
only a level (the precision: ``OUTSIDE_ONLY``) is not named beside a part on the remainder the
part leaves; a part that holds the first's tokens (the first's ``WITHIN``) counts only what is
left of it without them. When the first cause is a part of the run, the causes of every token
are also tested outside that part (``outside.py``): one that stands there on its own check's
thresholds is a second cause whatever its share; so is a code path beside a policy named first
when both stand (``peel.beside_lean``: its part within the responses, the responses leaning
outside it), and a gpu whose own test alarms beside a cause of every token
(``peel.gpu_beside_level``). A precision still named first whose token ids move on their own
and drift with the training is the policy (``drift.drifting_level``)."""


@dataclass
class Weighing:
    """``named``: the best supported cause that alarms (None when none does); ``also``: second
    causes; ``runner_ups``: every other cause with its score and why it lost; ``unexplained``:
    an alarm that no cause explains a fifth of."""

    named: Weighed | None
    also: list[Weighed] = field(default_factory=list)
    runner_ups: list[Weighed] = field(default_factory=list)
    unexplained: bool = False

    @property
    def verdict(self) -> str:
        if self.named is None:
            return WARN if self.unexplained else OK
        return self.named.support.verdict


def weigh(ctx: Context) -> Weighing:
    """Every cause's support on the run, scored and ranked."""
    found = [(c, s) for c in CAUSES if (s := c.support(ctx)) is not None]
    parts = max((s.share or 0.0 for c, s in found if s.alarm and not c.EVERY_TOKEN), default=0.0)
    weighed = requests_beside_part(ctx, [_score(c, s, parts) for c, s in found])
    alarmed = [w for w in weighed if w.support.alarm]
    first = next((w for w in alarmed if _precondition(w) and w.support.verdict == FAIL), None)
    if first is None and alarmed:
        first = max(alarmed, key=_rank)
        first = path_over_lean(ctx, first, alarmed) or first  # a biased kernel's lean
        first = stop.over_part(first, alarmed) or first  # a part holding the turns' ends
    if first is not None and not _precondition(first) and _too_little(ctx, first):
        others = sorted(weighed, key=_rank, reverse=True)
        return Weighing(None, [], [_lost(ctx, w, None) for w in others], unexplained=True)
    if first is None and _unexplained_alarm(ctx):
        others = sorted(weighed, key=_rank, reverse=True)
        return Weighing(None, [], [_lost(ctx, w, None) for w in others], unexplained=True)
    cut = ALSO_SHARE * _excess_fraction(ctx)
    also = [w for w in alarmed if first is not None and _second(ctx, first, w, cut)]
    beside = getattr(first.cause, "beside", None) if first is not None else None
    if beside is not None and not beside({w.cause.KEY for w in alarmed}):
        also = []  # the first cause's fault sets off every other alarm (its ``beside``)
    if first is not None:  # a fault hidden under a louder one's part (outside.py) or shift
        also += [w for w in second_pass(ctx, first, weighed) if w.cause not in _causes(also)]
        first, also = level_over_part(ctx, first, also, cut)  # a level holding most of it
        also += [w for w in peeled(ctx, first, weighed) if w.cause not in _causes(also)]
        first = level_leans(ctx, first, also, weighed) or first  # the level leans outside a path
        varying = varying_level(ctx, first, alarmed)  # a level that varies by step
        if varying is not None:  # the split of its steps is its own finding
            first, also = varying, [w for w in also if not steps_part(w)]
        first = drifting_level(ctx, first, also) or first  # ids that drift: weights, not a level
        also = [varying_second(ctx, w, alarmed) for w in also]
        first, also = steps_by_change(ctx, first, also)  # steps hot throughout: what changed
        also += [w for w in [steps_beside(ctx, first, also)] if w is not None]
    named = [] if first is None else [first.cause]  # the first may be a peel's new Weighed
    rest = [w for w in weighed if w.cause not in named + _causes(also)]
    rest.sort(key=_rank, reverse=True)
    tail = None if policy in _causes(also) else truncation_tail(ctx, first)
    return Weighing(first, also, [_lost(ctx, w, first, tail) for w in rest])


def _too_little(ctx: Context, first: Weighed) -> bool:
    """The run exceeds its baseline and the cause explains under ``MIN_SHARE`` of that excess."""
    fraction = _excess_fraction(ctx)
    if fraction >= 1.0:
        return False
    return (first.support.share or 0.0) < MIN_SHARE * fraction


def _excess_fraction(ctx: Context) -> float:
    """The share of the run's mass that is excess: ``1 - 1/ratio`` over a baseline the run
    exceeds (the shares are of the run's mass, the cuts of its excess); 1 without one."""
    base = ctx.result(baseline)
    e = evidence_of(base, baseline.Evidence)
    ratio = e.rate_ratio if fired(base) and e is not None else None
    if ratio is None or not ratio > 1:
        return 1.0
    return 1.0 - 1.0 / ratio


def _causes(found: list[Weighed]) -> list[CauseModule]:
    return [w.cause for w in found]


def _unexplained_alarm(ctx: Context) -> bool:
    """No cause alarms, yet the run is worse than its baseline or beyond the medium band."""
    base = ctx.result(baseline)
    return fired(base) or (ctx.vllm_kl or 0.0) > MEDIUM_MAX


def _score(cause: CauseModule, support: Support, parts: float) -> Weighed:
    """A cause of every token explains what the parts of the run do not, or what its own
    measure says it explains where that is more (``Support.least``: a temperature's line holding
    98% of ``r``'s variance explains the steps where its excess grows too)."""
    if cause.EVERY_TOKEN and support.share is None:
        share = max(0.0, 1.0 - parts, support.least or 0.0) if support.alarm else 0.0
        support = Support(**{**support.__dict__, "share": share})
    share = support.share or 0.0
    return Weighed(cause, support, share * AGAINST ** len(support.against))


def _rank(w: Weighed) -> tuple[float, int, float]:
    """By score, then the worse verdict, then how far the interval's low end lies above 1."""
    low = w.support.ci[0] if w.support.ci else 0.0
    severity = {FAIL: 2, WARN: 1}.get(w.support.verdict, 0)
    return (round(w.score, 6), severity, low if math.isfinite(low) else 0.0)


def _precondition(w: Weighed) -> bool:
    return bool(getattr(w.cause, "PRECONDITION", False))


def _second(ctx: Context, first: Weighed, w: Weighed, cut: float) -> bool:
    """An independently supported second cause (``cut``: ``ALSO_SHARE`` of the excess): not
    set off by the first's fault once the first is peeled (``peel.explains``), not a remainder
    beside a part (``OUTSIDE_ONLY``: the second pass tests it there), and, when its part holds
    the first's (``WITHIN``), standing on what is left of it without the first's tokens."""
    if w is first or w.cause.CLASS == first.cause.CLASS:
        return False
    if w.score < cut:
        if gpu_beside_level(ctx, first, w):
            return not explains(ctx, first, w)
        return w.support.alarm and beside_lean(ctx, first, w)
    if explains(ctx, first, w):
        return False
    if _outside_only(first, w):
        return False
    return _left(first, w) >= cut


def _outside_only(first: Weighed, w: Weighed) -> bool:
    """A cause measured only outside a part (the precision's level) beside a cause of a part."""
    return bool(getattr(w.cause, "OUTSIDE_ONLY", False)) and not first.cause.EVERY_TOKEN


def _left(first: Weighed, w: Weighed) -> float:
    """``w``'s score, or, when its part holds the first's (the first's ``WITHIN``), its share
    less the first's: the excess of its part outside the first's tokens."""
    if w.cause.KEY not in getattr(first.cause, "WITHIN", ()):
        return w.score
    return max(0.0, (w.support.share or 0.0) - (first.support.share or 0.0))


def _lost(ctx: Context, w: Weighed, first: Weighed | None, tail: str | None = None) -> Weighed:
    """Why a runner-up is not the named cause, in one clause; ``tail``: what the tail of a
    truncation named first holds when nothing is named beside it (``peel.truncation_tail``),
    said of the policy and the precision."""
    s = w.support
    path = steps_runner_up(first, w) or drift_runner_up(first, w)
    if path is not None:
        why = path
    elif tail is not None and w.cause in (policy, precision):
        why = tail
    elif not s.alarm and w.cause is policy and (unread := split_unread(ctx, first)):
        why = f"{QUIET}; {unread}"
    elif not s.alarm:
        why = QUIET
    elif first is None:
        why = f"explains {_pct(s.share)} of the run's mass, under a fifth of its excess"
    elif level_shape(ctx, first, w):
        why = (
            f"over the baseline its part is no hotter than the rest's level: the shape of "
            f"{first.cause.LABEL} (a loss growing with the context)"
        )
    elif (w.cause.KEY in first.cause.EXPLAINS or in_part(first, w)) and explains(ctx, first, w):
        why = f"{first.cause.LABEL} sets off its checks too"
    elif first.cause.KEY in w.cause.EXPLAINS and explains(ctx, first, w):
        why = f"the same finding as {first.cause.LABEL}, named first (one sets off the other's checks)"
    elif _outside_only(first, w):
        why = (
            f"beside {first.cause.LABEL} it counts only outside that part (the second pass), "
            "not on what the part leaves"
        )
    elif w.cause.KEY in getattr(first.cause, "WITHIN", ()):
        why = f"without the tokens of {first.cause.LABEL} its part explains {_pct(_left(first, w))}"
    elif s.against:
        why = "; ".join(s.against)
    else:
        why = f"explains {_pct(s.share)}, against {_pct(first.support.share)}"
    return Weighed(w.cause, w.support, w.score, lost=why)


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.0f}%"


def weighing_rows(
    ctx: Context, found: Weighing
) -> tuple[CauseRow | None, list[CauseRow], list[CauseRow]]:
    """The weighing as the JSON's ``cause`` writes it: the named cause (None: none, or
    unexplained), the second causes, the runner-ups."""
    head = None
    if not found.unexplained and found.named is not None:
        head = _row(ctx, found.named, advice=True)
    also = [_row(ctx, w, advice=True) for w in found.also]
    return head, also, [_row(ctx, w) for w in found.runner_ups]


def _row(ctx: Context, w: Weighed, advice: bool = False) -> CauseRow:
    s, c = w.support, w.cause
    return CauseRow(
        key=c.KEY,
        cls=c.CLASS,
        label=c.LABEL,
        verdict=s.verdict,
        variant=s.variant or None,
        where=s.where or None,
        share=s.share,
        score=w.score,
        rate_ratio=s.ratio,
        rate_ratio_ci=s.ci,
        because=s.because,
        checks=list(s.checks),
        against=list(s.against),
        next=c.advice(ctx, s) if advice else None,
        correction=c.CORRECTION if advice else None,
        lost=w.lost or None,
    )
