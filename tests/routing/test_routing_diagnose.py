"""diagnose on MoE routes: flips carrying the mismatch, and replay violations."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from mismatchctl import api
from tests.helpers import cli
from tests.routing.routes_fixture import routes

LAYERS, TOP_K = 4, 2


def _dump(
    path: Path,
    seed: int,
    replayed: bool,
    flip_noise: float,
    every: int = 10,
    extra_flips: float = 0.0,
    layers: int = LAYERS,
) -> None:
    """Sequences whose trainer logprobs move by ``flip_noise`` after a position whose routes
    differ and by 0.01 elsewhere; ``replayed``: the trainer's routes are the engine's except on a
    few positions (a capture bug); ``extra_flips``: that share of the engine's (token, layer)
    routes moved to the next experts beside bf16's own flips (a router in lower precision)."""
    rng = np.random.default_rng(seed)
    rows: dict[str, list] = {
        k: []
        for k in (
            "sample_id",
            "rollout_log_probs",
            "old_log_probs",
            "rollout_routed_experts",
            "trainer_routed_experts",
        )
    }
    for i in range(60):
        t = int(rng.integers(20, 40))
        eng, tr = routes(t, layers, 8, TOP_K, seed=seed * 1000 + i)
        if extra_flips:
            moved = rng.random((t, layers)) < extra_flips
            eng = np.where(moved[..., None], (eng + 1) % 8, eng)
        if replayed:
            tr = eng.copy()
            if every and i % every == 0:
                tr[5:8] = routes(t, layers, 8, TOP_K, seed=7 + i)[1][5:8]
        differs = (np.sort(eng, 2) != np.sort(tr, 2)).any(axis=(1, 2))
        produced_by_flip = np.r_[False, differs[:-1]]
        roll = -rng.random(t) * 0.7 - 0.05
        noise = np.where(produced_by_flip, flip_noise, 0.01) * rng.standard_normal(t)
        rows["sample_id"].append(f"{seed}-{i}")
        rows["rollout_log_probs"].append(roll.tolist())
        rows["old_log_probs"].append(np.minimum(roll + noise, 0).tolist())
        rows["rollout_routed_experts"].append(eng.tolist())
        rows["trainer_routed_experts"].append(tr.tolist())
    pq.write_table(pa.table(rows), path)


def _checks(store: Path, run: str, baseline: str | None = None) -> dict:
    return {c.name: c for c in api.diagnose(run, baseline=baseline, store=store).checks}


def test_flips_carrying_the_mismatch_and_replay_violations(tmp_path: Path) -> None:
    store = tmp_path / "s"
    # bf16's own flips (0.3% of the layer routes) carrying most of the K3: the normal state of
    # an MoE without replay, said, not an alarm
    _dump(tmp_path / "n.parquet", 1, replayed=False, flip_noise=0.5)
    api.ingest([tmp_path / "n.parquet"], "natural", store=store)
    natural = _checks(store, "natural")
    assert natural["routing_flips"].verdict == "ok"
    assert "the normal state of an MoE without replay" in natural["routing_flips"].finding
    assert natural["cause"].evidence.cause == "none"
    # another healthy run of the same model against it: as many flips, no alarm
    _dump(tmp_path / "n2.parquet", 5, replayed=False, flip_noise=0.5)
    api.ingest([tmp_path / "n2.parquet"], "natural-2", store=store)
    again = _checks(store, "natural-2", baseline="natural")
    assert again["routing_flips"].verdict == "ok"
    assert "no more flips than the baseline's" in again["routing_flips"].finding
    assert again["cause"].evidence.cause == "none"
    # a router in lower precision: 5% of the layer routes flip more. Alone, the rate is the
    # model's own as far as the run can tell: a note, no alarm
    _dump(tmp_path / "a.parquet", 1, replayed=False, flip_noise=0.5, extra_flips=0.05)
    api.ingest([tmp_path / "a.parquet"], "loud", store=store)
    alone = _checks(store, "loud")["routing_flips"]
    assert alone.verdict == "ok" and "give --baseline a healthy run" in alone.finding
    # against the natural run of the same model: many times its flips
    checks = _checks(store, "loud", baseline="natural")
    flips = checks["routing_flips"]
    assert flips.verdict in ("warn", "fail"), flips
    assert flips.evidence.runs["loud"].flip_excess > 2
    assert "routing flips carry" in flips.finding and flips.next and "replay" in flips.next
    assert "routing_replay" not in checks
    cause = checks["cause"]  # named as the cause, with replay as the remedy
    assert cause.evidence.cause == "routing" and "routing flips" in cause.finding
    assert cause.next and "rollout routing replay" in cause.next
    assert "fix the cause (routing" in checks["objective"].finding

    _dump(tmp_path / "b.parquet", 2, replayed=False, flip_noise=0.01)
    api.ingest([tmp_path / "b.parquet"], "quiet", store=store)
    quiet = _checks(store, "quiet")
    assert quiet["routing_flips"].verdict == "ok"
    assert quiet["cause"].evidence.cause != "routing"

    _dump(tmp_path / "c.parquet", 3, replayed=True, flip_noise=0.01, every=3)
    api.ingest([tmp_path / "c.parquet"], "r3", store=store, tags=["routing_replay=r3"])
    checks = _checks(store, "r3")
    replay = checks["routing_replay"]
    assert replay.verdict == "fail", replay
    assert "replay is on and" in replay.finding and "capture or alignment bug" in replay.next
    assert "routing_flips" not in checks
    # one sequence in 60 violates it on 3 positions: under 1%, a warning
    _dump(tmp_path / "d.parquet", 4, replayed=True, flip_noise=0.01, every=60)
    api.ingest([tmp_path / "d.parquet"], "r3-few", store=store, tags=["routing_replay=r3"])
    assert _checks(store, "r3-few")["routing_replay"].verdict == "warn"


