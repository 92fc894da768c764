"""The probability bins of ``--bins``: every command that splits tokens by their probability
reads them here (the report, tokens, certify, explain, bisect's cells), so that none of them
imports another command's result for it."""

from __future__ import annotations

import numpy as np

from mismatchctl.errors import UsageError
from mismatchctl.stats import parse_bins


def parse_edges(bins: str) -> np.ndarray:
    """The bin edges of ``--bins`` (``log``, ``linear:N`` or edges); a UsageError naming the
    option when they are not."""
    try:
        return parse_bins(bins)
    except ValueError as exc:
        raise UsageError(
            f"--bins: {exc}", "use log, linear:N or edges such as 0,1e-3,0.5,1."
        ) from None
