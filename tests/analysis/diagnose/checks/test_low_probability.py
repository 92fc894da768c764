"""The ``low_probability`` check (``analysis/diagnose/checks/low_probability.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mismatchctl import api
from tests.analysis.diagnose.stores import planted_causes


def test_the_rare_tokens_bins_hold_the_excess_in_explain(relative_store: Path) -> None:
    """explain's bin dimension: the tested bins at the baseline's rate and hold almost none of
    the excess; the other dimensions carry the overall ratio."""
    e = api.explain("lowprob-small", baseline="base", store=relative_store).explanation
    dims = {u.dim: u for u in e.uniform}
    assert not dims["bin"].uniform and dims["bin"].excess_elsewhere
    assert dims["bin"].excess_share is not None and dims["bin"].excess_share < 0.1
    assert dims["bin"].rate_ratio == pytest.approx(1.0, abs=0.15)
    assert dims["gpu"].uniform and not dims["gpu"].excess_elsewhere


def test_fires_on_its_planted_cause_only(verdicts: dict) -> None:
    planted_causes.fires_on_its_cause_only("low_probability", verdicts)
