"""The part cache (``engines/part_cache.py``): a view's JSON the same bytes cold and warm (local
and Ray engines), a warm read that reads no part, every change of the part, the question or the
code missing, damaged entries computed again, the cap, keys the same in every process, and a
directory that cannot be written leaving the numbers as they are."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import mismatchctl
from mismatchctl.analysis.report.sequences import SequenceSums
from mismatchctl.analysis.selection import select
from mismatchctl.engines import local as local_engine
from mismatchctl.engines import part_cache
from mismatchctl.engines import plan as K
from mismatchctl.engines.local import Read, run_reads
from mismatchctl.ingest import source as ingest_source
from mismatchctl.stats.bins import LOG_EDGES
from mismatchctl.store import parts as store_parts
from tests.cli.test_startup import _cli, _loaded
from tests.engines.test_reads import _same
from tests.helpers import cli, multi_gpu_dump

HAS_RAY = importlib.util.find_spec("ray") is not None
ROOT = Path(__file__).parents[2]
VIEWS = {
    "report": ("report", "a", "b", "--by-gpu", "--by", "step,turn_kind"),
    "diagnose": ("diagnose", "a", "--baseline", "b"),
    "explain": ("explain", "a", "--baseline", "b"),
}


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Runs ``a`` and ``b`` of several small parts each (their dumps beside the store)."""
    base = tmp_path_factory.mktemp("part-cache-store")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(store_parts, "PART_TOKENS", 4000)
        mp.setattr(ingest_source, "BATCH_TOKENS", 4000)
        for run, seed in (("a", 1), ("b", 2)):
            multi_gpu_dump(base / f"{run}.parquet", seed=seed)
            mismatchctl.ingest([base / f"{run}.parquet"], run=run, store=base / "store")
    assert len(mismatchctl.open_store(base / "store").parts("a")) >= 3
    return base


@pytest.fixture
def cache(fresh_part_cache: Path) -> Path:
    """A fresh, empty cache directory of this test's own."""
    return fresh_part_cache


@pytest.fixture
def calls(part_reads: list[str]) -> list[str]:
    """The part paths the local engine reads (``part_groups``) from now on."""
    return part_reads


def _json(store: Path, *args: str) -> str:
    ran = cli(*args, "--store", str(store), "--json", "-", "-q")
    assert ran.code in (0, 3), ran.err  # diagnose exits 3 when a check fails
    assert json.loads(ran.out)
    return ran.out


def _entries(cache: Path) -> list[Path]:
    return sorted(cache.glob(f"*{part_cache.SUFFIX}")) if cache.exists() else []


def _parts(store: Path, *runs: str) -> int:
    opened = mismatchctl.open_store(store)
    return sum(len(opened.parts(run)) for run in runs)


