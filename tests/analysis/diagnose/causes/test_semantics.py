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


def test_a_transform_at_every_token_is_no_precision_loss_beside_it(
    calibration_store: Path,
) -> None:
    """Top-p on the engine side only (2.2x a healthy run): against the baseline every token is
    hotter alike, no part and no lean, which is the precision's evidence; the transform
    explains it, so the precision is a runner-up the semantics sets off, not a second cause."""
    cause = calibration._cause(calibration_store, "sem-topp-subtle", "h-b")["cause"]
    assert cause["key"] == "semantics" and cause["also"] == []
    precision = next(r for r in cause["runner_ups"] if r["key"] == "precision")
    assert precision["verdict"] in ("warn", "fail")  # the level is there: it alarms
    assert precision["lost"] == f"{cause['label']} sets off its checks too"
