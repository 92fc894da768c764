"""What every check of `diagnose` shares: the verdict scale, the ``Check`` result and the
``Context`` the checks read (the report, the extra state, per-run step series)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mismatchctl.analysis.diagnose_extra import DiagnoseState
from mismatchctl.analysis.report import Report
from mismatchctl.engines import plan as K
from mismatchctl.stats import registry as M

OK, WARN, FAIL, NA = "ok", "warn", "fail", "n/a"
SEVERITY = {NA: 0, OK: 1, WARN: 2, FAIL: 3}

DATA, SEMANTIC, PATH, TRAJECTORY, OBJECTIVE = (
    "data integrity",
    "semantic",
    "inference path",
    "trajectory",
    "objective",
)
LAYERS = (DATA, SEMANTIC, PATH, TRAJECTORY, OBJECTIVE)
MAX_LISTED = 20  # steps, samples or bins listed as evidence


@dataclass
class Check:
    layer: str
    name: str
    title: str
    verdict: str
    finding: str  # one sentence with the numbers
    evidence: dict[str, Any] = field(default_factory=dict)
    next: str | None = None  # what to try next (None when nothing is to be done)


def misaligned(ctx: Context) -> Check | None:
    """The failed alignment check, if any: the other numbers then mix up tokens."""
    found = ctx.done.get("alignment")
    return found if found is not None and found.verdict == FAIL else None


def advice_if(verdict: str, text: str) -> str | None:
    """What to try next, for checks that warn or fail."""
    return text if verdict in (WARN, FAIL) else None


def grade(fail: bool, warn: bool) -> str:
    return FAIL if fail else WARN if warn else OK


def worst(verdicts: list[str]) -> str:
    return max(verdicts, key=SEVERITY.__getitem__, default=NA)


@dataclass
class StepSeries:
    """One run's batches in step order."""

    steps: np.ndarray
    vllm_kl: np.ndarray  # NaN where not computable
    trainer_ppl: np.ndarray
    bands: list[str | None]


@dataclass
class Context:
    report: Report
    state: DiagnoseState
    seq_mis: dict[str, Any] | None  # whatif metrics of seq-mis at C = 2 on the whole selection
    label: str  # the selector, for commands suggested in the advice
    series: dict[str, StepSeries] = field(default_factory=dict)
    done: dict[str, Check] = field(default_factory=dict)  # checks already run, by name

    @property
    def vllm_kl(self) -> float | None:
        whole = self.report.whole()
        return None if whole is None else whole.metrics.get(M.VLLM_KL)


def step_series(report: Report) -> dict[str, StepSeries]:
    rows: dict[str, list[tuple[int, float, float, str | None]]] = {}
    for g in report.split(K.RUN, K.STEP):
        m = g.metrics
        rows.setdefault(g.by[K.RUN], []).append(
            (g.by[K.STEP], _nan(m.get(M.VLLM_KL)), _nan(m.get(M.TRAINER_PPL)), g.band)
        )
    out = {}
    for run, items in rows.items():
        items.sort(key=lambda t: t[0])
        out[run] = StepSeries(
            np.array([t[0] for t in items], dtype=np.float64),
            np.array([t[1] for t in items]),
            np.array([t[2] for t in items]),
            [t[3] for t in items],
        )
    return out


def _nan(x: float | None) -> float:
    return math.nan if x is None else float(x)


def fmt(x: float | None, digits: int = 3) -> str:
    """Numbers inside findings: 3 significant digits, 'n/a' for missing, 'overflow' for a value
    beyond float64 (e.g. vllm_kl with exp(r) beyond it)."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    if math.isinf(x):
        return "overflow (beyond float64)"
    return f"{x:.{digits}g}"


def pct(x: float | None) -> str:
    """A share inside findings; a share of an overflowing sum (inf / inf) is 'overflow'."""
    if x is None:
        return "n/a"
    return f"{100 * x:.1f}%" if math.isfinite(x) else "overflow (beyond float64)"
