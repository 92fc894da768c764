"""The bundled sample data: find it and ingest every run of its manifest into a store, with the
runs' tokenizer (the manifest's ``tokenizer``) remembered for them."""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mismatchctl.curves.ingest import ingest_metrics
from mismatchctl.errors import InputError
from mismatchctl.ingest.routing_rows import RouteOptions, check_route_options
from mismatchctl.ingest.run_ingest import IngestResult, Options, Progress, ingest_files
from mismatchctl.options import TOKENIZER_BYTES
from mismatchctl.store import Store
from mismatchctl.store.run_settings import TOKENIZER, run_setting, set_run_setting

MANIFEST = "manifest.json"
# a run's `ingest` options in the manifest (what `mismatchctl ingest` needs beyond the files)
INGEST_KEYS = ("routes_aligned", "routes_topk", "num_experts", "keep_routes")


@dataclass
class DemoRun:
    name: str
    path: Path
    format: str | None
    tags: dict[str, str]
    captured: bool
    shows: str
    metrics: Path | None = None  # the run's training log (manifest key "metrics"), if any
    # MoE routes: how to read them (manifest key "ingest": --routes-aligned, --routes-topk...)
    routes: RouteOptions = field(default_factory=RouteOptions)
    tokenizer: Path | None = None  # the tokenizer.json of its token ids (manifest: "tokenizer")


def default_data_dir() -> Path:
    """``sample_data/`` of the source tree this package runs from."""
    return Path(__file__).resolve().parents[1] / "sample_data"


def load_manifest(data_dir: str | os.PathLike[str] | None = None) -> list[DemoRun]:
    base = Path(data_dir) if data_dir else default_data_dir()
    path = base / MANIFEST
    if not path.is_file():
        raise InputError(
            f"no sample data manifest at {path}",
            "run from a source checkout of mismatchctl, or pass --data <dir with manifest.json>.",
        )
    try:
        doc = json.loads(path.read_text())
        entries = doc["runs"]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise InputError(
            f"{path} is not a valid manifest ({exc})", "regenerate the sample data."
        ) from None
    tokenizer = manifest_tokenizer(doc.get("tokenizer"), path)
    return [
        DemoRun(
            name=e["name"],
            path=base / e["path"],
            format=e.get("format"),
            tags=dict(e.get("tags", {})),
            captured=bool(e.get("captured", True)),
            shows=e.get("shows", ""),
            metrics=base / e["metrics"] if e.get("metrics") else None,
            routes=route_options(e.get("ingest", {}), path, e["name"]),
            tokenizer=tokenizer,
        )
        for e in entries
    ]


def manifest_tokenizer(given: Any, path: Path) -> Path | None:
    """The manifest's ``tokenizer`` (a file beside it), checked to exist; None without one."""
    if given is None:
        return None
    file = path.parent / given if isinstance(given, str) else None
    if file is None or not file.is_file():
        raise InputError(
            f"{path}: `tokenizer` is {given!r}, expected the name of a tokenizer.json beside "
            "the manifest",
            "regenerate the sample data (sample_data/gen/tokenizer.py writes the tokenizer).",
        )
    return file.resolve()


def route_options(given: Any, path: Path, run: str) -> RouteOptions:
    """A manifest run's `ingest` options as the ingest's route options."""
    unknown = sorted(set(given) - set(INGEST_KEYS)) if isinstance(given, dict) else None
    if unknown is None or unknown:
        raise InputError(
            f"{path}: run `{run}`: `ingest` holds {unknown if unknown else repr(given)}, expected "
            f"an object with keys among {', '.join(INGEST_KEYS)}",
            "regenerate the sample data.",
        )
    defaults = RouteOptions()
    return check_route_options(
        RouteOptions(
            aligned=str(given.get("routes_aligned", defaults.aligned)),
            num_experts=given.get("num_experts", defaults.num_experts),
            keep_routes=bool(given.get("keep_routes", defaults.keep_routes)),
            top_k=int(given.get("routes_topk", defaults.top_k)),
        )
    )


def ingest_demo(
    store: Store,
    runs: list[DemoRun],
    progress: Progress | None = None,
    on_run: Callable[[str, int, int], None] | None = None,
) -> list[IngestResult]:
    """Ingest every sample run and its training log, if it has one (an already ingested run or
    log is a no-op); ``on_run(run, index, total)`` as each run starts."""
    results = []
    for i, run in enumerate(runs):
        if on_run is not None:
            on_run(run.name, i, len(runs))
        opts = Options(
            run=run.name,
            tags=run.tags,
            fmt=run.format,
            mapping={},
            skip_bad=False,
            routes=run.routes,
        )
        results.append(ingest_files(store, [str(run.path)], opts, progress))
        if run.metrics is not None:
            ingest_metrics(store, run.metrics, run.name)
    return results


