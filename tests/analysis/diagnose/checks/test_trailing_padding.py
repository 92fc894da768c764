"""The ``trailing_padding`` check (``analysis/diagnose/checks/trailing_padding.py``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import mismatchctl
from mismatchctl import api
from tests.planted import Plan, write


def test_padding_stored_as_tokens_is_flagged(store: Path, tmp_path: Path) -> None:
    """The planted_store fixture: a clean dump right-padded to each step's longest response, its
    mask left out, ingested with --allow-padding (as a run ingested without its mask is)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    clean = write(Plan("clean", steps=6, per_step=8), tmp_path / "clean.parquet")
    table = pq.read_table(clean)
    width = max(len(x) for x in table["rollout_log_probs"].to_pylist())

    def padded(column: str) -> pa.Array:
        return pa.array([x + [0.0] * (width - len(x)) for x in table[column].to_pylist()])

    masks = table["response_mask"].to_pylist()
    table = table.drop_columns(["response_mask"])
    for column in ("rollout_log_probs", "old_log_probs"):
        table = table.set_column(table.schema.get_field_index(column), column, padded(column))
    path = tmp_path / "padded.parquet"
    pq.write_table(table, path)
    # the clean run: every third response ends in 3 tokens at p = 1 on both sides (exact 0.0)
    rows = pq.read_table(clean).to_pylist()
    for row in rows[::3]:
        for column in ("rollout_log_probs", "old_log_probs"):
            row[column][-3:] = [0.0] * 3
    pq.write_table(pa.Table.from_pylist(rows, pq.read_schema(clean)), clean)
    mismatchctl.ingest([clean], run="clean", store=store)
    mismatchctl.ingest([path], run="padded", store=store, allow_padding=True)
    pads = np.array([width - len(m) for m in masks])
    checks = {c.name: c for c in api.diagnose("padded", store=store).checks}
    check = checks["trailing_padding"]
    assert check.verdict == "fail" and check.layer == "data integrity"
    assert check.evidence.padded_sequences == int((pads >= 8).sum()) > 0
    assert check.evidence.padded_tokens == int(pads[pads >= 8].sum())
    assert check.evidence.samples and "--map mask=" in check.next
    assert {c.name: c for c in api.diagnose("clean", store=store).checks}[
        "trailing_padding"
    ].verdict == "ok"
