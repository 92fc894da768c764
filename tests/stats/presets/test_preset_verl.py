"""`whatif --preset verl-rollout-corr` against verl's own function on the same batch.

verl (0.9.1, the version the preset follows) is installed by the test command (README, .ci/run:
``pip install --no-deps verl==0.9.1``; its few import-time dependencies are in the ``dev``
extra). Each test builds a padded batch as verl's trainer holds it (float64 log-probabilities,
an int64 ``response_mask``) and calls verl's ``compute_rollout_correction_and_rejection_mask``
(verl/trainer/ppo/rollout_corr_helper.py), the function ``compute_rollout_correction_and_add_to_batch``
runs in the PPO trainer. The preset sees the same model tokens as the store holds them. Every
``rollout_corr/...`` number verl returns is required equal, except the per-criterion statistics
of ``compute_rs_metrics`` (``rollout_rs_<option>_mean``, ``_std``, ``_seq_*``...), which the preset
does not reproduce (only the masked fractions): the test names them, so a metric verl adds fails
the key check. The fractions verl takes with ``.float().mean()`` are float32 in verl, so fractions
are compared to 1e-7, as is verl's one-pass ``rollout_is_std`` (its own cancellation); the rest
to 1e-9.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch

from mismatchctl.stats.presets.base import parse_sets
from mismatchctl.stats.presets.verl import VerlRolloutCorr
from tests.stats.presets.preset_data import (
    ingest_steps,
    nonpositive,
    run_preset,
    whatif_per_step,
)

VERL = "verl is not installed: pip install --no-deps verl==0.9.1 (the test command does)"
RS_STATISTICS = re.compile(
    r"rollout_rs_.+_(mean|max|min|std|fraction_high|fraction_low|seq_mean|seq_std|seq_max"
    r"|seq_min|seq_max_deviation|seq_fraction_high|seq_fraction_low)$"
)  # compute_rs_metrics' per-criterion statistics: not reproduced


@pytest.fixture(scope="module")
def verl_corr():
    helper = pytest.importorskip("verl.trainer.ppo.rollout_corr_helper", reason=VERL)
    assert pytest.importorskip("verl").__version__ == "0.9.1"
    return helper.compute_rollout_correction_and_rejection_mask


def _batch(seed: int, n_seq: int = 30, tails: bool = False):
    rng = np.random.default_rng(seed)
    lrs, lts = [], []
    for i in range(n_seq):
        n = int(rng.integers(2, 40))
        lr = -rng.exponential(1.0, n)
        scale = rng.choice([0.01, 0.1, 0.5])
        lt = lr + rng.normal(0.0, scale, n)
        if tails and i % 7 == 0:  # beyond verl's exp(±20) safety bound
            lt[0] = lr[0] + rng.choice([-45.0, 30.0])
        lrs.append(lr)
        lts.append(lt)
    return lrs, lts


def _padded(lrs, lts, dtype=torch.float64, mask_dtype=torch.float64):
    """verl's layout: responses padded right, ``old_log_probs`` computed at every position (a
    finite value on the padding), ``rollout_log_probs`` padded with 0.0, a 0/1 mask."""
    width = max(len(x) for x in lrs)
    old = torch.full((len(lrs), width), -2.5, dtype=dtype)
    rollout = torch.zeros_like(old)
    mask = torch.zeros(old.shape, dtype=mask_dtype)
    for i, (a, t) in enumerate(zip(lrs, lts, strict=True)):
        rollout[i, : len(a)], old[i, : len(t)], mask[i, : len(a)] = (
            torch.tensor(a), torch.tensor(t), 1,
        )  # fmt: skip
    return old, rollout, mask


def _preset(lrs, lts, config, parts: int = 1) -> dict:
    return run_preset(VerlRolloutCorr(), lrs, lts, config, parts)


def _config(**kw) -> dict:
    return parse_sets(VerlRolloutCorr(), [f"{k}={v}" for k, v in kw.items()])


def _run_verl(verl_corr, lrs, lts, config, **dtypes):
    old, rollout, mask = _padded(lrs, lts, **dtypes)
    weights, kept, metrics = verl_corr(
        old_log_prob=old,
        rollout_log_prob=rollout,
        response_mask=mask,
        rollout_is=config["rollout_is"],
        rollout_is_threshold=config["rollout_is_threshold"],
        rollout_is_batch_normalize=config["rollout_is_batch_normalize"],
        rollout_rs=config["rollout_rs"],
        rollout_rs_threshold=config["rollout_rs_threshold"],
    )
    applied = kept.double() if weights is None else weights.batch["rollout_is_weights"] * kept
    return metrics, applied[mask.bool()].double().numpy()


def _assert_equal_verl(got: dict, want: dict, applied: np.ndarray) -> None:
    compared = {k: v for k, v in want.items() if not RS_STATISTICS.search(k)}
    assert set(compared) == {k for k in got if k.startswith("rollout_corr/")}
    for key, value in compared.items():
        name = key.removeprefix("rollout_corr/")
        # verl's one-pass std, and its fractions of sequences (float32): to 1e-7
        rel = 1e-7 if name == "rollout_is_std" or "fraction" in name else 1e-9
        assert got[key] == pytest.approx(value, rel=rel, abs=1e-12), key
    # whatif's common numbers are of the weights verl applies: IS weight x rejection mask
    assert got["weight_mean"] == pytest.approx(applied.mean(), rel=1e-9)
    assert got["weight_std"] == pytest.approx(applied.std(), rel=1e-7, abs=1e-12)
    assert got["weight_min"] == pytest.approx(applied.min(), rel=1e-9)
    assert got["weight_max"] == pytest.approx(applied.max(), rel=1e-9)
    ess = applied.sum() ** 2 / (len(applied) * (applied**2).sum())
    assert got["ess"] == pytest.approx(ess, rel=1e-9)
    assert got["token_fraction"] == pytest.approx(
        want.get("rollout_corr/rollout_rs_masked_fraction", 0.0), rel=1e-9, abs=1e-12
    )


@pytest.mark.parametrize("rollout_is", ["token", "sequence"])
@pytest.mark.parametrize(  # a sweep of rollout_is_threshold: TIS caps, then IcePop bands
    "threshold", ["1.2", "2.0", "5.0", "0.5_2.0", "0.8_1.25", "0.2_5"]
)
def test_is_metrics_equal_verl(verl_corr, rollout_is: str, threshold: str) -> None:
    lrs, lts = _batch(sum(map(ord, threshold)), tails=True)
    config = _config(rollout_is=rollout_is, rollout_is_threshold=threshold)
    want, applied = _run_verl(verl_corr, lrs, lts, config)
    got = _preset(lrs, lts, config, 3)
    _assert_equal_verl(got, want, applied)
    assert ("rollout_corr/rollout_is_oob_ratio" in got) == ("_" in threshold)


@pytest.mark.parametrize("rollout_is", ["token", "sequence"])
@pytest.mark.parametrize("threshold", ["1.5", "0.5_2.0"])
def test_batch_normalized_weights_equal_verl(verl_corr, rollout_is: str, threshold: str) -> None:
    lrs, lts = _batch(17)
    config = _config(
        rollout_is=rollout_is, rollout_is_threshold=threshold, rollout_is_batch_normalize="true"
    )
    want, applied = _run_verl(verl_corr, lrs, lts, config)
    got = _preset(lrs, lts, config, 2)
    _assert_equal_verl(got, want, applied)
    assert got["rollout_corr/rollout_is_batch_norm_factor"] != 1.0
    if rollout_is == "token":  # the token mean is 1 (for sequence, the mean over sequences)
        assert got["weight_mean"] == pytest.approx(1.0, rel=1e-9)


@pytest.mark.parametrize(
    ("options", "thresholds"),
    [
        (["token_k1"], ["0.8_1.25"]),
        (["token_k2"], ["0.005"]),
        (["token_k3"], ["0.005"]),
        (["seq_sum_k1"], ["0.5_2.0"]),
        (["seq_sum_k2"], ["0.05"]),
        (["seq_sum_k3"], ["0.05"]),
        (["seq_mean_k1"], ["0.99_1.01"]),
        (["seq_mean_k2"], ["0.002"]),
        (["seq_mean_k3"], ["0.002"]),
        (["seq_max_k2"], ["0.02"]),
        (["seq_max_k3"], ["0.02"]),
        (["seq_mean_k1", "token_k3"], ["0.99_1.01", "0.01"]),
    ],
)
def test_rejection_equal_verl(verl_corr, options: list[str], thresholds: list[str]) -> None:
    lrs, lts = _batch(7)
    config = _config(rollout_rs=",".join(options), rollout_rs_threshold=",".join(thresholds))
    want, applied = _run_verl(verl_corr, lrs, lts, config)
    got = _preset(lrs, lts, config, 2)
    _assert_equal_verl(got, want, applied)
    assert 0 < got["rollout_corr/rollout_rs_masked_fraction"] < 1  # the thresholds bite


@pytest.mark.parametrize("upper", [1.001, 1.01, 1.1])  # a sweep of the Geo-RS band
def test_geo_rs_with_sequence_tis_equal_verl(verl_corr, upper: float) -> None:
    lrs, lts = _batch(11, tails=True)
    config = _config(
        rollout_is="sequence",
        rollout_rs="seq_mean_k1",
        rollout_rs_threshold=f"{1 / upper}_{upper}",
    )
    want, applied = _run_verl(verl_corr, lrs, lts, config)
    got = _preset(lrs, lts, config, 3)
    _assert_equal_verl(got, want, applied)


@pytest.mark.parametrize(
    "sets",
    [
        dict(rollout_is="token", rollout_rs="seq_mean_k3,token_k1",
             rollout_rs_threshold="0.002,0.8_1.25"),
        dict(rollout_is="sequence", rollout_is_threshold="0.5_5", rollout_rs="seq_max_k2",
             rollout_rs_threshold="0.02"),
    ],
)  # fmt: skip
def test_trainer_dtypes_agree_to_float32_rounding(verl_corr, sets: dict) -> None:
    """In verl's trainer the log-probabilities are float32 and ``response_mask`` int64, so verl
    computes in float32 (and its ``masked_mean`` divides by float32(count + 1e-8) = count). The
    preset, on the same float32 values read as float64, agrees to float32 rounding (1e-4; the
    float64 tests above pin the arithmetic to 1e-9)."""
    lrs, lts = _batch(4)
    lrs = [a.astype(np.float32).astype(np.float64) for a in lrs]
    lts = [a.astype(np.float32).astype(np.float64) for a in lts]
    config = _config(**sets)
    want, _ = _run_verl(verl_corr, lrs, lts, config, dtype=torch.float32, mask_dtype=torch.int64)
    got = _preset(lrs, lts, config)
    compared = {k: v for k, v in want.items() if not RS_STATISTICS.search(k)}
    assert set(compared) == {k for k in got if k.startswith("rollout_corr/")}
    for key, value in compared.items():
        assert got[key] == pytest.approx(value, rel=1e-4, abs=1e-7), key


def test_one_number_k1_threshold_is_its_reciprocal_band() -> None:
    lrs, lts = _batch(3)
    a = _preset(lrs, lts, _config(rollout_rs="token_k1", rollout_rs_threshold=1.5))
    b = _preset(lrs, lts, _config(rollout_rs="token_k1", rollout_rs_threshold=f"{1 / 1.5}_1.5"))
    assert a == b


def test_applied_weights_and_common_numbers() -> None:
    """Applied weight = truncated IS weight x keep mask; whatif's ESS of those weights (numpy)."""
    lrs, lts = _batch(5)
    config = _config(rollout_is="token", rollout_rs="token_k3", rollout_rs_threshold=0.01)
    got = _preset(lrs, lts, config)
    r = np.concatenate(lts) - np.concatenate(lrs)
    w = np.minimum(np.exp(np.clip(r, -20, 20)), 2.0)
    keep = (np.exp(np.clip(r, -20, 20)) - 1 - np.clip(r, -20, 20)) <= 0.01
    applied = w * keep
    assert got["weight_mean"] == pytest.approx(applied.mean(), rel=1e-12)
    assert got["ess"] == pytest.approx(applied.sum() ** 2 / (len(r) * (applied**2).sum()))
    assert got["token_fraction"] == pytest.approx(1 - keep.mean())


