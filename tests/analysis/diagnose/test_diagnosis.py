"""diagnose as a whole: clean data raises no alarm; exit codes, JSON, HTML and the brief output through the CLI; the errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import mismatchctl
from mismatchctl.sample_runs import load_manifest
from tests.helpers import FIXTURES, cli
from tests.planted import diagnosis


def test_clean_data_raises_no_alarm(verdicts: dict) -> None:
    assert {v for v in verdicts["clean"].values()} == {"ok", "n/a"}
    na = {name for name, v in verdicts["clean"].items() if v == "n/a"}
    # no training logs attached: the curve checks have nothing to read; no tokenizer: no
    # token classes; no token ids: no tokens seen before in their response (token_shift); no
    # batch ids: no batch shape
    assert na == {
        "batch_shape",
        "token_ids",
        "curve_spikes",
        "rise_before_drop",
        "baseline",
        "token_classes",
        "token_shift",
    }


def test_cli_exit_codes_and_json(planted_store: Path) -> None:
    ran = cli("diagnose", "clean", "--store", str(planted_store))
    assert ran.code == 0, ran.err
    assert "Data integrity" in ran.out and "Objective" in ran.out
    ran = cli("diagnose", "gpu", "--store", str(planted_store), "-q", "--json", "-")
    assert ran.code == 3
    doc = json.loads(ran.out)
    assert doc["schema_version"] == 1 and doc["tool"].startswith("mismatchctl ")
    assert doc["diagnosis"]["verdict"] == "fail" and doc["diagnosis"]["selection"] == "gpu"
    hardware = next(c for c in doc["diagnosis"]["checks"] if c["name"] == "hardware")
    assert hardware["layer"] == "inference path" and hardware["verdict"] == "fail"
    assert {"by": {}} in [{"by": g["by"]} for g in doc["groups"]]
    ran = cli("diagnose", "clean", "--store", str(planted_store), "-q", "--fail-on", "warn")
    assert ran.code == 0
    ran = cli("diagnose", "tool", "--store", str(planted_store), "-q", "--fail-on", "fail")
    assert ran.code == 3


def test_cli_html(planted_store: Path, tmp_path: Path) -> None:
    out = tmp_path / "d.html"
    ran = cli("diagnose", "stale", "--store", str(planted_store), "-q", "--html", str(out))
    assert ran.code == 3 and f"Wrote {out}" in ran.err
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") and page.count("<h2>Diagnosis: stale</h2>") == 1
    # a diagnosis draws no figure: its page carries no plotting library (nor fetches one)
    assert "plotly" not in page.lower() and "<script src" not in page
    assert 'id="check-stale-staleness"' in page  # every check has an anchor


def test_errors(store: Path) -> None:
    mismatchctl.ingest([FIXTURES / "golden.parquet"], run="g", store=store)
    ran = cli("diagnose", "nope", "-q")
    assert ran.code == 1 and "no run `nope`" in ran.err and "Hint:" in ran.err
    ran = cli("diagnose", "g")  # two sequences, one step: runs, says what it cannot do
    assert ran.code in (0, 3) and "Trajectory" in ran.out


def test_quiet_prints_the_verdict_and_what_fails_or_warns(planted_store: Path) -> None:
    """`diagnose -q --fail-on warn` is the CI gate of --help: the verdict line and one line per
    failing or warning check, failures first; an all-clear run prints the verdict line alone."""
    full = cli("diagnose", "gpu", "--store", str(planted_store))
    brief = cli("diagnose", "gpu", "--store", str(planted_store), "-q", "--fail-on", "warn")
    assert full.code == brief.code == 3
    checks = diagnosis(planted_store, "gpu").checks
    failing = [c for c in checks if c.verdict == "fail"]
    warning = [c for c in checks if c.verdict == "warn"]
    head, _, rest = brief.out.strip().partition("\n\n")
    assert head == full.out.strip().partition("\n\n")[0]  # the verdict and its cause, first
    assert re.match(r"Diagnosis: gpu\nverdict +FAIL  \(", head)
    assert re.search(r"\ncause +the hardware", head) and "\nnext " in head
    lines = rest.splitlines()
    listed = [line.split()[1] for line in lines if line.startswith(("FAIL ", "WARN "))]
    assert listed == [c.name for c in failing + warning]
    assert len(lines) <= 4 * len(listed)  # a long finding may wrap, nothing else is printed
    assert "Data integrity" not in brief.out and " OK " not in brief.out
    assert len(lines) < len(full.out.strip().splitlines()) / 3
    hardware = next(c for c in failing if c.name == "hardware")
    assert f"FAIL hardware (inference path): {hardware.finding}" in " ".join(brief.out.split())
    clean = cli("diagnose", "clean", "--store", str(planted_store), "-q")
    assert clean.code == 0 and "\n\n" not in clean.out.strip()  # the verdict alone
    assert re.match(r"Diagnosis: clean\nverdict +OK  \(0 fail, 0 warn", clean.out)
    assert re.search(r"\ncause +no cause found", clean.out)


@pytest.mark.slow
def test_sample_data_raises_no_data_integrity_alarm(tmp_path: Path) -> None:
    """The committed sample runs (healthy data as the frameworks write it): no padding stored
    as tokens, no duplicate sequences."""
    store = tmp_path / "s"
    for sample in load_manifest():  # with the ingest options the manifest gives (MoE routes)
        run = sample.name
        mismatchctl.ingest([sample.path], run=run, store=store, routes=sample.routes)
        checks = {c.name: c for c in mismatchctl.diagnose(run, store=store).checks}
        assert checks["trailing_padding"].verdict == "ok", (run, checks["trailing_padding"])
        assert checks["duplicates"].verdict == "ok", (run, checks["duplicates"])