def remember_tokenizers(store: Store, runs: list[DemoRun]) -> None:
    """Each ingested run's tokenizer, remembered for it (``show``, ``tokens`` and ``diagnose``
    decode its ids without --tokenizer), unless it remembers another one that can be read."""
    for run in runs:
        if run.tokenizer is None:
            continue
        kept = run_setting(store, run.name, TOKENIZER)
        if kept is None or not (kept == TOKENIZER_BYTES or Path(kept).exists()):
            set_run_setting(store, run.name, TOKENIZER, str(run.tokenizer))


# The compiled kernels a first demo compiles (numba, cached on disk: stats/numba_load.py): the
# MoE runs' route checks at ingest, the report's per-token loop, the diagnoses' cubes, by module.
DEMO_KERNELS = {
    "mismatchctl.ingest.routing_kernels": ("compare_range", "scan_rows", "tail_repeats"),
    "mismatchctl.stats.kernels": (
        "_reset_rows", "_sort_small", "cell_sums", "histogram_counts", "merge_token_rows",
        "run_starts",
    ),
    "mismatchctl.stats.cube.kernels": (
        "column_ranges", "cube_accumulate", "token_checks", "token_codes", "token_k3",
    ),
    "mismatchctl.stats.diagnose_kernels": (
        "hot_cell_sums", "misaligned_turns", "seen_before", "sentinel_counts", "sequence_sums",
        "trailing_flagged",
    ),
    "mismatchctl.stats.edge_kernels": ("edge_pass",),
    "mismatchctl.stats.routing_sums_kernels": ("routing_sums",),
}  # fmt: skip
# a first demo's time compiling all of them: its run with a fresh NUMBA_CACHE_DIR (72 s) less its
# run with the cache warm (37 s), on 2 CPU cores at load average 5-6 (README "Two commands"); the
# CPU time the compile adds is about 25 s. With diagnose's and the turn edges' kernels added, at
# load 3-4: 40.5 s less 22.9 s, 18 s; the figure announced is the slower machine's.
COMPILE_SECONDS = 35


@dataclass(frozen=True)
class Compile:
    """What a demo will compile before it can run: how many kernels, the seconds a first demo
    takes for all of them, and where numba caches them."""

    kernels: int
    seconds: int
    cached_in: str


def demo_compile() -> Compile | None:
    """The demo's kernels whose on-disk cache is cold (``numba_load.is_cold``), or None when
    every one is cached. Imports numba and the kernel modules (the demo loads them anyway)."""
    from mismatchctl.stats.numba_load import cache_path, is_cold

    cold, paths = 0, []
    for module, names in DEMO_KERNELS.items():
        found = importlib.import_module(module)
        for name in names:
            dispatcher = getattr(found, name)
            cold += is_cold(dispatcher) is True
            paths.append(cache_path(dispatcher) or "")
    if not cold:
        return None
    where = [p for p in paths if p]
    return Compile(cold, COMPILE_SECONDS, os.path.commonpath(where) if where else "")


# the sample model's shipped trainer checkpoint (sample_data/gen/bisect_model.py writes it):
# its weights and, beside them, a JSON naming the run and step the trainer scored with them
BISECT_FACTORY = "gen/bisect_model.py:load"
BISECT_MODELS = "model"


@dataclass(frozen=True)
class BisectTarget:
    """What the demo bisects: ``run`` at ``step`` with the factory ``model`` (a file:function)."""

    run: str
    step: int
    model: str


def bisect_target(data_dir: str | os.PathLike[str] | None = None) -> BisectTarget | str:
    """The shipped checkpoint's run, step and factory, or why the demo cannot bisect here."""
    base = Path(data_dir) if data_dir else default_data_dir()
    metas = sorted((base / BISECT_MODELS).glob("*.json"))
    if not metas:
        return f"the sample data has no model checkpoint ({base / BISECT_MODELS} is empty)"
    missing = [m for m in ("torch", "safetensors") if importlib.util.find_spec(m) is None]
    if missing:
        return f"{' and '.join(missing)} not installed (pip install 'mismatchctl[torch,bisect]')"
    try:
        meta = json.loads(metas[0].read_text(encoding="utf-8"))
        run, step = str(meta["run"]), int(meta["step"])
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        return f"{metas[0]} does not name a run and step ({exc})"
    return BisectTarget(run, step, str(base / BISECT_FACTORY))
