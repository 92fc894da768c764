"""What `watch` says about each new step of a run: its tokens and vllm_kl with its band, the
change against the run's recent median, and the alerts that fire (a spike, a band crossing),
with where the excess lives (``explain`` of the step against its quiet recent steps) when asked.

The per-step numbers are the report's (``build_report`` split by run and step, reading only the
parts that hold the steps asked for); the thresholds are below, each with where it comes from.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from mismatchctl.analysis.diagnose.levels import MEDIUM_MAX
from mismatchctl.analysis.explain import explain_selections
from mismatchctl.analysis.report.report import build_report
from mismatchctl.analysis.selection import resolve_text
from mismatchctl.analysis.selectors import selector_text
from mismatchctl.engines import plan as K
from mismatchctl.engines.plan import StepRange
from mismatchctl.stats import BAND_NAMES, band
from mismatchctl.stats import registry as M
from mismatchctl.stats.localize.result import NONE, Explanation, Finding, unlocated_sentence
from mismatchctl.store import Store

RECENT_STEPS = 20
"""The run's recent median is over the (at most) 20 steps just below the new one: long enough
that one spike does not move it, short enough to follow a run whose level drifts. The steps
among them that were spikes themselves are left out while at least ``MIN_HISTORY`` others
remain: a run whose fault fires on half its steps (the sample run faulty-attn spikes on steps 3,
4, 6 and 7) would otherwise raise the median to the fault's level and hide the next spike. A
level that stays up is learned once the window holds fewer quiet steps than that."""

MIN_HISTORY = 3
"""A spike needs a median of at least 3 earlier steps (with fewer, one odd step is the median)."""

SPIKE_FACTOR = 3.0
"""A step at 3x the recent median or more is a spike. A conservative choice that keeps a healthy
run quiet: the captured healthy sample runs vary per step by at most ~1.3x their median, and the
faults we know raise the mismatch 2x-1000x (BACKGROUND.md); 2x, the localization's factor for a
cell tested with intervals, would fire on the sampling noise of one small batch."""

WARN, FAIL = "warn", "fail"
LEVELS = (WARN, FAIL)


def level_of(value: float | None) -> str:
    """``fail`` above the ``medium`` band's upper edge (2e-2: diagnose's failure level), else
    ``warn``."""
    return FAIL if value is not None and value > MEDIUM_MAX else WARN


@dataclass
class Alert:
    """One check that fired: ``check`` is ``spike``, ``band`` (or ``bad_file`` / ``changed_file``
    for a file ``watch`` could not ingest)."""

    check: str
    level: str
    message: str
    localized: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        out = {"check": self.check, "level": self.level, "message": self.message}
        if self.localized is not None:
            out["localized"] = self.localized
        return out


@dataclass
class StepLine:
    """One step as `watch` prints it. ``update``: an earlier file already brought this step (a
    rank of it); the numbers are the step's over every file ingested so far, and a check that
    alerted on the step before does not alert again."""

    run: str
    step: int
    tokens: int
    sequences: int
    vllm_kl: float | None
    band: str | None
    recent_median: float | None
    recent_steps: int
    files: list[str]
    update: bool = False
    spikes_left_out: int = 0  # earlier spikes left out of the recent median
    alerts: list[Alert] = field(default_factory=list)

    @property
    def change(self) -> float | None:
        """vllm_kl over the recent median (None without both)."""
        if self.vllm_kl is None or not self.recent_median:
            return None
        return self.vllm_kl / self.recent_median

    def alert_context(self) -> dict[str, Any]:
        """What an alert record says of its step (``--alerts``)."""
        return {"step": self.step, M.VLLM_KL: self.vllm_kl, "band": self.band}

    def to_dict(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "step": self.step,
            "tokens": self.tokens,
            "sequences": self.sequences,
            M.VLLM_KL: self.vllm_kl,
            "band": self.band,
            "recent_median": self.recent_median,
            "recent_steps": self.recent_steps,
            "spikes_left_out": self.spikes_left_out,
            "change": self.change,
            "update": self.update,
            "files": self.files,
            "alerts": [a.to_dict() for a in self.alerts],
        }


@dataclass
class StepValue:
    tokens: int
    sequences: int
    vllm_kl: float | None


def step_values(store: Store, run: str, steps: list[int] | None = None) -> dict[int, StepValue]:
    """The report's tokens, sequences and vllm_kl of each step of ``run`` (of ``steps`` only,
    reading the parts that hold them, when given)."""
    rng = StepRange(min(steps), max(steps)) if steps else None
    rep = build_report(store, [run], steps=rng)
    wanted = set(steps) if steps else None
    out = {}
    for g in rep.split(K.RUN, K.STEP):
        step = int(g.by[K.STEP])
        if wanted is None or step in wanted:
            kl = g.metrics.get(M.VLLM_KL)
            kl = None if kl is None or not math.isfinite(kl) else float(kl)
            out[step] = StepValue(int(g.metrics[M.TOKENS]), int(g.metrics[M.SEQUENCES]), kl)
    return out


class StepHistory:
    """The run's per-step vllm_kl seen so far, and the lines and alerts of new steps."""

    def __init__(self, run: str, values: dict[int, StepValue] | None = None) -> None:
        self.run = run
        self.values: dict[int, float | None] = {}
        self.spikes: set[int] = set()  # steps at SPIKE_FACTOR x their own recent median or more
        self.fired: dict[int, set[str]] = {}  # step -> checks alerted (once per step)
        given = values or {}
        for step in sorted(given):  # the steps read back, judged as they came
            value = given[step].vllm_kl
            self._judge(step, value, *self.recent(step)[:2])
            self.values[step] = value

    def earlier(self, step: int) -> list[int]:
        """The (at most RECENT_STEPS) steps just below ``step``, in order."""
        return sorted(s for s in self.values if s < step)[-RECENT_STEPS:]

    def recent(self, step: int) -> tuple[float | None, int, int]:
        """(median, steps it is over, spikes left out) of the steps just below ``step``: the
        quiet ones when at least ``MIN_HISTORY`` are (``RECENT_STEPS``), else all of them."""
        known = [(s, v) for s in self.earlier(step) if (v := self.values[s]) is not None]
        quiet = [v for s, v in known if s not in self.spikes]
        used = quiet if len(quiet) >= MIN_HISTORY else [v for _, v in known]
        median = statistics.median(used) if used else None
        return median, len(used), len(known) - len(used)

    def _judge(self, step: int, value: float | None, median: float | None, steps: int) -> None:
        """Keep ``step`` out of later medians when it is ``SPIKE_FACTOR`` x its own or more,
        even over fewer than ``MIN_HISTORY`` steps (too few to alert on, enough to tell a step
        400x the two before it from a quiet one)."""
        if is_spike(value, median, max(steps, MIN_HISTORY) if steps else 0):
            self.spikes.add(step)
        else:
            self.spikes.discard(step)

    def line(self, step: int, value: StepValue, files: list[str]) -> StepLine:
        earlier = self.earlier(step)
        median, steps, left_out = self.recent(step)
        previous = self.values.get(earlier[-1]) if earlier else None
        line = StepLine(
            self.run, step, value.tokens, value.sequences, value.vllm_kl, band(value.vllm_kl),
            median, steps, files, update=step in self.values, spikes_left_out=left_out,
        )  # fmt: skip
        fired = self.fired.setdefault(step, set())
        line.alerts = [a for a in _alerts(line, previous) if a.check not in fired]
        fired.update(a.check for a in line.alerts)
        self._judge(step, value.vllm_kl, median, steps)
        self.values[step] = value.vllm_kl
        return line


