"""Remedy sanity in whatif: a correction that would discard the signal (ESS below one half, most
units rejected, nearly every ratio at the cap) is marked, by diagnose's thresholds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mismatchctl.analysis.diagnose import corrections
from mismatchctl.analysis.whatif.remedy import discards_signal
from tests.helpers import FIXTURES, cli


def test_each_reason_at_diagnose_thresholds(monkeypatch: pytest.MonkeyPatch) -> None:
    ok = {"units": 10, "token_fraction": 0.1, "sequence_fraction": 0.2, "ess": 0.8}
    assert discards_signal(ok, "sequence", "rejected") is None
    assert discards_signal({**ok, "ess": 0.49}, "sequence", "rejected") == "ESS 49% < 50%"
    assert discards_signal({**ok, "sequence_fraction": 0.6}, "sequence", "rejected") == (
        "rejects 60% of sequences"
    )
    assert discards_signal({**ok, "token_fraction": 0.6}, "token", "rejected") == (
        "rejects 60% of tokens"
    )
    # a truncation at the cap for nearly every unit: the ESS of constant weights is near 1
    clipped = {**ok, "token_fraction": 0.95, "ess": 0.99}
    assert (
        discards_signal(clipped, "token", "clipped") == "95% of tokens at the cap (ESS meaningless)"
    )
    assert discards_signal({**ok, "ess": None}, "token", "rejected") == "every weight is 0"
    monkeypatch.setattr(corrections, "MIN_CORRECTION_ESS", 0.9)  # one set of thresholds: diagnose's
    assert discards_signal(ok, "sequence", "rejected") == "ESS 80% < 90%"


def _whatif(*args: str) -> dict:
    ran = cli("whatif", "seq", *args, "--json", "-", "-q")
    assert ran.code == 0, ran.err
    return json.loads(ran.out)["whatif"]


def test_whatif_marks_discarding_methods(store: Path) -> None:
    cli("ingest", str(FIXTURES / "sequence.parquet"), "--run", "seq", "-q")
    doc = _whatif("--method", "token-tis:1e-9", "--method", "seq-mis:1000", "--method", "geo-rs")
    whole = {g["method"]: g["remedy"] for g in doc["groups"] if g["by"] == {}}
    assert whole["token-tis"] == {
        "discards_signal": True,
        "why": "100% of tokens at the cap (ESS meaningless)",
    }
    assert whole["seq-mis"] == {"discards_signal": False, "why": None}
    assert whole["geo-rs"]["discards_signal"] and "rejects" in whole["geo-rs"]["why"]
    text = cli("whatif", "seq", "--method", "token-tis:1e-9", "-q").out
    assert "token-tis 1e-09: discards the signal (100% of tokens at the cap" in text
    assert "not advised" in text


def test_preset_marks_a_cap_below_every_ratio(store: Path) -> None:
    cli("ingest", str(FIXTURES / "sequence.parquet"), "--run", "seq", "-q")
    doc = _whatif(
        "--preset", "verl-rollout-corr", "--set", "rollout_is=token",
        "--set", "rollout_is_threshold=1e-6",
    )  # fmt: skip
    whole = next(g for g in doc["groups"] if g["by"] == {})
    assert whole["remedy"]["discards_signal"] and "at the cap" in whole["remedy"]["why"]
    fine = _whatif("--preset", "verl-rollout-corr", "--set", "rollout_is=token",
                   "--set", "rollout_is_threshold=2")  # fmt: skip
    assert next(g for g in fine["groups"] if g["by"] == {})["remedy"]["discards_signal"] is False
    wild = _whatif("--preset", "verl-rollout-corr", "--set", "rollout_is=token",
                   "--set", "rollout_is_threshold=1000")  # fmt: skip
    why = next(g for g in wild["groups"] if g["by"] == {})["remedy"]["why"]
    assert why.startswith("ESS ") and why.endswith("< 50%")  # nearly untruncated: the raw ESS
