"""The ``temperature`` check (``analysis/diagnose/checks/temperature.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.analysis.diagnose.stores import planted_causes
from tests.planted import diagnosis


def test_fires_on_its_planted_cause_only(verdicts: dict) -> None:
    planted_causes.fires_on_its_cause_only("temperature", verdicts)


def test_evidence_names_the_temperature(planted_store: Path) -> None:
    checks = {c.name: c for c in diagnosis(planted_store, "temperature").checks}
    assert 0.8 < checks["temperature"].evidence.implied_temperature < 0.95
    assert "logprobs-mode=processed_logprobs" in checks["temperature"].next


@pytest.mark.parametrize(("r2", "far"), [(0.076, True), (0.52, False)])
def test_a_faint_line_beside_far_apart_distributions_is_theirs(r2: float, far: bool) -> None:
    """A line of 7.6% of r's variance beside an offset that is the KL of two far-apart
    distributions (a pre-training checkpoint on the 8192-token family: slope 1.22, mean r -1.28,
    mean ratio 0.977) is said to be theirs, with the weights' advice; a temperature's 52% is
    not. The verdict stands either way: the line is there."""
    from types import SimpleNamespace
    from typing import cast
    from unittest import mock

    from mismatchctl.analysis.diagnose.check import Check
    from mismatchctl.analysis.diagnose.checks import offset, temperature
    from mismatchctl.analysis.diagnose.context import Context

    kl = offset.Evidence(log_ratio_mean=-1.28, log_ratio_se=0.02, log_ratio_z=-64.8,
                         negative_share=0.69, ratio_mean=0.977)  # fmt: skip
    found = Check("semantic", "offset", "", "fail", "", kl, "")
    ctx = cast(Context, SimpleNamespace(
        state=SimpleNamespace(lags=[None]), result=lambda m: found if m is offset else None,
    ))  # fmt: skip
    line = {"slope": 1.22, "intercept": 0.1, "diff_r2": r2}
    with (
        mock.patch.object(temperature.alignment, "not_assessed", return_value=None),
        mock.patch.object(temperature, "regression", return_value=line),
        mock.patch.object(temperature.top_p, "signature", return_value=(None, False, False)),
    ):
        got = temperature.run(ctx)
    assert got.verdict == "fail" if r2 >= temperature.T.TEMP_R2_FAIL else got.verdict == "warn"
    assert ("is theirs, not a temperature's" in got.finding) is far
    assert (got.next == offset.KL_ADVICE) is far
