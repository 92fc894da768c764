"""The cause ``precision`` (``analysis/diagnose/causes/precision.py``)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest

from mismatchctl.analysis.diagnose.causes import precision, routing, semantics, template, weigh
from mismatchctl.analysis.diagnose.causes.hypothesis import Support, Weighed
from mismatchctl.analysis.diagnose.check import Check
from mismatchctl.analysis.diagnose.checks import baseline
from mismatchctl.analysis.diagnose.context import BaselineView, Context
from mismatchctl.stats import routing_sums as R
from mismatchctl.stats.localize.result import Explanation
from tests.analysis.diagnose.stores import gpus, relative
from tests.helpers import slow_param


def test_the_same_excess_on_the_same_gpu_is_not_the_hardware(one_gpu_each_store: Path) -> None:
    """The same uniform excess (each token's logits perturbed on its own) on the baseline's gpu:
    a less exact path, not another gpu generation."""
    checks = gpus._against(one_gpu_each_store, "h20-3x", "base-h20")
    assert checks["cause"].evidence.cause == "precision"


def test_a_uniform_excess_without_a_lean_is_the_precision_against_a_baseline(
    relative_store: Path,
) -> None:
    """The planted `policy` perturbs each token's logits independently: a uniform excess over
    the baseline whose responses do not lean, which is what a less exact numeric path gives
    (a physical policy mismatch leans whole responses: causes/test_policy.py). The advice
    says that a faint policy mismatch looks the same."""
    for run in ("policy-small", "policy-loud"):
        checks = relative._checks(relative_store, run, "base")
        assert checks["baseline"].verdict in relative.ALARM, run
        assert checks["baseline"].evidence.excess_shape == "uniform", run
        assert checks["policy_signs"].verdict == "ok", run
        assert checks["cause"].evidence.cause == "precision", run
        assert "checkpoint versions" in checks["cause"].next
        assert "localized" not in relative._alarms(checks)


@pytest.mark.parametrize("run", ["lowprob-small", slow_param("lowprob-loud")])
def test_an_excess_in_the_rare_tokens_is_not_called_a_policy(
    relative_store: Path, run: str
) -> None:
    """Worse than the baseline, spread evenly over steps, gpus and turns, but the probability
    bins with enough tokens to test are at the baseline's rate: the excess sits in the rare
    tokens' bins (too small to test one by one), not in every token as a policy's would."""
    checks = relative._checks(relative_store, run, "base")
    base = checks["baseline"]
    assert base.verdict in relative.ALARM
    assert base.evidence.excess_shape == "concentrated"
    assert base.evidence.concentrated_in == "bin"
    assert "bin is not uniform" in base.finding and "too small to test" in base.finding
    assert checks["cause"].evidence.cause == "precision"
    assert "unlikely" in checks["cause"].next and "weight" not in checks["cause"].next
    # and on its own, without the baseline: 0.3% of the tokens hold 40% (2x) or most (20x) of
    # the K3 mass
    alone = relative._checks(relative_store, run)
    assert alone["low_probability"].verdict in relative.ALARM
    assert alone["low_probability"].evidence.kl_share > 0.3
    assert alone["cause"].evidence.cause == "precision"


def _weighed(cause: object, verdict: str, share: float) -> Weighed:
    support = Support(verdict=verdict, share=share, because="", checks=())
    return Weighed(cause, support, share)  # type: ignore[arg-type]


NO_CONTEXT = cast(Context, None)  # no relation below is peeled: the run is not read


def test_beside_a_part_the_precision_is_no_remainder() -> None:
    """moe-router-fp8 against h-moe-b: the flipped tokens explain 71% of the excess and the 29%
    they leave was the precision's share; a remainder is no measurement (the flips reach the
    other tokens through the keys and values), so the precision stands beside a part only
    outside it (the second pass). A cause of every token with a shape of its own, the
    semantics beside a template fault (combo-topp-template: 37%), is still named."""
    flips = _weighed(routing, "warn", 0.712)
    assert not weigh._second(NO_CONTEXT, flips, _weighed(precision, "warn", 0.288), 0.25 * 0.74)
    burst = _weighed(template, "fail", 0.635)
    assert weigh._second(NO_CONTEXT, burst, _weighed(semantics, "fail", 0.365), 0.25)
    assert not weigh._second(NO_CONTEXT, burst, _weighed(precision, "fail", 0.365), 0.25)
    lost = weigh._lost(NO_CONTEXT, _weighed(precision, "warn", 0.288), flips).lost
    assert lost.startswith("beside MoE routing flips it counts only outside that part"), lost


def _flips_context(before: float, base_before: float | None, replay: bool = False) -> Context:
    """A run's routing (the K3 rate of its tokens before any flip in their response) beside its
    baseline's, both on the same gpus (no gpu dimension)."""
    run = SimpleNamespace(metrics={R.VLLM_KL_BEFORE_FLIP: before}, replay=replay)
    theirs = None if base_before is None else {R.VLLM_KL_BEFORE_FLIP: base_before}
    view = BaselineView("h-moe-b", cast(Explanation, None), [], None, theirs)
    report = SimpleNamespace(routing={"run": run})
    return cast(Context, SimpleNamespace(report=report, baseline=view, cube=None, tables=None))


