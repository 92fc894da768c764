"""The report's first-flip layer histogram: its bars are each run's `first_flip_share` per layer
(the share of compared, differing positions whose lowest differing layer it is, counted from
the routes), in the HTML page's Routing section; none without a flip or without routes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mismatchctl import api
from mismatchctl.render import figures, html
from tests.routing.moe_data import draw_logprobs, sequences, write


def _first_layers(seqs: list) -> np.ndarray:
    """Per layer, the compared model-token rows whose lowest differing layer it is."""
    counts = np.zeros(seqs[0].eng.shape[1], int)
    for s in seqs:
        for t in np.flatnonzero(s.mask):
            if (s.eng[t] < 0).any() or (s.tr[t] < 0).any():
                continue
            differ = [set(a) != set(b) for a, b in zip(s.eng[t], s.tr[t], strict=True)]
            if any(differ):
                counts[differ.index(True)] += 1
    return counts


def test_the_histogram_is_the_first_flip_share(tmp_path: Path) -> None:
    store = tmp_path / "store"
    want = {}
    for run, layers, seed in (("a", 4, 1), ("b", 6, 2)):
        seqs = sequences(seed, 16, layers)
        draw_logprobs(seqs, seed)
        api.ingest([write(tmp_path / f"{run}.parquet", seqs)], run, store=store)
        counts = _first_layers(seqs)
        want[run] = (counts, counts / counts.sum())
    rep = api.report(["a", "b"], store=store)
    (fig,) = [s for s in api.sections(rep) if s.id == "routing-first-flip"]
    assert fig.kind == "routing_first_flip" and fig.data.runs == ["a", "b"]
    built = figures.build(fig)
    for trace, run in zip(built.data, ("a", "b"), strict=True):
        counts, shares = want[run]
        assert list(trace.x) == list(range(len(counts)))
        assert np.allclose(trace.y, shares, rtol=1e-12)
        assert fig.data.counts[fig.data.runs.index(run)] == counts.tolist()
    by_layer = rep.to_dict()  # the same shares as the JSON's by_layer (with --by layer)
    assert "by_layer" not in by_layer["routing"]["a"]
    layers = api.report(["a"], store=store, by=["layer"]).to_dict()["routing"]["a"]["by_layer"]
    assert [x["first_flip_share"] for x in layers] == pytest.approx(want["a"][1].tolist())
    page = html.page("report", "moe", api.sections(rep))
    assert 'id="routing-first-flip-plot"' in page


def test_no_histogram_without_a_flip_or_routes(tmp_path: Path) -> None:
    store = tmp_path / "store"
    seqs = sequences(5, 8, 3, flip=0.0)
    for s in seqs:
        s.tr = s.eng.copy()  # replayed: the trainer's routes are the engine's
    draw_logprobs(seqs, 5)
    api.ingest([write(tmp_path / "same.parquet", seqs)], "same", store=store)
    api.ingest([write(tmp_path / "none.parquet", seqs, routes=False)], "none", store=store)
    rep = api.report(["same"], store=store)
    assert rep.routing["same"].partial.by_layer_first_flip.sum() == 0
    assert not [s for s in api.sections(rep) if s.id == "routing-first-flip"]
    assert not [s for s in api.sections(api.report(["none"], store=store)) if "routing" in s.id]
