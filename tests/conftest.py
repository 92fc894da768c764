"""Shared fixtures: a fresh store per test (helpers live in tests/helpers.py); the slow tests.

Tests marked ``slow`` (long end-to-end runs: a second sample-data generation, wall-clock kills of
a large ingest) are skipped unless ``MISMATCHCTL_SLOW_TESTS=1`` is set, which ``.ci/run`` does; the
skip and its reason appear in pytest's summary.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

SLOW_ENV = "MISMATCHCTL_SLOW_TESTS"
PART_CACHE_DIR = "MISMATCHCTL_CACHE_DIR"  # engines/part_cache.py's
PART_CACHE_MB = "MISMATCHCTL_CACHE_MB"
# torch's OpenMP threads spin between parallel regions unless told otherwise: beside the other
# test workers on the same cores that spinning cost twenty times the work of the tiny models
# (tests/sample_data/); set before any test module imports torch
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
pytest_plugins = ("pytester",)  # tests/test_suite_setup.py runs small suites of its own


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get(SLOW_ENV) == "1":
        return
    skip = pytest.mark.skip(reason=f"slow end-to-end test: run with {SLOW_ENV}=1 (.ci/run does)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def _part_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The engines' part cache (``engines/part_cache.py``) of the whole session in a temporary
    directory, so that no test writes under the user's home; set in ``os.environ`` so that the
    processes the tests start inherit it. Tests that read cold use a directory of their own."""
    path = tmp_path_factory.mktemp("part-cache")
    before = os.environ.get(PART_CACHE_DIR)
    os.environ[PART_CACHE_DIR] = str(path)
    yield path
    if before is None:
        os.environ.pop(PART_CACHE_DIR, None)
    else:
        os.environ[PART_CACHE_DIR] = before


@pytest.fixture
def no_part_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """The part cache off: for a test that reads the same parts twice with the engine's code
    patched (a second read must compute again, not find the first's states)."""
    monkeypatch.setenv(PART_CACHE_MB, "0")


@pytest.fixture
def fresh_part_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh, empty part cache directory of this test's own, the cache on."""
    path = tmp_path / "part-cache"
    monkeypatch.setenv(PART_CACHE_DIR, str(path))
    monkeypatch.delenv(PART_CACHE_MB, raising=False)
    return path


@pytest.fixture
def part_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The part paths the local engine reads (``part_groups``: the tokens) from now on."""
    from mismatchctl.engines import local as local_engine

    seen: list[str] = []
    real = local_engine.part_groups

    def counted(task: Any, *args: Any) -> Any:
        seen.append(task.path)
        return real(task, *args)

    monkeypatch.setattr(local_engine, "part_groups", counted)
    return seen


@pytest.fixture(autouse=True)
def _pipe_width(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test sees stdout as a pipe of the CLI's own width unless it sets COLUMNS itself:
    the shell's or a test runner's COLUMNS (pytest-xdist workers set 80) must not change what
    the terminal output tests read."""
    monkeypatch.delenv("COLUMNS", raising=False)


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty store location, also set as $MISMATCHCTL_STORE."""
    path = tmp_path / "store"
    monkeypatch.setenv("MISMATCHCTL_STORE", str(path))
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "120")
    return path
