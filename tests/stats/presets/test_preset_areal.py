"""`whatif --preset areal-rejection` against AReaL's arithmetic, transcribed in torch from
areal/utils/functional/functional.py (inclusionAI/AReaL commit 4aef98d8, 2026-05-21):
``apply_rejection_sampling`` on a 2D padded batch (``KLEstimator._compute_approx_kl`` of
areal/utils/data.py for the KL metrics), and the statistics ``ppo_actor_loss_fn`` and
areal/trainer/ppo/actor.py log of its result (``stats_tracker``'s avg/min/max over the
``unclipped_behave_tokens`` mask). AReaL computes in float32 and the preset in float64, so values
agree to 1e-5; counts agree exactly."""

from __future__ import annotations

import itertools
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from mismatchctl.stats.presets.areal import ArealRejection
from mismatchctl.stats.presets.base import parse_sets
from tests.stats.presets.preset_data import (
    exp_batch,
    ingest_steps,
    nonpositive,
    padded,
    run_preset,
    whatif_per_step,
)


def approx_kl(log_probs, log_probs_base, kl_estimator):  # KLEstimator, apply_clamp=False
    log_ratio = log_probs.float() - log_probs_base.float()
    if kl_estimator == "k2":
        log_ratio = log_ratio**2 / 2.0
    if kl_estimator == "k3":
        log_ratio = -log_ratio
        log_ratio = log_ratio.exp() - 1 - log_ratio
    return log_ratio


def check_bounds(metric, c):
    if c.lower is not None:
        return (metric >= c.lower) & (metric <= c.upper)
    return metric <= c.upper


def areal_reference(proximal, old, loss_mask, c):
    """apply_rejection_sampling, 2D padded path: (loss mask, behave_imp_weight, fraction)."""
    log_ratio = proximal.float() - old.float()
    log_ratio = torch.where(torch.isfinite(log_ratio), log_ratio, 0.0)
    if c.metric == "ratio":
        metric = torch.exp(log_ratio)
    else:
        metric = approx_kl(proximal, old, c.metric.replace("kl_", ""))
    weight = torch.exp(log_ratio)
    original = weight
    lower = c.lower if c.lower is not None else 0.0
    if c.level == "sequence":
        use_log = c.metric == "ratio"
        values = log_ratio if use_log else metric
        masked = torch.where(loss_mask.bool(), values, 0.0)
        count = loss_mask.sum(dim=-1, keepdim=True).clamp(min=1)
        if use_log:
            weight = torch.exp(masked.sum(dim=-1, keepdim=True) / count).expand_as(log_ratio)
            original = weight
        if c.agg == "sum":
            agg = masked.sum(dim=-1, keepdim=True)
        elif c.agg == "mean":
            agg = masked.sum(dim=-1, keepdim=True) / count
        else:
            agg = values.masked_fill(~loss_mask.bool(), float("-inf")).max(dim=-1, keepdim=True)[0]
        seq_metric = torch.exp(agg) if use_log else agg
        inside = check_bounds(seq_metric, c).expand_as(loss_mask)
        if c.action == "clamp":
            weight = torch.where(~inside, weight.clamp(min=lower, max=c.upper), weight)
    elif c.action == "mask":
        inside = check_bounds(metric, c)
    else:
        weight = weight.clamp(min=lower, max=c.upper)
    if c.action == "mask":
        candidates = loss_mask.bool()
        updated = (candidates & inside).to(loss_mask.dtype)
        fraction = (candidates & ~inside).sum().item() / max(candidates.sum().item(), 1)
    else:
        updated = loss_mask
        changed = (loss_mask.bool() & (original != weight)).sum().item()
        fraction = changed / max(loss_mask.bool().sum().item(), 1)
    weight = torch.where(updated.bool(), weight, 0.0)
    return updated, weight, fraction


def areal_metrics(proximal, old, loss_mask, c):
    """The logged statistics: rs_filtered_fraction, behave_imp_weight and behave_approx_kl."""
    updated, weight, fraction = areal_reference(proximal, old, loss_mask, c)
    kl = proximal - old
    behave = (weight > 0).logical_and(updated.bool())
    out = {"rs_filtered_fraction": fraction, "unclipped_behave_tokens": int(behave.sum())}
    for name, v in (("behave_imp_weight", weight), ("behave_approx_kl", kl)):
        out[f"{name}/avg"] = (torch.where(behave, v, 0.0).sum() / behave.sum()).item()
        out[f"{name}/min"] = torch.where(behave, v, float("inf")).min().item()
        out[f"{name}/max"] = torch.where(behave, v, -float("inf")).max().item()
    return out, weight, updated


def _batch(seed, n_seq=24):
    return exp_batch(seed, n_seq, [0.01, 0.1, 0.5, 1.5])


