"""Hostile values in dumps: each is a refusal naming the file and the field, within bounded time
and memory, never a traceback (``cli`` raises any exception that is not an exit, so a
traceback fails the test). Steps beyond int64, integers of more than 4,300 digits, nesting
deeper than the JSON parser recurses, a tensor of two elements as a sample id, rebuilders asked
for gigabytes by a pickle of a kilobyte, lists that share one list many times over; and what a
refusal says: a global torch refused inside verl's batch bytes is a refusal, not damage; a
damaged tensor in a torch zip is damage, not a pickle "not written by torch.save"; code that
--trust-pickle ran is said to have run.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from mismatchctl.ingest.restricted_pickle import RestrictedUnpickler, TooLarge
from tests.helpers import FIXTURES, cli, tree_digest

torch = pytest.importorskip("torch")
from tests.dataproto import dataproto_bytes, uids, write_dataproto  # noqa: E402 (needs torch)

PRIME = json.loads((FIXTURES / "token_exports/step_3/rank_0.jsonl").read_text().splitlines()[0])
NEMO = [json.loads(x) for x in (FIXTURES / "train_data_step3.jsonl").read_text().splitlines()]
MARKER = "REPLACED"  # a uid of a verl batch that a test swaps for other pickle opcodes


class Rebuild:
    """Pickles as ``func(*args)``: what a hostile file asks an allowlisted rebuilder for."""

    def __init__(self, func: object, *args: object) -> None:
        self.func, self.args = func, args

    def __reduce__(self) -> tuple:
        return (self.func, self.args)


def _verl_batch() -> dict:
    roll = -np.linspace(0.2, 2.0, 8).reshape(2, 4)
    return {
        "rollout_log_probs": torch.tensor(roll),
        "old_log_probs": torch.tensor(roll - 0.01),
        "response_mask": torch.ones(2, 4, dtype=torch.int64),
    }


def _verl(path: Path, non_tensor: dict | None = None, **meta: object) -> Path:
    return write_dataproto(path, _verl_batch(), non_tensor or {"uid": uids(2)}, **meta)


def _verl_with(path: Path, opcodes: bytes) -> Path:
    """A verl batch whose first uid is the value ``opcodes`` build (raw pickle opcodes)."""
    data = dataproto_bytes(_verl_batch(), {"uid": [MARKER, "u1"]}, {"global_steps": 3})
    encoded = b"\x8c" + bytes([len(MARKER)]) + MARKER.encode()
    path.write_bytes(data.replace(encoded, opcodes, 1))
    return path


def _shared(depth: int, width: int) -> list:
    """A list whose items are one list, ``depth`` levels down: width**depth leaves, a small
    pickle (each level is pickled once, then referred to)."""
    value: list = ["u"]
    for _ in range(depth):
        value = [value] * width
    return value


def _jsonl(path: Path, *lines: dict | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


def _nemo_line_2(tmp: Path, line: str) -> Path:
    return _jsonl(tmp / "train_data_step3.jsonl", NEMO[0], line)


def _prime(tmp: Path, **changes: object) -> Path:
    line = {k: v for k, v in {**PRIME, **changes}.items() if v is not None}
    return _jsonl(tmp / "token_exports" / "step_3" / "rank_0.jsonl", line)


HOSTILE: dict[str, tuple[Callable[[Path], Path], str]] = {
    "prime-rl step beyond int64": (
        lambda t: _prime(t, step=10**22),
        "rank_0.jsonl: line 1: `step`: the step is beyond the 64-bit integers steps are stored as",
    ),
    "NeMo-RL file name step beyond int64": (
        lambda t: _jsonl(t / "train_data_step99999999999999999999999.jsonl", NEMO[0]),
        "the name `train_data_step99999999999999999999999.jsonl`: the step is beyond the 64-bit",
    ),
    "verl global_steps beyond int64": (
        lambda t: _verl(t / "b.pkl", global_steps=2**70),
        "b.pkl: meta_info `global_steps`: the step is beyond the 64-bit integers",
    ),
    "NeMo-RL integer of 5000 digits": (
        lambda t: _nemo_line_2(t, json.dumps(NEMO[1])[:-1] + ', "x": ' + "9" * 5000 + "}"),
        "train_data_step3.jsonl: line 2 holds an integer of more than 4,300 digits",
    ),
    "prime-rl integer of 5000 digits": (
        lambda t: _jsonl(t / "token_exports/step_3/rank_0.jsonl", '{"step": ' + "1" * 5000 + "}"),
        "rank_0.jsonl: line 1 holds an integer of more than 4,300 digits",
    ),
    "JSON nested 100,000 deep": (
        lambda t: _jsonl(t / "train_data_step3.jsonl", "[" * 100_000 + "]" * 100_000),
        "train_data_step3.jsonl: line 1 nests arrays or objects too deeply to be read",
    ),
    "JSON nested deep on a later line": (
        lambda t: _nemo_line_2(t, '{"x": ' + "[" * 100_000 + "]" * 100_000 + "}"),
        "train_data_step3.jsonl: line 2 nests arrays or objects too deeply to be read",
    ),
    "verl uid nested 200,000 deep": (
        lambda t: _verl_with(t / "b.pkl", b"]" * 200_000 + b"a" * 199_999),
        "b.pkl: non_tensor_batch `uid`: row 0 is [[[...]]], expected text or an integer",
    ),
    "verl uid of lists sharing one list": (
        lambda t: _verl(t / "b.pkl", {"uid": _shared(7, 25)}),
        "b.pkl: non_tensor_batch `uid` has 25 values, expected one per row (2)",
    ),
    "verl step of lists sharing one list": (
        lambda t: _verl(t / "b.pkl", global_steps=_shared(8, 20)),
        "b.pkl: meta_info `global_steps` is [[[...], [...], [...], [...], ...]",
    ),
    "verl bytearray of 8 GiB": (
        lambda t: _verl(t / "b.pkl", junk=Rebuild(bytearray, 8 << 30)),
        "b.pkl: refused to build builtins.bytearray(8589934592): more than the",
    ),
    "verl bytearray of 2.7 GB": (
        lambda t: _verl(t / "b.pkl", junk=Rebuild(bytearray, 2_700_000_000)),
        "b.pkl: refused to build builtins.bytearray(2700000000): more than the",
    ),
    "verl set of a range of 1e9": (
        lambda t: _verl(t / "b.pkl", junk=Rebuild(set, range(10**9))),
        "b.pkl: refused to build builtins.range of 1,000,000,000 numbers",
    ),
    "verl ndarray of 400M objects": (
        lambda t: _verl(t / "b.pkl", junk=Rebuild(np.ndarray, (400_000_000,), np.dtype(object))),
        "b.pkl: refused to build numpy.ndarray of shape [400000000] (400,000,000 elements)",
    ),
    "slime sample_index of two elements": (
        lambda t: _slime(t / "train_3.pt", sample_index=torch.tensor([1, 2])),
        "train_3.pt: sample 1: `sample_index`: expected one value, found Tensor of shape [2]",
    ),
    "a mask of true/false and 2": (
        lambda t: _prime(t, loss_mask=[False] * 5 + [2] + [True] * 7),
        "`loss_mask`: expected a list of 0/1 values, found int 2 at index 5, among true/false",
    ),
    "prime-rl line without trainer_logprobs": (
        lambda t: _prime(t, trainer_logprobs=None),
        "rank_0.jsonl: a prime-rl token export line (it has `inference_logprobs`) without "
        "`trainer_logprobs`",
    ),
}


def _slime(path: Path, **second: object) -> Path:
    samples = [
        {
            "sample_index": i,
            "rollout_log_probs": torch.tensor([-0.1, -0.5, -2.0]),
            "log_probs": torch.tensor([-0.12, -0.45, -2.1]),
            "loss_masks": [1, 1, 0],
        }
        for i in range(3)
    ]
    samples[1].update(second)
    torch.save({"rollout_id": 3, "samples": samples}, path)
    return path


@pytest.fixture
def seeded(store: Path) -> Path:
    assert cli("ingest", str(FIXTURES / "sequence.parquet"), "--run", "base", "-q").code == 0
    return store


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_values_are_refused_by_name(seeded: Path, tmp_path: Path, case: str) -> None:
    build, expected = HOSTILE[case]
    path = build(tmp_path)
    before = tree_digest(seeded)
    started = time.monotonic()
    ran = cli("ingest", str(path), "--run", "x", "-q", "--trust-pickle")
    assert time.monotonic() - started < 20  # bounded: the 2.7 GB pickle took 9 s and more
    assert ran.code == 1 and ran.out == "", ran.err
    assert ran.err.startswith("Error: ") and "\n\nHint: " in ran.err, ran.err
    assert expected in ran.err, ran.err
    assert tree_digest(seeded) == before


def test_rebuilders_refuse_before_allocating() -> None:
    """The restricted unpickler refuses what a pickle cannot hold before any allocation: a
    kilobyte never makes it take more than a few MB (it took 2.7 GB)."""
    tracemalloc.start()
    try:
        for payload in (Rebuild(bytearray, 2_700_000_000), Rebuild(bytearray, 8 << 30)):
            raw = pickle.dumps({"x": payload}, protocol=4)
            with pytest.raises(TooLarge):
                RestrictedUnpickler(io.BytesIO(raw), {}).load()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 10 << 20
    # what numpy and pickle write themselves still loads
    raw = pickle.dumps({"a": np.arange(5), "b": bytearray(b"xyz")}, protocol=4)
    loaded = RestrictedUnpickler(io.BytesIO(raw), {}).load()
    assert loaded["a"].tolist() == [0, 1, 2, 3, 4] and loaded["b"] == b"xyz"
    items = {"s": {1, 2}, "f": frozenset("ab"), "r": range(3)}
    raw = pickle.dumps(items, protocol=2, fix_imports=False)  # builtins.set((1, 2)) etc.
    assert RestrictedUnpickler(io.BytesIO(raw), {}).load() == {
        "s": {1, 2},
        "f": frozenset("ab"),
        "r": range(3),
    }


class Payload:
    """Unpickling this object creates ``marker``: the proof that code from the file ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (os.system, (f"touch {self.marker}",))


