"""slime ``--save-debug-train-data`` files (torch ``.pt``).

Two shapes are read: ``{"format_version": 2, "rollout_id", "rank", "samples": [ {...}, ... ]}``
(one dict per sample) and ``{"rollout_id", "rank", "rollout_data": {key: [per sample]}}`` (columnar).
Per sample: ``tokens`` (prompt + response; the response is the last ``response_lengths`` tokens),
``loss_masks``, ``rollout_log_probs``, ``log_probs`` (trainer), optionally ``rewards``,
``sample_index``. Values may be lists or tensors. The file is loaded with ``weights_only=True``:
it never runs code from the file. A file that needs full unpickling (custom classes, numpy
objects) is refused unless the user passes ``--trust-pickle``, which runs whatever the file says.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from mismatchctl import schema as S
from mismatchctl.errors import InputError, MissingDependencyError
from mismatchctl.ingest import py_values as pv
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


TRUST_FLAG = "--trust-pickle"
# weights_only loading names the first global it refuses; other failures mean a corrupt file
_UNSAFE = re.compile(r"Unsupported global: GLOBAL (\S+)")


def load_pt(path: Path, trust_pickle: bool = False) -> Any:
    """The content of a ``.pt`` file: tensors, lists, dicts and numbers only, unless trusted."""
    try:
        import torch
    except ImportError as exc:
        raise MissingDependencyError(
            f"reading {path.name} (a torch .pt file) needs torch, which is not installed",
            "pip install 'mismatchctl[torch]'",
        ) from exc
    try:
        return torch.load(path, map_location="cpu", weights_only=not trust_pickle)
    except Exception as exc:  # torch raises many types for corrupt or unsafe pickles
        unsafe = None if trust_pickle else _UNSAFE.search(str(exc))
        if unsafe is not None:
            raise _refused(path, unsafe.group(1)) from None
        first = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
        how = "with full unpickling (--trust-pickle)" if trust_pickle else "with weights_only=True"
        raise InputError(
            f"cannot load {path.name} as a torch file {how}: {first}",
            "the file is truncated or corrupt; re-export it, or leave it out of the inputs.",
        ) from None


def _refused(path: Path, name: str) -> InputError:
    return InputError(
        f"{path.name} needs full unpickling to load (it refers to `{name}`, which "
        "weights_only=True loading does not allow); refused, so that no code from a dump runs",
        f"if you trust the file and whoever wrote it, pass {TRUST_FLAG}: full unpickling runs "
        "any code the file contains, with your permissions. Otherwise re-save the dump with "
        "plain tensors, lists and numbers.",
    )


def open_slime(path: Path, mapping: Mapping[str, str], trust_pickle: bool = False) -> Source:
    data = load_pt(path, trust_pickle)
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
    if trust_pickle:
        source.notes.append(f"loaded with {TRUST_FLAG} (full unpickling)")
    if samples and keys[S.ROLE_MASK] not in first:
        source.notes.append("no loss_masks: every response token counted as a model token")
    source.batches = _batches(samples, keys, step, path)
    return source


def _samples(data: Any, path: Path) -> list[dict]:
    if isinstance(data, dict) and isinstance(data.get("samples"), list):
        for i, sample in enumerate(data["samples"]):
            if not isinstance(sample, dict):
                raise InputError(
                    f"{path.name}: sample {i} is a {type(sample).__name__}, expected a dict of "
                    "per-sample values",
                    "pass --format to name the right format, or re-export the dump.",
                )
        return data["samples"]
    if isinstance(data, dict) and isinstance(data.get("rollout_data"), dict):
        return _columnar(data["rollout_data"], path)
    found = ", ".join(map(str, data)) if isinstance(data, dict) else type(data).__name__
    raise InputError(
        f"{path.name}: not a slime debug-train-data file (expected a dict with `samples` or "
        f"`rollout_data`, found {found})",
        "pass --format to name the right format.",
    )


def _columnar(cols: dict, path: Path) -> list[dict]:
    """``{key: [per sample]}`` -> one dict per sample; every list must have the same length."""
    lists = {k: v for k, v in cols.items() if isinstance(v, list | tuple)}
    lengths = {k: len(v) for k, v in lists.items()}
    if len(set(lengths.values())) > 1:
        found = ", ".join(f"`{k}`: {n}" for k, n in lengths.items())
        raise InputError(
            f"{path.name}: the lists of rollout_data have different lengths ({found}; expected "
            "one entry per sample in each)",
            "the dump is truncated or corrupt; re-export it, or leave it out of the inputs.",
        )
    n = next(iter(lengths.values()), 0)
    return [{k: v[i] for k, v in lists.items()} for i in range(n)]


def _one_int(value: Any, where: str) -> int:
    """One integer given as a number, a one-element list or a tensor."""
    hint = "re-export the dump with one integer there."
    values = pv.ints(
        value if isinstance(value, list | tuple) or hasattr(value, "shape") else [value],
        where,
        hint,
    )
    if values.size != 1:
        raise InputError(f"{where}: expected one integer, found {values.size} values", hint)
    return int(values[0])


def _step(data: dict, path: Path) -> int:
    if "rollout_id" in data:
        return _one_int(data["rollout_id"], f"{path.name}: `rollout_id`")
    named = step_from_name(path)
    return named if named is not None else 0


def _where(path: Path, i: int, key: str) -> str:
    return f"{path.name}: sample {i}: `{key}`"


def _hint(role: str) -> str:
    return f"re-export the dump, or name another key with --map {role}=<key>."


def _values(samples: list[dict], keys: dict, role: str, path: Path, i0: int, convert) -> list:
    """One role's array of every sample; a sample without the key is an error, not empty."""
    key = keys[role]
    out = []
    for i, sample in enumerate(samples):
        if key not in sample:
            raise InputError(
                f"{path.name}: sample {i0 + i} has no `{key}` (found: "
                f"{', '.join(map(str, sample))}; sample {i0} has it)",
                "re-export the dump; every sample needs the same keys.",
            )
        out.append(convert(sample[key], _where(path, i0 + i, key), _hint(role)))
    return out