def test_a_deep_healthy_moe_is_no_capture_bug(tmp_path: Path) -> None:
    """48 layers, each flipping 3% of its routes: most tokens differ on some layer (the R3
    paper's 48-layer model: 94%), and with all of them flipped the few that are not are hardly
    colder; yet their layer routes mostly agree. Neither a capture bug nor, without a baseline,
    an alarm."""
    store = tmp_path / "s"
    _dump(
        tmp_path / "deep.parquet", 6, replayed=False, flip_noise=0.02, extra_flips=0.03, layers=48
    )
    api.ingest([tmp_path / "deep.parquet"], "deep", store=store)
    checks = _checks(store, "deep")
    capture = checks["route_capture"]
    row = capture.evidence.runs["deep"]
    assert row.routing_token_agreement < 0.5 and row.flipped_same_ratio < 5  # the old rule's
    assert row.routing_layer_agreement > 0.9
    assert capture.verdict == "ok" and not row.capture
    assert checks["routing_flips"].verdict == "ok"
    assert checks["cause"].evidence.cause == "none"


def test_unrelated_routes_are_a_capture_bug_whatever_the_logprobs(tmp_path: Path) -> None:
    """The trainer's routes dumped a position late: its layer routes are another position's.
    Whether the logprobs follow them (a trainer replaying them) or not, never advise replay."""
    store = tmp_path / "s"
    for name, noise in (("dumped-late", 0.01), ("replayed-late", 0.5)):
        path = tmp_path / f"{name}.parquet"
        _dump(path, 7, replayed=False, flip_noise=noise)
        table = pq.read_table(path)
        late = [
            [[[-1] * TOP_K] * LAYERS, *r[:-1]] for r in table["trainer_routed_experts"].to_pylist()
        ]
        table = table.set_column(
            table.schema.get_field_index("trainer_routed_experts"),
            "trainer_routed_experts",
            pa.array(late),
        )
        pq.write_table(table, path)
        api.ingest([path], name, store=store)
        checks = _checks(store, name)
        capture = checks["route_capture"]
        assert capture.verdict == "fail" and capture.evidence.runs[name].capture, name
        assert capture.evidence.runs[name].routing_layer_agreement < 0.5
        assert checks["cause"].evidence.cause == "routing_capture"
        assert "do not enable or trust routing replay" in checks["cause"].next
        assert checks["routing_flips"].verdict in ("ok", "n/a")  # no token agrees: no ratio


def test_no_routing_check_without_routes(tmp_path: Path) -> None:
    path = tmp_path / "d.parquet"
    pq.write_table(
        pa.table({"rollout_log_probs": [[-0.1, -0.2]] * 30, "old_log_probs": [[-0.1, -0.21]] * 30}),
        path,
    )
    api.ingest([path], "plain", store=tmp_path / "s")
    names = set(_checks(tmp_path / "s", "plain"))
    assert not names & {"routing_flips", "routing_replay"}


