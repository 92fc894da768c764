"""What the frameworks really write: verl DataProto pickles, prime-rl token exports, and the
one-sided files (TRL completions tables, prime-rl inference Parquet) that are refused."""

from __future__ import annotations

import io
import json
import pickle
import shutil
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import mismatchctl
from mismatchctl import schema as S
from mismatchctl.ingest.restricted_pickle import RestrictedUnpickler, first_global
from mismatchctl.ingest.verl_pickle import prompt_lengths
from tests.data.make_prime_fixtures import export_record, write
from tests.dataproto import dataproto_bytes, uids, write_dataproto
from tests.helpers import FIXTURES, cli, tree_digest

torch = pytest.importorskip("torch")

VERL = [FIXTURES / "verl_batch_step3.pkl", FIXTURES / "verl_batch_step4.pkl"]
PRIME = sorted((FIXTURES / "token_exports").rglob("rank_*.jsonl"))
COMPARED = [S.STEP, S.SEQ, S.SAMPLE_ID, S.TURN, S.POSITION, S.TOKEN_ID, S.ROLLOUT, S.TRAINER]
SEQ_COLUMNS = [S.MODEL_TOKENS, S.TURNS, S.PROMPT_TOKENS, S.TOOL_TOKENS, S.PAD_TOKENS, S.REWARD]


def _rows(store: Path, run: str, kind: str = "tokens") -> pl.DataFrame:
    return mismatchctl.open_store(store).scan(run, kind=kind).collect().sort(S.SEQ)


@pytest.fixture
def reference(store: Path) -> Path:
    mismatchctl.ingest([FIXTURES / "sequence.parquet"], run="ref", store=store)
    return store


@pytest.fixture
def seeded(reference: Path) -> Path:
    return reference


class Payload:
    """Unpickling this object creates ``marker``: the proof that code from the file ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (open, (str(self.marker), "w"))


# --- verl DataProto pickles ----------------------------------------------------------------


def test_verl_batches_give_the_reference_rows(reference: Path) -> None:
    """The same samples written by verl 0.9.1's DataProto and as a Parquet trainer batch."""
    result = mismatchctl.ingest(VERL, run="v", store=reference, trust_pickle=True)
    assert {f.format for f in result.files} == {"verl-dataproto"}
    assert _rows(reference, "v").select(COMPARED).equals(_rows(reference, "ref").select(COMPARED))
    seqs, ref = _rows(reference, "v", "sequences"), _rows(reference, "ref", "sequences")
    same = [c for c in SEQ_COLUMNS if c != S.PROMPT_TOKENS]
    assert seqs.select(same).equals(ref.select(same))
    # the pickles' attention_mask has a prompt part (the Parquet batch has none): three prompt
    # tokens left-padded to five (tests/data/make_verl_fixtures.py)
    assert seqs[S.PROMPT_TOKENS].to_list() == seqs[S.PROMPT_LENGTH].to_list() == [3] * 5
    assert ref[S.PROMPT_LENGTH].to_list() == [None] * 5
    source = mismatchctl.open_store(reference).run("v").sources[0]
    assert source.columns[S.ROLE_MASK] == "response_mask"
    assert source.columns[S.ROLE_REWARD] == "token_level_scores"


def test_verl_numpy_serialization_reads_the_same(store: Path) -> None:
    """VERL_DATAPROTO_SERIALIZATION_METHOD=numpy pickles the batch as raw bytes per tensor."""
    mismatchctl.ingest(VERL[:1], run="torch", store=store, trust_pickle=True)
    numpy_file = [FIXTURES / "verl_batch_numpy_step3.pkl"]
    mismatchctl.ingest(numpy_file, run="numpy", store=store, trust_pickle=True)
    assert _rows(store, "numpy").drop(S.RUN).equals(_rows(store, "torch").drop(S.RUN))


