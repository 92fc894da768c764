"""MoE routing replay (R3) holds when a run says it is on: the share of compared positions whose
trainer routes differ from the engine's. A run whose routes agree on every compared token says
it by itself (no tag needed). No check at all for a selection without either."""

from __future__ import annotations

from dataclasses import dataclass

from mismatchctl.analysis.diagnose.check import (
    DATA,
    FAIL,
    NA,
    OK,
    WARN,
    Check,
    CheckEvidence,
    advice_if,
    renamed,
    worst,
)
from mismatchctl.analysis.diagnose.context import CheckModule, Context
from mismatchctl.stats import routing_sums as R

NAME = "routing_replay"
LAYER = DATA
TITLE = "routing replay holds (R3)"
ORDER = 130
READS: tuple[CheckModule, ...] = ()


@dataclass(frozen=True)
class Thresholds:
    R3_VIOLATION_FAIL: float = 0.01
    """With routing replay on, the share of compared positions whose trainer routes differ from
    the engine's should be 0; miles' own replay check fails above 1e-2 (its
    ``replay_check_max_mismatch_fraction``). Any violation warns."""


T = Thresholds()


@dataclass(frozen=True, kw_only=True)
class Replay(CheckEvidence):
    """One run's share of compared positions that violate replay (0 for a run not tagged,
    whose routes agree everywhere), and whether it is tagged ``routing_replay=r3``."""

    r3_violation_fraction: float | None = renamed(R.R3_VIOLATION_FRACTION)
    tagged: bool


@dataclass(frozen=True, kw_only=True)
class Evidence(CheckEvidence):
    """Each run with replay on (``runs``)."""

    runs: dict[str, Replay]


def replayed(m: dict) -> bool:
    """Routes equal on every compared token: replay is on (numeric flips leave some)."""
    return m.get(R.ROUTING_TOKEN_AGREEMENT) == 1.0


BUG_ADVICE = (
    "replay is on but the trainer routes differ: a capture or alignment bug. Check the routes "
    "are aligned per input position (--routes-aligned), that padding and tool positions hold -1 "
    "and not 0 or the last row, and the ingest notes for capture bugs"
)


def run(ctx: Context) -> Check | None:
    """Runs tagged ``routing_replay=r3``: the share of compared positions that violate it; an
    untagged run whose routes agree on every compared token says replay is on by itself (its
    violations are 0)."""
    runs = {r: x for r, x in ctx.report.routing.items() if x.replay or replayed(x.metrics)}
    if not runs:
        return None
    rows = {run: x.metrics[R.R3_VIOLATION_FRACTION] if x.replay else 0.0 for run, x in runs.items()}
    verdicts = {
        run: NA if v is None else OK if v == 0 else FAIL if v > T.R3_VIOLATION_FAIL else WARN
        for run, v in rows.items()
    }
    verdict = worst(list(verdicts.values()))
    bad = [run for run, v in verdicts.items() if v == verdict]
    finding = "; ".join(
        f"{run}: replay is on and {100 * (rows[run] or 0):.2g}% of the compared tokens violate it"
        if verdict in (WARN, FAIL)
        else f"{run}: replay holds on every compared token"
        if verdict == OK
        else f"{run}: no compared token"
        for run in bad[:3]
    )
    evidence = Evidence(
        runs={
            run: Replay(r3_violation_fraction=v, tagged=runs[run].replay) for run, v in rows.items()
        }
    )
    return Check(LAYER, NAME, TITLE, verdict, finding, evidence, advice_if(verdict, BUG_ADVICE))