def _batches(samples: list[dict], keys: dict, step: int, path: Path) -> Iterator[RaggedBatch]:
    start = 0
    while start < len(samples):
        end, tokens = start, 0
        while end < len(samples) and (tokens < BATCH_TOKENS or end == start):
            value = samples[end].get(keys[S.ROLE_ROLLOUT])
            tokens += (
                len(value) if isinstance(value, list | tuple) or hasattr(value, "shape") else 0
            )
            end += 1
        yield _to_batch(samples[start:end], keys, step, path, start)
        start = end


def _to_batch(chunk: list[dict], keys: dict, step: int, path: Path, i0: int) -> RaggedBatch:
    roll = _values(chunk, keys, S.ROLE_ROLLOUT, path, i0, pv.floats)
    train = _values(chunk, keys, S.ROLE_TRAINER, path, i0, pv.floats)
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
        masks = _values(chunk, keys, S.ROLE_MASK, path, i0, pv.mask)
        batch.mask = np.concatenate(masks)
        batch.role_lengths[S.ROLE_MASK] = np.array([len(m) for m in masks], dtype=np.int64)
    if keys[S.ROLE_TOKENS] in chunk[0]:
        _values(chunk, keys, S.ROLE_TOKENS, path, i0, lambda *_: None)  # every sample has it
        ids = [
            _response_ids(s, keys, n, _where(path, i0 + i, keys[S.ROLE_TOKENS]))
            for i, (s, n) in enumerate(zip(chunk, lengths, strict=True))
        ]
        batch.token_ids = np.concatenate(ids)
        batch.role_lengths[S.ROLE_TOKENS] = np.array([len(a) for a in ids], dtype=np.int64)
    if keys[S.ROLE_REWARD] in chunk[0]:
        key = keys[S.ROLE_REWARD]
        batch.rewards = np.array(
            [
                pv.scalar(s.get(key), _where(path, i0 + i, key), _hint(S.ROLE_REWARD))
                for i, s in enumerate(chunk)
            ]
        )
    return batch


def _response_ids(sample: dict, keys: dict, n: int, where: str) -> np.ndarray:
    tokens = pv.ints(sample[keys[S.ROLE_TOKENS]], where, _hint(S.ROLE_TOKENS))
    length = _one_int(sample.get("response_lengths", n), f"{where} response_lengths")
    return tokens[len(tokens) - length :] if 0 <= length <= len(tokens) else tokens


def _sample_id(sample: dict, keys: dict, path: Path, i: int) -> str:
    value = sample.get(keys[S.ROLE_SAMPLE_ID])
    if value is None:
        return f"{path.stem}#{i}"
    return pv.text(value, _where(path, i, keys[S.ROLE_SAMPLE_ID]), _hint(S.ROLE_SAMPLE_ID))