def test_verl_refused_without_trust_pickle(seeded: Path) -> None:
    before = tree_digest(seeded)
    ran = cli("ingest", str(VERL[0]), "--run", "v", "-q")
    assert ran.code == 1
    assert tree_digest(seeded) == before
    assert ran.err == (
        f"Error: {VERL[0]} is a verl DataProto pickle (DataProto.save_to_disk); reading it "
        "means unpickling it, which is refused unless you opt in, so that no code from a dump "
        "runs\n\nHint: if you trust the file and whoever wrote it, pass --trust-pickle: the "
        "file is then read by a restricted unpickler that rebuilds only numpy arrays and torch "
        "tensors and calls no other class or function the file names. Otherwise export the "
        "batch to Parquet (one row per response).\n"
    )


def _batch(rows: int = 2, width: int = 3) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(rows * 100 + width)
    return {
        "rollout_log_probs": -rng.exponential(1.0, (rows, width)).astype(np.float32),
        "old_log_probs": -rng.exponential(1.0, (rows, width)).astype(np.float32),
        "response_mask": np.ones((rows, width), dtype=np.int64),
    }


def test_verl_payload_never_runs(seeded: Path, tmp_path: Path) -> None:
    """A payload in the pickle runs neither without the opt-in (refused) nor with it (the
    restricted unpickler replaces what it names by an inert placeholder, and says so)."""
    marker = tmp_path / "pwned"
    path = tmp_path / "batch_step_2.pkl"
    write_dataproto(path, _batch(), {"uid": uids(2), "x": Payload(marker)}, evil=Payload(marker))
    before = tree_digest(seeded)
    assert cli("ingest", str(path), "--run", "p", "-q").code == 1
    assert not marker.exists()
    assert tree_digest(seeded) == before
    ran = cli("ingest", str(path), "--run", "p", "-q", "--trust-pickle")
    assert ran.code == 0, ran.err
    assert not marker.exists()
    notes = mismatchctl.open_store(seeded).run("p").sources[0].notes
    assert "not loaded (not read by mismatchctl): io.open" in notes


def test_verl_payload_in_the_batch_bytes_is_refused(seeded: Path, tmp_path: Path) -> None:
    """The batch bytes are loaded by torch with weights_only=True: a payload there is refused."""
    marker = tmp_path / "pwned"
    inner = tmp_path / "inner.pt"
    torch.save({"rollout_log_probs": Payload(marker)}, inner)
    path = write_dataproto(tmp_path / "b.pkl", inner.read_bytes(), {"uid": uids(2)})
    before = tree_digest(seeded)
    ran = cli("ingest", str(path), "--run", "p", "-q", "--trust-pickle")
    assert ran.code == 1
    assert not marker.exists()
    assert tree_digest(seeded) == before
    assert ran.err.startswith(
        f"Error: {path}: the DataProto batch refers to `io.open`, which the restricted reader "
        "does not load"
    )


def test_verl_numbers_match_numpy(store: Path, tmp_path: Path) -> None:
    """Random padded batch: the stored model tokens, counts and rewards against numpy."""
    rng = np.random.default_rng(3)
    rows, width = 7, 12
    batch = _batch(rows, width)
    lengths = rng.integers(1, width + 1, rows)
    mask = np.zeros((rows, width), dtype=np.int64)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
        mask[i, rng.integers(0, n)] = 0  # a tool token inside the response
    batch["response_mask"] = mask
    batch["responses"] = rng.integers(5, 1000, (rows, width))
    batch["token_level_scores"] = rng.normal(0, 1, (rows, width)).astype(np.float32)
    path = write_dataproto(tmp_path / "b.pkl", batch, {"uid": uids(rows)}, global_steps=9)
    mismatchctl.ingest([path], run="r", store=store, trust_pickle=True)
    tokens, seqs = _rows(store, "r"), _rows(store, "r", "sequences")
    keep = mask.astype(bool)
    rollout = batch["rollout_log_probs"].astype(np.float64)[keep]
    trainer = batch["old_log_probs"].astype(np.float64)[keep]
    assert np.array_equal(tokens[S.ROLLOUT].to_numpy(), rollout)
    assert np.array_equal(tokens[S.TRAINER].to_numpy(), trainer)
    assert np.array_equal(tokens[S.TOKEN_ID].to_numpy(), batch["responses"][keep])
    assert np.array_equal(tokens[S.POSITION].to_numpy(), np.nonzero(keep)[1])
    assert tokens[S.STEP].unique().to_list() == [9]
    assert seqs[S.MODEL_TOKENS].to_list() == keep.sum(axis=1).tolist()
    scores = batch["token_level_scores"].astype(np.float64).sum(axis=1)
    assert np.allclose(seqs[S.REWARD].to_numpy(), scores, rtol=0, atol=1e-12)
    assert seqs[S.SAMPLE_ID].to_list() == [f"u{i}" for i in range(rows)]


