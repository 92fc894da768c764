"""One run per planted cause (tests/planted.py; run name = cause), and which checks each must
set off: every check fires on its planted cause and stays quiet on clean data."""

from __future__ import annotations

from pathlib import Path

import pytest

import mismatchctl
from tests.planted import Plan, diagnosis, write

CAUSES = (
    "clean", "shift", "temperature", "top_p", "sentinel", "spike", "trend", "spiral", "gpu",
    "stale", "tool", "lowprob", "template",
)  # fmt: skip


# check -> {fixture: verdict it must have}; "quiet" lists fixtures where it must be ok (causes
# that garble every number, shift and sentinel, are left out where they legitimately spill over).
FIRES = {
    "alignment": (
        {"shift": "fail"},
        tuple(c for c in CAUSES if c not in ("shift", "sentinel")),  # -9999 garbles the lag 0
    ),
    "sentinels": ({"sentinel": "fail"}, ("clean", "top_p", "shift", "gpu", "trend")),
    "offset": ({"temperature": "fail", "top_p": "fail"}, ("clean", "gpu", "stale", "tool")),
    "temperature": ({"temperature": "fail"}, ("clean", "gpu", "stale", "lowprob", "trend")),
    "top_p": ({"top_p": "fail"}, ("clean", "temperature", "gpu", "stale", "lowprob")),
    "low_probability": ({"lowprob": "warn"}, ("clean", "gpu", "tool", "stale", "top_p")),
    "tool_responses": ({"tool": "fail"}, ("clean", "gpu", "lowprob", "stale", "temperature")),
    "hardware": ({"gpu": "fail"}, ("clean", "tool", "stale", "trend", "lowprob")),
    "spikes": ({"spike": "fail"}, ("clean", "gpu", "trend", "stale", "tool")),
    "trend": ({"trend": "fail", "spiral": "fail"}, ("clean", "spike", "gpu", "stale")),
    "spiral": ({"spiral": "fail"}, ("clean", "spike", "gpu", "stale", "tool")),
    "severe_batches": ({"gpu": "fail", "trend": "fail"}, ("clean", "lowprob", "top_p")),
    "staleness": ({"stale": "fail"}, ("clean", "gpu", "tool", "spike", "trend")),
    "turn_edges": (
        {"template": "fail"},
        ("clean", "gpu", "tool", "spike", "trend", "stale", "lowprob", "temperature", "top_p"),
    ),
}


def planted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One store holding one run per planted cause (run name = cause)."""
    root = tmp_path_factory.mktemp("planted")
    store = root / "store"
    for cause in CAUSES:
        path = write(Plan(cause), root / f"{cause}.parquet")
        mismatchctl.ingest([path], run=cause, store=store)
    return store


def verdicts(planted: Path) -> dict[str, dict[str, str]]:
    """Each cause's verdicts (its diagnosis computed once: ``diagnosis``)."""
    out = {}
    for cause in CAUSES:
        d = diagnosis(planted, cause)
        out[cause] = {c.name: c.verdict for c in d.checks}
    return out


def fires_on_its_cause_only(check: str, verdicts: dict[str, dict[str, str]]) -> None:
    """The check has its verdict on each cause of ``FIRES`` and is ok on the quiet ones."""
    fires, quiet = FIRES[check]
    for cause, verdict in fires.items():
        assert verdicts[cause][check] == verdict, (check, cause)
    for cause in quiet:
        assert verdicts[cause][check] == "ok", (check, cause)
