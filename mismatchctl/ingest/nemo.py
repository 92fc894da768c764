"""NeMo-RL ``train_data_step{N}.jsonl``: one JSON object per sample and line.

Arrays are aligned to the *full* sequence (prompt + response), with a dummy entry at index 0: the
logprob of token j sits at index j. Prompt and environment positions have mask 0. The step is in
the file name. Positions are therefore the KV positions themselves (the prompt length before
the arrays is 0).

The GRPO loop writes these files with ``Logger.log_batched_dict_as_jsonl``
(``nemo_rl/utils/logger.py``): the batch's tensors become lists, then each sample is a slice of
one, so every value keeps an outer list of one (``"generation_logprobs": [[...]]``,
``"rewards": [1.0]``, ``"input_lengths": [38]``), plus ``"idx": i`` (the sample's index in the
step), which is the sample id. The arrays are right-padded to the batch's longest sequence;
``input_lengths`` is each sequence's length before that padding, so positions past it are
padding (counted as such, never read). Flat files (no outer list) are read too.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mismatchctl import schema as S
from mismatchctl.errors import InputError
from mismatchctl.ingest import attributes as attr
from mismatchctl.ingest import py_values as pv
from mismatchctl.ingest.batch import RaggedBatch, lacking_mask, offsets_from_lengths
from mismatchctl.ingest.jsonl import json_objects, require_keys
from mismatchctl.ingest.source import BATCH_TOKENS, Source, step_from_name
from mismatchctl.options import FORMAT_NEMO

KEYS = {
    S.ROLE_ROLLOUT: "generation_logprobs",
    S.ROLE_TRAINER: "prev_logprobs",
    S.ROLE_MASK: "token_loss_mask",
    S.ROLE_TOKENS: "token_ids",
    S.ROLE_REWARD: "rewards",
    S.ROLE_SAMPLE_ID: "idx",
}
LENGTH_KEY = "input_lengths"  # each sequence's length before the batch's right padding
OTHER_ID_KEY = "sample_id"  # the id of hand-written files without `idx`
PER_TOKEN = (S.ROLE_ROLLOUT, S.ROLE_TRAINER, S.ROLE_MASK, S.ROLE_TOKENS)
CONVERT = {
    S.ROLE_ROLLOUT: pv.floats,
    S.ROLE_TRAINER: pv.floats,
    S.ROLE_MASK: pv.mask,
    S.ROLE_TOKENS: pv.ints,
    S.ROLE_REWARD: pv.scalar,
    S.ROLE_SAMPLE_ID: pv.text,
}
LENGTH = "length"  # where a line's converted input length is kept
CUT = "cut"  # how many padding positions past input_lengths were cut off
ATTRS = "attrs"  # where a line's requested attributes are kept


def open_nemo(
    path: Path, mapping: Mapping[str, str], label: str, attrs: Sequence[str] = ()
) -> Source:
    """``label``: the file as messages name it; ``attrs``: keys kept as attributes (a line
    without one: null)."""
    keys = {**KEYS, **mapping}
    step = step_from_name(path, label)
    source = Source(path, FORMAT_NEMO, iter(()), dict(keys))
    if step is None:
        step = 0
        source.notes.append("no step in the file name (train_data_step{N}.jsonl): step 0")
    attr.check_names(attrs)
    source.attributes = list(attrs)
    source.batches = _batches(path, label, keys, step, tuple(attrs))
    return source


def _lines(
    path: Path, label: str, keys: dict, attrs: tuple[str, ...]
) -> Iterator[tuple[int, dict]]:
    hint = "write one JSON object per line, or leave the file out of the inputs."
    for number, obj in json_objects(path, label, "sample", hint):
        require_keys(obj, (S.ROLE_ROLLOUT, S.ROLE_TRAINER), keys, label, number, " logprob")
        values = _converted(obj, keys, label, number)
        values[ATTRS] = {
            name: attr.requested_value(
                _unwrapped(obj.get(name), False, _where(label, number, name), ""),
                name,
                _where(label, number, name),
            )
            for name in attrs
        }
        yield number, values


def _where(label: str, number: int, key: str) -> str:
    return f"{label}: line {number}: `{key}`"


_HINT = "repair that line, or name another key with --map {role}=<key>."


def _unwrapped(value: Any, per_token: bool, where: str, hint: str) -> Any:
    """The value without the writer's outer list of one: ``[[...]]`` is a per-token array,
    ``[x]`` a per-sample value. A per-token array holding several lists is a batch, not a
    sample; a flat array is taken as it is."""
    if not isinstance(value, list) or not value or not isinstance(value[0], list | dict):
        if not per_token and isinstance(value, list) and len(value) == 1:
            return value[0]
        return value
    if len(value) != 1:
        raise InputError(
            f"{where}: expected one sample's values (NeMo-RL writes them in an outer list of "
            f"one), found {len(value)} lists",
            "write one sample per line, as Logger.log_batched_dict_as_jsonl does.",
        )
    return value[0]


def _converted(obj: dict, keys: dict, label: str, number: int) -> dict:
    """The line's values for every role as numpy arrays (or a float / text), strictly checked,
    the arrays cut at the line's input length."""
    out: dict = {}
    id_key = keys[S.ROLE_SAMPLE_ID]
    if id_key not in obj and id_key == KEYS[S.ROLE_SAMPLE_ID] and OTHER_ID_KEY in obj:
        keys = {**keys, S.ROLE_SAMPLE_ID: OTHER_ID_KEY}
    for role, convert in CONVERT.items():
        if keys[role] in obj:
            where, hint = _where(label, number, keys[role]), _HINT.format(role=role)
            value = _unwrapped(obj[keys[role]], role in PER_TOKEN, where, hint)
            out[role] = convert(value, where, hint)
    if LENGTH_KEY in obj and LENGTH_KEY not in keys.values():
        _cut(out, obj[LENGTH_KEY], keys, _where(label, number, LENGTH_KEY))
    return out