def is_spike(value: float | None, median: float | None, steps: int) -> bool:
    """``value`` at ``SPIKE_FACTOR`` x ``median`` or more, the median over at least
    ``MIN_HISTORY`` steps."""
    if value is None or not median or steps < MIN_HISTORY:
        return False
    return value / median >= SPIKE_FACTOR


def _alerts(line: StepLine, previous: float | None) -> list[Alert]:
    out = []
    kl, change = line.vllm_kl, line.change
    if change is not None and is_spike(kl, line.recent_median, line.recent_steps):
        quiet = " quiet" if line.spikes_left_out else ""
        left = f", {line.spikes_left_out} spike(s) left out" if line.spikes_left_out else ""
        out.append(
            Alert(
                "spike",
                level_of(kl),
                f"vllm_kl {_num(kl)} is {change:.1f}x the median {_num(line.recent_median)} of "
                f"the {line.recent_steps}{quiet} steps before{left} (spike: {SPIKE_FACTOR:g}x "
                "or more)",
            )
        )
    before = band(previous) or BAND_NAMES[0]  # the first step is judged against `low`
    if line.band is not None and BAND_NAMES.index(line.band) > BAND_NAMES.index(before):
        since = "the step before" if previous is not None else "the run's start"
        out.append(
            Alert(
                "band",
                level_of(kl),
                f"vllm_kl {_num(kl)} crossed into the {line.band} band (from {before} at {since})",
            )
        )
    return out


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}"


