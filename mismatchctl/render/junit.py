"""A `check` as JUnit XML, the test-report format CI systems display: one test suite per part
(the thresholds; diagnose's checks), one test case per threshold or check. A threshold that is
not met and a check that fails are failures; a check that cannot apply (n/a) is skipped; a
check that warns passes with its finding in ``system-out``. Follows the JUnit schema of the
Jenkins xUnit plugin (junit-10.xsd): ``testsuites`` > ``testsuite`` (name, tests, failures,
errors required) > ``testcase`` (name required) > ``failure`` / ``skipped`` / ``system-out``."""

from __future__ import annotations

import datetime as dt
import socket
import xml.etree.ElementTree as ET
from typing import Any

from mismatchctl.analysis.check.check import FAIL, Gate
from mismatchctl.display import printable

NA = "n/a"


def junit_xml(g: Gate, seconds: float) -> str:
    root = ET.Element("testsuites", name=f"mismatchctl check {g.label}", time=f"{seconds:.3f}")
    cases = [
        (f"mismatchctl.check.{_dotted(g.label)}", c.threshold.name, c.verdict, c.message)
        for c in g.cases
    ]
    suites = [("thresholds", cases)]
    if g.diagnosis is not None:
        checks = [
            (f"mismatchctl.diagnose.{c.layer}", c.name, c.verdict, c.finding)
            for c in g.diagnosis.checks
        ]
        suites.append(("diagnose", checks))
    for name, items in suites:
        _suite(root, f"{name}: {g.label}", items, seconds)
    root.set("tests", str(sum(len(items) for _, items in suites)))
    root.set("failures", str(sum(v == FAIL for _, items in suites for _, _, v, _ in items)))
    root.set("errors", "0")
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, "unicode") + "\n"


def _suite(root: ET.Element, name: str, items: list[tuple[str, str, str, str]], t: float) -> None:
    suite = ET.SubElement(
        root, "testsuite", name=_text(name), tests=str(len(items)),
        failures=str(sum(v == FAIL for _, _, v, _ in items)), errors="0",
        skipped=str(sum(v == NA for _, _, v, _ in items)), time=f"{t:.3f}",
        timestamp=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        hostname=socket.gethostname(),
    )  # fmt: skip
    for classname, case_name, verdict, message in items:
        case = ET.SubElement(
            suite, "testcase", name=_text(case_name), classname=_text(classname), time="0"
        )
        _outcome(case, verdict, _text(message))


def _outcome(case: ET.Element, verdict: str, message: str) -> None:
    if verdict == FAIL:
        failure = ET.SubElement(case, "failure", message=message, type=verdict)
        failure.text = message
    elif verdict == NA:
        ET.SubElement(case, "skipped", message=message)
    else:
        out = ET.SubElement(case, "system-out")
        out.text = f"{verdict}: {message}"


def _dotted(label: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in label)


def _text(value: Any) -> str:
    """XML 1.0 has no control characters: escaped the way every output shows them."""
    return printable(str(value))
