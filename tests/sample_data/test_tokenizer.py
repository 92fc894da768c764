"""The sample runs' tokenizer (sample_data/tokenizer.json): byte-level, id i = byte i, the file
the generator's function writes, and read as `bytes` with or without the `tokenizers` library."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from mismatchctl.analysis.tokenizer import byte_alphabet, byte_text, is_byte_level
from mismatchctl.analysis.tokenizer import load as load_tokenizer
from mismatchctl.errors import MissingDependencyError

tokenizers = pytest.importorskip("tokenizers")

SAMPLE = Path(__file__).resolve().parents[2] / "sample_data"
COMMITTED = SAMPLE / "tokenizer.json"
# ASCII, a 2-byte, a 3-byte and a 4-byte UTF-8 character, controls
TEXT = "def f(x):\n\treturn 'é' + '中' + '🙂'\r\n"


def _gen() -> object:
    sys.path.insert(0, str(SAMPLE))
    from gen import tokenizer

    return tokenizer


def test_the_committed_file_is_the_generators() -> None:
    gen = _gen()
    made = gen.byte_tokenizer()  # type: ignore[attr-defined]
    # the same tokenizer, serialized by the installed library (its layout varies by version)
    assert tokenizers.Tokenizer.from_file(str(COMMITTED)).to_str() == made.to_str()
    assert json.loads(COMMITTED.read_text())["model"]["vocab"] == made.get_vocab()
    manifest = json.loads((SAMPLE / "manifest.json").read_text())
    assert manifest["tokenizer"] == gen.FILE_NAME == COMMITTED.name  # type: ignore[attr-defined]


def test_ids_are_the_bytes_and_decode_back_to_text() -> None:
    tok = tokenizers.Tokenizer.from_file(str(COMMITTED))
    data = TEXT.encode()
    assert tok.encode(TEXT).ids == list(data)
    assert tok.decode(list(data)) == TEXT  # multi-byte characters across tokens, whole
    assert tok.get_vocab_size() == 256
    for b in range(256):  # every byte, alone
        assert tok.decode([b]).encode() == (bytes([b]) if b < 128 else "\ufffd".encode())


def test_the_package_reads_it_as_bytes_without_the_library(monkeypatch) -> None:
    assert byte_alphabet() == _gen().byte_alphabet()  # type: ignore[attr-defined]
    assert set(byte_alphabet()) == set(tokenizers.pre_tokenizers.ByteLevel.alphabet())
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "tokenizers" else real(name)
    )
    decode = load_tokenizer(str(COMMITTED))
    assert decode is byte_text  # diagnose's token classes know it: bytes 128-255 are pieces
    assert load_tokenizer(str(SAMPLE)) is byte_text  # the directory holding it
    got = decode(list(TEXT.encode()))
    assert got[:4] == ["d", "e", "f", " "] and got[9:11] == ["\\n", "\\t"]
    # a multi-byte character is one entry per byte (never U+FFFD): é = C3 A9
    at = TEXT.encode().index("é".encode())
    assert got[at : at + 2] == ["\\xc3", "\\xa9"]
    assert "".join(got).endswith("\\xf0\\x9f\\x99\\x82'\\r\\n")


def test_other_tokenizers_are_not_read_as_bytes(tmp_path: Path, monkeypatch) -> None:
    doc = json.loads(COMMITTED.read_text())
    vocab = doc["model"]["vocab"]
    swapped = {**vocab, "a": vocab["b"], "b": vocab["a"]}  # two ids exchanged
    added = {**doc, "added_tokens": [{"id": 256, "content": "<|eos|>", "special": True}]}
    cases = {
        "swapped": {**doc, "model": {**doc["model"], "vocab": swapped}},
        "added": added,
        "decoder": {**doc, "decoder": {"type": "Fuse"}},
        "short": {**doc, "model": {**doc["model"], "vocab": dict(list(vocab.items())[:255])}},
    }
    for name, case in cases.items():
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(case))
        assert not is_byte_level(path), name
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(MissingDependencyError, match="needs the `tokenizers` library"):
        load_tokenizer(str(tmp_path / "swapped.json"))
