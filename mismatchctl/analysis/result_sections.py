"""A result's sections: what the terminal and the HTML page show of it, made by its view.

A result knows nothing of its view: its module imports no view (a view imports its result's
type), so the two are no circle. This module stands above both and hands a result to its view's
function (``certify_sections(result)``); the api's ``sections`` is it, for the command line, the
demo and Python users. A view is found by the result's type, named by module and class rather
than imported: the type of a result in hand is loaded already, and a command that shows one
result (``show``) must not load the others' modules (the report's: polars, the routing
metrics) to tell them apart. Each view is imported when a result of its type is shown."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from mismatchctl.analysis import sections as sec


@dataclass(frozen=True)
class Shown:
    """How a result is shown: ``pool`` the report's sections pooled across runs, ``brief`` a
    diagnosis's verdict and what fails or warns only (``diagnose -q``)."""

    pool: bool = False
    brief: bool = False


@dataclass(frozen=True)
class View:
    """A result's view: the function ``function`` of the module ``module``, imported when a
    result of its type is shown; ``takes``: the one ``Shown`` field it is given by that name
    (``pool`` or ``brief``), if any."""

    module: str
    function: str
    takes: str | None = None

    def sections(self, result: Any, shown: Shown) -> list[sec.Section]:
        make = getattr(importlib.import_module(self.module), self.function)
        if self.takes is None:
            return make(result)
        return make(result, **{self.takes: getattr(shown, self.takes)})


_A = "mismatchctl.analysis."
# Every result the command line shows: (its module, its class) -> its view.
VIEWS: dict[tuple[str, str], View] = {
    (f"{_A}report.report", "Report"): View(f"{_A}report.view", "report_sections", "pool"),
    (f"{_A}diagnosed_report", "DiagnosedReport"): View(
        f"{_A}diagnosed_report", "diagnosed_report_sections", "pool"
    ),
    (f"{_A}diagnose.diagnosis", "Diagnosis"): View(
        f"{_A}diagnose.view", "diagnosis_sections", "brief"
    ),
    (f"{_A}compare.compare", "Comparison"): View(f"{_A}compare.view", "comparison_sections"),
    (f"{_A}compare.same", "Identical"): View(f"{_A}compare.view", "identical_sections"),
    (f"{_A}whatif.whatif", "Whatif"): View(f"{_A}whatif.view", "whatif_sections"),
    (f"{_A}whatif.preset", "PresetWhatif"): View(f"{_A}whatif.preset_view", "preset_sections"),
    (f"{_A}whatif.preset", "PresetList"): View(f"{_A}whatif.preset_view", "preset_list_sections"),
    (f"{_A}check.check", "Gate"): View(f"{_A}check.view", "gate_sections"),
    (f"{_A}certify.certify", "Certification"): View(f"{_A}certify.view", "certify_sections"),
    (f"{_A}tokens.tokens", "Tokens"): View(f"{_A}tokens.view", "tokens_sections"),
    (f"{_A}show.show", "Show"): View(f"{_A}show.view", "show_sections"),
    (f"{_A}explain", "Explain"): View(f"{_A}explain_view", "explain_sections"),
    (f"{_A}bisect.judge", "Bisect"): View(f"{_A}bisect.view", "bisect_sections"),
}


def sections(result: object, *, pool: bool = False, brief: bool = False) -> list[sec.Section]:
    """The sections of a result (``pool``: a report's pooled across runs; ``brief``: a
    diagnosis's verdict and what fails or warns only); a TypeError for a value that is no
    result with a view."""
    for cls in type(result).__mro__:
        view = VIEWS.get((cls.__module__, cls.__qualname__))
        if view is not None:
            return view.sections(result, Shown(pool=pool, brief=brief))
    known = ", ".join(sorted(name for _, name in VIEWS))
    raise TypeError(f"no view shows a {type(result).__name__}: the results with one are {known}")
