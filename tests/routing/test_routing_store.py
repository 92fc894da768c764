"""Routing parts in the store's life cycle: checked with the others, removed with their run."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from mismatchctl import api
from tests.routing.test_routing_metrics import _dump


def test_routing_parts_are_checked_and_removed_with_the_run(tmp_path: Path) -> None:
    data, _ = _dump(4)
    path = tmp_path / "d.parquet"
    pq.write_table(pa.table(data), path)
    store = tmp_path / "s"
    api.ingest([path], "r", store=store)
    st = api.open_store(store)
    (part,) = st.parts("r", "routing")
    file = st.part_path(part)
    assert api.check_runs(["r"], store=store) == {"r": []}
    file.write_bytes(file.read_bytes()[:100])  # truncated
    (damage,) = api.check_runs(["r"], store=store)["r"]
    assert damage.part == part.path
    api.remove_run("r", store=store)
    assert not file.exists()
    assert not (store / "routing" / "run=r").exists()