def test_an_unsafe_global_in_verl_batch_bytes_is_refused_not_corrupt(
    seeded: Path, tmp_path: Path
) -> None:
    buffer = io.BytesIO()
    torch.save({"x": Payload(tmp_path / "marker")}, buffer)
    path = write_dataproto(tmp_path / "b.pkl", buffer.getvalue(), {"uid": uids(2)}, global_steps=3)
    ran = cli("ingest", str(path), "--run", "x", "-q", "--trust-pickle")
    assert ran.code == 1
    assert ran.err.startswith(
        f"Error: {path}: the DataProto batch refers to `posix.system`, which the restricted "
        "reader does not load"
    ), ran.err
    assert "refused, and nothing from it ran" in ran.err
    assert "corrupt" not in ran.err and "Weights only load failed" not in ran.err
    assert not (tmp_path / "marker").exists()


def test_code_that_trust_pickle_ran_is_said_to_have_run(seeded: Path, tmp_path: Path) -> None:
    """A raw pickle named .pt: --trust-pickle unpickles it (the code runs: documented), then
    torch finds no torch file; the message says what ran, not "corrupt file?"."""
    path = tmp_path / "train_3.pt"
    path.write_bytes(pickle.dumps(Payload(tmp_path / "marker"), protocol=2))
    ran = cli("ingest", str(path), "--run", "x", "-q", "--trust-pickle")
    assert (tmp_path / "marker").exists()
    assert ran.code == 1
    assert ran.err.startswith(
        f"Error: {path}: full unpickling (--trust-pickle) ran its pickle, which calls "
        "`posix.system`, and torch then found it is no torch file (no torch magic number)"
    ), ran.err
    assert "the code it names has run with your permissions" in ran.err
    assert "corrupt" not in ran.err


