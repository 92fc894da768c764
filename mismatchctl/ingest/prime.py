"""prime-rl token exports: ``<output_dir>/token_exports/step_<N>/rank_<R>.jsonl``.

The trainer writes them with ``enable_token_export = true`` (prime-rl's
``trainer/rl/token_export.py``, schema version 1): one JSON object per packed sequence, with the
step, rank, ``export_sequence_idx`` and per-token arrays aligned to the whole sequence (context
and sampled spans interleaved, no prompt/completion split): ``token_ids``, ``loss_mask``,
``inference_logprobs`` (the sampler's), ``trainer_logprobs`` (the learner's forward at that step),
``entropy``, ``rl_weights`` / ``ce_weights`` / ``ref_kl_weights`` (lists of nulls when absent),
and diagnostics (``mismatch_kl``, ``importance_ratio``...). Non-finite values are written as null.

The model tokens are the ones prime-rl measures its own mismatch KL on: ``loss_mask`` tokens
that are rl or ref_kl members; loss-mask tokens of the ce component alone (distilled tokens of a
frozen model, without sampling logprobs) are not, and are counted in a note.
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
from mismatchctl.ingest.batch import RaggedBatch, offsets_from_lengths
from mismatchctl.ingest.column_roles import refuse_unread_roles
from mismatchctl.ingest.jsonl import json_objects, require_keys
from mismatchctl.ingest.source import BATCH_TOKENS, Source, step_in_range
from mismatchctl.options import FORMAT_PRIME

SCHEMA_VERSION = 1
KEYS = {
    S.ROLE_ROLLOUT: "inference_logprobs",
    S.ROLE_TRAINER: "trainer_logprobs",
    S.ROLE_MASK: "loss_mask",
    S.ROLE_TOKENS: "token_ids",
    S.ROLE_ENTROPY: "entropy",
    S.ROLE_STEP: "step",
}
MEMBERS = ("rl_weights", "ref_kl_weights")  # tokens with a nonzero weight have sampling logprobs
POSITION_IDS = "position_ids"  # the KV position of every token of the (packed) sequence
ATTRIBUTES = ("env_name", "rank")  # per-sequence categories of the writer: kept as attributes
PER_TOKEN = (
    (S.ROLE_ROLLOUT, pv.floats),
    (S.ROLE_TRAINER, pv.floats),
    (S.ROLE_MASK, pv.mask),
    (S.ROLE_TOKENS, pv.ints),
    (S.ROLE_ENTROPY, pv.floats),
)


def open_prime(
    path: Path, mapping: Mapping[str, str], label: str | None = None, attrs: Sequence[str] = ()
) -> Source:
    """``label``: the file as messages name it (default: its path); ``attrs``: keys kept as
    attributes beside ``env_name`` and ``rank`` (a line without one: null)."""
    refuse_unread_roles(mapping, KEYS, "prime-rl token exports")
    attr.check_names(attrs)
    keys = {**KEYS, **mapping}
    source = Source(path, FORMAT_PRIME, iter(()), dict(keys))
    source.attributes = list(dict.fromkeys([*ATTRIBUTES, *attrs]))
    source.batches = _batches(
        path, label or str(path), keys, mapping, source.notes, tuple(source.attributes)
    )
    return source


def _records(
    path: Path, name: str, keys: dict, mapping: Mapping[str, str]
) -> Iterator[tuple[int, dict]]:
    """The lines as objects; each must have both sides, the mask and every mapped key."""
    hint = "leave the file out of the inputs, or pass the right --format."
    for number, obj in json_objects(path, name, "sequence", hint):
        require_keys(
            obj, (S.ROLE_ROLLOUT, S.ROLE_TRAINER, S.ROLE_MASK, *mapping), keys, name, number, ""
        )
        yield number, obj


def _where(name: str, number: int, key: str) -> str:
    return f"{name}: line {number}: `{key}`"


def _converted(obj: dict, keys: dict, name: str, number: int) -> dict[str, Any]:
    """The line's per-token arrays by role, its step and sample id, and its member mask."""
    out: dict[str, Any] = {}
    for role, convert in PER_TOKEN:
        if keys[role] in obj:
            hint = f"repair that line, or name another key with --map {role}=<key>."
            out[role] = convert(obj[keys[role]], _where(name, number, keys[role]), hint)
    out[S.ROLE_STEP] = _step(obj, keys[S.ROLE_STEP], name, number)
    rank, index = obj.get("rank"), obj.get("export_sequence_idx")
    ints = all(isinstance(v, int) and not isinstance(v, bool) for v in (rank, index))
    out[S.ROLE_SAMPLE_ID] = f"rank{rank}-{index}" if ints else f"{Path(name).stem}#{number}"
    out["members"] = _members(obj, len(out[S.ROLE_MASK]), name, number)
    out["prompt"] = _prompt(obj, len(out[S.ROLE_ROLLOUT]), name, number)
    return out


def _prompt(obj: dict, n: int, name: str, number: int) -> int:
    """0 when the line's ``position_ids`` count from its first token (the arrays span the
    sequence: positions are KV positions); -1 (unknown) for a packed line whose positions
    restart inside it, or a line without them."""
    values = obj.get(POSITION_IDS)
    if values is None:
        return -1
    hint = "repair that line (position_ids: one integer per token)."
    ids = pv.ints(values, _where(name, number, POSITION_IDS), hint)
    return 0 if len(ids) == n and np.array_equal(ids, np.arange(n)) else -1