def test_verl_inference_only_batch_is_refused(seeded: Path) -> None:
    path = FIXTURES / "verl_gen_batch.dp"
    ran = cli("ingest", str(path), "--run", "g", "-q", "--trust-pickle")
    assert ran.code == 1
    assert ran.err == (
        f"Error: {path} holds only the inference side: `rollout_log_probs` but no "
        "`old_log_probs` (batch keys: responses, response_mask, rollout_log_probs, prompts, "
        "input_ids, attention_mask, position_ids). This is a generation batch (such as verl's "
        "rollout-skip gen_batch.dp), saved before the actor recomputes the logprobs\n\n"
        "Hint: save the batch after the actor's compute_log_prob has added old_log_probs (in "
        "the trainer's fit loop), or name the trainer key with --map trainer=<key>.\n"
    )


def test_verl_without_response_mask_uses_the_attention_mask(store: Path) -> None:
    path = FIXTURES / "verl_no_mask_step5.pkl"
    mismatchctl.ingest([path], run="a", store=store, trust_pickle=True)
    source = mismatchctl.open_store(store).run("a").sources[0]
    assert source.columns[S.ROLE_MASK] == "attention_mask (response part)"
    assert (
        "no `response_mask`: the response part of `attention_mask` is the mask (padding "
        "excluded; tool tokens would count)"
    ) in source.notes
    seqs = _rows(store, "a", "sequences")
    # step 4's two responses (9 and 6 tokens, padded to 10): every response token counts
    assert seqs[S.MODEL_TOKENS].to_list() == [9, 6]
    assert seqs[S.PAD_TOKENS].to_list() == [1, 4]
    assert seqs[S.STEP].unique().to_list() == [5]


def test_verl_tool_tokens_under_the_attention_mask_are_refused(seeded: Path) -> None:
    path = FIXTURES / "verl_no_mask_tools_step6.pkl"
    before = tree_digest(seeded)
    ran = cli("ingest", str(path), "--run", "t", "-q", "--trust-pickle")
    assert ran.code == 1
    assert tree_digest(seeded) == before
    assert ran.err == (
        f"Error: {path}: the batch has no `response_mask`, and the response part of "
        "`attention_mask` (the mask then) counts 10 tokens in runs of >= 4 where one side is "
        "exactly 0.0 and the other drops to p <= 0.5 (first in sample `0`, row 0): "
        "tool-response tokens, which verl fills with 0.0 on the rollout side and "
        "attention_mask does not exclude\n\nHint: save the batch after verl adds "
        "response_mask (its fit loop does right after generation), or name a 0/1 mask of the "
        "model tokens with --map mask=<key>.\n"
    )


