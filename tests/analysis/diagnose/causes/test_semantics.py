"""The cause ``semantics`` (``analysis/diagnose/causes/semantics.py``)."""

from __future__ import annotations

from pathlib import Path

from tests.analysis.diagnose.stores import calibration


def test_a_penalty_in_the_engines_logprobs_is_named_a_logit_processor(
    calibration_store: Path,
) -> None:
    """A repetition penalty of 1.01 in the engine's processed logprobs (2.8x a healthy run):
    the tokens seen before in their response are shifted, the others are not."""
    cause = calibration._cause(calibration_store, "sem-rep-subtle")["cause"]
    assert cause["key"] == "semantics" and "logit processor" in cause["variant"]
    assert "penalty" in cause["next"] and "token_shift" in cause["checks"]
    assert cause["correction"].startswith("no")
