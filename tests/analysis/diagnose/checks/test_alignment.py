"""The ``alignment`` check (``analysis/diagnose/checks/alignment.py``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import mismatchctl
from tests.analysis.diagnose.stores import alignment, planted_causes
from tests.planted import Plan, diagnosis, write


def test_alignment_reports_the_mismatch_before_and_after_shifting(planted_store: Path) -> None:
    """The K3 of the pairs at lag 0 and +-1 within a turn, against a direct computation."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mismatchctl.store import open_store

    store = open_store(planted_store)
    t = pa.concat_tables(pq.read_table(store.part_path(p)) for p in store.parts("shift"))
    lr, lt = t["rollout_logprob"].to_numpy(), t["trainer_logprob"].to_numpy()
    seq, turn = t["seq"].to_numpy(), t["turn"].to_numpy()
    same = (seq[1:] == seq[:-1]) & (turn[1:] == turn[:-1])

    def k3(x: np.ndarray, y: np.ndarray) -> float:
        return float(np.mean(np.expm1(y - x) - (y - x)))

    want = {
        "lag0": k3(lr, lt),
        "lag_plus1": k3(lr[:-1][same], lt[1:][same]),
        "lag_minus1": k3(lr[1:][same], lt[:-1][same]),
    }
    check = next(c for c in diagnosis(planted_store, "shift").checks if c.name == "alignment")
    for name, value in want.items():
        assert abs(getattr(check.evidence, f"vllm_kl_{name}") - value) <= 1e-9 * value
    assert want["lag_plus1"] < want["lag0"] / 10  # the shift undone
    assert "pairing each rollout token with the trainer's next position" in check.finding


def test_semantic_checks_are_skipped_when_misaligned(verdicts: dict) -> None:
    assert [verdicts["shift"][c] for c in ("offset", "temperature", "top_p")] == ["n/a"] * 3


@pytest.mark.parametrize(
    ("run", "verdict", "later"),
    [
        ("some-shifted", "fail", None),
        ("later-turns-shifted", "fail", 3),
        ("one-turn-shifted", "warn", 1),
    ],
)
def test_samples_shifted_by_a_position_are_found(
    alignment_store: Path, run: str, verdict: str, later: int | None
) -> None:
    checks = alignment._checks(alignment_store, run)
    check = checks["alignment"]
    assert check.verdict == verdict
    found = check.evidence.misaligned_turns
    assert found.misaligned == found.one_position_later > 0
    assert found.samples and all("one position later" in s.what for s in found.samples)
    if later is not None:
        assert found.misaligned == later
        assert all(s.what.startswith("turn 1") for s in found.samples)
    corr = check.evidence
    assert corr.correlation_lag0 > corr.correlation_lag_plus1  # the whole stays aligned
    assert "off-by-one shift in some samples" in check.finding
    if verdict == "fail":
        assert checks["cause"].evidence.cause == "data"


@pytest.mark.parametrize("run", ["zero-fills", "clean"])
def test_fills_and_aligned_samples_are_no_shift(alignment_store: Path, run: str) -> None:
    checks = alignment._checks(alignment_store, run)
    assert checks["alignment"].verdict == "ok"
    assert checks["alignment"].evidence.misaligned_turns.misaligned == 0
    if run == "zero-fills":
        assert checks["sentinels"].verdict == "fail"


def test_sentinel_fills_are_no_shift_and_leave_the_semantics_unassessed(
    alignment_store: Path,
) -> None:
    """-9999 beside a logprob garbles every lag alike: no lag matches one position off, so no
    shift is claimed; the semantic regressions would measure the fill, so they are n/a, and the
    cause's evidence is the sentinels."""
    checks = alignment._checks(alignment_store, "sentinel-fills")
    assert checks["sentinels"].verdict == "fail"
    assert checks["alignment"].verdict != "fail"
    assert "off-by-one" not in checks["alignment"].finding
    for name in ("offset", "temperature", "top_p"):
        assert checks[name].verdict == "n/a", name
        assert "fill values" in checks[name].finding
    cause = checks["cause"].evidence
    assert cause.cause == "data" and cause.named.because.startswith("sentinels")


def test_a_loud_fault_on_one_gpu_is_no_alignment_warning(tmp_path: Path) -> None:
    """A gpu at 3,000x lowers the lag-0 correlation below 0.8, yet it stays far above the
    shifted lags': the sides are aligned, the mismatch is large, another layer names it."""
    path = write(Plan("gpu", per_step=32, seed=7, factor=3000.0), tmp_path / "gpu.parquet")
    mismatchctl.ingest([path], run="gpu", store=tmp_path / "store")
    check = alignment._checks(tmp_path / "store", "gpu")["alignment"]
    ev = check.evidence
    assert ev.correlation_lag0 > 2 * max(ev.correlation_lag_plus1, ev.correlation_lag_minus1)
    assert check.verdict == "ok", check.finding


def test_fires_on_its_planted_cause_only(verdicts: dict) -> None:
    planted_causes.fires_on_its_cause_only("alignment", verdicts)


def test_a_hot_turn_of_one_repeated_token_is_no_writer_shift(held_out_store: Path) -> None:
    """``tpl-strip-newline`` (the trainer's tool responses lack their final newline; the
    corpus regenerated on a second machine): one later turn of 32 ``#``, hot from the
    template's fault, matched one position off as a repeated token does at every lag; it was
    taken for a writer's shift (0.2% of the tokens, over the fail share) and named the data.
    Its pairs of the same token twice tell no shift: no turn is misaligned."""
    found = diagnosis(held_out_store, "tpl-strip-newline").section_dict()
    check = next(c for c in found["checks"] if c["name"] == "alignment")
    assert check["verdict"] == "ok"
    assert check["evidence"]["misaligned_turns"]["misaligned"] == 0
    assert found["cause"]["key"] != "data" and found["verdict"] == "fail"
