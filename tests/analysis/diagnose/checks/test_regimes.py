"""The ``regimes`` check (``analysis/diagnose/checks/regimes.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

import mismatchctl
from tests.analysis.diagnose.stores import growth, relative
from tests.helpers import slow_param
from tests.planted import PATH_STEPS
from tests.planted import checks as diagnosed


def test_the_healthy_run_raises_no_alarm(growth_store: Path) -> None:
    checks = diagnosed(growth_store, "base", None)
    assert not [n for n, c in checks.items() if c.verdict in growth.ALARM]


@pytest.mark.parametrize("run", ["path-small", pytest.param("path-loud", marks=pytest.mark.slow)])
@pytest.mark.parametrize("baseline", [None, slow_param("base")])
def test_a_code_path_in_some_steps_is_named_not_the_tool_turns(
    relative_store: Path, run: str, baseline: str | None
) -> None:
    checks = relative._checks(relative_store, run, baseline)
    regimes = checks["regimes"]
    assert regimes.verdict in relative.ALARM
    (evidence,) = regimes.evidence.runs.values()
    assert {int(s) for s in evidence.split.elevated_steps} == set(PATH_STEPS)
    assert checks["cause"].evidence.cause == "code_path"
    assert "importance sampling would only reweight" in checks["cause"].next
    tool = checks["tool_responses"]
    if tool.verdict in relative.ALARM:  # the later turns hold the long KV positions: true, but
        assert "fix that path first" in tool.next and "sequence-level" not in tool.next
    if baseline:
        assert checks["baseline"].verdict in relative.ALARM


def test_sample_faulty_attn_steps_are_found(tmp_path: Path) -> None:
    """sample_data/README.md: faulty-attn's faulty path runs in half of its steps."""
    runs = Path(__file__).parents[4] / "sample_data" / "runs"
    faulty = relative._faulty_steps(runs / "faulty-attn")
    assert 2 <= len(faulty) <= 6
    mismatchctl.ingest([runs / "faulty-attn"], run="faulty-attn", store=tmp_path / "s")
    checks = relative._checks(tmp_path / "s", "faulty-attn")
    (evidence,) = checks["regimes"].evidence.runs.values()
    assert checks["regimes"].verdict == "fail"
    assert [int(s) for s in evidence.split.elevated_steps] == faulty
    (local,) = checks["localized"].evidence.runs.values()
    assert checks["localized"].verdict == "fail"
    # the faulty path runs when few sequences are still decoding: long sequences, some steps
    found = [f.where for f in local.code_path_findings]
    assert any({"step", "length", "kv_position", "order"} & set(w) for w in found)
    assert checks["cause"].evidence.cause == "code_path"
