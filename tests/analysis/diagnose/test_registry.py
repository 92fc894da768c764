"""The checks of `diagnose` as declarations: one module each under
``mismatchctl/analysis/diagnose/checks/`` (name, layer, title, the checks it reads, its documented
thresholds, ``run``); the registry runs them in an order derived from what they read and lists
them in the diagnosis's order; a check reads only what it declares; each check's name is spelled
in its own module only."""

from __future__ import annotations

import ast
import dataclasses
import itertools
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from mismatchctl.analysis.diagnose import registry
from mismatchctl.analysis.diagnose.check import (
    DATA,
    LAYERS,
    OBJECTIVE,
    OK,
    PATH,
    SEMANTIC,
    TRAJECTORY,
    Check,
    CheckEvidence,
    Every,
)
from mismatchctl.analysis.diagnose.context import Context, UndeclaredRead
from mismatchctl.analysis.diagnose.registry import (
    LISTED,
    RUN_ORDER,
    RegistryError,
    reads_of,
    run_checks,
    run_order,
)

DIAGNOSE = Path(registry.__file__).parent
CHECKS = DIAGNOSE / "checks"

# The order of the diagnosis's checks (its JSON lists them so: tests/golden/json/diagnose_*.json)
SHOWN = [
    "alignment", "token_ids", "sentinels", "empty_sequences", "trailing_padding", "duplicates",
    "offset", "temperature", "top_p", "token_shift", "turn_edges", "turn_ends", "token_classes",
    "routing_replay", "route_capture", "baseline", "localized", "low_probability", "tool_responses", "hardware",
    "batch_shape", "hot_sequences", "routing_flips", "spikes", "regimes", "trend", "spiral",
    "severe_batches", "staleness", "policy_signs", "length_scaling", "curve_spikes", "rise_before_drop", "cause", "objective",
]  # fmt: skip

# Words of other vocabularies spelled like a check, where they are written: (check name, module
# under diagnose/) -> what the word is there. Anything else that spells a check's name outside
# its module is a lookup by string the declarations replace.
SAME_SPELLING = {
    ("objective", "check.py"): "the name of the objective layer",
    ("localized", "checks/baseline.py"): "a shape of the excess over a baseline",
    ("hardware", "causes/hardware.py"): "the key of a cause (the JSON's cause.key)",
    ("hardware", "checks/cause.py"): "a cause key the objective takes as fixable",
    ("hardware", "causes/data.py"): "a cause's key, among the causes it explains",
    ("cause", "diagnosis.py"): "the JSON key of the weighing of the causes",
    ("cause", "view.py"): "the label of the verdict's cause line",
    ("baseline", "diagnosis.py"): "the JSON key of the --baseline selector",
    ("spikes", "steps.py"): "a kind of split of the steps (evidence `kind`)",
    ("regimes", "steps.py"): "a kind of split of the steps (evidence `kind`)",
    ("staleness", "weight_lags.py"): "a run tag naming a weight lag",
}


_ORDERS = itertools.count(10, 10)


def _check(
    name: str, layer: str, reads: tuple[Any, ...] = (), verdict: str = OK, order: int = 0
) -> Any:
    """A check module as the registry sees one (its ORDER: after the ones made before)."""

    def run(ctx: Context) -> Check:
        return Check(layer, name, name, verdict, f"{name} ran")

    return SimpleNamespace(
        NAME=name, LAYER=layer, TITLE=name, ORDER=order or next(_ORDERS), READS=reads, run=run
    )


def test_the_run_order_reads_only_what_ran_before() -> None:
    ran: set[str] = set()
    for check in RUN_ORDER:
        assert {r.NAME for r in reads_of(check, LISTED)} <= ran, check.NAME
        ran.add(check.NAME)
    assert sorted(ran) == sorted(SHOWN)


def test_the_diagnosis_lists_the_checks_in_its_order() -> None:
    assert [c.NAME for c in LISTED] == SHOWN
    # the run order differs (the data checks all before the semantic ones), the listing not
    assert [c.NAME for c in RUN_ORDER] != SHOWN
    assert [c.LAYER for c in RUN_ORDER] == sorted((c.LAYER for c in LISTED), key=LAYERS.index)


def test_ties_go_to_the_earlier_layer_then_to_the_lower_order() -> None:
    a = _check("a", SEMANTIC)
    b = _check("b", DATA)
    d = _check("d", PATH, (b,))
    e = _check("e", DATA)
    assert [x.NAME for x in run_order([a, b, d, e])] == ["b", "e", "a", "d"]
    h = _check("h", PATH)
    g = _check("g", PATH, (h,), order=1)  # ordered first, but it reads h: h runs first
    assert [x.NAME for x in run_order([g, h])] == ["h", "g"]


def test_a_check_that_reads_a_later_layer_is_refused() -> None:
    cause = _check("cause", OBJECTIVE)
    early = _check("early", DATA, (cause,))
    with pytest.raises(RegistryError, match=r"early .* reads cause of a later layer"):
        run_order([early, cause])


def test_every_check_of_a_layer_is_read_as_it_is_added() -> None:
    a = _check("a", DATA)
    s = _check("s", SEMANTIC)
    reader = _check("reader", OBJECTIVE, (Every(DATA), s))
    b = _check("b", DATA)  # a data check added after the reader: it reads that one too
    p = _check("p", PATH)
    declared = [reader, a, s, b, p]
    assert [c.NAME for c in reads_of(reader, declared)] == ["a", "s", "b"]  # by ORDER
    assert [c.NAME for c in run_order(declared)] == ["a", "b", "s", "p", "reader"]
    for own in (
        _check("late", TRAJECTORY, (Every(TRAJECTORY),)),
        _check("x", DATA, (Every(PATH),)),
    ):
        with pytest.raises(RegistryError, match="reads every check of"):
            run_order([a, own])


