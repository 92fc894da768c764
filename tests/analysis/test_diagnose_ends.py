"""diagnose on a stop handled differently by the two sides: the last model token of every
response with its mismatch 3x or 100x (the engine's logprob of the end-of-sequence token, a
stop string). It was named the hardware (a part found by chance on one gpu's later turns) or a
code path; the turn_ends check finds the turns' last token hot against the other tokens and
against the seven before it, and the cause is "stop". A mismatch that grows toward the end
(from KV 48 on, as a long-context kernel) also makes the ends hot, but no more than the tokens
before them: it stays a code path (the sample `faulty-attn`, whose turns' last token is 6x the
rest and 1.8x the seven before it, interval 0.78-4.1, is in the golden diagnosis). Healthy runs
are quiet.

The dumps are tests/planted.py's healthy runs, scaled with ``write_scaled``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.planted import checks as diagnosed
from tests.planted import scaled_store

ALARM = ("warn", "fail")


def _last(factor: float):
    return lambda row, kv: np.where(np.arange(len(kv)) == len(kv) - 1, factor, 1.0)


RUNS = {
    "stop-2x": (2, _last(2.0)),
    "stop-3x": (1, _last(3.0)),
    "stop-100x": (2, _last(100.0)),
    "long-10x": (1, lambda row, kv: np.where(kv >= 48, 10.0, 1.0)),
    "healthy": (3, _last(1.0)),
}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    fleet = {"fleet": "b"}
    tags = {"stop-3x": fleet, "healthy": fleet}
    return scaled_store(tmp_path_factory.mktemp("ends"), RUNS, tags=tags)


def test_a_2x_end_of_sequence_fault_is_named_by_the_responses_last_token(store: Path) -> None:
    """2x on the responses' last token: diluted to 1.3x by the turns that end before a tool
    response, it stands at 2.2x (1.8-2.6) alone."""
    ends = diagnosed(store, "stop-2x")["turn_ends"]
    assert ends.verdict == "warn" and ends.evidence["scope"] == "end of the response"
    assert ends.evidence["last"]["rate_ratio_ci"][0] < 1.5
    assert ends.evidence["response_end"]["last_vs_before"]["rate_ratio_ci"][0] >= 1.5


@pytest.mark.parametrize("run", ["stop-3x", "stop-100x"])
def test_a_stop_handled_differently_is_named(store: Path, run: str) -> None:
    checks = diagnosed(store, run)
    ends = checks["turn_ends"]
    assert ends.verdict == ("fail" if run == "stop-100x" else "warn")
    assert ends.evidence["last"]["rate_ratio_ci"][0] >= 1.5
    assert ends.evidence["last_vs_before"]["rate_ratio_ci"][0] >= 1.5
    assert ends.evidence["last_tokens"] > 0
    assert ends.evidence["scope"] == "every turn"
    final = ends.evidence["response_end"]
    assert final["tokens"] == 24 * 32  # one per response
    assert final["last"]["rate_ratio"] > ends.evidence["last"]["rate_ratio"]  # undiluted
    cause = checks["cause"]
    assert cause.evidence["key"] == "stop"
    assert "stop" in cause.next and "end-of-sequence" in cause.next
    local = checks["localized"]
    if local.verdict in ALARM:
        assert "turn_ends check" in local.next


def test_a_mismatch_growing_toward_the_end_is_not_the_stop(store: Path) -> None:
    checks = diagnosed(store, "long-10x")
    ends = checks["turn_ends"]
    assert ends.verdict == "ok"
    assert ends.evidence["last"]["rate_ratio"] > 1.2  # the later turns' ends are hot...
    assert ends.evidence["last_vs_before"]["rate_ratio_ci"][0] < 1.5  # ...as the tokens before
    assert checks["cause"].evidence["key"] == "code_path"


def test_a_healthy_run_has_no_stop_fault(store: Path) -> None:
    checks = diagnosed(store, "healthy")
    assert checks["turn_ends"].verdict == "ok"
    assert checks["cause"].evidence["key"] == "none"


def test_a_selection_of_runs_is_judged_run_by_run(store: Path) -> None:
    """The faulty run and a healthy one selected by a tag: the check names the faulty run, with
    the numbers it has alone."""
    ends = diagnosed(store, "fleet=b")["turn_ends"]
    assert ends.verdict == "warn" and ends.evidence["run"] == "stop-3x"
    assert set(ends.evidence["runs"]) == {"stop-3x", "healthy"}
    alone = diagnosed(store, "stop-3x")["turn_ends"].evidence
    assert ends.evidence["runs"]["stop-3x"] == alone
    assert ends.evidence["runs"]["healthy"]["last"]["rate_ratio_ci"][0] < 1.5
