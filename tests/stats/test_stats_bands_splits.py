"""Severity bands at their exact boundaries, the step summary vs numpy, and turn splits."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mismatchctl.stats import (
    BAND_NAMES,
    TURN_INDEX_LABELS,
    TURN_KIND_LABELS,
    band,
    step_summary,
    turn_index,
    turn_kind,
)


def _above(x: float) -> float:
    return float(np.nextafter(x, math.inf))


@pytest.mark.parametrize(
    "x, want",
    [
        (0.0, "low"),
        (1e-3, "low"),
        (_above(1e-3), "medium"),
        (2e-2, "medium"),
        (_above(2e-2), "high"),
        (1e-1, "high"),
        (_above(1e-1), "severe"),
        (math.inf, "severe"),
        (None, None),
        (math.nan, None),
    ],
)
def test_band_boundaries(x, want) -> None:
    assert band(x) == want


def test_step_summary_matches_numpy() -> None:
    values = [*np.random.default_rng(1).lognormal(-5, 2, size=57).tolist(), None, math.nan]
    got = step_summary(values)
    xs = np.array(values[:57])
    assert got["vllm_kl_step_median"] == pytest.approx(np.percentile(xs, 50), rel=1e-15)
    assert got["vllm_kl_step_p90"] == pytest.approx(np.percentile(xs, 90), rel=1e-15)
    assert got["vllm_kl_step_max"] == xs.max()
    edges = [0, 1e-3, 2e-2, 1e-1, math.inf]
    for name, lo, hi in zip(BAND_NAMES, edges, edges[1:], strict=False):
        want = np.mean((xs > lo if name != "low" else xs >= lo) & (xs <= hi))
        assert got[f"band_share_{name}"] == pytest.approx(want), name
    assert sum(got[f"band_share_{n}"] for n in BAND_NAMES) == pytest.approx(1.0)


def test_step_summary_small_and_empty() -> None:
    one = step_summary([0.05])
    assert one["vllm_kl_step_median"] == one["vllm_kl_step_p90"] == one["vllm_kl_step_max"] == 0.05
    assert one["band_share_high"] == 1.0 and one["band_share_low"] == 0.0
    empty = step_summary([None])
    assert all(v is None for k, v in empty.items() if k != "steps")


def test_turn_kind_and_index() -> None:
    turns = np.array([0, 1, 2, 3, 4, 17, 0])
    assert turn_kind(turns).tolist() == [0, 1, 1, 1, 1, 1, 0]
    assert turn_index(turns).tolist() == [0, 1, 2, 3, 3, 3, 0]
    assert TURN_KIND_LABELS == ("first", "later")
    assert TURN_INDEX_LABELS == ("0", "1", "2", "3+")
    assert turn_kind(np.array([], dtype=np.int32)).dtype == np.int64
    with pytest.raises(ValueError, match=r"turn indices must be >= 0 \(found -1\)"):
        turn_index(np.array([0, -1]))
