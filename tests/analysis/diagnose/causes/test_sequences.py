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