@pytest.mark.parametrize("view", sorted(VIEWS))
def test_a_view_is_the_same_bytes_cold_warm_and_without_the_cache(
    base: Path, cache: Path, calls: list[str], view: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = base / "store"
    cold = _json(store, *VIEWS[view])
    assert len(calls) >= _parts(store, "a") and _entries(cache)
    calls.clear()
    warm = _json(store, *VIEWS[view])
    assert calls == []  # every part's states came from the cache
    assert warm == cold
    monkeypatch.setenv(part_cache.MB_ENV, "0")
    assert _json(store, *VIEWS[view]) == cold
    assert len(calls) >= _parts(store, "a")


def test_the_engine_folds_the_same_bits_and_reports_the_same_progress(
    base: Path, cache: Path, calls: list[str]
) -> None:
    """``run_reads`` warm: the same groups, states and sequences bit for bit, ``on_part``
    called with the same rows in the same order, and no part read."""
    opened = mismatchctl.open_store(base / "store")
    passes = K.plan([(K.RUN,), (K.RUN, K.STEP), (K.GPU, K.BIN)])
    sides = [select(opened, ["a"]), select(opened, ["b"], K.StepRange(3, None), gpu="H20")]
    reads = [Read(s.tasks, passes, LOG_EDGES, s.rows, [SequenceSums()]) for s in sides]
    progress: list[list[int]] = [[], []]
    cold = run_reads(reads, workers=2, on_part=progress[0].append)
    n = len(calls)
    assert n == sum(len(s.tasks) for s in sides)
    warm = run_reads(reads, workers=2, on_part=progress[1].append)
    assert len(calls) == n
    assert progress[0] == progress[1] == [t.rows for s in sides for t in s.tasks]
    for a, b in zip(cold, warm, strict=True):
        _same(a, b)


def _counted_run(store: Path, calls: list[str], *args: str) -> tuple[str, int]:
    before = len(calls)
    out = _json(store, *args)
    return out, len(calls) - before


def test_another_question_misses(base: Path, cache: Path, calls: list[str]) -> None:
    """A row filter, other splits, another run: the parts are read again."""
    store = base / "store"
    n = _parts(store, "a")
    steps = len(select(mismatchctl.open_store(store), ["a"], K.StepRange(3, 8)).tasks)
    assert 0 < steps < n
    _counted_run(store, calls, "report", "a")
    for args, parts in (
        (("report", "a", "--steps", "3-8"), steps),
        (("report", "a", "--by", "step,bin"), n),
    ):
        _, read = _counted_run(store, calls, *args)
        assert read == parts, args
        _, read = _counted_run(store, calls, *args)
        assert read == 0, args
    _, read = _counted_run(store, calls, "report", "b")
    assert read == _parts(store, "b")


def test_a_new_part_or_a_touched_file_or_other_code_misses(
    base: Path, tmp_path: Path, cache: Path, calls: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "store"
    mismatchctl.ingest([base / "a.parquet"], run="a", store=store)
    first, read = _counted_run(store, calls, "report", "a")
    assert read == 1
    multi_gpu_dump(tmp_path / "more.parquet", seed=9)  # a part added to the run
    mismatchctl.ingest([tmp_path / "more.parquet"], run="a", store=store)
    grown, read = _counted_run(store, calls, "report", "a")
    assert read == 1 and grown != first  # the old part from the cache, the new one read
    monkeypatch.setenv(part_cache.MB_ENV, "0")
    assert _json(store, "report", "a") == grown
    monkeypatch.delenv(part_cache.MB_ENV)
    path = store / mismatchctl.open_store(store).parts("a")[0].path
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 1))
    again, read = _counted_run(store, calls, "report", "a")
    assert read == 1 and again == grown
    part_cache.source_digest()  # the real one, cached; then another version of the code
    monkeypatch.setattr(part_cache, "source_digest", lambda: b"another version")
    _, read = _counted_run(store, calls, "report", "a")
    assert read == 2


