"""Rows shared by the terminal and HTML views of a report: the tables of extra ``--by`` splits."""

from __future__ import annotations

from mismatchctl.analysis.report import Report
from mismatchctl.engines import plan as K
from mismatchctl.render.fmt import label, num, pct
from mismatchctl.stats import BAND_NAMES, band, bin_label
from mismatchctl.stats import registry as M

# Splits that have their own fixed tables; every other split gets a generic table.
FIXED: list[K.Split] = [*K.default_splits(True), (K.TURN_KIND,), (K.BIN,)]
METRIC_HEADERS = ["tokens", M.VLLM_KL, M.KL_K1, "|r| mean", "prob ρ", "log-ppl ρ"]


def extra_splits(report: Report) -> list[K.Split]:
    """The ``--by`` splits without a fixed table. ``--by step`` of one run is that run's per-step
    table (then shown with every step, see :func:`every_step`), not a second table."""
    single = len(report.selection.runs) == 1
    return [s for s in report.splits if s not in FIXED and not (single and s == (K.STEP,))]


def every_step(report: Report) -> bool:
    """``--by step`` asks for every step in the per-step tables (not only the worst ones)."""
    return (K.STEP,) in report.splits


def split_rows(
    report: Report, split: K.Split
) -> tuple[list[str], list[list[str]], list[str | None]]:
    """(headers, rows of text, band of each row's vllm_kl) of one split's generic table; the
    vllm_kl cell is column ``len(split) + 1``."""
    rows, bands = [], []
    for g in report.groups[split]:
        m = g.metrics
        keys = [
            bin_label(report.bin_edges, int(v)) if k == K.BIN else label(v) for k, v in g.by.items()
        ]
        rows.append(
            [
                *keys,
                num(m["tokens"]),
                num(m[M.VLLM_KL]),
                num(m[M.KL_K1]),
                num(m[M.ABS_LOG_RATIO_MEAN]),
                num(m.get(M.PROB_PEARSON)),
                num(m.get(M.LOG_PPL_PEARSON)),
            ]
        )
        bands.append(band(m[M.VLLM_KL]))
    return [*(label(k) for k in split), *METRIC_HEADERS], rows, bands


HARDWARE_HEADERS = [
    "gpu",
    "runs",
    "batches",
    "tokens",
    M.VLLM_KL,
    "median",
    "p90",
    "max",
    "low/medium/high/severe",
    "later/first",
    "p<1e-3",
]


def hardware_rows(report: Report) -> tuple[list[str], list[list[str]], list[str | None]]:
    """(headers, rows, band of each gpu's vllm_kl) of the hardware table; vllm_kl is column 4."""
    rows, bands = [], []
    for row in report.hardware or []:
        shares = "/".join(pct(row[f"band_share_{name}"]) for name in BAND_NAMES)
        rows.append(
            [
                label(row["gpu"]),
                ", ".join(label(r) for r in row["runs"]),
                num(row["batches"]),
                num(row["tokens"]),
                num(row[M.VLLM_KL]),
                num(row[M.VLLM_KL_STEP_MEDIAN]),
                num(row[M.VLLM_KL_STEP_P90]),
                num(row[M.VLLM_KL_STEP_MAX]),
                shares,
                num(row[M.LATER_FIRST_VLLM_KL_RATIO]),
                pct(row[M.LOW_PROB_TOKEN_SHARE]),
            ]
        )
        bands.append(band(row[M.VLLM_KL]))
    return HARDWARE_HEADERS, rows, bands
