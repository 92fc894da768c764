"""diagnose as a detective: planted causes at small magnitudes (about 1.5-3x a healthy run's
vllm_kl, far below the absolute bands) and loud ones (100-1000x on the affected tokens), with
and without ``--baseline``; each is named with the right remedy, and healthy or improved runs
raise no alarm. The planted dumps: tests/planted.py (``factor`` is the affected tokens' vllm_kl
over the clean run's)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import mismatchctl
from mismatchctl import api
from tests.helpers import SLOW, slow_param
from tests.planted import PATH_STEPS, Plan, checks, spike_steps, write

PER_STEP = 32
# run name -> (plan, tags)
RUNS: dict[str, tuple[Plan, dict[str, str]]] = {
    "base": (Plan("clean", per_step=PER_STEP, seed=2), {}),
    "healthy": (Plan("clean", per_step=PER_STEP, seed=1), {}),
    "improved": (Plan("improved", per_step=PER_STEP, seed=3), {}),
    "gpu-small": (Plan("gpu", per_step=PER_STEP, seed=7, factor=3), {}),
    "gpu-loud": (Plan("gpu", per_step=PER_STEP, seed=7, factor=1000), {}),
    # 2x on one gpu of two, 16 rollouts a step: found by the localized check with the kv
    # positions but for the gpu's few longest (a sliver of its tokens): the gpu's, not a code
    # path
    "gpu-faint": (Plan("gpu", per_step=16, seed=7, factor=2), {}),
    "spike-small": (Plan("spike", steps=6, per_step=PER_STEP, seed=6, factor=3), {}),
    "spike-loud": (Plan("spike", steps=6, per_step=PER_STEP, seed=6, factor=1000), {}),
    "path-small": (Plan("path", per_step=PER_STEP, seed=4, factor=30), {}),
    "path-kv": (Plan("path", per_step=PER_STEP, seed=20, factor=10), {}),
    "path-loud": (Plan("path", per_step=PER_STEP, seed=4, factor=1000), {}),
    # 10x at KV >= 48 in every third step (the run 1.4x a healthy one): the later turns hold
    # the long KV positions, and only the set of faulty steps tells the path from the tool turns
    **{f"path-steps-{s}": (Plan("path", per_step=PER_STEP, seed=s, factor=10), {}) for s in (2, 4)},
    "policy-small": (Plan("policy", per_step=PER_STEP, seed=5, factor=2), {}),
    "policy-loud": (Plan("policy", per_step=PER_STEP, seed=5, factor=100), {}),
    "lagged-small": (Plan("policy", per_step=PER_STEP, seed=8, factor=1.1), {"weight_lag": "1"}),
    # twice the mismatch, estimated a little low (1.88x-1.999x, intervals 1.7-2.2): under a
    # point gate at 2x these were passed (diagnose/levels.py: the factors sit below the size)
    "gpu-2x": (Plan("gpu", per_step=PER_STEP, seed=1, factor=2), {}),
    "spike-2x": (Plan("spike", per_step=PER_STEP, seed=2, factor=2), {}),
    "tool-2x": (Plan("tool", per_step=PER_STEP, seed=3, factor=2), {}),
    # healthy runs twice as large (tighter intervals): the lower point gates raise no alarm
    **{f"healthy-64-{s}": (Plan("clean", per_step=64, seed=s), {}) for s in (3, 4, 5)},
    # a weight_version column: a third of the rollouts one version behind, their mismatch
    # doubled (faint) or the same as the current ones' (even: a lag that costs nothing)
    "stale-faint": (Plan("stale", per_step=16, seed=7, factor=2), {}),
    "stale-even": (Plan("stale", per_step=PER_STEP, seed=9, factor=1), {}),
    "template-small": (Plan("template", per_step=PER_STEP, seed=11, factor=3), {}),
    "template-loud": (Plan("template", per_step=PER_STEP, seed=11, factor=1000), {}),
    "template-faint": (Plan("template", per_step=PER_STEP, seed=2, factor=3), {}),
    "tool-small": (Plan("tool", per_step=PER_STEP, seed=11, factor=3), {}),
    "tool-mid": (Plan("tool", per_step=PER_STEP, seed=7, factor=10), {}),
    "tool-seen": (Plan("tool", per_step=PER_STEP, seed=1, factor=3), {}),
    "tool-loud": (Plan("tool", per_step=PER_STEP, seed=12), {}),
    # the 0.3% of tokens sampled at p < 1e-3 scored 2x (1.6x the healthy run overall) or 20x
    # less likely by the trainer
    "lowprob-small": (Plan("lowprob", per_step=PER_STEP, seed=13, factor=2), {}),
    "lowprob-loud": (Plan("lowprob", per_step=PER_STEP, seed=13, factor=20), {}),
    # the turns after a tool response sample flatter distributions (more unlikely tokens, each
    # no worse than a first turn's at its probability): the amplification of the study
    "toolmix": (Plan("toolmix", per_step=PER_STEP, seed=21, factor=16), {}),
}
ALARM = ("warn", "fail")
VERSIONED = ("stale-faint", "stale-even")
# the runs that only slow tests diagnose: written when those run
SLOW_ONLY = {"path-loud", "template-loud", "tool-mid", "tool-seen", "spike-2x", "tool-2x",
             "healthy-64-3", "healthy-64-5", "path-steps-4", "lowprob-loud"}  # fmt: skip


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("relative")
    for name, (plan, tags) in RUNS.items():
        if name in SLOW_ONLY and not SLOW:
            continue
        path = write(plan, root / f"{name}.parquet", weight_version=name in VERSIONED)
        mismatchctl.ingest([path], run=name, store=root / "store", tags=tags)
    return root / "store"


def _checks(store: Path, run: str, baseline: str | None = None) -> dict:
    return checks(store, run, baseline)  # diagnosed once: several tests read the same runs


def _alarms(checks: dict) -> dict[str, str]:
    return {n: c.verdict for n, c in checks.items() if c.verdict in ALARM}


@pytest.mark.parametrize("baseline", [None, "base"])
def test_healthy_run_raises_no_alarm(store: Path, baseline: str | None) -> None:
    checks = _checks(store, "healthy", baseline)
    assert _alarms(checks) == {}
    assert checks["cause"].evidence["key"] == "none"


@pytest.mark.parametrize(
    "run", ["healthy-64-4", slow_param("healthy-64-3"), slow_param("healthy-64-5")]
)
@pytest.mark.parametrize("baseline", [None, slow_param("base")])
def test_larger_healthy_runs_raise_no_alarm(store: Path, run: str, baseline: str | None) -> None:
    checks = _checks(store, run, baseline)
    assert _alarms(checks) == {}
    assert checks["cause"].evidence["key"] == "none"


@pytest.mark.parametrize(
    ("run", "cause", "check"),
    [
        ("gpu-2x", "hardware", "localized"),
        slow_param("spike-2x", "code_path", "spikes"),
        slow_param("tool-2x", "tool_turns", "tool_responses"),
    ],
)
@pytest.mark.parametrize("baseline", [None, slow_param("base")])
def test_twice_the_mismatch_estimated_a_little_low_is_named(
    store: Path, run: str, cause: str, check: str, baseline: str | None
) -> None:
    checks = _checks(store, run, baseline)
    assert checks[check].verdict == "warn"
    assert checks["cause"].evidence["key"] == cause


@pytest.mark.parametrize("baseline", [None, "base"])
def test_improvement_is_reported_as_such(store: Path, baseline: str | None) -> None:
    checks = _checks(store, "improved", baseline)
    assert _alarms(checks) == {}
    if baseline:
        assert checks["baseline"].verdict == "ok"
        assert "an improvement" in checks["baseline"].finding
        assert checks["baseline"].evidence["rate_ratio_ci"][1] < 1


@pytest.mark.parametrize("run", ["gpu-small", "gpu-loud"])
def test_one_gpu_is_named_as_hardware(store: Path, run: str) -> None:
    checks = _checks(store, run)
    assert checks["cause"].evidence["key"] == "hardware"
    assert "A100" in checks["cause"].finding
    assert "importance" not in (checks["cause"].next or "")
    if run == "gpu-loud":
        assert checks["hardware"].verdict == "fail"


@pytest.mark.parametrize("baseline", [None, slow_param("base")])
def test_a_faint_gpu_fault_is_the_hardware_not_a_code_path(
    store: Path, baseline: str | None
) -> None:
    checks = _checks(store, "gpu-faint", baseline)
    assert checks["hardware"].verdict == "warn"  # 2x over the other gpu's, interval 1.8-2.2
    local = checks["localized"]
    assert local.verdict == "warn"
    (run,) = local.evidence["runs"].values()
    first = run["code_path_findings"][0]
    assert first["where"]["gpu"] == "A100" and first["token_share"] > 0.45  # the gpu, nearly all
    assert "one gpu generation's tokens" in local.next
    assert checks["cause"].evidence["key"] == "hardware"
    assert "gpu generations" in checks["cause"].next
    assert "importance" not in checks["cause"].next


@pytest.mark.parametrize("run", ["spike-small", "spike-loud"])
def test_spikes_are_found_in_a_six_step_run(store: Path, run: str) -> None:
    checks = _checks(store, run)
    spikes = checks["spikes"]
    assert spikes.verdict == ("warn" if run == "spike-small" else "fail")
    (evidence,) = spikes.evidence["runs"].values()
    assert [int(s) for s in evidence["elevated_steps"]] == list(spike_steps(6))
    assert checks["cause"].evidence["key"] == "code_path"


@pytest.mark.parametrize("run", ["path-small", pytest.param("path-loud", marks=pytest.mark.slow)])
@pytest.mark.parametrize("baseline", [None, slow_param("base")])
def test_a_code_path_in_some_steps_is_named_not_the_tool_turns(
    store: Path, run: str, baseline: str | None
) -> None:
    checks = _checks(store, run, baseline)
    regimes = checks["regimes"]
    assert regimes.verdict in ALARM
    (evidence,) = regimes.evidence["runs"].values()
    assert {int(s) for s in evidence["elevated_steps"]} == set(PATH_STEPS)
    assert checks["cause"].evidence["key"] == "code_path"
    assert "importance sampling would only reweight" in checks["cause"].next
    tool = checks["tool_responses"]
    if tool.verdict in ALARM:  # the later turns hold the long KV positions: true, but
        assert "fix that path first" in tool.next and "sequence-level" not in tool.next
    if baseline:
        assert checks["baseline"].verdict in ALARM


@pytest.mark.parametrize("run", ["path-steps-2", slow_param("path-steps-4")])
@pytest.mark.parametrize("baseline", [None, slow_param("base")])
def test_a_path_fault_in_every_third_step_is_found_in_those_steps(
    store: Path, run: str, baseline: str | None
) -> None:
    checks = _checks(store, run, baseline)
    assert checks["cause"].evidence["key"] == "code_path"
    (local,) = checks["localized"].evidence["runs"].values()
    steps = [f["where"]["step"] for f in local["code_path_findings"] if "step" in f["where"]]
    assert steps, "a finding on the faulty steps"
    found = {int(v) for v in steps[0].split(",") if "-" not in v}
    assert len(found) >= 5 and found <= set(PATH_STEPS)


def test_a_fault_at_long_kv_positions_is_found_there(store: Path) -> None:
    """10x on the tokens at KV position >= 48 in a third of the steps: the run is 1.2x a healthy
    one overall, the steps do not split into regimes, the KV position localizes it."""
    checks = _checks(store, "path-kv")
    assert checks["regimes"].verdict == "ok"
    assert checks["localized"].verdict == "warn"
    (local,) = checks["localized"].evidence["runs"].values()
    top = local["code_path_findings"][0]["where"]
    assert top["kv_position"] == "32-127"
    assert checks["cause"].evidence["key"] == "code_path"


@pytest.mark.parametrize(
    "run",
    ["template-small", "template-faint", pytest.param("template-loud", marks=pytest.mark.slow)],
)
def test_a_rendering_fault_at_turn_starts_is_named_a_template_fault(store: Path, run: str) -> None:
    """3x on the first token after each tool response decaying with the distance (the run is
    about 1.2x a healthy one overall; ``template-faint``: a draw whose largest-|r| tokens crowd
    the starts only 1.3 times chance), and 1000x: the turn starts, not a code path nor the
    tool turns' sampling, and no correction is the fix."""
    checks = _checks(store, run)
    edges = checks["turn_edges"]
    assert edges.verdict == ("fail" if run == "template-loud" else "warn")
    assert edges.evidence["template"] and edges.evidence["decays"]
    assert edges.evidence["first_start"]["rate_ratio_ci"][0] < 1.25  # first turns untouched
    assert checks["cause"].evidence["key"] == "template"
    assert "rendering" in checks["cause"].finding and "token ids" in checks["cause"].next
    tool = checks["tool_responses"]
    if tool.verdict in ALARM:
        assert "turn_edges" in tool.next and "sequence-level" not in tool.next
    if checks["localized"].verdict in ALARM:
        assert "turn_edges" in checks["localized"].next


