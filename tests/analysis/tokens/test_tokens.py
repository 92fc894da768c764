"""`mismatchctl tokens`: the listings against a full numpy sort of every token (ties included),
the listed values against the dump's own arrays, merged parts and small slices equal to one sort,
the cell filters, the outputs and the errors."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import mismatchctl
from mismatchctl import api
from mismatchctl.engines import local as local_engine
from mismatchctl.errors import UsageError
from mismatchctl.stats.bins import LOG_EDGES
from tests.analysis.tokens.tokens_data import tokens_dump
from tests.helpers import cli


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tokens")
    files = [tokens_dump(root / f"d{i}.parquet", seed=i) for i in range(3)]
    mismatchctl.ingest(files, run="a", store=root / "store")
    mismatchctl.ingest([tokens_dump(root / "e.parquet", seed=9)], run="b", store=root / "store")
    assert len(mismatchctl.open_store(root / "store").parts("a")) == 3
    return root / "store"


def _dump(store: Path) -> dict[str, dict]:
    """Every response of the dumps by sample id, straight from the files (not the store)."""
    out = {}
    for path in store.parent.glob("*.parquet"):
        for row in pq.read_table(path).to_pylist():
            out[row["uid"]] = row
    return out


def _rows(store: Path, runs: tuple[str, ...] = ("a", "b")) -> dict[str, np.ndarray]:
    """Every token row of the runs, read from the part files with pyarrow, as numpy columns."""
    tables = []
    for run in runs:
        for part in mismatchctl.open_store(store).parts(run):
            t = pq.read_table(store / part.path)
            tables.append(t.append_column("run", pa.array([run] * t.num_rows)))
    t = pa.concat_tables(tables)
    cols = {c: t.column(c).to_numpy() for c in t.column_names if c not in ("sample_id", "gpu")}
    cols["sample_id"] = np.array(t.column("sample_id").to_pylist())
    cols["gpu"] = np.array(t.column("gpu").to_pylist())
    cols["run"] = np.array(t.column("run").to_pylist())
    return cols


def _score(c: dict[str, np.ndarray], sort: str) -> np.ndarray:
    r = c["trainer_logprob"] - c["rollout_logprob"]
    if sort == "k3":  # expm1 as the metric's definition computes it (exact ties, as the tool's)
        return np.expm1(r) - r
    if sort == "abs-r":
        return np.abs(r)
    return np.abs(np.exp(c["trainer_logprob"]) - np.exp(c["rollout_logprob"]))


def _full_sort(c: dict[str, np.ndarray], score: np.ndarray, keep: np.ndarray) -> list[tuple]:
    """(run, step, seq, position) of every kept token, by one lexsort: score descending, then
    run, step, seq, position ascending."""
    idx = np.flatnonzero(keep)
    run_code = np.unique(c["run"], return_inverse=True)[1]
    order = np.lexsort(
        (c["position"][idx], c["seq"][idx], c["step"][idx], run_code[idx], -score[idx])
    )
    return [(str(c["run"][i]), int(c["step"][i]), int(c["seq"][i]), int(c["position"][i]))
            for i in idx[order]]  # fmt: skip


def _listed(t: api.Tokens) -> list[tuple]:
    return [(r["run"], r["step"], r["seq"], r["position"]) for r in t.rows]


@pytest.mark.parametrize("sort", ["k3", "abs-r", "prob-diff"])
def test_top_tokens_equal_a_full_sort(store: Path, sort: str) -> None:
    c = _rows(store)
    score = _score(c, sort)
    everything = np.ones(len(score), bool)
    expected = _full_sort(c, score, everything)
    ties = len(expected) - len(np.unique(score))
    assert ties > 1000  # the fixture's tokens tie a lot: the tie order decides most places
    for top in (1, 7, 60, len(expected)):
        t = api.tokens("a", store=store, top=top, sort=sort)
        got = _listed(t)
        assert got == _full_sort(c, score, c["run"] == "a")[:top]
        np.testing.assert_allclose([r["score"] for r in t.rows],
                                   np.sort(score[c["run"] == "a"])[::-1][:top], rtol=1e-12)  # fmt: skip


def test_every_run_and_the_cell_totals(store: Path) -> None:
    c = _rows(store)
    score = _score(c, "k3")
    t = api.tokens("gpu=A100", store=store, top=40)
    keep = c["gpu"] == "A100"
    assert _listed(t) == _full_sort(c, score, keep)[:40]
    assert {r["run"] for r in t.rows} == {"a", "b"}
    assert t.cell_tokens == keep.sum()
    assert t.cell_k3_sum == pytest.approx(score[keep].sum(), rel=1e-12)


def _bin(c: dict[str, np.ndarray], lo: float, hi: float) -> np.ndarray:
    p = np.exp(c["rollout_logprob"])
    return (p >= lo) & (p < hi)


@pytest.mark.parametrize(
    ("where", "keep"),
    [
        (["turn_kind=later"], lambda c: c["turn"] >= 1),
        (["turn=0"], lambda c: c["turn"] == 0),
        (["bin=0.001-0.01"], lambda c: _bin(c, 1e-3, 1e-2)),
        (["bin=[0.1, 0.5)", "turn_kind=first"], lambda c: _bin(c, 0.1, 0.5) & (c["turn"] == 0)),
        (["step=2", "gpu=H20"], lambda c: (c["step"] == 2) & (c["gpu"] == "H20")),
    ],
)
def test_where_restricts_to_the_cell(
    store: Path, where: list[str], keep: Callable[[dict], np.ndarray]
) -> None:
    c = _rows(store, ("a",))
    mask = keep(c)
    score = _score(c, "k3")
    t = api.tokens("a", store=store, top=30, where=where)
    assert _listed(t) == _full_sort(c, score, mask)[:30]
    assert t.cell_tokens == mask.sum() > 0
    assert t.cell_k3_sum == pytest.approx(score[mask].sum(), rel=1e-12)


def test_kv_position_cell_and_values_against_the_dump(store: Path) -> None:
    """Every listed value from the dump's arrays: logprobs, token id, turn, KV position
    (prompt length + position; null without one) and the context's model tokens."""
    dump = _dump(store)
    t = api.tokens("a", store=store, top=200, where=["kv_position=[256, 512)"], context=3)
    assert t.rows
    for r in t.rows:
        row = dump[r["sample_id"]]
        p = r["position"]
        mask = np.array(row["response_mask"], bool)
        assert mask[p]
        assert r["rollout_logprob"] == row["rollout_log_probs"][p]
        assert r["trainer_logprob"] == row["old_log_probs"][p]
        assert r["token_id"] == row["responses"][p]
        assert r["p_trainer"] == pytest.approx(np.exp(row["old_log_probs"][p]), rel=1e-15)
        assert r["kv_position"] == row["prompt_length"] + p
        assert 256 <= r["kv_position"] < 512
        assert r["turn"] == int((np.diff(mask[: p + 1].astype(int)) == 1).sum())
        model = np.flatnonzero(mask)
        k = int(np.searchsorted(model, p))
        assert r["before"]["positions"] == model[max(0, k - 3) : k].tolist()
        assert r["after"]["positions"] == model[k + 1 : k + 4].tolist()
        ids = np.array(row["responses"])
        assert r["before"]["ids"] == ids[model[max(0, k - 3) : k]].tolist()
        assert r["after"]["ids"] == ids[model[k + 1 : k + 4]].tolist()


