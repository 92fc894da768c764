"""What would a correction do? Every method of METRICS.md "Correction what-if" applied to a
selection: per cell (run, step, gpu; and run, step, turn kind) mergeable weight states computed
in the report's read of each part, the batch filter decided per batch once all parts are in,
then rolled up to the whole selection, each run, each step, each gpu and each turn kind."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from mismatchctl import schema as S
from mismatchctl.analysis.report.report import Report, report_on
from mismatchctl.analysis.selection import reread, resolve_text
from mismatchctl.analysis.whatif.remedy import discards_signal, remedy_dict
from mismatchctl.engines import plan as K
from mismatchctl.engines.choice import LOCAL_ENGINE, Engine
from mismatchctl.engines.keys import PartKeys, decode, token_group_codes
from mismatchctl.engines.rollup import sort_key
from mismatchctl.errors import UsageError
from mismatchctl.parallel import DEFAULT_WORKERS
from mismatchctl.stats import registry as M
from mismatchctl.stats import whatif as WI
from mismatchctl.stats.whatif import Method
from mismatchctl.store import Store

SEQ_CELLS, SEG_CELLS = "seq", "seg"
CellKey = tuple[Any, ...]  # (kind, run, step, gpu | turn_kind)
Cells = dict[CellKey, np.ndarray]  # each (n_methods, N_FIELDS)

SPLITS: list[K.Split] = [(), (K.RUN,), (K.RUN, K.STEP), (K.GPU,), (K.TURN_KIND,)]


def parse_methods(
    methods: list[str], threshold: str | None = None, sweep: str | None = None
) -> tuple[list[Method], bool]:
    """``["seq-mis", "geo-rs:0.99_1.01"]`` (every method at its default when empty), one
    ``threshold`` for a single method, or a ``sweep`` of thresholds of a single method."""
    names = [m.partition(":")[0].strip() for m in methods] or list(WI.METHODS)
    if (threshold is not None or sweep is not None) and len(names) != 1:
        option = "--threshold" if threshold is not None else "--sweep"
        raise UsageError(
            f"{option} needs exactly one --method (found {len(names)})",
            "write thresholds per method instead, e.g. --method seq-mis:2 --method k3-rs:0.01.",
        )
    if threshold is not None and sweep is not None:
        raise UsageError("--threshold and --sweep exclude each other", "use one of them.")
    given = [m for m in methods if ":" in m]
    if given and (threshold is not None or sweep is not None):
        option = "--threshold" if threshold is not None else "--sweep"
        raise UsageError(
            f"--method `{given[0]}` names a threshold and {option} gives others",
            f"write the method without `:THRESHOLD` when using {option}.",
        )
    if sweep is not None:
        values = [v.strip() for v in sweep.split(",") if v.strip()]
        if not values:
            raise UsageError(f"--sweep `{sweep}` names no threshold", "write e.g. 1.5,2,3,5.")
        return [Method(names[0], _threshold(names[0], v)) for v in values], True
    out = []
    for text in methods or names:
        name, sep, value = (x.strip() for x in text.partition(":"))
        value = value if sep else threshold
        out.append(Method(name, _threshold(name, value) if value else _default(name)))
    return list(dict.fromkeys(out)), False


METHODS_HINT = f"methods: {', '.join(WI.METHODS)}; thresholds such as 2 or 0.999_1.001."


def _default(name: str) -> WI.Threshold:
    if name not in WI.METHODS:
        raise UsageError(
            f"unknown method `{name}` (methods: {', '.join(WI.METHODS)})", METHODS_HINT
        )
    return WI.METHODS[name].default


def _threshold(name: str, text: str) -> WI.Threshold:
    try:
        return WI.parse_threshold(name, text)
    except ValueError as exc:
        raise UsageError(str(exc), METHODS_HINT) from None


class WhatifExtra:
    """Engine extra: the weight states of every method per cell of one part."""

    columns: tuple[str, ...] = (S.GPU,)

    def __init__(self, methods: list[Method]) -> None:
        self.methods = methods

    def compute(self, table: pa.Table, keys: PartKeys) -> Cells:
        lr, lt, seq = keys.column(S.ROLLOUT), keys.column(S.TRAINER), keys.column(S.SEQ)
        out: Cells = {}
        for kind, split in ((SEQ_CELLS, (K.STEP, K.GPU)), (SEG_CELLS, (K.STEP, K.TURN_KIND))):
            # coded per turn run and repeated (step, gpu and turn kind are constant along one)
            code, size, labels = token_group_codes(keys, split)
            states = WI.cell_states(lr, lt, seq, code, size, self.methods, keys.log_ratio())
            for i in np.flatnonzero(states[:, 0, WI.W.TOKENS] > 0):
                out[(kind, keys.run, *decode(int(i), labels))] = states[i]
        return out

    def merge(self, a: Cells, b: Cells) -> Cells:
        out = dict(a)
        for key, state in b.items():
            out[key] = WI.merge(out[key], state) if key in out else state
        return out


@dataclass
class WhatifGroup:
    by: dict[str, Any]
    results: list[dict[str, Any]]  # one per method, in ``Whatif.methods`` order


@dataclass(frozen=True)
class Whatif:
    report: Report
    methods: list[Method]
    sweep: bool
    groups: dict[K.Split, list[WhatifGroup]]
    batch_vllm_kl: dict[tuple[str, int], float] = field(default_factory=dict)

    def split(self, *keys: str) -> list[WhatifGroup]:
        return self.groups.get(tuple(keys), [])

    def whole(self) -> WhatifGroup:
        return self.groups[()][0]

    @property
    def label(self) -> str:
        sel = self.report.selection
        return sel.label or ", ".join(sel.names)

    def to_dict(self) -> dict[str, Any]:
        """The report's JSON plus a ``whatif`` section."""
        groups = []
        for items in self.groups.values():
            for g in items:
                for m, metrics in zip(self.methods, g.results, strict=True):
                    remedy = remedy_dict(discards_signal(metrics, m.info.unit, m.info.action))
                    groups.append(
                        {"by": g.by, **method_dict(m), "metrics": metrics, "remedy": remedy}
                    )
        return {
            **self.report.to_dict(),
            "whatif": {
                "selection": self.report.selection.label,
                "sweep": self.sweep,
                "methods": [method_dict(m) for m in self.methods],
                "groups": groups,
                "batches": [
                    {K.RUN: run, K.STEP: step, M.VLLM_KL: float(kl)}
                    for (run, step), kl in sorted(self.batch_vllm_kl.items())
                ],
            },
        }

    def to_polars(self) -> Any:
        """One row per group and method: its keys, the method and threshold, its metrics."""
        import polars as pl

        rows = []
        for items in self.groups.values():
            for g in items:
                for m, metrics in zip(self.methods, g.results, strict=True):
                    row = {f"by_{k}": None if v is None else str(v) for k, v in g.by.items()}
                    rows.append(
                        {**row, "method": m.name, "threshold": m.threshold_text(), **metrics}
                    )
        return pl.DataFrame(rows, infer_schema_length=None)


