"""The one shape every reader produces: a batch of whole sequences as flat arrays plus offsets.

Readers only *read*; everything they have in common (validation, turn derivation, keeping only model
tokens, counting prompt/tool/padding positions) happens once, in :mod:`mismatchctl.ingest.canonical`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from mismatchctl.columns import arrow_of


@dataclass
class RaggedBatch:
    """``n`` sequences; sequence ``i`` owns the flat positions ``offsets[i]:offsets[i+1]``.

    ``mask`` is None when the dump has no mask (every listed token then counts as a model token).
    ``turn`` is None when the dump has no turn index (it is then derived from the mask runs).
    ``position`` is None when positions are simply 0..len-1 within each sequence.
    ``entropy`` / ``entropies`` are None when the dump has no entropy (the sequence rows then hold
    null).
    """

    steps: np.ndarray  # int64 [n]
    sample_ids: list[str]  # [n]
    offsets: np.ndarray  # int64 [n + 1]
    rollout: np.ndarray  # float64 [total]
    trainer: np.ndarray  # float64 [total]
    mask: np.ndarray | None = None  # bool [total]
    token_ids: np.ndarray | None = None  # int64 [total]
    turn: np.ndarray | None = None  # int32 [total]
    position: np.ndarray | None = None  # int32 [total]
    gpus: list[str | None] | None = None  # [n]
    rewards: np.ndarray | None = None  # float64 [n], NaN = unknown
    # per-token entropy (nats), aligned with the logprobs; only model tokens are read
    entropy: np.ndarray | None = None  # float64 [total]
    # per-sequence entropy given by the dump as one mean per response (used when ``entropy`` is
    # None); NaN = unknown, unless ``entropies_given`` says the dump holds a value there (a NaN
    # the dump wrote is bad data, a null is an unknown)
    entropies: np.ndarray | None = None  # float64 [n]
    entropies_given: np.ndarray | None = None  # bool [n]; None = every non-NaN value
    weight_versions: np.ndarray | None = None  # float64 [n] (NaN = unknown), integral values
    # positions of each sequence that the dump describes but the arrays leave out: the prompt
    # before a response-only array (slime's tokens, verl's attention_mask), and the padding cut
    # off past a stated length (NeMo-RL's input_lengths); added to the sequence row's counts
    prompt_outside: np.ndarray | None = None  # int64 [n]
    pad_outside: np.ndarray | None = None  # int64 [n]
    # tokens before position 0 of each sequence's arrays (the KV cache when its first position
    # was decoded): the prompt outside the arrays, or 0 when they span the whole sequence;
    # None, or -1 for one sequence, when the dump does not say (stored as null)
    prompt_lengths: np.ndarray | None = None  # int64 [n]
    # the token ids of the prompt the arrays leave out (a prompt-ids list column), flat, with
    # per-sequence offsets; a sequence whose list is null or not its whole prompt has none
    prompt_ids: np.ndarray | None = None  # int64 [sum of lengths]
    prompt_id_offsets: np.ndarray | None = None  # int64 [n + 1]
    # per-sequence attributes of the dump (``data_source``, ``dp_rank``...) as text (None: null);
    # the source says which attributes it has (``Source.attributes``)
    attrs: dict[str, list[str | None]] = field(default_factory=dict)
    # the name of the column the mask came from when it does not mark tool responses (the
    # response part of an attention mask): its kept positions are checked for tool fills
    partial_mask: str | None = None
    # where each sequence came from, for error messages ("row 17", "line 3", "sample 5")
    locations: list[str] = field(default_factory=list)
    # per-sequence lengths of each per-token role whose arrays were read separately; canonicalisation
    # checks them against the rollout lengths (a mismatch is an error naming the sample)
    role_lengths: dict[str, np.ndarray] = field(default_factory=dict)
    # routed experts (MoE) per side role (``rollout_routes`` / ``trainer_routes``), as read:
    # decoded during canonicalisation (``ingest.routes``)
    routes: dict[str, RouteColumn] = field(default_factory=dict)
    # bad samples the reader found, by index: (reason counted in the tally, detail for the
    # message), e.g. a sample without the mask the file's other samples have
    problems: dict[int, tuple[str, str]] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return len(self.sample_ids)

    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def location(self, i: int) -> str:
        return self.locations[i] if self.locations else f"sequence {i}"


@dataclass
class RouteColumn:
    """One side's routes column of a batch, one value per sequence, in its encoding; ``starts``:
    SGLang's ``routed_experts_start_len`` per sequence; ``widths``: per sequence, the positions
    before the response in a whole-sequence list (an attention mask's prompt part)."""

    # a column; arrays (rows from position 0); or one [sequences, rows, layers, top_k] array
    # (a padded batch tensor, rows placed like a column's lists)
    values: pa.Array | list[np.ndarray] | np.ndarray
    name: str
    starts: np.ndarray | None = None
    widths: np.ndarray | None = None

    def keep(self, keep: np.ndarray) -> RouteColumn:
        if isinstance(self.values, np.ndarray):
            values: pa.Array | list[np.ndarray] | np.ndarray = self.values[keep]
        elif isinstance(self.values, list):
            values = [v for v, k in zip(self.values, keep, strict=True) if k]
        else:
            values = self.values.filter(arrow_of(np.asarray(keep, dtype=bool)))
        return RouteColumn(
            values,
            self.name,
            None if self.starts is None else self.starts[keep],
            None if self.widths is None else self.widths[keep],
        )


def lacking_mask(key: str, has: list[bool]) -> dict[int, tuple[str, str]]:
    """The samples of a batch without the mask that others have (``has``: per sample): bad
    samples, each named (a mask is never guessed for one sample from another's)."""
    if all(has) or not any(has):
        return {}
    detail = f"no `{key}`, which other samples of the file have (each sample's own mask is used)"
    return {i: ("no mask", detail) for i, h in enumerate(has) if not h}


def offsets_from_lengths(lengths: np.ndarray) -> np.ndarray:
    """Exclusive prefix sum: lengths [3, 2] -> offsets [0, 3, 5]."""
    out = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=out[1:])
    return out


def sequence_index(offsets: np.ndarray) -> np.ndarray:
    """For every flat position, the index of the sequence that owns it."""
    lengths = np.diff(offsets)
    return np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
