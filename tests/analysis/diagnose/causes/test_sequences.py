"""The cause ``sequences`` (``analysis/diagnose/causes/sequences.py``)."""

from __future__ import annotations

import zlib
from pathlib import Path

import pytest

from tests.analysis.diagnose.stores import requests
from tests.helpers import slow_param


@pytest.mark.parametrize("run", ["some-3x", slow_param("some-10x")])
@pytest.mark.parametrize("baseline", [None, "base"])
def test_some_hot_requests_are_named(sequences_store: Path, run: str, baseline: str | None) -> None:
    checks = requests._checks(sequences_store, run, baseline)
    hot = checks["hot_sequences"]
    assert hot.verdict in requests.ALARM
    assert hot.evidence.worst.hot >= 4 * max(hot.evidence.worst.cold, 1)
    factor = 3.0 if run == "some-3x" else 10.0
    assert factor / 1.5 < hot.evidence.worst.rate_ratio < factor * 1.5
    examples = hot.evidence.worst.examples
    assert examples and all(e.z > 3 for e in examples)
    assert all(zlib.crc32(e.sample_id.encode()) % 8 == 0 for e in examples)  # planted ones
    top = examples[0]
    assert f"mismatchctl show {run} {top.sample_id} --step {top.step}" in hot.next
    cause = checks["cause"]
    assert cause.evidence.cause == "sequences", cause.finding
    assert "replica" in cause.next and "weight version" in cause.next


@pytest.mark.parametrize("run", ["some-topp", slow_param("some-rep")])
def test_a_setting_of_some_requests_is_their_cause_not_another_policy(
    pooled_store: Path, run: str
) -> None:
    """A truncation or a penalty on a third of the requests leans those responses: it was
    named another policy of every token; the lean is the hot requests', and their advice
    names a per-request setting beside other weights."""
    checks = requests._checks(pooled_store, run)
    assert checks["policy_signs"].verdict in requests.ALARM
    hot = checks["hot_sequences"]
    assert hot.verdict in requests.ALARM and hot.evidence.worst.hot >= 150
    cause = checks["cause"].evidence
    assert cause.cause == "sequences", checks["cause"].finding
    assert cause.named.checks == ["hot_sequences", "policy_signs"]
    assert cause.named.verdict == "fail"  # the lean's verdict, the worse of the two
    policy = next(r for r in cause.runner_ups if r.key == "policy")
    assert policy.score == 0.0 and "some requests'" in policy.against[0]
    assert "sampling setting" in checks["cause"].next and "weight versions" in checks["cause"].next


@pytest.mark.parametrize("run", [slow_param("some-stale")])
def test_weights_behind_on_some_requests_are_those_requests(pooled_store: Path, run: str) -> None:
    cause = requests._checks(pooled_store, run)["cause"]
    assert cause.evidence.cause == "sequences" and "straddled a weight update" in cause.next


def test_a_part_the_localized_check_names_outranks_the_requests(pooled_store: Path) -> None:
    """A template fault on a third of the requests: the hot requests and their turns' starts
    explain the same excess; the part is named (it was "33 of 576 sequences")."""
    checks = requests._checks(pooled_store, "some-template")
    assert checks["localized"].verdict in requests.ALARM
    cause = checks["cause"].evidence
    assert cause.cause == "template", checks["cause"].finding
    lost = next(r for r in cause.runner_ups if r.key == "sequences")
    assert "localized check names a part" in lost.against[0]


@pytest.mark.parametrize(
    ("run", "part"),
    [("some-topp-splitkv", "code_path"), slow_param("some-rep-template", "template")],
)
def test_a_setting_of_some_requests_beside_a_parts_fault_is_named_beside_it(
    pooled_store: Path, run: str, part: str
) -> None:
    """Top-p (or a repetition penalty) on a third of the requests, a split-KV path (or a
    re-rendered template) on another third: the part is named, and outside it, in the first
    turns, the requests the setting hits are hot and lean while the others do not: "some
    requests" beside it, not another policy of every response (it was named first, 57%)."""
    cause = requests._checks(pooled_store, run)["cause"].evidence
    assert cause.cause == part
    (also,) = [a for a in cause.also if a.key == "sequences"]
    assert "in the first turns" in also.where and also.checks == ["hot_sequences", "policy_signs"]
    hot = int(also.where.split(" of ")[0])
    assert 120 <= hot <= 200  # a third of the 530-540 sequences with first turns, at most
    policy = next(r for r in cause.runner_ups if r.key == "policy")
    assert policy.score == 0.0 and "some requests'" in policy.against[-1]


def test_healthy_runs_pooled_raise_no_alarm(pooled_store: Path) -> None:
    """Two healthy runs as one (twice the requests): quiet, as each is."""
    checks = requests._checks(pooled_store, "pooled-healthy")
    assert all(c.verdict not in requests.ALARM for c in checks.values()), [
        (c.name, c.verdict) for c in checks.values() if c.verdict in requests.ALARM
    ]