def method_dict(m: Method) -> dict[str, Any]:
    t = m.threshold
    return {
        "method": m.name,
        "threshold": list(t) if isinstance(t, tuple) else t,
        "unit": m.info.unit,
        "action": m.info.action,
        "definition": m.info.describes,
    }


def build_whatif(
    store: Store,
    selector: str,
    methods: list[Method],
    *,
    sweep: bool = False,
    workers: int = DEFAULT_WORKERS,
    on_part: Callable[[int], None] | None = None,
    engine: Engine = LOCAL_ENGINE,
) -> Whatif:

    def read() -> Report:
        selection = resolve_text(store, selector)
        extra = WhatifExtra(methods)
        return report_on(selection, workers=workers, on_part=on_part, extras=[extra], engine=engine)

    report = reread(read)
    cells: Cells = report.extra_states[0] or {}
    batches = batch_vllm_kl(cells)
    cells = apply_batch_filter(cells, methods, batches)
    groups = {split: _groups(split, cells) for split in SPLITS}
    return Whatif(report, methods, sweep, groups, batches)


def batch_vllm_kl(cells: Cells) -> dict[tuple[str, int], float]:
    """vllm_kl of every batch (run, step) from the K3 sums its cells carry."""
    sums: dict[tuple[str, int], tuple[float, float]] = {}
    for (kind, run, step, _), state in cells.items():
        if kind == SEQ_CELLS:
            k3, n = sums.get((run, step), (0.0, 0.0))
            sums[(run, step)] = (k3 + state[0, WI.W.K3_SUM], n + state[0, WI.W.TOKENS])
    return {key: float(k3 / n) for key, (k3, n) in sums.items() if n > 0}


def apply_batch_filter(
    cells: Cells, methods: list[Method], batches: dict[tuple[str, int], float]
) -> Cells:
    """Cells with every unit rejected for each batch-filter method whose threshold its batch's
    vllm_kl exceeds (NaN, from an overflowing K3, counts as exceeding)."""
    filters = [(j, m.value) for j, m in enumerate(methods) if m.name == "batch-filter"]
    if not filters:
        return cells
    out = {}
    for key, state in cells.items():
        kl = batches.get((key[1], key[2]))
        state = state.copy()
        for j, limit in filters:
            if kl is not None and not kl <= limit:
                state[j] = WI.reject_all(state[j])
        out[key] = state
    return out


def _groups(split: K.Split, cells: Cells) -> list[WhatifGroup]:
    kind = SEG_CELLS if K.TURN_KIND in split else SEQ_CELLS
    position = {K.RUN: 1, K.STEP: 2, K.GPU: 3, K.TURN_KIND: 3}
    rolled: dict[tuple[Any, ...], np.ndarray] = {}
    for key, state in cells.items():
        if key[0] != kind:
            continue
        label = tuple(key[position[k]] for k in split)
        rolled[label] = WI.merge(rolled[label], state) if label in rolled else state
    out = []
    for label in sorted(rolled, key=sort_key):
        state = rolled[label]
        results = [WI.finalize(state[j]) for j in range(state.shape[0])]
        out.append(WhatifGroup(dict(zip(split, label, strict=True)), results))
    return out
