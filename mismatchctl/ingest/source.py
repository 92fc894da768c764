"""What a reader returns for one file, and facts that live in file names and metadata."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from mismatchctl.display import has_control
from mismatchctl.errors import InputError
from mismatchctl.ingest.batch import RaggedBatch

# Rows per batch handed to canonicalisation: bounds memory whatever the file size.
BATCH_TOKENS = 1_000_000
# with MoE routes, a batch holds this many times fewer tokens (hundreds of ids a token: bounded
# memory at 24 layers x top-8)
ROUTES_BATCH_DIVISOR = 16


@dataclass
class Source:
    """An opened dump file: its format, the columns used for each role, tags, notes, batches."""

    path: Path
    format: str
    batches: Iterator[RaggedBatch]
    columns: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # the per-sequence attributes its batches carry (every batch has each of them)
    attributes: list[str] = field(default_factory=list)
    # role -> the attribute column ``batch_id`` / ``batch_size`` are read from
    # (``ingest.batch_roles``; set by ``open_source``)
    batch_columns: dict[str, str] = field(default_factory=dict)


_STEP_PATTERNS = (
    re.compile(r"(?:global_step|step|rollout_id|rollout|iter|iteration)[_\-]?(\d+)", re.I),
)


STEP_MIN, STEP_MAX = -(2**63), 2**63 - 1  # steps are stored as int64


def step_in_range(step: int | str, where: str, hint: str) -> int:
    """``step`` (an int, or a text of decimal digits) when it fits the store's int64 steps;
    else an error naming ``where`` it was. Huge values are judged without converting them
    (Python refuses to convert more than 4,300 digits between text and int)."""
    if isinstance(step, str):
        text = step.lstrip("0") or "0"
        step = int(text) if len(text) <= 20 else STEP_MAX + 1
    if not STEP_MIN <= step <= STEP_MAX:
        raise InputError(
            f"{where}: the step is beyond the 64-bit integers steps are stored as "
            f"({STEP_MIN:,} to {STEP_MAX:,})",
            hint,
        )
    return step


def step_from_name(path: Path, label: str | None = None) -> int | None:
    """The training step written in a file name (``train_data_step12.jsonl``, ``step_0003``);
    ``label`` names the file in the error about a step beyond int64 (default: its path)."""
    for part in (path.name, path.parent.name):
        for pattern in _STEP_PATTERNS:
            match = pattern.search(part)
            if match:
                where = f"{label or path}: the name `{part}`"
                hint = "name the file with the step's real number, or pass a file that holds it."
                return step_in_range(match.group(1), where, hint)
    return None


_TAG_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]{0,63}")
_RESERVED_META = {"pandas", "huggingface", "step"}


def tags_from_metadata(meta: dict[bytes, bytes] | None) -> dict[str, str]:
    """Parquet key-value metadata that reads as a tag: a simple key with a short text value."""
    tags: dict[str, str] = {}
    for raw_key, raw_value in (meta or {}).items():
        try:
            key, value = raw_key.decode(), raw_value.decode()
        except UnicodeDecodeError:
            continue
        if key in _RESERVED_META or not _TAG_KEY.fullmatch(key) or len(value) > 256:
            continue
        if has_control(value) or not value.strip():
            continue
        tags[key] = value.strip()
    return tags