def test_verl_tool_tokens_read_with_a_mapped_mask(store: Path, tmp_path: Path) -> None:
    batch = _batch(2, 10)
    keep = np.array([[1, 1, 1, 0, 0, 0, 0, 0, 1, 1]] * 2)
    batch["rollout_log_probs"][~keep.astype(bool)] = 0.0
    batch.pop("response_mask")
    batch["loss_mask"] = keep
    batch["attention_mask"] = np.ones((2, 14), dtype=np.int64)
    path = write_dataproto(tmp_path / "step_1.pkl", batch, {"uid": uids(2)})
    mismatchctl.ingest([path], run="m", store=store, trust_pickle=True, mapping=["mask=loss_mask"])
    seqs = _rows(store, "m", "sequences")
    assert seqs[S.MODEL_TOKENS].to_list() == [5, 5]
    assert seqs[S.TOOL_TOKENS].to_list() == [5, 5]
    assert seqs[S.STEP].unique().to_list() == [1]  # from the file name


def test_prompt_lengths_against_numpy() -> None:
    rng = np.random.default_rng(8)
    prompt, response = 6, 5
    attention = np.zeros((9, prompt + response), dtype=bool)
    for row, (p, r) in enumerate(zip(rng.integers(0, 7, 9), rng.integers(0, 6, 9), strict=True)):
        attention[row, prompt - p : prompt] = True  # prompts are left-padded
        attention[row, prompt : prompt + r] = True
    expected = np.array([int(row[:prompt].sum()) for row in attention])
    assert np.array_equal(prompt_lengths(attention, response), expected)


def test_verl_bypass_mode_is_noted(store: Path, tmp_path: Path) -> None:
    batch = _batch()
    batch["old_log_probs"] = batch["rollout_log_probs"].copy()
    path = write_dataproto(tmp_path / "step_4.pkl", batch, {"uid": uids(2)})
    mismatchctl.ingest([path], run="b", store=store, trust_pickle=True)
    notes = mismatchctl.open_store(store).run("b").sources[0].notes
    assert any(n.startswith("the two sides are equal on every model token") for n in notes)


@pytest.mark.parametrize(
    ("drop", "message"),
    [
        ("rollout_log_probs", "the DataProto batch has no `rollout_log_probs` (batch keys: "),
        ("response_mask", "the batch has neither `response_mask` nor `attention_mask`"),
    ],
)
def test_verl_missing_keys(seeded: Path, tmp_path: Path, drop: str, message: str) -> None:
    batch = _batch()
    batch.pop(drop)
    path = write_dataproto(tmp_path / "step_1.pkl", batch, {"uid": uids(2)})
    ran = cli("ingest", str(path), "--run", "x", "-q", "--trust-pickle")
    assert ran.code == 1
    assert ran.err.startswith(f"Error: {path}: {message}")


def test_verl_shapes_must_agree(seeded: Path, tmp_path: Path) -> None:
    batch = _batch(2, 3)
    batch["old_log_probs"] = np.zeros((2, 4), dtype=np.float32)
    path = write_dataproto(tmp_path / "step_1.pkl", batch, {"uid": uids(2)})
    ran = cli("ingest", str(path), "--run", "x", "-q", "--trust-pickle")
    assert ran.err.startswith(
        f"Error: {path}: batch key `old_log_probs` has shape [2, 4], expected [2, 3], the "
        "shape of `rollout_log_probs`"
    )


def test_verl_bad_value_names_the_sample(seeded: Path, tmp_path: Path) -> None:
    batch = _batch(3, 4)
    batch["old_log_probs"][1, 2] = np.nan
    path = write_dataproto(tmp_path / "step_1.pkl", batch, {"uid": uids(3)})
    ran = cli("ingest", str(path), "--run", "x", "-q", "--trust-pickle")
    assert ran.code == 1
    assert "sample `u1` (row 1): trainer logprob nan at position 2" in ran.err


def test_verl_unknown_map_role(seeded: Path) -> None:
    ran = cli("ingest", str(VERL[0]), "--run", "x", "-q", "--trust-pickle", "--map", "gpu=g")
    assert ran.err.startswith("Error: --map gpu=... is not read from verl DataProto pickles")