def test_compare_shows_both_sides_routing(tmp_path: Path) -> None:
    store = tmp_path / "s"
    _dump(tmp_path / "a.parquet", 1, replayed=False, flip_noise=0.5)
    _dump(tmp_path / "b.parquet", 2, replayed=True, flip_noise=0.01, every=0)
    api.ingest([tmp_path / "a.parquet"], "natural", store=store)
    api.ingest([tmp_path / "b.parquet"], "replayed", store=store, tags=["routing_replay=r3"])
    cmp = api.compare("natural", "replayed", store=store, resamples=20)
    doc = cmp.to_dict()["routing"]
    a, b = doc["a"]["natural"]["metrics"], doc["b"]["replayed"]["metrics"]
    assert a == api.report(["natural"], store=store).to_dict()["routing"]["natural"]["metrics"]
    assert b["routing_token_agreement"] == 1.0 and b["r3_violation_fraction"] == 0.0
    assert a["routing_token_agreement"] < 1.0
    table = next(s for s in api.sections(cmp) if s.id == "routing")
    assert [r["run"] for r in table.rows] == ["A: natural", "B: replayed"]
    # per MoE layer and per probability bin, side by side: each side's own rows
    sides = {"a": ("natural", doc["a"]["natural"]), "b": ("replayed", doc["b"]["replayed"])}
    layers = next(s for s in api.sections(cmp) if s.id == "routing-layers-both")
    held: set[str] = set()
    for side, (run, one) in sides.items():
        want = api.report([run], store=store, by=["layer"]).to_dict()["routing"][run]
        assert one["by_layer"] == want["by_layer"]
        for row, ref in zip(layers.rows, want["by_layer"], strict=True):
            assert row["layer"] == ref["layer"]
            assert row[f"{side}_routing_layer_agreement"] == ref["routing_layer_agreement"]
            assert row[f"{side}_first_flip_share"] == ref["first_flip_share"]
        bins = next(s for s in api.sections(cmp) if s.id == "routing-bins-both")
        by_label = {r["bin"]: r for r in bins.rows}
        for ref in want["by_bin"]:
            if ref["flipped_tokens"] or ref["same_tokens"]:
                held.add(ref["bin"])
            if ref["bin"] in by_label:
                got = by_label[ref["bin"]]
                assert got[f"{side}_vllm_kl_flipped"] == ref["vllm_kl_flipped"]
                assert got[f"{side}_flipped_tokens"] == ref["flipped_tokens"]
    assert set(by_label) == held  # the bins with a paired token on either side
    assert all(r["b_routing_layer_agreement"] == 1.0 for r in layers.rows)
    assert any(r["a_routing_layer_agreement"] < 1.0 for r in layers.rows)
    ran = cli("compare", "natural", "replayed", "--store", str(store), "--resamples", "20")
    assert "Routing by MoE layer, both sides" in ran.out
    assert "Routing by inference probability, both sides" in ran.out


def test_compare_shows_both_sides_routing_per_split(tmp_path: Path) -> None:
    """`compare --by step`: each step's routing of side A and side B, as each side's own
    `report --by step` has it."""
    store = tmp_path / "s"
    for step, seed in ((1, 1), (2, 3)):
        _dump(tmp_path / f"a{step}.parquet", seed, replayed=False, flip_noise=0.5)
        _dump(tmp_path / f"b{step}.parquet", seed + 1, replayed=True, flip_noise=0.01, every=0)
    for run in ("a", "b"):
        for step in (1, 2):
            path = tmp_path / f"{run}{step}.parquet"
            table = pq.read_table(path)
            table = table.append_column("step", pa.array([step] * table.num_rows))
            pq.write_table(table, path)
        api.ingest([tmp_path / f"{run}1.parquet", tmp_path / f"{run}2.parquet"], run, store=store)
    cmp = api.compare("a", "b", store=store, resamples=20, by=["step"])
    table = next(s for s in api.sections(cmp) if s.id == "routing-by-step")
    assert [r["step"] for r in table.rows] == ["1", "2"]
    for side, run in (("a", "a"), ("b", "b")):
        groups = api.report([run], store=store, by=["step"]).to_dict()["groups"]
        want = {
            str(g["by"]["step"]): g["routing"]
            for g in groups
            if set(g["by"]) == {"step"} and "routing" in g
        }
        assert set(want) == {"1", "2"}
        for row in table.rows:
            ref = want[row["step"]]
            assert row[f"{side}_routing_token_agreement"] == ref["routing_token_agreement"]
            assert row[f"{side}_vllm_kl_flipped"] == ref["vllm_kl_flipped"]
            assert row[f"{side}_vllm_kl_same"] == ref["vllm_kl_same"]
    assert all(r["b_routing_token_agreement"] == 1.0 for r in table.rows)


def test_compare_of_the_same_logprobs_with_other_routes(tmp_path: Path) -> None:
    """Two ingests of one dump hold the same logprobs; with the same routes they are identical
    (no difference, exit code 0), with the routes paired another way the comparison runs and
    says that only the routing differs."""
    store = tmp_path / "s"
    _dump(tmp_path / "a.parquet", 1, replayed=False, flip_noise=0.5)
    api.ingest([tmp_path / "a.parquet"], "one", store=store)
    api.ingest([tmp_path / "a.parquet"], "two", store=store)
    api.ingest([tmp_path / "a.parquet"], "late", store=store, routes=api.RouteOptions("output"))
    assert isinstance(api.compare("one", "two", store=store, resamples=20), api.Identical)
    cmp = api.compare("one", "late", store=store, resamples=20)
    assert isinstance(cmp, api.Comparison) and cmp.same_logprobs
    doc = cmp.to_dict()["routing"]
    a, b = doc["a"]["one"]["metrics"], doc["b"]["late"]["metrics"]
    assert a["vllm_kl_flipped"] > 100 * b["vllm_kl_flipped"]  # the flips paired a row apart
    ran = cli("compare", "one", "late", "--store", str(store), "-q", "--resamples", "20")
    assert ran.code == 0
    assert "what differs is their MoE routing" in " ".join(ran.out.split())
