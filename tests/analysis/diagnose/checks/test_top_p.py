"""The ``top_p`` check (``analysis/diagnose/checks/top_p.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.analysis.diagnose.stores import planted_causes
from tests.planted import diagnosis


def test_fires_on_its_planted_cause_only(verdicts: dict) -> None:
    planted_causes.fires_on_its_cause_only("top_p", verdicts)


def test_evidence_names_the_kept_mass(planted_store: Path) -> None:
    checks = {c.name: c for c in diagnosis(planted_store, "top_p").checks}
    assert checks["top_p"].evidence.ratio_mean == pytest.approx(0.87, abs=0.03)