def _cut(out: dict, raw: Any, keys: dict, where: str) -> None:
    """Keep the positions before the input length; the rest is the batch's right padding (a
    length beyond the arrays, or a model token in the padding, is an error)."""
    hint = "repair that line; input_lengths is the sequence length before padding."
    value = _unwrapped(raw, False, where, hint)
    lengths = pv.ints([value] if not isinstance(value, list) else value, where, hint)
    if lengths.size != 1 or lengths[0] < 0:
        raise InputError(f"{where}: expected one length >= 0, found {lengths.tolist()}", hint)
    length, width = int(lengths[0]), len(out[S.ROLE_ROLLOUT])
    if length > width:
        raise InputError(
            f"{where}: {length} is more than the {width} values of `{keys[S.ROLE_ROLLOUT]}`",
            hint,
        )
    mask = out.get(S.ROLE_MASK)
    if mask is not None and len(mask) == width and mask[length:].any():
        first = length + int(np.flatnonzero(mask[length:])[0])
        raise InputError(
            f"{where}: the sequence is {length} long, but `{keys[S.ROLE_MASK]}` marks a model "
            f"token at position {first}, in the padding past it",
            hint,
        )
    for role in PER_TOKEN:
        if role in out and len(out[role]) == width:
            out[role] = out[role][:length]
    out[CUT] = width - length


def _batches(
    path: Path, label: str, keys: dict, step: int, attrs: tuple[str, ...]
) -> Iterator[RaggedBatch]:
    chunk: list[tuple[int, dict]] = []
    tokens = 0
    masked = MaskPresence(label, keys[S.ROLE_MASK])
    for number, obj in _lines(path, label, keys, attrs):
        masked.see(number, S.ROLE_MASK in obj)
        chunk.append((number, obj))
        tokens += len(obj[S.ROLE_ROLLOUT])
        if tokens >= BATCH_TOKENS:
            yield _to_batch(chunk, path, step, keys, masked.any)
            masked.yielded()
            chunk, tokens = [], 0
    if chunk:
        yield _to_batch(chunk, path, step, keys, masked.any)


class MaskPresence:
    """Whether the lines of a file have a mask. Each line's own mask is used, and a line without
    one in a file whose other lines have it is a bad sample; lines already handed on as a
    batch without masks (a file of more than ``BATCH_TOKENS`` tokens) cannot be judged again,
    so such a file is refused when a mask appears after them."""

    def __init__(self, label: str, key: str) -> None:
        self.label, self.key = label, key
        self.any = False
        self.first_without: int | None = None  # the first line without a mask
        self.passed_without: int | None = None  # ... in a batch already handed on

    def see(self, number: int, has: bool) -> None:
        if has and not self.any and self.passed_without is not None:
            raise InputError(
                f"{self.label}: line {number} has `{self.key}`, but the lines from line "
                f"{self.passed_without} to it have none (the samples of the file disagree on "
                "having a mask)",
                f"write `{self.key}` on every line, or on none.",
            )
        self.any = self.any or has
        if not has and self.first_without is None:
            self.first_without = number

    def yielded(self) -> None:
        if not self.any:
            self.passed_without = self.first_without


def _to_batch(
    chunk: list[tuple[int, dict]], path: Path, step: int, keys: dict, masked: bool
) -> RaggedBatch:
    roll = [o[S.ROLE_ROLLOUT] for _, o in chunk]
    train = [o[S.ROLE_TRAINER] for _, o in chunk]
    batch = RaggedBatch(
        steps=np.full(len(chunk), step, dtype=np.int64),
        sample_ids=[o.get(S.ROLE_SAMPLE_ID, f"{path.stem}#{n}") for n, o in chunk],
        offsets=offsets_from_lengths(np.array([len(a) for a in roll], dtype=np.int64)),
        rollout=np.concatenate(roll),
        trainer=np.concatenate(train),
        locations=[f"line {n}" for n, _ in chunk],
        prompt_lengths=np.zeros(len(chunk), dtype=np.int64),  # the arrays span the sequence
    )
    batch.attrs = {name: [o[ATTRS][name] for _, o in chunk] for name in chunk[0][1][ATTRS]}
    batch.role_lengths[S.ROLE_TRAINER] = np.array([len(a) for a in train], dtype=np.int64)
    if any(CUT in o for _, o in chunk):
        batch.pad_outside = np.array([o.get(CUT, 0) for _, o in chunk], dtype=np.int64)
    if masked:  # every line's own mask; a line without one, in a file with masks, is bad
        masks = [o.get(S.ROLE_MASK, np.zeros(0, dtype=bool)) for _, o in chunk]
        batch.mask = np.concatenate(masks)
        batch.role_lengths[S.ROLE_MASK] = np.array([len(m) for m in masks], dtype=np.int64)
        has = [S.ROLE_MASK in o for _, o in chunk]
        batch.problems = lacking_mask(keys[S.ROLE_MASK], has)
    if S.ROLE_TOKENS in chunk[0][1]:
        ids = [o.get(S.ROLE_TOKENS, np.zeros(0, dtype=np.int64)) for _, o in chunk]
        batch.token_ids = np.concatenate(ids)
        batch.role_lengths[S.ROLE_TOKENS] = np.array([len(a) for a in ids], dtype=np.int64)
    if S.ROLE_REWARD in chunk[0][1]:
        batch.rewards = np.array([o.get(S.ROLE_REWARD, np.nan) for _, o in chunk])
    return batch
