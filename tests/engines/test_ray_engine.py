"""`--engine ray`: the same JSON as the local engine (within 1e-12 relative) for report, compare,
diagnose and whatif on a multi-part store, and the same rows for a parallel ingest. A local Ray
with 2 CPUs is started once for the module; without the `ray` extra these tests are skipped (the
install hint is tested without Ray in any case)."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

import mismatchctl
from mismatchctl import api
from mismatchctl.engines.plan import PartTask, plan
from mismatchctl.errors import MissingDependencyError, StoreError, UsageError
from mismatchctl.ingest import source as ingest_source
from mismatchctl.stats.bins import LOG_EDGES
from mismatchctl.store import parts as store_parts
from tests.helpers import FIXTURES, cli, multi_gpu_dump
from tests.s3_server import BUCKET, HAS_MOTO, s3_server, upload

HAS_RAY = importlib.util.find_spec("ray") is not None
needs_ray = pytest.mark.skipif(not HAS_RAY, reason="the ray extra is not installed")
# each engine computes its own numbers: neither finds the other's in the part cache
pytestmark = pytest.mark.usefixtures("no_part_cache")
REL = 1e-12


def assert_same(a: Any, b: Any, where: str = "$") -> None:
    """Equal JSON, numbers within REL relative (exact for integers and zero)."""
    if isinstance(a, dict) and isinstance(b, dict):
        assert list(a) == list(b), where
        for key in a:
            assert_same(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, float) or isinstance(b, float):
        assert isinstance(a, int | float) and isinstance(b, int | float), (where, a, b)
        assert math.isclose(a, b, rel_tol=REL, abs_tol=0.0) or a == b, (where, a, b)
    else:
        assert a == b, (where, a, b)


@pytest.fixture(scope="module")
def ray_local() -> Iterator[dict[str, str] | None]:
    """A local Ray with 2 CPUs, started by mismatchctl's own connect (as the CLI does); when
    moto is installed, an S3 server on loopback first (workers inherit its AWS_* variables):
    yields those variables, or None."""
    if not HAS_RAY:
        pytest.skip("the ray extra is not installed")
    import ray

    from mismatchctl.parallel import connect

    assert not ray.is_initialized()
    with contextlib.ExitStack() as stack:
        env = stack.enter_context(s3_server()) if HAS_MOTO else None
        connect(None, workers=2)
        stack.callback(ray.shutdown)
        assert ray.cluster_resources().get("CPU") == 2
        yield env


@pytest.fixture(scope="module")
def dumps(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    base = tmp_path_factory.mktemp("dumps")
    paths = [base / f"dump{i}.parquet" for i in range(3)]
    for i, path in enumerate(paths):
        multi_gpu_dump(path, seed=10 + i)
    return paths


@pytest.fixture(scope="module")
def multi_part(tmp_path_factory: pytest.TempPathFactory, dumps: list[Path]) -> Path:
    """Two runs of many small parts (parts are cut per source and every ~3000 tokens)."""
    store = tmp_path_factory.mktemp("multi") / "store"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(store_parts, "PART_TOKENS", 3000)
        mp.setattr(ingest_source, "BATCH_TOKENS", 3000)
        mismatchctl.ingest(dumps[:2], run="a", tags=["gpu_kind=x"], store=store)
        mismatchctl.ingest(dumps[2:], run="b", store=store)
        mismatchctl.ingest([FIXTURES / "sequence.parquet"], run="c", store=store)
    assert len(mismatchctl.open_store(store).parts("a")) >= 8
    return store


def _both(store: Path, *args: str) -> tuple[dict, dict]:
    """The JSON of one command with the local engine and with --engine ray."""
    docs = []
    for engine in ("local", "ray"):
        ran = cli(*args, "--engine", engine, "--store", str(store), "--json", "-", "-q")
        assert ran.code in (0, 3), ran.err  # diagnose exits 3 when a check fails
        docs.append(json.loads(ran.out))
    return docs[0], docs[1]


@needs_ray
@pytest.mark.slow
def test_report_json_equals_local(ray_local: Any, multi_part: Path) -> None:
    local, distributed = _both(
        multi_part, "report", "--by-gpu", "--by", "step,turn_kind", "--by", "tag:gpu_kind"
    )
    assert local["groups"] and local["hardware"]
    assert_same(local, distributed)
    local, distributed = _both(multi_part, "report", "a", "--steps", "3-8", "--bins", "linear:7")
    assert_same(local, distributed)


@needs_ray
@pytest.mark.slow
def test_whatif_presets_on_ray_equal_local(ray_local: Any, multi_part: Path) -> None:
    """A framework preset's states travel through Ray tasks and merge to the local numbers."""
    for sets in (
        ("--preset", "verl-rollout-corr", "--set", "rollout_is=sequence",
         "--set", "rollout_rs=seq_mean_k1", "--set", "rollout_rs_threshold=0.99_1.01"),
        ("--preset", "slime-tis", "--set", "tis_clip_low=0.5"),
        ("--preset", "trl-vllm-is", "--set", "vllm_importance_sampling_mode=token_mask"),
        ("--preset", "slime-opsm", "--set", "opsm_delta=1e-3"),
    ):  # fmt: skip
        local, distributed = _both(multi_part, "whatif", "a", *sets)
        assert_same(local, distributed, " ".join(sets))
        assert len(local["whatif"]["groups"]) > 3


