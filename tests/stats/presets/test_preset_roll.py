"""`whatif --preset roll-train-infer` against ROLL's arithmetic, transcribed in torch from
roll/utils/train_infer_corrections.py (alibaba/ROLL commit 8eb27cc2, 2026-08-19):
``_compute_all_granularity`` and ``compute_train_infer_correction`` with ``agg_loss``,
``masked_mean``, ``masked_sum`` of roll/utils/functionals.py and ``compute_segment_masked_mean`` of
roll/pipeline/agentic/utils.py, on a padded batch whose ``response_mask`` has gaps (tool tokens)
between the model turns, as ROLL's agentic pipeline receives it. The preset sees the model tokens
only, with their turn index."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

import mismatchctl
from mismatchctl.stats.presets.base import parse_sets
from mismatchctl.stats.presets.roll import RollTrainInfer
from tests.stats.presets.preset_data import (
    run_preset,
    whatif_per_step,
)

GAP = 2  # masked (tool) positions between two model turns


def masked_mean(tensor, mask, dim=None):
    if dim is not None:
        mask_sum = mask.sum(axis=dim)
        mean = (tensor * mask).sum(axis=dim) / (mask_sum + 1e-8)
        return torch.where(mask_sum > 0, mean, torch.zeros_like(mean))
    return (tensor * mask).sum() / (mask.sum() + 1e-8)


def masked_sum(tensor, mask, dim=None):
    if dim is not None:
        mask_sum = mask.sum(axis=dim)
        total = (tensor * mask).sum(axis=dim)
        return torch.where(mask_sum > 0, total, torch.zeros_like(total))
    return (tensor * mask).sum()


def agg_loss(loss_mat, loss_mask, mode, batch_num_tokens=None, global_valid_samples=None):
    if batch_num_tokens is None:
        batch_num_tokens = loss_mask.sum()
    if global_valid_samples is None:
        global_valid_samples = loss_mat.size(0)
    if mode == "token-mean":
        return loss_mat.sum() / batch_num_tokens
    seq_losses = masked_mean(loss_mat, loss_mask, dim=-1)
    valid = torch.any(loss_mask > 0, dim=-1).double()
    return (seq_losses * valid).sum() / (global_valid_samples + 1e-8)


def segment_masked_mean(tensor, mask):
    batch_size, seq_len = mask.shape
    result = torch.zeros_like(tensor)
    for b in range(batch_size):
        diff = torch.diff(mask[b], prepend=torch.tensor([0]))
        starts = torch.where(diff == 1)[0]
        ends = torch.where(diff == -1)[0]
        if mask[b][-1] == 1:
            ends = torch.cat([ends, torch.tensor([seq_len])])
        for start, end in zip(starts, ends, strict=True):
            idx = torch.arange(start, end)
            seg_mask, seg = mask[b][idx], tensor[b][idx]
            if seg_mask.sum() > 0:
                result[b, idx] = (seg * seg_mask).sum() / (seg_mask.sum() + 1e-8) * seg_mask
    return result


def granularities(old, infer, mask):
    log_ratio = old - infer
    diff = old.exp() - infer.exp()
    geo = masked_mean(log_ratio, mask, dim=-1).exp().unsqueeze(-1).expand_as(log_ratio)
    seq = masked_sum(log_ratio, mask, dim=-1).exp().unsqueeze(-1).expand_as(log_ratio)
    ratio = {"token": log_ratio.exp(), "geometric": geo, "sequence": seq,
             "segment": segment_masked_mean(log_ratio, mask).exp()}  # fmt: skip
    diffs = {
        "token": diff,
        "geometric": masked_mean(diff, mask, dim=-1).unsqueeze(-1).expand_as(diff),
        "sequence": masked_sum(diff, mask, dim=-1).unsqueeze(-1).expand_as(diff),
        "segment": segment_masked_mean(diff, mask),
    }
    return ratio, diffs


def roll_reference(c, mask, old, infer):
    """compute_train_infer_correction, transcribed: (is_weight, filter_mask, metrics)."""
    mask = mask.long()
    samples = max(float((mask.sum(dim=-1) > 0).sum()), 1.0)
    tokens = max(float(mask.sum()), 1.0)
    ratio, diff = granularities(old, infer, mask)
    m = {}
    for agg in ("token", "geometric", "sequence", "segment"):
        for kind, values in (("ratio", ratio), ("diff", diff)):
            m[f"actor/train_infer_{kind}_{agg}_mean@sum"] = agg_loss(
                values[agg], mask, "seq-mean-token-mean", global_valid_samples=samples
            ).item()
    if c.is_weight.enabled:
        w = ratio[c.is_weight.weight_type]
        ub = c.is_weight.upper_bound
        if ub is not None:
            clip = (w > ub).double()
            m["actor/is_weight_clipfrac@sum"] = agg_loss(clip, mask, "token-mean", tokens).item()
            w = w.clamp(min=0.0, max=ub)
    else:
        w = torch.ones_like(ratio["token"])
    keep = torch.ones_like(mask)
    for f in c.filters:
        if not f.enabled:
            continue
        agg = f.agg_type
        if f.ratio_enabled:
            passed = (ratio[agg] >= f.ratio_low).double() * (ratio[agg] <= f.ratio_high).double()
            name = f"actor/train_infer_{agg}_ratio_mask_mean@sum"
            m[name] = agg_loss(passed, mask, "token-mean", tokens).item()
            keep = keep * passed
        if f.diff_enabled:
            passed = (diff[agg] >= f.diff_low).double() * (diff[agg] <= f.diff_high).double()
            name = f"actor/train_infer_{agg}_diff_mask_mean@sum"
            m[name] = agg_loss(passed, mask, "token-mean", tokens).item()
            keep = keep * passed
    if c.filters:
        m["actor/train_infer_final_mask_mean"] = masked_mean(mask * keep.double(), mask).item()
    return w, keep, m


def _roll_config(config):
    f = SimpleNamespace(**{k[len("filters.0.") :]: v for k, v in config.items()
                           if k.startswith("filters.0.")})  # fmt: skip
    w = SimpleNamespace(**{k[len("is_weight.") :]: v for k, v in config.items()
                           if k.startswith("is_weight.")})  # fmt: skip
    return SimpleNamespace(is_weight=w, filters=[f] if f.enabled else [])


def _batch(seed, n_seq=20, turns=3, equal=False):
    """Sequences of 1..turns model turns: per sequence (rollout, trainer, turn index) arrays."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_seq):
        k = 1 if equal else int(rng.integers(1, turns + 1))
        sizes = [12] if equal else [int(rng.integers(1, 12)) for _ in range(k)]
        lr = -rng.exponential(1.0, sum(sizes))
        lt = np.minimum(lr + rng.normal(0, rng.choice([0.01, 0.1, 0.4]), len(lr)), 0.0)
        out.append((lr, lt, np.repeat(np.arange(k), sizes)))
    return out


