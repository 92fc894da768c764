"""slime ``--save-debug-train-data`` files (torch ``.pt``).

Two shapes are read: ``{"format_version": 2, "rollout_id", "rank", "samples": [ {...}, ... ],
"dp_shards"}`` (one dict per sample, as ``slime/observability/train_data_utils.py`` writes it)
and ``{"rollout_id", "rank", "rollout_data": {key: [per sample]}}`` (columnar, older slime).
Per sample: ``tokens`` (prompt + response; the response is the last ``response_lengths``
tokens), ``loss_masks``, ``rollout_log_probs``, ``log_probs`` (trainer), optionally
``rewards``, ``sample_index``. Values may be lists, tensors or numbers. The prompt's length
(``tokens`` minus the response) is kept in the sequence rows, and is where ``kv_position``
counts from. Per-sample scalars (``truncated``...) are attributes (``ingest.attributes``). The file is loaded with
``weights_only=True`` (``torch_load``): it never runs code from the file unless the user passes
``--trust-pickle``.

slime's other dump, ``--save-debug-rollout-data`` (``{"rollout_id", "samples": [Sample.to_dict()
...]}``, samples with ``response_length``, ``status``, ``loss_mask``), holds the inference side
only: it is recognised and refused with a pointer to the train dump.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from mismatchctl import schema as S
from mismatchctl.display import file_label
from mismatchctl.errors import InputError
from mismatchctl.ingest import attributes as attr
from mismatchctl.ingest import py_values as pv
from mismatchctl.ingest.batch import RaggedBatch, RouteColumn, lacking_mask, offsets_from_lengths
from mismatchctl.ingest.source import BATCH_TOKENS, Source, step_from_name
from mismatchctl.ingest.torch_load import TRUST_FLAG, load_pt
from mismatchctl.options import FORMAT_SLIME

KEYS = {
    S.ROLE_ROLLOUT: "rollout_log_probs",
    S.ROLE_TRAINER: "log_probs",
    S.ROLE_MASK: "loss_masks",
    S.ROLE_TOKENS: "tokens",
    S.ROLE_SAMPLE_ID: "sample_index",
    S.ROLE_REWARD: "rewards",
    # int32 (len(tokens) - 1, num_layers, moe_router_topk), rows from the first prompt token
    S.ROLE_ROLLOUT_ROUTES: "rollout_routed_experts",
    S.ROLE_TRAINER_ROUTES: "trainer_routed_experts",
}
RESPONSE_LENGTHS = "response_lengths"
# fields of slime's Sample.to_dict() that its train dump never holds: the mark of a rollout dump
ROLLOUT_DUMP_FIELDS = ("response_length", "status")

__all__ = ["KEYS", "TRUST_FLAG", "load_pt", "open_slime"]


class _File(NamedTuple):
    label: str  # the file as messages name it
    stem: str  # for the ids of samples without one: <stem>#<index>


def open_slime(
    path: Path,
    mapping: Mapping[str, str],
    trust_pickle: bool = False,
    label: str | None = None,
    attrs: Sequence[str] = (),
) -> Source:
    file = _File(label or file_label(path), path.stem)
    data = load_pt(path, trust_pickle, file.label)
    keys = {**KEYS, **mapping}
    samples = _samples(data, file.label)
    step = _step(data, path, file.label)
    source = Source(path, FORMAT_SLIME, iter(()), {r: k for r, k in keys.items()})
    first = samples[0] if samples else {}
    if (
        samples
        and keys[S.ROLE_TRAINER] not in first
        and all(k in first for k in ROLLOUT_DUMP_FIELDS)
    ):
        raise _rollout_dump(file.label, keys[S.ROLE_TRAINER])
    for role in (S.ROLE_ROLLOUT, S.ROLE_TRAINER):
        if samples and keys[role] not in first:
            raise InputError(
                f"{file.label}: sample 0 has no `{keys[role]}` "
                f"(found: {', '.join(map(str, first))})",
                f"name the {role} logprob key with --map {role}=<key>.",
            )
    if trust_pickle:
        source.notes.append(f"loaded with {TRUST_FLAG} (full unpickling)")
    masked = any(keys[S.ROLE_MASK] in sample for sample in samples)
    if samples and not masked:
        source.notes.append("no loss_masks: every response token counted as a model token")
    if samples and keys[S.ROLE_TOKENS] not in first:
        source.notes.append(
            f"no `{keys[S.ROLE_TOKENS]}`: no prompt lengths (kv_position counts from the first "
            "position of the response)"
        )
    exclude = {*keys.values(), RESPONSE_LENGTHS}
    kept = attr.from_records(samples, exclude, attrs, file.label, source.notes)
    source.attributes = list(kept)
    source.batches = _batches(samples, keys, step, file, kept, masked)
    return source


def _rollout_dump(label: str, trainer_key: str) -> InputError:
    return InputError(
        f"{label} is a slime rollout dump (--save-debug-rollout-data: one Sample per response, "
        f"with `response_length` and `status`): it holds the inference engine's logprobs only, "
        f"no trainer logprobs (`{trainer_key}`) to compare them with",
        "ingest slime's train dump instead, written with --save-debug-train-data PATH (or "
        "--dump-details DIR, into DIR/train_data/): its samples hold both `rollout_log_probs` "
        "and the trainer's `log_probs`.",
    )


def _samples(data: Any, label: str) -> list[dict]:
    if isinstance(data, dict) and isinstance(data.get("samples"), list):
        for i, sample in enumerate(data["samples"]):
            if not isinstance(sample, dict):
                raise InputError(
                    f"{label}: sample {i} is a {type(sample).__name__}, expected a dict of "
                    "per-sample values",
                    "pass --format to name the right format, or re-export the dump.",
                )
        return data["samples"]
    if isinstance(data, dict) and isinstance(data.get("rollout_data"), dict):
        return _columnar(data["rollout_data"], label)
    found = ", ".join(map(str, data)) if isinstance(data, dict) else type(data).__name__
    raise InputError(
        f"{label}: not a slime debug-train-data file (expected a dict with `samples` or "
        f"`rollout_data`, found {found})",
        "pass --format to name the right format.",
    )


def _columnar(cols: dict, label: str) -> list[dict]:
    """``{key: [per sample]}`` -> one dict per sample; every list must have the same length."""
    lists = {k: v for k, v in cols.items() if isinstance(v, list | tuple)}
    lengths = {k: len(v) for k, v in lists.items()}
    if len(set(lengths.values())) > 1:
        found = ", ".join(f"`{k}`: {n}" for k, n in lengths.items())
        raise InputError(
            f"{label}: the lists of rollout_data have different lengths ({found}; expected "
            "one entry per sample in each)",
            "the dump is truncated or corrupt; re-export it, or leave it out of the inputs.",
        )
    n = next(iter(lengths.values()), 0)
    return [{k: v[i] for k, v in lists.items()} for i in range(n)]


def _one_int(value: Any, where: str) -> int:
    """One integer given as a number (Python or numpy), a one-element list or a tensor."""
    hint = "re-export the dump with one integer there."
    if isinstance(value, np.generic):
        value = value.item()
    values = pv.ints(
        value if isinstance(value, list | tuple) or hasattr(value, "shape") else [value],
        where,
        hint,
    )
    if values.size != 1:
        raise InputError(f"{where}: expected one integer, found {values.size} values", hint)
    return int(values[0])


def _step(data: dict, path: Path, label: str) -> int:
    if "rollout_id" in data:
        return _one_int(data["rollout_id"], f"{label}: `rollout_id`")
    named = step_from_name(path, label)
    return named if named is not None else 0


def _where(file: _File, i: int, key: str) -> str:
    return f"{file.label}: sample {i}: `{key}`"


def _hint(role: str) -> str:
    return f"re-export the dump, or name another key with --map {role}=<key>."


def _values(samples: list[dict], keys: dict, role: str, file: _File, i0: int, convert) -> list:
    """One role's array of every sample; a sample without the key is an error, not empty."""
    key = keys[role]
    out = []
    for i, sample in enumerate(samples):
        if key not in sample:
            raise InputError(
                f"{file.label}: sample {i0 + i} has no `{key}` (found: "
                f"{', '.join(map(str, sample))}; sample {i0} has it)",
                "re-export the dump; every sample needs the same keys.",
            )
        out.append(convert(sample[key], _where(file, i0 + i, key), _hint(role)))
    return out