@needs_ray
@pytest.mark.slow
def test_report_tail_thresholds_reach_the_ray_tasks(ray_local: Any, multi_part: Path) -> None:
    """--clamp, --tau and --is-bounds travel to the Ray tasks: the same numbers as locally,
    and they differ from the defaults' (the thresholds were applied, not dropped)."""
    args = ("report", "a", "--clamp", "0.05", "--tau", "1.01", "--is-bounds", "0.99_1.01")
    local, distributed = _both(multi_part, *args)
    assert_same(local, distributed)
    ran = cli("report", "a", "--store", str(multi_part), "--json", "-", "-q")
    default = json.loads(ran.out)
    whole = next(g["metrics"] for g in distributed["groups"] if g["by"] == {})
    plain = next(g["metrics"] for g in default["groups"] if g["by"] == {})
    assert whole["vllm_kl_clamped"] < plain["vllm_kl_clamped"]
    assert whole["extreme_frac_tau1.01"] > plain["extreme_frac_tau2"]
    assert whole["is_oob_ratio"] > plain["is_oob_ratio"]


@pytest.mark.slow
@needs_ray
def test_compare_diagnose_whatif_json_equal_local(ray_local: Any, multi_part: Path) -> None:
    for args in (
        ("compare", "a", "b", "--resamples", "50"),
        ("compare", "gpu=A100", "gpu=H20", "--resamples", "50"),
        ("diagnose", "a"),
        ("diagnose", "c"),
        ("diagnose", "a", "--baseline", "b"),
        ("explain", "a", "--baseline", "b"),
        ("explain", "c"),
        ("whatif", "a@steps=2-", "--method", "seq-mis", "--sweep", "1.5,2,3"),
        ("whatif", "b"),
    ):
        local, distributed = _both(multi_part, *args)
        assert_same(local, distributed, " ".join(args))