def _rows(batch):
    """Per sequence ROLL's (response_mask, old, infer) lists: each turn's tokens, GAP masked
    positions after each turn but the last."""
    rows = []
    for lr, lt, turn in batch:
        mask, old, infer = [], [], []
        for t in range(turn.max() + 1):
            on, gap = turn == t, (GAP if t < turn.max() else 0)
            mask += [1] * int(on.sum()) + [0] * gap
            old += list(lt[on]) + [0.0] * gap
            infer += list(lr[on]) + [0.0] * gap
        rows.append((mask, old, infer))
    return rows


def _padded(batch):
    """ROLL's [B, T] tensors, zeros (masked) to the width."""
    rows = _rows(batch)
    width = max(len(m) for m, _, _ in rows)
    t = torch.zeros(3, len(rows), width, dtype=torch.float64)
    for i, row in enumerate(rows):
        for j, values in enumerate(row):
            t[j, i, : len(values)] = torch.tensor(values, dtype=torch.float64)
    return t[0].long(), t[1], t[2]


def _preset(batch, config, parts=3):
    lrs, lts, turns = (list(side) for side in zip(*batch, strict=True))
    return run_preset(RollTrainInfer(), lrs, lts, config, parts, turns=turns)


def _run(sets, seed, equal=False):
    config = parse_sets(RollTrainInfer(), sets)
    batch = _batch(seed, equal=equal)
    got = _preset(batch, config)
    mask, old, infer = _padded(batch)
    w, keep, want = roll_reference(_roll_config(config), mask, old, infer)
    return got, want, w, keep, mask


def _assert_close(got, want, only=None):
    for key, value in want.items():
        if only is None or key in only:
            assert got[key] == pytest.approx(value, rel=1e-10, abs=1e-12), key


def _seq_metrics(want):
    return [k for k in want if k.endswith("_mean@sum") and "mask" not in k] + [
        "actor/train_infer_final_mask_mean"
    ]


