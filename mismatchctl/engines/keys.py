"""Per-token group keys of one part: codes (small ints) plus the label of each code."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from mismatchctl import schema as S
from mismatchctl.engines import plan as K
from mismatchctl.stats import (
    TURN_INDEX_LABELS,
    TURN_KIND_LABELS,
    assign_bins,
    turn_index,
    turn_kind,
)
from mismatchctl.stats.turnruns import TurnRuns

Label = str | int | None


@dataclass
class KeyCodes:
    codes: np.ndarray  # int64 per token (or a scalar 0 broadcast for part-constant keys)
    labels: list[Label]


class PartKeys:
    """Computes each key's codes for the tokens of one part, once, on demand."""

    def __init__(self, table: pa.Table, run: str, tags: dict[str, str], edges: np.ndarray) -> None:
        self.table, self.run, self.tags, self.edges = table, run, tags, edges
        self.n = table.num_rows
        self._cache: dict[str, KeyCodes] = {}
        self.runs: TurnRuns | None = None  # the slice's turn runs, once the engine made them

    def get(self, key: str) -> KeyCodes:
        if key not in self._cache:
            self._cache[key] = self._compute(key)
        return self._cache[key]

    def _compute(self, key: str) -> KeyCodes:
        zeros = np.zeros(self.n, dtype=np.int64)
        if key == K.RUN:
            return KeyCodes(zeros, [self.run])
        if key.startswith(K.TAG_PREFIX):
            return KeyCodes(zeros, [self.tags.get(key[len(K.TAG_PREFIX) :])])
        if key == K.STEP:
            values, codes = np.unique(self.column(S.STEP), return_inverse=True)
            return KeyCodes(codes.astype(np.int64), [int(v) for v in values])
        if key == K.GPU:
            return self._gpu()
        if key == K.TURN_KIND:
            return KeyCodes(turn_kind(self.column(S.TURN)), list(TURN_KIND_LABELS))
        if key == K.TURN:
            labels: list[Label] = [int(x) if x.isdigit() else x for x in TURN_INDEX_LABELS]
            return KeyCodes(turn_index(self.column(S.TURN)), labels)
        if key == K.BIN:
            pr = np.exp(self.column(S.ROLLOUT))
            return KeyCodes(
                assign_bins(pr, self.edges).astype(np.int64), list(range(len(self.edges) - 1))
            )
        raise ValueError(key)

    def column(self, column: str) -> np.ndarray:
        return self.table.column(column).to_numpy()

    def _gpu(self) -> KeyCodes:
        col = self.table.column(S.GPU)
        if not pa.types.is_dictionary(col.type):
            col = col.dictionary_encode()
        col = col.unify_dictionaries() if isinstance(col, pa.ChunkedArray) else col
        arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
        labels: list[Label] = arr.dictionary.to_pylist()
        codes = arr.indices.fill_null(len(labels)).to_numpy().astype(np.int64)
        return KeyCodes(codes, [*labels, None])


def group_codes(
    keys: PartKeys, split: tuple[str, ...]
) -> tuple[np.ndarray, int, list[list[Label]]]:
    """Mixed-radix code of the split's keys per token, the number of codes, and each key's labels."""
    code = np.zeros(keys.n, dtype=np.int64)
    size = 1
    labels = []
    for key in split:
        kc = keys.get(key)
        code = code * len(kc.labels) + kc.codes
        size *= len(kc.labels)
        labels.append(kc.labels)
    return code, size, labels


def decode(code: int, labels: list[list[Label]]) -> tuple[Label, ...]:
    out: list[Label] = []
    for values in reversed(labels):
        code, digit = divmod(code, len(values))
        out.append(values[digit])
    return tuple(reversed(out))