def _batches(
    samples: list[dict],
    keys: dict,
    step: int,
    file: _File,
    kept: dict[str, list[attr.Text]],
    masked: bool,
) -> Iterator[RaggedBatch]:
    """``masked``: some sample of the file has a mask (then each sample's own is used, and one
    without is a bad sample)."""
    start = 0
    while start < len(samples):
        end, tokens = start, 0
        while end < len(samples) and (tokens < BATCH_TOKENS or end == start):
            value = samples[end].get(keys[S.ROLE_ROLLOUT])
            tokens += (
                len(value) if isinstance(value, list | tuple) or hasattr(value, "shape") else 0
            )
            end += 1
        batch = _to_batch(samples[start:end], keys, step, file, start, masked)
        batch.attrs = attr.per_batch(kept, start, end)
        yield batch
        start = end


def _to_batch(
    chunk: list[dict], keys: dict, step: int, file: _File, i0: int, masked: bool
) -> RaggedBatch:
    roll = _values(chunk, keys, S.ROLE_ROLLOUT, file, i0, pv.floats)
    train = _values(chunk, keys, S.ROLE_TRAINER, file, i0, pv.floats)
    lengths = np.array([len(a) for a in roll], dtype=np.int64)
    batch = RaggedBatch(
        steps=np.full(len(chunk), step, dtype=np.int64),
        sample_ids=[_sample_id(s, keys, file, i0 + i) for i, s in enumerate(chunk)],
        offsets=offsets_from_lengths(lengths),
        rollout=np.concatenate(roll) if roll else np.zeros(0),
        trainer=np.concatenate(train) if train else np.zeros(0),
        locations=[f"sample {i0 + i}" for i in range(len(chunk))],
    )
    batch.role_lengths[S.ROLE_TRAINER] = np.array([len(a) for a in train], dtype=np.int64)
    if masked:
        _masks(batch, chunk, keys[S.ROLE_MASK], file, i0)
    if keys[S.ROLE_TOKENS] in chunk[0]:
        _token_ids(batch, chunk, keys, file, i0, lengths)
    for role in (S.ROLE_ROLLOUT_ROUTES, S.ROLE_TRAINER_ROUTES):
        if keys[role] in chunk[0]:
            arrays = _values(chunk, keys, role, file, i0, _routes_array)
            batch.routes[role] = RouteColumn(arrays, keys[role])
    if keys[S.ROLE_REWARD] in chunk[0]:
        key = keys[S.ROLE_REWARD]
        batch.rewards = np.array(
            [
                pv.scalar(s.get(key), _where(file, i0 + i, key), _hint(S.ROLE_REWARD))
                for i, s in enumerate(chunk)
            ]
        )
    return batch


