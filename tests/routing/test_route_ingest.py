"""Routes read from every encoding, placed on the logprobs, compared: against numpy."""

from __future__ import annotations

import base64
import copy
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mismatchctl import api
from mismatchctl import schema as S
from mismatchctl.errors import InputError
from mismatchctl.ingest.routing_rows import ALIGNMENT_EVERY, RouteOptions
from tests.helpers import tree_digest
from tests.routing.routes_fixture import routes

LAYERS, TOP_K, EXPERTS = 4, 2, 8


def _sequences(n: int = 6, seed: int = 1) -> list[dict]:
    """Sequences with prompt, response (a tool response in the middle, padding at the end), and
    both sides' routes over prompt + response (rows per absolute position)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        prompt, resp = int(rng.integers(3, 7)), int(rng.integers(8, 20))
        mask = np.ones(resp, dtype=np.int64)
        mask[3:5] = 0  # a tool response
        mask[resp - 2 :] = 0  # padding
        eng, tr = routes(prompt + resp, LAYERS, EXPERTS, TOP_K, seed=100 + i)
        tr[prompt + 6] = np.roll(eng[prompt + 6], 1, axis=1)  # same sets, reordered ids
        if i == 2:
            eng[prompt + 7] = -1  # not recorded
        out.append(
            {
                "prompt": prompt,
                "mask": mask,
                "rollout": -rng.random(resp) * np.where(mask, 1, 0),
                "trainer": -rng.random(resp) * np.where(mask, 1, 0),
                "eng": eng,
                "tr": tr,
            }
        )
    return out


def _base(seqs: list[dict]) -> dict:
    return {
        "sample_id": [f"s{i}" for i in range(len(seqs))],
        "step": [1] * len(seqs),
        "prompt_length": [s["prompt"] for s in seqs],
        "rollout_log_probs": [s["rollout"].tolist() for s in seqs],
        "old_log_probs": [s["trainer"].tolist() for s in seqs],
        "response_mask": [s["mask"].tolist() for s in seqs],
    }


def _response_rows(s: dict, side: str) -> np.ndarray:
    p = s["prompt"]
    return s[side][p : p + len(s["mask"])]


def _compared(eng: np.ndarray, tr: np.ndarray, j: int) -> tuple | None:
    """The two sides' rows of absolute position ``j`` when both are recorded."""
    a, b = eng[j], tr[j]
    return None if (a < 0).any() or (b < 0).any() else (a, b)


def _differs(eng: np.ndarray, tr: np.ndarray, j: int) -> bool | None:
    r = _compared(eng, tr, j)
    return None if r is None else any(set(x) != set(y) for x, y in zip(*r, strict=True))


def _paired(eng: np.ndarray, tr: np.ndarray, j: int) -> int:
    """-1 not compared, 0 equal on every layer, else 1 + the lowest differing layer."""
    r = _compared(eng, tr, j)
    if r is None:
        return -1
    differ = [set(x) != set(y) for x, y in zip(*r, strict=True)]
    return 1 + differ.index(True) if any(differ) else 0


def _same_layers(a: np.ndarray, b: np.ndarray, pairs: list[tuple[int, int]]) -> int:
    """How many (rollout layer, trainer layer) pairs hold the same sets."""
    return sum(set(a[i]) == set(b[k]) for i, k in pairs)


def _shifted(eng: np.ndarray, tr: np.ndarray, p: int, t: int, j: int) -> bytes:
    """The alignment test of model token ``j`` (response index): the trainer's row against the
    rollout's a position before and after (within the frame, response index -1 to ``t - 1``),
    its layers against the rollout's layer below and above; 255 where a row is not recorded,
    and off the sample (every ``ALIGNMENT_EVERY``-th row of the frame)."""
    b = tr[p + j]
    if j % ALIGNMENT_EVERY or (b < 0).any():  # sampled rows: response index 0, 32, 64...
        return bytes([255] * 4)
    same = [(i, i) for i in range(LAYERS)]
    out = []
    for g in (p + j - 1, p + j + 1):
        inside = p - 1 <= g <= p + t - 1
        out.append(_same_layers(eng[g], b, same) if inside and not (eng[g] < 0).any() else 255)
    a = eng[p + j]
    if (a < 0).any():
        return bytes([*out, 255, 255])
    below = _same_layers(a, b, [(i - 1, i) for i in range(1, LAYERS)])
    above = _same_layers(a, b, [(i + 1, i) for i in range(LAYERS - 1)])
    return bytes([*out, below, above])


