"""verl ``DataProto.save_to_disk`` files: the trainer batch of one step, pickled.

verl's PPO trainer keeps a step's samples in one ``DataProto``; its ``batch`` holds right-padded
tensors of one row per response: ``responses`` and ``response_mask`` (1 on LLM-generated tokens,
0 on tool tokens and padding), ``rollout_log_probs`` (from vLLM/SGLang, with
``actor_rollout_ref.rollout.calculate_log_probs=True``) and ``old_log_probs`` (recomputed by the
actor), all ``[batch, response_length]``; ``attention_mask`` spans prompt + response; ``uid`` sits
in ``non_tensor_batch``. Masked positions hold 0.0 on both logprob sides.

A pickle can run code when it is loaded, so these files are read only with ``--trust-pickle``,
and then by a restricted unpickler (:mod:`mismatchctl.ingest.verl_dataproto`) that calls no code
of verl, tensordict or the file: verl need not be installed.

Without ``response_mask`` the response part of ``attention_mask`` is the mask (as verl's own
``compute_response_mask`` makes it): it excludes padding but not tool tokens, so a batch where
one side holds 0.0 runs under it (tool responses) is refused.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mismatchctl import schema as S
from mismatchctl.errors import InputError
from mismatchctl.ingest import attributes as attr
from mismatchctl.ingest import py_values as pv
from mismatchctl.ingest.batch import RaggedBatch, RouteColumn
from mismatchctl.ingest.canonical import derive_turns
from mismatchctl.ingest.column_roles import refuse_unread_roles
from mismatchctl.ingest.source import (
    BATCH_TOKENS,
    ROUTES_BATCH_DIVISOR,
    Source,
    step_from_name,
    step_in_range,
)
from mismatchctl.ingest.verl_dataproto import DataProtoContent, load_dataproto
from mismatchctl.options import FORMAT_VERL
from mismatchctl.stats.sentinels import FILL_OTHER_MAX, ZERO_RUN_MIN, sentinel_state

TRUST_FLAG = "--trust-pickle"
ATTENTION = "attention_mask"
KEYS = {
    S.ROLE_ROLLOUT: "rollout_log_probs",
    S.ROLE_TRAINER: "old_log_probs",
    S.ROLE_MASK: "response_mask",
    S.ROLE_TOKENS: "responses",
    S.ROLE_ENTROPY: "entropys",
    S.ROLE_REWARD: "token_level_scores",  # per token; the reward is the row's sum, as in verl
    S.ROLE_SAMPLE_ID: "uid",  # in non_tensor_batch
    S.ROLE_STEP: "global_steps",  # in meta_info
}
# routed experts (MoE), batch tensors [rows, prompt + response (or response), layers, top_k]:
# verl's `routed_experts` is the engine's (router replay R3; R2 keeps the actor's under that name)
ROUTE_KEYS = {
    S.ROLE_ROLLOUT_ROUTES: ("rollout_routed_experts", "routed_experts"),
    S.ROLE_TRAINER_ROUTES: ("trainer_routed_experts",),
}
MAPPABLE = (*KEYS, *ROUTE_KEYS)


@dataclass
class VerlBatch:
    """The whole step as ``[rows, response_length]`` arrays (``mask`` bool, ``tokens`` int64,
    the rest float64) and one value per row."""

    rollout: np.ndarray
    trainer: np.ndarray
    mask: np.ndarray
    sample_ids: list[str]
    step: int
    tokens: np.ndarray | None = None
    entropy: np.ndarray | None = None
    rewards: np.ndarray | None = None
    # per row, the prompt's tokens (from attention_mask): held for the sequence rows
    prompt_lengths: np.ndarray | None = None
    # per-row attributes (from non_tensor_batch), as text
    attrs: dict[str, list[attr.Text]] = field(default_factory=dict)
    # routed experts per side role: (batch key, integer [rows, route rows, layers, top_k])
    routes: dict[str, tuple[str, np.ndarray]] = field(default_factory=dict)
    # positions before the response in a whole-sequence routes tensor: attention_mask's prompt
    # part (its width, padding included); None without an attention mask
    route_width: int | None = None


def open_verl(
    path: Path,
    mapping: Mapping[str, str],
    trust_pickle: bool = False,
    label: str | None = None,
    attrs: Sequence[str] = (),
) -> Source:
    """``label``: the file as messages name it (default: its path); ``attrs``: keys of
    ``non_tensor_batch`` kept as attributes (beside those found automatically:
    ``ingest.attributes``)."""
    name = label or str(path)
    if not trust_pickle:
        raise _refused(name)
    refuse_unread_roles(mapping, MAPPABLE, "verl DataProto pickles")
    content = load_dataproto(path, name)
    keys = {**KEYS, **_route_keys(content), **mapping}
    for role, key in mapping.items():
        if not _present(content, role, key):
            raise InputError(
                f"{name}: `{key}` (from --map {role}={key}) is not in the DataProto (batch keys: "
                f"{', '.join(content.batch)}; non_tensor_batch: {', '.join(content.non_tensor)}; "
                f"meta_info: {', '.join(map(str, content.meta))})",
                f"name an existing key with --map {role}=<key>.",
            )
    source = Source(path, FORMAT_VERL, iter(()), {r: keys[r] for r in keys})
    source.notes.append(
        f"loaded with {TRUST_FLAG} by a restricted unpickler (no code from the file was run)"
    )
    data = _read(content, keys, name, source.notes)
    data.attrs = _attributes(content, keys, len(data.sample_ids), attrs, name, source.notes)
    source.attributes = list(data.attrs)
    source.columns = {r: k for r, k in keys.items() if _present(content, r, k)}
    if S.ROLE_MASK not in source.columns:
        source.columns[S.ROLE_MASK] = f"{ATTENTION} (response part)"
    source.batches = _batches(data, name)
    return source


def _refused(name: str) -> InputError:
    return InputError(
        f"{name} is a verl DataProto pickle (DataProto.save_to_disk); reading it means "
        "unpickling it, which is refused unless you opt in, so that no code from a dump runs",
        f"if you trust the file and whoever wrote it, pass {TRUST_FLAG}: the file is then read "
        "by a restricted unpickler that rebuilds only numpy arrays and torch tensors and calls "
        "no other class or function the file names. Otherwise export the batch to Parquet "
        "(one row per response).",
    )


def _present(content: DataProtoContent, role: str, key: str) -> bool:
    if role == S.ROLE_SAMPLE_ID:
        return key in content.non_tensor
    if role == S.ROLE_STEP:
        return key in content.meta
    return key in content.batch or (role == S.ROLE_REWARD and key in content.non_tensor)


def _read(content: DataProtoContent, keys: dict, name: str, notes: list[str]) -> VerlBatch:
    _require_sides(content, keys, name)
    rollout = _matrix(content, keys, S.ROLE_ROLLOUT, name)
    shape = rollout.shape
    data = VerlBatch(
        rollout=rollout,
        trainer=_matrix(content, keys, S.ROLE_TRAINER, name, shape),
        mask=_mask(content, keys, name, shape, notes),
        sample_ids=_sample_ids(content, keys[S.ROLE_SAMPLE_ID], name, shape[0]),
        step=_step(content, keys[S.ROLE_STEP], name, notes),
    )
    if keys[S.ROLE_TOKENS] in content.batch:
        data.tokens = _matrix(content, keys, S.ROLE_TOKENS, name, shape, ints=True)
    if keys[S.ROLE_ENTROPY] in content.batch:
        data.entropy = _matrix(content, keys, S.ROLE_ENTROPY, name, shape)
    data.rewards = _rewards(content, keys[S.ROLE_REWARD], name, shape[0])
    if ATTENTION in content.batch:
        whole = response_attention(content, name, shape, whole=True)
        if whole.shape[1] > shape[1]:  # a prompt part: its ones are the prompt's tokens
            data.prompt_lengths = prompt_lengths(whole, shape[1])
    if data.prompt_lengths is None:
        notes.append(
            f"no prompt part in `{ATTENTION}`: no prompt lengths (kv_position counts from the "
            "first position of the response)"
        )
    if keys[S.ROLE_MASK] not in content.batch:
        _refuse_tool_runs(data, name)
    data.routes = _routes(content, keys, name, shape[0])
    if data.routes and ATTENTION in content.batch:
        data.route_width = int(_numpy(content.batch[ATTENTION]).shape[1] - shape[1])
    _notes(content, data, notes)
    return data


def _route_keys(content: DataProtoContent) -> dict[str, str]:
    """The routes' batch keys found under their names (the first of each role's)."""
    out = {}
    for role, names in ROUTE_KEYS.items():
        for key in names:
            if key in content.batch or key in content.jagged:
                out[role] = key
                break
    return out


def _routes(
    content: DataProtoContent, keys: dict, name: str, rows: int
) -> dict[str, tuple[str, np.ndarray]]:
    """Each side's routes tensor as an integer array ``[rows, route rows, layers, top_k]`` (no
    copy); where its rows sit is decided per sequence with the logprobs (``ingest.routes``)."""
    out = {}
    for role in ROUTE_KEYS:
        key = keys.get(role)
        if key is None:
            continue
        where = f"{name}: batch key `{key}`"
        hint = f"save the routes as one padded tensor, or name another key with --map {role}=<key>."
        if key in content.jagged:
            raise InputError(
                f"{where} is a nested (jagged) tensor; this reader reads padded [batch, "
                "prompt_length + response_length, layers, top_k] routes",
                hint,
            )
        value = content.batch[key]
        arr = value.detach().cpu().numpy() if hasattr(value, "detach") else np.asarray(value)
        if arr.ndim != 4 or arr.shape[0] != rows:
            raise InputError(
                f"{where} has shape {list(arr.shape)}, expected [{rows}, prompt_length + "
                "response_length (or response_length), layers, top_k]",
                hint,
            )
        if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
            raise InputError(f"{where}: expert ids of type {arr.dtype}, expected integers", hint)
        if arr.shape[2] * arr.shape[3] == 0:
            raise InputError(
                f"{where} has shape {list(arr.shape)}: no layers or no top-k ids", hint
            )
        out[role] = (key, arr)
    return out


def _require_sides(content: DataProtoContent, keys: dict, name: str) -> None:
    found = ", ".join(content.batch) or "none"
    rollout, trainer = keys[S.ROLE_ROLLOUT], keys[S.ROLE_TRAINER]
    for key in (rollout, trainer):
        if key in content.jagged:
            raise InputError(
                f"{name}: batch key `{key}` is a nested (jagged) tensor; this reader reads "
                "padded [batch, response_length] tensors",
                "save the batch with padded tensors (verl's default), or export it to Parquet.",
            )
    if rollout not in content.batch:
        raise InputError(
            f"{name}: the DataProto batch has no `{rollout}` (batch keys: {found})",
            "verl records the inference side with actor_rollout_ref.rollout."
            "calculate_log_probs=True; or name its key with --map rollout=<key>.",
        )
    if trainer not in content.batch:
        raise InputError(
            f"{name} holds only the inference side: `{rollout}` but no `{trainer}` (batch "
            f"keys: {found}). This is a generation batch (such as verl's rollout-skip "
            "gen_batch.dp), saved before the actor recomputes the logprobs",
            "save the batch after the actor's compute_log_prob has added old_log_probs (in the "
            "trainer's fit loop), or name the trainer key with --map trainer=<key>.",
        )


def _numpy(value: Any) -> np.ndarray:
    """A torch tensor (or numpy array) as numpy: floats as float64 (bf16 included)."""
    if hasattr(value, "detach"):
        value = value.detach().cpu()
        if value.is_floating_point():
            value = value.double()
        value = value.numpy()
    return np.asarray(value)


def _matrix(
    content: DataProtoContent,
    keys: dict,
    role: str,
    name: str,
    shape: tuple[int, ...] | None = None,
    ints: bool = False,
) -> np.ndarray:
    """A role's batch tensor as a 2-D array, of ``shape`` (the rollout side's) when given."""
    key = keys[role]
    arr = _numpy(content.batch[key])
    where = f"{name}: batch key `{key}`"
    hint = f"re-save the batch, or name another key with --map {role}=<key>."
    if arr.ndim != 2 or (shape is not None and arr.shape != shape):
        expected = "[batch, response_length]"
        if shape is not None:
            expected = f"{list(shape)}, the shape of `{keys[S.ROLE_ROLLOUT]}`"
        raise InputError(f"{where} has shape {list(arr.shape)}, expected {expected}", hint)
    convert = pv.ints if ints else pv.floats
    return convert(arr, where, hint).reshape(arr.shape)


def _mask(
    content: DataProtoContent, keys: dict, name: str, shape: tuple[int, int], notes: list[str]
) -> np.ndarray:
    key = keys[S.ROLE_MASK]
    if key in content.batch:
        arr = _numpy(content.batch[key])
        where = f"{name}: batch key `{key}`"
        if arr.shape != shape:
            raise InputError(
                f"{where} has shape {list(arr.shape)}, expected {list(shape)} (like the logprobs)",
                "name a 0/1 mask of the response tokens with --map mask=<key>.",
            )
        return pv.mask(arr, where, "name a 0/1 mask with --map mask=<key>.").reshape(shape)
    if ATTENTION not in content.batch:
        raise InputError(
            f"{name}: the batch has neither `{key}` nor `{ATTENTION}` (batch keys: "
            f"{', '.join(content.batch)})",
            "name a 0/1 mask of the response tokens with --map mask=<key>.",
        )
    notes.append(
        f"no `{key}`: the response part of `{ATTENTION}` is the mask (padding excluded; "
        "tool tokens would count)"
    )
    return response_attention(content, name, shape)


def response_attention(
    content: DataProtoContent, name: str, shape: tuple[int, int], whole: bool = False
) -> np.ndarray:
    """The last ``response_length`` columns of ``attention_mask`` as a bool mask (``whole``:
    prompt and response)."""
    arr = _numpy(content.batch[ATTENTION])
    where = f"{name}: batch key `{ATTENTION}`"
    if arr.ndim != 2 or arr.shape[0] != shape[0] or arr.shape[1] < shape[1]:
        raise InputError(
            f"{where} has shape {list(arr.shape)}, expected [{shape[0]}, prompt_length + "
            f"{shape[1]}] (prompt + response)",
            "name a 0/1 mask of the response tokens with --map mask=<key>.",
        )
    mask = pv.mask(arr, where, "name a 0/1 mask with --map mask=<key>.").reshape(arr.shape)
    return mask if whole else mask[:, arr.shape[1] - shape[1] :]


def prompt_lengths(attention: np.ndarray, response_length: int) -> np.ndarray:
    """Per row, the prompt's tokens: the 1s of ``attention`` (prompt + response, bool) before
    its last ``response_length`` columns (verl left-pads prompts with 0s)."""
    return attention[:, : attention.shape[1] - response_length].sum(axis=1).astype(np.int64)


def object_column(value: Any) -> np.ndarray:
    """A ``non_tensor_batch`` value as an object array: a numpy array as it is; a list or tuple
    as one element per item, never looked into (numpy would make a nested list a deeper array:
    lists nested 100,000 deep, or sharing one list many times over, would take unbounded time
    and memory); anything else as one element."""
    if isinstance(value, np.ndarray):
        return value.astype(object, copy=False)
    items = value if isinstance(value, list | tuple) else [value]
    out = np.empty(len(items), dtype=object)
    for i, item in enumerate(items):
        out[i] = item
    return out


def _attributes(
    content: DataProtoContent,
    keys: dict,
    rows: int,
    requested: Sequence[str],
    name: str,
    notes: list[str],
) -> dict[str, list[attr.Text]]:
    """The attributes among ``non_tensor_batch``: its arrays of one scalar per row
    (``data_source``...), but the sample id's and the reward's."""
    candidates: dict[str, list[attr.Text]] = {}
    for key, value in content.non_tensor.items():
        if key in (keys[S.ROLE_SAMPLE_ID], keys[S.ROLE_REWARD]) or not isinstance(key, str):
            continue
        values = object_column(value)
        if values.ndim != 1 or len(values) != rows:
            continue
        items = values.tolist()
        if all(attr.is_scalar(v, floats=key in requested) for v in items):
            candidates[key] = [attr.as_text(v) for v in items]
    attr.check_requested(requested, list(candidates), f"{name}: non_tensor_batch")
    return attr.choose(candidates, requested, name, notes)


def _refuse_tool_runs(data: VerlBatch, name: str) -> None:
    """With the attention mask as the mask, tool tokens count as model tokens: where verl wrote
    0.0 for them on the rollout side, runs of one-sided exact zeros show them."""
    rows, width = data.rollout.shape
    model = data.mask.reshape(-1)
    offsets = np.arange(rows + 1, dtype=np.int64) * width
    seq = np.repeat(np.arange(rows), width)[model]
    turn = derive_turns(model, offsets)[model]
    lr, lt = data.rollout.reshape(-1)[model], data.trainer.reshape(-1)[model]
    state = sentinel_state(lr, lt, seq, turn, np.zeros(len(seq), dtype=np.int64))
    if state.zero_run_tokens == 0:
        return
    first = min(seq for _, _, seq, what in state.examples if what == "0.0 run")
    raise InputError(
        f"{name}: the batch has no `response_mask`, and the response part of `{ATTENTION}` "
        f"(the mask then) counts {state.zero_run_tokens} tokens in runs of >= {ZERO_RUN_MIN} "
        "where one side is exactly 0.0 and the other drops to p <= "
        f"{np.exp(FILL_OTHER_MAX):g} (first in sample `{data.sample_ids[first]}`, row "
        f"{first}): tool-response tokens, which verl fills with 0.0 on the rollout side and "
        f"{ATTENTION} does not exclude",
        "save the batch after verl adds response_mask (its fit loop does right after "
        "generation), or name a 0/1 mask of the model tokens with --map mask=<key>.",
    )


def _sample_ids(content: DataProtoContent, key: str, name: str, rows: int) -> list[str]:
    if key not in content.non_tensor:
        return [f"{Path(name).stem}#{i}" for i in range(rows)]
    values = object_column(content.non_tensor[key]).reshape(-1)
    where = f"{name}: non_tensor_batch `{key}`"
    if len(values) != rows:
        raise InputError(
            f"{where} has {len(values)} values, expected one per row ({rows})",
            "re-save the batch, or name another key with --map sample_id=<key>.",
        )
    hint = "name another key with --map sample_id=<key>."
    for i, v in enumerate(values.tolist()):
        if not isinstance(v, str | int | np.integer) or isinstance(v, bool):
            raise InputError(
                f"{where}: row {i} is {pv.brief(v)}, expected text or an integer", hint
            )
    return [pv.text(v, f"{where}: row {i}", hint) for i, v in enumerate(values.tolist())]


def _step(content: DataProtoContent, key: str, name: str, notes: list[str]) -> int:
    if key in content.meta:
        value = content.meta[key]
        hint = "re-save the batch, or name another meta_info key with --map step=<key>."
        if isinstance(value, int | np.integer) and not isinstance(value, bool):
            return step_in_range(int(value), f"{name}: meta_info `{key}`", hint)
        raise InputError(
            f"{name}: meta_info `{key}` is {pv.brief(value)}, expected the step as an integer",
            hint,
        )
    named = step_from_name(Path(name), name)
    if named is not None:
        return named
    notes.append(f"no meta_info `{key}` and no step in the file name: step 0")
    return 0


def _rewards(content: DataProtoContent, key: str, name: str, rows: int) -> np.ndarray | None:
    """verl's sequence score: the row sum of ``token_level_scores``; or one number per row from
    ``non_tensor_batch``."""
    if key in content.batch:
        scores = _numpy(content.batch[key])
        if scores.ndim != 2 or scores.shape[0] != rows:
            raise InputError(
                f"{name}: batch key `{key}` has shape {list(scores.shape)}, expected [{rows}, "
                "response_length] (per-token scores)",
                "name per-token scores with --map reward=<key>.",
            )
        return (
            pv.floats(scores, f"{name}: batch key `{key}`", "re-save the batch.")
            .reshape(scores.shape)
            .sum(axis=1)
        )
    if key in content.non_tensor:
        values = object_column(content.non_tensor[key]).reshape(-1)
        where = f"{name}: non_tensor_batch `{key}`"
        hint = "name another key with --map reward=<key>."
        if len(values) != rows:
            raise InputError(
                f"{where} has {len(values)} values, expected one per row ({rows})", hint
            )
        return np.array([pv.scalar(v, where, hint) for v in values.tolist()])
    return None


def _notes(content: DataProtoContent, data: VerlBatch, notes: list[str]) -> None:
    if content.replaced:
        names = sorted(content.replaced)
        more = f" and {len(names) - 5} more" if len(names) > 5 else ""
        notes.append(f"not loaded (not read by mismatchctl): {', '.join(names[:5])}{more}")
    if data.mask.any() and np.array_equal(data.rollout[data.mask], data.trainer[data.mask]):
        notes.append(
            "the two sides are equal on every model token: verl's bypass mode copies "
            "rollout_log_probs into old_log_probs, so there is no mismatch to measure"
        )


def _batches(data: VerlBatch, name: str) -> Iterator[RaggedBatch]:
    rows, width = data.rollout.shape
    per_batch = max(1, BATCH_TOKENS // max(width, 1))
    if data.routes:  # the routing rows' temporaries are per token and layer
        per_batch = max(1, per_batch // ROUTES_BATCH_DIVISOR)
    for start in range(0, rows, per_batch):
        yield _to_batch(data, start, min(rows, start + per_batch))


def _to_batch(data: VerlBatch, start: int, end: int) -> RaggedBatch:
    n, width = end - start, data.rollout.shape[1]

    def flat(a: np.ndarray | None) -> np.ndarray | None:
        return None if a is None else a[start:end].reshape(-1)

    prompts = None if data.prompt_lengths is None else data.prompt_lengths[start:end]
    widths = None if data.route_width is None else np.full(n, data.route_width, dtype=np.int64)
    routes = {
        role: RouteColumn(arr[start:end], key, None, widths)
        for role, (key, arr) in data.routes.items()
    }
    return RaggedBatch(
        steps=np.full(n, data.step, dtype=np.int64),
        sample_ids=data.sample_ids[start:end],
        offsets=np.arange(n + 1, dtype=np.int64) * width,
        rollout=data.rollout[start:end].reshape(-1),
        trainer=data.trainer[start:end].reshape(-1),
        mask=data.mask[start:end].reshape(-1),
        token_ids=flat(data.tokens),
        entropy=flat(data.entropy),
        rewards=None if data.rewards is None else data.rewards[start:end],
        locations=[f"row {i}" for i in range(start, end)],
        prompt_outside=prompts,
        prompt_lengths=prompts,
        attrs=attr.per_batch(data.attrs, start, end),
        routes=routes,
    )
