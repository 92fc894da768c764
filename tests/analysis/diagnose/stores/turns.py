"""diagnose on faults placed among the turns that are not the tool turns' amplification: the
first turns alone hotter (the prompt's path), and a long-context path that lives inside the
later turns (a split-KV kernel taken from KV 48 on: the later turns hold those positions). The
first was passed ("among the turns: the tool_responses check", which only looks for later
turns hotter than the first); the second was named the tool responses (the part found was no
hotter than the later turns as a whole). Now a part is the later turns seen by position only
when, within the later turns, it is not hotter than their other tokens either.

The dumps are tests/planted.py's healthy runs with the mismatch of some model tokens scaled
(``write_scaled``); a uniform excess of every later-turn token stays the tool responses
(causes/test_tool_turns.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.helpers import SLOW
from tests.planted import Scale, scaled_store

ALARM = ("warn", "fail")


def _first_turn(factor: float) -> Scale:
    """K3 times ``factor`` on the first turn's model tokens (KV positions 0, 1, ... up to the
    first gap: the tool response)."""

    def scale(row: dict, kv: np.ndarray) -> np.ndarray:
        gaps = np.flatnonzero(np.diff(kv) > 1)
        end = gaps[0] + 1 if len(gaps) else len(kv)
        return np.where(np.arange(len(kv)) < end, factor, 1.0)

    return scale


def _long_kv(factor: float, kv_min: int = 48) -> Scale:
    return lambda row, kv: np.where(kv >= kv_min, factor, 1.0)


RUNS = {
    "first-3x": (1, _first_turn(3.0)),
    "first-10x": (2, _first_turn(10.0)),
    "kv-10x-1": (1, _long_kv(10.0)),
    "kv-10x-2": (2, _long_kv(10.0)),
    "kv-3x-2": (2, _long_kv(3.0)),
    "kv-100x": (3, _long_kv(100.0)),
    "healthy": (3, _first_turn(1.0)),
    "base": (99, _first_turn(1.0)),
}


# the runs the fast tests diagnose; the louder and second ones are written for the slow tests
FAST = ("first-3x", "kv-10x-1", "kv-3x-2", "healthy", "base")


def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    runs = RUNS if SLOW else {name: RUNS[name] for name in FAST}
    return scaled_store(tmp_path_factory.mktemp("turns"), runs)