def test_verl_pickle_named_pt_is_detected(seeded: Path, tmp_path: Path) -> None:
    path = tmp_path / "batch.pt"
    shutil.copy(VERL[0], path)
    ran = cli("ingest", str(path), "--run", "x", "-q")
    assert ran.err.startswith(f"Error: {path} is a verl DataProto pickle")


def test_other_pickles_are_not_guessed(seeded: Path, tmp_path: Path) -> None:
    path = tmp_path / "dump.pkl"
    path.write_bytes(pickle.dumps({"rollout_log_probs": np.zeros(3)}, protocol=4))
    ran = cli("ingest", str(path), "--run", "x", "-q")
    assert ran.code == 1
    assert ran.err.startswith(
        f"Error: {path} is not a verl DataProto pickle (it names "
        "`numpy._core.multiarray._reconstruct` first; expected `verl.protocol.DataProto`)"
    )


def test_first_global_reads_no_more_than_opcodes(tmp_path: Path) -> None:
    assert first_global(VERL[0]) == "verl.protocol.DataProto"
    assert first_global(FIXTURES / "slime_train_3.pt") is None  # a torch zip archive
    garbage = tmp_path / "g.pkl"
    garbage.write_bytes(b"\x80\x04garbage")
    assert first_global(garbage) is None
    proto2 = tmp_path / "p2.pkl"
    proto2.write_bytes(pickle.dumps(Payload(tmp_path / "m"), protocol=2))
    assert first_global(proto2) == "io.open"
    assert not (tmp_path / "m").exists()


def _globals(raw: bytes) -> set[str]:
    """Every name a pickle asks its unpickler for."""

    names: set[str] = set()

    class Recorder(RestrictedUnpickler):
        def find_class(self, module: str, name: str) -> object:
            names.add(f"{module}.{name}")
            return super().find_class(module, name)

    Recorder(io.BytesIO(raw), {"torch.Size": torch.Size}).load()
    return names


def test_the_test_writer_writes_what_verl_writes() -> None:
    """tests/dataproto.py against the file verl 0.9.1 wrote with the numpy serialization."""
    real = (FIXTURES / "verl_batch_numpy_step3.pkl").read_bytes()
    ours = dataproto_bytes(_batch(), {"uid": uids(2), "index": uids(2)}, {"global_steps": 3})
    assert _globals(ours) == _globals(real)
    assert ours[:2] == real[:2] == b"\x80\x04"  # protocol 4, as pickle.dump by default


def test_verl_needs_torch(seeded: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)
    ran = cli("ingest", str(VERL[0]), "--run", "x", "-q", "--trust-pickle")
    assert ran.err == (
        f"Error: reading {VERL[0]} (a verl DataProto pickle) needs torch, which is not "
        "installed\n\nHint: pip install 'mismatchctl[torch]'\n"
    )


def test_verl_truncated_file(seeded: Path, tmp_path: Path) -> None:
    path = tmp_path / "cut.pkl"
    path.write_bytes(VERL[0].read_bytes()[:2000])
    ran = cli("ingest", str(path), "--run", "x", "-q", "--trust-pickle")
    assert ran.code == 1
    assert ran.err.startswith(f"Error: cannot read {path} as a verl DataProto pickle: ")
    assert "Hint: the file is truncated or corrupt" in ran.err


# --- prime-rl token exports ----------------------------------------------------------------


def test_prime_exports_give_the_reference_rows(reference: Path) -> None:
    """The shared samples as prime-rl exports them: the prompt in the sequence (positions + 3),
    the fully masked response not exported, ids rank<R>-<export_sequence_idx>."""
    result = mismatchctl.ingest(PRIME, run="p", store=reference)
    assert {f.format for f in result.files} == {"prime-jsonl"}
    rows = _rows(reference, "p")
    ref = _rows(reference, "ref")
    same = [S.STEP, S.TURN, S.TOKEN_ID, S.ROLLOUT, S.TRAINER]
    assert rows.select(same).equals(ref.select(same))
    assert (rows[S.POSITION] - ref[S.POSITION]).unique().to_list() == [3]
    ref_ids = [f"rank0-{sid}" for sid in ref[S.SAMPLE_ID].to_list()]
    assert rows[S.SAMPLE_ID].to_list() == ref_ids
    seqs = _rows(reference, "p", "sequences")
    assert seqs[S.PROMPT_TOKENS].to_list() == [3, 3, 3, 3]
    assert seqs[S.MODEL_TOKENS].to_list() == [6, 4, 6, 5]


