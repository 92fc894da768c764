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


def _summary(ratio: float, z: float, mean_r: float) -> dict:
    return {"ratio_mean": ratio, "ratio_z": z, "k3_mean": ratio - 1 - mean_r}


def test_mass_removed_beyond_the_noise_is_measured_against_the_k3() -> None:
    """The deficit ``1 - rho`` against the mean K3 per token, ``(rho - 1) - mean r``: a faint
    top-p (0.995: 0.46% removed, 16x the K3, z -22) is mass removed; a healthy run's sample
    (2.9x at z -2.7, the most of 144), a deficit as large but not sure, a fill that raises the
    K3 more than the ratio falls (a stop stored as 0.0), and a ratio above 1 are not."""
    from mismatchctl.analysis.diagnose.checks import top_p

    assert top_p.removed(_summary(0.99538, -21.9, -0.004908))
    k3 = 0.00031
    assert not top_p.removed(_summary(1 - 2.9 * k3, -2.7, -2.9 * k3 - k3))
    assert not top_p.removed(_summary(1 - 16 * k3, -4.0, -16 * k3 - k3))  # not sure enough
    assert not top_p.removed(_summary(0.9922, -15.9, -0.0078 - 0.052))  # the fill's K3
    assert not top_p.removed(_summary(1.002, 3.0, 0.0015))
    assert top_p.T.MASS_PER_K3 == 4.0


def test_a_faint_truncation_is_named_by_the_mass_it_removes(held_out_store: Path) -> None:
    """Top-p 0.995 on the Phi member (``ph-topp-0.995``, ``family.py --arch phi --sweep --seed
    5``: 1.03x a healthy run, 63.6% of the tokens below zero, a deficit of 0.0046 under the
    kept-mass signature's 0.005): it warned by the length check alone, no cause named. Its
    deficit is 16x its mean K3 per token: the truncation is named."""
    found = diagnosis(held_out_store, "ph-topp-0.995")
    checks = {c.name: c for c in found.checks}
    assert checks["top_p"].verdict == "warn"
    assert "a faint truncation" in checks["top_p"].finding
    cause = found.section_dict()["cause"]
    assert (cause["key"], cause["also"]) == ("semantics", [])
    assert cause["variant"].startswith("truncation")
