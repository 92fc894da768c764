"""The ``policy_signs`` check (``analysis/diagnose/checks/policy_signs.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import slow_param
from tests.planted import checks as diagnosed


@pytest.mark.parametrize(
    "run", ["ref", "faulty-attn-subtle", slow_param("ref-b"), slow_param("improved")]
)
def test_numeric_mismatch_does_not_lean(sample_runs_store: Path, run: str) -> None:
    signs = diagnosed(sample_runs_store, run)["policy_signs"]
    assert signs.verdict == "ok"
    assert signs.evidence.worst.signs.dispersion < 1.3


@pytest.mark.parametrize("run", ["even", "loud"])
def test_independent_noise_is_not_a_policy(leaning_store: Path, run: str) -> None:
    signs = diagnosed(leaning_store, run)["policy_signs"]
    assert signs.verdict == "ok" and signs.evidence.worst.signs.dispersion < 1.2