def test_prime_ce_only_tokens_are_not_model_tokens(store: Path, tmp_path: Path) -> None:
    """As prime-rl's own mismatch KL: loss-mask tokens that are rl or ref_kl members."""
    rng = np.random.default_rng(4)
    n = 40
    loss_mask = rng.random(n) < 0.7
    rl = np.where(rng.random(n) < 0.5, 1.0, 0.0)
    ref_kl = np.where(rng.random(n) < 0.2, 0.5, 0.0)
    inference = [float(np.float32(v)) for v in -rng.exponential(1, n)]
    trainer = [float(np.float32(v)) for v in -rng.exponential(1, n)]
    weights = {"rl_weights": rl.tolist(), "ce_weights": (1 - rl).tolist()}
    weights["ref_kl_weights"] = ref_kl.tolist()
    ids = rng.integers(0, 1000, n).tolist()
    record = export_record(7, 0, ids, loss_mask.tolist(), inference, trainer, weights)
    path = tmp_path / "token_exports" / "step_7" / "rank_0.jsonl"
    write(path, [record])
    mismatchctl.ingest([path], run="ce", store=store)
    model = loss_mask & ((rl != 0) | (ref_kl != 0))
    rows = _rows(store, "ce")
    assert np.array_equal(rows[S.POSITION].to_numpy(), np.flatnonzero(model))
    assert np.array_equal(rows[S.ROLLOUT].to_numpy(), np.array(inference)[model])
    assert np.array_equal(rows[S.TRAINER].to_numpy(), np.array(trainer)[model])
    notes = mismatchctl.open_store(store).run("ce").sources[0].notes
    excluded = int((loss_mask & ~model).sum())
    assert excluded > 0
    assert (
        f"{excluded} loss-mask tokens of the ce component only (no sampling logprobs) are not "
        "counted as model tokens, as in prime-rl's own mismatch KL"
    ) in notes


def test_prime_null_logprob_is_a_bad_sample(seeded: Path, tmp_path: Path) -> None:
    """prime-rl writes non-finite values as null: at a model token that is bad data."""
    records = [
        export_record(
            2,
            i,
            [1, 2, 3, 4],
            [False, True, True, True],
            [0.0, -1.0, -0.5, -0.25],
            [-3.0, -1.1, -0.4, -0.3],
        )
        for i in range(3)
    ]
    records[1]["trainer_logprobs"][2] = None
    path = tmp_path / "rank_0.jsonl"
    write(path, records)
    before = tree_digest(seeded)
    ran = cli("ingest", str(path), "--run", "n", "-q")
    assert ran.code == 1
    assert tree_digest(seeded) == before
    assert "sample `rank0-1` (line 2): trainer logprob nan at position 2" in ran.err
    ran = cli("ingest", str(path), "--run", "n", "-q", "--skip-bad", "--json")
    assert ran.code == 0, ran.err
    totals = json.loads(ran.out)["totals"]
    assert totals["sequences"] == 2 and totals["dropped"] == {"trainer logprob not finite": 1}


def test_prime_line_without_trainer_side(seeded: Path, tmp_path: Path) -> None:
    record = export_record(2, 0, [1, 2], [False, True], [0.0, -1.0], [-3.0, -1.1])
    del record["trainer_logprobs"]
    path = tmp_path / "rank_0.jsonl"
    write(path, [record])
    ran = cli("ingest", str(path), "--run", "n", "-q", "--format", "prime-jsonl")
    assert ran.code == 1
    assert ran.err.startswith(f"Error: {path}: line 1 has no `trainer_logprobs` (found: ")


