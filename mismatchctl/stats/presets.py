"""Framework presets of the correction what-if: a correction exactly as one framework computes
it, configured by that framework's own keys, reporting that framework's own metric names.

A preset turns one chunk of model tokens into one mergeable state per cell (a cell: sequences
with equal run, step and gpu, so every sequence lies whole in one cell) and a merged state into
the framework's metrics. A state is a float64 vector whose columns merge by a rule each: sums
add, ``*_min`` columns take the minimum, ``*_max`` the maximum. Every preset also gives the
common numbers of ``whatif`` (tokens and sequences masked or clipped, the applied weights'
mean/std/min/max and their ESS) under the registry's names.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import numpy as np

Config = dict[str, Any]


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
    (contiguous) and cell code, and the number of cells."""

    lr: np.ndarray
    lt: np.ndarray
    seq: np.ndarray
    code: np.ndarray
    n_cells: int


class CellPreset(ABC):
    """The state half of a ``Preset``: ``compute`` lays out the cells' empty state (columns
    ``fields(config)``, ``STATE`` by default) and, when the chunk has tokens, lets ``fill``
    write each column (``col``: a column's index by name)."""

    STATE: ClassVar[list[str]] = []

    def fields(self, config: Config) -> list[str]:
        return list(self.STATE)

    def compute(
        self,
        lr: np.ndarray,
        lt: np.ndarray,
        seq: np.ndarray,
        code: np.ndarray,
        n_cells: int,
        config: Config,
    ) -> np.ndarray:
        lay = Layout(self.fields(config))
        out = lay.empty(n_cells)
        if len(lr):
            self.fill(out, lay.index, Chunk(lr, lt, seq, code, n_cells), config)
        return out

    @abstractmethod
    def fill(self, out: np.ndarray, col: dict[str, int], chunk: Chunk, config: Config) -> None:
        """Write the chunk's columns of every cell into ``out`` (rows: cells)."""


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


def all_presets() -> dict[str, Preset]:
    """Every preset, by name."""
    from mismatchctl.stats.preset_areal import ArealRejection
    from mismatchctl.stats.preset_dppo import Dppo
    from mismatchctl.stats.preset_opsm import SlimeOpsm
    from mismatchctl.stats.preset_roll import RollTrainInfer
    from mismatchctl.stats.preset_skyrl import SkyrlOffPolicy
    from mismatchctl.stats.preset_slime import SlimeTis
    from mismatchctl.stats.preset_trl import TrlVllmIs
    from mismatchctl.stats.preset_verl import VerlRolloutCorr

    presets: list[Preset] = [
        VerlRolloutCorr(),
        TrlVllmIs(),
        SlimeTis(),
        SlimeOpsm(),
        SkyrlOffPolicy(),
        ArealRejection(),
        RollTrainInfer(),
        Dppo(),
    ]
    return {p.name: p for p in presets}