def test_context_text_marks_the_masked_gap(store: Path) -> None:
    dump = _dump(store)
    t = api.tokens("a", store=store, top=2000, where=["turn_kind=later"], context=4)
    gapped = [r for r in t.rows if r["before"]["positions"] and
              r["before"]["positions"][0] < r["position"] - len(r["before"]["positions"])]  # fmt: skip
    assert gapped
    for r in gapped:
        mask = np.array(dump[r["sample_id"]]["response_mask"], bool)
        tool = int((~mask[r["before"]["positions"][0] : r["position"]]).sum())
        assert f"|{tool} masked|" in r["context"]
        assert f"[{r['token_id']}]" in r["context"]


def _sequences(c: dict[str, np.ndarray], keep: np.ndarray) -> dict[tuple, dict[str, float]]:
    """Per sequence, over its kept tokens in position order: sums as ``np.add.reduceat`` rounds
    them (the tool's documented float64 sums: bit-equal sums are the ties), checked against the
    exactly rounded ``math.fsum``; max |r| and its first place."""
    out: dict[tuple, dict[str, float]] = {}
    r = c["trainer_logprob"] - c["rollout_logprob"]
    keys = np.array([f"{a}|{b}" for a, b in zip(c["run"], c["seq"], strict=True)])
    for key in np.unique(keys[keep]):
        idx = np.flatnonzero(keep & (keys == key))
        idx = idx[np.argsort(c["position"][idx], kind="stable")]
        rs = r[idx]
        at = int(np.argmax(np.abs(rs)))
        k3 = np.expm1(rs) - rs
        assert np.add.reduceat(k3, [0])[0] == pytest.approx(math.fsum(k3), rel=1e-13)
        out[(str(c["run"][idx[0]]), int(c["step"][idx[0]]), int(c["seq"][idx[0]]))] = {
            "k3": float(np.add.reduceat(k3, [0])[0]), "r": float(np.add.reduceat(rs, [0])[0]),
            "n": len(idx),
            "max": float(abs(rs[at])), "at": int(c["position"][idx[at]]),
        }  # fmt: skip
    return out


