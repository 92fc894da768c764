"""Routing metrics of a run against a numpy reference on hand-made routes; merged == one-shot."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mismatchctl import api
from mismatchctl import schema as S
from mismatchctl.ingest.routing_rows import ALIGNMENT_EVERY, RouteOptions
from mismatchctl.stats import routing_sums as R
from tests.routing.routes_fixture import routes

LAYERS, TOP_K = 3, 2


def _dump(seed: int, n: int = 8, lengths: tuple[int, int] = (5, 15)) -> tuple[dict, list[dict]]:
    """Response-aligned routes plus the last prompt row in front (verl's trimmed form is not
    used here: each sequence's rows are given for the response only, and the first token is
    unpaired)."""
    rng = np.random.default_rng(seed)
    seqs = []
    for i in range(n):
        t = int(rng.integers(*lengths))
        eng, tr = routes(t, LAYERS, 8, TOP_K, seed=seed * 100 + i)
        tr[1] = eng[1][:, ::-1]  # reordered ids: equal sets
        tr[2, 0] = [
            eng[2, 0, 0],
            (eng[2, 0, 1] + 1) % 8
            if (eng[2, 0, 1] + 1) % 8 != eng[2, 0, 0]
            else (eng[2, 0, 1] + 2) % 8,
        ]  # partial overlap
        if i % 3 == 0:
            eng[3] = -1  # not recorded
        mask = np.ones(t, np.int64)
        mask[4] = 0  # a tool token
        roll = -rng.random(t) * 0.5
        trn = roll + rng.normal(0, 0.05, t)
        trn = np.minimum(trn, 0)
        seqs.append({"eng": eng, "tr": tr, "mask": mask, "rollout": roll, "trainer": trn})
    data = {
        "sample_id": [f"s{seed}-{i}" for i in range(n)],
        "rollout_log_probs": [s["rollout"].tolist() for s in seqs],
        "old_log_probs": [s["trainer"].tolist() for s in seqs],
        "response_mask": [s["mask"].tolist() for s in seqs],
        "rollout_routed_experts": [s["eng"].tolist() for s in seqs],
        "trainer_routed_experts": [s["tr"].tolist() for s in seqs],
    }
    return data, seqs


def _reference(seqs: list[dict], replay: bool = False) -> dict:
    """Every metric by its definition (docs/metrics.md), token by token, over sets."""
    compared = all_eq = layer_eq = 0
    overlap = 0.0
    missing = unpaired = 0
    k3 = {"flip": [], "same": [], "after": [], "before": []}
    for s in seqs:
        eng, tr, mask = s["eng"], s["tr"], s["mask"]
        r = s["trainer"] - s["rollout"]

        def rec(j: int, eng: np.ndarray = eng, tr: np.ndarray = tr) -> bool:
            return j >= 0 and (eng[j] >= 0).all() and (tr[j] >= 0).all()

        def differs(j: int, eng: np.ndarray = eng, tr: np.ndarray = tr) -> bool:
            return any(set(eng[j, x]) != set(tr[j, x]) for x in range(LAYERS))

        for t in np.flatnonzero(mask):
            kt = np.expm1(r[t]) - r[t]
            if rec(t):
                compared += 1
                eqs = [set(eng[t, x]) == set(tr[t, x]) for x in range(LAYERS)]
                all_eq += all(eqs)
                layer_eq += sum(eqs)
                overlap += sum(len(set(eng[t, x]) & set(tr[t, x])) / TOP_K for x in range(LAYERS))
            else:
                missing += 1
            if rec(t - 1):
                k3["flip" if differs(t - 1) else "same"].append(kt)
            else:
                unpaired += 1
            hit = any(rec(q) and differs(q) for q in range(t))
            k3["after" if hit else "before"].append(kt)
    mean = lambda v: float(np.mean(v)) if v else None  # noqa: E731
    return {
        R.ROUTING_TOKEN_AGREEMENT: all_eq / compared,
        R.ROUTING_LAYER_AGREEMENT: layer_eq / (compared * LAYERS),
        R.ROUTING_OVERLAP_MEAN: overlap / (compared * LAYERS),
        R.ROUTING_MISSING_TOKENS: missing,
        R.VLLM_KL_FLIPPED: mean(k3["flip"]),
        R.VLLM_KL_SAME: mean(k3["same"]),
        R.ROUTING_K3_SHARE_FLIPPED: sum(k3["flip"]) / (sum(k3["flip"]) + sum(k3["same"])),
        R.ROUTING_UNPAIRED_TOKENS: unpaired,
        R.VLLM_KL_AFTER_FLIP: mean(k3["after"]),
        R.VLLM_KL_BEFORE_FLIP: mean(k3["before"]),
        R.R3_VIOLATION_FRACTION: (compared - all_eq) / compared if replay else None,
    }


def _reference_layers(seqs: list[dict]) -> list[dict]:
    """Per layer over the compared model-token rows: set equality, overlap / k, and the share of
    differing rows whose lowest differing layer it is."""
    eq, ov, first = np.zeros(LAYERS), np.zeros(LAYERS), np.zeros(LAYERS)
    compared = 0
    for s in seqs:
        eng, tr = s["eng"], s["tr"]
        for t in np.flatnonzero(s["mask"]):
            if (eng[t] < 0).any() or (tr[t] < 0).any():
                continue
            compared += 1
            same = [set(eng[t, x]) == set(tr[t, x]) for x in range(LAYERS)]
            eq += same
            ov += [len(set(eng[t, x]) & set(tr[t, x])) / TOP_K for x in range(LAYERS)]
            if not all(same):
                first[same.index(False)] += 1
    return [
        {
            "layer": x,
            R.ROUTING_LAYER_AGREEMENT: eq[x] / compared,
            R.ROUTING_OVERLAP_MEAN: ov[x] / compared,
            "first_flip_share": first[x] / first.sum(),
        }
        for x in range(LAYERS)
    ]


def _reference_alignment(seqs: list[dict]) -> dict[str, float | None]:
    """The alignment test by its definition: per model token of the sample (every
    ``ALIGNMENT_EVERY``-th row of its sequence from response index 0) whose trainer row is
    recorded, the layers whose sets agree with the rollout's row a position before and after (rows of the
    response: the first token has none before), and each trainer layer against the rollout's
    layer below and above in the same row; over the rows compared times the layers paired."""
    eq, rows = np.zeros(4), np.zeros(4)
    for s in seqs:
        eng, tr = s["eng"], s["tr"]
        for t in np.flatnonzero(s["mask"]):
            if t % ALIGNMENT_EVERY or (tr[t] < 0).any():  # sampled: response index 0, 32...
                continue
            for c, g in enumerate((t - 1, t + 1)):
                if 0 <= g < len(eng) and not (eng[g] < 0).any():
                    rows[c] += 1
                    eq[c] += sum(set(eng[g, x]) == set(tr[t, x]) for x in range(LAYERS))
            if not (eng[t] < 0).any():
                rows[2:] += 1
                eq[2] += sum(set(eng[t, x - 1]) == set(tr[t, x]) for x in range(1, LAYERS))
                eq[3] += sum(set(eng[t, x + 1]) == set(tr[t, x]) for x in range(LAYERS - 1))
    slots = rows * np.array([LAYERS, LAYERS, LAYERS - 1, LAYERS - 1])
    shares = (float(e / n) if n else None for e, n in zip(eq, slots, strict=True))
    return dict(zip(R.SHIFTS, shares, strict=True))


def _close(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for k, v in want.items():
        if v is None or isinstance(v, int):
            assert got[k] == v, k
        else:
            assert got[k] == pytest.approx(v, rel=1e-12, abs=1e-15), k


def _close_bins(by_bin: list[dict], seqs: list[dict], edges: np.ndarray) -> None:
    """K3 of flipped / same tokens per probability bin, by the definition."""
    got = {row["bin"]: row for row in by_bin}
    want: dict[int, dict[str, list]] = {}
    for s in seqs:
        eng, tr, r = s["eng"], s["tr"], s["trainer"] - s["rollout"]
        for t in np.flatnonzero(s["mask"]):
            q = t - 1
            if q < 0 or (eng[q] < 0).any() or (tr[q] < 0).any():
                continue
            flip = any(set(eng[q, x]) != set(tr[q, x]) for x in range(LAYERS))
            p = np.exp(s["rollout"][t])
            b = min(int(np.sum(edges[1:-1] <= p)), len(edges) - 2)
            side = want.setdefault(b, {"flip": [], "same": []})
            side["flip" if flip else "same"].append(np.expm1(r[t]) - r[t])
    assert len(got) == len(edges) - 1
    for b, row in enumerate(got.values()):
        w = want.get(b, {"flip": [], "same": []})
        assert row["flipped_tokens"] == len(w["flip"]) and row["same_tokens"] == len(w["same"])
        for key, vals in ((R.VLLM_KL_FLIPPED, w["flip"]), (R.VLLM_KL_SAME, w["same"])):
            assert row[key] == (pytest.approx(np.mean(vals), rel=1e-12) if vals else None)


def test_metrics_match_the_reference_and_merge(tmp_path: Path) -> None:
    files, all_seqs = [], []
    for seed in (1, 2, 3):
        data, seqs = _dump(seed)
        path = tmp_path / f"d{seed}.parquet"
        pq.write_table(pa.table(data), path)
        files.append(path)
        all_seqs += seqs
    store = tmp_path / "s"
    # one call per file: three sources, three part pairs merged
    for i, path in enumerate(files):
        api.ingest([path], "r", store=store, tags=["routing_replay=r3"] if i == 0 else [])
    # all at once: one ingest
    api.ingest(files, "one", store=store, tags=["routing_replay=r3"], routes=RouteOptions())
    merged = api.report(["r"], store=store, by=["layer"]).to_dict()["routing"]["r"]
    once = api.report(["one"], store=store).to_dict()["routing"]["one"]
    want = _reference(all_seqs, replay=True)
    _close(merged["metrics"], want)
    _close(once["metrics"], want)
    assert merged["metrics"][R.VLLM_KL_FLIPPED] is not None
    assert 0 < want[R.ROUTING_TOKEN_AGREEMENT] < 1
    _close_bins(merged["by_bin"], all_seqs, api.report(["r"], store=store).bin_edges)
    layers = merged["by_layer"]
    assert len(layers) == LAYERS
    assert sum(x["first_flip_share"] for x in layers) == pytest.approx(1.0)
    for got, want_layer in zip(layers, _reference_layers(all_seqs), strict=True):
        _close(got, want_layer)
    aligned = _reference_alignment(all_seqs)
    _close(merged["alignment"], aligned)
    _close(once["alignment"], aligned)
    assert aligned["position_before"] is None  # the response's first row has none before it
    assert 0 < max(v for v in aligned.values() if v is not None) < want[R.ROUTING_LAYER_AGREEMENT]


def test_parts_written_before_the_alignment_test(tmp_path: Path) -> None:
    """Routing parts without the ``route_shifted`` column (ingested before the test): the other
    metrics as before, the alignment null, no alignment table."""
    data, seqs = _dump(5)
    pq.write_table(pa.table(data), tmp_path / "d.parquet")
    store = tmp_path / "s"
    api.ingest([tmp_path / "d.parquet"], "r", store=store)
    st = api.open_store(store)
    for part in st.parts("r", "routing"):
        path = st.part_path(part)
        table = pq.read_table(path)
        pq.write_table(table.drop_columns([S.ROUTE_SHIFTED]), path)
    found = api.report(["r"], store=store)
    routing = found.to_dict()["routing"]["r"]
    _close(routing["metrics"], _reference(seqs))
    assert set(routing["alignment"].values()) == {None}
    assert "routing-alignment" not in [s.id for s in api.sections(found)]


def test_routes_dumped_a_position_late_align_one_position_before(tmp_path: Path) -> None:
    """The trainer's rows hold the rollout's of the position before (a dump one position late):
    the alignment test finds every layer equal there, and aligned agreement falls to chance."""
    data, seqs = _dump(4, lengths=(40, 100))  # sampled rows past response index 0
    for s in seqs:
        late = np.full_like(s["eng"], -1)
        late[1:] = s["eng"][:-1]
        s["tr"] = late
    data["trainer_routed_experts"] = [s["tr"].tolist() for s in seqs]
    pq.write_table(pa.table(data), tmp_path / "late.parquet")
    api.ingest([tmp_path / "late.parquet"], "late", store=tmp_path / "s")
    found = api.report(["late"], store=tmp_path / "s").to_dict()["routing"]["late"]
    _close(found["alignment"], _reference_alignment(seqs))
    assert found["alignment"]["position_before"] == 1.0
    assert found["metrics"][R.ROUTING_LAYER_AGREEMENT] < 0.5


def test_a_run_without_routes(tmp_path: Path) -> None:
    data, _ = _dump(1)
    del data["rollout_routed_experts"], data["trainer_routed_experts"]
    path = tmp_path / "d.parquet"
    pq.write_table(pa.table(data), path)
    api.ingest([path], "r", store=tmp_path / "s")
    assert "routing" not in api.report(["r"], store=tmp_path / "s").to_dict()
    assert not (tmp_path / "s" / "routing").exists()


@pytest.mark.slow
def test_report_views_steps_and_ray(tmp_path: Path, no_part_cache: None) -> None:
    """The Routing sections in the terminal and HTML, a step range applied to the routes, and
    the same routing numbers with the Ray engine."""
    store = tmp_path / "s"
    seqs_by_step = {}
    for step in (1, 2):
        data, seqs = _dump(10 + step)
        data["step"] = [step] * len(seqs)
        path = tmp_path / f"d{step}.parquet"
        pq.write_table(pa.table(data), path)
        api.ingest([path], "r", store=store)
        seqs_by_step[step] = seqs
    only2 = api.report(["r"], store=store, steps="2").to_dict()["routing"]["r"]["metrics"]
    _close(only2, _reference(seqs_by_step[2]))
    local = api.report(["r"], store=store, by=["layer"])
    assert [s.id for s in api.sections(local) if s.id.startswith("routing")] == [
        "routing",
        "routing-alignment",
        "routing-first-flip",
        "routing-layers-r",
        "routing-bins-r",
    ]
    plain = api.report(["r"], store=store)
    assert [s.id for s in api.sections(plain) if s.id.startswith("routing")] == [
        "routing",
        "routing-alignment",
        "routing-first-flip",
        "routing-bins-r",
    ]
    assert "by_layer" not in plain.to_dict()["routing"]["r"]
    ray = api.report(["r"], store=store, engine="ray", workers=2, by=["layer"])
    assert ray.to_dict()["routing"] == local.to_dict()["routing"]
    # ingested by Ray tasks: the same routing parts, the same numbers
    paths = [tmp_path / "d1.parquet", tmp_path / "d2.parquet"]
    api.ingest(paths, "by-ray", store=store, engine="ray", workers=2)
    again = api.report(["by-ray"], store=store, by=["layer"]).to_dict()["routing"]["by-ray"]
    assert again == local.to_dict()["routing"]["r"]
