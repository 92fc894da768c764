"""Several reads in one pass of the engine (``run_reads``, what ``compare`` reads its two sides
with): each read's groups and extra states equal to those of its own ``run_passes``, folded in
task order, and each read handed back as soon as its parts are folded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import mismatchctl
from mismatchctl.analysis.report.report import report_on, reports_on
from mismatchctl.analysis.report.sequences import SequenceSums
from mismatchctl.analysis.selection import select
from mismatchctl.engines import plan as K
from mismatchctl.engines.local import Read, run_passes, run_reads
from mismatchctl.ingest import source as ingest_source
from mismatchctl.stats.bins import LOG_EDGES
from mismatchctl.store import parts as store_parts
from tests.helpers import multi_gpu_dump


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Runs ``a`` and ``b`` of several small parts each."""
    base = tmp_path_factory.mktemp("reads")
    store = base / "store"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(store_parts, "PART_TOKENS", 4000)
        mp.setattr(ingest_source, "BATCH_TOKENS", 4000)
        for run, seed in (("a", 1), ("b", 2)):
            multi_gpu_dump(base / f"{run}.parquet", seed=seed)
            mismatchctl.ingest([base / f"{run}.parquet"], run=run, store=store)
    assert len(mismatchctl.open_store(store).parts("a")) >= 3
    return store


def _reads(store: Path) -> list[Read]:
    """Side ``a`` whole, and side ``b``'s H20 rows of steps 3 and later: each read with its own
    row filter."""
    opened = mismatchctl.open_store(store)
    passes = K.plan([(K.RUN,), (K.RUN, K.STEP), (K.GPU, K.BIN)])
    sides = [select(opened, ["a"]), select(opened, ["b"], K.StepRange(3, None), gpu="H20")]
    return [Read(s.tasks, passes, LOG_EDGES, s.rows, [SequenceSums()]) for s in sides]


def _same(x: Any, y: Any) -> None:
    """The same groups with the same state and histogram, bit for bit, and the same sequences."""
    (groups_x, states_x), (groups_y, states_y) = x, y
    for gx, gy in zip(groups_x, groups_y, strict=True):
        assert list(gx) == list(gy) and gx
        for key, px in gx.items():
            py = gy[key]
            assert np.array_equal(px.state, py.state, equal_nan=True), key
            assert (px.hist is None and py.hist is None) or np.array_equal(px.hist, py.hist)
    for sx, sy in zip(states_x, states_y, strict=True):
        assert sx.same(sy) and len(sx) > 0


def test_each_read_is_folded_as_if_read_alone(two_runs: Path) -> None:
    reads = _reads(two_runs)
    events: list[Any] = []

    def on_read(i: int, folded: Any) -> None:
        events.append(("read", i, folded))

    together = run_reads(reads, 2, lambda rows: events.append(("part", rows)), on_read)
    for read, folded in zip(reads, together, strict=True):
        _same(
            folded, run_passes(read.tasks, read.passes, read.edges, read.rows, 2, None, read.extras)
        )
    # read 0 is handed back once its own parts are folded, before any part of read 1 is
    n_a = len(reads[0].tasks)
    assert [e[0] for e in events] == ["part"] * n_a + ["read"] + ["part"] * len(reads[1].tasks) + [
        "read"
    ]
    assert [e[1] for e in events if e[0] == "part"] == [t.rows for r in reads for t in r.tasks]
    assert events[n_a][2] is together[0] and events[-1][2] is together[1]


def test_reports_of_two_selections_equal_their_own_reports(two_runs: Path) -> None:
    opened = mismatchctl.open_store(two_runs)
    sides = [select(opened, ["a"]), select(opened, ["b"], gpu="A100")]
    seen: list[tuple[int, int]] = []
    both = reports_on(
        sides, by_gpu=True, by=[(K.TURN_KIND, K.BIN)], extras=[SequenceSums()],
        on_read=lambda i, states: seen.append((i, len(states[0]))),
    )  # fmt: skip
    assert seen == [(0, len(both[0].extra_states[0])), (1, len(both[1].extra_states[0]))]
    for sel, rep in zip(sides, both, strict=True):
        alone = report_on(sel, by_gpu=True, by=[(K.TURN_KIND, K.BIN)], extras=[SequenceSums()])
        assert rep.to_dict() == alone.to_dict()
        assert rep.extra_states[0].same(alone.extra_states[0])


def test_each_report_is_made_whole_before_the_next_selection_is_folded(
    two_runs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Side A's report is finished (rolled up, its sequence rows read) as soon as its parts are
    folded, while the workers read side B's: only the last side's finishing is left after the
    read."""
    from mismatchctl.analysis.report import report as report_module

    opened = mismatchctl.open_store(two_runs)
    sides = [select(opened, ["a"]), select(opened, ["b"])]
    events: list[tuple[str, Any]] = []
    finish = report_module._finish

    def recorded(plan: Any, *folded: Any) -> Any:
        events.append(("finish", plan.selection.names))
        return finish(plan, *folded)

    monkeypatch.setattr(report_module, "_finish", recorded)
    both = reports_on(
        sides, by_gpu=True, on_part=lambda rows: events.append(("part", rows)),
        on_read=lambda i, _: events.append(("read", i)),
    )  # fmt: skip
    n_a, n_b = (len(s.tasks) for s in sides)
    assert [e[0] for e in events] == (
        ["part"] * n_a + ["read", "finish"] + ["part"] * n_b + ["read", "finish"]
    )
    assert [e[1] for e in events if e[0] == "finish"] == [["a"], ["b"]]
    assert [r.selection.names for r in both] == [["a"], ["b"]]
