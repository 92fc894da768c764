"""diagnose on runs scored by a bf16 trainer (mixed precision, the logits upcast), where every
corpus it was calibrated on scores in fp32: ``bt-h-a``, ``bt-h-b`` and ``bt-pr-fp8kv``, the
first three steps of ``h-bt-a``, ``h-bt-b`` and ``pr-fp8kv-bt`` (gen/catalog_trainer.py,
docs/diagnose.md "A trainer in bf16"), made after every rule and diagnosed once."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.planted import diagnosis


@pytest.mark.parametrize(
    ("run", "baseline"),
    [("bt-h-a", None), ("bt-h-b", None), ("bt-h-a", "bt-h-b"), ("bt-h-b", "bt-h-a"),
     ("bt-h-a", "h-b")],
)  # fmt: skip
def test_a_healthy_run_with_a_bf16_trainer_raises_no_alarm(
    held_out_store: Path, run: str, baseline: str | None
) -> None:
    """Healthy with a bf16 trainer: alone, over another such run, and over a healthy run of the
    fp32 trainer (``h-b``: the trainer's own rounding adds little to the engine's)."""
    found = diagnosis(held_out_store, run, baseline).section_dict()
    assert found["verdict"] == "ok" and found["cause"]["key"] == "none"


def test_an_fp8_cache_beside_a_bf16_trainer_is_the_precision(held_out_store: Path) -> None:
    """An fp8 KV cache in the engine, the trainer in bf16: unseen alone (a level), the precision
    over the baseline of the same stack, as with an fp32 trainer."""
    assert diagnosis(held_out_store, "bt-pr-fp8kv").section_dict()["verdict"] == "ok"
    found = diagnosis(held_out_store, "bt-pr-fp8kv", "bt-h-a").section_dict()
    assert found["verdict"] == "fail" and found["cause"]["key"] == "precision"
    assert not found["cause"].get("also")
