"""`ingest --warm`: a run's parts read once for `report`, `explain` and `diagnose`, right after
the ingest, so that the part cache (``engines/part_cache.py``) holds their states and the views
that follow read states instead of tokens.

Each view's read is exactly the one the view makes on the whole run with its defaults (the same
passes and extras, so the same entries): `report RUN`, `explain RUN` (with its bootstrap's cells)
and `diagnose RUN` (the report by gpu with every check's extras). Parts whose states are already
kept are not read again. A view with other options (``--by``, ``--bins``, ``--steps``, a
baseline whose steps or gpus differ) reads what its own question needs, as without the cache."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mismatchctl.analysis.bins import parse_edges
from mismatchctl.analysis.diagnose.build import read_for_diagnosis
from mismatchctl.analysis.explain import cube_spec, read_cubes
from mismatchctl.analysis.report.report import parse_binning, report_on
from mismatchctl.analysis.selection import reading, resolve_all, resolve_text
from mismatchctl.engines import part_cache
from mismatchctl.engines.choice import LOCAL_ENGINE, Engine
from mismatchctl.parallel import DEFAULT_WORKERS
from mismatchctl.store import Store

VIEWS = ("report", "explain", "diagnose")


@dataclass(frozen=True)
class Warmed:
    """What ``warm`` did: the run, where the cache is (None: it is off, and nothing was read),
    and the seconds each view's read took."""

    run: str
    directory: Path | None
    seconds: dict[str, float]

    def to_dict(self) -> dict[str, object]:
        return {
            "run": self.run,
            "cache": None if self.directory is None else str(self.directory),
            "seconds": self.seconds,
        }


def warm(
    store: Store,
    run: str,
    *,
    workers: int = DEFAULT_WORKERS,
    on_part: Callable[[int], None] | None = None,
    engine: Engine = LOCAL_ENGINE,
) -> Warmed:
    """Read ``run`` for each of ``VIEWS`` as the view reads it by default, filling the part
    cache; nothing when the cache is off (``$MISMATCHCTL_CACHE_MB=0``, or no directory)."""
    where = part_cache.directory()
    if where is None:
        return Warmed(run, None, {})
    selection = resolve_text(store, run)
    edges = parse_edges("log")
    seconds: dict[str, float] = {}
    with reading(selection):
        start = time.perf_counter()
        whole = resolve_all(store, [run], None)  # as `report RUN` resolves it
        report_on(
            whole, workers=workers, on_part=on_part, engine=engine, binning=parse_binning("log2")
        )
        seconds["report"] = time.perf_counter() - start
        start = time.perf_counter()
        spec = cube_spec([selection], edges, routing=True)
        read_cubes([selection], spec, edges, workers, on_part, engine, cells=True)
        seconds["explain"] = time.perf_counter() - start
        start = time.perf_counter()
        read_for_diagnosis(
            store, selection, None, None, workers=workers, on_part=on_part, engine=engine
        )
        seconds["diagnose"] = time.perf_counter() - start
    return Warmed(run, where, seconds)