def _expected(seqs: list[dict], aligned: str = "input") -> dict[str, list]:
    """The routing columns by a plain per-token loop over sets (the reference)."""
    keys = ("equal", "overlap", "paired", "before", "eng", "shifted")
    out: dict[str, list] = {k: [] for k in keys}
    for s in seqs:
        p, eng, tr = s["prompt"], s["eng"], s["tr"]
        for j in np.flatnonzero(s["mask"]):
            out["shifted"].append(_shifted(eng, tr, p, len(s["mask"]), j))
            r = _compared(eng, tr, p + j)
            if r is None:
                out["equal"].append(None)
                out["overlap"].append(None)
            else:
                sets = [(set(x), set(y)) for x, y in zip(*r, strict=True)]
                out["equal"].append(sum(1 << i for i, (x, y) in enumerate(sets) if x == y))
                out["overlap"].append(bytes(len(x & y) for x, y in sets))
            out["paired"].append(_paired(eng, tr, p + j - 1 if aligned == "input" else p + j))
            out["before"].append(any(_differs(eng, tr, p + k) for k in range(-1, j)))
            out["eng"].append(eng[p + j].reshape(-1).tolist())
    return out


def _ingest(tmp_path: Path, table: pa.Table, name: str = "d.parquet", **kw) -> pa.Table:
    path = tmp_path / name
    pq.write_table(table, path)
    store = tmp_path / "store"
    api.ingest([path], "r", store=store, routes=RouteOptions(keep_routes=True, **kw))
    st = api.open_store(store)
    parts = st.parts("r", "routing")
    assert parts and len(parts) == len(st.parts("r", "tokens"))
    return pa.concat_tables(pq.read_table(st.part_path(p)) for p in parts).sort_by(
        [(S.SEQ, "ascending"), (S.POSITION, "ascending")]
    )


def _check(rows: pa.Table, seqs: list[dict], aligned: str = "input") -> None:
    exp = _expected(seqs, aligned)
    assert rows.column(S.ROUTE_EQUAL).to_pylist() == exp["equal"]
    assert rows.column(S.ROUTE_OVERLAP).to_pylist() == exp["overlap"]
    assert rows.column(S.ROUTE_PAIRED).to_pylist() == exp["paired"]
    assert rows.column(S.ROUTE_FLIP_BEFORE).to_pylist() == exp["before"]
    assert rows.column(S.ROLLOUT_ROUTES).to_pylist() == exp["eng"]
    assert rows.column(S.ROUTE_SHIFTED).to_pylist() == exp["shifted"]


def test_response_aligned_lists(tmp_path: Path) -> None:
    seqs = _sequences()
    data = _base(seqs)
    data["rollout_routed_experts"] = [_response_rows(s, "eng").tolist() for s in seqs]
    data["trainer_routed_experts"] = [_response_rows(s, "tr").tolist() for s in seqs]
    # the last prompt row is not in a response-aligned dump: the first token is unpaired
    for s in seqs:
        s["eng"][: s["prompt"]] = -1
    rows = _ingest(tmp_path, pa.table(data))
    _check(rows, seqs)
    assert -1 in rows.column(S.ROUTE_PAIRED).to_pylist()


