"""The masked side table (`masked/` parts: the token ids of each sequence's tool responses): its
rows against the dumps' arrays, the same from a staged (parallel) ingest, none without token ids
or with --no-keep-masked, and its place in the store's life cycle (checked, removed with the
run, nothing left by a failed ingest)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mismatchctl import api
from mismatchctl import schema as S
from mismatchctl.errors import InputError
from mismatchctl.ingest import staged
from mismatchctl.ingest.run_ingest import Options
from tests.analysis.tokens.tokens_data import tokens_dump
from tests.helpers import cli


def _expected(paths: list[Path]) -> list[tuple[int, int, int, int]]:
    """(step, seq, position, token id) of every masked position between a sequence's first and
    last model token, seq ids in input then row order."""
    out, seq = [], 0
    for path in paths:
        for row in pq.read_table(path).to_pylist():
            mask = np.asarray(row["response_mask"], bool)
            model = np.flatnonzero(mask)
            if len(model):
                inside = np.arange(model[0], model[-1] + 1)
                for p in inside[~mask[inside]]:
                    out.append((row["step"], seq, int(p), int(row["responses"][p])))
            seq += 1
    return out


def _stored(store: Path, run: str) -> list[tuple[int, int, int, int]]:
    st = api.open_store(store)
    tables = [pq.read_table(st.part_path(p)) for p in st.parts(run, "masked")]
    if not tables:
        return []
    t = pa.concat_tables(tables).sort_by([(S.SEQ, "ascending"), (S.POSITION, "ascending")])
    cols = [t.column(c).to_pylist() for c in (S.STEP, S.SEQ, S.POSITION, S.TOKEN_ID)]
    return list(zip(*cols, strict=True))


@pytest.fixture
def dumps(tmp_path: Path) -> list[Path]:
    return [tokens_dump(tmp_path / f"d{i}.parquet", seed=20 + i) for i in range(3)]


def test_rows_are_the_dumps_tool_responses(dumps: list[Path], tmp_path: Path) -> None:
    store = tmp_path / "s"
    api.ingest(dumps, "r", store=store)
    want = _expected(dumps)
    assert len(want) > 50
    assert _stored(store, "r") == want
    st = api.open_store(store)
    parts = st.parts("r", "masked")
    assert len(parts) == 3  # one per source: only sources with tool responses and token ids
    info = st.run("r")
    assert sum(p.rows for p in parts) == sum(s.tool_tokens for s in info.sources)
    assert pq.read_schema(st.part_path(parts[0])) == S.MASKED_SCHEMA.remove_metadata()


def test_a_staged_ingest_stores_the_same_rows(dumps: list[Path], tmp_path: Path) -> None:
    """Files read in parallel tasks number their sequences from 0; their masked parts are
    rewritten with the shifted seq ids like their token parts."""
    store = tmp_path / "s"
    opts = Options("r", {}, None, {}, False)
    staged.ingest_staged(api.open_store(store), [str(p) for p in dumps], opts,
                         staged.thread_tasks(2))  # fmt: skip
    assert _stored(store, "r") == _expected(dumps)
    assert api.check_runs(["r"], store=store) == {"r": []}


def test_none_without_token_ids_or_with_no_keep_masked(dumps: list[Path], tmp_path: Path) -> None:
    store = tmp_path / "s"
    ran = cli("ingest", str(dumps[0]), "--run", "off", "--no-keep-masked", "--store", str(store))
    assert ran.code == 0, ran.err
    table = pq.read_table(dumps[1]).drop_columns(["responses"])
    pq.write_table(table, tmp_path / "noids.parquet")
    api.ingest([tmp_path / "noids.parquet"], "noids", store=store)
    st = api.open_store(store)
    assert st.run("off").tool_tokens > 0 and st.run("noids").tool_tokens > 0
    assert st.parts("off", "masked") == [] and st.parts("noids", "masked") == []
    assert not (store / "masked").exists()
    assert "--no-keep-masked" in cli("ingest", "--help").out


def test_checked_and_removed_with_the_run(dumps: list[Path], tmp_path: Path) -> None:
    store = tmp_path / "s"
    api.ingest(dumps[:1], "r", store=store)
    st = api.open_store(store)
    (part,) = st.parts("r", "masked")
    file = st.part_path(part)
    assert api.check_runs(["r"], store=store) == {"r": []}
    file.write_bytes(file.read_bytes()[:100])  # truncated
    (damage,) = api.check_runs(["r"], store=store)["r"]
    assert damage.part == part.path
    api.remove_run("r", store=store)
    assert not file.exists()
    assert not (store / "masked" / "run=r").exists()


def test_a_failed_ingest_leaves_no_masked_part(dumps: list[Path], tmp_path: Path) -> None:
    """The third file is bad: nothing of the call is kept, the first two files' masked parts
    included (they were written to the staging directory)."""
    store = tmp_path / "s"
    api.ingest(dumps[:1], "keep", store=store)
    table = pq.read_table(dumps[2])
    lp = table.column("old_log_probs").to_pylist()
    lp[3][0] = 0.5  # a positive logprob: refused
    bad = table.set_column(table.schema.get_field_index("old_log_probs"), "old_log_probs",
                           pa.array(lp, pa.list_(pa.float64())))  # fmt: skip
    pq.write_table(bad, dumps[2])
    with pytest.raises(InputError):
        api.ingest(dumps, "r", store=store)
    files = sorted(p.relative_to(store).as_posix() for p in (store / "masked").rglob("*.parquet"))
    st = api.open_store(store)
    assert files == [p.path for p in st.parts("keep", "masked")]
    assert "r" not in st.run_names() and not (store / ".staging").exists()


def test_the_prompt_ids_are_kept_before_the_arrays(tmp_path: Path) -> None:
    """A prompt-ids list (what DumpWriter writes as ``prompts``) is stored at the positions before
    the arrays' first, and masked positions before the first model token at theirs: the whole
    sequence can be rebuilt (``bisect``); ``show`` still lists only the tool responses."""
    from mismatchctl.dump import DumpWriter

    lp = [[-0.5, -1.0, -0.2, -0.3, -0.7], [-0.1, -0.4]]
    mask = [[0, 1, 1, 0, 1], [1, 1]]
    ids = [[7, 8, 9, 10, 11], [20, 21]]
    prompts = [[1, 2, 3], [4, 5, 6, 9]]
    with DumpWriter(tmp_path / "d") as writer:
        writer.add(0, lp, lp, mask, token_ids=ids, prompts=prompts, sample_ids=["a", "b"])
    store = tmp_path / "s"
    api.ingest([tmp_path / "d"], "p", store=store)
    assert _stored(store, "p") == [
        (0, 0, -3, 1), (0, 0, -2, 2), (0, 0, -1, 3), (0, 0, 0, 7), (0, 0, 3, 10),
        (0, 1, -4, 4), (0, 1, -3, 5), (0, 1, -2, 6), (0, 1, -1, 9),
    ]  # fmt: skip
    shown = api.show("p", "a", store=store)
    assert [(m["position"], m["token_id"]) for m in shown.masked] == [(3, 10)]
