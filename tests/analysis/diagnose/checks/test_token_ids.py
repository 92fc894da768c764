"""The ``token_ids`` check (``analysis/diagnose/checks/token_ids.py``)."""

from __future__ import annotations

from pathlib import Path

from tests.planted import diagnosis


def test_is_never_assessed_on_a_store(verdicts: dict) -> None:
    """The store keeps one id column: whatever the fault, n/a."""
    assert {v["token_ids"] for v in verdicts.values()} == {"n/a"}


def test_says_where_to_compare_the_ids(planted_store: Path) -> None:
    check = next(c for c in diagnosis(planted_store, "shift").checks if c.name == "token_ids")
    assert check.to_dict()["evidence"] == {} and "before ingest" in check.next
