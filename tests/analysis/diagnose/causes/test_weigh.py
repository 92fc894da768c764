"""The weighing of the causes (``analysis/diagnose/causes/weigh.py``): healthy runs name none, every alarm names one, the documented confusion matrix holds."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.analysis.diagnose.stores import calibration, relative, turns
from tests.helpers import slow_param
from tests.planted import checks as diagnosed


@pytest.mark.parametrize("baseline", [None, "base"])
def test_healthy_run_raises_no_alarm(relative_store: Path, baseline: str | None) -> None:
    checks = relative._checks(relative_store, "healthy", baseline)
    assert relative._alarms(checks) == {}
    assert checks["cause"].evidence.cause == "none"


@pytest.mark.parametrize(
    "run", ["healthy-64-4", slow_param("healthy-64-3"), slow_param("healthy-64-5")]
)
@pytest.mark.parametrize("baseline", [None, slow_param("base")])
def test_larger_healthy_runs_raise_no_alarm(
    relative_store: Path, run: str, baseline: str | None
) -> None:
    checks = relative._checks(relative_store, run, baseline)
    assert relative._alarms(checks) == {}
    assert checks["cause"].evidence.cause == "none"


@pytest.mark.parametrize(
    ("run", "cause", "check"),
    [
        ("gpu-2x", "hardware", "localized"),
        slow_param("spike-2x", "code_path", "spikes"),
        slow_param("tool-2x", "tool_turns", "tool_responses"),
    ],
)
@pytest.mark.parametrize("baseline", [None, slow_param("base")])
def test_twice_the_mismatch_estimated_a_little_low_is_named(
    relative_store: Path, run: str, cause: str, check: str, baseline: str | None
) -> None:
    checks = relative._checks(relative_store, run, baseline)
    assert checks[check].verdict == "warn"
    assert checks["cause"].evidence.cause == cause


@pytest.mark.parametrize(
    "run", [r if r in turns.FAST else slow_param(r) for r in sorted(turns.RUNS)]
)
def test_an_alarm_always_comes_with_a_cause(turns_store: Path, run: str) -> None:
    checks = diagnosed(turns_store, run, None)
    alarms = [c.name for c in checks.values() if c.verdict in turns.ALARM and c.name != "cause"]
    if alarms:
        assert checks["cause"].evidence.cause != "none", alarms


@pytest.mark.parametrize("run", ["h-a", "h-moe-a", slow_param("h-moe-b"), slow_param("h-moe-r3-a")])
def test_healthy_runs_raise_no_alarm(calibration_store: Path, run: str) -> None:
    """A healthy dense run, a healthy MoE whose routes flip as bf16 numerics make them flip
    (the flips carry most of its K3: normal, not a fault) and a MoE with replay, no tag."""
    found = calibration._cause(calibration_store, run)
    assert found["verdict"] == "ok", [c["name"] for c in found["checks"] if c["verdict"] != "ok"]
    assert found["cause"]["key"] == "none"


@pytest.mark.parametrize("run", [slow_param(name) for name in calibration._runs()])
def test_the_documented_matrix_is_what_diagnose_says(calibration_store: Path, run: str) -> None:
    """Every committed run, alone and against its baseline: the verdict and cause written in
    docs/diagnose.md (produced by sample_data/confusion.py over the whole corpus)."""
    documented = calibration._documented()
    assert run in documented, f"{run} is not in docs/diagnose.md's table"
    alone, based = documented[run]
    assert calibration._named(calibration._cause(calibration_store, run)) == alone
    baseline = calibration._runs()[run]["baseline"]
    if baseline in calibration._runs() and based != "-":  # its baseline committed too
        assert calibration._named(calibration._cause(calibration_store, run, baseline)) == based


def test_the_corpus_subset_is_documented() -> None:
    assert set(calibration._documented()) == set(calibration._runs())
    assert re.search(r"false alarms 0 of \d+ healthy or improved", calibration.DOC.read_text())
