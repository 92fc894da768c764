"""Token ids as text: a ``tokenizer.json`` (or a Hugging Face tokenizer directory holding one),
read with the ``tokenizers`` library from disk (nothing is downloaded), or ``bytes`` for runs
whose ids are bytes (a byte-level model: id = byte value).

A tokenizer.json whose vocabulary is the 256 bytes, id i = byte i, in the byte-level (GPT-2)
spelling with a ByteLevel decoder (``sample_data/tokenizer.json``), is read without the library:
it decodes as ``bytes`` does, each id on its own. A byte of a multi-byte UTF-8 character is
therefore ``\\xNN`` (the library would give U+FFFD for it alone), the same with or without the
library installed.

``--tokenizer`` is remembered per run (``store/run_settings.py``): a later command on the run
decodes with it without the option. Ids the vocabulary does not hold are shown as ``<oov:ID>``,
a token without an id as ``?``; a remembered tokenizer that can no longer be read leaves the ids
as numbers, and the result says why.
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mismatchctl.analysis.tokens.text import Decoder, ids_text
from mismatchctl.errors import MissingDependencyError, UsageError
from mismatchctl.options import TOKENIZER_BYTES as BYTES
from mismatchctl.store import Store
from mismatchctl.store.run_settings import TOKENIZER, run_setting, set_run_setting
from mismatchctl.store.writable import StoreNotWritable

FILE_NAME = "tokenizer.json"
VISIBLE = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# a tokenizer.json of the 256 bytes is about 5 KB: larger files are not read as JSON twice
BYTE_LEVEL_MAX_SIZE = 1 << 16


def _visible(text: str) -> str:
    return "".join(VISIBLE.get(c, c) for c in text)


def oov(i: int) -> str:
    return f"<oov:{i}>"


def byte_text(ids: Sequence[int | None]) -> list[str]:
    """Each id 0-255 as its byte: printable ASCII as the character, others as ``\\xNN``."""
    out = []
    for i in ids:
        if i is None:
            out.append("?")
        elif not 0 <= i < 256:
            out.append(oov(i))
        elif 32 <= i < 127:
            out.append(chr(i))
        else:
            out.append(VISIBLE.get(chr(i), f"\\x{i:02x}"))
    return out


@dataclass
class HFDecoder:
    """Each id decoded on its own (special tokens kept), newlines and tabs made visible."""

    tokenizer: Any
    size: int

    def __call__(self, ids: Sequence[int | None]) -> list[str]:
        out = []
        for i in ids:
            if i is None:
                out.append("?")
            elif not 0 <= i < self.size:
                out.append(oov(i))
            else:
                out.append(_visible(self.tokenizer.decode([i], skip_special_tokens=False)))
        return out


def byte_alphabet() -> list[str]:
    """The byte-level (GPT-2 ``bytes_to_unicode``) spelling of each byte, indexed by byte:
    printable Latin-1 bytes stand for themselves, the others for code points from 256 on."""
    printable = {*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)}
    out, extra = [], 0
    for b in range(256):
        out.append(chr(b) if b in printable else chr(256 + extra))
        extra += b not in printable
    return out


def is_byte_level(file: Path) -> bool:
    """Whether a tokenizer.json is the identity on bytes: its model's vocabulary is exactly
    the 256 byte-level pieces with id i = byte i, its decoder ByteLevel, no added tokens."""
    if file.stat().st_size > BYTE_LEVEL_MAX_SIZE:
        return False
    try:
        doc = json.loads(file.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return False  # the library's reader names what is wrong with it
    if not isinstance(doc, dict):
        return False
    model, decoder = doc.get("model"), doc.get("decoder")
    vocab = model.get("vocab") if isinstance(model, dict) else None
    return (
        isinstance(decoder, dict)
        and decoder.get("type") == "ByteLevel"
        and not doc.get("added_tokens")
        and vocab == {piece: i for i, piece in enumerate(byte_alphabet())}
    )


def load(path: str) -> Decoder:
    """The decoder of ``path`` (as the user gave it): ``bytes``, a tokenizer.json, or a
    directory holding one. A UsageError names the path when it cannot be read."""
    if path == BYTES:
        return byte_text
    file = Path(path) / FILE_NAME if Path(path).is_dir() else Path(path)
    if not file.is_file():
        where = f"no {FILE_NAME} in the directory {path}" if Path(path).is_dir() else "no file"
        raise UsageError(
            f"--tokenizer {path}: {where}",
            f"give a {FILE_NAME}, a Hugging Face tokenizer directory holding one, or `bytes` "
            "for byte ids; nothing is downloaded.",
        )
    if is_byte_level(file):
        return byte_text
    if importlib.util.find_spec("tokenizers") is None:
        raise MissingDependencyError(
            f"--tokenizer {path}: reading this tokenizer needs the `tokenizers` library",
            "pip install 'mismatchctl[text]'",
        )
    from tokenizers import Tokenizer

    try:
        tok = Tokenizer.from_file(str(file))
    except Exception as exc:  # the library raises plain Exceptions for a bad file
        raise UsageError(
            f"--tokenizer {path}: {file if file != Path(path) else 'the file'} is not a "
            f"tokenizers JSON file ({str(exc).splitlines()[0][:200]})",
            f"give the model's {FILE_NAME} (saved by `tokenizers` or `transformers`).",
        ) from None
    return HFDecoder(tok, tok.get_vocab_size(with_added_tokens=True))


@dataclass
class RunDecoders:
    """The decoder of each run (ids as numbers for a run without a tokenizer) and notes on
    remembered tokenizers that could not be read."""

    decoders: dict[str, Decoder] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)  # run -> the tokenizer it uses
    notes: list[str] = field(default_factory=list)

    def of(self, run: str) -> Decoder:
        return self.decoders.get(run, ids_text)


def run_decoders(store: Store, runs: Sequence[str], given: str | None) -> RunDecoders:
    """With ``given``: load it (an error when it cannot be read) and remember it for every run;
    without: each run's remembered tokenizer, if any."""
    out = RunDecoders()
    if given is not None:
        decoder = load(given)
        kept = given if given == BYTES else os.path.abspath(given)
        for run in runs:
            out.decoders[run], out.names[run] = decoder, kept
            try:
                set_run_setting(store, run, TOKENIZER, kept)
            except StoreNotWritable as exc:  # shown all the same; only not remembered
                out.notes.append(f"run {run}: the tokenizer is not remembered ({exc.message})")
        return out
    for run in runs:
        kept = run_setting(store, run, TOKENIZER)
        if kept is None:
            continue
        try:
            out.decoders[run], out.names[run] = load(kept), kept
        except (UsageError, MissingDependencyError) as exc:
            out.notes.append(f"run {run}: its tokenizer cannot be read, ids shown ({exc.message})")
    return out
