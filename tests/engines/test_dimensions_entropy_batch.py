"""The split keys entropy, trainer_prob and batch_size: every group's numbers against a numpy
reference computed from the dump's raw arrays, over a store of many small parts, on the local
engine (the Ray engine's equality is in tests/engines/test_ray_engine.py); a part without the
entropy column (a version 2 store) reads as unknown entropy."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import mismatchctl
from mismatchctl.engines import plan as K
from mismatchctl.ingest import source as ingest_source
from mismatchctl.stats import registry as M
from mismatchctl.stats.bins import LOG_EDGES
from mismatchctl.store import parts as store_parts
from tests.engines.dims_data import dims_dump, k3, reference_tokens
from tests.helpers import cli

REL = 1e-9
ENTROPY_EDGES = (0.0, 0.001, 0.01, 0.1, 0.5, 1.0, 2.0, 4.0)  # docs/metrics.md, written out


def entropy_batch_dump(path: Path, seed: int = 3) -> Path:
    """``dims_dump`` with a per-token ``entropy`` list and a
    ``batch_id`` per response (micro-batches of 8 and of 3 in each step)."""
    base = pq.read_table(dims_dump(path.with_name("base.parquet"), seed=seed))
    rng = np.random.default_rng(seed)
    lengths = [len(m) for m in base.column("response_mask").to_pylist()]
    # spread over every bin: near-certain tokens to flat distributions
    entropy = [(rng.exponential(0.4, n) * rng.choice([0.003, 1.0, 6.0])).tolist() for n in lengths]
    steps = base.column("step").to_pylist()
    order: dict[int, int] = {}
    batch_id = []
    for s in steps:
        k = order.get(s, 0)
        order[s] = k + 1
        batch_id.append(k // 8 if k < 48 else 100 + (k - 48) // 3)  # 6 batches of 8, then of 3
    table = base.append_column("entropy", pa.array(entropy, pa.list_(pa.float64())))
    table = table.append_column("batch_id", pa.array(batch_id, pa.int64()))
    pq.write_table(table, path)
    return path


@pytest.fixture(scope="module")
def eb(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("eb")
    dump = entropy_batch_dump(base / "eb.parquet")
    store = base / "store"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(store_parts, "PART_TOKENS", 4000)
        mp.setattr(ingest_source, "BATCH_TOKENS", 4000)
        mismatchctl.ingest([dump], run="d", store=store)
    assert len(mismatchctl.open_store(store).parts("d")) >= 6
    return dump, store


def reference(dump: Path) -> tuple:
    """Per model token: its entropy (NaN: none), and its sequence's batch size (the responses
    of its step with its batch id), from the raw arrays."""
    t = pq.read_table(dump).to_pydict()
    sizes: dict[tuple[int, int], int] = {}
    for s, b in zip(t["step"], t["batch_id"], strict=True):
        sizes[(s, b)] = sizes.get((s, b), 0) + 1
    ent, size = [], []
    for row, mask in enumerate(t["response_mask"]):
        idx = np.flatnonzero(np.asarray(mask) == 1)
        e = t["entropy"][row]
        ent.append(np.full(len(idx), np.nan) if e is None else np.asarray(e)[idx])
        size.append(np.full(len(idx), sizes[(t["step"][row], t["batch_id"][row])]))
    return np.concatenate(ent), np.concatenate(size)


def _entropy_bin(values: np.ndarray) -> list:
    out = []
    for v in values:
        if math.isnan(v):
            out.append(None)
        else:
            out.append(max(e for e in ENTROPY_EDGES if e <= max(v, 0.0)))
    return out


def _prob_bin(logprob: np.ndarray) -> np.ndarray:
    p = np.exp(logprob)
    return np.clip(np.searchsorted(LOG_EDGES, p, side="right") - 1, 0, len(LOG_EDGES) - 2)


def _check(rep, split: tuple[str, ...], values: list, lr: np.ndarray, lt: np.ndarray) -> None:
    kl = k3(lr, lt)
    expected: dict[tuple, list[int]] = {}
    for i, key in enumerate(zip(*values, strict=True)):
        expected.setdefault(tuple(key), []).append(i)
    groups = {tuple(g.by[k] for k in split): g.metrics for g in rep.split(*split)}
    assert set(groups) == set(expected), split
    for key, idx in expected.items():
        m, idx = groups[key], np.asarray(idx)
        assert m[M.TOKENS] == len(idx), (split, key)
        assert math.isclose(m[M.VLLM_KL], float(kl[idx].mean()), rel_tol=REL), (split, key)
        assert math.isclose(m[M.KL_K1], float((lr[idx] - lt[idx]).mean()), rel_tol=REL)


def test_entropy_trainer_prob_and_batch_size_match_the_reference(eb: tuple[Path, Path]) -> None:
    dump, store = eb
    ref = reference_tokens(dump)
    ent, size = reference(dump)
    by = ["entropy", "trainer_prob", "batch_size", "batch_size,bin", "entropy,trainer_prob",
          "step,entropy", "turn_kind,entropy,kv_position"]  # fmt: skip
    rep = mismatchctl.report(["d"], by=by, store=store)
    tp = _prob_bin(ref.lt).tolist()
    _check(rep, (K.ENTROPY,), [_entropy_bin(ent)], ref.lr, ref.lt)
    _check(rep, (K.TRAINER_PROB,), [tp], ref.lr, ref.lt)
    _check(rep, (K.BATCH_SIZE,), [size.tolist()], ref.lr, ref.lt)
    bins = _prob_bin(ref.lr).tolist()
    _check(rep, (K.BATCH_SIZE, K.BIN), [size.tolist(), bins], ref.lr, ref.lt)
    _check(rep, (K.ENTROPY, K.TRAINER_PROB), [_entropy_bin(ent), tp], ref.lr, ref.lt)
    _check(rep, (K.STEP, K.ENTROPY), [ref.step.tolist(), _entropy_bin(ent)], ref.lr, ref.lt)
    sizes = {g.by[K.BATCH_SIZE] for g in rep.split(K.BATCH_SIZE)}
    assert sizes == {8, 3, 1}  # 70 responses a step: 6 batches of 8, 7 of 3, 1 of 1


def test_the_token_rows_hold_the_entropy_and_the_sequence_rows_the_batch(
    eb: tuple[Path, Path],
) -> None:
    dump, store = eb
    ent, _ = reference(dump)
    s = mismatchctl.open_store(store)
    tokens = s.scan("d").sort("seq", "position").collect()
    got = tokens["entropy"].to_numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ent))
    np.testing.assert_array_equal(got[~np.isnan(got)], ent[~np.isnan(ent)])
    seqs = s.scan("d", kind="sequences").sort("seq").collect()
    assert seqs["batch_id"].to_list() == pq.read_table(dump).column("batch_id").to_pylist()
    assert seqs["batch_size"].null_count() == len(seqs)  # the dump gives no size: derived on read
    # the sequence mean of the per-token entropy is kept as before
    first = seqs.filter(seqs["entropy"].is_not_null())["entropy"][0]
    assert first > 0


def test_labels_in_the_terminal_and_json(eb: tuple[Path, Path]) -> None:
    _, store = eb
    args = ("report", "d", "--by", "entropy", "--by", "trainer_prob", "--store", str(store))
    ran = cli(*args)
    assert ran.code == 0, ran.err
    assert "[0.1, 0.5)" in ran.out and "[4, inf)" in ran.out
    assert "By trainer_prob" in ran.out and "[0.9, 0.99)" in ran.out
    doc = json.loads(cli(*args, "--json", "-", "-q").out)
    ent = [g["by"]["entropy"] for g in doc["groups"] if list(g["by"]) == ["entropy"]]
    assert 0.1 in ent and 4.0 in ent and None not in ent  # the bins' lower edges


def test_a_part_without_the_entropy_column_reads_as_unknown(
    eb: tuple[Path, Path], tmp_path: Path
) -> None:
    """A token part written before version 3 (no `entropy` column): every token of it is in
    the unknown entropy group, and the other numbers do not change."""
    _, store = eb
    import shutil

    old = tmp_path / "store"
    shutil.copytree(store, old)
    for part in mismatchctl.open_store(old).parts("d"):
        path = mismatchctl.open_store(old).part_path(part)
        table = pq.read_table(path)
        pq.write_table(table.drop_columns(["entropy"]), path)
    rep = mismatchctl.report(["d"], by=["entropy"], store=old)
    groups = rep.split(K.ENTROPY)
    assert [g.by[K.ENTROPY] for g in groups] == [None]
    whole = mismatchctl.report(["d"], store=store).run("d").metrics
    assert groups[0].metrics[M.TOKENS] == whole[M.TOKENS]
    assert math.isclose(groups[0].metrics[M.VLLM_KL], whole[M.VLLM_KL], rel_tol=REL)
