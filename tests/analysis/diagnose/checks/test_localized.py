"""The ``localized`` check (``analysis/diagnose/checks/localized.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mismatchctl import api
from tests.analysis.diagnose.stores import relative, turns
from tests.helpers import slow_param
from tests.planted import PATH_STEPS
from tests.planted import checks as diagnosed


@pytest.mark.parametrize("run", ["path-steps-2", slow_param("path-steps-4")])
@pytest.mark.parametrize("baseline", [None, slow_param("base")])
def test_a_path_fault_in_every_third_step_is_found_in_those_steps(
    relative_store: Path, run: str, baseline: str | None
) -> None:
    checks = relative._checks(relative_store, run, baseline)
    assert checks["cause"].evidence.cause == "code_path"
    (local,) = checks["localized"].evidence.runs.values()
    steps = [f.where["step"] for f in local.code_path_findings if "step" in f.where]
    assert steps, "a finding on the faulty steps"
    found = {int(v) for v in steps[0].split(",") if "-" not in v}
    assert len(found) >= 5 and found <= set(PATH_STEPS)


def test_a_fault_at_long_kv_positions_is_found_there(relative_store: Path) -> None:
    """10x on the tokens at KV position >= 48 in a third of the steps: the run is 1.2x a healthy
    one overall, the steps do not split into regimes, the KV position localizes it."""
    checks = relative._checks(relative_store, "path-kv")
    assert checks["regimes"].verdict == "ok"
    assert checks["localized"].verdict == "warn"
    (local,) = checks["localized"].evidence.runs.values()
    top = local.code_path_findings[0].where
    assert top["kv_position"] == "32-127"
    assert checks["cause"].evidence.cause == "code_path"


def test_explain_names_the_same_tokens_once(relative_store: Path) -> None:
    """Where no sequence has a third turn, ``turn 1`` and ``turn_kind later`` are the same
    tokens: one finding named both ways, not two rows of the same numbers."""
    expl = api.explain("tool-small", store=relative_store, bootstrap=False).explanation
    shares = [(f.tokens, f.mass_share) for f in expl.findings]
    assert len(shares) == len(set(shares))
    later = [f for f in expl.findings if {"turn_kind": "later"} in [f.where, *f.same_as]]
    assert len(later) == 1
    assert {"turn": "1"} in [later[0].where, *later[0].same_as]
    assert "(= turn" in later[0].sentence


@pytest.mark.parametrize("run", ["kv-10x-1", slow_param("kv-10x-2"), slow_param("kv-100x")])
@pytest.mark.parametrize("baseline", [None, slow_param("base")])
def test_a_long_context_path_inside_the_later_turns_is_a_code_path(
    turns_store: Path, run: str, baseline: str | None
) -> None:
    checks = diagnosed(turns_store, run, baseline)
    local, cause = checks["localized"], checks["cause"]
    assert local.verdict in turns.ALARM
    assert local.evidence.later_turns is False
    (evidence,) = local.evidence.runs.values()
    assert evidence.first_turns is None
    assert any("kv_position" in f.where for f in evidence.code_path_findings)
    # within the later turns, their long KV positions (the fault's) stand out: at 100x the
    # search's part was askew (some steps, a length), the later turns' own KV contrast is not
    inside = evidence.within_later_turns
    assert "kv_position" in inside.where and inside.rate_ratio_ci[0] >= 1.5
    if (run, baseline) == ("kv-100x", "base") and cause.evidence.cause == "unexplained":
        # a scaled plant at 100x over the baseline: since equal candidates of the refiner go to
        # the name on fewer values (not to the last bits of the cube's sums), the search's part
        # is kv_position 32-63 x turn_position 16-63 x length 32-63, 11% of the excess, under
        # the 20% a cause must explain (it was an askew part of 33% before): the code path is
        # the only candidate named, and the within-later-turns contrast above says where
        assert "a code path some tokens take" in cause.finding, cause.finding
        return
    assert cause.evidence.cause == "code_path", cause.finding
    assert "attention backend" in cause.next
    # the later turns are hotter as a whole (they hold the long positions): that check fires
    # too, and defers to the code path
    assert checks["tool_responses"].verdict in turns.ALARM
    assert "fix that path first" in checks["tool_responses"].next
    assert "tool_responses" in cause.evidence.named.checks  # its excess is the path's
    assert cause.verdict == checks["tool_responses"].verdict or cause.verdict == "fail"


@pytest.mark.parametrize("baseline", [None, "base"])
def test_a_healthy_run_has_no_turn_fault(turns_store: Path, baseline: str | None) -> None:
    checks = diagnosed(turns_store, "healthy", baseline)
    assert checks["localized"].verdict == "ok"
    assert checks["cause"].evidence.cause == "none"
    assert all(c.verdict not in turns.ALARM for c in checks.values())


LONG_CONTEXTS = Path(__file__).parents[3] / "data" / "long_contexts"


@pytest.mark.slow  # two runs ingested and three diagnoses
def test_a_part_as_hot_in_the_baseline_is_the_stacks_own(tmp_path: Path) -> None:
    """Two healthy runs of two or three long turns (contexts to about 1,000 positions, past the
    sample model's trained 320; docs/diagnose.md, a known false alarm): alone, the long KV
    positions of the later turns are hotter than the rest (the stack's own growth, which the
    run's own rest cannot tell from a path); against a healthy run of the same shape the part
    and the later turns are as hot in the baseline's same tokens, and no check alarms."""
    store = tmp_path / "store"
    for name in ("h-longctx-a", "h-longctx-b"):
        api.ingest([LONG_CONTEXTS / name], name, store=store)
    alone = api.diagnose("h-longctx-a", store=store).section_dict()
    assert {c["name"]: c["verdict"] for c in alone["checks"]}["localized"] == "warn"
    for run, base in (("h-longctx-a", "h-longctx-b"), ("h-longctx-b", "h-longctx-a")):
        found = api.diagnose(run, baseline=base, store=store).section_dict()
        checks = {c["name"]: c for c in found["checks"]}
        assert found["verdict"] == "ok" and found["cause"]["key"] == "none"
        for name in ("localized", "tool_responses"):
            assert checks[name]["verdict"] == "ok"
            assert "as hot in the baseline's same tokens" in checks[name]["finding"]


@pytest.mark.parametrize("baseline", [None, "v8-h-b"])
def test_a_hot_spot_of_two_percent_of_the_mass_is_no_fault(
    held_out_store: Path, baseline: str | None
) -> None:
    """``v8-h-t06``: the 8192-token Llama's healthy run at temperature 0.6, scored by a bf16
    trainer (``family.py --seed 2 --vocab 8192 --trainer bf16``). Its search finds turn 1,
    positions 16-63, step 3 at 2.0x the rest (95% CI 1.5-2.7), which passes the factor and the
    interval, but it holds 1.9% of the run's K3 mass beyond the rest's rate, under
    ``LOCAL_MIN_SHARE``: no warning, the finding says why. Over its baseline (``v8-h-b``, at
    0.9) it was a precision loss beside that part (2.3x outside it, the lower temperature's
    level: ``test_outside.py``); no part is named now, and no cause."""
    from mismatchctl.analysis.diagnose.levels import LOCAL_FACTOR, LOCAL_MIN_SHARE
    from tests.planted import diagnosis

    found = diagnosis(held_out_store, "v8-h-t06", baseline).section_dict()
    local = next(c for c in found["checks"] if c["name"] == "localized")
    top = local["evidence"]["runs"]["v8-h-t06"]["findings"][0]
    assert top["rate_ratio"] >= LOCAL_FACTOR and top["excess_share"] < LOCAL_MIN_SHARE
    assert local["verdict"] == "ok" and "under the 5% that makes a part" in local["finding"]
    assert found["verdict"] == "ok" and found["cause"]["key"] == "none"
