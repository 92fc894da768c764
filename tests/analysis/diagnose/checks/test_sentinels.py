"""The ``sentinels`` check (``analysis/diagnose/checks/sentinels.py``)."""

from __future__ import annotations

from pathlib import Path

from tests.analysis.diagnose.stores import planted_causes
from tests.planted import diagnosis


def test_fires_on_its_planted_cause_only(verdicts: dict) -> None:
    planted_causes.fires_on_its_cause_only("sentinels", verdicts)


def test_evidence_names_the_samples(planted_store: Path) -> None:
    checks = {c.name: c for c in diagnosis(planted_store, "sentinel").checks}
    samples = checks["sentinels"].evidence.samples
    assert samples and all(s.sample_id.startswith(f"s{s.step}-") for s in samples)
    assert checks["sentinels"].evidence.values_le_sentinel.trainer == 1
    assert checks["sentinels"].to_dict()["evidence"]["values_le_-1000"]["trainer"] == 1


def test_zero_runs_of_a_far_sharper_side_are_its_certainty(held_out_store: Path) -> None:
    """``co-u-logit-scale-off`` (the Cohere member's engine without its logit scale of 1/16:
    logits 16 times the trainer's, sampled near greedily): 11% of its tokens sit in runs of
    rollout-side exact 0.0 where the trainer says p <= 0.5, but the rollout side sits 1.8 nats
    above the trainer per token where neither is 0.0: its certainty rounding to p = 1, not a
    writer's fill. The check passes and says so; the semantics is named (it was the data)."""
    found = diagnosis(held_out_store, "co-u-logit-scale-off").section_dict()
    check = next(c for c in found["checks"] if c["name"] == "sentinels")
    assert check["verdict"] == "ok" and "not fills" in check["finding"]
    assert check["evidence"]["zero_run_share"] > 0.05
    assert check["evidence"]["sharper_side"] > 1.0
    assert found["cause"]["key"] == "semantics"


def test_a_fill_beside_values_that_agree_stays_a_fill(tmp_path: Path) -> None:
    """The Cohere member's healthy ``co-h-b`` with a writer's 0.0 over seven model tokens of
    each of its first ten responses (rollout side): the filled side agrees with the other
    elsewhere (0.002 per token), so the runs are fills and the check fails."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mismatchctl import api
    from tests.analysis.diagnose.stores.held_out import HELD_OUT

    run = tmp_path / "filled"
    run.mkdir()
    for f in sorted((HELD_OUT / "co-h-b").glob("*.parquet")):
        t = pq.read_table(f)
        if f.name == "step_0001.parquet":
            rows = t.to_pydict()
            for i in range(10):
                lps, mask = rows["rollout_log_probs"][i], rows["response_mask"][i]
                model = np.flatnonzero(mask)[3:10]
                for j in model:
                    lps[j] = 0.0
            t = pa.Table.from_pydict(rows, schema=t.schema)
        pq.write_table(t, run / f.name)
    store = tmp_path / "store"
    api.ingest([run], "filled", store=store)
    found = diagnosis(store, "filled").section_dict()
    check = next(c for c in found["checks"] if c["name"] == "sentinels")
    assert check["verdict"] == "fail" and "not fills" not in check["finding"]
    assert abs(check["evidence"]["sharper_side"]) < 0.05
    assert found["cause"]["key"] == "data"