@pytest.mark.parametrize("aligned", ["input", "output"])
def test_verl_whole_sequence_keeps_the_last_prompt_row(tmp_path: Path, aligned: str) -> None:
    seqs = _sequences()
    width = max(s["prompt"] for s in seqs)
    data = _base(seqs)
    del data["prompt_length"]
    att, full_eng, full_tr = [], [], []
    for s in seqs:
        pad = width - s["prompt"]  # verl left-pads the prompt (0 routes there)
        zeros = np.zeros((pad, LAYERS, TOP_K), np.int32)
        full_eng.append(np.concatenate([zeros, s["eng"]]).tolist())
        full_tr.append(np.concatenate([zeros, s["tr"]]).tolist())
        att.append([0] * pad + [1] * s["prompt"] + s["mask"].tolist())
    data["attention_mask"] = att
    data["routed_experts"] = full_eng
    data["trainer_routed_experts"] = full_tr
    rows = _ingest(tmp_path, pa.table(data), aligned=aligned)
    _check(rows, seqs, aligned)


def test_sglang_base64_with_start_len(tmp_path: Path) -> None:
    seqs = _sequences()
    data = _base(seqs)
    starts = [1, 0, 2, 0, 1, 0]
    enc = []
    for s, start in zip(seqs, starts, strict=True):
        rows = s["eng"][start : s["prompt"] + len(s["mask"]) - 1]  # [start, seqlen - 1)
        enc.append(base64.b64encode(rows.astype("<i4").tobytes()).decode("ascii"))
        s["eng"][-1] = -1  # the last token is never an input: no row
    data["rollout_routed_experts"] = enc
    data["routed_experts_start_len"] = starts
    data["trainer_routed_experts"] = [_response_rows(s, "tr").tolist() for s in seqs]
    for s in seqs:
        s["tr"][: s["prompt"]] = -1
    rows = _ingest(tmp_path, pa.table(data), top_k=TOP_K)
    _check(rows, seqs)


def test_prime_bytes_with_shape_and_dtype(tmp_path: Path) -> None:
    seqs = _sequences()
    data = _base(seqs)
    for s in seqs:  # uint8 cannot hold -1: prime-rl rows are all recorded
        s["eng"][s["eng"] < 0] = 255
    data["rollout_routed_experts"] = [
        {
            "data": s["eng"].astype(np.uint8).tobytes(),
            "shape": list(s["eng"].shape),
            "dtype": "uint8",
        }
        for s in seqs
    ]
    data["trainer_routed_experts"] = [_response_rows(s, "tr").tolist() for s in seqs]
    for s in seqs:
        s["tr"][: s["prompt"]] = -1
    with pytest.raises(InputError, match=r"ids in \[0, 8\), found 255"):
        _ingest(tmp_path, pa.table(data), num_experts=EXPERTS)
    for s in seqs:
        s["eng"][s["eng"] == 255] = 3
    fixed = [
        {
            "data": s["eng"].astype(np.uint8).tobytes(),
            "shape": list(s["eng"].shape),
            "dtype": "uint8",
        }
        for s in seqs
    ]
    data["rollout_routed_experts"] = fixed
    seqs[2]["eng"][seqs[2]["prompt"] + 7] = [[3, 3]] * LAYERS  # now a one-id fill: a capture bug
    data["rollout_routed_experts"][2] = {
        "data": seqs[2]["eng"].astype(np.uint8).tobytes(),
        "shape": list(seqs[2]["eng"].shape),
        "dtype": "uint8",
    }
    seqs[2]["eng"][seqs[2]["prompt"] + 7] = -1
    rows = _ingest(tmp_path, pa.table(data), name="e.parquet", num_experts=EXPERTS)
    _check(rows, seqs)


def test_token_layout(tmp_path: Path) -> None:
    seqs = _sequences()
    cols: dict[str, list] = {
        k: []
        for k in (
            "sample_id",
            "position",
            "rollout_logprob",
            "trainer_logprob",
            "is_model_token",
            "rollout_routed_experts",
            "trainer_routed_experts",
        )
    }
    for i, s in enumerate(seqs):
        for j in range(len(s["mask"])):
            cols["sample_id"].append(f"s{i}")
            cols["position"].append(j)
            cols["rollout_logprob"].append(float(s["rollout"][j]))
            cols["trainer_logprob"].append(float(s["trainer"][j]))
            cols["is_model_token"].append(int(s["mask"][j]))
            cols["rollout_routed_experts"].append(s["eng"][s["prompt"] + j].tolist())
            cols["trainer_routed_experts"].append(s["tr"][s["prompt"] + j].tolist())
        s["eng"][: s["prompt"]] = -1
    rows = _ingest(tmp_path, pa.table(cols))
    _check(rows, seqs)


