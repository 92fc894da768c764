"""Routes in verl's ``DataProto`` batch: ``routed_experts`` [rows, prompt + response, layers,
top_k] aligned with ``input_ids`` (left-padded prompt, 0 at padding), against numpy."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from mismatchctl import api
from mismatchctl import schema as S
from mismatchctl.errors import InputError
from mismatchctl.ingest.routing_rows import RouteOptions
from tests.dataproto import uids, write_dataproto
from tests.helpers import tree_digest
from tests.routing.test_route_ingest import LAYERS, TOP_K, _check, _sequences

pytest.importorskip("torch")


def _batch(seqs: list[dict], dtype: type = np.int16, whole: bool = True) -> dict[str, np.ndarray]:
    """The trainer batch verl's agent loop builds: prompts left-padded to the widest, responses
    right-padded; both sides' routes over prompt + response (``whole``) or the response only,
    0 at every padded position."""
    rows = len(seqs)
    width_p = max(s["prompt"] for s in seqs)
    width_r = max(len(s["mask"]) for s in seqs)
    route_rows = width_p + width_r if whole else width_r
    out = {
        "rollout_log_probs": np.zeros((rows, width_r), np.float32),
        "old_log_probs": np.zeros((rows, width_r), np.float32),
        "response_mask": np.zeros((rows, width_r), np.int64),
        "attention_mask": np.zeros((rows, width_p + width_r), np.int64),
        "routed_experts": np.zeros((rows, route_rows, LAYERS, TOP_K), dtype),
        "trainer_routed_experts": np.zeros((rows, route_rows, LAYERS, TOP_K), dtype),
    }
    for i, s in enumerate(seqs):
        p, t = s["prompt"], len(s["mask"])
        out["rollout_log_probs"][i, :t] = s["rollout"]
        out["old_log_probs"][i, :t] = s["trainer"]
        out["response_mask"][i, :t] = s["mask"]
        out["attention_mask"][i, width_p - p : width_p + t] = 1
        for key, side in (("routed_experts", "eng"), ("trainer_routed_experts", "tr")):
            if whole:  # rows per position of input_ids: prompt + response
                out[key][i, width_p - p : width_p + t] = s[side]
            else:
                out[key][i, :t] = s[side][p:]
    return out


def _bad_id(batch: dict) -> None:
    """Expert id 8 (of 8 experts) at response index 2 of row 1, trainer side."""
    width_p = batch["attention_mask"].shape[1] - batch["old_log_probs"].shape[1]
    batch["trainer_routed_experts"][1, width_p + 2, 2, 0] = 8


def _ingest(tmp_path: Path, batch: dict, **kw: object) -> tuple[pa.Table, list[str]]:
    path = write_dataproto(
        tmp_path / "step_2.pkl", batch, {"uid": uids(len(batch["old_log_probs"]))}
    )
    store = tmp_path / "store"
    res = api.ingest(
        [path], "r", store=store, trust_pickle=True, routes=RouteOptions(keep_routes=True, **kw)
    )
    st = api.open_store(store)
    parts = st.parts("r", "routing")
    assert parts and len(parts) == len(st.parts("r", "tokens"))
    rows = pa.concat_tables(pq.read_table(st.part_path(p)) for p in parts).sort_by(
        [(S.SEQ, "ascending"), (S.POSITION, "ascending")]
    )
    return rows, res.files[0].record.notes


@pytest.mark.parametrize("aligned", ["input", "output"])
def test_whole_sequence_routes_keep_the_last_prompt_row(tmp_path: Path, aligned: str) -> None:
    seqs = _sequences()
    rows, notes = _ingest(tmp_path, _batch(seqs), aligned=aligned)
    _check(rows, seqs, aligned)
    # the first response token is paired with the last prompt row (kept from the prompt part)
    firsts = rows.filter(pc.equal(rows[S.POSITION], 0))
    if aligned == "input":
        assert -1 not in firsts.column(S.ROUTE_PAIRED).to_pylist()
    # verl's rows of 0 (padding) are its mark of rows not recorded, not a capture bug; only
    # those from response index -1 on are counted (the left padding is never used)
    width_r = max(len(s["mask"]) for s in seqs)
    zeros = 2 * sum(width_r - len(s["mask"]) for s in seqs)  # both sides
    assert zeros > 0
    assert any(n.startswith(f"routes: {zeros:,} rows of zeros, verl's mark") for n in notes), notes
    assert not any("capture bug" in n for n in notes), notes
    assert any("routes: 4 layers x top-2" in n for n in notes), notes


def test_response_aligned_routes_and_other_dtypes(tmp_path: Path) -> None:
    """Routes as wide as the response (no prompt part): the first token has no producing row."""
    seqs = _sequences(seed=4)
    for s in seqs:
        s["eng"][: s["prompt"]] = -1  # not in the batch: the first token is unpaired
    rows, notes = _ingest(tmp_path, _batch(seqs, np.int32, whole=False))
    _check(rows, seqs)
    firsts = rows.filter(pc.equal(rows[S.POSITION], 0))
    assert set(firsts.column(S.ROUTE_PAIRED).to_pylist()) == {-1}
    # verl's zeros at the right padding: its mark of rows not recorded, not a capture bug
    width_r = max(len(s["mask"]) for s in seqs)
    zeros = 2 * sum(width_r - len(s["mask"]) for s in seqs)
    assert any(n.startswith(f"routes: {zeros:,} rows of zeros, verl's mark") for n in notes), notes
    assert not any("capture bug" in n for n in notes), notes


def test_the_trainer_side_by_map_and_one_side_alone(tmp_path: Path) -> None:
    seqs = _sequences(seed=5)
    batch = _batch(seqs, np.int64)
    batch["actor_routed_experts"] = batch.pop("trainer_routed_experts")
    path = write_dataproto(tmp_path / "a.pkl", batch, {"uid": uids(len(seqs))})
    store = tmp_path / "s"
    api.ingest(
        [path],
        "r",
        store=store,
        trust_pickle=True,
        mapping={"trainer_routes": "actor_routed_experts"},
    )
    assert api.open_store(store).parts("r", "routing")
    del batch["actor_routed_experts"]  # verl's usual batch: the engine's routes only
    path = write_dataproto(tmp_path / "b.pkl", batch, {"uid": uids(len(seqs))})
    res = api.ingest([path], "one", store=store, trust_pickle=True)
    notes = res.files[0].record.notes
    assert any("routes of one side only (`routed_experts`)" in n for n in notes), notes
    assert not api.open_store(store).parts("one", "routing")


@pytest.mark.parametrize(
    ("spoil", "message"),
    [
        (
            lambda b: b.__setitem__("routed_experts", b["routed_experts"][:, :, 0]),
            r"batch key `routed_experts` has shape \[6, \d+, 2\], expected \[6, prompt_length \+ "
            r"response_length \(or response_length\), layers, top_k\]",
        ),
        (
            lambda b: b.__setitem__("routed_experts", b["routed_experts"].astype(np.float32)),
            r"batch key `routed_experts`: expert ids of type float32, expected integers",
        ),
        (
            lambda b: b.__setitem__("routed_experts", b["routed_experts"][:, 1:]),
            r"batch key `routed_experts`: sample `u0` \(row 0\): \d+ route rows, expected \d+ "
            r"\(one per logprob\) or \d+ \(prompt \+ response\)",
        ),
        (
            _bad_id,
            r"sample `u1`: batch key `trainer_routed_experts`, response index 2: expected ids in "
            r"\[0, 8\), found 8",
        ),
    ],
)
def test_errors_name_the_key_and_sample(tmp_path: Path, spoil: object, message: str) -> None:
    seqs = _sequences()
    store = tmp_path / "store"
    good = write_dataproto(tmp_path / "good.pkl", _batch(seqs), {"uid": uids(len(seqs))})
    api.ingest([good], "r", store=store, trust_pickle=True)
    before = tree_digest(store)
    batch = _batch(seqs)
    spoil(batch)  # type: ignore[operator]
    bad = write_dataproto(tmp_path / "bad.pkl", batch, {"uid": uids(len(seqs))})
    with pytest.raises(InputError, match=message) as err:
        api.ingest([bad], "r", store=store, trust_pickle=True, routes=RouteOptions(num_experts=8))
    assert err.value.hint
    assert str(bad) in err.value.message
    assert tree_digest(store) == before


def test_batches_of_two_rows_give_the_same_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Routes sliced with their batch (views of the tensor), parts written as twins."""
    from mismatchctl.ingest import verl_pickle
    from mismatchctl.store import parts as store_parts

    seqs = _sequences(seed=7)
    batch = _batch(seqs)
    width = batch["old_log_probs"].shape[1]
    monkeypatch.setattr(verl_pickle, "BATCH_TOKENS", 2 * width * verl_pickle.ROUTES_BATCH_DIVISOR)
    monkeypatch.setattr(store_parts, "PART_TOKENS", 30)
    rows, _ = _ingest(tmp_path, batch)
    _check(rows, seqs)
