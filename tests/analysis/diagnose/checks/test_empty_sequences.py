"""The ``empty_sequences`` check (``analysis/diagnose/checks/empty_sequences.py``): sequences
whose mask keeps no model token, a few normal (rejected or truncated samples), a fifth worth a
warning, more than half a mask column that is not the response mask."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import mismatchctl
from mismatchctl.analysis.diagnose.check import evidence_of
from mismatchctl.analysis.diagnose.checks import empty_sequences
from tests.planted import Plan, write
from tests.planted import checks as diagnosed

SEQUENCES = 40  # 2 steps of 20
RUNS = {"none": 0, "few": 4, "fifth": 12, "most": 24}  # sequences whose mask is all 0


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("empty")
    for run, empty in RUNS.items():
        path = write(Plan("clean", steps=2, per_step=20, seed=5), root / f"{run}.parquet")
        table = pq.read_table(path)
        masks = table["response_mask"].to_pylist()
        masks = [[0] * len(m) if i < empty else m for i, m in enumerate(masks)]
        index = table.schema.get_field_index("response_mask")
        table = table.set_column(
            index, "response_mask", pa.array(masks, table.schema.field(index).type)
        )
        pq.write_table(table, path)
        mismatchctl.ingest([path], run=run, store=root / "s")
    return root / "s"


@pytest.mark.parametrize(
    ("run", "verdict"), [("none", "ok"), ("few", "ok"), ("fifth", "warn"), ("most", "fail")]
)
def test_the_share_of_empty_sequences_grades_the_mask(store: Path, run: str, verdict: str) -> None:
    found = diagnosed(store, run)[empty_sequences.NAME]
    assert found.verdict == verdict, found.finding
    evidence = evidence_of(found, empty_sequences.Evidence)
    assert evidence is not None
    assert evidence.empty_sequences == RUNS[run] and evidence.sequences == SEQUENCES
    assert evidence.share == pytest.approx(RUNS[run] / SEQUENCES)
    assert f"{RUNS[run]} of {SEQUENCES} sequences" in found.finding
    assert (found.next is not None) == (verdict != "ok")
    assert evidence.to_dict()["sequences"] == SEQUENCES  # the JSON's key is the metric's name
