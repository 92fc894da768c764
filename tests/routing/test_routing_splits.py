"""The routing metrics under the report's `--by` splits (step, turn kind, KV position, gpu, tag,
probability bin, and combinations): every group against the per-token numpy reference, across
runs of different layer counts, merged == one-shot, and the same numbers with the Ray engine."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from mismatchctl import api
from mismatchctl.analysis.bins import parse_edges
from mismatchctl.analysis.report.report import Report
from tests.routing.moe_data import close, draw_logprobs, reference, sequences, token_records, write

EDGES = parse_edges("log")  # the report's default probability bins
SPLITS = ["step", "turn_kind", "kv_position", "gpu", "tag:engine", "bin", "step,turn_kind"]


def _groups(rep: Report, split: tuple[str, ...]) -> dict[tuple, dict[str, Any]]:
    return {tuple(g.by[k] for k in split): g.routing for g in rep.split(*split)}


def _want(records: list[dict], split: tuple[str, ...]) -> dict[tuple, dict[str, Any]]:
    by: dict[tuple, list[dict]] = defaultdict(list)
    for rec in records:
        by[tuple(rec[k] for k in split)].append(rec)
    return {key: reference(recs) for key, recs in by.items()}


def _check_splits(rep: Report, records: list[dict]) -> None:
    for value in SPLITS:
        split = tuple(value.split(","))
        got, want = _groups(rep, split), _want(records, split)
        assert got.keys() == want.keys(), split
        for key, metrics in want.items():
            close(got[key], metrics, f"{split} {key}")


@pytest.fixture(scope="module")
def two_sources(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:
    """Run `r`: two files (tags engine=a / engine=b) of 3 layers, ingested in two calls, and
    run `once`: the same files in one call."""
    root = tmp_path_factory.mktemp("splits")
    store = root / "store"
    records: list[dict] = []
    files = []
    for k, engine in enumerate(("a", "b")):
        seqs = sequences(10 + k, 14, layers=3)
        draw_logprobs(seqs, 20 + k)
        files.append(write(root / f"d{k}.parquet", seqs))
        api.ingest([files[-1]], "r", store=store, tags=[f"engine={engine}"])
        records += token_records(seqs, "r", {"engine": engine}, EDGES)
    for k, engine in enumerate(("a", "b")):
        api.ingest([files[k]], "once", store=store, tags=[f"engine={engine}"])
    return store, records


def test_every_split_against_the_reference(two_sources: tuple[Path, list[dict]]) -> None:
    store, records = two_sources
    rep = api.report(["r"], store=store, by=SPLITS)
    _check_splits(rep, records)
    # the whole run's routing is the run's own (the top-level block)
    close(rep.to_dict()["routing"]["r"]["metrics"], reference(records), "run")
    assert any(x["paired"] > 1 for x in records)  # flips whose lowest layer is not 0
    # the JSON: a `routing` block in each group of a --by split, none in the default splits
    doc = rep.to_dict()
    by_step = [g for g in doc["groups"] if set(g["by"]) == {"step"}]
    assert by_step and all("routing" in g for g in by_step)
    assert all("routing" not in g for g in doc["groups"] if set(g["by"]) == {"run", "step"})
    frame = rep.to_polars()
    assert "vllm_kl_flipped" in frame.columns


def test_split_groups_merge_to_one_shot(two_sources: tuple[Path, list[dict]]) -> None:
    store, _ = two_sources
    merged = api.report(["r"], store=store, by=SPLITS)
    once = api.report(["once"], store=store, by=SPLITS)
    for value in SPLITS:
        split = tuple(value.split(","))
        a, b = _groups(merged, split), _groups(once, split)
        assert a.keys() == b.keys()
        for key in a:
            close(a[key], b[key], f"{split} {key}")


def test_a_step_range_and_a_gpu_narrow_the_groups(two_sources: tuple[Path, list[dict]]) -> None:
    store, records = two_sources
    rep = api.report(["r"], store=store, by=["turn_kind"], steps="2..3")
    want = _want([x for x in records if x["step"] >= 2], ("turn_kind",))
    got = _groups(rep, ("turn_kind",))
    assert got.keys() == want.keys()
    for key, metrics in want.items():
        close(got[key], metrics, str(key))


def test_runs_of_different_layers_share_a_step_split(tmp_path: Path) -> None:
    """`--by step` over a 3-layer run and a 5-layer run tagged routing_replay=r3: layer
    agreement and overlap count each token's own layers; R3 violations are the replay run's."""
    store = tmp_path / "store"
    records = []
    for run, layers, seed, tags in (("a", 3, 1, []), ("b", 5, 2, ["routing_replay=r3"])):
        seqs = sequences(seed, 12, layers=layers, steps=(1, 2))
        draw_logprobs(seqs, seed)
        api.ingest([write(tmp_path / f"{run}.parquet", seqs)], run, store=store, tags=tags)
        records += token_records(seqs, run, {}, EDGES, replay=run == "b")
    rep = api.report(["a", "b"], store=store, by=["step", "run,step"])
    for split in (("step",), ("run", "step")):
        got, want = _groups(rep, split), _want(records, split)
        assert got.keys() == want.keys()
        for key, metrics in want.items():
            close(got[key], metrics, f"{split} {key}")
    assert _groups(rep, ("step",))[(1,)]["r3_violation_fraction"] is not None
    assert _groups(rep, ("run", "step"))[("a", 1)]["r3_violation_fraction"] is None
    ids = [s.id for s in api.sections(rep) if s.id.startswith("routing-split")]
    assert ids == ["routing-split-step", "routing-split-run-step"]


def test_runs_without_routes_have_no_routing_groups(tmp_path: Path) -> None:
    seqs = sequences(3, 6, layers=2)
    draw_logprobs(seqs, 3)
    api.ingest([write(tmp_path / "d.parquet", seqs, routes=False)], "plain", store=tmp_path / "s")
    rep = api.report(["plain"], store=tmp_path / "s", by=["step"])
    assert "routing" not in rep.to_dict()
    assert all("routing" not in g for g in rep.to_dict()["groups"])


@pytest.mark.slow
def test_ray_gives_the_same_groups(
    two_sources: tuple[Path, list[dict]], no_part_cache: None
) -> None:
    store, _ = two_sources
    local = api.report(["r"], store=store, by=SPLITS).to_dict()
    ray = api.report(["r"], store=store, by=SPLITS, engine="ray", workers=2).to_dict()
    assert [g.get("routing") for g in ray["groups"]] == [g.get("routing") for g in local["groups"]]
    assert ray["routing"] == local["routing"]