def test_padded_tail_repeating_the_last_row_is_a_capture_bug(tmp_path: Path) -> None:
    seqs = _sequences()
    for s in seqs:
        p, last = s["prompt"], int(np.flatnonzero(s["mask"])[-1])
        s["eng"][p + last + 1 : p + len(s["mask"])] = s["eng"][p + last]
        s["tr"][p + last + 1 : p + len(s["mask"])] = s["eng"][p + last]
    data = _base(seqs)
    data["rollout_routed_experts"] = [_response_rows(s, "eng").tolist() for s in seqs]
    data["trainer_routed_experts"] = [_response_rows(s, "tr").tolist() for s in seqs]
    path = tmp_path / "d.parquet"
    pq.write_table(pa.table(data), path)
    res = api.ingest([path], "r", store=tmp_path / "s")
    notes = res.files[0].record.notes
    assert any("capture bug: 24 padded rows repeating the last real row" in n for n in notes), notes


def test_routes_a_position_late_get_a_note(tmp_path: Path) -> None:
    """Trainer routes dumped a position late agree with the rollout's more there than aligned:
    the source's notes say so (and give both shares); routes as they are get no such note."""
    n, length = 6, 70  # the test reads response rows 0, 32, 64
    pairs = [routes(length, LAYERS, EXPERTS, TOP_K, seed=200 + i) for i in range(n)]
    eng, tr = [p[0] for p in pairs], [p[1] for p in pairs]
    data = {
        "sample_id": [f"s{i}" for i in range(n)],
        "rollout_log_probs": [[-0.5] * length] * n,
        "old_log_probs": [[-0.51] * length] * n,
        "response_mask": [[1] * length] * n,
        "rollout_routed_experts": [e.tolist() for e in eng],
    }
    late = [np.concatenate([e[:1], e[:-1]]).tolist() for e in eng]  # row t holds row t - 1
    for name, trainer in (("late", late), ("as-is", [t.tolist() for t in tr])):
        path = tmp_path / f"{name}.parquet"
        pq.write_table(pa.table({**data, "trainer_routed_experts": trainer}), path)
        notes = api.ingest([path], name, store=tmp_path / "s").files[0].record.notes
        said = [x for x in notes if "misaligned?" in x]
        if name == "as-is":
            assert not said, notes
        else:
            assert len(said) == 1 and "100.0% of the layer routes set a position later" in said[0]


def _valid(tmp_path: Path) -> tuple[list[dict], dict]:
    seqs = _sequences()
    data = _base(seqs)
    data["rollout_routed_experts"] = [_response_rows(s, "eng").tolist() for s in seqs]
    data["trainer_routed_experts"] = [_response_rows(s, "tr").tolist() for s in seqs]
    return seqs, data


