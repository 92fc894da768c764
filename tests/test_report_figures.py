"""Figure data of a report agrees with the report's own counts, and the figures show its numbers."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import mismatchctl
from mismatchctl.render import figures as F
from mismatchctl.render.fmt import num
from mismatchctl.stats.sample import DEFAULT_K
from tests.helpers import FIXTURES, multi_gpu_dump


def _report(store: Path, tmp_path: Path) -> mismatchctl.Report:
    for k in range(3):  # several parts, so the engine merges figure states
        multi_gpu_dump(tmp_path / f"dump-{k}.parquet", seed=20 + k)
    mismatchctl.ingest(sorted(tmp_path.glob("dump-*.parquet")), run="multi", store=store)
    mismatchctl.ingest([FIXTURES / "sequence.parquet"], run="seq", store=store)
    return mismatchctl.report(store=store, figures=True, by_gpu=True)


def test_figure_counts_match_the_report(store: Path, tmp_path: Path) -> None:
    rep = _report(store, tmp_path)
    fd = rep.figures
    assert fd is not None
    tokens = rep.whole().metrics["tokens"]
    assert fd.mismatch.total == fd.probs.total == tokens
    kinds = {g.by["turn_kind"]: g.metrics["sequences"] for g in rep.split("turn_kind")}
    assert {k: d.total for k, d in fd.log_ppl_by_kind.items()} == kinds
    assert fd.log_ppl.total == sum(kinds.values())
    for kind, segments in kinds.items():
        assert len(fd.sample_kind(kind)) == min(DEFAULT_K, segments)
    assert set(fd.sample.run.tolist()) == {"multi", "seq"}


def test_figure_data_is_the_same_for_any_worker_count(store: Path, tmp_path: Path) -> None:
    rep = _report(store, tmp_path)
    again = mismatchctl.report(store=store, figures=True, workers=3)
    a, b = rep.figures, again.figures
    assert np.array_equal(a.mismatch.counts, b.mismatch.counts)
    assert np.array_equal(a.log_ppl.counts, b.log_ppl.counts)
    assert np.array_equal(a.sample.priority, b.sample.priority)


def test_log_ppl_legend_gives_each_kinds_pearson(store: Path, tmp_path: Path) -> None:
    rep = _report(store, tmp_path)
    names = [t.name for t in F.log_ppl_figure(rep.figures, rep).data if t.name]
    for g in rep.split("turn_kind"):
        pearson = num(g.metrics["log_ppl_pearson"], 6)
        assert any(F.KIND_NAMES[g.by["turn_kind"]] in n and pearson in n for n in names), names
