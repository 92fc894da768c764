"""How a check's evidence is written (``check.CheckEvidence``): its fields in order, a field
``absent()`` left out when None, a ``flat()`` one's fields in its place, ``renamed`` keys,
nested evidence and other dataclasses as objects, tuples as lists."""

from __future__ import annotations

from dataclasses import dataclass

from mismatchctl.analysis.diagnose.check import (
    Check,
    CheckEvidence,
    absent,
    evidence_of,
    flat,
    renamed,
)


@dataclass(frozen=True)
class Plain:
    a: int
    b: tuple[float, float]


@dataclass(frozen=True, kw_only=True)
class Inner(CheckEvidence):
    x: int
    y: float | None


@dataclass(frozen=True, kw_only=True)
class Outer(CheckEvidence):
    first: str | None = absent()
    inner: Inner | None = flat(optional=True)
    odd: int = renamed("values_le_-1000")
    none: float | None
    rows: list[Inner]
    plain: Plain
    by: dict[str, Inner]
    last: bool | None = absent()


def test_fields_are_written_in_order_by_the_rules() -> None:
    e = Outer(
        inner=Inner(x=1, y=None),
        odd=2,
        none=None,
        rows=[Inner(x=3, y=0.5)],
        plain=Plain(4, (1.0, 2.0)),
        by={"r": Inner(x=5, y=None)},
        last=False,
    )
    assert e.to_dict() == {
        "x": 1,
        "y": None,
        "values_le_-1000": 2,
        "none": None,
        "rows": [{"x": 3, "y": 0.5}],
        "plain": {"a": 4, "b": [1.0, 2.0]},
        "by": {"r": {"x": 5, "y": None}},
        "last": False,
    }
    assert list(e.to_dict())[:3] == ["x", "y", "values_le_-1000"]
    bare = Outer(first="f", odd=0, none=1.0, rows=[], plain=Plain(0, (0, 0)), by={})
    assert list(bare.to_dict()) == ["first", "values_le_-1000", "none", "rows", "plain", "by"]


def test_a_check_without_evidence_writes_an_empty_object() -> None:
    check = Check("data integrity", "x", "X", "n/a", "nothing")
    assert check.to_dict()["evidence"] == {} and check.evidence_dict() == {}
    assert evidence_of(check, Inner) is None and evidence_of(None, Inner) is None
    typed = Check("data integrity", "x", "X", "ok", "one", Inner(x=1, y=2.0))
    assert evidence_of(typed, Inner) == Inner(x=1, y=2.0) and evidence_of(typed, Outer) is None
