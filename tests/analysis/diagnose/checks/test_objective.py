"""The ``objective`` check (``analysis/diagnose/checks/objective.py``)."""

from __future__ import annotations

from pathlib import Path

from tests.analysis.diagnose.stores import relative
from tests.planted import diagnosis


def test_objective_points_at_whatif(planted_store: Path) -> None:
    checks = {c.name: c for c in diagnosis(planted_store, "gpu").checks}
    objective = checks["objective"]  # a correction as a stopgap: the gpu is the cause to fix
    assert objective.verdict == "warn" and objective.finding.startswith("as a stopgap:")
    assert objective.next.startswith("fix the cause (hardware")
    assert "mismatchctl whatif gpu --method seq-mis --threshold 2" in objective.next
    assert 0 < objective.evidence.seq_mis_2["sequence_fraction"] < 1
    checks = {c.name: c for c in diagnosis(planted_store, "top_p").checks}
    assert checks["objective"].finding.startswith("not yet: offset, top_p failed")


def test_no_correction_is_advised_when_it_would_discard_the_signal(relative_store: Path) -> None:
    checks = relative._checks(relative_store, "policy-loud", "base")
    objective = checks["objective"]
    assert objective.evidence.correction_sane is False
    assert "discard the signal" in objective.finding
    assert "whatif" not in (objective.next or "")


def test_a_correction_for_a_fixable_cause_is_only_a_stopgap(relative_store: Path) -> None:
    objective = relative._checks(relative_store, "gpu-loud")["objective"]
    if objective.evidence.correction_sane:
        assert objective.finding.startswith("as a stopgap")
        assert (objective.next or "").startswith("fix the cause (hardware")
