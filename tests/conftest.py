"""Shared fixtures: a fresh store per test (helpers live in tests/helpers.py)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty store location, also set as $MISMATCHCTL_STORE."""
    path = tmp_path / "store"
    monkeypatch.setenv("MISMATCHCTL_STORE", str(path))
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "120")
    return path
