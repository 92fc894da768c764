"""The ``token_shift`` check (``analysis/diagnose/checks/token_shift.py``), on the calibration
corpus: a repetition penalty in the engine's logprobs shifts the tokens seen before in their
response; a healthy run's are not."""

from __future__ import annotations

from pathlib import Path

from tests.planted import diagnosis


def test_fires_on_a_penalty_and_stays_ok_on_a_healthy_run(calibration_store: Path) -> None:
    shifted = _check(calibration_store, "sem-rep-subtle")
    assert shifted.verdict in ("warn", "fail")
    seen = shifted.evidence.seen_shift
    assert seen is not None and abs(seen.shift) >= 0.004 and abs(seen.z) >= 8
    assert "penalty" in shifted.finding
    healthy = _check(calibration_store, "h-a")
    assert healthy.verdict == "ok" and abs(healthy.evidence.seen_shift.shift) < 0.004


def _check(store: Path, run: str):
    return next(c for c in diagnosis(store, run).checks if c.name == "token_shift")
