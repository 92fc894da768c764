"""`whatif --preset verl-rollout-corr` against verl's own arithmetic.

verl is not installable here without its GPU stack, so the reference below is transcribed, in
torch float64, from verl/trainer/ppo/rollout_corr_helper.py (verl 0.8.0.dev, commit b178a3cd,
2026-01-29): ``compute_rollout_correction_weights``, ``compute_is_metrics`` and the masked
fractions of ``compute_rollout_rejection_mask``, on a padded batch with a response mask, as verl
receives it (verl's ``.float().mean()`` of sequence fractions is ``.double()`` here: the preset
reports them in float64). The preset sees the same tokens as the store holds them (model tokens only)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

import mismatchctl
from mismatchctl.stats.preset_verl import VerlRolloutCorr
from mismatchctl.stats.presets import merge, parse_sets
from tests.helpers import cli

SAFETY_BOUND = 20.0


def masked_mean(values, mask, axis=None):  # verl.utils.torch_functional.masked_mean
    s = (values * mask).sum() if axis is None else (values * mask).sum(axis)
    n = mask.sum() if axis is None else mask.sum(axis)
    return s / (n + 1e-8)


def masked_sum(values, mask, axis=None):
    return (values * mask).sum(axis)


def verl_is_metrics(log_ratio, mask, rollout_is, threshold):
    """compute_rollout_correction_weights + compute_is_metrics, transcribed."""
    if rollout_is == "token":
        for_metrics = log_ratio
        weights = torch.exp(torch.clamp(log_ratio, -SAFETY_BOUND, SAFETY_BOUND))
    else:
        for_metrics = masked_sum(log_ratio, mask, axis=-1).unsqueeze(-1)
        weights = torch.exp(torch.clamp(for_metrics, -SAFETY_BOUND, SAFETY_BOUND)).expand_as(
            log_ratio
        )
    weights = weights * mask
    m = {}
    lower = 1.0 / threshold
    log_upper, log_lower = math.log(threshold), math.log(lower)
    if rollout_is == "sequence":
        m["rollout_is_max"] = torch.exp(torch.clamp(for_metrics.max(), max=SAFETY_BOUND)).item()
        m["rollout_is_min"] = torch.exp(for_metrics.min()).item()
        m["rollout_is_mean"] = masked_mean(weights, mask).item()
        m["rollout_is_ratio_fraction_high"] = (for_metrics > log_upper).double().mean().item()
        m["rollout_is_ratio_fraction_low"] = (for_metrics < log_lower).double().mean().item()
    else:
        m["rollout_is_mean"] = masked_mean(weights, mask).item()
        m["rollout_is_ratio_fraction_high"] = masked_mean(
            (weights > threshold).double(), mask
        ).item()
        m["rollout_is_ratio_fraction_low"] = masked_mean((weights < lower).double(), mask).item()
        b = mask.bool()
        m["rollout_is_max"] = weights.masked_fill(~b, float("-inf")).max().item()
        m["rollout_is_min"] = weights.masked_fill(~b, float("inf")).min().item()
    clamped = weights.clamp(min=lower, max=threshold)
    mean_c = masked_mean(clamped, mask)
    var = masked_mean(clamped.square(), mask) - mean_c.square()
    m["rollout_is_std"] = torch.sqrt(torch.clamp(var, min=0.0)).item()
    normalized = clamped / (mean_c + 1e-8)
    m["rollout_is_eff_sample_size"] = 1.0 / masked_mean(normalized.square(), mask).item()
    seq_mean = masked_mean(weights, mask, axis=-1)
    m["rollout_is_seq_mean"] = seq_mean.mean().item()
    m["rollout_is_seq_std"] = seq_mean.std().item()
    m["rollout_is_seq_max"] = seq_mean.max().item()
    m["rollout_is_seq_min"] = seq_mean.min().item()
    m["rollout_is_seq_max_deviation"] = (seq_mean - 1.0).abs().max().item()
    m["rollout_is_seq_fraction_high"] = (seq_mean > threshold).double().mean().item()
    m["rollout_is_seq_fraction_low"] = (seq_mean < lower).double().mean().item()
    return m


def verl_rs_fractions(log_ratio, mask, options, thresholds):
    """The masked fractions of compute_rollout_rejection_mask, transcribed."""
    safe = torch.clamp(log_ratio, -SAFETY_BOUND, SAFETY_BOUND)
    k = {"k1": -safe, "k2": 0.5 * safe**2, "k3": torch.exp(safe) - 1.0 - safe}
    b = mask.bool()
    combined = torch.ones_like(mask)
    m = {}
    for option, spec in zip(options, thresholds, strict=True):
        values = k[option[-2:]]
        if option.endswith("k1"):
            lo, _, hi = spec.partition("_")
            lower_log, upper_log = math.log(float(lo)), math.log(float(hi))
        else:
            upper = float(spec)
        if option.startswith("token"):
            stat = values
        elif option.startswith("seq_sum"):
            stat = masked_sum(values, mask, axis=-1).unsqueeze(-1).expand_as(mask)
        elif option.startswith("seq_mean"):
            stat = masked_mean(values, mask, axis=-1).unsqueeze(-1).expand_as(mask)
        else:
            mx = values.masked_fill(~b, float("-inf")).max(dim=-1).values
            stat = mx.unsqueeze(-1).expand_as(mask)
        is_k1 = option.endswith("k1")
        keep = (stat >= lower_log) & (stat <= upper_log) if is_k1 else stat <= upper
        keep_f = keep.double()
        combined = combined * keep_f
        seq_keep = (~((~keep) & b)).all(dim=-1)
        m[f"rollout_rs_{option}_masked_fraction"] = masked_mean(1 - keep_f, mask).item()
        m[f"rollout_rs_{option}_seq_masked_fraction"] = (1.0 - seq_keep.double()).mean().item()
    m["rollout_rs_masked_fraction"] = masked_mean(1 - combined, mask).item()
    final_keep = (combined > 0.5) & b
    m["rollout_rs_seq_masked_fraction"] = (~final_keep & b).any(dim=-1).double().mean().item()
    return m


def _batch(seed: int, n_seq: int = 30) -> tuple[list[np.ndarray], list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    lrs, lts = [], []
    for _ in range(n_seq):
        n = int(rng.integers(2, 40))
        lr = -rng.exponential(1.0, n)
        scale = rng.choice([0.01, 0.1, 0.5])
        lrs.append(lr)
        lts.append(lr + rng.normal(0.0, scale, n))
    return lrs, lts


def _padded(lrs, lts):
    width = max(len(x) for x in lrs)
    old = torch.zeros(len(lrs), width, dtype=torch.float64)
    rollout = torch.zeros_like(old)
    mask = torch.zeros_like(old)
    for i, (a, t) in enumerate(zip(lrs, lts, strict=True)):
        rollout[i, : len(a)], old[i, : len(t)], mask[i, : len(a)] = (
            torch.tensor(a), torch.tensor(t), 1.0,
        )  # fmt: skip
    return old - rollout, mask


def _preset(lrs, lts, config, parts: int = 1) -> dict:
    preset = VerlRolloutCorr()
    preset.check(config)
    names = preset.fields(config)
    cuts = np.array_split(np.arange(len(lrs)), parts)
    state = None
    for cut in cuts:  # parts of whole sequences, merged
        lr = np.concatenate([lrs[i] for i in cut])
        lt = np.concatenate([lts[i] for i in cut])
        seq = np.repeat(cut, [len(lrs[i]) for i in cut])
        s = preset.compute(lr, lt, seq, np.zeros(len(lr), np.int64), 1, config)[0]
        state = s if state is None else merge(state, s, names)
    return preset.finalize(state, config)


def _config(**kw) -> dict:
    return parse_sets(VerlRolloutCorr(), [f"{k}={v}" for k, v in kw.items()])


def _assert_close(got: dict, want: dict) -> None:
    for key, value in want.items():
        assert got[f"rollout_corr/{key}"] == pytest.approx(value, rel=1e-9, abs=1e-12), key


@pytest.mark.parametrize("rollout_is", ["token", "sequence"])
@pytest.mark.parametrize("threshold", [1.2, 2.0, 5.0])  # a sweep of rollout_is_threshold
def test_is_metrics_equal_verl(rollout_is: str, threshold: float) -> None:
    lrs, lts = _batch(int(threshold * 10))
    log_ratio, mask = _padded(lrs, lts)
    want = verl_is_metrics(log_ratio, mask, rollout_is, threshold)
    got = _preset(lrs, lts, _config(rollout_is=rollout_is, rollout_is_threshold=threshold), 3)
    # verl's std is sqrt(E[w^2] - E[w]^2) in one pass: its own rounding is ~1e-16 / var
    std = want.pop("rollout_is_std")
    _assert_close(got, want)
    assert got["rollout_corr/rollout_is_std"] == pytest.approx(std, rel=1e-7)


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
def test_rejection_fractions_equal_verl(options: list[str], thresholds: list[str]) -> None:
    lrs, lts = _batch(7)
    log_ratio, mask = _padded(lrs, lts)
    want = verl_rs_fractions(log_ratio, mask, options, thresholds)
    config = _config(rollout_rs=",".join(options), rollout_rs_threshold=",".join(thresholds))
    got = _preset(lrs, lts, config, 2)
    _assert_close(got, want)
    assert 0 < got["rollout_corr/rollout_rs_masked_fraction"] < 1  # the thresholds bite


@pytest.mark.parametrize("upper", [1.001, 1.01, 1.1])  # a sweep of the Geo-RS band
def test_geo_rs_sweep_masks_fewer_sequences_as_the_band_widens(upper: float) -> None:
    lrs, lts = _batch(11)
    log_ratio, mask = _padded(lrs, lts)
    spec = f"{1 / upper}_{upper}"
    want = verl_rs_fractions(log_ratio, mask, ["seq_mean_k1"], [spec])
    got = _preset(lrs, lts, _config(rollout_rs="seq_mean_k1", rollout_rs_threshold=spec))
    _assert_close(got, want)


def test_one_number_k1_threshold_is_its_reciprocal_band() -> None:
    lrs, lts = _batch(3)
    a = _preset(lrs, lts, _config(rollout_rs="token_k1", rollout_rs_threshold=1.5))
    b = _preset(lrs, lts, _config(rollout_rs="token_k1", rollout_rs_threshold=f"{1 / 1.5}_1.5"))
    assert a == b


def test_applied_weights_and_common_numbers() -> None:
    """Applied weight = truncated IS weight x keep mask; whatif's ESS of those weights."""
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