def _preset(lrs, lts, config, parts=3):
    return run_preset(ArealRejection(), lrs, lts, config, parts)


def _run(sets, seed):
    config = parse_sets(ArealRejection(), sets)
    lrs, lts = _batch(seed)
    got = _preset(lrs, lts, config)
    want, weight, updated = areal_metrics(*padded(lrs, lts), SimpleNamespace(**config))
    return got, want, weight, updated, padded(lrs, lts)[2]


def _assert_close(got, want):
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key


BOUNDS = {"ratio": ("2", "0.5"), "kl_k1": ("0.3", "-0.3"), "kl_k2": ("0.05", None),
          "kl_k3": ("0.05", None)}  # fmt: skip
GRAMMAR = [
    (level, metric, agg)
    for level, metric, agg in itertools.product(
        ("token", "sequence"), BOUNDS, ("sum", "mean", "max")
    )
    if level == "sequence" or agg == "mean"
]


@pytest.mark.parametrize(("level", "metric", "agg"), GRAMMAR)
def test_mask_grammar_equals_areal(level: str, metric: str, agg: str) -> None:
    upper, lower = BOUNDS[metric]
    sets = [f"level={level}", f"metric={metric}", f"agg={agg}", f"upper={upper}"]
    if lower is not None:
        sets.append(f"lower={lower}")
    got, want, weight, updated, mask = _run(sets, seed=len(level) + len(metric) + len(agg))
    _assert_close(got, want)
    assert 0 < got["rs_filtered_fraction"] < 1
    w = weight[mask > 0].numpy()
    assert got["weight_mean"] == pytest.approx(w.mean(), rel=1e-5)
    assert got["ess"] == pytest.approx(w.sum() ** 2 / (len(w) * (w**2).sum()), rel=1e-5)
    dropped = (updated[mask > 0] == 0).numpy().mean()
    assert got["token_fraction"] == pytest.approx(dropped, abs=1e-15)


@pytest.mark.parametrize(("level", "agg"), [("token", "mean"), ("sequence", "sum"),
                                            ("sequence", "mean"), ("sequence", "max")])  # fmt: skip
@pytest.mark.parametrize("lower", [None, "0.5"])
def test_clamp_equals_areal(level: str, agg: str, lower: str | None) -> None:
    sets = ["action=clamp", f"level={level}", f"agg={agg}", "upper=1.5"]
    if lower is not None:
        sets.append(f"lower={lower}")
    got, want, weight, *_ = _run(sets, seed=3)
    _assert_close(got, want)
    assert got["token_fraction"] == 0.0 and got["rs_filtered_fraction"] > 0
    assert got["weight_max"] == pytest.approx(weight.max().item(), rel=1e-5)


@pytest.mark.parametrize("upper", [1.2, 2.0, 5.0, 20.0])  # a sweep of the token ratio bound
def test_upper_sweep_filters_fewer_tokens_as_it_rises(upper: float) -> None:
    got, want, *_ = _run([f"upper={upper}"], seed=9)
    _assert_close(got, want)
    higher, *_ = _run([f"upper={upper * 2}"], seed=9)
    assert higher["rs_filtered_fraction"] <= got["rs_filtered_fraction"]
    assert got["rs_filtered_fraction"] == got["token_fraction"]


def test_sequence_ratio_weights_are_the_geometric_mean() -> None:
    lrs = [np.array([-1.0, -1.0]), np.array([-2.0])]
    lts = [np.array([-0.5, -1.5]), np.array([-1.0])]  # r = (0.5, -0.5) and (1.0)
    config = parse_sets(ArealRejection(), ["level=sequence", "upper=2"])
    got = _preset(lrs, lts, config, parts=1)
    assert got["behave_imp_weight/avg"] == pytest.approx(1.0)  # exp(mean r) of the kept one
    assert got["token_fraction"] == pytest.approx(1 / 3) and got["sequence_fraction"] == 0.5


def test_cli_per_step_groups_equal_areal_per_batch(store: Path, tmp_path: Path) -> None:
    batches = {step: nonpositive(_batch(60 + step, n_seq=10)) for step in range(3)}
    ingest_steps(store, tmp_path, "a", batches)
    sets = ["level=sequence", "metric=kl_k3", "agg=max", "upper=0.5"]
    doc, per_step = whatif_per_step("a", "areal-rejection", sets)
    assert doc["source"] == "areal/utils/functional/functional.py"
    config = SimpleNamespace(**parse_sets(ArealRejection(), sets))
    for step, (lrs, lts) in batches.items():
        want, *_ = areal_metrics(*padded(lrs, lts), config)
        _assert_close(per_step[step], want)