@pytest.mark.parametrize("weight_type", ["token", "segment", "geometric", "sequence"])
def test_granularity_metrics_equal_roll_on_multi_turn_batches(weight_type: str) -> None:
    sets = ["is_weight.enabled=true", f"is_weight.weight_type={weight_type}",
            "filters.0.enabled=true", f"filters.0.agg_type={weight_type}"]  # fmt: skip
    got, want, w, keep, mask = _run(sets, seed=len(weight_type))
    assert want["actor/train_infer_ratio_segment_mean@sum"] != pytest.approx(
        want["actor/train_infer_ratio_geometric_mean@sum"], rel=1e-6
    )  # the turns matter: segment and geometric differ
    _assert_close(got, want, only=_seq_metrics(want))
    applied = (w * keep)[mask > 0].numpy()
    assert got["weight_mean"] == pytest.approx(applied.mean(), rel=1e-10)
    assert got["ess"] == pytest.approx(applied.sum() ** 2 / (len(applied) * (applied**2).sum()))
    dropped = (keep[mask > 0] == 0).double().mean().item()
    assert got["token_fraction"] == pytest.approx(dropped, abs=1e-15)


@pytest.mark.parametrize("agg", ["token", "segment", "geometric", "sequence"])
@pytest.mark.parametrize("diff", [False, True])
def test_pass_rates_and_clipfrac_equal_roll_on_unpadded_batches(agg: str, diff: bool) -> None:
    # ROLL's token means sum over the padded tensor: equal lengths and one turn leave no padding
    sets = ["is_weight.enabled=true", f"is_weight.weight_type={agg}", "filters.0.enabled=true",
            f"filters.0.agg_type={agg}", f"filters.0.diff_enabled={str(diff).lower()}",
            "filters.0.diff_low=-0.02", "filters.0.diff_high=0.02"]  # fmt: skip
    got, want, *_ = _run(sets, seed=7, equal=True)
    _assert_close(got, want)
    assert set(want) <= set(got)


@pytest.mark.parametrize("high", [1.02, 1.05, 1.2, 1.5])  # a sweep of the ratio band
def test_ratio_band_sweep_keeps_more_tokens_as_it_widens(high: float) -> None:
    sets = [
        "filters.0.enabled=true",
        f"filters.0.ratio_high={high}",
        f"filters.0.ratio_low={1 / high}",
    ]
    got, want, *_ = _run(sets, seed=13)
    _assert_close(got, want, only=_seq_metrics(want))
    wider, *_ = _run([sets[0], f"filters.0.ratio_high={high * 1.3}",
                      f"filters.0.ratio_low={1 / high / 1.3}"], seed=13)  # fmt: skip
    assert wider["actor/train_infer_final_mask_mean"] >= got["actor/train_infer_final_mask_mean"]


def test_segment_is_the_turn() -> None:
    lr = np.array([-1.0, -1.0, -2.0, -2.0])
    lt = np.array([-0.5, -0.5, -2.5, -2.5])  # turn 0: r = 0.5, turn 1: r = -0.5
    config = parse_sets(RollTrainInfer(), [])
    args = (lr, lt, np.zeros(4, np.int64), np.zeros(4, np.int64), 1, config)
    turns = RollTrainInfer().compute(*args, turn=np.array([0, 0, 1, 1]))[0]
    whole = RollTrainInfer().compute(*args, turn=np.zeros(4, np.int64))[0]
    key = "actor/train_infer_ratio_segment_mean@sum"
    two = RollTrainInfer().finalize(turns, config)[key]
    assert two == pytest.approx((np.exp(0.5) + np.exp(-0.5)) / 2, rel=1e-7)
    assert RollTrainInfer().finalize(whole, config)[key] == pytest.approx(1.0, rel=1e-7)


def test_cli_reads_turns_and_per_step_groups_equal_roll(store: Path, tmp_path: Path) -> None:
    cols: dict[str, list] = {k: [] for k in ("step", "uid", "rollout_log_probs", "old_log_probs",
                                             "response_mask")}  # fmt: skip
    batches = {}
    for step in range(2):
        batches[step] = _batch(70 + step, n_seq=8)
        for i, (mask, old, infer) in enumerate(_rows(batches[step])):
            for key, value in zip(cols, (step, f"{step}-{i}", infer, old, mask), strict=True):
                cols[key].append(value)
    cols["response_mask"] = pa.array(cols["response_mask"], pa.list_(pa.int8()))
    pq.write_table(pa.table(cols), tmp_path / "d.parquet")
    mismatchctl.ingest([tmp_path / "d.parquet"], run="r", store=store)
    sets = ["is_weight.enabled=true", "is_weight.weight_type=segment", "filters.0.enabled=true",
            "filters.0.agg_type=segment"]  # fmt: skip
    doc, per_step = whatif_per_step("r", "roll-train-infer", sets)
    assert doc["source"] == "roll/utils/train_infer_corrections.py"
    config = _roll_config(parse_sets(RollTrainInfer(), sets))
    for step, batch in batches.items():
        *_, want = roll_reference(config, *_padded(batch))
        _assert_close(per_step[step], want, only=_seq_metrics(want))