@pytest.mark.parametrize(
    ("sets", "found"),
    [
        ([], "neither rollout_is nor rollout_rs is set"),
        (["rollout_is=tokens"], "rollout_is `tokens`: null, token or sequence"),
        (["rollout_rs=seq_mean_k4", "rollout_rs_threshold=2"], "rollout_rs `seq_mean_k4`"),
        (["rollout_rs=token_k3"], "rollout_rs_threshold must be provided"),
        (["rollout_rs=token_k3", "rollout_rs_threshold=0.1_2"], "one upper bound"),
        (["rolout_is=token"], "has no key `rolout_is`"),
    ],
)
def test_bad_configs_are_refused(store: Path, tmp_path: Path, sets: list, found: str) -> None:
    args = [a for s in sets for a in ("--set", s)]
    ran = cli("whatif", "x", "--preset", "verl-rollout-corr", *args, "-q")
    assert ran.code == 1 and found in ran.err and "Hint:" in ran.err, ran.err


def test_cli_per_step_groups_equal_verl_per_batch(store: Path, tmp_path: Path) -> None:
    rows, batches = [], {}
    for step in range(3):
        lrs, lts = _batch(20 + step, n_seq=12)
        batches[step] = (lrs, lts)
        for i, (a, t) in enumerate(zip(lrs, lts, strict=True)):
            rows.append(dict(step=step, uid=f"{step}-{i}", rollout_log_probs=a.tolist(),
                             old_log_probs=np.minimum(t, 0.0).tolist()))  # fmt: skip
            lts[i] = np.minimum(t, 0.0)
    pq.write_table(pa.table({k: [r[k] for r in rows] for k in rows[0]}), tmp_path / "d.parquet")
    mismatchctl.ingest([tmp_path / "d.parquet"], run="v", store=store)
    sets = ["rollout_is=sequence", "rollout_rs=seq_mean_k3", "rollout_rs_threshold=0.01"]
    ran = cli("whatif", "v", "--preset", "verl-rollout-corr",
              *[a for s in sets for a in ("--set", s)], "--json", "-", "-q")  # fmt: skip
    assert ran.code == 0, ran.err
    doc = json.loads(ran.out)["whatif"]
    assert doc["preset"] == "verl-rollout-corr" and doc["source"].endswith("rollout_corr_helper.py")
    per_step = {
        g["by"]["step"]: g["metrics"] for g in doc["groups"] if set(g["by"]) == {"run", "step"}
    }
    for step, (lrs, lts) in batches.items():
        log_ratio, mask = _padded(lrs, lts)
        want = verl_is_metrics(log_ratio, mask, "sequence", 2.0)
        want.update(verl_rs_fractions(log_ratio, mask, ["seq_mean_k3"], ["0.01"]))
        want.pop("rollout_is_std")
        _assert_close(per_step[step], want)


def test_list_presets_names_version_and_source(store: Path) -> None:
    ran = cli("whatif", "--list-presets", "--json", "-")
    assert ran.code == 0, ran.err
    listed = json.loads(ran.out)["presets"]
    verl = next(p for p in listed if p["preset"] == "verl-rollout-corr")
    assert "b178a3cd" in verl["framework"]
    assert verl["source"] == "verl/trainer/ppo/rollout_corr_helper.py"
    assert verl["defaults"]["rollout_is_threshold"] == 2.0