def test_prime_weight_stream_of_the_wrong_length(seeded: Path, tmp_path: Path) -> None:
    record = export_record(2, 0, [1, 2], [False, True], [0.0, -1.0], [-3.0, -1.1])
    record["rl_weights"] = [1.0]
    path = tmp_path / "rank_0.jsonl"
    write(path, [record])
    ran = cli("ingest", str(path), "--run", "n", "-q")
    assert ran.err.startswith(
        f"Error: {path}: line 1: `rl_weights`: expected 2 weights (one per token, no null), "
        "found 1 with 0 null"
    )


# --- one-sided files -----------------------------------------------------------------------


def test_trl_completions_table_is_refused(seeded: Path) -> None:
    path = FIXTURES / "trl" / "completions_00010.parquet"
    before = tree_digest(seeded)
    ran = cli("ingest", str(path), "--run", "t", "-q")
    assert ran.code == 1
    assert tree_digest(seeded) == before
    assert ran.err == (
        f"Error: {path} is a TRL GRPOTrainer completions table (log_completions: step, "
        "prompt, completion, advantage; other columns: accuracy_reward, format_reward): it "
        "holds texts, rewards and advantages, and no per-token logprobs of either side\n\n"
        "Hint: TRL keeps vLLM's sampling_per_token_logps and the trainer's "
        "old_per_token_logps in memory only; save them per step with completion_mask as one "
        "row per completion, then ingest that file (docs/frameworks.md, TRL).\n"
    )
    text = cli("ingest", str(FIXTURES / "trl" / "completions_00020.parquet"), "--run", "t")
    assert "other columns: reward_len): it holds texts" in text.err


def test_prime_inference_parquet_is_refused(seeded: Path) -> None:
    path = next((FIXTURES / "prime_rollouts").rglob("*.parquet"))
    ran = cli("ingest", str(path), "--run", "t", "-q")
    assert ran.code == 1
    assert ran.err == (
        f"Error: {path} is a prime-rl inference Parquet: it holds only the inference side "
        "(input_logprobs, output_logprobs; input_logprobs are zeros for the prompt), no "
        "trainer logprobs\n\nHint: prime-rl's trainer writes both sides with "
        "enable_token_export = true (token_exports/step_<N>/rank_<R>.jsonl, read as "
        "prime-jsonl); if this file has the trainer's logprobs in another column, name it "
        "with --map trainer=<column> (docs/frameworks.md, prime-rl).\n"
    )


def test_prime_inference_parquet_with_a_mapped_trainer_column(store: Path, tmp_path: Path) -> None:
    table = pq.read_table(next((FIXTURES / "prime_rollouts").rglob("*.parquet")))
    rng = np.random.default_rng(2)
    lengths = [len(v) for v in table.column("output_logprobs").to_pylist()]
    trainer = [(-rng.exponential(1, n)).astype(np.float32).tolist() for n in lengths]
    path = tmp_path / "step_3" / "x.parquet"
    path.parent.mkdir()
    pq.write_table(
        table.append_column("my_trainer", pa.array(trainer, pa.list_(pa.float32()))), path
    )
    mismatchctl.ingest([path], run="m", store=store, mapping=["trainer=my_trainer"])
    rows = _rows(store, "m")
    rollout = np.concatenate(
        [np.array(v, np.float32) for v in table.column("output_logprobs").to_pylist()]
    )
    assert np.array_equal(rows[S.ROLLOUT].to_numpy(), rollout.astype(np.float64))
    assert np.array_equal(rows[S.TRAINER].to_numpy(), np.concatenate(trainer).astype(np.float64))
    assert rows[S.STEP].unique().to_list() == [3]
    source = mismatchctl.open_store(store).run("m").sources[0]
    assert source.columns[S.ROLE_ROLLOUT] == "output_logprobs"
    assert source.columns[S.ROLE_TOKENS] == "output_tokens"