@pytest.mark.parametrize("sort", ["k3", "chi2", "abs-sum-r"])
@pytest.mark.parametrize("where", [[], ["turn_kind=later"]])
def test_top_sequences_equal_a_full_sort(store: Path, sort: str, where: list[str]) -> None:
    c = _rows(store, ("a",))
    keep = c["turn"] >= 1 if where else np.ones(len(c["seq"]), bool)
    sums = _sequences(c, keep)

    def score(d: dict[str, float]) -> float:
        if sort == "k3":
            return d["k3"]
        if sort == "chi2":
            return float(np.expm1(2 * np.clip(d["r"], -20, 20)))
        return abs(d["r"])

    # equal float64 sums are ties, broken by (run, step, seq)
    expected = sorted(sums, key=lambda k: (-score(sums[k]), k))
    t = api.tokens("a", store=store, top=25, sequences=True, sort=sort, where=where)
    got = [(r["run"], r["step"], r["seq"]) for r in t.rows]
    assert got == expected[:25]
    assert t.cell_sequences == len(sums)
    for r in t.rows:
        d = sums[(r["run"], r["step"], r["seq"])]
        assert r["k3_sum"] == pytest.approx(d["k3"], rel=1e-12)
        assert r["log_ratio_sum"] == pytest.approx(d["r"], rel=1e-12, abs=1e-15)
        assert r["tokens"] == d["n"]
        assert r["abs_log_ratio_max"] == pytest.approx(d["max"], rel=1e-15)
        assert r["worst_position"] == d["at"]


def _small_slices(
    pf: pq.ParquetFile, columns: list[str], threads: bool = False
) -> Iterator[pa.Table]:
    """A part read in slices of whole sequences of about 100 tokens (many slices per part)."""
    batches = pf.iter_batches(batch_size=100, columns=columns, use_threads=threads)
    yield from local_engine.sequence_slices(batches)


@pytest.mark.parametrize("sequences", [False, True])
def test_streamed_and_merged_equal_one_read(
    store: Path, sequences: bool, monkeypatch: pytest.MonkeyPatch, no_part_cache: None
) -> None:
    """Many slices per part and four workers give the same listing as whole parts read one by
    one (the state after a merge is a function of the rows, not of their order)."""
    args = {"top": 50, "sequences": sequences, "where": ["turn_kind=later"]}
    whole = api.tokens("a", store=store, workers=1, **args)
    monkeypatch.setattr(local_engine, "part_slices", _small_slices)
    sliced = api.tokens("a", store=store, workers=4, **args)
    assert sliced.rows == whole.rows
    assert sliced.cell_tokens == whole.cell_tokens
    assert sliced.cell_k3_sum == pytest.approx(whole.cell_k3_sum, rel=1e-12)


def test_top_rows_merge_in_any_order_equals_one_sort() -> None:
    from mismatchctl.stats.topk import TopRows, top_indices

    rng = np.random.default_rng(3)
    score = rng.choice([0.0, 1.0, 2.0, np.inf], 5000)
    seq, pos = np.repeat(np.arange(500), 10), np.tile(np.arange(10), 500)
    full = np.lexsort((pos, seq, -score))[:37]
    assert np.array_equal(top_indices(score, (seq, pos), 37), full)
    parts = []
    for lo in range(0, 5000, 700):
        idx = lo + top_indices(score[lo : lo + 700], (seq[lo : lo + 700], pos[lo : lo + 700]), 37)
        parts.append(TopRows(37, score[idx].tolist(), [("a", int(s), int(p)) for s, p in
                                                       zip(seq[idx], pos[idx], strict=True)],
                             [{"i": int(i)} for i in idx], len(idx), len(idx), 0.0))  # fmt: skip
    for order in (range(len(parts)), reversed(range(len(parts))), rng.permutation(len(parts))):
        total = TopRows(37)
        for i in order:
            total = total.merge(parts[i])
        assert [r["i"] for r in total.rows] == full.tolist()


def test_cli_terminal_and_json(store: Path) -> None:
    ran = cli("tokens", "a", "--store", str(store), "--top", "5", "-q", "--where", "turn=1")
    assert ran.code == 0, ran.err
    assert "Top 5 tokens" in ran.out and "turn=1" in ran.out and "token in context" in ran.out
    ran = cli("tokens", "a", "--store", str(store), "--top", "3", "--json", "-", "-q")
    doc = json.loads(ran.out)["tokens"]
    assert doc["listing"] == "tokens" and len(doc["tokens"]) == 3
    direct = api.tokens("a", store=store, top=3)
    assert [r["position"] for r in doc["tokens"]] == [r["position"] for r in direct.rows]
    ran = cli("tokens", "a", "--sequences", "--sort", "chi2", "--store", str(store), "-q")
    assert ran.code == 0 and "Top 20 sequences" in ran.out


