"""The cause ``hardware`` (``analysis/diagnose/causes/hardware.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.analysis.diagnose.stores import calibration, gpus, relative
from tests.helpers import slow_param


def test_a_gpu_whose_fault_grows_is_the_hardware_not_a_step_change(gpu_store: Path) -> None:
    checks = gpus._checks(gpu_store, "gpu-grows")
    steps = [c for c in ("regimes", "spikes") if checks[c].verdict in ("warn", "fail")]
    assert steps, "the whole run's steps change at step 12"
    (run,) = checks[steps[0]].evidence.runs.values()
    assert {int(s) for s in run.split.elevated_steps} >= set(range(14, 24))
    cause = checks["cause"]
    assert cause.evidence.cause == "hardware" and "A100" in cause.finding
    assert "gpu generations" in cause.next and "importance" not in cause.next


def test_a_long_context_fault_of_one_gpu_is_the_hardware(gpu_store: Path) -> None:
    checks = gpus._checks(gpu_store, "gpu-long")
    local = checks["localized"]
    assert local.verdict in ("warn", "fail")
    (run,) = local.evidence.runs.values()
    first = run.code_path_findings[0]  # the search's largest specific excess
    assert first.where == {"kv_position": "32-127", "gpu": "A100"}
    assert 20 < first.rate_ratio < 45
    assert "one gpu generation's tokens" in local.next
    cause = checks["cause"]
    assert cause.evidence.cause == "hardware" and "gpu generations" in cause.next


def test_a_uniform_excess_over_a_baseline_on_other_gpus_names_the_gpus(
    one_gpu_each_store: Path,
) -> None:
    checks = gpus._against(one_gpu_each_store, "a100-3x", "base-h20")
    assert checks["baseline"].verdict in ("warn", "fail")
    assert checks["baseline"].evidence.excess_shape == "uniform"
    cause = checks["cause"]
    assert cause.evidence.cause == "hardware"
    assert "the run ran on A100, the baseline on H20" in cause.next
    assert "policy mismatch" in cause.next  # the data cannot tell them apart: said
    assert "while the baseline ran on H20" in checks["baseline"].next


def test_a_baseline_that_names_no_gpu_ran_on_gpus_unknown(one_gpu_each_store: Path) -> None:
    """Tokens without a gpu label name no gpu: the run on A100 over a baseline whose dumps have
    no gpu column is not "another gpu generation than the baseline's" (the Llama family's
    four-device run over its one-device baseline was named so, the baseline's gpus "(none)")."""
    checks = gpus._against(one_gpu_each_store, "a100-3x", "base-none")
    assert checks["baseline"].verdict in ("warn", "fail")
    cause = checks["cause"]
    assert cause.evidence.cause != "hardware"
    assert "(none)" not in cause.next and "the baseline ran on" not in checks["baseline"].next


@pytest.mark.parametrize("baseline", [None, slow_param("base")])
def test_a_faint_gpu_fault_is_the_hardware_not_a_code_path(
    relative_store: Path, baseline: str | None
) -> None:
    checks = relative._checks(relative_store, "gpu-faint", baseline)
    assert checks["hardware"].verdict == "warn"  # 2x over the other gpu's, interval 1.8-2.2
    local = checks["localized"]
    assert local.verdict == "warn"
    (run,) = local.evidence.runs.values()
    first = run.code_path_findings[0]
    assert first.where["gpu"] == "A100" and first.token_share > 0.45  # the gpu, nearly all
    assert "one gpu generation's tokens" in local.next
    assert checks["cause"].evidence.cause == "hardware"
    assert "gpu generations" in checks["cause"].next
    assert "importance" not in checks["cause"].next


def test_a_split_kv_path_of_one_gpu_is_that_hardware(calibration_store: Path) -> None:
    """One replica of four (L20) takes a faulty split-KV path at long KV: the part is long KV
    positions, and within it the L20's tokens alone."""
    cause = calibration._cause(calibration_store, "hw-l20-splitkv-subtle")["cause"]
    assert cause["key"] == "hardware" and "L20" in cause["where"]
    runner = {r["key"]: r for r in cause["runner_ups"]}
    assert "gpu L20" in " ".join(runner["code_path"]["against"])


def test_a_device_hidden_under_a_template_is_named_in_the_first_turns(
    held_out_store: Path,
) -> None:
    """A re-rendered tool response (CRLF endings, 115x alone) beside one device of four
    splitting KV a key late past 96 keys (``gr-pair-tpl-gpu``, the Granite member's
    ``s-pair-tpl-gpu`` of ``family.py --arch granite --sweep --seed 4``). Over the whole run
    the device is 1.2x the others (the template's later turns are every device's): the
    ``hardware`` check is quiet. The long KV positions of both turn kinds explained 97% and
    were named a code path; the template's burst, unopposed, is against that part
    (``code_path._past_a_burst``), and in the first turns, outside the template's part, the
    device stands on the check's own tests (``outside_part``): the two planted causes."""
    from tests.planted import diagnosis

    found = diagnosis(held_out_store, "gr-pair-tpl-gpu").section_dict()
    cause = found["cause"]
    assert cause["key"] == "template"
    (also,) = cause["also"]
    assert (also["key"], also["where"]) == ("hardware", "gpu gpu1 in the first turns")
    assert also["rate_ratio_ci"][0] > 1.75 and "dealt to the gpus at random" in also["because"]
    gpu = next(r for r in cause["runner_ups"] if r["key"] == "code_path")
    assert "the template's signature" in " ".join(gpu["against"])
    checks = {c["name"]: c for c in found["checks"]}
    assert checks["hardware"]["verdict"] == "ok"
