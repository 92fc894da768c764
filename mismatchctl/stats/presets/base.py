"""Framework presets of the correction what-if: a correction exactly as one framework computes
it, configured by that framework's own keys, reporting that framework's own metric names.

A preset turns one chunk of model tokens into one mergeable state per cell (a cell: sequences
with equal run, step and gpu, so every sequence lies whole in one cell) and a merged state into
the framework's metrics. A state is a float64 vector whose columns merge by a rule each: sums
add, ``*_min`` columns take the minimum, ``*_max`` the maximum. Every preset also gives the
common numbers of ``whatif`` (tokens and sequences masked or clipped, the applied weights'
mean/std/min/max and their ESS) under the registry's names: the columns and the arithmetic of
those are shared (``put_common``, ``MetricsPreset``), each preset adds its framework's own.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, ClassVar, Protocol

import numpy as np

from mismatchctl.stats import registry as M

Config = dict[str, Any]
# the columns every preset's state begins and ends with (``put_common``, ``common_metrics``)
COUNTS = ["tokens", "seqs", "masked", "seq_masked"]
WEIGHTS = ["app_sum", "app_sq", "app_min", "app_max"]


def state_fields(*own: str) -> list[str]:
    """A preset's state columns: the common counts, its framework's own, the common weights."""
    return [*COUNTS, *own, *WEIGHTS]


class Preset(Protocol):
    """What ``whatif --preset`` needs of a framework's correction."""

    name: str
    framework: str  # the framework and the version (commit) the preset follows
    source: str  # the file of the framework's source it was transcribed from
    describes: str
    defaults: Config  # the framework's config keys and their defaults, in its own names
    clipped_key: str | None  # its metric of the share of ratios above the cap, if any

    def fields(self, config: Config) -> list[str]: ...

    def compute(
        self,
        lr: np.ndarray,
        lt: np.ndarray,
        seq: np.ndarray,
        code: np.ndarray,
        n_cells: int,
        config: Config,
    ) -> np.ndarray: ...

    def finalize(self, state: np.ndarray, config: Config) -> dict[str, Any]: ...

    def check(self, config: Config) -> None:
        """Raise ValueError when the config is one the framework would refuse."""


@dataclass
class Layout:
    """Columns of a preset's state and how each merges (by its name's suffix)."""

    names: list[str]
    index: dict[str, int] = field(init=False)

    def __post_init__(self) -> None:
        self.index = {n: i for i, n in enumerate(self.names)}

    def empty(self, rows: int) -> np.ndarray:
        out = np.zeros((rows, len(self.names)))
        for i, n in enumerate(self.names):
            if n.endswith("_min"):
                out[:, i] = np.inf
            elif n.endswith("_max"):
                out[:, i] = -np.inf
        return out


@dataclass(frozen=True)
class Chunk:
    """One chunk of model tokens for a preset: both sides' logprobs, each token's sequence
    (contiguous) and cell code, the number of cells and, for a preset that ``uses_turns``, each
    token's turn; with its sequences' first rows, lengths and cells, worked out once."""

    lr: np.ndarray
    lt: np.ndarray
    seq: np.ndarray
    code: np.ndarray
    n_cells: int
    turn: np.ndarray | None = None

    @cached_property
    def starts(self) -> np.ndarray:
        return sequence_starts(self.seq)

    @cached_property
    def lengths(self) -> np.ndarray:
        return np.diff(self.starts, append=len(self.seq))

    @cached_property
    def seq_code(self) -> np.ndarray:
        return self.code[self.starts]

    def seq_sum(self, values: np.ndarray) -> np.ndarray:
        return np.add.reduceat(np.asarray(values, np.float64), self.starts)

    def seq_any(self, flags: np.ndarray) -> np.ndarray:
        return np.maximum.reduceat(np.asarray(flags, np.float64), self.starts) > 0

    def seq_mean(self, values: np.ndarray) -> np.ndarray:
        return self.seq_sum(values) / self.lengths

    def spread(self, per_seq: np.ndarray) -> np.ndarray:
        """A value per sequence, repeated over its tokens."""
        return np.repeat(per_seq, self.lengths)


