"""diagnose on a mismatch that grows over the run against one that switches on at a step: the
steps of a smooth growth also split into a lower and a higher group (the regimes check) and the
localized check finds the late steps, but they follow a rising line at least as closely as two
levels: the cause is the growth, not a code path. A fault from one step on keeps two levels and
stays a code path.

The dumps are tests/planted.py's healthy runs with the mismatch of every model token scaled by
step (``write_scaled``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.helpers import SLOW
from tests.planted import Scale, scaled_store

STEPS = 24


ALARM = ("warn", "fail")


def _growth(factor: float) -> Scale:  # K3 times factor**(step / last step): smooth, geometric
    return lambda row, kv: np.full(len(kv), factor ** (row["step"] / (STEPS - 1)))


def _from_step(factor: float, first: int) -> Scale:  # K3 times factor from one step on
    return lambda row, kv: np.full(len(kv), factor if row["step"] >= first else 1.0)


RUNS = {
    "grows-3x-1": (1, _growth(3.0)),
    "grows-3x-2": (2, _growth(3.0)),
    "grows-10x": (3, _growth(10.0)),
    "switch-3x": (1, _from_step(3.0, 16)),
    "switch-10x": (2, _from_step(10.0, 16)),
    "base": (99, _growth(1.0)),
}


def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    slow_only = ("grows-3x-2", "grows-10x", "switch-10x")  # written when the slow tests run
    runs = {name: run for name, run in RUNS.items() if SLOW or name not in slow_only}
    return scaled_store(tmp_path_factory.mktemp("growth"), runs)