@needs_ray
@pytest.mark.slow  # a local Ray cluster: the slow tier (README)
def test_report_figures_and_progress(ray_local: Any, multi_part: Path) -> None:
    """The HTML report's figure states (densities, sampled segments) merge the same way; the
    progress callback sees every part's rows."""
    seen: list[int] = []
    local = mismatchctl.report(["a"], store=multi_part, figures=True)
    distributed = mismatchctl.report(
        ["a"], store=multi_part, figures=True, engine="ray", on_part=seen.append
    )
    assert sum(seen) == sum(t.rows for t in local.selection.tasks)
    assert len(seen) == len(local.selection.tasks)
    assert local.figures is not None and distributed.figures is not None
    a, b = local.figures["a"], distributed.figures["a"]
    for name in ("mismatch", "probs", "log_ppl"):
        np.testing.assert_array_equal(getattr(a, name).counts, getattr(b, name).counts)
    np.testing.assert_array_equal(a.sample.seq, b.sample.seq)
    np.testing.assert_array_equal(a.sample.rollout_log_ppl, b.sample.rollout_log_ppl)


@needs_ray
@pytest.mark.slow
def test_tokens_and_certify_json_equal_local(ray_local: Any, multi_part: Path) -> None:
    """The worst tokens and sequences (exact top-k merged per part) are the same listing, and
    `certify` the same counts and first divergences."""
    for args in (
        ("tokens", "a", "--top", "40"),
        ("tokens", "b", "--top", "25", "--sort", "abs-r", "--where", "turn_kind=later"),
        ("tokens", "gpu=A100", "--sequences", "--sort", "chi2", "--top", "30"),
    ):
        local, distributed = _both(multi_part, *args)
        assert local["tokens"]["cell_tokens"] > 0
        assert_same(local, distributed, " ".join(args))
    for args in (("certify", "a"), ("certify", "gpu=A100", "--tolerance", "0.01")):
        local, distributed = _both(multi_part, *args)
        assert local["certify"]["earliest_divergences"]
        assert_same(local, distributed, " ".join(args))


@needs_ray
@pytest.mark.slow  # a local Ray cluster: the slow tier (README)
def test_paired_compare_and_token_classes_equal_local(ray_local: Any, tmp_path: Path) -> None:
    """The paired comparison's per-sequence rows travel through Ray tasks (parts of ~300 tokens)
    and pair into the same numbers as locally; so do diagnose's token classes (a tokenizer
    remembered for the run)."""
    from tests.analysis.pairing.paired_data import responses, shuffled_groups, trainer_of, write

    resp = responses(seed=4)
    store = tmp_path / "store"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(store_parts, "PART_TOKENS", 300)
        mp.setattr(ingest_source, "BATCH_TOKENS", 300)
        for name, seed, order in (("a", 1, None), ("b", 2, shuffled_groups(resp, 3))):
            directory = write(tmp_path / name, resp, trainer_of(resp, seed, 0.1), order=order)
            mismatchctl.ingest([str(directory)], run=name, store=store)
    assert len(mismatchctl.open_store(store).parts("a")) >= 3
    local, distributed = _both(store, "compare", "a", "b", "--resamples", "40")
    assert local["comparison"]["paired"]["paired"]
    assert_same(local, distributed)
    api.tokens("a", top=1, tokenizer="bytes", store=store)
    local, distributed = _both(store, "diagnose", "a")
    classes = next(c for c in local["diagnosis"]["checks"] if c["name"] == "token_classes")
    assert classes["verdict"] == "ok" and classes["evidence"]["unclassified_tokens"] > 0
    assert_same(local, distributed)


@needs_ray
@pytest.mark.slow  # a local Ray cluster: the slow tier (README)
def test_a_task_error_is_the_library_error(ray_local: Any, tmp_path: Path) -> None:
    """A part that cannot be read in a worker raises the StoreError (message and hint) of the
    local engine, not Ray's wrapper."""
    from mismatchctl.engines.ray_engine import run_passes_ray

    task = PartTask("a", str(tmp_path / "gone.parquet"), (), 10)
    passes = plan([()])
    with pytest.raises(StoreError) as caught:
        run_passes_ray([task], passes, LOG_EDGES)
    assert "gone.parquet" in caught.value.message and caught.value.hint
    assert run_passes_ray([], passes, LOG_EDGES) == ([{}], [])