@dataclass(frozen=True)
class Cells:
    """The state rows (one a cell) of one chunk being written, a column by name: the per-cell
    sums of a value per token or per sequence, and the extremes."""

    out: np.ndarray
    col: dict[str, int]
    chunk: Chunk

    def tokens(self, name: str, values: np.ndarray) -> None:
        self._put(name, per_cell_sum(np.asarray(values, np.float64), self.chunk.code, self.cells))

    def seqs(self, name: str, values: np.ndarray) -> None:
        values = np.asarray(values, np.float64)
        self._put(name, per_cell_sum(values, self.chunk.seq_code, self.cells))

    def extreme(self, name: str, values: np.ndarray, op: Any, per_seq: bool = False) -> None:
        """The values' minimum (``op``: ``np.minimum``) or maximum per cell (per token values,
        or per sequence)."""
        code = self.chunk.seq_code if per_seq else self.chunk.code
        self._put(name, per_cell_extreme(values, code, self.cells, op))

    def extremes(self, prefix: str, values: np.ndarray, per_seq: bool = False) -> None:
        """``<prefix>_min`` and ``<prefix>_max`` of the values."""
        self.extreme(f"{prefix}_min", values, np.minimum, per_seq)
        self.extreme(f"{prefix}_max", values, np.maximum, per_seq)

    @property
    def cells(self) -> int:
        return self.chunk.n_cells

    def _put(self, name: str, per_cell: np.ndarray) -> None:
        self.out[:, self.col[name]] = per_cell


class StatePreset:
    """A preset's state columns: ``fields(config)``, ``STATE`` by default."""

    STATE: ClassVar[list[str]] = []

    def fields(self, config: Config) -> list[str]:
        return list(self.STATE)


class CellPreset(StatePreset, ABC):
    """The state half of a ``Preset``: ``compute`` lays out the cells' empty state (columns
    ``fields(config)``) and, when the chunk has tokens, lets ``fill`` write the framework's own
    columns, then the columns every preset has (``put_common``) of what ``fill`` returns."""

    def compute(
        self,
        lr: np.ndarray,
        lt: np.ndarray,
        seq: np.ndarray,
        code: np.ndarray,
        n_cells: int,
        config: Config,
        turn: np.ndarray | None = None,
    ) -> np.ndarray:
        lay = Layout(self.fields(config))
        out = lay.empty(n_cells)
        if len(lr):
            chunk = Chunk(lr, lt, seq, code, n_cells, turn)
            masked, applied = self.fill(Cells(out, lay.index, chunk), config)
            put_common(out, lay.index, chunk, chunk.starts, masked, applied)
        return out

    @abstractmethod
    def fill(self, cells: Cells, config: Config) -> tuple[np.ndarray, np.ndarray]:
        """Write the chunk's own columns of every cell; return which tokens the correction
        masks (per token, true or 1 when masked) and the weight it applies to each."""


class MetricsPreset(StatePreset, ABC):
    """The metrics half of a ``Preset``: ``finalize`` gives whatif's common numbers of a merged
    state (``common_metrics``), then the framework's own (``metrics``); a state of no token,
    its counts only."""

    def finalize(self, state: np.ndarray, config: Config) -> dict[str, Any]:
        v = dict(zip(self.fields(config), state.tolist(), strict=True))
        if not v["tokens"]:
            return {M.TOKENS: 0, M.SEQUENCES: 0}
        return common_metrics(v) | self.metrics(v, config)

    @abstractmethod
    def metrics(self, v: dict[str, float], config: Config) -> dict[str, Any]:
        """The framework's metrics, in its own names, of a merged state of some tokens (``v``:
        each column's value by name)."""


def common_metrics(v: dict[str, float]) -> dict[str, Any]:
    """whatif's common numbers of a merged state of some tokens: tokens and sequences, the
    shares masked, and the applied weights' mean, std, min, max and ESS ((Σw)² / (n Σw²))."""
    n, m = v["tokens"], v["seqs"]
    mean = v["app_sum"] / n
    squares = v["app_sq"]
    with np.errstate(over="ignore", invalid="ignore"):  # an infinite weight: inf and nan
        std = float(np.sqrt(max(squares / n - mean * mean, 0.0)))
        ess = mean * mean * n / squares if squares > 0 else None
    return {
        M.TOKENS: int(n),
        M.SEQUENCES: int(m),
        M.TOKEN_FRACTION: v["masked"] / n,
        M.SEQUENCE_FRACTION: v["seq_masked"] / m,
        M.WEIGHT_MEAN: mean,
        M.WEIGHT_STD: std,
        M.WEIGHT_MIN: v["app_min"],
        M.WEIGHT_MAX: v["app_max"],
        M.ESS: ess,
    }