@pytest.mark.parametrize(
    ("before", "named"),
    [(5.78e-4, True), (1.86e-4, False), (1.56e-4, False), (6.5e-5, False)],
)
def test_the_precision_beside_routing_flips_is_read_where_no_flip_reaches(
    before: float, named: bool
) -> None:
    """Over a healthy MoE's tokens before any flip (7.3e-5): an fp8 router with an fp8 KV cache
    (7.9x) is a precision loss beside the flips; an fp8 router alone (2.1x, 2.5x in e5m2), which
    rounds every token's gate weights, and a healthy run (0.89x) are not."""
    found = precision.beside_flips(_flips_context(before, 7.305e-5))
    assert (found is not None) is named
    if found is not None:
        assert found.verdict == "fail" and found.ratio == pytest.approx(before / 7.305e-5)
        assert "before any routing flip" in found.because and found.checks == ("baseline",)


def test_no_precision_beside_flips_without_a_routed_baseline_or_with_replay() -> None:
    assert precision.beside_flips(_flips_context(5.78e-4, None)) is None
    assert precision.beside_flips(_flips_context(5.78e-4, 7.305e-5, replay=True)) is None


def _over_a_baseline(bin_mix: float, gpus: bool = False) -> Context:
    """A run 2.1x its baseline at the same token mix, uniform, whose token-probability mix alone
    moves the baseline's level (8.44e-5) by ``bin_mix``: h-wide-t06 (temperature 0.6) over
    h-wide-a (0.9) measured -4.89e-5 (-58%), pr-fp8kv over h-b +2%."""
    level = 8.44e-5
    rows = [
        baseline.Decomposition(dim="step", mix=-3.4e-8, rate=-1.1e-5, interaction=3.7e-8),
        baseline.Decomposition(dim="bin", mix=bin_mix * level, rate=9.2e-5, interaction=-5.5e-5),
    ]
    e = baseline.Evidence(
        baseline="h-wide-a", vllm_kl=7.32e-5, baseline_vllm_kl=level, rate_ratio=2.06,
        rate_ratio_ci=(1.66, 2.55), findings=[], uniform=["step", "turn"], decomposition=rows,
        notes=[], excess_shape="uniform",
    )  # fmt: skip
    found = Check("inference path", "baseline", "Against the baseline", "warn", "", e, "")
    return cast(Context, SimpleNamespace(result=lambda m: found if m is baseline else None,
                                         cube=None, tables=None, baseline=None,
                                         report=SimpleNamespace(routing={})))  # fmt: skip


@pytest.mark.parametrize(("bin_mix", "said"), [(-0.58, True), (0.60, True), (0.02, False)])
def test_a_baseline_sampled_from_another_distribution_is_said(bin_mix: float, said: bool) -> None:
    """A uniform excess over a baseline whose token mix is another (a lower temperature: K3
    grows as 1/T^2 on both sides alike) is told apart from a precision loss in the advice only:
    the shape is the same, and no dump says the temperature."""
    ctx = _over_a_baseline(bin_mix)
    assert precision.mix_shift(ctx) == pytest.approx(bin_mix)
    support = Support(verdict="warn", share=1.0, because="", checks=("baseline",),
                      variant=precision.SHAPES["uniform"])  # fmt: skip
    text = precision.advice(ctx, support)
    assert ("sampling temperature" in text) is said
    assert (f"{bin_mix:+.0%}" in text) is said
    assert text.startswith("the run is less exact than the baseline on every token")


@pytest.mark.parametrize("processor", [True, False])
def test_a_logit_processor_is_evidence_against_a_precision_loss(processor: bool) -> None:
    """A uniform excess over a baseline beside a logit processor on one side (the
    ``token_shift`` check alarmed: a repetition penalty of 1.02 on the 8192-token family, 8.6x
    its baseline) is the processor's: the precision is weighed against, as beside a temperature
    or a truncation."""
    over = _over_a_baseline(0.02)
    shift = Check("semantic", "token_shift", "", "fail" if processor else "ok", "", None, "")
    ctx = cast(Context, SimpleNamespace(
        result=lambda m: shift if m is precision.token_shift else over.result(m),
        cube=None, tables=None, baseline=None,
    ))  # fmt: skip
    found = precision.support(ctx)
    assert found is not None and found.verdict == "warn"
    assert any("token_shift" in a for a in found.against) is processor


def test_in_an_moe_the_advice_names_the_routers_precision() -> None:
    """A router whose logits are rounded is a lower-precision path of its own (the family's fp8
    router over its baseline is named precision first, its flips beside)."""
    dense = _over_a_baseline(0.02)
    support = Support("warn", None, "", ("baseline",))
    assert "routers' logits" not in precision.advice(dense, support)
    moe = cast(
        Context, SimpleNamespace(**{**vars(dense), "report": SimpleNamespace(routing={"r": 1})})
    )
    assert "routers' logits in lower precision" in precision.advice(moe, support)
