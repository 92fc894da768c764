"""What every check of `diagnose` shares: the verdict scale, the layers, the ``Check`` result,
and what a check module declares (``CheckModule``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from mismatchctl.analysis.diagnose.context import Context

OK, WARN, FAIL, NA = "ok", "warn", "fail", "n/a"
SEVERITY = {NA: 0, OK: 1, WARN: 2, FAIL: 3}

DATA, SEMANTIC, PATH, TRAJECTORY, OBJECTIVE = (
    "data integrity",
    "semantic",
    "inference path",
    "trajectory",
    "objective",
)
LAYERS = (DATA, SEMANTIC, PATH, TRAJECTORY, OBJECTIVE)
MAX_LISTED = 20  # steps, samples or bins listed as evidence


@dataclass
class Check:
    layer: str
    name: str
    title: str
    verdict: str
    finding: str  # one sentence with the numbers
    evidence: dict[str, Any] = field(default_factory=dict)
    next: str | None = None  # what to try next (None when nothing is to be done)


@dataclass(frozen=True)
class Every:
    """In a check's ``READS``: every check of an earlier layer (``Every(DATA)``), those added
    later included."""

    layer: str


class CheckModule(Protocol):
    """A module of ``checks/``: one check. ``ORDER``: where the diagnosis (and its JSON) lists
    it, ascending, and which of two checks of a layer ready together runs first; ``READS``: the
    check modules whose results it reads (``Context.result``), or ``Every`` check of an earlier
    layer; ``run``: its result, or None when the check does not apply to the data at all (no MoE
    routes: no routing check)."""

    NAME: str
    LAYER: str
    TITLE: str
    ORDER: int
    READS: tuple[CheckModule | Every, ...]
    run: Callable[[Context], Check | None]


def fired(found: Check | None) -> bool:
    """A check that ran and warned or failed."""
    return found is not None and found.verdict in (WARN, FAIL)


def advice_if(verdict: str, text: str) -> str | None:
    """What to try next, for checks that warn or fail."""
    return text if verdict in (WARN, FAIL) else None


def grade(fail: bool, warn: bool) -> str:
    return FAIL if fail else WARN if warn else OK


def worst(verdicts: list[str]) -> str:
    return max(verdicts, key=SEVERITY.__getitem__, default=NA)
