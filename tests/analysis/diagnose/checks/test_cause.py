"""The ``cause`` check (``analysis/diagnose/checks/cause.py``): its evidence is the weighing, the
named cause's row written in its place."""

from __future__ import annotations

from pathlib import Path

from tests.planted import diagnosis


def test_a_named_cause_is_written_in_place_of_the_weighing(planted_store: Path) -> None:
    d = diagnosis(planted_store, "gpu")
    weighing = d.weighing
    assert weighing is not None and weighing.named is not None
    assert weighing.cause == "hardware" and d.cause_check.next == weighing.named.next
    found = d.cause
    assert list(found)[:4] == ["key", "class", "label", "verdict"]
    assert found["key"] == "hardware" and found["next"] and "lost" not in found
    assert list(found)[-3:] == ["also", "runner_ups", "finding"]
    assert found["runner_ups"] and all(r["lost"] for r in found["runner_ups"])
    assert all("next" not in r for r in found["runner_ups"])


def test_no_cause_writes_its_key_and_verdict(planted_store: Path) -> None:
    d = diagnosis(planted_store, "clean")
    assert d.weighing is not None and d.weighing.cause == "none" and d.cause_check.next is None
    found = d.cause
    assert list(found) == ["key", "verdict", "also", "runner_ups", "finding"]
    assert found["key"] == "none" and found["verdict"] == "ok" and found["also"] == []


def test_an_unexplained_excess_says_where_to_look() -> None:
    """Over a baseline: where the excess lives (explain) and which tokens carry it (tokens),
    each command runnable as written (a label with a space is quoted); alone: a baseline."""
    from types import SimpleNamespace
    from typing import cast

    from mismatchctl.analysis.diagnose.checks.cause import _unexplained_advice
    from mismatchctl.analysis.diagnose.context import Context

    over = SimpleNamespace(label="run a", baseline=SimpleNamespace(label="base"))
    said = _unexplained_advice(cast(Context, over))
    assert "`mismatchctl explain 'run a' --baseline base`" in said
    assert "`mismatchctl tokens 'run a'`" in said
    alone = _unexplained_advice(cast(Context, SimpleNamespace(label="r", baseline=None)))
    assert "--baseline" in alone and "tokens" not in alone