@needs_ray
@pytest.mark.slow  # a local Ray cluster: the slow tier (README)
def test_several_reads_fold_as_the_local_engine_folds_them(
    ray_local: Any, multi_part: Path
) -> None:
    """``compare``'s one pass over both sides: each read's groups and sequence sums on Ray
    equal to the local engine's, and each read handed back in order."""
    from mismatchctl.analysis.report.sequences import SequenceSums
    from mismatchctl.analysis.selection import select
    from mismatchctl.engines.local import Read, run_reads
    from mismatchctl.engines.ray_engine import run_reads_ray

    store = mismatchctl.open_store(multi_part)
    passes = plan([("run",), ("run", "step"), ("gpu", "bin")])
    reads = [
        Read(sel.tasks, passes, LOG_EDGES, sel.rows, [SequenceSums()])
        for sel in (select(store, ["a"]), select(store, ["b"], gpu="H20"))
    ]
    order: list[int] = []
    distributed = run_reads_ray(reads, 2, on_read=lambda i, _: order.append(i))
    assert order == [0, 1]
    for (groups, states), (want_groups, want_states) in zip(
        distributed, run_reads(reads, 2), strict=True
    ):
        for got, want in zip(groups, want_groups, strict=True):
            assert list(got) == list(want) and got
            for key, partial in got.items():
                assert np.array_equal(partial.state, want[key].state, equal_nan=True), key
        assert states[0].same(want_states[0]) and len(states[0]) > 0


@needs_ray
@pytest.mark.slow  # a local Ray cluster: the slow tier (README)
def test_ingest_on_ray_stores_the_rows_of_a_local_ingest(
    ray_local: Any, dumps: list[Path], tmp_path: Path
) -> None:
    local, distributed = tmp_path / "local", tmp_path / "ray"
    copy = tmp_path / "copy.parquet"
    copy.write_bytes(dumps[0].read_bytes())
    inputs = [*dumps, FIXTURES / "sequence.parquet", copy]  # the copy: a duplicate input
    mismatchctl.ingest(dumps[2:], run="r", store=local)  # seq ids then start past 0
    mismatchctl.ingest(dumps[2:], run="r", store=distributed, engine="ray")
    want = mismatchctl.ingest(inputs, run="r", store=local)
    got = mismatchctl.ingest(inputs, run="r", store=distributed, engine="ray")
    assert [(f.path, f.status, f.same_as) for f in got.files] == [
        (f.path, f.status, f.same_as) for f in want.files
    ]
    assert [f.status for f in got.files] == [
        "ingested",
        "ingested",
        "already ingested",
        "ingested",
        "duplicate input",
    ]
    for kind in ("tokens", "sequences", "masked"):  # masked: the tool responses' ids
        a = mismatchctl.open_store(local).scan("r", kind).collect()
        b = mismatchctl.open_store(distributed).scan("r", kind).collect()
        assert a.equals(b), kind
        seqs = b["seq"].unique().sort().to_list()
        if kind == "sequences":
            assert seqs == list(range(len(seqs)))  # dense, as documented
    a, b = (mismatchctl.run_info("r", store) for store in (local, distributed))
    skip = {"ingested_at"}
    assert [{k: v for k, v in vars(s).items() if k not in skip} for s in a.sources] == [
        {k: v for k, v in vars(s).items() if k not in skip} for s in b.sources
    ]
    parts = [mismatchctl.open_store(s).parts("r", "sequences") for s in (local, distributed)]
    assert [(p.rows, p.min_seq, p.max_seq) for p in parts[0]] == [
        (p.rows, p.min_seq, p.max_seq) for p in parts[1]
    ]
    assert not (distributed / ".staging").exists()
    assert api.check_runs(store=distributed) == {"r": []}


