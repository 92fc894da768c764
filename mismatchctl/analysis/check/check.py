"""`check`: a gate for CI and training scripts. Thresholds on a selection's metrics (any metric
of the registry a selection has: the count, token and sequence metrics of its report and the
statistics of its per-batch vllm_kl), each a test case with a verdict, and with ``diagnose``
each of diagnose's checks as one more.

Default thresholds come from the severity bands (``stats.bands``, METRICS.md), the only place
their numbers live:

- ``vllm_kl <= 2e-2``: the selection's vllm_kl within the ``medium`` band (above it, diagnose
  fails a mismatch pattern);
- ``vllm_kl_step_max <= 1e-1``: no batch in the ``severe`` band (the study's batch filter).

A threshold given for a metric and direction (``--thresholds FILE``, then ``--max``/``--min``)
replaces the default of that metric and direction; ``defaults=False`` drops the defaults.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mismatchctl.analysis.check.metrics import gated_metrics
from mismatchctl.analysis.diagnose import Diagnosis, build_diagnosis
from mismatchctl.analysis.diagnose.levels import HIGH_MAX, MEDIUM_MAX
from mismatchctl.analysis.json_form import NONE, JsonForm, internal, member
from mismatchctl.analysis.report.report import Report, report_on
from mismatchctl.analysis.selection import reread, resolve
from mismatchctl.analysis.selectors import parse_selector
from mismatchctl.display import did_you_mean, file_label, number, shown
from mismatchctl.engines import plan as K
from mismatchctl.engines.choice import LOCAL_ENGINE, Engine
from mismatchctl.errors import UsageError
from mismatchctl.parallel import DEFAULT_WORKERS
from mismatchctl.stats import registry as M
from mismatchctl.stats import step_summary
from mismatchctl.store import Store

MAX, MIN = "max", "min"
OK, FAIL = "ok", "fail"
DEFAULTS: tuple[tuple[str, str, float], ...] = (
    (M.VLLM_KL, MAX, MEDIUM_MAX),
    (M.VLLM_KL_STEP_MAX, MAX, HIGH_MAX),
)


@dataclass(frozen=True)
class Threshold:
    metric: str
    direction: str  # "max" | "min"
    limit: float
    source: str  # "default", the thresholds file as given, or "--max" / "--min"

    @property
    def name(self) -> str:
        return f"{self.metric} {'<=' if self.direction == MAX else '>='} {self.limit:g}"


@dataclass(frozen=True)
class Case(JsonForm):
    """One threshold judged: the selection's value and the verdict (``fail`` also when the
    selection has no value for the metric: a gate fails closed). Its JSON is its fields, the
    threshold's in its place."""

    name: str  # the threshold's (``vllm_kl <= 0.02``)
    threshold: Threshold = member(flat=True)
    value: float | None = member()
    verdict: str = member()
    message: str = member()


def _checks(diagnosis: Diagnosis) -> list[dict[str, object]]:
    """diagnose's checks as ``check`` writes them: each as ``diagnose --json`` writes it (its
    evidence's keys renamed and flattened as there, not the dataclass's fields)."""
    return [c.to_dict() for c in diagnosis.checks]


@dataclass(frozen=True)
class Gate(JsonForm):
    """The thresholds judged on a selection, with diagnose's checks when asked; ``passed``: no
    case failed, nor the diagnosis. Its JSON is its fields, under ``check``."""

    JSON_ROOT = "check"

    selector: str = internal()
    label: str = member(key="selection")
    passed: bool = member()
    cases: list[Case] = member(key="thresholds")
    diagnosis: Diagnosis | None = member(key="diagnose", form=_checks, omit=NONE, default=None)
    notes: list[str] = internal(default_factory=list)

    @property
    def failed_cases(self) -> list[Case]:
        return [c for c in self.cases if c.verdict == FAIL]

    def to_polars(self) -> Any:
        """One row per threshold: name, metric, direction, limit, source, value, verdict."""
        import polars as pl

        return pl.DataFrame([c.to_dict() for c in self.cases], infer_schema_length=None)


def parse_threshold(text: str, direction: str, source: str) -> Threshold:
    name, sep, value = text.partition("=")
    flag = f"--{direction}"
    if not sep:
        raise UsageError(
            f"{flag} `{shown(text, 80)}` is not METRIC=VALUE",
            f"write e.g. {flag} vllm_kl=1e-3.",
        )
    return Threshold(_metric(name.strip(), source), direction, _limit(value, text, source), source)