def test_errors_name_the_file_column_and_sample_and_leave_the_store(tmp_path: Path) -> None:
    _, data = _valid(tmp_path)
    good = tmp_path / "good.parquet"
    pq.write_table(pa.table(data), good)
    store = tmp_path / "store"
    api.ingest([good], "r", store=store)
    before = tree_digest(store)
    cases = {
        "short": (
            lambda d: d["trainer_routed_experts"].__setitem__(
                1, d["trainer_routed_experts"][1][:-1]
            ),
            r"bad\.parquet: column `trainer_routed_experts`: sample `s1` \(row 1\): \d+ route rows, expected \d+",
        ),
        "range": (
            lambda d: d["trainer_routed_experts"][0][0][0].__setitem__(0, 9),
            r"sample `s0`: column `trainer_routed_experts`, response index 0: expected ids in \[0, 8\), found 9",
        ),
        "beyond int32": (  # int64 ids are checked as they are, not narrowed first
            lambda d: d["trainer_routed_experts"][0][0][0].__setitem__(0, 1 << 40),
            r"response index 0: expected ids in \[0, 8\), found 1099511627776",
        ),
        "partial": (
            lambda d: d["rollout_routed_experts"][0][1][2].__setitem__(0, -1),
            r"response index 1: expected -1 on every slot or on none",
        ),
        "topk": (
            lambda d: d["rollout_routed_experts"][3][2].__setitem__(1, [1, 2, 3]),
            r"the top-k changes within the routes: 2, then 3",
        ),
        "dup": (
            lambda d: d["rollout_routed_experts"][0][1].__setitem__(0, [5, 5]),
            r"layer 0: expected 2 distinct expert ids, found \[5, 5\]",
        ),
    }
    for name, (spoil, message) in cases.items():
        d = copy.deepcopy(data)
        spoil(d)
        bad = tmp_path / "bad.parquet"
        pq.write_table(pa.table(d), bad)
        with pytest.raises(InputError, match=message) as err:
            api.ingest([str(bad)], "r", store=store, routes=RouteOptions(num_experts=EXPERTS))
        assert err.value.hint, name
        assert str(bad) in err.value.message, name
        assert tree_digest(store) == before, name


def test_slime_train_dump_with_routes(tmp_path: Path) -> None:
    """slime's Sample.rollout_routed_experts: int32 (len(tokens) - 1, layers, top_k) tensors,
    rows from the first prompt token; here with a trainer side under trainer_routed_experts."""
    torch = pytest.importorskip("torch")
    seqs = _sequences()
    samples = []
    for i, s in enumerate(seqs):
        p, t = s["prompt"], len(s["mask"])
        s["eng"][p + t - 1] = -1  # the last token is never an input: no row
        samples.append(
            {
                "tokens": torch.arange(p + t),
                "response_lengths": t,
                "loss_masks": torch.tensor(s["mask"]),
                "rollout_log_probs": torch.tensor(s["rollout"]),
                "log_probs": torch.tensor(s["trainer"]),
                "sample_index": i,
                "rollout_routed_experts": torch.tensor(s["eng"][: p + t - 1]),
                "trainer_routed_experts": torch.tensor(s["tr"][: p + t - 1]),
            }
        )
    path = tmp_path / "train_3.pt"
    torch.save({"format_version": 2, "rollout_id": 3, "rank": 0, "samples": samples}, path)
    store = tmp_path / "store"
    api.ingest([path], "r", store=store, routes=RouteOptions(keep_routes=True))
    st = api.open_store(store)
    (part,) = st.parts("r", "routing")
    _check(pq.read_table(st.part_path(part)), seqs)
    # a sample whose routes are one row short is refused, naming it
    samples[1]["rollout_routed_experts"] = samples[1]["rollout_routed_experts"][:-1]
    torch.save({"format_version": 2, "rollout_id": 3, "rank": 0, "samples": samples}, path)
    with pytest.raises(
        InputError, match=r"train_3\.pt: `rollout_routed_experts`: sample `1` \(sample 1\): shape"
    ):
        api.ingest([path], "r2", store=store)


