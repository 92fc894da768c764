"""A store in a bucket (`--store s3://...`) against an S3-compatible server (moto) on loopback:
the same numbers as a local store, appends and no-ops, `runs rm`, all-or-nothing ingests, and a
writer that changed the catalog meanwhile detected. Skipped without moto (in the dev extra)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from mismatchctl.errors import StoreError
from mismatchctl.store import open_store
from mismatchctl.store.remote import RemoteStore
from tests.helpers import FIXTURES, cli, multi_gpu_dump
from tests.s3_server import BUCKET, HAS_MOTO, bucket_fs, s3_server

pytestmark = pytest.mark.skipif(not HAS_MOTO, reason="moto (dev extra) is not installed")


@pytest.fixture(scope="module")
def server() -> Iterator[None]:
    with s3_server():
        yield


@pytest.fixture
def dumps(tmp_path: Path) -> list[Path]:
    multi_gpu_dump(tmp_path / "a_dump.parquet", seed=1)
    multi_gpu_dump(tmp_path / "b_dump.parquet", seed=2)
    shutil.copy(FIXTURES / "train_data_step3.jsonl", tmp_path / "train_data_step3.jsonl")
    return sorted(tmp_path.glob("*_dump.parquet"))


_count = iter(range(10_000))


@pytest.fixture
def uri(server: None) -> str:
    return f"s3://{BUCKET}/stores/s{next(_count)}"


def _objects(uri: str) -> dict[str, bytes]:
    """Every object under the store URI with its content."""
    import pyarrow.fs as pafs

    fs = bucket_fs()
    base = uri.removeprefix("s3://")
    out = {}
    for info in fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True)):
        if info.type == pafs.FileType.File:
            with fs.open_input_stream(info.path) as f:
                out[info.path[len(base) + 1 :]] = f.read()
    return out


def _report(store: str, *args: str) -> dict:
    return json.loads(cli("report", "--json", "-", "-q", "--by-gpu", *args, "--store", store).out)


def test_a_bucket_store_reports_what_a_local_store_does(
    uri: str, dumps: list[Path], tmp_path: Path
) -> None:
    local = str(tmp_path / "local")
    for store in (uri, local):
        for dump in dumps:
            cli("ingest", str(dump), "--run", "r", "-q", "--store", store)
    got, want = _report(uri, "r"), _report(local, "r")
    got.pop("store", None), want.pop("store", None)
    assert json.dumps(got["groups"], sort_keys=True) == json.dumps(want["groups"], sort_keys=True)
    names = set(_objects(uri))
    assert "catalog.sqlite" in names
    assert any(n.startswith("tokens/run=r/") for n in names)
    assert any(n.startswith("sequences/run=r/") for n in names)
    listed = json.loads(cli("runs", "--json", "--store", uri).out)
    assert [r["run"] for r in listed] == ["r"]
    assert cli("runs", "check", "r", "--deep", "--store", uri).code == 0  # every part whole
    cli("ingest", str(dumps[0]), "--run", "s", "-q", "--store", uri)
    compared = json.loads(
        cli("compare", "r", "s", "--json", "-", "-q", "--resamples", "50", "--store", uri).out
    )
    assert compared["comparison"]["headline"]


def test_appends_noops_and_removal(uri: str, dumps: list[Path]) -> None:
    assert cli("ingest", str(dumps[0]), "--run", "r", "-q", "--store", uri).code == 0
    first = _objects(uri)
    out = cli("ingest", str(dumps[0]), "--run", "r", "--store", uri)
    assert "already ingested" in out.out + out.err
    assert _objects(uri) == first  # the same content again changes nothing
    cli("ingest", str(dumps[1]), "--run", "r", "-q", "--store", uri)
    cli("ingest", str(dumps[1]), "--run", "other", "-q", "--store", uri)
    assert open_store(uri).run("r").sequences == 2 * open_store(uri).run("other").sequences
    cli("runs", "rm", "other", "--yes", "--store", uri)
    assert open_store(uri).run_names() == ["r"]
    assert not [n for n in _objects(uri) if "run=other" in n]


def test_a_failed_ingest_leaves_the_bucket_as_it_was(
    uri: str, dumps: list[Path], tmp_path: Path
) -> None:
    cli("ingest", str(dumps[0]), "--run", "r", "-q", "--store", uri)
    before = _objects(uri)
    bad = tmp_path / "z_bad.parquet"
    bad.write_bytes(b"PAR1 not a parquet file")
    ran = cli("ingest", str(dumps[1]), str(bad), "--run", "r", "-q", "--store", uri)
    assert ran.code != 0 and "z_bad.parquet" in ran.err
    assert _objects(uri) == before


def test_another_writer_meanwhile_aborts_the_publish(
    uri: str, dumps: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    cli("ingest", str(dumps[0]), "--run", "r", "-q", "--store", uri)
    store = open_store(uri)
    assert isinstance(store, RemoteStore)
    # another writer publishes between this command's download and its publish
    cli("ingest", str(dumps[1]), "--run", "theirs", "-q", "--store", uri)
    theirs = _objects(uri)
    from mismatchctl.ingest.run_ingest import Options, ingest_files

    opts = Options(run="mine", tags={}, fmt=None, mapping={}, skip_bad=False)
    with pytest.raises(StoreError, match="another writer changed the store") as err:
        ingest_files(store, [str(dumps[1])], opts)
    assert "again" in (err.value.hint or "")
    assert _objects(uri) == theirs  # their write kept, nothing of ours left
    assert open_store(uri).run_names() == ["r", "theirs"]


def test_orphans_are_listed_and_bad_uris_named(uri: str, dumps: list[Path]) -> None:
    cli("ingest", str(dumps[0]), "--run", "r", "-q", "--store", uri)
    fs = bucket_fs()
    base = uri.removeprefix("s3://")
    with fs.open_output_stream(f"{base}/tokens/run=r/part-orphan-00000.parquet") as f:
        f.write(b"left by a killed writer")
    store = open_store(uri)
    assert isinstance(store, RemoteStore)
    assert store.orphans() == ["tokens/run=r/part-orphan-00000.parquet"]
    assert store.orphans(min_age_s=3600) == []  # too young to be swept
    _report(uri, "r")  # an orphan is never read
    ran = cli("runs", "--store", f"{uri}?endpoint=x")
    assert ran.code != 0 and "options in the URI" in ran.err


def test_training_logs_in_a_bucket_store(uri: str, dumps: list[Path], tmp_path: Path) -> None:
    cli("ingest", str(dumps[0]), "--run", "r", "-q", "--store", uri)
    log = tmp_path / "m.jsonl"
    log.write_text(
        "".join(json.dumps({"step": s, "actor/grad_norm": 1.0 + s}) + "\n" for s in range(4))
    )
    assert cli("ingest-metrics", str(log), "--run", "r", "--store", uri).code == 0
    assert any(n.startswith("metrics/run=r/") for n in _objects(uri))
    doc = _report(uri, "r")
    assert "actor/grad_norm" in json.dumps(doc["curves"])
    assert cli("runs", "check", "r", "--store", uri).code == 0


@pytest.mark.slow
def test_ingest_on_ray_into_a_bucket_store_is_refused(uri: str, dumps: list[Path]) -> None:
    """Ray workers stage parts in the store's directory: a bucket has none to share."""
    ran = cli("ingest", str(dumps[0]), "--run", "r", "--engine", "ray", "--store", uri)
    assert ran.code != 0 and "in a bucket" in ran.err and "local engine" in ran.err
    assert _objects(uri) == {}