@pytest.mark.parametrize("run", ["tool-loud", "path-kv", "spike-loud", "healthy", "improved"])
def test_numerics_are_not_taken_for_a_template_fault(store: Path, run: str) -> None:
    """Later turns hotter as a whole (64x), a fault at long KV positions, spike steps: the
    turn starts are no hotter than the rest of their turns, or not by the count of large-|r|
    tokens."""
    checks = _checks(store, run)
    assert checks["turn_edges"].verdict == "ok"
    assert checks["cause"].evidence["key"] != "template"


def test_a_uniform_excess_without_a_lean_is_the_precision_against_a_baseline(store: Path) -> None:
    """The planted `policy` perturbs each token's logits independently: a uniform excess over
    the baseline whose responses do not lean, which is what a less exact numeric path gives
    (a physical policy mismatch leans whole responses: test_diagnose_policy.py). The advice
    says that a faint policy mismatch looks the same."""
    for run in ("policy-small", "policy-loud"):
        checks = _checks(store, run, "base")
        assert checks["baseline"].verdict in ALARM, run
        assert checks["baseline"].evidence["excess_shape"] == "uniform", run
        assert checks["policy_signs"].verdict == "ok", run
        assert checks["cause"].evidence["key"] == "precision", run
        assert "checkpoint versions" in checks["cause"].next
        assert "localized" not in _alarms(checks)