def _metric(name: str, source: str) -> str:
    gated = gated_metrics()
    if name in gated:
        return name
    known = {str(m) for m in M.ALL}
    what = (
        "is a metric check cannot gate on (not one of a whole selection)"
        if name in known
        else "is not a metric"
    )
    raise UsageError(
        f"{source}: `{shown(name, 80)}` {what}",
        f"{did_you_mean(name, gated)}`mismatchctl check --help` lists the {len(gated)} metrics "
        "a gate takes (vllm_kl, vllm_kl_step_max, prob_pearson...); docs/metrics.md describes "
        "each.",
    )


def _limit(value: str | float, text: str, source: str) -> float:
    try:
        limit = float(value)
    except (TypeError, ValueError):
        limit = math.nan
    if isinstance(value, bool) or not math.isfinite(limit):
        raise UsageError(
            f"{source}: the limit of `{shown(str(text), 80)}` is not a finite number",
            "write a number such as 1e-3 or 0.01.",
        )
    return limit


def read_thresholds(path: str) -> list[Threshold]:
    """A TOML file of ``[max]`` and ``[min]`` tables of ``metric = limit``."""
    label = file_label(path)
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot read {label}: {exc.strerror}", "check the path.") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{label} is not TOML: {exc}", "see `mismatchctl check --help`.") from None
    extra = sorted(set(data) - {MAX, MIN})
    if extra or not all(isinstance(data.get(d, {}), dict) for d in (MAX, MIN)):
        raise UsageError(
            f"{label}: expected only [max] and [min] tables, found {', '.join(extra) or 'values'}",
            "write e.g. [max] then vllm_kl = 1e-3 and [min] then prob_pearson = 0.999.",
        )
    return [
        Threshold(_metric(k, label), d, _limit(v, f"{k} = {v}", label), label)
        for d in (MAX, MIN)
        for k, v in data.get(d, {}).items()
    ]


def merge(given: list[Threshold], defaults: bool) -> list[Threshold]:
    """The defaults (unless dropped), each replaced by a given threshold of its metric and
    direction; later given thresholds replace earlier ones."""
    out: dict[tuple[str, str], Threshold] = {}
    if defaults:
        out = {(m, d): Threshold(m, d, v, "default") for m, d, v in DEFAULTS}
    for t in given:
        out[(t.metric, t.direction)] = t
    return list(out.values())


def selection_values(rep: Report) -> dict[str, Any]:
    """The whole selection's metrics and the statistics of its per-batch vllm_kl."""
    whole = rep.whole()
    values: dict[str, Any] = dict(whole.metrics) if whole is not None else {}
    batches = [g.metrics.get(M.VLLM_KL) for g in rep.split(K.RUN, K.STEP)]
    values.update(step_summary(batches))
    values[M.BATCHES] = len(batches)
    return values


def judge(t: Threshold, values: dict[str, Any]) -> Case:
    value = values.get(t.metric)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return Case(t.name, t, None, FAIL, f"{t.metric} has no value for this selection")
    value = float(value)
    ok = value <= t.limit if t.direction == MAX else value >= t.limit
    word = "above the maximum" if t.direction == MAX else "below the minimum"
    message = f"{t.metric} = {number(value)}" + ("" if ok else f", {word} {t.limit:g}")
    return Case(t.name, t, value, OK if ok else FAIL, message)


def build_gate(
    store: Store,
    selector: str,
    thresholds: list[Threshold],
    *,
    diagnose: bool = False,
    workers: int = DEFAULT_WORKERS,
    engine: Engine = LOCAL_ENGINE,
) -> Gate:
    """Each threshold judged on the selection; with ``diagnose``, diagnose's checks too (the
    diagnosis's own report gives the values then: one read)."""
    diagnosis = None
    if diagnose:
        diagnosis = build_diagnosis(store, selector, workers=workers, engine=engine)
        rep = diagnosis.report
    else:
        sel = parse_selector(selector)
        rep = reread(lambda: report_on(resolve(store, sel), workers=workers, engine=engine))
    values = selection_values(rep)
    label = rep.selection.label or ", ".join(rep.selection.names)
    cases = [judge(t, values) for t in thresholds]
    failed = any(c.verdict == FAIL for c in cases) or bool(diagnosis and diagnosis.failed)
    return Gate(selector, label, not failed, cases, diagnosis)