@needs_ray
@pytest.mark.slow  # a local Ray cluster: the slow tier (README)
def test_ingest_on_ray_is_all_or_nothing(ray_local: Any, dumps: list[Path], tmp_path: Path) -> None:
    store = tmp_path / "store"
    mismatchctl.ingest(dumps[:1], run="r", store=store, engine="ray")
    before = sorted(p.relative_to(store) for p in store.rglob("*.parquet"))
    bad = tmp_path / "bad.parquet"
    table = pq.read_table(dumps[1]).drop_columns(["old_log_probs"])
    pq.write_table(table, bad)
    ran = cli(
        "ingest",
        str(dumps[2]),
        str(bad),
        "--run",
        "r",
        "--engine",
        "ray",
        "--store",
        str(store),
        "-q",
    )
    assert ran.code == 1 and ran.err.startswith("Error: ") and "Hint: " in ran.err
    assert sorted(p.relative_to(store) for p in store.rglob("*.parquet")) == before
    assert not (store / ".staging").exists()
    assert len(mismatchctl.run_info("r", store).sources) == 1


@needs_ray
@pytest.mark.slow  # a local Ray cluster: the slow tier (README)
def test_ingest_on_ray_from_object_storage(
    ray_local: dict[str, str] | None, dumps: list[Path], tmp_path: Path
) -> None:
    """Workers copy the objects they read from S3 (moto on loopback): the rows of a local ingest."""
    if ray_local is None:
        pytest.skip("moto (dev extra) is not installed")
    uris = [upload(path, f"ray/{path.name}") for path in dumps]
    local, distributed = tmp_path / "local", tmp_path / "ray"
    mismatchctl.ingest(dumps, run="r", store=local)
    got = mismatchctl.ingest([f"s3://{BUCKET}/ray/"], run="r", store=distributed, engine="ray")
    assert [str(f.path) for f in got.files] == uris
    assert [s.path for s in mismatchctl.run_info("r", distributed).sources] == uris
    for kind in ("tokens", "sequences", "masked"):  # masked: the tool responses' ids
        a = mismatchctl.open_store(local).scan("r", kind).collect()
        assert a.equals(mismatchctl.open_store(distributed).scan("r", kind).collect()), kind


@pytest.mark.slow  # a local Ray cluster: the slow tier (README)
def test_report_on_ray_over_a_bucket_store(
    ray_local: dict[str, str] | None, dumps: list[Path], tmp_path: Path
) -> None:
    """Workers read the parts of a store in a bucket (moto on loopback) in place."""
    if ray_local is None:
        pytest.skip("moto (dev extra) is not installed")
    bucket_store, local = f"s3://{BUCKET}/ray-store", tmp_path / "local"
    for store in (bucket_store, local):
        mismatchctl.ingest(dumps, run="r", store=store)
    docs = []
    for store, engine in ((local, "local"), (bucket_store, "ray")):
        args = ("report", "--by-gpu", "--engine", engine, "--store", str(store), "--json", "-")
        ran = cli(*args, "-q")
        assert ran.code == 0, ran.err
        docs.append(json.loads(ran.out))
    assert_same(docs[0]["groups"], docs[1]["groups"])


@needs_ray
def test_an_unreachable_cluster_is_named(multi_part: Path) -> None:
    """In a fresh process (no Ray yet): a cluster address where nothing listens fails at once
    with an EngineError, not after Ray's minutes of retries."""
    import subprocess

    args = ["report", "--engine", "ray", "--ray-address", "127.0.0.1:1", "--store", str(multi_part)]
    done = subprocess.run(
        [sys.executable, "-m", "mismatchctl", *args, "-q"],
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"},
    )
    assert done.returncode == 1
    assert done.stderr.startswith("Error: cannot start or reach the Ray cluster at 127.0.0.1:1")
    assert "Hint: start a cluster with `ray start --head`" in done.stderr