def test_help_names_the_formats() -> None:
    text = " ".join(cli("ingest", "--help").out.split())
    assert "verl-dataproto" in text and "prime-jsonl" in text
    assert "DataProto" in text and "restricted unpickler" in text


def _fake_module(monkeypatch: pytest.MonkeyPatch, name: str, **attrs: object) -> None:
    """A module of that name for pickle to find (it checks ``sys.modules[module].<name>``)."""
    import types

    module = types.ModuleType(name)
    for key, value in attrs.items():
        value.__module__ = name  # type: ignore[attr-defined]
        value.__qualname__ = key  # type: ignore[attr-defined]
        setattr(module, key, value)
    monkeypatch.setitem(sys.modules, name, module)


def _unconsolidated(monkeypatch: pytest.MonkeyPatch, old: bool, batch: dict) -> bytes:
    """Batch bytes in tensordict's other two layouts (written here, not by tensordict, which
    does not import with this torch for < 0.5): ``_make_td(TensorDict, state)`` (>= 0.5,
    unconsolidated) and a plain object whose state holds ``_tensordict`` (< 0.5)."""

    class TensorDict:
        def __init__(self, tensors: dict) -> None:
            self._tensordict = tensors
            self._batch_size = torch.Size([2])
            self._device = None
            self._is_locked = False

        def __reduce_ex__(self, protocol: int) -> tuple:
            if old:
                return super().__reduce_ex__(protocol)
            return (_make_td, (TensorDict, dict(self.__dict__)))

    def _make_td(cls: object, state: dict) -> None:
        raise AssertionError("never called when reading")

    _fake_module(monkeypatch, "tensordict")
    _fake_module(monkeypatch, "tensordict._td", TensorDict=TensorDict)
    _fake_module(monkeypatch, "tensordict._reductions", _make_td=_make_td)
    buffer = io.BytesIO()
    torch.save(TensorDict({k: torch.as_tensor(v) for k, v in batch.items()}), buffer)
    return buffer.getvalue()


@pytest.mark.parametrize("old", [False, True])
def test_verl_unconsolidated_batches(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, old: bool
) -> None:
    batch = _batch(2, 3)
    raw = _unconsolidated(monkeypatch, old, batch)
    monkeypatch.undo()  # tensordict is not importable while the file is read
    path = write_dataproto(tmp_path / "step_1.pkl", raw, {"uid": uids(2)})
    mismatchctl.ingest([path], run="u", store=store, trust_pickle=True)
    rows = _rows(store, "u")
    expected = batch["rollout_log_probs"].astype(np.float64).reshape(-1)
    assert np.array_equal(rows[S.ROLLOUT].to_numpy(), expected)


def test_verl_mapped_key_must_exist(seeded: Path) -> None:
    ran = cli("ingest", str(VERL[0]), "--run", "x", "-q", "--trust-pickle", "-m", "mask=keep")
    assert ran.code == 1
    assert ran.err.startswith(
        f"Error: {VERL[0]}: `keep` (from --map mask=keep) is not in the DataProto (batch keys: "
    )


def test_verl_sample_ids_must_be_text(seeded: Path, tmp_path: Path) -> None:
    """A uid the restricted reader did not load (an object of a class) is no sample id."""
    ids = np.array(["a", Payload(tmp_path / "m")], dtype=object)
    path = write_dataproto(tmp_path / "step_1.pkl", _batch(), {"uid": ids})
    ran = cli("ingest", str(path), "--run", "x", "-q", "--trust-pickle")
    assert ran.err.startswith(
        f"Error: {path}: non_tensor_batch `uid`: row 1 is <not loaded: io.open>, expected text "
        "or an integer"
    )
    assert not (tmp_path / "m").exists()
