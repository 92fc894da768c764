"""`tokens --tokenizer`: ids decoded with a byte-level BPE tokenizer trained here (offline, with
the `tokenizers` library), remembered per run, byte ids, ids outside the vocabulary, and the
errors for paths that hold no tokenizer."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import mismatchctl
from mismatchctl import api
from mismatchctl.errors import UsageError
from tests.helpers import cli

tokenizers = pytest.importorskip("tokenizers")

TEXTS = [
    "The tool returned 42 results for the query.",
    "Let me check the weather in Paris first.",
    "def add(a, b):\n    return a + b",
    "I will call the search tool again with a new query.",
] * 4
OOV = 1_000_000
Setup = tuple[Path, Path, Any, list[list[int]]]  # store, tokenizer.json, tokenizer, each ids


def train(path: Path) -> tokenizers.Tokenizer:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train_from_iterator(TEXTS, trainer)
    tok.save(str(path))
    return tok


def write_dump(path: Path, tok: tokenizers.Tokenizer) -> list[list[int]]:
    """One response per text; the largest |r| planted at position 5 of every response, where
    the last response carries an id outside the vocabulary."""
    ids = [tok.encode(t).ids for t in TEXTS]
    ids[-1][5] = OOV
    lr = [[-0.1] * len(x) for x in ids]
    lt = [[-0.1] * len(x) for x in ids]
    for k, row in enumerate(lt):
        row[5] = -0.1 - 0.5 - 0.01 * k  # response k ranks k-th from the bottom
    table = pa.table({
        "step": pa.array([0] * len(ids), pa.int64()),
        "uid": [f"u{k}" for k in range(len(ids))],
        "responses": pa.array(ids, pa.list_(pa.int64())),
        "response_mask": pa.array([[1] * len(x) for x in ids], pa.list_(pa.int8())),
        "rollout_log_probs": lr,
        "old_log_probs": lt,
    })  # fmt: skip
    pq.write_table(table, path)
    return ids


@pytest.fixture
def setup(tmp_path: Path) -> Setup:
    tok = train(tmp_path / "tokenizer.json")
    ids = write_dump(tmp_path / "d.parquet", tok)
    mismatchctl.ingest([tmp_path / "d.parquet"], run="a", store=tmp_path / "store")
    return tmp_path / "store", tmp_path / "tokenizer.json", tok, ids


def _expected(tok: tokenizers.Tokenizer, ids: list[int], at: int, n: int) -> str:
    def one(i: int) -> str:
        if i >= tok.get_vocab_size():
            return f"<oov:{i}>"
        return tok.decode([i]).replace("\n", "\\n")

    before = "".join(one(i) for i in ids[max(0, at - n) : at])
    return before + f"[{one(ids[at])}]" + "".join(one(i) for i in ids[at + 1 : at + 1 + n])


def test_decoded_context_and_the_oov_marker(setup: Setup) -> None:
    store, path, tok, ids = setup
    t = api.tokens("a", store=store, top=len(TEXTS), context=4, tokenizer=str(path))
    assert [r["sample_id"] for r in t.rows[:2]] == [f"u{len(TEXTS) - 1}", f"u{len(TEXTS) - 2}"]
    for r in t.rows:
        k = int(r["sample_id"][1:])
        assert r["position"] == 5
        assert r["context"] == _expected(tok, ids[k], 5, 4)
    top = t.rows[0]
    assert top["token_id"] == OOV and top["token_text"] == f"<oov:{OOV}>"
    assert t.rows[1]["token_text"] == tok.decode([ids[-2][5]])
    assert t.tokenizers == {"a": str(path.resolve())}


def test_remembered_per_run_and_a_directory(setup: Setup, tmp_path: Path) -> None:
    store, path, tok, ids = setup
    plain = api.tokens("a", store=store, top=3)
    assert plain.tokenizers == {} and plain.rows[1]["context"].split()[0].isdigit()
    hf = tmp_path / "hf-model"
    hf.mkdir()
    shutil.copy(path, hf / "tokenizer.json")
    api.tokens("a", store=store, top=3, tokenizer=str(hf))
    again = api.tokens("a", store=store, top=3, context=4)  # no option: the run's tokenizer
    assert again.tokenizers == {"a": str(hf.resolve())}
    assert again.rows[1]["context"] == _expected(tok, ids[-2], 5, 4)
    shutil.rmtree(hf)  # the remembered tokenizer is gone: ids, and a note saying why
    gone = api.tokens("a", store=store, top=3)
    assert gone.tokenizers == {} and "cannot be read" in gone.notes[0]
    assert gone.rows[1]["context"] == plain.rows[1]["context"]
    ran = cli("tokens", "a", "--store", str(store), "-q", "--top", "2")
    assert ran.code == 0 and "note: run a: its tokenizer cannot be read" in ran.out


def test_byte_ids(tmp_path: Path) -> None:
    data = [list(b"hello, world\n"), list("héllo".encode())]
    table = pa.table({
        "step": pa.array([0, 0], pa.int64()), "uid": ["x", "y"],
        "responses": pa.array(data, pa.list_(pa.int64())),
        "response_mask": pa.array([[1] * len(d) for d in data], pa.list_(pa.int8())),
        "rollout_log_probs": [[-0.1] * len(d) for d in data],
        "old_log_probs": [[-0.1] * 4 + [-2.0] + [-0.1] * (len(d) - 5) for d in data],
    })  # fmt: skip
    pq.write_table(table, tmp_path / "b.parquet")
    mismatchctl.ingest([tmp_path / "b.parquet"], run="b", store=tmp_path / "store")
    t = api.tokens("b", store=tmp_path / "store", top=2, context=20, tokenizer="bytes")
    assert t.rows[0]["context"] == "hell[o], world\\n"
    assert t.rows[1]["context"] == "h\\xc3\\xa9l[l]o"


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("missing/tokenizer.json", "--tokenizer missing/tokenizer.json: no file"),
        ("emptydir", "--tokenizer emptydir: no tokenizer.json in the directory emptydir"),
        ("bad.json", "--tokenizer bad.json: the file is not a tokenizers JSON file"),
    ],
)
def test_bad_tokenizer_paths(
    setup: Setup, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: str, message: str
) -> None:
    store = setup[0]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "emptydir").mkdir()
    (tmp_path / "bad.json").write_text('{"not": "a tokenizer"}')
    with pytest.raises(UsageError) as info:
        api.tokens("a", store=store, tokenizer=given)
    assert message in info.value.message and info.value.hint
    assert api.tokens("a", store=store, top=1).tokenizers == {}  # nothing remembered
    ran = cli("tokens", "a", "--store", str(store), "--tokenizer", given, "-q")
    assert ran.code == 1 and message in ran.err and "Hint:" in ran.err


def test_a_removed_run_takes_its_setting_along(setup: Setup) -> None:
    store, path, _, _ = setup
    api.tokens("a", store=store, top=1, tokenizer=str(path))
    mismatchctl.remove_run("a", store=store)
    mismatchctl.ingest([store.parent / "d.parquet"], run="a", store=store)
    assert api.tokens("a", store=store, top=1).tokenizers == {}
    assert np.isfinite(api.tokens("a", store=store, top=1).cell_k3_sum)
