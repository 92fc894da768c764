"""Metric definitions as mergeable partial aggregates, plus exact references (METRICS.md).

Imports numpy, numba (the compiled per-token loops of ``kernels``, loaded on first use) and the
standard library only: the engines (local or Ray) run these definitions. The names re-exported
here load their module on first use, so ``registry`` and ``tails`` stay light to import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mismatchctl import lazy

if TYPE_CHECKING:
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

# The names above, loaded on first use (PEP 562): importing one light module of the package
# (the metric registry, the tails' thresholds) does not load numpy and every kernel.
_LAZY = {
    "bands": ("BAND_NAMES", "BANDS", "band", "step_summary"),
    "bins": ("LOG_EDGES", "assign_bins", "bin_label", "parse_bins"),
    "chunk": ("chunk_partials",),
    "histogram": ("QUANTILES",),
    "partial": (
        "COUNT_METRICS", "METRIC_NAMES", "QUANTILE_METRICS", "SEQUENCE_METRICS",
        "TOKEN_METRICS", "Partial", "merge_all", "shares",
    ),
    "reference": ("reference_metrics", "reference_quantiles"),
    "splits": ("TURN_INDEX_LABELS", "TURN_KIND_LABELS", "turn_index", "turn_kind"),
    "state": ("EXP_MAX", "LOW_PROB_THRESHOLD"),
}  # fmt: skip
_HOME = {name: f"{__name__}.{module}" for module, names in _LAZY.items() for name in names}


def __getattr__(name: str) -> Any:
    return lazy.load(__name__, globals(), _HOME, name)


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOME})


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
