"""The ``turn_ends`` check (``analysis/diagnose/checks/turn_ends.py``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mismatchctl.analysis.diagnose.checks import turn_ends
from tests.planted import checks as diagnosed


def test_a_mismatch_growing_toward_the_end_is_not_the_stop(ends_store: Path) -> None:
    checks = diagnosed(ends_store, "long-10x")
    ends = checks["turn_ends"]
    assert ends.verdict == "ok"
    assert ends.evidence.worst.last.rate_ratio > 1.2  # the later turns' ends are hot...
    assert ends.evidence.worst.last_vs_before.rate_ratio_ci[0] < 1.5  # ...as the tokens before
    assert checks["cause"].evidence.cause == "code_path"


@pytest.mark.parametrize("run", ["stop-2x", "stop-3x"])
def test_ends_hot_under_the_stop_sharpness_are_not_the_stop(ends_store: Path, run: str) -> None:
    """Scaled plants of 2-3x at the responses' last token: hot against the rest and against the
    tokens before them, but under ``STOP_SHARP`` their neighbours, where every physical stop
    fault of the calibration corpora stands (100x or more): not named."""
    checks = diagnosed(ends_store, run)
    ends = checks["turn_ends"]
    assert ends.verdict == "ok"
    final = ends.evidence.worst.response_end
    assert final.last_vs_before.rate_ratio_ci[0] >= 1.5  # the localized pattern...
    assert final.last_vs_before.rate_ratio < turn_ends.T.STOP_SHARP  # ...not a stop's
    assert f"under {turn_ends.T.STOP_SHARP:g}x the tokens just before them" in ends.finding
    assert checks["cause"].evidence.cause != "stop"


def test_a_healthy_run_has_no_stop_fault(ends_store: Path) -> None:
    checks = diagnosed(ends_store, "healthy")
    assert checks["turn_ends"].verdict == "ok"
    assert checks["cause"].evidence.cause == "none"


def test_a_selection_of_runs_is_judged_run_by_run(ends_store: Path) -> None:
    """The faulty run and a healthy one selected by a tag: the check names the faulty run, with
    the numbers it has alone."""
    ends = diagnosed(ends_store, "fleet=b")["turn_ends"]
    assert ends.verdict == "fail" and ends.evidence.run == "stop-100x"
    assert set(ends.evidence.runs) == {"stop-100x", "healthy"}
    alone = diagnosed(ends_store, "stop-100x")["turn_ends"].evidence
    assert ends.evidence.runs["stop-100x"] == alone.worst
    assert ends.evidence.runs["healthy"].last.rate_ratio_ci[0] < 1.5


def test_a_stop_filled_on_a_flat_model_is_the_stop(held_out_store: Path) -> None:
    """``co-stop-zero`` (the Cohere member's engine reporting 0.0 for the stop token, seed 1):
    its distributions are so flat that the filled stops (p = 1) make up most of the top
    probability bin and are compared with themselves there (about 1x); 70% of its turns end in
    a rollout-side 0.0 where the trainer gives p <= 0.5, no other token does: the check fails on
    that, and the stop is named (it was `unexplained`, and a precision loss over a baseline)."""
    from tests.planted import diagnosis

    for baseline in (None, "co-h-b"):
        found = diagnosis(held_out_store, "co-stop-zero", baseline).section_dict()
        check = next(c for c in found["checks"] if c["name"] == "turn_ends")
        filled = check["evidence"]["filled"]
        assert check["verdict"] == "fail" and "the stop's logprob filled in" in check["finding"]
        assert filled["filled"] and filled["share"] > 0.5 and filled["other_share"] == 0.0
        assert found["cause"]["key"] == "stop"


def test_zeros_everywhere_are_no_filled_stop(held_out_store: Path) -> None:
    """``co-u-logit-scale-off`` (an engine far sharper everywhere): 16% of its turns end in such
    a 0.0, and 15% of its other tokens are: not the stop's."""
    from tests.planted import diagnosis

    found = diagnosis(held_out_store, "co-u-logit-scale-off").section_dict()
    check = next(c for c in found["checks"] if c["name"] == "turn_ends")
    filled = check["evidence"]["filled"]
    assert not filled["filled"] and filled["share"] < 2 * filled["other_share"]
    assert check["verdict"] == "ok"


def test_ends_hot_by_a_few_heavy_tokens_are_not_the_stop(held_out_store: Path) -> None:
    """``co-h-one-turn-s1`` (one step of the Cohere member's healthy single-turn run, 32
    responses): two of its largest |r| sit on turn ends, 35x the other tokens and 43x the seven
    before, but carried by about two responses (``END_CARRIERS``); no alarm, and the check
    says why."""
    from tests.planted import diagnosis

    found = diagnosis(held_out_store, "co-h-one-turn-s1").section_dict()
    ends = next(c for c in found["checks"] if c["name"] == "turn_ends")
    assert ends["verdict"] == "ok" and found["cause"]["key"] == "none"
    assert ends["evidence"]["last"]["rate_ratio"] > 10
    assert "carried by about 2.1 responses" in ends["finding"]


def test_one_step_of_a_stop_fault_is_carried_by_many(held_out_store: Path) -> None:
    """One step of a stop filled with 0.0 (``co-stop-zero``, 32 responses) is still the stop:
    its filled ends are many responses' (every filled stop alike)."""
    from tests.planted import diagnosis

    found = diagnosis(held_out_store, "co-stop-zero@steps=1..1").section_dict()
    assert found["cause"]["key"] == "stop"


def test_the_carriers_are_the_responses_k3_at_their_ends(held_out_store: Path) -> None:
    """``last_carriers`` is ``(sum y)^2 / sum y^2`` over each response's K3 at its turn's last
    token, computed here from the dump (one turn a response)."""
    import pyarrow.parquet as pq

    from tests.analysis.diagnose.stores.held_out import HELD_OUT
    from tests.planted import diagnosis

    y = []
    for f in sorted((HELD_OUT / "co-h-one-turn-s1").glob("*.parquet")):
        t = pq.read_table(f, columns=["response_mask", "rollout_log_probs", "old_log_probs"])
        for mask, lr, lt in zip(*t.to_pydict().values(), strict=True):
            keep = np.asarray(mask, bool)
            r = float(np.asarray(lt)[keep][-1]) - float(np.asarray(lr)[keep][-1])
            y.append(np.expm1(r) - r)
    want = float(np.sum(y)) ** 2 / float(np.sum(np.square(y)))
    found = diagnosis(held_out_store, "co-h-one-turn-s1").section_dict()
    ends = next(c for c in found["checks"] if c["name"] == "turn_ends")
    assert ends["evidence"]["last_carriers"] == pytest.approx(want, rel=1e-9)
