"""The cause ``policy`` (``analysis/diagnose/causes/policy.py``)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import cast

import numpy as np
import pytest

from mismatchctl.analysis.diagnose.causes import policy
from mismatchctl.analysis.diagnose.context import Context
from mismatchctl.stats import assign_bins
from mismatchctl.stats.hot_sequences import hot_sequence_state
from tests.analysis.diagnose.stores import leaning, relative
from tests.planted import checks as diagnosed
from tests.stats.test_sign_coherence import EDGES, _truncated


@pytest.mark.parametrize("baseline", [None, "ref-b"])
def test_a_run_one_step_behind_is_named_the_policy(
    sample_runs_store: Path, baseline: str | None
) -> None:
    checks = diagnosed(sample_runs_store, "stale-subtle", baseline)
    signs = checks["policy_signs"]
    assert signs.verdict in leaning.ALARM
    assert signs.evidence.worst.signs.dispersion > 2 and signs.evidence.worst.signs.p_value < 1e-20
    assert checks["staleness"].verdict == "ok"  # no version column; its tag says weight_lag=0
    cause = checks["cause"]
    assert cause.evidence.cause == "policy" and "policy_signs" in cause.evidence.named.checks
    assert "weight versions" in cause.next
    if baseline:  # the baseline check sees the excess too, and the cause keeps it
        assert "baseline" in cause.evidence.named.checks


@pytest.mark.parametrize("run", ["lean-1", "lean-2"])
def test_planted_leaning_responses_are_the_policy(leaning_store: Path, run: str) -> None:
    checks = diagnosed(leaning_store, run)
    assert checks["policy_signs"].verdict in leaning.ALARM
    assert checks["cause"].evidence.cause == "policy"


def test_a_policy_mismatch_without_baseline_is_not_blamed_on_a_code_path(
    relative_store: Path,
) -> None:
    for run in ("policy-small", "policy-loud"):
        cause = relative._checks(relative_store, run)["cause"].evidence.cause
        assert cause in ("none", "unexplained"), (run, cause)
    loud = relative._checks(relative_store, "policy-loud")["cause"]
    assert loud.verdict == "warn" and "--baseline" in loud.next


@pytest.mark.parametrize(("lean", "leans"), [(0.0, False), (1.0, True)])
def test_a_lean_above_a_truncations_reach(lean: float, leans: bool) -> None:
    """Responses cut by a truncation with shares of their own lean about zero; above the
    healthy noise only another policy's lean shows, and it is the policy's, with the sign
    test's thresholds."""
    lr, lt, seq, turn, step = _truncated(5, lean)
    parts = hot_sequence_state(
        lr, lt, seq, turn, step, assign_bins(np.exp(lr), EDGES), len(EDGES) - 1
    )
    ctx = cast(Context, SimpleNamespace(state=SimpleNamespace(hot_sequences=parts)))
    found = policy.lean_above_truncation(ctx)
    assert (found is not None) is leans
    if found is not None:
        assert found.verdict in ("warn", "fail") and found.checks == ("policy_signs",)
        assert "above the healthy noise" in found.because and "400 sequences" in found.because
