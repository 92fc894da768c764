"""The JSON of `report`, `compare`, `diagnose`, `whatif` and `explain` on the sample data, pinned.

The golden files under tests/golden/json/ were written before the results were rebuilt as typed
sections; a refactoring must not change a number. A new output may *add* keys (documented in the
CHANGELOG), never drop or change one. Floats are compared at 1e-12 relative, not byte for byte: a
faster path may move a number's last bits (numpy's vectorised ``exp`` and ``expm1`` instead of the
C library's, another summation order) and nothing more; a difference of two means
(``DIFFERENCES``) at 1e-12 of its operand, whose last bits it carries. Regenerate after a deliberate change of
the numbers with ``MISMATCHCTL_UPDATE_GOLDEN=1 pytest tests/test_golden_json.py`` and review the
diff.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import pytest

from mismatchctl.sample_runs import ingest_demo, load_manifest
from mismatchctl.store import open_store
from tests.helpers import cli

ROOT = Path(__file__).parents[1]
GOLDEN = ROOT / "tests" / "golden" / "json"
RUNS = ("ref", "faulty-attn", "fp32-head", "synthetic-gpus")
COMMANDS: dict[str, tuple[str, ...]] = {
    "report_by_gpu": ("report", *RUNS, "--by-gpu"),
    "report_ref_by": ("report", "ref", "--by", "step,turn_kind", "--by", "tag:attention"),
    "report_steps_bins": ("report", "faulty-attn", "--steps", "2..6", "--bins", "linear:5"),
    "compare": ("compare", "ref", "faulty-attn"),
    "compare_gpus": ("compare", "gpu=H20", "gpu=A100"),
    "diagnose_faulty": ("diagnose", "faulty-attn"),
    "diagnose_synthetic": ("diagnose", "synthetic-gpus"),
    "whatif": ("whatif", "synthetic-gpus"),
    "whatif_sweep": ("whatif", "faulty-attn", "--method", "seq-mis", "--sweep", "1.5,2,3"),
    # the findings' bootstrap intervals too (written by the code that read the tokens twice)
    "explain_baseline": ("explain", "faulty-attn", "--baseline", "ref"),
    "explain_steps": (
        "explain",
        "synthetic-gpus@steps=4..",
        "--baseline",
        "synthetic-gpus@steps=..3",
    ),
    "explain_internal": ("explain", "synthetic-gpus"),
}
# Keys whose value may change without any number changing.
VOLATILE = {"tool"}
RELATIVE = 1e-12  # floats: the same arithmetic, but a merge order may move the last bit
# A difference of two means moves by the last bits of its operands, not of itself: it is compared
# at RELATIVE of the operand the same metrics give (``prob_diff_mean`` = pt mean - pr mean: a
# mean difference of 4e-5 between probabilities of 0.6 moves by 2e-12 of itself when one ulp of
# the means does).
DIFFERENCES = {"prob_diff_mean": "rollout_prob_mean"}


@pytest.fixture(scope="module")
def sample_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("golden") / "store"
    wanted = [r for r in load_manifest() if r.name in RUNS]
    ingest_demo(open_store(path), wanted)
    return path


def _json(store: Path, args: tuple[str, ...]) -> Any:
    ran = cli(*args, "--store", str(store), "--json", "-", "-q")
    assert ran.code in (0, 3), ran.err
    return _portable(json.loads(ran.out))


def _portable(value: Any) -> Any:
    """The checkout's own path as ``<repo>``: the sample logs are ingested by absolute path,
    and the golden files must hold in any checkout."""
    if isinstance(value, dict):
        return {k: _portable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_portable(v) for v in value]
    if isinstance(value, str):
        return value.replace(str(ROOT), "<repo>")
    return value


def _contains(old: Any, new: Any, where: str) -> None:
    """Every key and value of ``old`` is in ``new`` (new keys may be added)."""
    if isinstance(old, dict):
        assert isinstance(new, dict), where
        for key, value in old.items():
            if key in VOLATILE:
                continue
            assert key in new, f"{where}: `{key}` is missing"
            operand = old.get(DIFFERENCES.get(key, ""))
            if isinstance(value, float) and isinstance(operand, float):
                tol = RELATIVE * abs(operand)
                ok = math.isclose(value, new[key], rel_tol=RELATIVE, abs_tol=tol)
                assert ok, f"{where}.{key}: {value} != {new[key]}"
                continue
            _contains(value, new[key], f"{where}.{key}")
    elif isinstance(old, list):
        assert isinstance(new, list) and len(new) == len(old), f"{where}: length"
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
            _contains(a, b, f"{where}[{i}]")
    elif isinstance(old, float) and isinstance(new, float):
        assert math.isclose(old, new, rel_tol=RELATIVE, abs_tol=1e-300), f"{where}: {old} != {new}"
    else:
        assert old == new, f"{where}: {old!r} != {new!r}"


def test_floats_are_compared_at_1e_12_relative() -> None:
    """The last bits may move (1e-12 relative), a number may not; other values exactly."""
    assert RELATIVE == 1e-12
    _contains({"m": 0.125, "n": 3}, {"m": 0.125 * (1 + 9e-13), "n": 3, "added": 1.0}, "ok")
    for new in ({"m": 0.125 * (1 + 2e-12), "n": 3}, {"m": 0.125, "n": 4}, {"n": 3}):
        with pytest.raises(AssertionError):
            _contains({"m": 0.125, "n": 3}, new, "changed")
    # a difference of means: at 1e-12 of its operand (one ulp of 0.6 is 1.8e-12 of 6e-5)
    old = {"prob_diff_mean": 6e-5, "rollout_prob_mean": 0.6}
    _contains(old, {**old, "prob_diff_mean": 6e-5 + 1.1e-16}, "ok")
    with pytest.raises(AssertionError):
        _contains(old, {**old, "prob_diff_mean": 6e-5 + 1e-12}, "changed")


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_json_keeps_every_number(sample_store: Path, name: str) -> None:
    out = _json(sample_store, COMMANDS[name])
    path = GOLDEN / f"{name}.json"
    if os.environ.get("MISMATCHCTL_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    _contains(json.loads(path.read_text(encoding="utf-8")), out, name)
