"""`explain`'s MoE routing dimensions: `routing` (flipped / same / unpaired, by the producing
position) and `first_flip_layer`, against the per-token reference; planted excesses on flipped
tokens (and on tokens first flipped at one layer) localized there; runs without routes keep
their cube; the bootstrap pass reads them too, and Ray gives the same findings."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mismatchctl import api
from mismatchctl.analysis.bins import parse_edges
from mismatchctl.analysis.explain import FIRST_FLIP_LAYER, ROUTING, cube_spec, read_cubes
from mismatchctl.analysis.selection import select
from mismatchctl.engines.choice import LOCAL_ENGINE
from mismatchctl.stats.cube.cube import Field
from mismatchctl.stats.cube.spec import CubeSpec
from mismatchctl.store import open_store
from tests.routing.moe_data import Seq, draw_logprobs, sequences, token_records, write

LAYERS = 4


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`flips`: K3 10x noisier on tokens whose producing position flipped; `deep`: only on those
    first flipped at layer 2; `plain`: no routes; `mixed` one source with routes, one without."""
    root = tmp_path_factory.mktemp("explain-routing")
    store = root / "store"
    for run, hot_layer, seed in (("flips", None, 1), ("deep", 2, 2)):
        seqs = sequences(seed, 240, LAYERS, steps=(1, 2, 3, 4), flip=0.1, lengths=(20, 50))
        draw_logprobs(seqs, seed, hot=10.0, hot_layer=hot_layer)
        api.ingest([write(root / f"{run}.parquet", seqs)], run, store=store)
    seqs = sequences(3, 40, 2)
    draw_logprobs(seqs, 3)
    api.ingest([write(root / "plain.parquet", seqs, routes=False)], "plain", store=store)
    api.ingest([write(root / "m1.parquet", seqs)], "mixed", store=store)
    other = sequences(4, 30, 2)
    draw_logprobs(other, 4)
    api.ingest([write(root / "m2.parquet", other, routes=False)], "mixed", store=store)
    return store


def _spec(store: Path, *runs: str) -> CubeSpec:
    sel = select(open_store(store), list(runs))
    return cube_spec([sel], parse_edges("log"), routing=True)


def test_the_dimensions_count_tokens_by_the_producing_position(store: Path) -> None:
    """The cube's 1-d tables of routing and first_flip_layer against the reference."""
    sel = select(open_store(store), ["flips", "mixed"])
    edges = parse_edges("log")
    spec = cube_spec([sel], edges, routing=True)
    cube = read_cubes([sel], spec, edges, 1, None, LOCAL_ENGINE)[0].cube
    root = store.parent
    recs = []
    for name in ("flips", "m1"):
        recs += _records(pq.read_table(root / f"{name}.parquet"))
    tokens_without = int(cube.table([ROUTING])[3, Field.TOKENS])
    first = cube.table([FIRST_FLIP_LAYER])[:, Field.TOKENS].astype(int).tolist()
    routing = cube.table([ROUTING])[:, Field.TOKENS].astype(int).tolist()
    want_first = [sum(r["paired"] == 1 + x for r in recs) for x in range(LAYERS)]
    want_first += [sum(r["paired"] == 0 for r in recs), sum(r["paired"] < 0 for r in recs)]
    assert first == [*want_first, tokens_without]
    assert routing == [sum(want_first[:LAYERS]), *want_first[LAYERS:], tokens_without]
    assert tokens_without == _model_tokens(root / "m2.parquet") > 0
    k3 = cube.table([ROUTING])[:, Field.K3]
    flipped = [r["k3"] for r in recs if r["paired"] >= 1]
    assert k3[0] == pytest.approx(np.sum(flipped), rel=1e-9)
    # the spec holds the routing dimensions only with routes; the labels say what they are
    assert spec.dims[spec.index(ROUTING)].labels == ("flipped", "same", "unpaired", "(none)")
    assert spec.dims[spec.index(FIRST_FLIP_LAYER)].labels[-3:] == ("same", "unpaired", "(none)")


def _records(table: pa.Table) -> list[dict]:
    """Token records (the reference's producing-position comparison) of a written dump."""
    seqs = [
        Seq(row["uid"], row["step"], row["gpu"], row["prompt_length"],
            np.array(row["rollout_routed_experts"]), np.array(row["trainer_routed_experts"]),
            np.array(row["response_mask"]), np.array(row["rollout_log_probs"]),
            np.array(row["old_log_probs"]))
        for row in table.to_pylist()
    ]  # fmt: skip
    return token_records(seqs, "r", {}, parse_edges("log"))


def _model_tokens(path: Path) -> int:
    return sum(sum(m) for m in pq.read_table(path, columns=["response_mask"]).column(0).to_pylist())


def test_an_excess_on_flipped_tokens_is_localized_there(store: Path) -> None:
    ex = api.explain("flips", store=store)
    top = ex.explanation.findings[0]
    assert top.where == {"routing": "flipped"}
    assert top.excess_share > 0.5 and top.rate_ratio_ci[0] > 3
    assert ex.intervals and ex.intervals[0].rate_ratio_ci[0] > 1  # the bootstrap read them too


def test_an_excess_on_one_first_flip_layer_is_localized_there(store: Path) -> None:
    """Flipped tokens carry the excess, and among them those first flipped at layer 2: the
    findings name both (routing is a function of first_flip_layer, so they are never
    conjoined), the layer the purer, and no other layer."""
    findings = api.explain("deep", store=store, bootstrap=False).explanation.findings
    where = [f.where for f in findings]
    assert {"first_flip_layer": "2"} in where
    layer = findings[where.index({"first_flip_layer": "2"})]
    assert layer.rate_ratio_ci[0] > 10 and layer.excess_share > 0.5
    if {"routing": "flipped"} in where:
        assert layer.rate_ratio > findings[where.index({"routing": "flipped"})].rate_ratio
    others = [w for w in where if "first_flip_layer" in w and w != {"first_flip_layer": "2"}]
    assert not others


def test_runs_without_routes_keep_their_cube(store: Path) -> None:
    plain = _spec(store, "plain")
    sel = select(open_store(store), ["plain"])
    assert plain == cube_spec([sel], parse_edges("log"))  # no routing dimension
    assert ROUTING not in [d.name for d in plain.dims]
    assert FIRST_FLIP_LAYER in [d.name for d in _spec(store, "flips").dims]
    # against a baseline without routes there is nothing to compare them with
    sides = [select(open_store(store), [run]) for run in ("flips", "plain")]
    assert cube_spec(sides, parse_edges("log"), routing=True) == cube_spec(
        sides, parse_edges("log")
    )
    both = [select(open_store(store), [run]) for run in ("flips", "deep")]
    assert ROUTING in [d.name for d in cube_spec(both, parse_edges("log"), routing=True).dims]


@pytest.mark.slow
def test_ray_finds_the_same(store: Path, no_part_cache: None) -> None:
    local = api.explain("flips", store=store, bootstrap=False).to_dict()
    ray = api.explain("flips", store=store, bootstrap=False, engine="ray", workers=2).to_dict()
    assert ray == local