def test_checks_that_read_each_other_are_refused() -> None:
    first = _check("first", PATH)
    second = _check("second", PATH, (first,))
    first.READS = (second,)
    with pytest.raises(RegistryError, match="none can run first: first, second"):
        run_order([first, second])


@pytest.mark.parametrize("case", ["unregistered", "same name", "same order", "no such layer"])
def test_other_declarations_that_cannot_run_are_refused(case: str) -> None:
    data = _check("data", DATA)
    checks = {
        "unregistered": [_check("reader", PATH, (data,))],
        "same name": [data, _check("data", PATH)],
        "same order": [data, _check("other", PATH, order=data.ORDER)],
        "no such layer": [_check("odd", "numerics")],
    }[case]
    with pytest.raises(RegistryError):
        run_order(checks)


def _context() -> Context:
    """A context with nothing to read but the results of the checks run in it."""
    return Context(None, None, None, "sel")  # type: ignore[arg-type]


def test_a_check_reads_only_the_checks_it_declares(monkeypatch: pytest.MonkeyPatch) -> None:
    data = _check("data", DATA, verdict="fail")
    semantic = _check("semantic", SEMANTIC)
    seen: dict[str, Any] = {}

    def reads(ctx: Context) -> Check:
        seen["declared"] = ctx.result(data)
        seen["by name"] = ctx.result("data")
        seen["layers"] = [c.name for c in ctx.results(DATA, SEMANTIC)]
        with pytest.raises(UndeclaredRead) as seen["undeclared"]:
            ctx.result(semantic)
        return Check(PATH, "path", "path", OK, "read")

    path = SimpleNamespace(
        NAME="path", LAYER=PATH, TITLE="path", ORDER=15, READS=(data,), run=reads
    )
    monkeypatch.setattr(registry, "LISTED", (semantic, path, data))
    monkeypatch.setattr(registry, "RUN_ORDER", run_order(registry.LISTED))
    ctx = _context()
    found = run_checks(ctx)
    assert [c.name for c in found] == ["semantic", "path", "data"]  # as listed
    assert seen["declared"].verdict == "fail" and seen["by name"] is seen["declared"]
    assert seen["layers"] == ["data"]  # what it declares, not every check that ran
    assert "path reads the semantic check without declaring it" in str(seen["undeclared"].value)
    with pytest.raises(UndeclaredRead):  # outside a check's run nothing is declared
        ctx.result(data)


def test_every_check_module_declares_itself() -> None:
    modules = {p.stem for p in CHECKS.glob("*.py")} - {"__init__"}
    assert modules == set(SHOWN)  # every module is a check, found by the registry
    for check in LISTED:
        assert Path(check.__file__).stem == check.NAME and isinstance(check.ORDER, int)
        assert check.LAYER in LAYERS and check.TITLE and callable(check.run)
        assert all(r in LISTED or isinstance(r, Every) for r in check.READS), check.NAME
        thresholds = check.Thresholds  # type: ignore[attr-defined]
        assert dataclasses.is_dataclass(thresholds) and thresholds.__dataclass_params__.frozen
        assert isinstance(check.T, thresholds)  # type: ignore[attr-defined]
        for f in dataclasses.fields(thresholds):
            with pytest.raises(dataclasses.FrozenInstanceError):
                setattr(check.T, f.name, 0)  # type: ignore[attr-defined]


def test_the_cause_and_the_objective_read_every_data_and_semantic_check() -> None:
    upstream = {c.NAME for c in LISTED if c.LAYER in (DATA, SEMANTIC)}
    for check in (c for c in LISTED if c.LAYER == OBJECTIVE):
        assert upstream <= {r.NAME for r in reads_of(check, LISTED)}, check.NAME


def test_a_check_name_is_spelled_in_its_own_module_only() -> None:
    names = {c.NAME for c in LISTED}
    found = set()
    for path in DIAGNOSE.rglob("*.py"):
        where = path.relative_to(DIAGNOSE).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            spelled = isinstance(node, ast.Constant) and node.value in names
            if spelled and where != f"checks/{node.value}.py":
                found.add((node.value, where))
    assert found == set(SAME_SPELLING)


def _fields_without_docs(path: Path) -> list[str]:
    """The fields of a module's ``Thresholds`` that neither a docstring nor the docstring of the
    group of fields they start (no docstring between) follows."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Thresholds")
    group: list[str] = []
    for node in cls.body:
        if isinstance(node, ast.AnnAssign):
            group.append(node.target.id)  # type: ignore[attr-defined]
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            group = []
    return group


def test_every_threshold_is_documented() -> None:
    missing = {c.NAME: _fields_without_docs(Path(c.__file__)) for c in LISTED}
    assert {name: fields for name, fields in missing.items() if fields} == {}


def test_every_check_declares_its_evidence() -> None:
    """Each check module's ``Evidence`` is a frozen dataclass of ``CheckEvidence`` (what its
    JSON writes are its fields)."""
    for check in LISTED:
        evidence = check.Evidence  # type: ignore[attr-defined]
        assert issubclass(evidence, CheckEvidence), check.NAME
        assert dataclasses.is_dataclass(evidence), check.NAME
        assert evidence.__dataclass_params__.frozen, check.NAME  # type: ignore[attr-defined]
