"""Rows shared by the terminal and HTML views of a report: the tables of extra ``--by`` splits."""

from __future__ import annotations

from mismatchctl.analysis.report import Report
from mismatchctl.engines import plan as K
from mismatchctl.render.fmt import label, num, pct
from mismatchctl.stats import BAND_NAMES, band, bin_label

# Splits that have their own fixed tables; every other split gets a generic table.
FIXED: list[K.Split] = [*K.default_splits(True), (K.TURN_KIND,), (K.BIN,)]
METRIC_HEADERS = ["tokens", "vllm_kl", "kl_k1", "|r| mean", "prob ρ", "log-ppl ρ"]


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
                num(m["vllm_kl"]),
                num(m["kl_k1"]),
                num(m["abs_log_ratio_mean"]),
                num(m.get("prob_pearson")),
                num(m.get("log_ppl_pearson")),
            ]
        )
        bands.append(band(m["vllm_kl"]))
    return [*(label(k) for k in split), *METRIC_HEADERS], rows, bands


HARDWARE_HEADERS = [
    "gpu",
    "runs",
    "batches",
    "tokens",
    "vllm_kl",
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
                num(row["vllm_kl"]),
                num(row["vllm_kl_step_median"]),
                num(row["vllm_kl_step_p90"]),
                num(row["vllm_kl_step_max"]),
                shares,
                num(row["later_first_vllm_kl_ratio"]),
                pct(row["low_prob_token_share"]),
            ]
        )
        bands.append(band(row["vllm_kl"]))
    return HARDWARE_HEADERS, rows, bands