@pytest.mark.parametrize("run", ["lowprob-small", slow_param("lowprob-loud")])
def test_an_excess_in_the_rare_tokens_is_not_called_a_policy(store: Path, run: str) -> None:
    """Worse than the baseline, spread evenly over steps, gpus and turns, but the probability
    bins with enough tokens to test are at the baseline's rate: the excess sits in the rare
    tokens' bins (too small to test one by one), not in every token as a policy's would."""
    checks = _checks(store, run, "base")
    base = checks["baseline"]
    assert base.verdict in ALARM
    assert base.evidence["excess_shape"] == "concentrated"
    assert base.evidence["concentrated_in"] == "bin"
    assert "bin is not uniform" in base.finding and "too small to test" in base.finding
    assert checks["cause"].evidence["key"] == "precision"
    assert "unlikely" in checks["cause"].next and "weight" not in checks["cause"].next
    # and on its own, without the baseline: 0.3% of the tokens hold 40% (2x) or most (20x) of
    # the K3 mass
    alone = _checks(store, run)
    assert alone["low_probability"].verdict in ALARM
    assert alone["low_probability"].evidence["kl_share"] > 0.3
    assert alone["cause"].evidence["key"] == "precision"


def test_the_rare_tokens_bins_hold_the_excess_in_explain(store: Path) -> None:
    """explain's bin dimension: the tested bins at the baseline's rate and hold almost none of
    the excess; the other dimensions carry the overall ratio."""
    e = api.explain("lowprob-small", baseline="base", store=store).explanation
    dims = {u.dim: u for u in e.uniform}
    assert not dims["bin"].uniform and dims["bin"].excess_elsewhere
    assert dims["bin"].excess_share is not None and dims["bin"].excess_share < 0.1
    assert dims["bin"].rate_ratio == pytest.approx(1.0, abs=0.15)
    assert dims["gpu"].uniform and not dims["gpu"].excess_elsewhere


