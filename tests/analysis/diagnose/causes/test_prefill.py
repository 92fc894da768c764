"""The start of every prefill (``analysis/diagnose/causes/prefill.py``): a burst after the tool
responses with the first turns' longer prompts' starts hot too is a prefill path's, not a
rendering fault's."""

from __future__ import annotations

from pathlib import Path

import pytest

from mismatchctl.analysis.diagnose.causes.prefill import hot
from mismatchctl.stats.signed_parts import RateRatio
from tests.analysis.diagnose.stores import calibration


def test_hot_starts_need_the_interval_above_the_healthy_spread() -> None:
    assert hot(RateRatio(4.6, (2.4, 8.8), 368))  # cp-chunk-merge
    assert hot(RateRatio(3.2, (1.4, 7.4), 308))  # its held-out run
    assert not hot(RateRatio(1.07, (0.7, 1.6), 368))  # the healthy runs' largest
    assert not hot(RateRatio(2.0, (0.9, 4.4), 60))  # a wide interval: too few tokens
    assert not hot(None)


def test_a_chunked_prefill_merge_is_no_rendering_fault(calibration_store: Path) -> None:
    """The chunked prefill's merge without row sums (3.1x a healthy run): the first tokens after
    each tool response are a burst (5.5x the rest of those turns), and so are the first turns'
    starts of the prompts longer than a chunk: the template has that against it, the code path
    is named."""
    cause = calibration._cause(calibration_store, "cp-chunk-merge")["cause"]
    assert cause["key"] == "code_path" and cause["also"] == []
    rows = {r["key"]: r for r in cause["runner_ups"]}
    assert any("not a rendering fault" in a for a in rows["template"]["against"])


@pytest.mark.parametrize("baseline", [None, "h-b"])
def test_a_rendering_fault_leaves_the_first_turns_starts_alone(
    calibration_store: Path, baseline: str | None
) -> None:
    """Escaped quotes in the trainer's tool responses (35x): the burst after them, and the first
    turns' starts as healthy as the rest of the first turns: nothing against the template."""
    cause = calibration._cause(calibration_store, "tpl-escaped-quotes", baseline)["cause"]
    assert cause["key"] == "template" and cause["against"] == []
