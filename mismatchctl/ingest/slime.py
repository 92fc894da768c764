"""slime ``--save-debug-train-data`` files (torch ``.pt``).

Two shapes are read: ``{"format_version": 2, "rollout_id", "rank", "samples": [ {...}, ... ]}``
(one dict per sample) and ``{"rollout_id", "rank", "rollout_data": {key: [per sample]}}`` (columnar).
Per sample: ``tokens`` (prompt + response; the response is the last ``response_lengths`` tokens),
``loss_masks``, ``rollout_log_probs``, ``log_probs`` (trainer), optionally ``rewards``,
``sample_index``. Values may be lists or tensors. The file is loaded with ``weights_only=True``:
it never runs code from the file.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from mismatchctl import schema as S
from mismatchctl.errors import InputError, MissingDependencyError
from mismatchctl.ingest.batch import RaggedBatch, offsets_from_lengths
from mismatchctl.ingest.source import BATCH_TOKENS, FORMAT_SLIME, Source, step_from_name

KEYS = {
    S.ROLE_ROLLOUT: "rollout_log_probs",
    S.ROLE_TRAINER: "log_probs",
    S.ROLE_MASK: "loss_masks",
    S.ROLE_TOKENS: "tokens",
    S.ROLE_SAMPLE_ID: "sample_index",
    S.ROLE_REWARD: "rewards",
}


def load_pt(path: Path) -> Any:
    try:
        import torch
    except ImportError as exc:
        raise MissingDependencyError(
            f"reading {path.name} (a torch .pt file) needs torch, which is not installed",
            "pip install 'mismatchctl[torch]'",
        ) from exc
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types for corrupt or unsafe pickles
        raise InputError(
            f"cannot load {path.name} as a torch file with weights_only=True: "
            f"{str(exc).splitlines()[0][:300]}",
            "the file is corrupt, or holds objects other than tensors, lists, dicts and "
            "numbers (only those are loaded, so that no code from a dump is ever run).",
        ) from None


def open_slime(path: Path, mapping: Mapping[str, str]) -> Source:
    data = load_pt(path)
    keys = {**KEYS, **mapping}
    samples = _samples(data, path)
    step = _step(data, path)
    source = Source(path, FORMAT_SLIME, iter(()), {r: k for r, k in keys.items()})
    first = samples[0] if samples else {}
    for role in (S.ROLE_ROLLOUT, S.ROLE_TRAINER):
        if samples and keys[role] not in first:
            raise InputError(
                f"{path.name}: sample 0 has no `{keys[role]}` (found: {', '.join(map(str, first))})",
                f"name the {role} logprob key with --map {role}=<key>.",
            )
    if samples and keys[S.ROLE_MASK] not in first:
        source.notes.append("no loss_masks: every response token counted as a model token")
    source.batches = _batches(samples, keys, step, path)
    return source


def _samples(data: Any, path: Path) -> list[dict]:
    if isinstance(data, dict) and isinstance(data.get("samples"), list):
        return data["samples"]
    if isinstance(data, dict) and isinstance(data.get("rollout_data"), dict):
        cols = data["rollout_data"]
        n = max((len(v) for v in cols.values() if isinstance(v, list | tuple)), default=0)
        return [{k: v[i] for k, v in cols.items() if isinstance(v, list | tuple)} for i in range(n)]
    found = ", ".join(map(str, data)) if isinstance(data, dict) else type(data).__name__
    raise InputError(
        f"{path.name}: not a slime debug-train-data file (expected a dict with `samples` or "
        f"`rollout_data`, found {found})",
        "pass --format to name the right format.",
    )


def _step(data: dict, path: Path) -> int:
    if "rollout_id" in data:
        return int(data["rollout_id"])
    named = step_from_name(path)
    return named if named is not None else 0


def _array(value: Any, dtype: type) -> np.ndarray:
    if hasattr(value, "detach"):  # a torch tensor
        value = value.detach().to("cpu").double().numpy() if dtype is float else value.numpy()
    return np.asarray(value, dtype=np.float64 if dtype is float else np.int64).reshape(-1)


def _batches(samples: list[dict], keys: dict, step: int, path: Path) -> Iterator[RaggedBatch]:
    start = 0
    while start < len(samples):
        end, tokens = start, 0
        while end < len(samples) and (tokens < BATCH_TOKENS or end == start):
            value = samples[end].get(keys[S.ROLE_ROLLOUT])
            tokens += 0 if value is None else len(value)
            end += 1
        yield _to_batch(samples[start:end], keys, step, path, start)
        start = end


def _to_batch(chunk: list[dict], keys: dict, step: int, path: Path, i0: int) -> RaggedBatch:
    roll = [_array(s[keys[S.ROLE_ROLLOUT]], float) for s in chunk]
    train = [_array(s[keys[S.ROLE_TRAINER]], float) for s in chunk]
    lengths = np.array([len(a) for a in roll], dtype=np.int64)
    batch = RaggedBatch(
        steps=np.full(len(chunk), step, dtype=np.int64),
        sample_ids=[_sample_id(s, keys, path, i0 + i) for i, s in enumerate(chunk)],
        offsets=offsets_from_lengths(lengths),
        rollout=np.concatenate(roll) if roll else np.zeros(0),
        trainer=np.concatenate(train) if train else np.zeros(0),
        locations=[f"sample {i0 + i}" for i in range(len(chunk))],
    )
    batch.role_lengths[S.ROLE_TRAINER] = np.array([len(a) for a in train], dtype=np.int64)
    if keys[S.ROLE_MASK] in chunk[0]:
        masks = [_array(s[keys[S.ROLE_MASK]], int) for s in chunk]
        _check_mask(masks, path, i0)
        batch.mask = np.concatenate(masks).astype(bool)
        batch.role_lengths[S.ROLE_MASK] = np.array([len(m) for m in masks], dtype=np.int64)
    if keys[S.ROLE_TOKENS] in chunk[0]:
        ids = [_response_ids(s, keys, n) for s, n in zip(chunk, lengths, strict=True)]
        batch.token_ids = np.concatenate(ids)
        batch.role_lengths[S.ROLE_TOKENS] = np.array([len(a) for a in ids], dtype=np.int64)
    if keys[S.ROLE_REWARD] in chunk[0]:
        batch.rewards = np.array([_reward(s.get(keys[S.ROLE_REWARD])) for s in chunk])
    return batch


def _response_ids(sample: dict, keys: dict, n: int) -> np.ndarray:
    tokens = _array(sample[keys[S.ROLE_TOKENS]], int)
    length = int(_array(sample.get("response_lengths", n), int)[0])
    return tokens[len(tokens) - length :] if length <= len(tokens) else tokens


def _sample_id(sample: dict, keys: dict, path: Path, i: int) -> str:
    value = sample.get(keys[S.ROLE_SAMPLE_ID])
    if value is None:
        return f"{path.stem}#{i}"
    return str(int(value)) if hasattr(value, "item") else str(value)


def _reward(value: Any) -> float:
    if value is None:
        return float("nan")
    if isinstance(value, dict):  # slime may store reward dicts; no single number to keep
        return float("nan")
    arr = _array(value, float)
    return float(arr[0]) if arr.size == 1 else float("nan")


def _check_mask(masks: list[np.ndarray], path: Path, i0: int) -> None:
    for i, m in enumerate(masks):
        if m.size and not np.isin(m, (0, 1)).all():
            raise InputError(
                f"{path.name}: sample {i0 + i}: loss_masks holds values other than 0 and 1",
                "map a 0/1 mask with --map mask=<key>.",
            )
