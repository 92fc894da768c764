"""The split keys kv_position, turn_position, length, order and attr:NAME: every group's numbers
against a numpy reference computed from the dump's raw arrays (tests/engines/dims_data.py), over a
store of many small parts; the fallback note without prompt lengths; custom position bins; stores
written before prompt lengths and attributes were kept."""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import mismatchctl
from mismatchctl import schema as S
from mismatchctl.engines import plan as K
from mismatchctl.ingest import source as ingest_source
from mismatchctl.stats import registry as M
from mismatchctl.store import parts as store_parts
from tests.engines.dims_data import dims_dump, k3, log2_bin, reference_tokens
from tests.helpers import cli

REL = 1e-9


def _close(a: float | None, b: float) -> bool:
    return a is not None and math.isclose(a, b, rel_tol=REL, abs_tol=0.0)


@pytest.fixture(scope="module")
def dims(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The dump and a store holding it as run `d`, cut into many parts (sequences of one step
    spread over several parts, so per-part codes must agree)."""
    base = tmp_path_factory.mktemp("dims")
    dump = dims_dump(base / "dims.parquet")
    store = base / "store"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(store_parts, "PART_TOKENS", 4000)
        mp.setattr(ingest_source, "BATCH_TOKENS", 4000)
        mismatchctl.ingest([dump], run="d", store=store)
    assert len(mismatchctl.open_store(store).parts("d")) >= 6
    return dump, store


def _check_split(rep, split: tuple[str, ...], values: list[np.ndarray], ref) -> None:
    """Tokens, vllm_kl, kl_k1 and rollout_prob_mean of every group, and no group missing."""
    kl = k3(ref.lr, ref.lt)
    keys = list(zip(*[v.tolist() for v in values], strict=True))
    expected: dict[tuple, np.ndarray] = {}
    for i, key in enumerate(keys):
        expected.setdefault(key, []).append(i)
    groups = {tuple(g.by[k] for k in split): g.metrics for g in rep.split(*split)}
    assert set(groups) == set(expected), split
    for key, idx in expected.items():
        idx = np.asarray(idx)
        m = groups[key]
        assert m[M.TOKENS] == len(idx)
        assert _close(m[M.VLLM_KL], float(kl[idx].mean())), (split, key)
        assert _close(m[M.KL_K1], float((ref.lr[idx] - ref.lt[idx]).mean())), (split, key)
        assert _close(m[M.ROLLOUT_PROB_MEAN], float(np.exp(ref.lr[idx]).mean())), (split, key)


def test_every_new_split_matches_the_numpy_reference(dims: tuple[Path, Path]) -> None:
    dump, store = dims
    ref = reference_tokens(dump)
    by = ["kv_position", "turn_position", "length", "order", "attr:data_source",
          "attr:dp_rank", "turn_kind,kv_position", "step,order", "attr:data_source,length"]  # fmt: skip
    rep = mismatchctl.report(["d"], by=by, store=store)
    kind = np.where(_turn_index(dump) == 0, "first", "later")
    _check_split(rep, (K.KV_POSITION,), [log2_bin(ref.kv)], ref)
    _check_split(rep, (K.TURN_POSITION,), [log2_bin(ref.turn_pos)], ref)
    _check_split(rep, (K.LENGTH,), [log2_bin(ref.length)], ref)
    _check_split(rep, (K.DUMP_ORDER,), [ref.order // 32 * 32], ref)
    _check_split(rep, ("attr:data_source",), [ref.source], ref)
    _check_split(rep, ("attr:dp_rank",), [ref.dp_rank], ref)
    _check_split(rep, (K.TURN_KIND, K.KV_POSITION), [kind, log2_bin(ref.kv)], ref)
    _check_split(rep, (K.STEP, K.DUMP_ORDER), [ref.step, ref.order // 32 * 32], ref)
    _check_split(rep, ("attr:data_source", K.LENGTH), [ref.source, log2_bin(ref.length)], ref)
    # KV groups are token groups: their shares of the whole add up to 1, no sequence metric
    kv = rep.split(K.KV_POSITION)
    assert math.isclose(sum(g.metrics[M.TOKEN_SHARE] for g in kv), 1.0, rel_tol=1e-12)
    assert math.isclose(sum(g.metrics[M.KL_SHARE] for g in kv), 1.0, rel_tol=1e-12)
    assert all(M.LOG_PPL_PEARSON not in g.metrics for g in kv)
    # every fifth response has no prompt length: the note says how many
    assert any("kv_position of run `d`: 42 of 210 sequences" in n for n in rep.notes)


def _turn_index(dump: Path) -> np.ndarray:
    """Each model token's turn index (runs of model tokens before it in its response)."""
    out = []
    for mask in pq.read_table(dump).column("response_mask").to_pylist():
        m = np.asarray(mask) == 1
        starts = np.cumsum(m & ~np.r_[False, m[:-1]])
        out.append(starts[m] - 1)
    return np.concatenate(out)


def test_position_bins_option(dims: tuple[Path, Path]) -> None:
    dump, store = dims
    ref = reference_tokens(dump)
    rep = mismatchctl.report(["d"], by=["kv_position"], position_bins="0,100,1000", store=store)
    edges = np.array([100, 1000])
    lower = np.array([0, 100, 1000])[np.searchsorted(edges, ref.kv, side="right")]
    _check_split(rep, (K.KV_POSITION,), [lower], ref)
    doc = rep.to_dict()
    assert doc["position_edges"] == [0, 100, 1000]
    ran = cli(
        "report", "d", "--by", "kv_position", "--position-bins", "0,10,5", "--store", str(store)
    )
    assert ran.code == 1
    assert "--position-bins" in ran.err and "strictly increasing" in ran.err and "Hint:" in ran.err


def test_terminal_labels_and_json(dims: tuple[Path, Path]) -> None:
    _, store = dims
    ran = cli("report", "d", "--by", "kv_position", "--by", "order", "--store", str(store))
    assert ran.code == 0, ran.err
    assert "[1024, 2048)" in ran.out and "[32, 64)" in ran.out
    ran = cli("report", "d", "--by", "kv_position", "--json", "-", "-q", "--store", str(store))
    doc = json.loads(ran.out)
    kv = [g for g in doc["groups"] if list(g["by"]) == ["kv_position"]]
    assert kv and all(isinstance(g["by"]["kv_position"], int) for g in kv)
    assert M.ROLLOUT_PROB_MEAN in kv[0]["metrics"]
    assert any("kv_position of run `d`: 42 of 210" in n for n in doc["notes"])


def test_unknown_attribute_is_an_error(dims: tuple[Path, Path]) -> None:
    _, store = dims
    ran = cli("report", "d", "--by", "attr:env", "--store", str(store))
    assert ran.code == 1
    assert "attr:env" in ran.err and "data_source, dp_rank" in ran.err and "Hint:" in ran.err


def test_compare_by_kv_position(dims: tuple[Path, Path], tmp_path: Path) -> None:
    dump, store = dims
    other = dims_dump(tmp_path / "other.parquet", seed=8)
    mismatchctl.ingest([other], run="e", store=store)
    cmp = mismatchctl.compare("d", "e", by=["kv_position"], resamples=20, store=store)
    rows = cmp.splits[(K.KV_POSITION,)]
    ref_a, ref_b = reference_tokens(dump), reference_tokens(other)
    for row in rows:
        for ref, tokens, kl in (
            (ref_a, row.a_tokens, row.a_vllm_kl),
            (ref_b, row.b_tokens, row.b_vllm_kl),
        ):
            idx = log2_bin(ref.kv) == row.value
            assert tokens == int(idx.sum())
            if tokens:
                assert _close(kl, float(k3(ref.lr[idx], ref.lt[idx]).mean()))
    doc = cmp.to_dict()["comparison"]["by"]["kv_position"]
    assert [r["kv_position"] for r in doc] == [r.value for r in rows]
    mismatchctl.open_store(store).remove("e")


def test_without_prompt_lengths_kv_position_is_the_response_position(tmp_path: Path) -> None:
    dump = dims_dump(tmp_path / "noprompt.parquet", prompts=False)
    store = tmp_path / "store"
    mismatchctl.ingest([dump], run="n", store=store)
    ref = reference_tokens(dump)  # no prompt_length column: kv = the index in the response
    rep = mismatchctl.report(["n"], by=["kv_position"], store=store)
    _check_split(rep, (K.KV_POSITION,), [log2_bin(ref.kv)], ref)
    assert any("210 of 210 sequences have no prompt length" in n for n in rep.notes)
    info = mismatchctl.open_store(store).run("n")
    assert info.sources[0].prompt_lengths == 0


def test_a_store_written_before_prompt_lengths_and_attributes(tmp_path: Path) -> None:
    """Sequence parts without prompt_length / attr.* columns and a catalog without the new
    source columns (as older versions wrote them): splits still read, kv_position falls back."""
    dump = dims_dump(tmp_path / "old.parquet")
    store = tmp_path / "store"
    mismatchctl.ingest([dump], run="old", store=store)
    st = mismatchctl.open_store(store)
    for part in st.parts("old", "sequences"):
        path = st.part_path(part)
        table = pq.read_table(path)
        keep = [c for c in table.column_names if c != S.PROMPT_LENGTH and not c.startswith("attr.")]
        pq.write_table(table.select(keep), path)
        _refresh_size(store, part, path)
    with sqlite3.connect(store / "catalog.sqlite") as con:
        con.execute("UPDATE sources SET attributes = NULL, prompt_lengths = NULL")
    ref = reference_tokens(dump)
    ref.kv = ref.kv - _prompts_per_token(dump)
    rep = mismatchctl.report(["old"], by=["kv_position", "length", "order"], store=store)
    _check_split(rep, (K.KV_POSITION,), [log2_bin(ref.kv)], ref)
    _check_split(rep, (K.LENGTH,), [log2_bin(ref.length)], ref)
    assert any("210 of 210 sequences have no prompt length" in n for n in rep.notes)
    ran = cli("runs", "show", "old", "--store", str(store))
    assert ran.code == 0, ran.err
    assert "0 of 210 sequences" in ran.out


def _prompts_per_token(dump: Path) -> np.ndarray:
    t = pq.read_table(dump).to_pydict()
    out = [
        np.full(int(np.sum(np.asarray(m) == 1)), p or 0)
        for m, p in zip(t["response_mask"], t["prompt_length"], strict=True)
    ]
    return np.concatenate(out)


def _refresh_size(store: Path, part, path: Path) -> None:
    """The catalog's record of a rewritten part (its size: `runs check` compares it)."""
    with sqlite3.connect(store / "catalog.sqlite") as con:
        cols = [r[1] for r in con.execute("PRAGMA table_info(parts)")]
        if "size" in cols:
            con.execute(
                "UPDATE parts SET size = ? WHERE path = ?", (path.stat().st_size, part.path)
            )


class _CodeCounts:
    """An engine extra (as the explain cube is one) asking for the new dimensions by ``keys``:
    tokens per (key, label) from ``PartKeys.codes``."""

    columns: tuple[str, ...] = ()
    keys = ("kv_position", "turn_position", "length", "order", "attr:data_source")

    def compute(self, table, keys) -> dict:
        out: dict = {}
        for key in self.keys:
            got = keys.codes(key)
            codes, counts = np.unique(got.codes, return_counts=True)
            for c, n in zip(codes, counts, strict=True):
                label = (key, got.labels[int(c)])
                out[label] = out.get(label, 0) + int(n)
        return out

    def merge(self, a: dict | None, b: dict) -> dict:
        if a is None:
            return b
        return {k: a.get(k, 0) + b.get(k, 0) for k in {*a, *b}}


def test_an_extra_gets_every_dimension_code(dims: tuple[Path, Path]) -> None:
    """What the cube reads: per-token codes of the new dimensions for each slice of a part,
    with no pass at all (the extras-only read)."""
    from mismatchctl.analysis.selection import select
    from mismatchctl.engines.local import run_passes
    from mismatchctl.stats.bins import LOG_EDGES

    dump, store = dims
    ref = reference_tokens(dump)
    sel = select(mismatchctl.open_store(store), ["d"], None)
    _, (counts,) = run_passes(sel.tasks, [], LOG_EDGES, sel.rows, extras=[_CodeCounts()])
    expected: dict = {}
    for key, values in (
        ("kv_position", log2_bin(ref.kv)),
        ("turn_position", log2_bin(ref.turn_pos)),
        ("length", log2_bin(ref.length)),
        ("order", ref.order // 32 * 32),
        ("attr:data_source", ref.source),
    ):
        labels, n = np.unique(values, return_counts=True)
        expected.update(
            {
                (key, v.item() if hasattr(v, "item") else v): int(c)
                for v, c in zip(labels, n, strict=True)
            }
        )
    assert counts == expected


class _AtStarts:
    """An extra comparing each sequence-constant key's labels at every sequence's first row,
    from ``PartKeys.at`` (the rows taken first) and from the slice's per-token codes."""

    columns: tuple[str, ...] = (S.GPU,)
    keys = ("step", "gpu", "length", "order", "attr:data_source", "attr:dp_rank", "tag:x")

    def compute(self, table, keys) -> list:
        seq = keys.column(S.SEQ)
        starts = np.flatnonzero(np.r_[True, seq[1:] != seq[:-1]])
        taken = keys.at(starts)
        out = []
        for key in ("run", *self.keys):
            whole, at = keys.get(key), taken.get(key)
            per_token = [whole.labels[c] for c in np.broadcast_to(whole.codes, (keys.n,))[starts]]
            assert [at.labels[c] for c in np.broadcast_to(at.codes, (taken.n,))] == per_token, key
            out += per_token
        return out

    def merge(self, a: list, b: list) -> list:
        return a + b


def test_keys_at_the_sequence_starts_equal_the_per_token_keys(dims: tuple[Path, Path]) -> None:
    from mismatchctl.analysis.selection import select
    from mismatchctl.engines.local import run_passes
    from mismatchctl.stats.bins import LOG_EDGES

    _, store = dims
    sel = select(mismatchctl.open_store(store), ["d"], None)
    _, (labels,) = run_passes(sel.tasks, [], LOG_EDGES, sel.rows, extras=[_AtStarts()])
    assert len(labels) == 8 * 210  # every sequence's labels, each key compared in its slice


class _CubeTokenCodes:
    """An extra comparing the explain cube's compiled token codes with the keys' codes (turn,
    turn kind, bin) and the cube's position bins computed in numpy."""

    columns: tuple[str, ...] = (S.POSITION,)
    keys = ("kv_position",)

    def compute(self, table, keys) -> int:
        from mismatchctl.analysis import explain
        from mismatchctl.engines.keys import turn_positions
        from mismatchctl.stats.positions import assign_positions

        seq = keys.column(S.SEQ)
        starts = np.flatnonzero(np.r_[True, seq[1:] != seq[:-1]])
        got = explain._Coder.token_codes(keys, seq, starts)
        kv = keys.column(S.POSITION).astype(np.int64) + keys.prompt_lengths()
        want = np.column_stack([
            keys.get(K.TURN).codes, keys.get(K.TURN_KIND).codes, keys.get(K.BIN).codes,
            assign_positions(kv, explain.CUBE_KV_EDGES),
            assign_positions(turn_positions(seq, keys.column(S.TURN)), explain.CUBE_TURN_POSITION_EDGES),
        ])  # fmt: skip
        np.testing.assert_array_equal(got, want)
        return len(seq)

    def merge(self, a: int, b: int) -> int:
        return a + b


def test_the_cube_token_codes_equal_the_keys(dims: tuple[Path, Path]) -> None:
    """The compiled codes of the cube's token dimensions (one pass) are the keys' codes and the
    cube's own position bins, token by token, with and without prompt lengths; a negative turn
    is refused."""
    from mismatchctl.analysis.explain import _Coder
    from mismatchctl.analysis.selection import select
    from mismatchctl.engines.keys import PartKeys
    from mismatchctl.engines.local import run_passes
    from mismatchctl.stats.bins import LOG_EDGES

    dump, store = dims
    sel = select(mismatchctl.open_store(store), ["d"], None)
    _, (tokens,) = run_passes(sel.tasks, [], LOG_EDGES, sel.rows, extras=[_CubeTokenCodes()])
    assert tokens == len(reference_tokens(dump).lr)
    table = pq.read_table(next(iter(sorted((store / "tokens").rglob("*.parquet")))))
    bad = table.set_column(
        table.schema.get_field_index(S.TURN), S.TURN, pa.array([-1] * table.num_rows, pa.int32())
    )
    keys = PartKeys(bad, "d", {}, LOG_EDGES)
    with pytest.raises(ValueError, match="turn indices must be >= 0"):
        _Coder.token_codes(keys, keys.column(S.SEQ), np.array([0]))


def test_html_shows_the_new_splits(dims: tuple[Path, Path], tmp_path: Path) -> None:
    _, store = dims
    page = tmp_path / "r.html"
    args = ["report", "d", "--by", "kv_position", "--by", "attr:data_source", "--by", "order"]
    ran = cli(*args, "--html", str(page), "-q", "--store", str(store))
    assert ran.code == 0, ran.err
    html = page.read_text()
    assert "By kv_position" in html and "By attr:data_source" in html and "By order" in html
    assert "[1024, 2048)" in html and "gsm8k" in html and "[32, 64)" in html
    assert "42 of 210 sequences have no prompt length" in html


def test_gpu_codes_from_the_dictionary_indices_equal_arrows_encoding() -> None:
    """The gpu codes come from the dictionary indices in numpy: for chunks with different
    dictionaries (an unused entry, a value first met in a later chunk), nulls, and rows taken
    first, the labels of every row are Arrow's own (unified dictionaries, ``take``), and the
    labels are in Arrow's order; a gpu column of plain strings is encoded by Arrow."""
    from mismatchctl.engines.keys import PartKeys
    from mismatchctl.stats.bins import LOG_EDGES

    def dictionary(indices: list[int | None], names: list[str]) -> pa.Array:
        return pa.DictionaryArray.from_arrays(pa.array(indices, pa.int32()), pa.array(names))

    chunks = [
        dictionary([1, 0, None, 1], ["A100", "H20", "B200"]),
        dictionary([0, None, 1], ["L20", "H20"]),
    ]
    plain = pa.chunked_array([pa.array(["H20", None, "L20"]), pa.array(["A100", "H20"])])
    for column in (pa.chunked_array(chunks), plain):
        n = len(column)
        table = pa.table({S.GPU: column, S.SEQ: pa.array(range(n), pa.int64())})
        keys = PartKeys(table, "r", {}, LOG_EDGES)
        rows = column.to_pylist()
        for taken in (None, np.array([4, 0, 2, 1, 4])):
            part = keys if taken is None else keys.at(taken)
            got = part.get(K.GPU)
            want = rows if taken is None else [rows[i] for i in taken]
            assert [got.labels[c] for c in got.codes] == want
            assert got.labels[-1] is None and got.codes.dtype == np.int64
        if column is not plain:
            unified = column.unify_dictionaries().chunk(0).dictionary.to_pylist()
            assert keys.get(K.GPU).labels == [*unified, None]
            assert keys.get(K.GPU).labels == ["A100", "H20", "B200", "L20", None]


def test_step_codes_of_one_step_and_of_several_are_uniques() -> None:
    """A slice's step codes: ``np.unique``'s labels and inverse, with one step (no sort) or
    several; and each row's K3 for the cubes, once, as their own loop computes it."""
    from mismatchctl.engines.keys import PartKeys
    from mismatchctl.stats import parse_bins
    from mismatchctl.stats.cube import kernels as cube_kernels

    rng = np.random.default_rng(4)
    lr = -rng.exponential(1.0, 9)
    for steps in ([7] * 9, [9, 9, 3, 3, 3, 12, 12, 9, 9]):
        table = pa.table({S.STEP: np.array(steps, np.int64), S.ROLLOUT: lr, S.TRAINER: lr * 1.1})
        keys = PartKeys(table, "r", {}, parse_bins("log"))
        got = keys.get(K.STEP)
        values, inverse = np.unique(steps, return_inverse=True)
        assert got.labels == values.tolist() and got.codes.tolist() == inverse.tolist()
        want = np.empty(9)
        cube_kernels.token_k3(lr, lr * 1.1, want)
        assert keys.cube_k3() is keys.cube_k3()
        assert np.array_equal(keys.cube_k3(), want)


def test_each_sides_probability_once_per_slice_and_the_bins_of_it() -> None:
    """``PartKeys.probability``: the ``exp`` of the column the turn runs' cells take
    (``kernels.exps``), computed once per slice (the bin key's and the cube's token codes share
    it); the bins of either side are of its own."""
    from mismatchctl.engines.keys import PartKeys
    from mismatchctl.stats import assign_bins, kernels, parse_bins

    rng = np.random.default_rng(5)
    lr = -rng.exponential(1.0, 50)
    lt = lr - rng.exponential(0.5, 50)
    edges = parse_bins("log")
    table = pa.table({S.ROLLOUT: lr, S.TRAINER: lt})
    keys = PartKeys(table, "r", {}, edges)
    assert keys.probability(S.ROLLOUT) is keys.probability(S.ROLLOUT)
    np.testing.assert_array_equal(keys.probability(S.TRAINER), kernels.exps(lt))
    np.testing.assert_allclose(keys.probability(S.TRAINER), np.exp(lt), rtol=3e-16)
    assert keys.get(K.BIN).codes.tolist() == assign_bins(kernels.exps(lr), edges).tolist()
    trainer = keys.get(K.TRAINER_PROB).codes
    assert trainer.tolist() == assign_bins(kernels.exps(lt), edges).tolist()
    assert trainer.tolist() != keys.get(K.BIN).codes.tolist()


def test_keys_along_turn_runs_coded_per_run_are_the_tokens_codes() -> None:
    """``token_group_codes`` with the engine's turn runs (``PartKeys.by_run``): the codes, sizes
    and labels of ``group_codes`` over every token, for the what-if's cells (step x gpu, step
    x turn kind) and the gpus alone; the what-if's states the same bits either way."""
    from mismatchctl.analysis.diagnose.build import SUGGESTED
    from mismatchctl.analysis.whatif.whatif import WhatifExtra
    from mismatchctl.engines.keys import PartKeys, RunKeys, group_codes, token_group_codes
    from mismatchctl.stats import parse_bins
    from mismatchctl.stats.turnruns import run_starts

    rng = np.random.default_rng(6)
    seq = np.repeat(np.arange(40), rng.integers(1, 30, 40))
    n = len(seq)
    turn = ((rng.random(n) < 0.2).cumsum() + seq) % 3  # runs of one turn within a sequence
    gpus = np.array(["H20", "A100", None, "B200"], object)[seq % 4]
    lr = -rng.exponential(1.0, n)
    table = pa.table(
        {
            S.STEP: 10 + seq // 7,
            S.SEQ: seq,
            S.TURN: turn.astype(np.int32),
            S.ROLLOUT: lr,
            S.TRAINER: lr + 0.01 * rng.standard_normal(n),
            S.GPU: pa.array(gpus.tolist()).dictionary_encode(),
        }
    )

    def keys(with_runs: bool) -> PartKeys:
        out = PartKeys(table, "r", {}, parse_bins("log"))
        if with_runs:
            starts = run_starts(seq, turn)
            out.by_run = RunKeys(out.at(starts), np.diff(np.r_[starts, n]))
        return out

    runs, tokens = keys(True), keys(False)
    for split in ((K.STEP, K.GPU), (K.STEP, K.TURN_KIND), (K.GPU,)):
        got, want = token_group_codes(runs, split), group_codes(tokens, split)
        assert got[0].tolist() == want[0].tolist() and got[1:] == want[1:]
    extra = WhatifExtra([SUGGESTED])
    got, want = extra.compute(table, keys(True)), extra.compute(table, tokens)
    assert list(got) == list(want) and len(got) > 10
    for key, state in want.items():
        np.testing.assert_array_equal(got[key], state)


def test_batch_sizes_per_turn_run_repeated_are_each_tokens() -> None:
    """diagnose's batch size of every token (``extra._batch_sizes``): looked up per turn run
    and repeated, each token's own sequence's size (``UNKNOWN`` where none is known), as
    without the engine's turn runs."""
    from mismatchctl.analysis.diagnose.extra import _batch_sizes
    from mismatchctl.engines.keys import PartKeys, RunKeys
    from mismatchctl.engines.seqrows import SequenceRows
    from mismatchctl.stats import parse_bins
    from mismatchctl.stats.seq_sums import UNKNOWN
    from mismatchctl.stats.turnruns import run_starts

    rng = np.random.default_rng(7)
    ids = np.arange(100, 140)
    sizes = np.where(rng.random(40) < 0.2, UNKNOWN, rng.choice([8, 16, 64], 40))
    rows = SequenceRows("r", ids, np.ones(40, np.int64), np.zeros(40, np.int64), ids * 0)
    rows.batch_size = sizes
    seq = np.repeat(ids[::2], rng.integers(1, 20, 20))  # every other sequence has tokens
    turn = ((rng.random(len(seq)) < 0.3).cumsum() + seq) % 2
    lr = -rng.exponential(1.0, len(seq))
    table = pa.table({S.SEQ: seq, S.TURN: turn.astype(np.int32), S.ROLLOUT: lr, S.TRAINER: lr})
    plain = PartKeys(table, "r", {}, parse_bins("log"), sequences=rows)
    keys = PartKeys(table, "r", {}, parse_bins("log"), sequences=rows)
    starts = run_starts(seq, turn)
    keys.by_run = RunKeys(keys.at(starts), np.diff(np.r_[starts, len(seq)]))
    want = sizes[np.searchsorted(ids, seq)]
    assert _batch_sizes(keys).tolist() == _batch_sizes(plain).tolist() == want.tolist()
    assert (want == UNKNOWN).any() and len(set(want.tolist())) > 2


def test_sequence_starts_once_per_slice_and_of_the_rows_taken() -> None:
    """``PartKeys.sequence_starts``: the first row of each run of equal ``seq``, computed once
    per slice; of the rows taken (``at``) their own; none of an empty slice."""
    from mismatchctl.engines.keys import PartKeys
    from mismatchctl.stats import parse_bins

    seq = np.array([4, 4, 4, 9, 9, 11, 4, 4])  # a sequence id met again later is a new run
    table = pa.table({S.SEQ: seq})
    keys = PartKeys(table, "r", {}, parse_bins("log"))
    assert keys.sequence_starts().tolist() == [0, 3, 5, 6]
    assert keys.sequence_starts() is keys.sequence_starts()
    assert keys.at(np.array([0, 1, 3, 6])).sequence_starts().tolist() == [0, 2, 3]
    empty = PartKeys(table.slice(0, 0), "r", {}, parse_bins("log"))
    assert empty.sequence_starts().tolist() == [] and empty.sequence_starts().dtype == np.int64
