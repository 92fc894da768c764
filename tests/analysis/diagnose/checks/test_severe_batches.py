"""The ``severe_batches`` check (``analysis/diagnose/checks/severe_batches.py``)."""

from __future__ import annotations

from tests.analysis.diagnose.stores import planted_causes


def test_fires_on_its_planted_cause_only(verdicts: dict) -> None:
    planted_causes.fires_on_its_cause_only("severe_batches", verdicts)
