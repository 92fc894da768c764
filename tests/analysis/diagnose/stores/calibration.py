"""diagnose on physical faults: runs of the calibration corpus (tests/data/calibration, a subset of
`sample_data/calibrate.py --size small`: a real tiny model's bf16 engine against its fp32 trainer,
each fault simulated where it happens), ingested without tags. The healthy runs raise no alarm,
each fault is named by its cause; the slow tier diagnoses every committed run alone and against
its baseline and checks docs/diagnose.md's table of the committed runs says the same."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mismatchctl import api
from tests.planted import diagnosis

ROOT = Path(__file__).parents[4]


CORPUS = ROOT / "tests" / "data" / "calibration"


DOC = ROOT / "docs" / "diagnose.md"


def _runs() -> dict[str, dict]:
    return {r["name"]: r for r in json.loads((CORPUS / "corpus.json").read_text())["runs"]}


def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("calibration") / "store"
    for name, run in _runs().items():
        options = run.get("ingest") or {}
        routes = None
        if options:
            routes = api.RouteOptions(
                top_k=options.get("routes_topk") or 0, num_experts=options.get("num_experts")
            )
        api.ingest([CORPUS / "runs" / name], name, store=root, routes=routes)
    return root


def _cause(store: Path, run: str, baseline: str | None = None) -> dict:
    return diagnosis(store, run, baseline).section_dict()  # once for every test worker


def _documented() -> dict[str, tuple[str, str]]:
    """docs/diagnose.md's table of the committed runs (its ``committed`` block): per run, what it
    is named alone and with its baseline."""
    rows = {}
    block = DOC.read_text().split("<!-- committed:begin -->", 1)[1]
    for line in block.split("<!-- committed:end -->", 1)[0].splitlines():
        cells = [c.strip().strip("*") for c in line.strip().strip("|").split("|")]
        if len(cells) == 6 and cells[0] in _runs():
            rows[cells[0]] = (cells[4], cells[5])
    return rows


def _named(found: dict) -> str:
    cause = found["cause"]
    key = cause["key"] if found["verdict"] in ("warn", "fail") else "none"
    text = f"{found['verdict']} {key}"
    return text + "".join(f" + {a['key']}" for a in cause.get("also", []))