def _masks(batch: RaggedBatch, chunk: list[dict], key: str, file: _File, i0: int) -> None:
    """Each sample's own mask; a sample without one, in a file whose others have it, is bad."""
    has = [key in sample for sample in chunk]
    masks = [
        pv.mask(sample[key], _where(file, i0 + i, key), _hint(S.ROLE_MASK))
        if h
        else np.zeros(0, dtype=bool)
        for i, (sample, h) in enumerate(zip(chunk, has, strict=True))
    ]
    batch.mask = np.concatenate(masks)
    batch.role_lengths[S.ROLE_MASK] = np.array([len(m) for m in masks], dtype=np.int64)
    batch.problems = lacking_mask(key, has)


def _token_ids(
    batch: RaggedBatch, chunk: list[dict], keys: dict, file: _File, i0: int, lengths: np.ndarray
) -> None:
    """The response's token ids (the last ``response_lengths`` of ``tokens``, else as many as
    the sample has logprobs), and the prompt's length: the tokens before them."""
    _values(chunk, keys, S.ROLE_TOKENS, file, i0, lambda *_: None)  # every sample has it
    ids, prompts = [], []
    for i, (sample, n) in enumerate(zip(chunk, lengths, strict=True)):
        where = _where(file, i0 + i, keys[S.ROLE_TOKENS])
        tokens = pv.ints(sample[keys[S.ROLE_TOKENS]], where, _hint(S.ROLE_TOKENS))
        length = _one_int(sample.get(RESPONSE_LENGTHS, int(n)), f"{where} {RESPONSE_LENGTHS}")
        inside = 0 <= length <= len(tokens)
        ids.append(tokens[len(tokens) - length :] if inside else tokens)
        prompts.append(len(tokens) - length if inside else -1)  # -1: unknown
    batch.token_ids = np.concatenate(ids)
    batch.role_lengths[S.ROLE_TOKENS] = np.array([len(a) for a in ids], dtype=np.int64)
    batch.prompt_outside = np.maximum(np.array(prompts, dtype=np.int64), 0)
    batch.prompt_lengths = np.array(prompts, dtype=np.int64)


def _routes_array(value: Any, where: str, hint: str) -> np.ndarray:
    """A sample's routes (a tensor, an array or nested lists) as a numpy array."""
    try:
        return np.asarray(value.numpy() if hasattr(value, "numpy") else value)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{where}: not an array of expert ids ({exc})", hint) from None


def _sample_id(sample: dict, keys: dict, file: _File, i: int) -> str:
    value = sample.get(keys[S.ROLE_SAMPLE_ID])
    if value is None:
        return f"{file.stem}#{i}"
    return pv.text(value, _where(file, i, keys[S.ROLE_SAMPLE_ID]), _hint(S.ROLE_SAMPLE_ID))
