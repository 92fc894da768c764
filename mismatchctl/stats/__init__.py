"""Metric definitions as mergeable partial aggregates, plus exact references (METRICS.md).

Imports numpy, numba (the compiled per-token loops of ``kernels``, loaded on first use) and the
standard library only: the engines (local or Ray) run these definitions.
"""

from __future__ import annotations

from mismatchctl.stats.bands import BAND_NAMES, BANDS, band, step_summary
from mismatchctl.stats.bins import LOG_EDGES, assign_bins, bin_label, parse_bins
from mismatchctl.stats.chunk import chunk_partials
from mismatchctl.stats.histogram import QUANTILES
from mismatchctl.stats.partial import (
    COUNT_METRICS,
    METRIC_NAMES,
    QUANTILE_METRICS,
    SEQUENCE_METRICS,
    TOKEN_METRICS,
    Partial,
    merge_all,
    shares,
)
from mismatchctl.stats.reference import reference_metrics, reference_quantiles
from mismatchctl.stats.splits import TURN_INDEX_LABELS, TURN_KIND_LABELS, turn_index, turn_kind
from mismatchctl.stats.state import EXP_MAX, LOW_PROB_THRESHOLD

__all__ = [
    "BANDS",
    "BAND_NAMES",
    "COUNT_METRICS",
    "EXP_MAX",
    "LOG_EDGES",
    "LOW_PROB_THRESHOLD",
    "METRIC_NAMES",
    "QUANTILES",
    "QUANTILE_METRICS",
    "SEQUENCE_METRICS",
    "TOKEN_METRICS",
    "TURN_INDEX_LABELS",
    "TURN_KIND_LABELS",
    "Partial",
    "assign_bins",
    "band",
    "bin_label",
    "chunk_partials",
    "merge_all",
    "parse_bins",
    "reference_metrics",
    "reference_quantiles",
    "shares",
    "step_summary",
    "turn_index",
    "turn_kind",
]
