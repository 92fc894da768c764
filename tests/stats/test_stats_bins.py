"""Probability bins: the three spec forms, every parse error, assignment at the edges, labels."""

from __future__ import annotations

import numpy as np
import pytest

from mismatchctl.stats import LOG_EDGES, assign_bins, bin_label, parse_bins


def test_log_default_edges() -> None:
    edges = parse_bins("log")
    want = [0, 1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 0.1, 0.5, 0.9, 0.99, 1]
    assert edges.tolist() == want
    assert len(edges) - 1 == 12
    assert parse_bins(" LOG ").tolist() == want
    edges[0] = 5.0  # a copy: callers cannot corrupt the default
    assert LOG_EDGES[0] == 0.0


@pytest.mark.parametrize("spec, n", [("linear:1", 1), ("linear:4", 4), ("Linear: 10", 10)])
def test_linear(spec, n) -> None:
    edges = parse_bins(spec)
    assert np.allclose(edges, np.arange(n + 1) / n, rtol=0, atol=1e-15)
    assert edges[0] == 0.0 and edges[-1] == 1.0


def test_explicit() -> None:
    assert parse_bins("0,0.001,0.5,1").tolist() == [0, 0.001, 0.5, 1]
    assert parse_bins(" 0 , 1e-3 , 1 ").tolist() == [0, 1e-3, 1]
    assert parse_bins("0,1").tolist() == [0, 1]


@pytest.mark.parametrize(
    "spec, message",
    [
        ("linear:0", "positive integer (found '0')"),
        ("linear:-3", "positive integer (found '-3')"),
        ("linear:x", "positive integer (found 'x')"),
        ("linear:", "positive integer (found '')"),
        ("linear:2.5", "positive integer (found '2.5')"),
        ("", "found an empty string"),
        ("0.5", "found the single value 0.5"),
        ("lg", "found the single value lg"),
        ("0,abc,1", "edge 'abc' is not a number"),
        ("0,,1", "edge '' is not a number"),
        ("0,nan,1", "edge 'nan' is not finite"),
        ("0,inf,1", "edge 'inf' is not finite"),
        ("0.1,0.5,1", "must start at 0 (found 0.1)"),
        ("-0.5,0.5,1", "must start at 0 (found -0.5)"),
        ("0,0.5,0.9", "must end at 1 (found 0.9)"),
        ("0,0.5,2", "must end at 1 (found 2)"),
        ("0,0.5,0.5,1", "strictly increasing (found 0.5 then 0.5)"),
        ("0,0.6,0.2,1", "strictly increasing (found 0.6 then 0.2)"),
    ],
)
def test_parse_errors_say_what_is_wrong(spec, message) -> None:
    with pytest.raises(ValueError, match=r"bins.*" + _escape(message)):
        parse_bins(spec)


def _escape(text: str) -> str:
    import re

    return re.escape(text)


def test_assign_exact_edges_and_ends() -> None:
    pr = np.array([0.0, 1e-9, 1e-8, 1e-7, 0.5, np.nextafter(0.99, 0), 0.99, 1.0, 1.00005])
    assert assign_bins(pr, LOG_EDGES).tolist() == [0, 0, 1, 2, 9, 10, 11, 11, 11]
    assert assign_bins(np.exp(np.array([1e-4])), LOG_EDGES).tolist() == [11]
    assert assign_bins(pr, LOG_EDGES).dtype == np.int64


def test_assign_linear_and_matches_definition() -> None:
    edges = parse_bins("linear:4")
    assert assign_bins(np.array([0.0, 0.25, 0.2499, 0.75, 1.0]), edges).tolist() == [0, 1, 0, 3, 3]
    pr = np.random.default_rng(0).random(10_000)
    got = assign_bins(pr, LOG_EDGES)
    assert np.all(LOG_EDGES[got] <= pr) and np.all(pr < LOG_EDGES[got + 1])


def test_labels() -> None:
    assert bin_label(LOG_EDGES, 0) == "[0, 1e-08)"
    assert bin_label(LOG_EDGES, 1) == "[1e-08, 1e-07)"
    assert bin_label(LOG_EDGES, 8) == "[0.1, 0.5)"
    assert bin_label(LOG_EDGES, 11) == "[0.99, 1]"
    with pytest.raises(ValueError, match=r"0\.\.11 \(found 12\)"):
        bin_label(LOG_EDGES, 12)


@pytest.mark.parametrize(
    "edges",
    [LOG_EDGES, [0.0, 1e-3, 0.5, 1.0], [0.1, 0.5, 1.0], [0.2, 0.3], np.linspace(0, 1, 70)],
)
def test_assign_bins_is_a_binary_search_on_edges(edges) -> None:
    """Both ways of assigning bins (comparisons for a few edges, a binary search for many) give
    searchsorted's bin, edges and values beyond the ends included."""
    rng = np.random.default_rng(3)
    edges = np.asarray(edges, dtype=np.float64)
    pr = np.concatenate(
        [rng.random(5000), edges, np.nextafter(edges, -1), [0.0, 1e-300, 1.0, 1.0001]]
    )
    want = np.clip(np.searchsorted(edges, pr, side="right") - 1, 0, len(edges) - 2)
    np.testing.assert_array_equal(assign_bins(pr, edges), want)
