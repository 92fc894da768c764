"""The sequence rows a report reads (``engines/sequences.py``): its empty sequences and per-step
reward and entropy means, from one read of each sequence file."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import mismatchctl
from mismatchctl import schema as S
from mismatchctl.engines import sequences
from mismatchctl.engines.plan import RowFilter, Selection, StepRange
from tests.helpers import step_dump


def _part(path: Path, step: list[int], tokens: list[int], reward: list, entropy=None) -> str:
    columns = {
        S.STEP: pa.array(step, pa.int64()),
        S.GPU: pa.array(["A100"] * len(step)),
        S.MODEL_TOKENS: pa.array(tokens, pa.int64()),
        S.REWARD: pa.array(reward, pa.float64()),
    }
    if entropy is not None:
        columns[S.ENTROPY] = pa.array(entropy, pa.float64())
    pq.write_table(pa.table(columns), path)
    return str(path)


@pytest.fixture
def two_files(tmp_path: Path) -> list[str]:
    """Steps 1-2 with the sequences' entropy (one empty sequence, one reward unknown), step 3
    without an entropy column (one empty sequence)."""
    return [
        _part(tmp_path / "a.parquet", [1, 1, 2, 2], [4, 0, 2, 6], [1.0, 0.0, None, 0.5],
              [0.5, None, 0.25, 1.0]),
        _part(tmp_path / "b.parquet", [3, 3], [0, 8], [0.2, 0.4]),
    ]  # fmt: skip


def _count_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths ``read_columns`` opens from now on, in order."""
    opened: list[str] = []
    read = sequences.read_columns

    def counted(path: str, *args: object, **kw: object) -> pa.Table:
        opened.append(path)
        return read(path, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(sequences, "read_columns", counted)
    return opened


def test_counts_and_step_means_from_one_read_of_each_file(
    two_files: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    opened = _count_reads(monkeypatch)
    found = sequences.read_sequences(Selection([], sequence_paths={"r": two_files}))["r"]
    assert sorted(opened) == sorted(two_files)
    assert found.empty == 2
    steps, reward = found.means[sequences.REWARD_MEAN]
    assert steps.tolist() == [1, 2, 3]
    assert reward.tolist() == pytest.approx([0.5, 0.5, 0.30000000000000004], rel=1e-15)
    steps, entropy = found.means[sequences.ENTROPY_MEAN]
    assert steps.tolist() == [1, 2]  # the empty sequence weighs nothing; step 3 has none
    assert entropy.tolist() == pytest.approx([0.5, (0.25 * 2 + 1.0 * 6) / 8], rel=1e-15)


def test_the_selection_row_filter_applies_to_counts_and_means(two_files: list[str]) -> None:
    kept = RowFilter(StepRange(2, 3))
    found = sequences.read_sequences(Selection([], kept, sequence_paths={"r": two_files}))["r"]
    assert found.empty == 1
    assert found.means[sequences.REWARD_MEAN][0].tolist() == [2, 3]
    assert found.means[sequences.ENTROPY_MEAN][1].tolist() == pytest.approx([6.5 / 8])


def test_a_report_reads_each_sequence_file_once(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A report's empty sequences and its curves' reward and entropy means come from one read of
    each of the run's sequence files (a run of 1,000 step files has 1,000 of them)."""
    for s in range(3):
        step_dump(tmp_path / f"step_{s}.parquet", [s], seed=s)
    mismatchctl.ingest([str(tmp_path / f"step_{s}.parquet") for s in range(3)], run="r",
                       store=store)  # fmt: skip
    opened = _count_reads(monkeypatch)
    doc = mismatchctl.report("r", store=store).to_dict()
    files = [str(p) for p in (store / "sequences").rglob("*.parquet")]
    assert len(files) == 3 and sorted(opened) == sorted(files)
    assert doc["excluded"]["empty_sequences"] == 0
    assert doc["runs"]["r"]["steps"] == [0, 1, 2]
