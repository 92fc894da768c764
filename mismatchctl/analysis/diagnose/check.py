"""What every check of `diagnose` shares: the verdict scale, the layers, the ``Check`` result
with its typed evidence (``CheckEvidence``), and ``Every`` check of a layer (what a check module
declares, ``CheckModule``, is in ``context.py``, beside the ``Context`` it runs on)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, TypeVar

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


OMIT, FLAT, KEY = "omit", "flat", "key"  # what a field's metadata says of its JSON


class CheckEvidence:
    """What a check measured: each module of ``checks/`` declares a frozen dataclass
    ``Evidence`` deriving from this (and the rows it lists, when they are more than numbers).
    Its JSON (``to_dict``) walks the fields in their order: a field is written under its name
    (``renamed``: another key), left out when it is ``absent()`` and None (a key written in some
    cases only), and a ``flat()`` field's own fields are written in its place."""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if f.metadata.get(FLAT):
                out.update(to_json(value) if value is not None else {})
            elif value is not None or not f.metadata.get(OMIT):
                out[f.metadata.get(KEY, f.name)] = to_json(value)
        return out


def to_json(value: Any) -> Any:
    """A value of evidence as the JSON writes it: evidence and other dataclasses as objects of
    their fields, tuples as lists."""
    if isinstance(value, CheckEvidence):
        return value.to_dict()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {k: to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    return value


def absent() -> Any:
    """A field the JSON leaves out when it is None (a key written in some cases only)."""
    return field(default=None, metadata={OMIT: True})


def flat(optional: bool = False) -> Any:
    """A field whose own fields the JSON writes in its place; ``optional``: None by default,
    and then nothing is written (keys that are written together or not at all)."""
    if optional:
        return field(default=None, metadata={FLAT: True})
    return field(metadata={FLAT: True})


def renamed(key: str) -> Any:
    """A field the JSON writes under another key (one that is no Python name)."""
    return field(metadata={KEY: key})


E = TypeVar("E", bound=CheckEvidence)


@dataclass
class Check:
    layer: str
    name: str
    title: str
    verdict: str
    finding: str  # one sentence with the numbers
    evidence: CheckEvidence | None = None  # None: nothing measured (the JSON's {})
    next: str | None = None  # what to try next (None when nothing is to be done)

    def to_dict(self) -> dict[str, Any]:
        """The check as the JSON writes it."""
        return {
            "layer": self.layer,
            "name": self.name,
            "title": self.title,
            "verdict": self.verdict,
            "finding": self.finding,
            "evidence": self.evidence_dict(),
            "next": self.next,
        }

    def evidence_dict(self) -> dict[str, Any]:
        return {} if self.evidence is None else self.evidence.to_dict()


def evidence_of(found: Check | None, kind: type[E]) -> E | None:
    """A check's evidence as its module's type (``kind``); None when the check did not run or
    measured nothing of that kind (an n/a result)."""
    e = found.evidence if found is not None else None
    return e if isinstance(e, kind) else None


@dataclass(frozen=True)
class Every:
    """In a check's ``READS``: every check of an earlier layer (``Every(DATA)``), those added
    later included."""

    layer: str


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
