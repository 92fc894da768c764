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
                raise InputError(f"{path.name}: line {number} is not a JSON object", None)
            for role in (S.ROLE_ROLLOUT, S.ROLE_TRAINER):
                if keys[role] not in obj:
                    raise InputError(
                        f"{path.name}: line {number} has no `{keys[role]}` "
                        f"(found: {', '.join(obj)})",
                        f"name the {role} logprob key with --map {role}=<key>.",
                    )
            yield number, obj


def _batches(path: Path, keys: dict, step: int) -> Iterator[RaggedBatch]:
    chunk: list[tuple[int, dict]] = []
    tokens = 0
    for number, obj in _lines(path, keys):
        chunk.append((number, obj))
        tokens += len(obj[keys[S.ROLE_ROLLOUT]])
        if tokens >= BATCH_TOKENS:
            yield _to_batch(chunk, keys, step, path)
            chunk, tokens = [], 0
    if chunk:
        yield _to_batch(chunk, keys, step, path)


def _floats(values: list, path: Path, number: int, key: str) -> np.ndarray:
    try:
        return np.array([np.nan if v is None else v for v in values], dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError(f"{path.name}: line {number}: `{key}` holds non-numbers", None) from None


def _to_batch(chunk: list[tuple[int, dict]], keys: dict, step: int, path: Path) -> RaggedBatch:
    roll = [_floats(o[keys[S.ROLE_ROLLOUT]], path, n, keys[S.ROLE_ROLLOUT]) for n, o in chunk]
    train = [_floats(o[keys[S.ROLE_TRAINER]], path, n, keys[S.ROLE_TRAINER]) for n, o in chunk]
    batch = RaggedBatch(
        steps=np.full(len(chunk), step, dtype=np.int64),
        sample_ids=[str(o.get(keys[S.ROLE_SAMPLE_ID], f"{path.stem}#{n}")) for n, o in chunk],
        offsets=offsets_from_lengths(np.array([len(a) for a in roll], dtype=np.int64)),
        rollout=np.concatenate(roll),
        trainer=np.concatenate(train),
        locations=[f"line {n}" for n, _ in chunk],
    )
    batch.role_lengths[S.ROLE_TRAINER] = np.array([len(a) for a in train], dtype=np.int64)
    if keys[S.ROLE_MASK] in chunk[0][1]:
        masks = [np.asarray(o.get(keys[S.ROLE_MASK], []), dtype=np.float64) for _, o in chunk]
        flat = np.concatenate(masks)
        if not np.isin(flat, (0, 1)).all():
            raise InputError(
                f"{path.name}: `{keys[S.ROLE_MASK]}` holds values other than 0/1", None
            )
        batch.mask = flat == 1
        batch.role_lengths[S.ROLE_MASK] = np.array([len(m) for m in masks], dtype=np.int64)
    if keys[S.ROLE_TOKENS] in chunk[0][1]:
        ids = [np.asarray(o.get(keys[S.ROLE_TOKENS], []), dtype=np.int64) for _, o in chunk]
        batch.token_ids = np.concatenate(ids)
        batch.role_lengths[S.ROLE_TOKENS] = np.array([len(a) for a in ids], dtype=np.int64)
    if keys[S.ROLE_REWARD] in chunk[0][1]:
        batch.rewards = np.array([_scalar(o.get(keys[S.ROLE_REWARD])) for _, o in chunk])
    return batch


def _scalar(value: object) -> float:
    if isinstance(value, list):
        return float(value[0]) if len(value) == 1 else float("nan")
    return float("nan") if value is None else float(value)  # type: ignore[arg-type]