BASELINE_STEPS = 8
"""With an alert on a step, ``explain`` reads it against at most the 8 quiet steps just below
it (among the recent ones): an alert reads 9 steps whatever the run's length, and 8 steps of a
few dozen sequences each give the baseline's cells the sequences they need."""


def quiet_steps(history: StepHistory, step: int) -> list[int]:
    """The baseline of a step's localization: the recent steps below it (``earlier``) whose
    vllm_kl is within ``SPIKE_FACTOR`` of the lowest of them, the last ``BASELINE_STEPS`` of
    those. A spike among them would teach the baseline the fault (its hot cells would predict
    the step's); the lowest step, not the median, sets the bar, as half the recent steps can be
    faulty (the sample run faulty-attn spikes on steps 3, 4, 6 and 7)."""
    known = {s: v for s in history.earlier(step) if (v := history.values[s]) is not None}
    if not known:
        return []
    floor = min(known.values())
    return [s for s, v in known.items() if v <= SPIKE_FACTOR * floor][-BASELINE_STEPS:]


def step_blocks(steps: list[int], known: list[int]) -> list[StepRange]:
    """``steps`` (a subset of the sorted ``known``) as ranges of steps adjacent in ``known``:
    each range holds no known step outside ``steps``."""
    where = {s: i for i, s in enumerate(known)}
    blocks: list[list[int]] = []
    for s in steps:
        if blocks and where[s] == where[blocks[-1][-1]] + 1:
            blocks[-1].append(s)
        else:
            blocks.append([s])
    return [StepRange(b[0], b[-1]) for b in blocks]


def localize(store: Store, history: StepHistory, step: int) -> dict[str, Any] | None:
    """Where the step's mismatch lives: ``explain`` of the step against its quiet steps
    (``quiet_steps``: the excess over what their rates predict), or within the step when it is
    the first. The cells found (or the few sequences' leads), the excess spread evenly over
    the step (``uniform``), or None when the step holds no significant excess."""
    run = history.run
    quiet = quiet_steps(history, step)
    blocks = step_blocks(quiet, sorted(history.values))
    texts = [selector_text(run, steps=b) for b in blocks]
    target = selector_text(run, steps=StepRange(step, step))
    against = " + ".join(texts) or None
    expl = explain_selections(
        resolve_text(store, target), [resolve_text(store, t) for t in texts], target, against,
        bootstrap_intervals=False,
    )  # fmt: skip
    return localized(expl.explanation, target, against or "the rest of the step", quiet)


def localized(x: Explanation, target: str, against: str, quiet: list[int]) -> dict[str, Any] | None:
    """What an alert says of where its step's excess lives (``--json``, ``--alerts``)."""
    kind = x.located
    if kind == NONE:
        return None
    cells = x.findings or x.leads
    out: dict[str, Any] = {"kind": kind, "against": against, "baseline_steps": quiet}
    out["step_rate_ratio"] = x.rate_ratio
    if not cells:  # uniform, or not held by any cell
        return {**out, "where": {}, "rate_ratio": x.rate_ratio, M.TOKEN_SHARE: 1.0,
                "sentence": unlocated_sentence(x, target), "cells": []}  # fmt: skip
    top = cells[0]
    return {
        **out,
        "where": dict(top.where),
        "rate_ratio": top.rate_ratio,
        M.TOKEN_SHARE: top.token_share,
        "sentence": top.sentence,
        "effective_sequences": top.effective_sequences,
        "cells": [_cell(c) for c in cells],
    }


def _cell(f: Finding) -> dict[str, Any]:
    return {
        "where": dict(f.where),
        "rate_ratio": f.rate_ratio,
        M.TOKEN_SHARE: f.token_share,
        "excess_share": f.excess_share,
        "effective_sequences": f.effective_sequences,
        "sentence": f.sentence,
    }