def test_a_damaged_tensor_in_a_torch_zip_is_damage(seeded: Path, tmp_path: Path) -> None:
    import zipfile

    good = _slime(tmp_path / "good.pt")
    path = tmp_path / "train_3.pt"
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(path, "w") as out:
        for name in src.namelist():
            data = src.read(name)
            out.writestr(name, data[: len(data) // 2] if name.endswith("/data/0") else data)
    ran = cli("ingest", str(path), "--run", "x", "-q")
    assert ran.code == 1
    assert ran.err.startswith(f"Error: cannot load {path} as a torch file: "), ran.err
    assert "a tensor's data in the archive is damaged" in ran.err
    assert "Hint: the file is truncated or corrupt" in ran.err
    assert "--trust-pickle" not in ran.err and "not one written by torch.save" not in ran.err


def _nemo_masks(path: Path, without: int) -> Path:
    lines = [{k: v for k, v in x.items() if i != without or k != "token_loss_mask"}
             for i, x in enumerate(NEMO)]  # fmt: skip
    return _jsonl(path, *lines)


@pytest.mark.parametrize("without", [0, 1])
def test_each_nemo_sample_uses_its_own_mask(store: Path, tmp_path: Path, without: int) -> None:
    """A line without the mask that other lines have is a bad sample named by its line, where
    it is (the first line or a later one); with --skip-bad the others keep their own masks."""
    path = _nemo_masks(tmp_path / "train_data_step3.jsonl", without)
    ran = cli("ingest", str(path), "--run", "x", "-q")
    assert ran.code == 1
    assert ran.err.startswith(
        f"Error: {path}: sample `{NEMO[without].get('idx', without)}` "
        f"(line {without + 1}): no `token_loss_mask`, which other samples of the file have"
    ), ran.err
    ran = cli("ingest", str(path), "--run", "x", "-q", "--skip-bad", "--json")
    assert ran.code == 0, ran.err
    expected = sum(
        int(np.sum(np.asarray(x["token_loss_mask"][0])[: x["input_lengths"][0]]))
        for i, x in enumerate(NEMO)
        if i != without
    )
    assert json.loads(ran.out)["totals"]["model_tokens"] == expected


def test_each_slime_sample_uses_its_own_mask(store: Path, tmp_path: Path) -> None:
    """The first sample has no loss_masks, samples 1 and 2 have: sample 0 is bad (named), and
    the file is not noted as having no loss_masks."""
    path = _slime(tmp_path / "train_3.pt")
    data = torch.load(path)
    del data["samples"][0]["loss_masks"]
    torch.save(data, path)
    ran = cli("ingest", str(path), "--run", "x", "-q")
    assert ran.code == 1
    assert "sample `0` (sample 0): no `loss_masks`, which other samples of the file have" in ran.err
    ran = cli("ingest", str(path), "--run", "x", "-q", "--skip-bad", "--json")
    assert json.loads(ran.out)["totals"]["model_tokens"] == 4  # [1, 1, 0] twice
    shown = cli("runs", "show", "x", "--json").out
    assert "no loss_masks" not in shown


def test_a_mask_appearing_after_a_batch_without_one_refuses_the_file() -> None:
    from mismatchctl.errors import InputError
    from mismatchctl.ingest.nemo import MaskPresence

    masks = MaskPresence("f.jsonl", "token_loss_mask")
    masks.see(1, False)
    masks.see(2, True)  # the same batch: line 1 is a bad sample, judged there
    assert masks.any
    late = MaskPresence("f.jsonl", "token_loss_mask")
    late.see(1, False)
    late.yielded()  # lines 1.. handed on without masks
    with pytest.raises(InputError, match="line 7 has `token_loss_mask`, but the lines from line 1"):
        late.see(7, True)


def test_token_text_with_a_line_separator_is_escaped(store: Path, tmp_path: Path) -> None:
    """U+2028 and U+2029 in a token's text (a tokenizer decodes them) reach no terminal raw."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from tokenizers import Tokenizer, models

    vocab = {"[UNK]": 0, "a\u2028b": 1, "c\u2029d": 2}
    Tokenizer(models.WordLevel(vocab, unk_token="[UNK]")).save(str(tmp_path / "tokenizer.json"))
    table = pa.table({
        "step": [0], "uid": ["s"], "responses": [[1, 2, 1]], "response_mask": [[1, 1, 1]],
        "rollout_log_probs": [[-0.1, -0.2, -0.3]], "old_log_probs": [[-0.5, -0.9, -0.1]],
    })  # fmt: skip
    pq.write_table(table, tmp_path / "d.parquet")
    assert cli("ingest", str(tmp_path / "d.parquet"), "--run", "t", "-q").code == 0
    ran = cli("tokens", "t", "--tokenizer", str(tmp_path / "tokenizer.json"))
    assert ran.code == 0, ran.err
    assert "\u2028" not in ran.out + ran.err and "\u2029" not in ran.out + ran.err
    assert "a\\u2028b" in ran.out and "c\\u2029d" in ran.out
