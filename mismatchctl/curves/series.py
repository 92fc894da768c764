"""Per-step series of a run: those derived from the dumps and those of its training logs.

The dump side comes from the report's per-(run, step) groups (``vllm_kl``, ``trainer_ppl``,
``abs_log_ratio_mean``) and from the sequence rows (``reward_mean``, ``entropy_mean``); the log side
is the run's ``ingest-metrics`` table. Both are restricted to the selection's step range.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from mismatchctl.columns import arrow_of, numpy_of
from mismatchctl.engines import plan as K
from mismatchctl.engines.plan import RowFilter, row_mask
from mismatchctl.engines.sequences import ENTROPY_MEAN, REWARD_MEAN, StepMeans
from mismatchctl.stats import registry as M
from mismatchctl.store import Store
from mismatchctl.store.log_metrics import METRIC, STEP, VALUE, read_metrics_table

KL = M.VLLM_KL
REPORT_METRICS = (KL, M.TRAINER_PPL, M.ABS_LOG_RATIO_MEAN)
DUMP_METRICS = (*REPORT_METRICS, REWARD_MEAN, ENTROPY_MEAN)
DUMPS = "dumps"


@dataclass
class Series:
    """One per-step curve: ``steps`` ascending and unique, ``values`` float64 (NaN allowed)."""

    name: str
    origin: str  # "dumps" or the path of the training log it came from
    steps: np.ndarray
    values: np.ndarray

    @property
    def from_dumps(self) -> bool:
        return self.origin == DUMPS


def value_at(s: Series, step: int) -> float | None:
    """The curve's value at ``step`` (NaN when logged so), None when it has no value there."""
    i = int(np.searchsorted(s.steps, step))
    if i < len(s.steps) and s.steps[i] == step:
        return float(s.values[i])
    return None


def dump_series(run: str, step_groups: list, means: StepMeans) -> dict[str, Series]:
    """The dump-derived curves of ``run``: the report's per-step groups (a list of groups with
    ``by[run]``, ``by[step]`` and ``metrics``) plus reward and entropy means of its sequences
    (``means``: ``engines.sequences.read_sequences``'s, read with the report's other uses of
    the sequence rows)."""
    mine = sorted((g for g in step_groups if g.by[K.RUN] == run), key=lambda g: g.by[K.STEP])
    steps = np.array([g.by[K.STEP] for g in mine], dtype=np.int64)
    out = {
        name: Series(name, DUMPS, steps, _floats(g.metrics.get(name) for g in mine))
        for name in REPORT_METRICS
    }
    out.update({name: Series(name, DUMPS, s, v) for name, (s, v) in means.items()})
    return out


def _floats(values) -> np.ndarray:
    return np.array([np.nan if v is None else float(v) for v in values], dtype=np.float64)


def log_series(store: Store, run: str, rows: RowFilter) -> dict[str, Series]:
    """The run's training-log curves, in the selection's step range; origin = their source."""
    table = read_metrics_table(store, run)
    if table.num_rows == 0:
        return {}
    import pyarrow.compute as pc  # only for a run with training logs: it costs 0.05 s to load

    if rows.steps is not None:
        table = table.filter(row_mask(table.select([STEP]), RowFilter(rows.steps)))
    paths = {s.id: s.path for s in store.run(run).metric_sources}
    out: dict[str, Series] = {}
    metric = table.column(METRIC)
    for name in pc.unique(metric).to_pylist():
        part = table.filter(pc.equal(metric, name))  # sorted by (metric, step) in the store
        ids = pc.unique(part.column("source_id")).to_pylist()
        out[name] = Series(
            name,
            ", ".join(paths.get(i, "training log") for i in sorted(ids)),
            numpy_of(part.column(STEP)),
            numpy_of(part.column(VALUE)),
        )
    return out


def selection_table(series: dict[str, Series]) -> pa.Table:
    """All curves as one wide table: a ``step`` column (the union of steps) and one column per
    curve, null where the curve has no value at that step."""
    steps = np.unique(np.concatenate([s.steps for s in series.values()] or [np.array([], "i8")]))
    cols: dict[str, pa.Array] = {"step": arrow_of(steps.astype(np.int64))}
    for name, s in series.items():
        at = np.searchsorted(steps, s.steps)
        values = np.full(len(steps), np.nan)
        values[at] = s.values
        present = np.zeros(len(steps), dtype=bool)
        present[at] = True
        cols[name] = arrow_of(values.astype(np.float64), valid=present)
    return pa.Table.from_arrays(list(cols.values()), names=list(cols))
