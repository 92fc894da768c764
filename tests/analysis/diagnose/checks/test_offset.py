"""The ``offset`` check (``analysis/diagnose/checks/offset.py``)."""

from __future__ import annotations

from tests.analysis.diagnose.stores import planted_causes


def test_fires_on_its_planted_cause_only(verdicts: dict) -> None:
    planted_causes.fires_on_its_cause_only("offset", verdicts)


def _ran(mean: float, ratio: float, negative: float = 0.67) -> object:
    """The check on offset sums whose mean r, mean ratio and share of r < 0 are given (z far)."""
    from types import SimpleNamespace
    from typing import cast
    from unittest import mock

    from mismatchctl.analysis.diagnose.checks import offset
    from mismatchctl.analysis.diagnose.context import Context
    from mismatchctl.stats import registry as M

    summary = {M.LOG_RATIO_MEAN: mean, "log_ratio_se": abs(mean) / 50, "log_ratio_z": -50.0,
               "negative_share": negative, "ratio_mean": ratio}  # fmt: skip
    ctx = cast(Context, SimpleNamespace(state=SimpleNamespace(offset=None)))
    with (
        mock.patch.object(offset.alignment, "not_assessed", return_value=None),
        mock.patch.object(offset, "offset_summary", return_value=summary),
    ):
        return offset.run(ctx)


def test_a_mean_that_is_the_two_distributions_kl_is_said_not_a_shift() -> None:
    """A pre-training checkpoint on the Llama family (mean r -0.883, mean ratio 1.004): the mean
    is off, and is the KL of two full distributions; a truncation's mean (top-p: -0.0145, mean
    ratio 0.9857) is a shift, with the processed-logprobs advice."""
    from mismatchctl.analysis.diagnose.checks import offset

    far = _ran(-0.883, 1.004)
    assert far.verdict == "fail" and offset.kl_only(far.evidence)
    assert "KL divergence, not a shift" in far.finding and far.next == offset.KL_ADVICE
    shift = _ran(-0.0145, 0.9857, negative=0.9)
    assert shift.verdict == "warn" and not offset.kl_only(shift.evidence)
    assert "the rollout side is systematically higher" in shift.finding
    assert "processed" in shift.next