def test_other_names_by_map_and_encodings_needing_more(tmp_path: Path) -> None:
    seqs = _sequences()
    data = _base(seqs)
    data["engine_experts"] = [_response_rows(s, "eng").tolist() for s in seqs]
    data["learner_experts"] = [_response_rows(s, "tr").tolist() for s in seqs]
    for s in seqs:
        s["eng"][: s["prompt"]] = -1
    path = tmp_path / "m.parquet"
    pq.write_table(pa.table(data), path)
    store = tmp_path / "store"
    maps = ["rollout_routes=engine_experts", "trainer_routes=learner_experts"]
    api.ingest([path], "r", store=store, mapping=maps, routes=RouteOptions(keep_routes=True))
    st = api.open_store(store)
    (part,) = st.parts("r", "routing")
    _check(pq.read_table(st.part_path(part)), seqs)

    # base64 routes without their top-k, and without the prompt length, are refused
    b64 = _base(_sequences())
    b64["rollout_routed_experts"] = [base64.b64encode(b"\0" * 16).decode()] * len(seqs)
    b64["trainer_routed_experts"] = data["learner_experts"]
    path = tmp_path / "b.parquet"
    pq.write_table(pa.table(b64), path)
    with pytest.raises(InputError, match=r"base64 routes \(SGLang\): their top-k") as err:
        api.ingest([path], "b", store=store)
    assert "--routes-topk" in (err.value.hint or "")
    del b64["prompt_length"]
    pq.write_table(pa.table(b64), path)
    with pytest.raises(InputError, match=r"its prompt length is unknown"):
        api.ingest([path], "b", store=store, routes=RouteOptions(top_k=2))


def test_many_batches_and_parts_stay_twins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches of one sequence and parts of a few dozen tokens (two open at a time): every
    routing part holds its token part's rows, and the rows are those of one batch."""
    from mismatchctl.ingest import source as ingest_source
    from mismatchctl.store import parts as store_parts

    monkeypatch.setattr(ingest_source, "BATCH_TOKENS", 64)
    monkeypatch.setattr(store_parts, "PART_TOKENS", 30)
    seqs = _sequences(n=12, seed=4)
    data = _base(seqs)
    data["rollout_routed_experts"] = [_response_rows(s, "eng").tolist() for s in seqs]
    data["trainer_routed_experts"] = [_response_rows(s, "tr").tolist() for s in seqs]
    for s in seqs:
        s["eng"][: s["prompt"]] = -1
    path = tmp_path / "d.parquet"
    pq.write_table(pa.table(data), path)
    store = tmp_path / "store"
    api.ingest([path], "r", store=store, routes=RouteOptions(keep_routes=True))
    st = api.open_store(store)
    tokens, routing = st.parts("r", "tokens"), st.parts("r", "routing")
    assert len(tokens) == len(routing) > 2
    for tok, rt in zip(tokens, routing, strict=True):
        a = pq.read_table(st.part_path(tok), columns=[S.SEQ, S.POSITION])
        b = pq.read_table(st.part_path(rt), columns=[S.SEQ, S.POSITION])
        assert a.equals(b)
    rows = pa.concat_tables(pq.read_table(st.part_path(p)) for p in routing)
    _check(rows.sort_by([(S.SEQ, "ascending"), (S.POSITION, "ascending")]), seqs)


def test_a_table_in_memory_with_routes_is_read_from_its_buffer(tmp_path: Path) -> None:
    """``ingest_table`` (the Monitor's path) with route columns reads them from the table's
    buffer (it reopened the source's name as a path: "was removed while it was being read"),
    and stores the routing rows a file of the same table gives."""
    from mismatchctl.ingest.in_memory import ingest_table
    from mismatchctl.ingest.run_ingest import Options

    seqs = _sequences()
    data = _base(seqs)
    data["rollout_routed_experts"] = [_response_rows(s, "eng").tolist() for s in seqs]
    data["trainer_routed_experts"] = [_response_rows(s, "tr").tolist() for s in seqs]
    table = pa.table(data)
    (tmp_path / "file").mkdir()
    from_file = _ingest(tmp_path / "file", table)
    store = api.open_store(tmp_path / "memory")
    opts = Options(run="r", tags={}, fmt=None, mapping={}, skip_bad=False,
                   routes=RouteOptions(keep_routes=True))  # fmt: skip
    result = ingest_table(store, table, "step_00000001.parquet", opts)
    assert [f.status for f in result.files] == ["ingested"]
    parts = store.parts("r", "routing")
    rows = pa.concat_tables(pq.read_table(store.part_path(p)) for p in parts).sort_by(
        [(S.SEQ, "ascending"), (S.POSITION, "ascending")]
    )
    assert rows.equals(from_file)
