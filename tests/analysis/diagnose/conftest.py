"""The stores the diagnose tests read (``stores/``: planted and physical dumps) and the planted
causes' verdicts, each built once per test session by whichever worker asks first: the other
workers wait for it and read the same files, and the diagnoses of those stores are kept beside
them (``tests/planted.diagnosis``). Several modules read one store, and building it and
diagnosing its runs is most of what they cost."""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.analysis.diagnose.stores import (
    alignment,
    calibration,
    gpus,
    growth,
    held_out,
    leaning,
    planted_causes,
    relative,
    requests,
    stops,
    turns,
)
from tests.planted import SHARED


class SharedDirs:
    """What a builder asks of ``tmp_path_factory``, under a directory every worker sees."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def mktemp(self, name: str, numbered: bool = True) -> Path:
        path = self.root / name
        path.mkdir(parents=True, exist_ok=True)
        return path


def built(factory: pytest.TempPathFactory, name: str, build: Callable[[SharedDirs], Path]) -> Path:
    """What ``build`` makes (a store, a file), once per test session: under pytest-xdist the
    workers share their base directory's parent, and a lock lets one build while the others
    wait. A store's diagnoses are kept in ``diagnoses/`` beside it."""
    base = factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / f"diagnose-{name}"
    root.mkdir(exist_ok=True)
    with (root / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = root / "built.json"
        if not done.exists():
            done.write_text(json.dumps(str(build(SharedDirs(root)))))
        path = Path(json.loads(done.read_text()))
    (root / "diagnoses").mkdir(exist_ok=True)
    SHARED[path] = root / "diagnoses"
    return path


def _store(name: str, build: Callable[[SharedDirs], Path]) -> Callable[..., Path]:
    @pytest.fixture(scope="session", name=f"{name}_store")
    def fixture(tmp_path_factory: pytest.TempPathFactory) -> Path:
        return built(tmp_path_factory, name, build)

    return fixture


planted_store = _store("planted", planted_causes.planted)  # one run per planted cause
alignment_store = _store("alignment", alignment.store)
ends_store = _store("ends", stops.store)
gpu_store = _store("gpu", gpus.store)
four_gpus_store = _store("four_gpus", gpus.four)
one_gpu_each_store = _store("one_gpu_each", gpus.one_gpu_each)
growth_store = _store("growth", growth.store)
sample_runs_store = _store("sample_runs", leaning.samples)
leaning_store = _store("leaning", leaning.planted)
relative_store = _store("relative", relative.store)
sequences_store = _store("sequences", requests.store)
pooled_store = _store("pooled", requests.pooled)
turns_store = _store("turns", turns.store)
calibration_store = _store("calibration", calibration.store)
held_out_store = _store("held_out", held_out.store)


@pytest.fixture(scope="session")
def verdicts(tmp_path_factory: pytest.TempPathFactory, planted_store: Path) -> dict:
    """Each planted cause's verdicts (run -> check -> verdict)."""

    def build(dirs: SharedDirs) -> Path:
        path = dirs.mktemp("verdicts") / "verdicts.json"
        path.write_text(json.dumps(planted_causes.verdicts(planted_store)))
        return path

    return json.loads(built(tmp_path_factory, "verdicts", build).read_text())
