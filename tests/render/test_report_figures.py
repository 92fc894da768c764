"""Figure data of a report agrees with the report's own counts (per run, and pooled), and the
figures show its numbers."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import mismatchctl
from mismatchctl.analysis.report.figure_data import StepLine, StepsPlot, pooled
from mismatchctl.analysis.report.view import distribution_figures
from mismatchctl.display import number
from mismatchctl.render import figures
from mismatchctl.stats.sample import DEFAULT_K
from tests.helpers import FIXTURES, multi_gpu_dump


def _report(store: Path, tmp_path: Path) -> mismatchctl.Report:
    for k in range(3):  # several parts, so the engine merges figure states
        multi_gpu_dump(tmp_path / f"dump-{k}.parquet", seed=20 + k)
    mismatchctl.ingest(sorted(tmp_path.glob("dump-*.parquet")), run="multi", store=store)
    mismatchctl.ingest([FIXTURES / "sequence.parquet"], run="seq", store=store)
    return mismatchctl.report(store=store, figures=True, by_gpu=True)


def test_figure_counts_match_the_report_per_run(store: Path, tmp_path: Path) -> None:
    rep = _report(store, tmp_path)
    assert rep.figures is not None and set(rep.figures) == {"multi", "seq"}
    for run, fd in rep.figures.items():
        tokens = rep.run(run).metrics["tokens"]
        assert fd.mismatch.total == fd.probs.total == tokens
        kinds = {
            g.by["turn_kind"]: g.metrics["sequences"]
            for g in rep.split("run", "turn_kind")
            if g.by["run"] == run
        }
        assert {k: d.total for k, d in fd.log_ppl_by_kind.items() if d.total} == kinds
        for kind, segments in kinds.items():
            assert len(fd.sample_kind(kind)) == min(DEFAULT_K, segments)
        assert set(fd.sample.run.tolist()) == {run}
    whole = pooled(rep.figures)
    assert whole.mismatch.total == rep.whole().metrics["tokens"]
    assert whole.log_ppl.total == sum(g.metrics["sequences"] for g in rep.split("turn_kind"))


def test_figure_data_is_the_same_for_any_worker_count(store: Path, tmp_path: Path) -> None:
    rep = _report(store, tmp_path)
    again = mismatchctl.report(store=store, figures=True, workers=3)
    for run in rep.figures:
        a, b = rep.figures[run], again.figures[run]
        assert np.array_equal(a.mismatch.counts, b.mismatch.counts)
        assert np.array_equal(a.log_ppl.counts, b.log_ppl.counts)
        assert np.array_equal(a.sample.priority, b.sample.priority)


def test_log_ppl_legend_gives_each_kinds_pearson(store: Path, tmp_path: Path) -> None:
    rep = _report(store, tmp_path)
    (fig,) = [f for f in distribution_figures(rep, "multi") if f.kind == "log_ppl"]
    names = [t.name for t in figures.build(fig).data if t.name]
    for g in rep.split("run", "turn_kind"):
        if g.by["run"] != "multi":
            continue
        pearson = number(g.metrics["log_ppl_pearson"], 6)
        assert any(figures.KIND_NAMES[g.by["turn_kind"]] in n and pearson in n for n in names), (
            names
        )


def test_each_line_of_the_steps_figure_has_its_own_colour() -> None:
    """Sixteen runs (the demo's) get sixteen colours: with the eight of Okabe-Ito repeated, the
    first and the ninth run were both blue. Up to eight lines keep Okabe-Ito's."""
    for n in (3, 16, 40):
        lines = [
            StepLine(f"r{i}", [0, 1], [1e-3 * (i + 1), 2e-3], ["low", "low"]) for i in range(n)
        ]
        fig = figures.steps_figure(StepsPlot("run", lines))
        colours = [t.line.color for t in fig.data]
        assert len(set(colours)) == n and [t.marker.color for t in fig.data] == colours
        assert colours[: min(n, 8)] == list(figures.PALETTE[: min(n, 8)])
    assert len(set(figures.palette(1000))) == 1000


def test_a_thousand_steps_are_a_line_on_a_step_axis() -> None:
    """A run of 1,000 steps: one point a step on a numeric step axis, drawn as a line (its
    markers would hide it); a run of a few steps keeps its markers."""
    steps = list(range(1000))
    long = StepLine("long", steps, [1e-3 * (1 + s / 999) for s in steps], ["low"] * 1000)
    short = StepLine("short", [0, 1, 2], [1e-3, 2e-3, 3e-3], ["low"] * 3)
    fig = figures.steps_figure(StepsPlot("run", [long, short]))
    assert [t.mode for t in fig.data] == ["lines", "lines+markers"]
    assert len(fig.data[0].x) == 1000 and fig.layout.xaxis.type in (None, "linear", "-")
