"""A what-if as sections: what each correction clips or rejects, its weights, and where (turn
kind, gpu, run, step); the HTML adds the threshold (or method) chart and the per-step chart."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mismatchctl.analysis import sections as sec
from mismatchctl.analysis.whatif.remedy import discards_signal
from mismatchctl.engines import plan as K
from mismatchctl.stats import registry as M
from mismatchctl.stats.whatif import Method

if TYPE_CHECKING:
    from mismatchctl.analysis.whatif.whatif import Whatif

MAX_STEP_ROWS = 30
HOW = (
    "Ratios exp(clamp(log ratio, -20, 20)); raw = the unit's untruncated ratio; applied = what the "
    "method multiplies the loss by (0 when rejected); ESS = (Σw)² / (n Σw²). Tables by turn "
    "kind, gpu, run and step give the share of the method's unit (token or sequence) clipped or "
    "rejected."
)
HOW_SWEEP = (
    "Share of tokens and of sequences clipped or rejected (left axis) and the effective sample "
    "size of the applied weights (right axis) at each threshold of the sweep."
)
HOW_METHODS = (
    "Share of tokens and of sequences each method clips or rejects on the whole selection; the "
    "effective sample size of its applied weights is in the table."
)
HOW_STEPS = (
    "Per batch (step): the share of each method's units (tokens or sequences) clipped or "
    "rejected, and the batch's vllm_kl (grey, right axis, log scale)."
)


def method_label(m: Method) -> str:
    return f"{m.name} {m.threshold_text()}"


def unit_fraction(m: Method, metrics: dict[str, Any]) -> float | None:
    """The share of the method's own unit that it clipped or rejected."""
    key = M.SEQUENCE_FRACTION if m.info.unit == "sequence" else M.TOKEN_FRACTION
    return metrics.get(key)


def steps_by_run(w: Whatif) -> dict[Any, list[tuple[Any, Any]]]:
    """Per run, its batches in step order: (step, group)."""
    out: dict[Any, list[tuple[Any, Any]]] = {}
    for g in w.split(K.RUN, K.STEP):
        out.setdefault(g.by[K.RUN], []).append((g.by[K.STEP], g))
    return out


def whatif_sections(w: Whatif) -> list[sec.Section]:
    out: list[sec.Section] = [
        sec.Lines("whatif", f"What-if corrections: {w.label}", [sec.Line(HOW)]),
        summary_table(w),
        remedy_lines(w),
        weights_table(w),
        sec.Figure("fig-whatif", "Share clipped or rejected", "whatif_sweep" if w.sweep else
               "whatif_methods", w, HOW_SWEEP if w.sweep else HOW_METHODS),
        keyed_table(w, "By turn kind", K.TURN_KIND),
    ]  # fmt: skip
    if len(w.split(K.GPU)) > 1:
        out.append(keyed_table(w, "By gpu", K.GPU))
    if len(w.split(K.RUN)) > 1:
        out.append(keyed_table(w, "By run", K.RUN))
    out += [
        steps_table(w),
        sec.Figure("fig-whatif-steps", "Per step", "whatif_steps", w, HOW_STEPS),
    ]
    return out


def summary_table(w: Whatif) -> sec.Table:
    rows = [
        {"method": method_label(m), "unit": m.info.unit, "action": m.info.action, **r}
        for m, r in zip(w.methods, w.whole().results, strict=True)
    ]  # fmt: skip
    columns = [
        sec.Column("method", "method", sec.Kind.LABEL), sec.Column("unit", "unit", sec.Kind.LABEL),
        sec.Column("action", "action", sec.Kind.LABEL), sec.Column.of(M.TOKEN_FRACTION),
        sec.Column.of(M.SEQUENCE_FRACTION), sec.Column.of(M.ESS), sec.Column.of(M.ESS_RAW),
    ]  # fmt: skip
    return sec.Table("whatif-summary", "Whole selection", columns, rows, keys=3)


def remedy_lines(w: Whatif) -> sec.Lines:
    """Remedy sanity on the whole selection: each method that would discard the signal is named
    as not advised, with why (``analysis.remedy``)."""
    lines = []
    for m, r in zip(w.methods, w.whole().results, strict=True):
        why = discards_signal(r, m.info.unit, m.info.action)
        if why is not None:
            lines.append(
                sec.Line(f"{method_label(m)}: discards the signal ({why}): not advised", "warn")
            )
    if not lines:
        lines = [
            sec.Line("Every method keeps the signal (ESS >= 50%, most units kept, few at the cap).")
        ]
    return sec.Lines("whatif-remedy", "Remedy sanity", lines)


WEIGHTS = (M.RAW_MEAN, M.RAW_STD, M.RAW_MIN, M.RAW_MAX, M.WEIGHT_MEAN, M.WEIGHT_STD, M.WEIGHT_MIN, M.WEIGHT_MAX)  # fmt: skip


def weights_table(w: Whatif) -> sec.Table:
    rows = [{"method": method_label(m), **r} for m, r in zip(w.methods, w.whole().results, strict=True)]  # fmt: skip
    columns = [sec.Column("method", "method", sec.Kind.LABEL), *[sec.Column.of(k) for k in WEIGHTS]]
    return sec.Table("whatif-weights", "Weights (raw -> applied)", columns, rows)


def keyed_table(w: Whatif, title: str, key: str) -> sec.Table:
    groups = w.split(key)
    columns = [sec.Column("method", "method", sec.Kind.LABEL)]
    columns += [sec.Column(f"g{i}", str(g.by[key]), sec.Kind.SHARE) for i, g in enumerate(groups)]
    rows = [
        {"method": method_label(m), **{f"g{i}": unit_fraction(m, g.results[j]) for i, g in enumerate(groups)}}
        for j, m in enumerate(w.methods)
    ]  # fmt: skip
    return sec.Table(f"whatif-{key}", title, columns, rows)


def steps_table(w: Whatif) -> sec.Table:
    groups = w.split(K.RUN, K.STEP)
    half = MAX_STEP_ROWS // 2
    note = None
    if len(groups) > MAX_STEP_ROWS:
        note = f"first and last {half} of {len(groups)} batches; all in --json / --html"
        groups = groups[:half] + groups[-half:]
    multi = len(w.split(K.RUN)) > 1
    columns = [sec.Column("run", "run", sec.Kind.LABEL)] if multi else []
    columns += [sec.Column("step", "step", sec.Kind.ID), sec.Column.of(M.VLLM_KL)]
    columns += [
        sec.Column(f"m{j}", method_label(m), sec.Kind.SHARE) for j, m in enumerate(w.methods)
    ]
    rows = []
    for g in groups:
        run, step = g.by[K.RUN], g.by[K.STEP]
        row = {"run": run, "step": step, M.VLLM_KL: w.batch_vllm_kl.get((run, step))}
        row.update(
            {
                f"m{j}": unit_fraction(m, r)
                for j, (m, r) in enumerate(zip(w.methods, g.results, strict=True))
            }
        )
        rows.append(row)
    return sec.Table("whatif-steps", "Per step", columns, rows, keys=2 if multi else 1, note=note)
