"""NeMo-RL ``train_data_step{N}.jsonl``: one JSON object per sample and line.

Arrays are aligned to the *full* sequence (prompt + response), with a dummy entry at index 0: the
logprob of token j sits at index j. Prompt and environment positions have mask 0. The step is in
the file name.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np

from mismatchctl import schema as S
from mismatchctl.errors import InputError
from mismatchctl.ingest import py_values as pv
from mismatchctl.ingest.batch import RaggedBatch, offsets_from_lengths
from mismatchctl.ingest.source import BATCH_TOKENS, FORMAT_NEMO, Source, step_from_name

KEYS = {
    S.ROLE_ROLLOUT: "generation_logprobs",
    S.ROLE_TRAINER: "prev_logprobs",
    S.ROLE_MASK: "token_loss_mask",
    S.ROLE_TOKENS: "token_ids",
    S.ROLE_REWARD: "rewards",
    S.ROLE_SAMPLE_ID: "sample_id",
}


def open_nemo(path: Path, mapping: Mapping[str, str]) -> Source:
    keys = {**KEYS, **mapping}
    step = step_from_name(path)
    source = Source(path, FORMAT_NEMO, iter(()), dict(keys))
    if step is None:
        step = 0
        source.notes.append("no step in the file name (train_data_step{N}.jsonl): step 0")
    source.batches = _batches(path, keys, step)
    return source


def _lines(path: Path, keys: dict) -> Iterator[tuple[int, dict]]:
    with path.open("rb") as fh:
        for number, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise InputError(
                    f"{path.name}: line {number} is not valid JSON ({exc})",
                    "the file is truncated or corrupt; repair or remove that line.",
                ) from None
            if not isinstance(obj, dict):
                raise InputError(
                    f"{path.name}: line {number} is not a JSON object "
                    f"(found {type(obj).__name__}; expected one object per sample)",
                    "write one JSON object per line, or leave the file out of the inputs.",
                )
            for role in (S.ROLE_ROLLOUT, S.ROLE_TRAINER):
                if keys[role] not in obj:
                    raise InputError(
                        f"{path.name}: line {number} has no `{keys[role]}` "
                        f"(found: {', '.join(obj)})",
                        f"name the {role} logprob key with --map {role}=<key>.",
                    )
            yield number, _converted(obj, keys, path, number)


def _where(path: Path, number: int, key: str) -> str:
    return f"{path.name}: line {number}: `{key}`"


_HINT = "repair that line, or name another key with --map {role}=<key>."


def _converted(obj: dict, keys: dict, path: Path, number: int) -> dict:
    """The line's values for every role as numpy arrays (or a float / text), strictly checked."""
    out: dict = {}
    for role, convert in (
        (S.ROLE_ROLLOUT, pv.floats),
        (S.ROLE_TRAINER, pv.floats),
        (S.ROLE_MASK, pv.mask),
        (S.ROLE_TOKENS, pv.ints),
        (S.ROLE_REWARD, pv.scalar),
        (S.ROLE_SAMPLE_ID, pv.text),
    ):
        if keys[role] in obj:
            where = _where(path, number, keys[role])
            out[role] = convert(obj[keys[role]], where, _HINT.format(role=role))
    return out


def _batches(path: Path, keys: dict, step: int) -> Iterator[RaggedBatch]:
    chunk: list[tuple[int, dict]] = []
    tokens = 0
    for number, obj in _lines(path, keys):
        chunk.append((number, obj))
        tokens += len(obj[S.ROLE_ROLLOUT])
        if tokens >= BATCH_TOKENS:
            yield _to_batch(chunk, keys, step, path)
            chunk, tokens = [], 0
    if chunk:
        yield _to_batch(chunk, keys, step, path)


def _to_batch(chunk: list[tuple[int, dict]], keys: dict, step: int, path: Path) -> RaggedBatch:
    roll = [o[S.ROLE_ROLLOUT] for _, o in chunk]
    train = [o[S.ROLE_TRAINER] for _, o in chunk]
    batch = RaggedBatch(
        steps=np.full(len(chunk), step, dtype=np.int64),
        sample_ids=[o.get(S.ROLE_SAMPLE_ID, f"{path.stem}#{n}") for n, o in chunk],
        offsets=offsets_from_lengths(np.array([len(a) for a in roll], dtype=np.int64)),
        rollout=np.concatenate(roll),
        trainer=np.concatenate(train),
        locations=[f"line {n}" for n, _ in chunk],
    )
    batch.role_lengths[S.ROLE_TRAINER] = np.array([len(a) for a in train], dtype=np.int64)
    if S.ROLE_MASK in chunk[0][1]:
        masks = [o.get(S.ROLE_MASK, np.zeros(0, dtype=bool)) for _, o in chunk]
        batch.mask = np.concatenate(masks)
        batch.role_lengths[S.ROLE_MASK] = np.array([len(m) for m in masks], dtype=np.int64)
    if S.ROLE_TOKENS in chunk[0][1]:
        ids = [o.get(S.ROLE_TOKENS, np.zeros(0, dtype=np.int64)) for _, o in chunk]
        batch.token_ids = np.concatenate(ids)
        batch.role_lengths[S.ROLE_TOKENS] = np.array([len(a) for a in ids], dtype=np.int64)
    if S.ROLE_REWARD in chunk[0][1]:
        batch.rewards = np.array([o.get(S.ROLE_REWARD, np.nan) for _, o in chunk])
    return batch