def put_common(
    out: np.ndarray,
    col: dict[str, int],
    chunk: Chunk,
    starts: np.ndarray,
    masked: np.ndarray,
    applied: np.ndarray,
) -> None:
    """The columns of every preset's state, per cell: its tokens and sequences (``starts``:
    each one's first row), the tokens ``masked`` (per token, true or 1 when masked) and the
    sequences with one, and the ``applied`` weights' sum, sum of squares, minimum and maximum."""
    code, n_cells = chunk.code, chunk.n_cells
    seq_code = code[starts]
    masked = np.asarray(masked, np.float64)
    out[:, col["tokens"]] = per_cell_sum(np.ones(len(code)), code, n_cells)
    out[:, col["seqs"]] = per_cell_sum(np.ones(len(starts)), seq_code, n_cells)
    out[:, col["masked"]] = per_cell_sum(masked, code, n_cells)
    seq_hit = (np.maximum.reduceat(masked, starts) > 0).astype(np.float64)
    out[:, col["seq_masked"]] = per_cell_sum(seq_hit, seq_code, n_cells)
    with np.errstate(over="ignore", invalid="ignore"):  # an overflowing weight stays inf
        out[:, col["app_sum"]] = per_cell_sum(applied, code, n_cells)
        out[:, col["app_sq"]] = per_cell_sum(applied * applied, code, n_cells)
    out[:, col["app_min"]] = per_cell_extreme(applied, code, n_cells, np.minimum)
    out[:, col["app_max"]] = per_cell_extreme(applied, code, n_cells, np.maximum)


def sequence_starts(seq: np.ndarray) -> np.ndarray:
    """The first row of each sequence (a sequence's rows are contiguous)."""
    new = np.ones(len(seq), dtype=bool)
    new[1:] = seq[1:] != seq[:-1]
    return np.flatnonzero(new)


def merge(a: np.ndarray, b: np.ndarray, names: list[str]) -> np.ndarray:
    """Merge two states of one preset (columns named by ``names``): associative, commutative."""
    out = a + b
    for i, n in enumerate(names):
        if n.endswith("_min"):
            out[..., i] = np.minimum(a[..., i], b[..., i])
        elif n.endswith("_max"):
            out[..., i] = np.maximum(a[..., i], b[..., i])
    return out


def require_numbers(config: Config, keys: Any, nullable: bool = False) -> None:
    """Raise ValueError unless each key's value is a number (or, when ``nullable``, null)."""
    for key in keys:
        value = config[key]
        if not (isinstance(value, float) or (nullable and value is None)):
            raise ValueError(f"{key} `{value}`: a number" + (" or null" if nullable else ""))


def per_cell_sum(values: np.ndarray, code: np.ndarray, n_cells: int) -> np.ndarray:
    return np.bincount(code, weights=values, minlength=n_cells)


def per_cell_extreme(values: np.ndarray, code: np.ndarray, n_cells: int, op: Any) -> np.ndarray:
    out = np.full(n_cells, np.inf if op is np.minimum else -np.inf)
    op.at(out, code, values)
    return out


def parse_sets(preset: Preset, sets: list[str]) -> Config:
    """The preset's config: its defaults overridden by ``KEY=VALUE`` (the framework's keys;
    ``null``/``none`` for None, numbers as numbers, anything else as text)."""
    config = dict(preset.defaults)
    for item in sets:
        key, sep, value = (x.strip() for x in item.partition("="))
        if not sep or not key:
            raise ValueError(f"--set `{item}` is not KEY=VALUE")
        if key not in config:
            raise ValueError(
                f"--set `{item}`: {preset.name} has no key `{key}` (keys: {', '.join(config)})"
            )
        config[key] = _value(value)
    return config


def _value(text: str) -> Any:
    if text.lower() in ("null", "none", ""):
        return None
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    if (
        "_" in text or "," in text
    ):  # verl's LOWER_UPPER and lists (float() would read 0.5_2 as 0.52)
        return text
    try:
        number = float(text)
    except ValueError:
        return text
    return number if math.isfinite(number) else text