def test_a_damaged_entry_is_read_again_and_replaced(
    base: Path, cache: Path, calls: list[str]
) -> None:
    store = base / "store"
    cold = _json(store, "report", "a")
    entries = _entries(cache)
    assert len(entries) == _parts(store, "a") >= 4
    data = entries[0].read_bytes()
    entries[0].write_bytes(data[: len(data) // 2])  # truncated
    entries[1].write_bytes(b"not an entry at all")
    entries[2].write_bytes(data[:-8] + b"\0" * 8)  # the end of the compressed pickle zeroed
    flipped = bytearray(entries[3].read_bytes())
    flipped[len(flipped) // 2] ^= 0x10  # one bit of the compressed pickle
    entries[3].write_bytes(bytes(flipped))
    calls.clear()
    assert _json(store, "report", "a") == cold
    assert len(calls) == 4
    for entry in entries[:4]:  # written again, whole
        assert part_cache.load(entry.name.removesuffix(part_cache.SUFFIX)) is not None
    calls.clear()
    assert _json(store, "report", "a") == cold and calls == []


def test_an_entry_of_another_shape_is_discarded(base: Path, cache: Path, calls: list[str]) -> None:
    store = base / "store"
    cold = _json(store, "report", "a")
    entry = _entries(cache)[0]
    name = entry.name.removesuffix(part_cache.SUFFIX)
    assert isinstance(part_cache.load(name), list)  # a report's entries: its passes' groups
    part_cache.save(name, ([{}], ["not", "the", "groups"]))
    calls.clear()
    assert _json(store, "report", "a") == cold
    assert len(calls) == 1
    loaded = part_cache.load(name)
    assert isinstance(loaded, list) and all(isinstance(g, dict) for g in loaded)


def test_a_cap_of_zero_writes_nothing(
    base: Path, cache: Path, calls: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(part_cache.MB_ENV, "0")
    _json(base / "store", "report", "a")
    _json(base / "store", "report", "a")
    assert not cache.exists()
    assert len(calls) == 2 * _parts(base / "store", "a")


def test_the_cap_evicts_the_least_recently_used_first(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(0)
    names = [f"{i:064x}" for i in range(6)]
    for i, name in enumerate(names):
        part_cache.save(name, rng.random(40_000))  # ~300 kB each: zstd cannot shrink them
        path = cache / f"{name}{part_cache.SUFFIX}"
        os.utime(path, ns=(10**18 + i, 10**18 + i))  # written in order
    sizes = {n: (cache / f"{n}{part_cache.SUFFIX}").stat().st_size for n in names}
    assert part_cache.load(names[0]) is not None  # used now: the most recent
    stale = cache / ".left-by-a-dead-process.tmp"
    stale.write_bytes(b"x")
    os.utime(stale, (0, 0))
    monkeypatch.setenv(part_cache.MB_ENV, "1")
    part_cache.evict()
    kept = [n for n in names if (cache / f"{n}{part_cache.SUFFIX}").exists()]
    assert sum(sizes[n] for n in kept) <= 1 << 20 < sum(sizes[n] for n in kept) + sizes[names[1]]
    assert kept[0] == names[0] and names[1] not in kept  # the oldest by use went first
    assert kept == [names[0], *names[len(names) - len(kept) + 1 :]]
    assert not stale.exists()


def test_a_read_that_wrote_evicts_to_the_cap(
    base: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A command's read evicts once it has written: an old, large entry goes, the entries it
    wrote (used last) stay."""
    cache.mkdir()
    old = cache / f"{'0' * 64}{part_cache.SUFFIX}"
    old.write_bytes(np.random.default_rng(1).bytes(3 << 19))  # 1.5 MB
    os.utime(old, (0, 0))
    monkeypatch.setenv(part_cache.MB_ENV, "1")
    _json(base / "store", "report", "a")
    assert not old.exists()
    assert len(_entries(cache)) == _parts(base / "store", "a")


def test_a_bad_cap_is_a_usage_error(base: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(part_cache.MB_ENV, "lots")
    ran = cli("report", "a", "--store", str(base / "store"), "-q")
    assert ran.code == 1 and "Traceback" not in ran.err
    assert "MISMATCHCTL_CACHE_MB" in ran.err and "Hint" in ran.err


@pytest.mark.parametrize("blocked", ["file", "under_a_file"])
def test_a_directory_that_cannot_be_written_leaves_the_numbers(
    base: Path, tmp_path: Path, calls: list[str], monkeypatch: pytest.MonkeyPatch, blocked: str
) -> None:
    monkeypatch.setenv(part_cache.MB_ENV, "0")
    plain = _json(base / "store", "report", "a")
    monkeypatch.delenv(part_cache.MB_ENV)
    a_file = tmp_path / "a-file"
    a_file.write_text("in the way")
    where = a_file if blocked == "file" else a_file / "parts"
    monkeypatch.setenv(part_cache.DIR_ENV, str(where))
    assert _json(base / "store", "report", "a") == plain
    assert _json(base / "store", "report", "a") == plain
    assert a_file.read_text() == "in the way"
    assert len(calls) == 3 * _parts(base / "store", "a")


KEY_SCRIPT = """
import sys
import numpy as np
import mismatchctl
from mismatchctl.analysis.diagnose.extra import DiagnoseExtra
from mismatchctl.analysis.explain import CubeExtra, RunCubeExtra
from mismatchctl.analysis.report.figure_data import FigureExtra
from mismatchctl.analysis.report.sequences import SequenceSums
from mismatchctl.analysis.selection import select
from mismatchctl.engines import part_cache
from mismatchctl.engines import plan as K
from mismatchctl.engines.routing import RoutingExtra
from mismatchctl.stats.bins import LOG_EDGES
from mismatchctl.analysis.explain import cube_spec

sel = select(mismatchctl.open_store(sys.argv[1]), ["a"], K.StepRange(2, 7), gpu="H20")
spec = cube_spec([sel], LOG_EDGES, with_run=False)
replay = frozenset(f"run-{i}" for i in range(40))  # a set: its pickle's order follows the hash
extras = [RoutingExtra([("run", "step")], LOG_EDGES, replay), DiagnoseExtra(), FigureExtra(),
          CubeExtra(spec), RunCubeExtra(spec)]
passes = K.plan([("run",), ("run", "bin"), ("gpu", "step")])
pieces = part_cache.pieces(passes, LOG_EDGES, sel.rows, extras, K.DEFAULT_BINNING)
print(" ".join(str(name) for task in sel.tasks for name in part_cache.keys(task, pieces)))
"""


def test_keys_are_the_same_in_every_process(base: Path) -> None:
    keys = []
    for seed in ("1", "2"):  # two hash seeds: the set's 40 names iterate in another order
        done = subprocess.run(
            [sys.executable, "-c", KEY_SCRIPT, str(base / "store")],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)},
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        keys.append(done.stdout.split())
    assert keys[0] and "None" not in keys[0]
    assert len(set(keys[0])) == len(keys[0]) >= 3 * 6  # one key per part and piece
    assert keys[0] == keys[1]


def test_a_value_without_a_stable_description_is_not_cached() -> None:
    assert part_cache.describe({"b": 1, "a": frozenset({"y", "x"})}) == part_cache.describe(
        {"a": frozenset({"x", "y"}), "b": 1}
    )
    assert part_cache.describe(np.arange(3)) != part_cache.describe(np.arange(3.0))
    for value in (lambda x: x, print, object(), [np.array([object()])]):
        with pytest.raises(part_cache.Unstable):
            part_cache.describe(value)

    class Opaque:
        columns: tuple[str, ...] = ()
        __slots__ = ("fn",)

        def __init__(self) -> None:
            self.fn = len

    found = part_cache.pieces(
        K.plan([("run",)]), LOG_EDGES, None, [Opaque(), SequenceSums()], K.DEFAULT_BINNING
    )
    assert found[1] is None and None not in (found[0], found[2])  # only that extra uncached


def test_a_part_is_known_by_its_absolute_path(
    base: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store named relative to the working directory or absolutely: the same key."""
    task = select(mismatchctl.open_store(base / "store"), ["a"]).tasks[0]
    spec = part_cache.pieces(K.plan([("run",)]), LOG_EDGES, None, [], K.DEFAULT_BINNING)[0]
    monkeypatch.chdir(base)
    relative = dataclasses.replace(task, path=os.path.relpath(task.path))
    assert not Path(relative.path).is_absolute()
    assert part_cache.key(relative, spec) == part_cache.key(task, spec) is not None
    moved = dataclasses.replace(task, run="other")
    assert part_cache.key(moved, spec) != part_cache.key(task, spec)


def test_commands_that_read_no_part_load_no_cache(base: Path) -> None:
    """``--help`` and ``runs`` neither import the cache nor compute the source digest."""
    code = _cli("--help") + _cli("runs", "--store", str(base / "store"))
    assert "mismatchctl.engines.part_cache" not in _loaded(code, whole=True)


# -- the Ray engine ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ray_local() -> Iterator[None]:
    """A local Ray with 2 CPUs, started by mismatchctl's own connect (as the CLI does)."""
    if not HAS_RAY:
        pytest.skip("the ray extra is not installed")
    import ray

    from mismatchctl.parallel import connect

    connect(None, workers=2)
    yield
    ray.shutdown()


@pytest.mark.skipif(not HAS_RAY, reason="the ray extra is not installed")
@pytest.mark.slow
@pytest.mark.parametrize("view", sorted(VIEWS))
def test_ray_is_the_same_bytes_cold_and_warm(
    ray_local: None, base: Path, cache: Path, view: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The driver finds every part in the cache the first Ray read filled: nothing is
    submitted, and the JSON is the same bytes."""
    from mismatchctl.engines import ray_engine

    submitted: list[int] = []
    real: Callable[..., Any] = ray_engine._submitted

    def counted(items: list, *args: Any) -> Any:
        submitted.append(len(items))
        return real(items, *args)

    monkeypatch.setattr(ray_engine, "_submitted", counted)
    store = base / "store"
    cold = _json(store, *VIEWS[view], "--engine", "ray")
    assert sum(submitted) >= _parts(store, "a") and _entries(cache)
    submitted.clear()
    assert _json(store, *VIEWS[view], "--engine", "ray") == cold
    assert submitted == []


# -- pieces: one entry per part and piece ---------------------------------------------------


@pytest.fixture
def pieces(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int, list[str]]]:
    """Each part the local engine reads: its path, its passes and the extras it computes."""
    seen: list[tuple[str, int, list[str]]] = []
    real = local_engine.part_groups

    def counted(
        task: K.PartTask, passes: list, edges: Any, rows: Any, extras: Any = (), *rest: Any
    ) -> Any:
        seen.append((task.path, len(passes), [type(e).__name__ for e in extras]))
        return real(task, passes, edges, rows, extras, *rest)

    monkeypatch.setattr(local_engine, "part_groups", counted)
    return seen


def _shifted(to: Path, by: int, seed: int) -> Path:
    """A dump like ``multi_gpu_dump``'s with its steps moved by ``by``."""
    import pyarrow.parquet as pq

    multi_gpu_dump(to, seed=seed)
    table = pq.read_table(to)
    steps = table.column("step").to_numpy() + by
    pq.write_table(table.set_column(0, "step", [steps]), to)
    return to


def _small_parts(mp: pytest.MonkeyPatch) -> None:
    mp.setattr(store_parts, "PART_TOKENS", 4000)
    mp.setattr(ingest_source, "BATCH_TOKENS", 4000)


def test_a_baseline_reads_only_its_own_parts(
    base: Path, tmp_path: Path, cache: Path, pieces: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``diagnose a`` then ``diagnose a --baseline c`` (c's steps widen the cube's spec): a's
    parts are read no more (their cubes moved to the wider spec), c's are; the JSON is the
    cold read's."""
    store = tmp_path / "store"
    _small_parts(monkeypatch)
    mismatchctl.ingest([base / "a.parquet"], run="a", store=store)
    mismatchctl.ingest([_shifted(tmp_path / "c.parquet", 20, 3)], run="c", store=store)
    _json(store, "diagnose", "a")
    a_parts = {p.path for p in select(mismatchctl.open_store(store), ["a"]).tasks}
    assert {p for p, *_ in pieces} == a_parts
    pieces.clear()
    warm = _json(store, "diagnose", "a", "--baseline", "c")
    assert pieces and not {p for p, *_ in pieces} & a_parts
    monkeypatch.setenv(part_cache.MB_ENV, "0")
    assert _json(store, "diagnose", "a", "--baseline", "c") == warm


def test_a_missing_extra_is_computed_alone(
    base: Path, cache: Path, pieces: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read with one more extra: each part read once, for that extra only (a cube reads no
    turn runs: no passes either); the states are the cold read's."""
    from mismatchctl.analysis.explain import RunCubeExtra, cube_spec

    sel = select(mismatchctl.open_store(base / "store"), ["a"])
    spec = cube_spec([sel], LOG_EDGES, with_run=False)
    passes = K.plan([(K.RUN,), (K.GPU, K.BIN)])
    first = Read(sel.tasks, passes, LOG_EDGES, sel.rows, [SequenceSums()])
    run_reads([first])
    pieces.clear()
    more = first._replace(extras=[SequenceSums(), RunCubeExtra(spec)])
    warm = run_reads([more])[0]
    assert sorted(pieces) == sorted((t.path, 0, ["RunCubeExtra"]) for t in sel.tasks)
    monkeypatch.setenv(part_cache.MB_ENV, "0")
    cold = run_reads([more])[0]
    _same((warm[0], warm[1][:1]), (cold[0], cold[1][:1]))
    assert warm[1][1].keys() == cold[1][1].keys() == {"a"}
    assert np.array_equal(warm[1][1]["a"].state, cold[1][1]["a"].state)


@pytest.mark.parametrize("view", ["report", "diagnose", "explain"])
def test_a_run_ingested_in_two_halves_reads_only_the_new_parts(
    base: Path,
    tmp_path: Path,
    cache: Path,
    pieces: list,
    monkeypatch: pytest.MonkeyPatch,
    view: str,
) -> None:
    """A second ingest adds steps (the cubes' spec widens): the view reads the new parts
    only, and its JSON is the same bytes as a cold read's."""
    store = tmp_path / "store"
    _small_parts(monkeypatch)
    mismatchctl.ingest([base / "a.parquet"], run="g", store=store)
    _json(store, view, "g")
    old = {p.path for p in select(mismatchctl.open_store(store), ["g"]).tasks}
    mismatchctl.ingest([_shifted(tmp_path / "more.parquet", 12, 4)], run="g", store=store)
    pieces.clear()
    warm = _json(store, view, "g")
    new = {p.path for p in select(mismatchctl.open_store(store), ["g"]).tasks} - old
    assert new and {p for p, *_ in pieces} == new
    monkeypatch.setenv(part_cache.MB_ENV, "0")
    assert _json(store, view, "g") == warm


@pytest.mark.skipif(not HAS_RAY, reason="the ray extra is not installed")
@pytest.mark.slow
def test_ray_submits_only_the_missing_pieces(
    ray_local: None, base: Path, tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On Ray, ``diagnose a --baseline c`` after ``diagnose a``: no task for a's parts, the
    JSON the same bytes as the local engine's without the cache."""
    from mismatchctl.engines import ray_engine

    submitted: list[str] = []
    real: Callable[..., Any] = ray_engine._submitted

    def counted(items: list, *args: Any) -> Any:
        submitted.extend(os.path.abspath(found.task.path) for _, found in items)
        return real(items, *args)

    monkeypatch.setattr(ray_engine, "_submitted", counted)
    store = tmp_path / "store"
    _small_parts(monkeypatch)
    mismatchctl.ingest([base / "a.parquet"], run="a", store=store)
    mismatchctl.ingest([_shifted(tmp_path / "c.parquet", 20, 3)], run="c", store=store)
    _json(store, "diagnose", "a", "--engine", "ray")
    a_parts = {t.path for t in select(mismatchctl.open_store(store), ["a"]).tasks}
    assert {os.path.abspath(p) for p in a_parts} <= set(submitted)
    submitted.clear()
    warm = _json(store, "diagnose", "a", "--baseline", "c", "--engine", "ray")
    assert submitted and not {os.path.abspath(p) for p in a_parts} & set(submitted)
    monkeypatch.setenv(part_cache.MB_ENV, "0")
    assert _json(store, "diagnose", "a", "--baseline", "c") == warm


@pytest.mark.parametrize("view", ["diagnose", "explain"])
def test_a_run_of_one_part_is_the_same_warm(
    base: Path, tmp_path: Path, cache: Path, pieces: list, view: str
) -> None:
    """A selection of one part folds its one state alone: read from the cache it is a cube
    as when read (dense), and the JSON is the same bytes."""
    store = tmp_path / "store"
    mismatchctl.ingest([base / "a.parquet"], run="a", store=store)
    assert _parts(store, "a") == 1
    cold = _json(store, view, "a")
    pieces.clear()
    assert _json(store, view, "a") == cold and pieces == []


def test_the_ray_driver_plans_by_presence_and_computes_a_part_that_no_longer_reads_back(
    base: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Ray driver tells the kept parts by their entries' presence, loading none of them
    (memory follows the parts in flight, not the run); a kept part whose entry turns out
    damaged when its turn comes is computed in the driver, and the fold is the cold one."""
    from mismatchctl.engines import part_lookup, ray_engine

    opened = mismatchctl.open_store(base / "store")
    sel = select(opened, ["a"])
    passes = K.plan([(K.RUN,), (K.GPU, K.BIN)])
    read = Read(sel.tasks, passes, LOG_EDGES, sel.rows, [SequenceSums()])
    cold = run_reads([read], workers=1)
    digests = local_engine.read_pieces(read)
    loads: list[str | None] = []
    real_load = part_cache.load
    monkeypatch.setattr(part_cache, "load", lambda name: loads.append(name) or real_load(name))
    assert all(part_lookup.all_kept(read, digests, task) for task in read.tasks)
    assert loads == []  # presence only: nothing read
    first = read.tasks[0]
    damaged = part_cache.keys(first, digests)[1]
    assert damaged is not None
    (cache / f"{damaged}{part_cache.SUFFIX}").write_bytes(b"not an entry")
    assert part_lookup.all_kept(read, digests, first)  # still present: found out at its turn
    plan = [(read, digests, task, True) for task in read.tasks]
    driver: list[str] = []
    real_groups = ray_engine.part_groups
    monkeypatch.setattr(
        ray_engine,
        "part_groups",
        lambda task, *a: driver.append(task.path) or real_groups(task, *a),
    )
    folded = ray_engine.fold_reads([read], ray_engine._with_cached(plan, [], iter(())))
    assert driver == [first.path]  # only the damaged part was read again, in the driver
    _same(cold[0], folded[0])
    monkeypatch.setenv(part_cache.MB_ENV, "0")
    assert not part_lookup.all_kept(read, digests, first)
