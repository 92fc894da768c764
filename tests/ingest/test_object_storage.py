"""Inputs on object storage: `ingest s3://...` against an S3-compatible server (moto) on
loopback stores the rows of a local ingest of the same files, records the URIs, and keeps the
all-or-nothing guarantee. Skipped without moto (in the dev extra)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import mismatchctl
from mismatchctl.errors import InputError, UsageError
from tests.helpers import FIXTURES, cli, multi_gpu_dump, tree_digest
from tests.s3_server import BUCKET, HAS_MOTO, s3_server, upload

pytestmark = pytest.mark.skipif(not HAS_MOTO, reason="moto (dev extra) is not installed")

NAMES = ("a_dump.parquet", "b_dump.parquet", "c_token.parquet", "train_data_step3.jsonl")


@pytest.fixture(scope="module")
def bucket(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Path]]:
    """s3://dumps/rl/ holds four dumps (three formats) and a file that is not a dump; yields the
    local copies, in the order a prefix listing gives them."""
    local = tmp_path_factory.mktemp("local")
    multi_gpu_dump(local / NAMES[0], seed=1)
    multi_gpu_dump(local / NAMES[1], seed=2)
    shutil.copy(FIXTURES / "token.parquet", local / NAMES[2])
    shutil.copy(FIXTURES / "train_data_step3.jsonl", local / NAMES[3])
    (local / "README.txt").write_text("not a dump")
    with s3_server():
        for path in sorted(local.iterdir()):
            upload(path, f"rl/{path.name}")
        yield [local / name for name in NAMES]


def _rows(store: Path, run: str, kind: str) -> object:
    return mismatchctl.open_store(store).scan(run, kind).collect()


def test_ingest_of_a_prefix_equals_a_local_ingest(bucket: list[Path], tmp_path: Path) -> None:
    local, remote = tmp_path / "local", tmp_path / "remote"
    mismatchctl.ingest(bucket, run="r", store=local)
    got = mismatchctl.ingest([f"s3://{BUCKET}/rl/"], run="r", store=remote)
    uris = [f"s3://{BUCKET}/rl/{name}" for name in NAMES]
    assert [str(f.path) for f in got.files] == uris
    assert [f.status for f in got.files] == ["ingested"] * 4
    for kind in ("tokens", "sequences", "masked"):
        assert _rows(local, "r", kind).equals(_rows(remote, "r", kind)), kind
    a, b = (mismatchctl.run_info("r", s).sources for s in (local, remote))
    assert [s.path for s in b] == uris
    skip = {"path", "ingested_at"}
    assert [{k: v for k, v in vars(s).items() if k not in skip} for s in a] == [
        {k: v for k, v in vars(s).items() if k not in skip} for s in b
    ]
    shown = cli("runs", "show", "r", "--store", str(remote))
    assert shown.code == 0 and "s3://dumps/rl/a_dump.parquet" in shown.out
    again = cli("ingest", f"s3://{BUCKET}/rl/*.parquet", "--run", "r", "--store", str(remote))
    assert again.code == 0
    again = cli(
        "ingest", f"s3://{BUCKET}/rl/*_dump.parquet", "--run", "r", "--store", str(remote), "--json"
    )
    files = json.loads(again.out)["files"]
    assert [(f["path"], f["status"]) for f in files] == [
        (uris[0], "already ingested"),
        (uris[1], "already ingested"),
    ]


def test_bad_uris_are_named(bucket: list[Path], tmp_path: Path) -> None:
    store = tmp_path / "store"
    for uri, error, text in (
        (f"s3://{BUCKET}/rl/nothing/", InputError, "no such object or prefix"),
        (f"s3://{BUCKET}/rl/*.pt", InputError, "no object matches"),
        (f"s3://{BUCKET}/rl/a_dump.parquet?region=x", UsageError, "options in the URI"),
        ("hdfs://namenode/dumps/", UsageError, "`hdfs://` is not supported"),
        ("s3://no-such-bucket-here/x.parquet", InputError, "s3://no-such-bucket-here"),
    ):
        with pytest.raises(error) as caught:
            mismatchctl.ingest([uri], run="r", store=store)
        assert text in caught.value.message and caught.value.hint, uri
    assert not store.exists()


def test_a_bad_object_leaves_the_store_as_it_was(bucket: list[Path], tmp_path: Path) -> None:
    store = tmp_path / "store"
    mismatchctl.ingest([f"s3://{BUCKET}/rl/a_dump.parquet"], run="r", store=store)
    before = tree_digest(store)
    bad = tmp_path / "bad.parquet"
    pq.write_table(pq.read_table(bucket[1]).drop_columns(["old_log_probs"]), bad)
    upload(bad, "broken/z_bad.parquet")
    upload(bucket[1], "broken/a_good.parquet")
    ran = cli("ingest", f"s3://{BUCKET}/broken/", "--run", "r", "--store", str(store), "-q")
    assert ran.code == 1 and "z_bad.parquet" in ran.err and "Hint: " in ran.err
    assert tree_digest(store) == before
