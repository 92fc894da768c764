"""diagnose on a stop handled differently by the two sides: the last model token of every
response with its K3 rate multiplied (the engine's logprob of the end-of-sequence token, a stop
string). At 100x the turn_ends check finds the turns' last token hot against the other tokens
and against the seven before it, and the cause is "stop". At 2x and 3x (scaled plants, with no
physical counterpart: a stop handled differently replaces a token's logprob, 100-3178x its
neighbours in the calibration corpora) the ends are hot but under ``STOP_SHARP`` their
neighbours: no stop. A mismatch that grows toward the end (from KV 48 on, as a long-context
kernel) also makes the ends hot, but no more than the tokens before them: it stays a code path
(the sample `faulty-attn`, whose turns' last token is 6x the rest and 1.8x the seven before it,
interval 0.78-4.1, is in the golden diagnosis). Healthy runs are quiet.

The dumps are tests/planted.py's healthy runs, scaled with ``write_scaled``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.planted import scaled_store

ALARM = ("warn", "fail")


def _last(factor: float):
    return lambda row, kv: np.where(np.arange(len(kv)) == len(kv) - 1, factor, 1.0)


RUNS = {
    "stop-2x": (2, _last(2.0)),
    "stop-3x": (1, _last(3.0)),
    "stop-100x": (2, _last(100.0)),
    "long-10x": (1, lambda row, kv: np.where(kv >= 48, 10.0, 1.0)),
    "healthy": (3, _last(1.0)),
}


def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    fleet = {"fleet": "b"}
    tags = {"stop-100x": fleet, "healthy": fleet}
    return scaled_store(tmp_path_factory.mktemp("ends"), RUNS, tags=tags)
