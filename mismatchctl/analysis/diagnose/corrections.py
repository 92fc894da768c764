"""When a correction discards the signal instead of correcting it: the limits the ``objective``
check and whatif's remedy sanity (``analysis/remedy.py``) share, one set for both."""

from __future__ import annotations

MIN_CORRECTION_ESS = 0.5
"""A correction whose effective sample size (share of the batch) falls below one half discards
most of the signal: it is never advised; fix the cause instead."""

MAX_CORRECTION_REJECTED = 0.5
"""Nor one that rejects (masks) more than half the sequences."""

MAX_CORRECTION_CLIPPED = 0.9
"""Nor a truncation that clips nine units in ten at its cap: the applied weights are then nearly
a constant, and their ESS (near 1) says nothing about the signal kept (``whatif``)."""