def test_icepop_zeroes_the_weights_outside_the_band() -> None:
    lrs, lts = _batch(9)
    got = _preset(lrs, lts, _config(rollout_is="token", rollout_is_threshold="0.9_1.1"))
    rho = np.exp(np.concatenate(lts) - np.concatenate(lrs))
    outside = (rho < 0.9) | (rho > 1.1)
    assert got["rollout_corr/rollout_is_oob_ratio"] == pytest.approx(outside.mean())
    assert got["weight_mean"] == pytest.approx(np.where(outside, 0, rho).mean(), rel=1e-12)
    assert got["weight_min"] == 0.0 and got["token_fraction"] == 0.0  # IS, not a rejection


def test_cli_per_step_groups_equal_verl_per_batch(verl_corr, store: Path, tmp_path: Path) -> None:
    batches = {step: nonpositive(_batch(20 + step, n_seq=12)) for step in range(3)}
    ingest_steps(store, tmp_path, "v", batches)
    sets = ["rollout_is=sequence", "rollout_rs=seq_mean_k3", "rollout_rs_threshold=0.01"]
    doc, per_step = whatif_per_step("v", "verl-rollout-corr", sets)
    assert doc["preset"] == "verl-rollout-corr" and doc["source"].endswith("rollout_corr_helper.py")
    config = _config(rollout_is="sequence", rollout_rs="seq_mean_k3", rollout_rs_threshold=0.01)
    for step, (lrs, lts) in batches.items():
        want, applied = _run_verl(verl_corr, lrs, lts, config)
        _assert_equal_verl(per_step[step], want, applied)
