"""`mismatchctl check`: each threshold judged on the selection's metrics against a numpy
reference, exit code 3 on a violation, the defaults from the severity bands, thresholds files,
clear errors, and JUnit XML valid under the JUnit schema (tests/data/junit-10-subset.xsd)."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from mismatchctl import api
from mismatchctl.render.json import to_jsonable
from mismatchctl.stats import BANDS
from mismatchctl.stats import registry as M
from tests.helpers import cli
from tests.watch_writer import step_arrays, write_step

XSD = Path(__file__).parents[2] / "data" / "junit-10-subset.xsd"
XS = "{http://www.w3.org/2001/XMLSchema}"
NOISES = {1: 0.02, 2: 0.03, 3: 0.2}  # step 3 in the `medium` band


@pytest.fixture
def run(store: Path, tmp_path: Path) -> str:
    dumps = tmp_path / "dumps"
    for step, noise in NOISES.items():
        write_step(dumps, step, noise)
    assert cli("ingest", str(dumps), "--run", "g", "-q").code == 0
    return "g"


def _r(step: int) -> np.ndarray:
    rollout, trainer, mask = step_arrays(step, NOISES[step])
    return (trainer - rollout)[mask == 1]


def _kl(r: np.ndarray) -> float:
    return float(np.mean(np.expm1(r) - r))


def test_thresholds_against_numpy_and_the_exit_code(run: str) -> None:
    whole = _kl(np.concatenate([_r(s) for s in NOISES]))
    step_max = max(_kl(_r(s)) for s in NOISES)
    abs_max = max(float(np.abs(_r(s)).max()) for s in NOISES)
    ran = cli(
        "check", run, "--max", f"vllm_kl={whole * 1.01}", "--max", f"abs_log_ratio_max={abs_max}",
        "--min", f"tokens={sum(len(_r(s)) for s in NOISES)}", "--json", "-",
    )  # fmt: skip
    assert ran.code == 0, ran.err
    cases = {c["name"]: c for c in json.loads(ran.out)["check"]["thresholds"]}
    assert cases[f"vllm_kl <= {whole * 1.01:g}"]["value"] == pytest.approx(whole, rel=1e-12)
    assert cases["vllm_kl_step_max <= 0.1"]["value"] == pytest.approx(step_max, rel=1e-12)
    assert cases["vllm_kl_step_max <= 0.1"]["source"] == "default"
    assert all(c["verdict"] == "ok" for c in cases.values()) and len(cases) == 4

    failing = cli("check", run, "--max", f"vllm_kl={whole * 0.99}", "--json", "-")
    assert failing.code == 3
    out = json.loads(failing.out)["check"]
    assert out["passed"] is False
    assert [c["verdict"] for c in out["thresholds"]] == ["fail", "ok"]
    # the default vllm_kl threshold was replaced, not kept beside the given one
    assert [c["source"] for c in out["thresholds"]] == ["--max", "default"]


def test_defaults_come_from_the_severity_bands(run: str) -> None:
    gate = api.check(run)
    limits = {(c.threshold.metric, c.threshold.direction): c.threshold.limit for c in gate.cases}
    assert limits == {("vllm_kl", "max"): BANDS[1][1], ("vllm_kl_step_max", "max"): BANDS[2][1]}
    assert gate.passed
    # step 3 alone is above the low band: a step-max threshold at its top fails
    gate = api.check(run, maximum={"vllm_kl_step_max": BANDS[0][1]}, defaults=False)
    assert [c.verdict for c in gate.cases] == ["fail"]
    assert cli("check", run, "--no-defaults").code == 1


def test_every_gated_metric_of_the_registry_is_accepted(run: str) -> None:
    """Whatever the registry holds at the count, token and sequence levels (new metrics
    included) is accepted, and the selection has a value for it."""
    names = api.gated_metrics()
    assert {M.VLLM_KL, M.PROB_PEARSON, M.VLLM_KL_STEP_P90, M.BAND_SHARE["severe"]} <= set(names)
    gate = api.check(run, maximum={n: 1e300 for n in names}, defaults=False)
    missing = [c.threshold.metric for c in gate.cases if c.value is None]
    assert missing == [] and gate.passed


def test_unknown_and_ungated_metrics_are_clear_errors(run: str) -> None:
    count = len(api.gated_metrics())
    for typo, meant in (("vlm_kl", "`vllm_kl`"), ("vllm_kll", "`vllm_kl`")):
        ran = cli("check", run, "--max", f"{typo}=1e-3")
        assert ran.code == 1
        assert ran.err == (
            f"Error: --max: `{typo}` is not a metric\n\nHint: did you mean {meant}? "
            f"`mismatchctl check --help` lists the {count} metrics a gate takes (vllm_kl, "
            "vllm_kl_step_max, prob_pearson...); docs/metrics.md describes each.\n"
        )
    ran = cli("check", run, "--max", "kl_k=1")  # two names as close: both
    assert "Hint: did you mean `kl_k1` or `kl_k2`? " in ran.err or "`kl_k2` or `kl_k1`" in ran.err
    ran = cli("check", run, "--max", "VLLM_KL_STEP_MAX=1")
    assert "Hint: did you mean `vllm_kl_step_max`? " in ran.err
    ran = cli("check", run, "--max", "throughput=1")  # nothing close: no guess, no list of 40
    assert ran.err.split("Hint: ")[1].startswith("`mismatchctl check --help` lists the ")
    assert "kl_k2" not in ran.err and len(ran.err) < 300
    help_text = " ".join(cli("check", "--help").out.replace("│", " ").split())
    assert "vllm_kl_step_max" in help_text and "band_share_severe" in help_text  # where it is
    ran = cli("check", run, "--min", "ess=0.5")
    assert ran.code == 1 and "`ess` is a metric check cannot gate on" in ran.err
    ran = cli("check", run, "--max", "vllm_kl=abc")
    assert ran.code == 1 and "is not a finite number" in ran.err
    ran = cli("check", run, "--max", "vllm_kl")
    assert ran.code == 1 and "is not METRIC=VALUE" in ran.err


def test_thresholds_file(run: str, tmp_path: Path) -> None:
    whole = _kl(np.concatenate([_r(s) for s in NOISES]))
    path = tmp_path / "gate.toml"
    path.write_text(f"[max]\nvllm_kl = {whole / 2}\n\n[min]\nprob_pearson = 0.9\n")
    ran = cli("check", run, "--thresholds", str(path), "--json", "-")
    assert ran.code == 3
    got = {
        c["name"]: (c["verdict"], c["source"]) for c in json.loads(ran.out)["check"]["thresholds"]
    }
    assert got[f"vllm_kl <= {whole / 2:g}"] == ("fail", str(path))
    assert got["prob_pearson >= 0.9"] == ("ok", str(path))
    # the command line replaces the file's threshold of the same metric and direction
    assert cli("check", run, "--thresholds", str(path), "--max", "vllm_kl=1").code == 0
    path.write_text("[maximum]\nvllm_kl = 1\n")
    ran = cli("check", run, "--thresholds", str(path))
    assert ran.code == 1 and f"{path}: expected only [max] and [min] tables" in ran.err
    path.write_text("[max\n")
    ran = cli("check", run, "--thresholds", str(path))
    assert ran.code == 1 and f"{path} is not TOML" in ran.err


def test_junit_is_valid_and_has_a_case_per_threshold_and_check(run: str, tmp_path: Path) -> None:
    out = tmp_path / "check.xml"
    ran = cli("check", run, "--max", "vllm_kl=1e-6", "--diagnose", "--junit", str(out), "-q")
    assert ran.code == 3
    root = ET.parse(out).getroot()
    validate(root, XSD)
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == [f"thresholds: {run}", f"diagnose: {run}"]
    checks = api.diagnose(run).checks
    assert len(suites[1].findall("testcase")) == len(checks)
    assert int(suites[1].get("failures")) == sum(c.verdict == "fail" for c in checks)
    assert int(suites[1].get("skipped")) == sum(c.verdict == "n/a" for c in checks)
    failed = suites[0].findall("testcase/failure")
    assert len(failed) == 1 and "above the maximum 1e-06" in failed[0].get("message")
    assert int(root.get("tests")) == 2 + len(checks)
    # the JSON's checks are diagnose's own JSON of each check, evidence keys included
    ran = cli("check", run, "--max", "vllm_kl=1e-6", "--diagnose", "--json", "-", "-q")
    assert json.loads(ran.out)["check"]["diagnose"] == to_jsonable([c.to_dict() for c in checks])


def test_the_validator_rejects_what_the_schema_forbids() -> None:
    """The validator is a real one: a suite without its failures count, an unknown element
    and a malformed time are each refused."""
    good = '<testsuites><testsuite name="a" tests="1" failures="0" errors="0" time="0.5">'
    good += '<testcase name="x"><system-out>ok</system-out></testcase></testsuite></testsuites>'
    validate(ET.fromstring(good), XSD)
    for bad in (
        good.replace(' failures="0"', ""),
        good.replace("<system-out>ok</system-out>", "<output/>"),
        good.replace('time="0.5"', 'time="half"'),
    ):
        with pytest.raises(AssertionError):
            validate(ET.fromstring(bad), XSD)


# --- a validator of the schema's element, attribute and pattern rules -------------------------


def validate(root: ET.Element, xsd: Path) -> None:
    schema = ET.parse(xsd).getroot()
    patterns = {
        t.get("name"): t.find(f"{XS}restriction/{XS}pattern").get("value")
        for t in schema.findall(f"{XS}simpleType")
    }
    elements = {e.get("name"): e for e in schema.findall(f"{XS}element")}
    assert root.tag in ("testsuites", "testsuite"), root.tag
    _check(root, elements, patterns)


def _check(node: ET.Element, elements: dict, patterns: dict) -> None:
    decl = elements.get(node.tag)
    assert decl is not None, f"<{node.tag}> is not an element of the schema"
    attrs = {a.get("name"): a for a in decl.iter(f"{XS}attribute")}
    for name, attr in attrs.items():
        if attr.get("use") == "required":
            assert name in node.attrib, f"<{node.tag}> lacks its required `{name}`"
    for name, value in node.attrib.items():
        assert name in attrs, f"<{node.tag}> has no attribute `{name}` in the schema"
        pattern = patterns.get(attrs[name].get("type"))
        if pattern is not None:
            assert re.fullmatch(pattern, value), f"<{node.tag} {name}={value!r}>"
    allowed = {e.get("ref") for e in decl.iter(f"{XS}element") if e.get("ref")}
    for child in node:
        assert child.tag in allowed, f"<{child.tag}> is not allowed in <{node.tag}>"
        _check(child, elements, patterns)


def test_help_shows_the_tables_of_a_thresholds_file(monkeypatch: pytest.MonkeyPatch) -> None:
    """`[max]` is markup to the help's renderer unless escaped: it must show."""
    monkeypatch.setenv("COLUMNS", "400")  # no line break inside the phrase
    ran = cli("check", "--help")
    assert ran.code == 0 and ran.out.count("[max] and [min] tables") == 2
