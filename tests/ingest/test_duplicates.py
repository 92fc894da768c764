"""Sample ids are not unique (verl's uid is shared by a prompt group's responses): sequences are
told apart by seq, and exact duplicate sequences within a step (a double write) are counted at
ingest, kept in the catalog, shown by `runs show` and judged by `diagnose`."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import mismatchctl
from mismatchctl import api
from mismatchctl import schema as S
from mismatchctl.ingest import staged
from mismatchctl.ingest.run_ingest import Options
from tests.helpers import cli

N, WIDTH = 12, 30


def _batch(seed: int, step: int) -> pa.Table:
    """One step of a GRPO batch: 6 prompts x 2 responses, each pair sharing its uid."""
    rng = np.random.default_rng(seed)
    roll = -rng.exponential(0.8, (N, WIDTH))
    train = roll + rng.normal(0, 0.02, (N, WIDTH)).clip(max=-roll)
    return pa.table(
        {
            "step": [step] * N,
            "uid": [f"p{i // 2}" for i in range(N)],
            "responses": [list(rng.integers(1, 900, WIDTH)) for _ in range(N)],
            "rollout_log_probs": list(roll),
            "old_log_probs": list(train),
            "response_mask": [[1] * WIDTH] * N,
        }
    )


def test_shared_uids_are_distinct_sequences(store: Path, tmp_path: Path) -> None:
    """Two responses with one uid are two sequences everywhere: no duplicate, 12 sequences."""
    path = tmp_path / "step_1.parquet"
    pq.write_table(_batch(0, 1), path)
    result = mismatchctl.ingest([path], run="r", store=store)
    assert result.tally.sequences == N and result.tally.duplicate_sequences == 0
    seqs = mismatchctl.open_store(store).scan("r", kind="sequences").collect()
    assert seqs[S.SEQ].n_unique() == N and seqs[S.SAMPLE_ID].n_unique() == N // 2
    report = mismatchctl.report("r", store=store).whole()
    assert report is not None and report.partial.sequences == N


def test_double_writes_are_counted_in_and_across_files(store: Path, tmp_path: Path) -> None:
    one, two = _batch(0, 1), _batch(1, 2)
    twice = pa.concat_tables([one, one.slice(0, 5)])  # 5 rows written twice into one file
    pq.write_table(twice, tmp_path / "a.parquet")
    pq.write_table(pa.concat_tables([one.slice(3, 4), two]), tmp_path / "b.parquet")
    # the same rows at another step are not duplicates
    pq.write_table(one.set_column(0, "step", pa.array([9] * N)), tmp_path / "c.parquet")
    paths = [tmp_path / n for n in ("a.parquet", "b.parquet", "c.parquet")]
    ran = cli("ingest", *map(str, paths), "--run", "d", "-q", "--json")
    assert ran.code == 0, ran.err
    assert json.loads(ran.out)["totals"]["duplicate_sequences"] == 9
    info = json.loads(cli("runs", "show", "d", "--json").out)
    assert [s["duplicate_sequences"] for s in info["sources"]] == [5, 4, 0]
    shown = cli("runs", "show", "d").out
    assert "duplicate sequences" in shown and "duplicate sequences: 5" in shown
    # nothing is dropped: every written row is stored
    assert mismatchctl.open_store(store).run("d").sequences == 2 * N + 5 + 4 + N


def test_staged_ingest_counts_the_same(store: Path, tmp_path: Path) -> None:
    """The task-based ingest (threads here, Ray tasks alike) counts as the local one."""
    one = _batch(0, 1)
    pq.write_table(pa.concat_tables([one, one.slice(0, 2)]), tmp_path / "a.parquet")
    pq.write_table(one.slice(2, 3), tmp_path / "b.parquet")
    opts = Options(run="t", tags={}, fmt=None, mapping={}, skip_bad=False)
    inputs = [str(tmp_path / "a.parquet"), str(tmp_path / "b.parquet")]
    result = staged.ingest_staged(
        mismatchctl.open_store(store), inputs, opts, staged.thread_tasks(2)
    )
    assert [f.record.duplicate_sequences for f in result.files] == [2, 3]
    assert result.tally.duplicate_sequences == 5


def test_diagnose_flags_duplicates(store: Path, tmp_path: Path) -> None:
    one = _batch(0, 1)
    pq.write_table(one, tmp_path / "clean.parquet")
    pq.write_table(pa.concat_tables([one, one]), tmp_path / "twice.parquet")
    mismatchctl.ingest([tmp_path / "clean.parquet"], run="clean", store=store)
    mismatchctl.ingest([tmp_path / "twice.parquet"], run="twice", store=store)
    checks = {c.name: c for c in api.diagnose("clean", store=store).checks}
    assert checks["duplicates"].verdict == "ok"
    checks = {c.name: c for c in api.diagnose("twice", store=store).checks}
    dup = checks["duplicates"]
    assert dup.verdict == "fail" and dup.layer == "data integrity"
    assert dup.evidence.duplicate_sequences == N and dup.evidence.sequences == 2 * N
    assert dup.finding.startswith(f"{N} of {2 * N} sequences (50.0%) repeat an earlier sequence")
    assert "ingest one copy" in dup.next


def test_store_written_before_the_count(store: Path, tmp_path: Path) -> None:
    """An older catalog has no duplicate_sequences column: it reads as unknown (n/a), and the
    next ingest adds the column (old rows stay unknown)."""
    path = tmp_path / "step_1.parquet"
    pq.write_table(_batch(0, 1), path)
    mismatchctl.ingest([path], run="old", store=store)
    con = sqlite3.connect(store / "catalog.sqlite")
    con.execute("ALTER TABLE sources DROP COLUMN duplicate_sequences")
    con.commit()
    con.close()
    assert mismatchctl.open_store(store).run("old").sources[0].duplicate_sequences is None
    assert "n/a (ingested before they were counted)" in cli("runs", "show", "old").out
    check = next(c for c in api.diagnose("old", store=store).checks if c.name == "duplicates")
    assert check.verdict == "n/a" and "ingested before" in check.finding
    other = tmp_path / "step_2.parquet"
    pq.write_table(_batch(1, 2), other)
    mismatchctl.ingest([other], run="old", store=store)
    counts = [s.duplicate_sequences for s in mismatchctl.open_store(store).run("old").sources]
    assert counts == [None, 0]
    shown = cli("runs", "show", "old").out
    assert "0 (n/a for 1 sources ingested before they were counted)" in shown
    check = next(c for c in api.diagnose("old", store=store).checks if c.name == "duplicates")
    assert check.verdict == "ok" and "not counted in 1 source(s)" in check.finding


@pytest.mark.parametrize("changed", ["sample_id", "token", "rollout", "trainer"])
def test_any_difference_is_not_a_duplicate(store: Path, tmp_path: Path, changed: str) -> None:
    one = _batch(0, 1).slice(0, 1)
    row = one.to_pylist()[0]
    if changed == "sample_id":
        row["uid"] = "other"
    elif changed == "token":
        row["responses"] = [*row["responses"][:-1], row["responses"][-1] + 1]
    else:
        key = "rollout_log_probs" if changed == "rollout" else "old_log_probs"
        row[key] = [*row[key][:-1], np.nextafter(row[key][-1], 0.0)]  # one ulp
    pq.write_table(
        pa.concat_tables([one, pa.Table.from_pylist([row], one.schema)]), tmp_path / "x.parquet"
    )
    result = mismatchctl.ingest([tmp_path / "x.parquet"], run="x", store=store)
    assert result.tally.duplicate_sequences == 0


@pytest.mark.parametrize("mask", [True, False])
@pytest.mark.parametrize("tokens", [True, False])
def test_compiled_content_hashes_equal_the_numpy_reference(mask: bool, tokens: bool) -> None:
    """The compiled pass large batches take gives every sequence the numpy form's two hashes, bit
    for bit: empty sequences, float32 logprobs, with and without mask and token ids."""
    from mismatchctl.ingest import duplicates
    from mismatchctl.ingest.batch import RaggedBatch

    rng = np.random.default_rng(11)
    lengths = rng.integers(0, 400, 300)
    lengths[[3, 50]] = 0
    offsets = np.r_[0, np.cumsum(lengths)].astype(np.int64)
    total = int(offsets[-1])
    batch = RaggedBatch(
        steps=np.zeros(len(lengths), np.int64),
        sample_ids=[f"s{i}" for i in range(len(lengths))],
        offsets=offsets,
        rollout=(-rng.exponential(0.5, total)).astype(np.float32),
        trainer=-rng.exponential(0.5, total),
        mask=(rng.random(total) < 0.9) if mask else None,
        token_ids=rng.integers(0, 50_000, total) if tokens else None,
    )
    compiled = duplicates._compiled_hashes(batch)
    assert compiled.dtype == np.uint64 and compiled.shape == (len(lengths), 2)
    np.testing.assert_array_equal(compiled, duplicates.numpy_hashes(batch))
    batch.trainer[7] = np.nextafter(batch.trainer[7], 0)  # one bit of one value: another key
    changed = duplicates._compiled_hashes(batch)
    assert (changed != compiled).any(axis=1).sum() == 1