def test_to_polars(store: Path) -> None:
    t = api.tokens("a", store=store, top=4, context=2)
    df = t.to_polars()
    assert df.height == 4
    assert df["position"].to_list() == [r["position"] for r in t.rows]
    assert df["after_ids"].to_list()[0] == t.rows[0]["after"]["ids"]
    s = api.tokens("a", store=store, top=4, sequences=True).to_polars()
    assert s.columns[:4] == ["run", "step", "seq", "sample_id"] and s.height == 4


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"sort": "chi2"}, "--sort chi2: not an order of tokens"),
        ({"sort": "abs-r", "sequences": True}, "--sort abs-r: not an order of sequences"),
        ({"where": ["colour=red"]}, "unknown key `colour`"),
        ({"where": ["turn_kind"]}, "is not KEY=VALUE"),
        ({"where": ["bin=0.002-0.01"]}, "no bin has that value"),
        ({"where": ["step=x"]}, "a step is an integer"),
        ({"where": ["gpu=B200"]}, "no token of `a` is in the cell --where gpu=B200"),
        ({"top": 0}, "--top 0: out of range"),
        ({"context": -1}, "--context -1: out of range"),
    ],
)
def test_errors(store: Path, args: dict, message: str) -> None:
    with pytest.raises(UsageError) as info:
        api.tokens("a", store=store, **args)
    assert message in info.value.message
    assert info.value.hint


def test_usage_error_exit_code(store: Path) -> None:
    ran = cli("tokens", "a", "--store", str(store), "--where", "bin=0.002-0.01", "-q")
    assert ran.code == 1 and "Hint:" in ran.err and "[0.001, 0.01)" in ran.err
    assert LOG_EDGES[0] == 0.0


def _note(t: api.Tokens) -> str:
    return next(s for s in api.sections(t) if s.id in ("tokens", "sequences")).note


def test_an_unknown_kv_position_is_said_once_under_the_table(store: Path) -> None:
    """`kv pos` is `-` for a sequence without a prompt length (every fifth here): the note says
    why, once; a listing whose every token has one does not."""
    from mismatchctl.analysis.tokens.view import NO_KV

    t = api.tokens("a", store=store, top=300)
    assert any(r["kv_position"] is None for r in t.rows)
    assert any(r["kv_position"] is not None for r in t.rows)
    assert _note(t).count(NO_KV) == 1
    known = api.tokens("a", store=store, top=300, where=["kv_position=[256, 512)"])
    assert known.rows and NO_KV not in _note(known)
    ran = cli("tokens", "a", "--store", str(store), "--top", "300", "-q")
    assert "kv pos -: the dump gave no prompt length" in " ".join(ran.out.split())


def test_chi2_at_its_floor_is_explained(tmp_path: Path) -> None:
    """chi2 = exp(2 sum r) - 1 is -1 (to 4 digits) for a sequence the rollout side finds far
    more likely: the note says it is the floor, not a missing value, only when a row shows it."""
    from mismatchctl.analysis.tokens.view import CHI2, CHI2_FLOOR

    lr = [[-0.5] * 20, [-0.5] * 20, [-1.0] * 10]
    lt = [[-0.9] * 20, [-0.45] * 20, [-1.02] * 10]  # sum r: -8, +1, -0.2
    path = tmp_path / "step_1.parquet"
    pq.write_table(pa.table({"uid": ["far", "up", "near"], "rollout_log_probs": lr,
                             "old_log_probs": lt}), path)  # fmt: skip
    root = tmp_path / "store"
    mismatchctl.ingest([path], run="c", store=root)
    t = api.tokens("c", store=root, sequences=True, sort="abs-sum-r")
    by_id = {r["sample_id"]: r for r in t.rows}
    assert by_id["far"]["log_ratio_sum"] == pytest.approx(-8.0)
    assert by_id["far"]["chi2"] == pytest.approx(math.expm1(-16.0))
    assert CHI2 in _note(t) and _note(t).count(CHI2_FLOOR) == 1
    near = api.tokens("c", store=root, sequences=True, where=["step=1"], top=1, sort="chi2")
    assert near.rows[0]["sample_id"] == "up"
    assert CHI2 in _note(near) and CHI2_FLOOR not in _note(near)
    ran = cli("tokens", "c", "--sequences", "--store", str(root), "-q")
    assert "chi2 -1 is its floor, not a missing value" in " ".join(ran.out.split())