def test_tool_turns_sampling_more_unlikely_tokens_is_told_from_worse_tokens(store: Path) -> None:
    """Later turns 2.5x the first ones because they sample more low-probability tokens (the same
    noise per token): the check warns, finds them no worse at the same token probabilities and
    gives the study's advice. Later turns whose every token is worse (``tool``) keep their ratio
    at the same probabilities, and the advice does not blame the token mix."""
    checks = _checks(store, "toolmix")
    tool = checks["tool_responses"]
    assert tool.verdict == "warn"
    assert tool.evidence["later_first_ratio"] > 2
    assert tool.evidence["same_probs_ratio_ci"][0] < 1.25
    assert tool.evidence["same_probs_excess"] is False
    assert "at the same token probabilities" in tool.finding
    assert "sample more low-probability tokens" in tool.next
    assert checks["cause"].evidence["key"] == "tool_turns"
    loud = _checks(store, "tool-loud")["tool_responses"]
    assert loud.evidence["same_probs_excess"] is True
    assert loud.evidence["same_probs_ratio_ci"][0] > 5
    assert "sample more low-probability tokens" not in (loud.next or "")


@pytest.mark.parametrize(
    "run",
    ["tool-small", *(pytest.param(r, marks=pytest.mark.slow) for r in ("tool-mid", "tool-loud"))],
)
@pytest.mark.parametrize("baseline", [None, slow_param("base")])
def test_worse_tool_turns_are_not_called_a_code_path(
    store: Path, run: str, baseline: str | None
) -> None:
    """Every token after a tool response 3x, 10x or 64x worse: the long KV positions live in
    the later turns, so localize finds parts by position (`kv_position 32-127`, `turn 1,
    length 32-127`); none is hotter than the later turns as a whole, so they are those turns
    seen by position, and the cause is the tool turns, with their advice."""
    checks = _checks(store, run, baseline)
    assert checks["cause"].evidence["key"] == "tool_turns", (run, baseline)
    tool = checks["tool_responses"]
    assert tool.verdict in ALARM and tool.evidence["same_probs_excess"] is True
    assert "fix that path first" not in tool.next
    local = checks["localized"]
    if local.verdict in ALARM:
        assert local.evidence["later_turns"] is True
        assert "no hotter than the later turns as a whole" in local.finding
        assert "not a code path" in local.next


