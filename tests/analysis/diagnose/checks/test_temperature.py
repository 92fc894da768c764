"""The ``temperature`` check (``analysis/diagnose/checks/temperature.py``)."""

from __future__ import annotations

from pathlib import Path

from tests.analysis.diagnose.stores import planted_causes
from tests.planted import diagnosis


def test_fires_on_its_planted_cause_only(verdicts: dict) -> None:
    planted_causes.fires_on_its_cause_only("temperature", verdicts)


def test_evidence_names_the_temperature(planted_store: Path) -> None:
    checks = {c.name: c for c in diagnosis(planted_store, "temperature").checks}
    assert 0.8 < checks["temperature"].evidence.implied_temperature < 0.95
    assert "logprobs-mode=processed_logprobs" in checks["temperature"].next
