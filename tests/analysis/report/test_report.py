"""report: numbers equal the exact references, through the CLI and the Python API."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import mismatchctl
from mismatchctl.engines import local as local_engine
from mismatchctl.ingest import source as ingest_source
from mismatchctl.stats import assign_bins, reference_metrics, reference_quantiles
from mismatchctl.stats.bins import LOG_EDGES
from mismatchctl.store import parts as store_parts
from tests.helpers import FIXTURES, cli
from tests.stats.stats_helpers import GOLDEN


def close(a: float | None, b: float | None, rel: float = 1e-9) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-12)


def test_golden_vector_through_the_cli_json(store: Path) -> None:
    assert cli("ingest", str(FIXTURES / "golden.parquet"), "--run", "golden", "-q").code == 0
    ran = cli("report", "golden", "--json", "-", "-q")
    assert ran.code == 0, ran.err
    doc = json.loads(ran.out)
    whole = next(g for g in doc["groups"] if g["by"] == {})["metrics"]
    for name, value in GOLDEN.items():
        assert whole[name] == pytest.approx(value, rel=1e-5, abs=1e-6), name


def _random_dump(path: Path, seed: int = 3) -> list[dict]:
    """Multi-step, multi-turn, two gpus; returns the per-sequence truth for the references."""
    rng = np.random.default_rng(seed)
    rows, truth = [], []
    for step in range(4):
        for i in range(25):
            n = int(rng.integers(5, 60))
            mask = (rng.random(n) < 0.8).astype(np.int8)
            lr = -rng.exponential(1.5, n) * (rng.random(n) < 0.9)
            lt = np.minimum(lr + rng.normal(0, 0.05 + 0.02 * step, n), 0.0)
            gpu = "A100" if i % 2 else "H20"
            rows.append(
                dict(
                    step=step,
                    uid=f"{step}-{i}",
                    gpu=gpu,
                    rollout_log_probs=lr.tolist(),
                    old_log_probs=lt.tolist(),
                    response_mask=mask.tolist(),
                )
            )
            turn = np.cumsum(np.diff(np.concatenate([[0], mask])) == 1) - 1
            keep = mask == 1
            truth.append(dict(step=step, gpu=gpu, lr=lr[keep], lt=lt[keep], turn=turn[keep]))
    table = pa.table({k: [r[k] for r in rows] for k in rows[0]})
    pq.write_table(table, path)
    return truth


def _groups(doc: dict, *keys: str) -> dict[tuple, dict]:
    return {
        tuple(g["by"][k] for k in keys): g["metrics"]
        for g in doc["groups"]
        if set(g["by"]) == set(keys)
    }


def _assert_metrics(got: dict, want: dict) -> None:
    for name, value in want.items():
        assert close(got[name], value), (name, got[name], value)


@pytest.fixture
def random_run(store: Path, tmp_path: Path) -> list[dict]:
    truth = _random_dump(tmp_path / "dump.parquet")
    mismatchctl.ingest([tmp_path / "dump.parquet"], run="r", store=store)
    return truth


def _reference(truth: list[dict], keep: object = None) -> dict:
    """The reference of the sequences ``keep`` selects, with their turns."""
    chosen = [t for t in truth if keep is None or keep(t)]
    segs = [(t["lr"], t["lt"]) for t in chosen]
    return reference_metrics(segs, turns=[t["turn"] for t in chosen])


def test_every_group_equals_the_reference(store: Path, random_run: list[dict]) -> None:
    doc = json.loads(cli("report", "r", "--by-gpu", "--json", "-", "-q").out)
    truth = random_run
    _assert_metrics(_groups(doc)[()], _reference(truth))
    for (_, step), got in _groups(doc, "run", "step").items():
        _assert_metrics(got, _reference(truth, lambda t, s=step: t["step"] == s))
    for (gpu,), got in _groups(doc, "gpu").items():
        _assert_metrics(got, _reference(truth, lambda t, g=gpu: t["gpu"] == g))
    for (_, kind), got in _groups(doc, "run", "turn_kind").items():
        segs, turns = [], []
        for t in truth:
            sel = (t["turn"] == 0) if kind == "first" else (t["turn"] >= 1)
            if sel.any():
                segs.append((t["lr"][sel], t["lt"][sel]))
                turns.append(t["turn"][sel])
        _assert_metrics(got, reference_metrics(segs, turns=turns))


@pytest.mark.parametrize("by", [[], ["--by", "turn_kind,bin"]])
def test_bin_groups_equal_the_reference(store: Path, random_run: list[dict], by: list) -> None:
    """Also when ``run x bin`` rolls up from the one binned pass of ``run x turn_kind x bin``."""
    doc = json.loads(cli("report", "r", "--json", "-", "-q", *by).out)
    lr = np.concatenate([t["lr"] for t in random_run])
    lt = np.concatenate([t["lt"] for t in random_run])
    bins = assign_bins(np.exp(lr), LOG_EDGES)
    k3 = np.exp(lt - lr) - 1 - (lt - lr)
    for (_, b), got in _groups(doc, "run", "bin").items():
        sel = bins == b
        want = reference_metrics([(lr[sel], lt[sel])])
        for name in (
            "tokens",
            "vllm_kl",
            "kl_k1",
            "log_ratio_mean",
            "abs_log_ratio_mean",
            "prob_pearson",
        ):
            assert close(got[name], want[name]), name
        assert close(got["token_share"], sel.sum() / len(lr))
        assert close(got["kl_share"], k3[sel].sum() / k3.sum())
        exact = reference_quantiles((lt - lr)[sel])
        for q in ("log_ratio_p01", "log_ratio_p50", "log_ratio_p99"):
            # the histogram's documented resolution: within 1% of |r| (or 1e-9 absolute)
            assert abs(got[q] - exact[q]) <= 0.01 * abs(exact[q]) + 1e-9, q


def test_streamed_equals_one_shot(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_part_cache: None
) -> None:
    """Tiny parts (many partials merged, 1 or 2 workers) give the numbers of one big part."""
    _random_dump(tmp_path / "dump.parquet")
    mismatchctl.ingest([tmp_path / "dump.parquet"], run="one", store=store)
    monkeypatch.setattr(store_parts, "PART_TOKENS", 40)
    monkeypatch.setattr(ingest_source, "BATCH_TOKENS", 40)
    mismatchctl.ingest([tmp_path / "dump.parquet"], run="many", store=store)
    assert len(mismatchctl.open_store(store).parts("many")) > 20
    one = mismatchctl.report(["one"], by_gpu=True, store=store)
    monkeypatch.setattr(local_engine, "SLICE_TOKENS", 7)  # and parts folded in tiny slices
    for workers in (1, 2):
        many = mismatchctl.report(["many"], by_gpu=True, store=store, workers=workers)
        for split, groups in one.groups.items():
            other = many.groups[split]
            assert [g.by.get("step") for g in groups] == [g.by.get("step") for g in other]
            for a, b in zip(groups, other, strict=True):
                for name, value in a.metrics.items():
                    assert close(value, b.metrics[name], rel=1e-12), (split, name)


def test_steps_range_and_unknown_run(store: Path, random_run: list[dict]) -> None:
    doc = json.loads(cli("report", "r", "--steps", "1-2", "--json", "-", "-q").out)
    assert doc["runs"]["r"]["steps"] == [1, 2]
    want = _reference(random_run, lambda t: 1 <= t["step"] <= 2)
    _assert_metrics(_groups(doc)[()], want)
    bad = cli("report", "nope", "-q")
    assert bad.code == 1 and bad.err.startswith("Error: no run `nope` in the store")


def test_by_splits_and_tags(store: Path, random_run: list[dict], tmp_path: Path) -> None:
    mismatchctl.ingest([FIXTURES / "sequence.parquet"], run="s", store=store)
    doc = json.loads(
        cli(
            "report", "--by", "step,turn_kind", "--by", "tag:logprobs_mode", "--json", "-", "-q"
        ).out
    )
    tagged = _groups(doc, "tag:logprobs_mode")
    assert set(tagged) == {("processed",), (None,)}
    assert tagged[("processed",)]["tokens"] == 21
    assert (
        sum(g["tokens"] for g in _groups(doc, "step", "turn_kind").values())
        == doc["groups"][0]["metrics"]["tokens"]
    )
    bad = cli("report", "--by", "colour", "-q")
    assert bad.code == 1 and "unknown split key `colour`" in bad.err
    bad = cli("report", "--by", "step,layer", "-q")  # the routing per layer is not a group key
    assert bad.code == 1 and "a table of its own" in bad.err
    assert "Hint: give it alone: --by layer --by step." in bad.err
    bad = cli("report", "--bins", "linear:0", "-q")
    assert bad.code == 1 and bad.err.startswith("Error: --bins: ")


def test_json_is_plain_json(store: Path, random_run: list[dict], tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    ran = cli("report", "--by-gpu", "--json", str(out), "-q")
    assert ran.code == 0 and f"Wrote {out}" in ran.err
    text = out.read_text()
    assert "NaN" not in text and "Infinity" not in text
    doc = json.loads(text)
    assert doc["schema_version"] == 1 and doc["aggregation"] == "token-mean"
    assert {h["gpu"] for h in doc["hardware"]} == {"A100", "H20"}
    assert doc["excluded"]["empty_sequences"] >= 0
    assert "By hardware" in ran.out  # the terminal report still printed


def test_sequence_slices_never_split_a_sequence() -> None:
    seq = np.repeat(np.arange(10), [5, 1, 7, 3, 9, 2, 2, 8, 1, 4])
    table = pa.table({"seq": seq})
    for size in (1, 3, 6, 10, 100):
        batches = table.to_batches(max_chunksize=size)
        pieces = list(local_engine.sequence_slices(batches))
        joined = np.concatenate([p.column("seq").to_numpy() for p in pieces])
        assert (joined == seq).all()
        owners = [set(p.column("seq").to_numpy().tolist()) for p in pieces]
        assert sum(len(o) for o in owners) == 10  # no sequence in two slices
        assert all(p.num_rows < size + 9 for p in pieces)  # 9 = the longest sequence


@pytest.mark.parametrize("limit", [1, 3, 8, 9, 100])
def test_row_groups_hold_whole_sequences(tmp_path: Path, limit: int) -> None:
    """Parts are written in row groups cut at sequence starts (at most ``limit`` rows unless one
    sequence is longer); the reader then takes them as they are, and stitches older parts."""
    from mismatchctl.store.parts import whole_sequence_groups

    seq = np.repeat(np.arange(10), [5, 1, 7, 3, 9, 2, 2, 8, 1, 4])
    table = pa.table({"seq": seq, "x": np.arange(len(seq), dtype=np.float64)})
    groups = whole_sequence_groups(table, limit)
    assert np.concatenate([g.column("seq").to_numpy() for g in groups]).tolist() == seq.tolist()
    for g in groups:
        assert g.num_rows <= limit or len(set(g.column("seq").to_pylist())) == 1
    aligned, straddling = tmp_path / "aligned.parquet", tmp_path / "straddling.parquet"
    with pq.ParquetWriter(aligned, table.schema) as w:
        for g in groups:
            w.write_table(g, row_group_size=len(g))
    pq.write_table(table, straddling, row_group_size=limit)
    for path, whole in ((aligned, True), (straddling, limit >= len(seq))):
        pf = pq.ParquetFile(path)
        assert local_engine.whole_sequence_row_groups(pf.metadata) is whole
        pieces = list(local_engine.part_slices(pf, ["seq", "x"]))
        joined = np.concatenate([p.column("seq").to_numpy() for p in pieces])
        assert joined.tolist() == seq.tolist()
        assert sum(len(set(p.column("seq").to_pylist())) for p in pieces) == 10  # none split
        if whole:
            assert [p.num_rows for p in pieces] == [g.num_rows for g in groups]


def test_report_with_diagnosis(store: Path, tmp_path: Path) -> None:
    mismatchctl.ingest([FIXTURES / "sequence.parquet"], run="s", store=store)
    html_path = tmp_path / "r.html"
    ran = cli("report", "s", "--diagnose", "--json", "-", "--html", str(html_path), "-q")
    assert ran.code == 0, ran.err
    doc = json.loads(ran.out)
    assert doc["diagnosis"]["s"]["verdict"] in ("ok", "warn", "fail")
    names = {c["name"] for c in doc["diagnosis"]["s"]["checks"]}
    assert {"alignment", "offset"} <= names
    page = html_path.read_text()
    assert '<details id="diagnosis-s" class="block">' in page  # folded under the run's block
    assert page.index('id="run-s"') < page.index('id="diagnosis-s"')


def test_binned_splits_share_one_pass() -> None:
    from mismatchctl.engines.plan import BIN, RUN, TURN_KIND, pass_for, plan

    passes = plan([(RUN, BIN), (TURN_KIND, BIN), (RUN, TURN_KIND)])
    binned = [p for p in passes if p.with_hist]
    assert [p.keys for p in binned] == [(RUN, TURN_KIND, BIN)]
    assert pass_for((RUN, BIN), passes) is binned[0]
    assert pass_for((RUN, TURN_KIND), passes).keys == (RUN, TURN_KIND)


def test_api_takes_one_name_as_a_string(store: Path) -> None:
    """A single run, input, split or tag given as a string is one item, not its characters."""
    from mismatchctl import api

    dump = FIXTURES / "golden.parquet"
    result = api.ingest(str(dump), "golden", tags="gpu=H100", store=store)
    assert [f.status for f in result.files] == ["ingested"]
    one = api.report("golden", by="step", store=store)
    listed = api.report(["golden"], by=["step"], store=store)
    assert one.selection.names == ["golden"]
    assert one.to_dict() == listed.to_dict()
    assert api.runs(store)[0].tags["gpu"] == "H100"