def test_a_policy_mismatch_without_baseline_is_not_blamed_on_a_code_path(store: Path) -> None:
    for run in ("policy-small", "policy-loud"):
        cause = _checks(store, run)["cause"].evidence["key"]
        assert cause in ("none", "unexplained"), (run, cause)
    loud = _checks(store, "policy-loud")["cause"]
    assert loud.verdict == "warn" and "--baseline" in loud.next


@pytest.mark.parametrize("baseline", [None, slow_param("base")])
def test_faint_stale_weights_are_named(store: Path, baseline: str | None) -> None:
    """A third of the rollouts one version behind at twice the mismatch of the current ones
    (the run 1.3x a healthy one): named, with the weight-lag remedy."""
    checks = _checks(store, "stale-faint", baseline)
    stale = checks["staleness"]
    assert stale.verdict == "warn"
    assert 1.5 < stale.evidence["factor"] < 3 and stale.evidence["factor_ci"][0] > 1.2
    assert checks["cause"].evidence["key"] == "policy"
    assert "stale weights" in checks["cause"].finding


@pytest.mark.parametrize("baseline", [None, slow_param("base")])
def test_a_weight_lag_that_costs_nothing_raises_no_alarm(store: Path, baseline: str | None) -> None:
    checks = _checks(store, "stale-even", baseline)
    stale = checks["staleness"]
    assert stale.evidence["lags"][1]["sequences"] > 200  # a lag there is
    assert stale.verdict == "ok" and stale.evidence["factor_ci"][0] < 1.2
    assert _alarms(checks) == {}
    assert checks["cause"].evidence["key"] == "none"


def test_a_weight_lag_tag_names_stale_weights_however_small(store: Path) -> None:
    checks = _checks(store, "lagged-small")
    assert checks["staleness"].verdict in ALARM
    assert checks["cause"].evidence["key"] == "policy"
    assert "weight sync" in checks["cause"].next


def test_no_correction_is_advised_when_it_would_discard_the_signal(store: Path) -> None:
    checks = _checks(store, "policy-loud", "base")
    objective = checks["objective"]
    assert objective.evidence["correction_sane"] is False
    assert "discard the signal" in objective.finding
    assert "whatif" not in (objective.next or "")


def test_a_correction_for_a_fixable_cause_is_only_a_stopgap(store: Path) -> None:
    objective = _checks(store, "gpu-loud")["objective"]
    if objective.evidence["correction_sane"]:
        assert objective.finding.startswith("as a stopgap")
        assert (objective.next or "").startswith("fix the cause (hardware")


