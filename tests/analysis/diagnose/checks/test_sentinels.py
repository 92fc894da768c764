"""The ``sentinels`` check (``analysis/diagnose/checks/sentinels.py``)."""

from __future__ import annotations

from pathlib import Path

from tests.analysis.diagnose.stores import planted_causes
from tests.planted import diagnosis


def test_fires_on_its_planted_cause_only(verdicts: dict) -> None:
    planted_causes.fires_on_its_cause_only("sentinels", verdicts)


def test_evidence_names_the_samples(planted_store: Path) -> None:
    checks = {c.name: c for c in diagnosis(planted_store, "sentinel").checks}
    samples = checks["sentinels"].evidence.samples
    assert samples and all(s.sample_id.startswith(f"s{s.step}-") for s in samples)
    assert checks["sentinels"].evidence.values_le_sentinel.trainer == 1
    assert checks["sentinels"].to_dict()["evidence"]["values_le_-1000"]["trainer"] == 1
