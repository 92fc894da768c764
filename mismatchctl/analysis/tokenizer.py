"""Token ids as text: a ``tokenizer.json`` (or a Hugging Face tokenizer directory holding one),
read with the ``tokenizers`` library from disk (nothing is downloaded), or ``bytes`` for runs
whose ids are bytes (a byte-level model: id = byte value).

``--tokenizer`` is remembered per run (``store/settings.py``): a later command on the run
decodes with it without the option. Ids the vocabulary does not hold are shown as ``<oov:ID>``,
a token without an id as ``?``; a remembered tokenizer that can no longer be read leaves the ids
as numbers, and the result says why.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mismatchctl.analysis.token_text import Decoder, ids_text
from mismatchctl.errors import MissingDependencyError, UsageError
from mismatchctl.store import Store
from mismatchctl.store.settings import TOKENIZER, run_setting, set_run_setting
from mismatchctl.store.writable import StoreNotWritable

BYTES = "bytes"
FILE_NAME = "tokenizer.json"
VISIBLE = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


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


def load(path: str) -> Decoder:
    """The decoder of ``path`` (as the user gave it): ``bytes``, a tokenizer.json, or a
    directory holding one. A UsageError names the path when it cannot be read."""
    if path == BYTES:
        return byte_text
    if importlib.util.find_spec("tokenizers") is None:
        raise MissingDependencyError(
            "--tokenizer needs the `tokenizers` library", "pip install 'mismatchctl[text]'"
        )
    from tokenizers import Tokenizer

    file = Path(path) / FILE_NAME if Path(path).is_dir() else Path(path)
    if not file.is_file():
        where = f"no {FILE_NAME} in the directory {path}" if Path(path).is_dir() else "no file"
        raise UsageError(
            f"--tokenizer {path}: {where}",
            f"give a {FILE_NAME}, a Hugging Face tokenizer directory holding one, or `bytes` "
            "for byte ids; nothing is downloaded.",
        )
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