def test_baseline_cli_and_json(store: Path) -> None:
    from tests.helpers import cli

    ran = cli("diagnose", "policy-loud", "--baseline", "base", "--store", str(store), "--json", "-")
    assert ran.code == 3
    import json

    out = json.loads(ran.out)
    assert out["diagnosis"]["baseline"] == "base"
    names = [c["name"] for c in out["diagnosis"]["checks"]]
    assert {"baseline", "localized", "regimes", "cause", "objective"} <= set(names)
    bad = cli("diagnose", "policy-loud", "--baseline", "nope", "--store", str(store))
    assert bad.code == 1 and "`nope`" in bad.err and "Hint:" in bad.err


def _faulty_steps(run: Path) -> list[int]:
    """The steps whose vllm_kl is a decade above the run's quietest step, from the dump files
    with numpy (the faulty path runs in some steps only: sample_data/README.md)."""
    import pyarrow.parquet as pq

    levels = {}
    for path in sorted(run.glob("step_*.parquet")):
        t = pq.read_table(path).to_pydict()
        k3 = []
        sides = zip(t["rollout_log_probs"], t["old_log_probs"], t["response_mask"], strict=True)
        for lr, lt, m in sides:
            keep = np.array(m, bool)
            r = np.array(lt, np.float64)[keep] - np.array(lr, np.float64)[keep]
            k3.append(np.expm1(r) - r)
        levels[t["step"][0]] = float(np.concatenate(k3).mean())
    quiet = min(levels.values())
    return sorted(s for s, v in levels.items() if v > 10 * quiet)


def test_sample_faulty_attn_steps_are_found(tmp_path: Path) -> None:
    """sample_data/README.md: faulty-attn's faulty path runs in half of its steps."""
    runs = Path(__file__).parents[2] / "sample_data" / "runs"
    faulty = _faulty_steps(runs / "faulty-attn")
    assert 2 <= len(faulty) <= 6
    mismatchctl.ingest([runs / "faulty-attn"], run="faulty-attn", store=tmp_path / "s")
    checks = _checks(tmp_path / "s", "faulty-attn")
    (evidence,) = checks["regimes"].evidence["runs"].values()
    assert checks["regimes"].verdict == "fail"
    assert [int(s) for s in evidence["elevated_steps"]] == faulty
    (local,) = checks["localized"].evidence["runs"].values()
    assert checks["localized"].verdict == "fail"
    # the faulty path runs when few sequences are still decoding: long sequences, some steps
    found = [f["where"] for f in local["code_path_findings"]]
    assert any({"step", "length", "kv_position", "order"} & set(w) for w in found)
    assert checks["cause"].evidence["key"] == "code_path"


def test_explain_names_the_same_tokens_once(store: Path) -> None:
    """Where no sequence has a third turn, ``turn 1`` and ``turn_kind later`` are the same
    tokens: one finding named both ways, not two rows of the same numbers."""
    expl = api.explain("tool-small", store=store, bootstrap=False).explanation
    shares = [(f.tokens, f.mass_share) for f in expl.findings]
    assert len(shares) == len(set(shares))
    later = [f for f in expl.findings if {"turn_kind": "later"} in [f.where, *f.same_as]]
    assert len(later) == 1
    assert {"turn": "1"} in [later[0].where, *later[0].same_as]
    assert "(= turn" in later[0].sentence


@pytest.mark.slow
def test_the_later_turns_seen_by_position_are_one_finding(store: Path) -> None:
    """Every token after a tool response 3x worse: the KV positions the later turns fill are
    folded into the later turns' finding (``seen_as``), and the localized check says the hot
    part is among the turns (no code path) instead of that no part is hotter."""
    expl = api.explain("tool-seen", store=store, bootstrap=False).explanation
    (top,) = expl.findings
    assert {"turn_kind": "later"} in [top.where, *top.same_as]
    assert any("kv_position" in w for w in top.seen_as)
    checks = _checks(store, "tool-seen")
    local = checks["localized"]
    assert local.verdict == "ok" and "among the turns" in local.finding
    assert checks["cause"].evidence["key"] == "tool_turns"