def _step(obj: dict, key: str, name: str, number: int) -> int:
    value = obj.get(key)
    hint = "repair that line, or name the step key with --map step=<key>."
    if isinstance(value, int) and not isinstance(value, bool):
        return step_in_range(value, _where(name, number, key), hint)
    raise InputError(
        f"{_where(name, number, key)}: expected the step as an integer, found {pv.brief(value)}",
        hint,
    )


def _members(obj: dict, n: int, name: str, number: int) -> np.ndarray | None:
    """Tokens that are rl or ref_kl members (nonzero weight); None when both streams are
    absent (every loss-mask token is then an rl member)."""
    members = None
    for key in MEMBERS:
        values = obj.get(key)
        if values is None or (isinstance(values, list) and all(v is None for v in values)):
            continue
        hint = "repair that line (a weight stream has one weight per token, or only nulls)."
        weights = pv.floats(values, _where(name, number, key), hint)
        if len(weights) != n or np.isnan(weights).any():
            raise InputError(
                f"{_where(name, number, key)}: expected {n} weights (one per token, no null), "
                f"found {len(weights)} with {int(np.isnan(weights).sum())} null",
                hint,
            )
        nonzero = weights != 0
        members = nonzero if members is None else members | nonzero
    return members


def _batches(
    path: Path,
    name: str,
    keys: dict,
    mapping: Mapping[str, str],
    notes: list[str],
    attrs: tuple[str, ...],
) -> Iterator[RaggedBatch]:
    """Batches of about BATCH_TOKENS tokens. What only the whole file tells (ce-only tokens left
    out, other schema versions) is noted at the end: notes are recorded after every batch."""
    chunk: list[tuple[int, dict]] = []
    tokens = ce_only = 0
    versions: set[Any] = set()
    packed = 0
    for number, obj in _records(path, name, keys, mapping):
        values = _converted(obj, keys, name, number)
        values["attrs"] = {
            a: attr.requested_value(obj.get(a), a, _where(name, number, a)) for a in attrs
        }
        packed += values["prompt"] < 0
        versions.add(obj.get("schema_version"))
        if values["members"] is not None:
            ce_only += int((values[S.ROLE_MASK] & ~values["members"]).sum())
        chunk.append((number, values))
        tokens += len(values[S.ROLE_ROLLOUT])
        if tokens >= BATCH_TOKENS:
            yield _to_batch(chunk, name, keys)
            chunk, tokens = [], 0
    if chunk:
        yield _to_batch(chunk, name, keys)
    if ce_only:
        notes.append(
            f"{ce_only} loss-mask tokens of the ce component only (no sampling logprobs) are "
            "not counted as model tokens, as in prime-rl's own mismatch KL"
        )
    if packed:
        notes.append(
            f"{packed} sequences without `{POSITION_IDS}` counting from their first token "
            "(packed samples, or no position ids): no prompt length, kv_position is the index "
            "in the exported sequence"
        )
    other = sorted(map(repr, versions - {SCHEMA_VERSION}))
    if other:
        notes.append(f"schema_version {', '.join(other)} (this reader follows {SCHEMA_VERSION})")


def _to_batch(chunk: list[tuple[int, dict]], name: str, keys: dict) -> RaggedBatch:
    def cat(role: str) -> tuple[np.ndarray, np.ndarray]:
        arrays = [v[role] for _, v in chunk]
        return np.concatenate(arrays), np.array([len(a) for a in arrays], dtype=np.int64)

    rollout, lengths = cat(S.ROLE_ROLLOUT)
    trainer, trainer_lengths = cat(S.ROLE_TRAINER)
    batch = RaggedBatch(
        steps=np.array([v[S.ROLE_STEP] for _, v in chunk], dtype=np.int64),
        sample_ids=[v[S.ROLE_SAMPLE_ID] for _, v in chunk],
        offsets=offsets_from_lengths(lengths),
        rollout=rollout,
        trainer=trainer,
        mask=np.concatenate([_model(v) for _, v in chunk]),
        locations=[f"line {n}" for n, _ in chunk],
        prompt_lengths=np.array([v["prompt"] for _, v in chunk], dtype=np.int64),
    )
    batch.attrs = {a: [v["attrs"][a] for _, v in chunk] for a in chunk[0][1]["attrs"]}
    batch.role_lengths[S.ROLE_TRAINER] = trainer_lengths
    batch.role_lengths[S.ROLE_MASK] = cat(S.ROLE_MASK)[1]
    for role, name in ((S.ROLE_TOKENS, "token_ids"), (S.ROLE_ENTROPY, "entropy")):
        lacking = [n for n, v in chunk if role not in v]
        if len(lacking) == len(chunk):
            continue
        if lacking:
            raise InputError(
                f"{name}: line {lacking[0]} has no `{keys[role]}`, which other lines have",
                "repair the file; every line of a token export has the same keys.",
            )
        values, role_lengths = cat(role)
        setattr(batch, name, values)
        batch.role_lengths[role] = role_lengths
    return batch


def _model(values: dict) -> np.ndarray:
    """loss_mask, restricted to rl / ref_kl members when the line has weight streams."""
    mask, members = values[S.ROLE_MASK], values["members"]
    return mask if members is None else mask & members