def test_missing_ray_gives_the_install_hint(store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mismatchctl.ingest([FIXTURES / "sequence.parquet"], run="s", store=store)
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now fails as if not installed
    with pytest.raises(MissingDependencyError) as caught:
        mismatchctl.report(["s"], store=store, engine="ray")
    assert "pip install 'mismatchctl[ray]'" in (caught.value.hint or "")
    for args in (("report", "s"), ("ingest", str(FIXTURES / "golden.parquet"), "--run", "t")):
        ran = cli(*args, "--engine", "ray", "-q")
        assert ran.code == 1
        assert ran.err.startswith("Error: --engine ray needs Ray, which is not installed")
        assert "pip install 'mismatchctl[ray]'" in ran.err
    assert [r.name for r in mismatchctl.runs(store)] == ["s"]  # the failed ingest left nothing


def test_engine_options_are_checked(store: Path) -> None:
    with pytest.raises(UsageError):
        mismatchctl.report(store=store, engine="spark")
    ran = cli("report", "--ray-address", "auto", "-q")
    assert ran.code == 1 and "--ray-address is only used with --engine ray" in ran.err
    ran = cli("diagnose", "x", "--engine", "dask", "-q")
    assert ran.code == 1 and "--engine `dask` is not an engine" in ran.err


def test_the_cli_does_not_import_ray() -> None:
    import subprocess

    code = (
        "import sys\n"
        "from mismatchctl.cli.main import app\n"
        "try:\n"
        "    app(['report', '--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "assert 'ray' not in sys.modules, 'ray imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@needs_ray
@pytest.mark.slow  # a local Ray cluster: the slow tier (README)
def test_report_by_the_new_dimensions_equals_local(ray_local: Any, tmp_path: Path) -> None:
    """kv_position (prompt lengths from the sequence rows), turn_position, length, order and an
    attribute: workers read each part's sequence rows themselves."""
    from tests.engines.dims_data import dims_dump

    store = tmp_path / "store"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(store_parts, "PART_TOKENS", 4000)
        mp.setattr(ingest_source, "BATCH_TOKENS", 4000)
        mismatchctl.ingest([dims_dump(tmp_path / "dims.parquet")], run="d", store=store)
    by = ["kv_position", "turn_kind,turn_position", "length", "step,order", "attr:data_source"]
    local, distributed = _both(store, "report", *[a for k in by for a in ("--by", k)])
    assert any("kv_position" in g["by"] for g in local["groups"])
    assert_same(local, distributed)
    args = ("compare", "d@steps=0", "d@steps=1-2", "--by", "kv_position", "--resamples", "20")
    local, distributed = _both(store, *args)
    assert local["comparison"]["by"]["kv_position"]
    assert_same(local, distributed)


@needs_ray
@pytest.mark.slow  # the Ray parity of the views (README: the slow tier)
def test_report_by_entropy_trainer_prob_and_batch_size_equals_local(
    ray_local: Any, tmp_path: Path
) -> None:
    """The per-token entropy and trainer-probability bins (cells of the compiled kernel) and
    the batch size (from the sequence rows) on Ray: the local engine's numbers, bit for bit."""
    from tests.engines.test_dimensions_entropy_batch import entropy_batch_dump

    store = tmp_path / "store"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(store_parts, "PART_TOKENS", 4000)
        mp.setattr(ingest_source, "BATCH_TOKENS", 4000)
        mismatchctl.ingest([entropy_batch_dump(tmp_path / "eb.parquet")], run="d", store=store)
    by = ["entropy", "trainer_prob", "batch_size,bin", "step,entropy,trainer_prob"]
    local, distributed = _both(store, "report", *[a for k in by for a in ("--by", k)])
    assert any("entropy" in g["by"] for g in local["groups"])
    assert any("batch_size" in g["by"] for g in local["groups"])
    assert_same(local, distributed)
    local, distributed = _both(store, "explain", "d")
    assert_same(local, distributed)
    local, distributed = _both(store, "diagnose", "d")
    assert_same(local, distributed)
