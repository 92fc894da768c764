"""Readers for the dump formats practitioners have on disk (see docs/formats.md)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from mismatchctl.display import file_label
from mismatchctl.ingest.attributes import MissingColumn
from mismatchctl.ingest.batch_roles import NAMES, split_mapping
from mismatchctl.ingest.batch_roles import attach as attach_batch
from mismatchctl.ingest.detect import detect_format, expand_inputs
from mismatchctl.ingest.source import Source
from mismatchctl.options import (
    FORMAT_NEMO,
    FORMAT_PRIME,
    FORMAT_SEQUENCE,
    FORMAT_SLIME,
    FORMAT_TOKEN,
    FORMAT_VERL,
    FORMATS,
)

__all__ = ["FORMATS", "Source", "detect_format", "expand_inputs", "open_source"]


def open_source(
    path: Path,
    fmt: str,
    mapping: Mapping[str, str],
    trust_pickle: bool = False,
    label: str | None = None,
    attrs: Sequence[str] = (),
) -> Source:
    """Open one dump file with the reader of its format (readers are imported on demand).
    ``trust_pickle`` lets a torch file be fully unpickled (which can run code from it), and a
    verl DataProto pickle be read (by a restricted unpickler); ``label`` names the file in
    messages (default: its path as given, ``file_label``); ``attrs``: columns (keys) to keep as
    per-sequence attributes (``--attr``; see ``ingest.attributes``)."""
    label = label or file_label(path)
    source = _open(path, fmt, *split_mapping(mapping), trust_pickle, label, attrs)
    return attach_batch(source, mapping)


def _open(
    path: Path,
    fmt: str,
    mapping: Mapping[str, str],
    batch: Mapping[str, str],
    trust_pickle: bool,
    label: str,
    attrs: Sequence[str],
) -> Source:
    """The reader of the format; the batch roles' columns (``--map batch_id=COL``) are kept as
    attributes, which they are read from (``ingest.batch_roles``): one the file lacks is
    reported as the ``--map`` it came from."""
    asked = (*attrs, *(c for c in batch.values() if c not in attrs))
    try:
        return _reader(path, fmt, mapping, trust_pickle, label, asked)
    except MissingColumn as exc:
        role = next((r for r, c in batch.items() if c == exc.name and c not in attrs), None)
        if role is None:
            raise
        raise exc.as_map(role, NAMES[role]) from None


def _reader(
    path: Path,
    fmt: str,
    mapping: Mapping[str, str],
    trust_pickle: bool,
    label: str,
    attrs: Sequence[str],
) -> Source:
    if fmt == FORMAT_SEQUENCE:
        from mismatchctl.ingest.parquet_sequence import open_sequence

        return open_sequence(path, mapping, label, attrs)
    if fmt == FORMAT_TOKEN:
        from mismatchctl.ingest.parquet_token import open_token

        return open_token(path, mapping, label, attrs)
    if fmt == FORMAT_SLIME:
        from mismatchctl.ingest.slime import open_slime

        return open_slime(path, mapping, trust_pickle, label, attrs)
    if fmt == FORMAT_NEMO:
        from mismatchctl.ingest.nemo import open_nemo

        return open_nemo(path, mapping, label, attrs)
    if fmt == FORMAT_VERL:
        from mismatchctl.ingest.verl_pickle import open_verl

        return open_verl(path, mapping, trust_pickle, label, attrs)
    if fmt == FORMAT_PRIME:
        from mismatchctl.ingest.prime import open_prime

        return open_prime(path, mapping, label, attrs)
    raise ValueError(fmt)
