"""The ``spiral`` check (``analysis/diagnose/checks/spiral.py``)."""

from __future__ import annotations

import numpy as np

from mismatchctl.analysis.diagnose.checks.spiral import usable_steps
from mismatchctl.analysis.diagnose.context import RunSteps
from tests.analysis.diagnose.stores import planted_causes


def test_fires_on_its_planted_cause_only(verdicts: dict) -> None:
    planted_causes.fires_on_its_cause_only("spiral", verdicts)


def test_a_step_made_infinite_by_a_sentinel_is_left_out_and_counted() -> None:
    """-9999 on the rollout side overflows its step's vllm_kl: that step is left out of the
    line (inf - inf would make every slope NaN) and counted; NaN steps (nothing to compute) are
    not counted as left out."""
    steps = RunSteps(
        steps=np.arange(1, 6),
        vllm_kl=np.array([1e-3, np.inf, 2e-3, np.nan, 3e-3]),
        trainer_ppl=np.array([1.2, 1.3, np.inf, 1.1, 1.4]),
        bands=[None] * 5,
    )
    ok, left_out = usable_steps(steps)
    assert ok.tolist() == [True, False, False, False, True]
    assert left_out == 2