def test_the_new_dimensions_from_a_bucket_store(uri: str, tmp_path: Path) -> None:
    """kv_position, length, order and attributes read the sequence parts in the bucket."""
    from tests.engines.dims_data import dims_dump

    dump = dims_dump(tmp_path / "dims.parquet")
    local = str(tmp_path / "local")
    for store in (uri, local):
        cli("ingest", str(dump), "--run", "d", "-q", "--store", store)
    by = ["--by", "kv_position", "--by", "length,order", "--by", "attr:data_source"]
    got, want = _report(uri, "d", *by), _report(local, "d", *by)
    assert any("kv_position" in g["by"] for g in want["groups"])
    assert json.dumps(got["groups"], sort_keys=True) == json.dumps(want["groups"], sort_keys=True)
    assert got["notes"] == want["notes"] and "42 of 210 sequences" in want["notes"][0]


@pytest.mark.slow
def test_explain_and_diagnose_from_a_bucket_store(
    uri: str, dumps: list[Path], tmp_path: Path
) -> None:
    """The cube views read a bucket store's parts (the sequence rows included) and agree with a
    local store's."""
    local = str(tmp_path / "local")
    for store in (uri, local):
        for run, dump in zip(("a", "b"), dumps, strict=True):
            cli("ingest", str(dump), "--run", run, "-q", "--store", store)
    for args in (
        ("explain", "a", "--baseline", "b", "--no-bootstrap"),
        ("diagnose", "a", "--baseline", "b"),
    ):
        got, want = (
            json.loads(cli(*args, "--json", "-", "-q", "--store", s).out) for s in (uri, local)
        )
        got.pop("store", None), want.pop("store", None)
        key = "explain" if args[0] == "explain" else "diagnosis"
        assert got[key], args
        assert json.dumps(got[key], sort_keys=True) == json.dumps(want[key], sort_keys=True), args


def test_moe_routes_from_a_bucket_store(uri: str, tmp_path: Path) -> None:
    """Routing parts in a bucket: the routing metrics and the alignment test as a local store's,
    and diagnose names the shift that aligns misaligned routes from either."""
    dump = Path(__file__).parents[1] / "data" / "held_out" / "m-capture-layers"
    local = str(tmp_path / "local")
    for store in (uri, local):
        cli("ingest", str(dump), "--run", "m", "-q", "--store", store)
    got, want = _report(uri, "m"), _report(local, "m")
    assert got["routing"] == want["routing"]
    assert got["routing"]["m"]["alignment"]["layer_below"] > 0.95
    found = json.loads(cli("diagnose", "m", "--json", "-", "-q", "--store", uri).out)
    check = next(c for c in found["diagnosis"]["checks"] if c["name"] == "route_capture")
    assert check["evidence"]["runs"]["m"]["misaligned"] == "layer_below"
