"""Reads of the sequence rows (one row per response) of a selection: what the reports need
beside the token rows (empty sequences, per-step reward and entropy means), from one read of
each sequence file (a run of 1,000 steps has 1,000 of them: opening each is most of the cost)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from mismatchctl import schema as S
from mismatchctl.columns import numpy_of
from mismatchctl.engines.plan import Selection, row_mask
from mismatchctl.stats import registry as M
from mismatchctl.store.parts import read_columns

REWARD_MEAN = M.REWARD_MEAN
ENTROPY_MEAN = M.ENTROPY_MEAN
COLUMNS = (S.STEP, S.GPU, S.MODEL_TOKENS, S.REWARD)  # and the entropy, where a file has it

StepMeans = dict[str, tuple[np.ndarray, np.ndarray]]  # name -> (steps, means)


@dataclass
class RunSequences:
    """What a report takes from one run's sequence rows in the selection: its sequences without
    a model token (all masked) and, per step, ``REWARD_MEAN`` and ``ENTROPY_MEAN``
    (:func:`step_means`)."""

    empty: int = 0
    means: StepMeans = field(default_factory=dict)


def read_sequences(selection: Selection) -> dict[str, RunSequences]:
    """Per run of the selection's sequence files: :class:`RunSequences`, each file read once."""
    out: dict[str, RunSequences] = {}
    for run, paths in selection.sequence_paths.items():
        tables = []
        for path in paths:
            table = read_columns(path, COLUMNS, (S.ENTROPY,))
            if selection.rows.active:
                table = table.filter(row_mask(table, selection.rows))
            tables.append(table)
        empty = sum(int((numpy_of(t.column(S.MODEL_TOKENS)) == 0).sum()) for t in tables)
        out[run] = RunSequences(empty, step_means(tables))
    return out


def step_means(tables: list[pa.Table]) -> StepMeans:
    """Per step, ``REWARD_MEAN`` and ``ENTROPY_MEAN`` as (steps, means) of sequence rows (one
    table per file): the mean reward over the sequences that have one (empty sequences
    included: a reward belongs to the sample), and the entropy averaged over model tokens
    (sequence means weighted by their model tokens)."""
    sums: dict[str, dict[int, list[float]]] = {REWARD_MEAN: {}, ENTROPY_MEAN: {}}
    for table in tables:
        step = numpy_of(table.column(S.STEP))
        reward = _floats(table.column(S.REWARD))
        _accumulate(sums[REWARD_MEAN], step, reward, np.ones(len(step)))
        if S.ENTROPY in table.column_names:
            entropy = _floats(table.column(S.ENTROPY))
            weight = numpy_of(table.column(S.MODEL_TOKENS)).astype(np.float64)
            _accumulate(sums[ENTROPY_MEAN], step, entropy, weight)
    out = {}
    for name, per_step in sums.items():
        if per_step:
            steps = np.array(sorted(per_step), dtype=np.int64)
            values = np.array([per_step[s][0] / per_step[s][1] for s in steps.tolist()])
            out[name] = (steps, values)
    return out


def _floats(column: pa.ChunkedArray) -> np.ndarray:
    """A column of numbers as float64, nulls as NaN; no Arrow cast when it is float64 already
    (the store's type: pyarrow's compute module costs a process 0.1 s to load)."""
    if column.type != pa.float64():
        column = column.cast(pa.float64())
    return numpy_of(column, fill=np.nan)


def _accumulate(
    acc: dict[int, list[float]], step: np.ndarray, value: np.ndarray, weight: np.ndarray
) -> None:
    """Add weighted sums of the known (non-null) values per step; weights of 0 add nothing."""
    value = np.asarray(value, dtype=np.float64)
    keep = ~np.isnan(value) & (weight > 0)
    if not keep.any():
        return
    uniq, inverse = np.unique(step[keep], return_inverse=True)
    num = np.bincount(inverse, weights=value[keep] * weight[keep])
    den = np.bincount(inverse, weights=weight[keep])
    for s, a, b in zip(uniq.tolist(), num.tolist(), den.tolist(), strict=True):
        cell = acc.setdefault(int(s), [0.0, 0.0])
        cell[0] += a
        cell[1] += b
