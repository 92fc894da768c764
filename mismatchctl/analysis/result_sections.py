"""A result's sections: what the terminal and the HTML page show of it, made by its view.

A result knows nothing of its view: its module imports no view (a view imports its result's
type), so the two are no circle. This module stands above both and hands a result to its view's
function (``certify_sections(result)``); the api's ``sections`` is it, for the command line, the
demo and Python users. A view is found by the result's type, named by module and class rather
than imported: the type of a result in hand is loaded already, and a command that shows one
result (``show``) must not load the others' modules (the report's: polars, the routing
metrics) to tell them apart. Each view is imported when a result of its type is shown."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mismatchctl.analysis import sections as sec


@dataclass(frozen=True)
class Shown:
    """How a result is shown: ``pool`` the report's sections pooled across runs, ``brief`` a
    diagnosis's verdict and what fails or warns only (``diagnose -q``)."""

    pool: bool = False
    brief: bool = False


View = Callable[[Any, Shown], list[sec.Section]]


def _report(result: Any, shown: Shown) -> list[sec.Section]:
    from mismatchctl.analysis.report.view import report_sections

    return report_sections(result, pool=shown.pool)


def _diagnosed_report(result: Any, shown: Shown) -> list[sec.Section]:
    from mismatchctl.analysis.diagnosed_report import diagnosed_report_sections

    return diagnosed_report_sections(result, pool=shown.pool)


def _diagnosis(result: Any, shown: Shown) -> list[sec.Section]:
    from mismatchctl.analysis.diagnose.view import diagnosis_sections

    return diagnosis_sections(result, shown.brief)


def _comparison(result: Any, _: Shown) -> list[sec.Section]:
    from mismatchctl.analysis.compare.view import comparison_sections

    return comparison_sections(result)


def _identical(result: Any, _: Shown) -> list[sec.Section]:
    from mismatchctl.analysis.compare.view import identical_sections

    return identical_sections(result)


def _whatif(result: Any, _: Shown) -> list[sec.Section]:
    from mismatchctl.analysis.whatif.view import whatif_sections

    return whatif_sections(result)


def _preset_whatif(result: Any, _: Shown) -> list[sec.Section]:
    from mismatchctl.analysis.whatif.preset_view import preset_sections

    return preset_sections(result)


def _preset_list(result: Any, _: Shown) -> list[sec.Section]:
    from mismatchctl.analysis.whatif.preset_view import preset_list_sections

    return preset_list_sections(result)


def _gate(result: Any, _: Shown) -> list[sec.Section]:
    from mismatchctl.analysis.check.view import gate_sections

    return gate_sections(result)


def _certification(result: Any, _: Shown) -> list[sec.Section]:
    from mismatchctl.analysis.certify.view import certify_sections

    return certify_sections(result)


def _tokens(result: Any, _: Shown) -> list[sec.Section]:
    from mismatchctl.analysis.tokens.view import tokens_sections

    return tokens_sections(result)


def _show(result: Any, _: Shown) -> list[sec.Section]:
    from mismatchctl.analysis.show.view import show_sections

    return show_sections(result)


def _explain(result: Any, _: Shown) -> list[sec.Section]:
    from mismatchctl.analysis.explain_view import explain_sections

    return explain_sections(result)


def _bisect(result: Any, _: Shown) -> list[sec.Section]:
    from mismatchctl.analysis.bisect.view import bisect_sections

    return bisect_sections(result)


# Every result the command line shows: (its module, its class) -> its view.
VIEWS: dict[tuple[str, str], View] = {
    ("mismatchctl.analysis.report.report", "Report"): _report,
    ("mismatchctl.analysis.diagnosed_report", "DiagnosedReport"): _diagnosed_report,
    ("mismatchctl.analysis.diagnose.diagnosis", "Diagnosis"): _diagnosis,
    ("mismatchctl.analysis.compare.compare", "Comparison"): _comparison,
    ("mismatchctl.analysis.compare.same", "Identical"): _identical,
    ("mismatchctl.analysis.whatif.whatif", "Whatif"): _whatif,
    ("mismatchctl.analysis.whatif.preset", "PresetWhatif"): _preset_whatif,
    ("mismatchctl.analysis.whatif.preset", "PresetList"): _preset_list,
    ("mismatchctl.analysis.check.check", "Gate"): _gate,
    ("mismatchctl.analysis.certify.certify", "Certification"): _certification,
    ("mismatchctl.analysis.tokens.tokens", "Tokens"): _tokens,
    ("mismatchctl.analysis.show.show", "Show"): _show,
    ("mismatchctl.analysis.explain", "Explain"): _explain,
    ("mismatchctl.analysis.bisect.judge", "Bisect"): _bisect,
}


def sections(result: object, *, pool: bool = False, brief: bool = False) -> list[sec.Section]:
    """The sections of a result (``pool``: a report's pooled across runs; ``brief``: a
    diagnosis's verdict and what fails or warns only); a TypeError for a value that is no
    result with a view."""
    for cls in type(result).__mro__:
        view = VIEWS.get((cls.__module__, cls.__qualname__))
        if view is not None:
            return view(result, Shown(pool=pool, brief=brief))
    known = ", ".join(sorted(name for _, name in VIEWS))
    raise TypeError(f"no view shows a {type(result).__name__}: the results with one are {known}")
