"""`whatif --preset slime-opsm` against slime's arithmetic, transcribed in torch from
``compute_opsm_mask`` in slime/utils/ppo_utils.py (THUDM/slime commit 624b824a, 2026-08-21; the
same function is miles/backends/training_utils/loss_hub/math_utils.py at radixark/miles commit
31f1ca96) and the per-rollout-mean reduction of its ``opsm_clipfrac``
(``reduce_train_step_metrics`` in slime/observability/train_metric_utils.py: summed over
micro-batches, divided by the step's number of samples). slime receives per-sample lists:
``full_old_log_probs`` (the rollout's, with ``--use-rollout-logprobs``), ``full_log_probs`` (the
trainer's), per-token ``advantages`` (GRPO: the sequence's on every token) and ``loss_masks``."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from mismatchctl.stats.presets.base import parse_sets
from mismatchctl.stats.presets.opsm import SlimeOpsm
from tests.stats.presets.preset_data import (
    exp_batch,
    ingest_steps,
    nonpositive,
    run_preset,
    whatif_per_step,
)


def compute_opsm_mask(args, full_log_probs, full_old_log_probs, advantages, loss_masks):
    """slime/utils/ppo_utils.py, transcribed."""
    opsm_mask_list = []
    opsm_clipfrac = torch.tensor(0.0, dtype=torch.float64)
    for full_log_prob, full_old_log_prob, advantage, loss_mask in zip(
        full_log_probs, full_old_log_probs, advantages, loss_masks, strict=False
    ):
        seq_kl = ((full_old_log_prob - full_log_prob) * loss_mask).sum() / torch.clamp_min(
            loss_mask.sum(), 1
        )
        mask = ((advantage < 0) & (seq_kl > args.opsm_delta)).double()
        opsm_clipfrac += mask.sum() / torch.clamp_min(loss_mask.sum(), 1)
        opsm_mask_list.append(1 - mask)
    return torch.cat(opsm_mask_list, dim=0), opsm_clipfrac


def slime_opsm(lrs, lts, delta, advantage, tool=None, micro_batches=3):
    """What slime logs and applies for one step: the per-token mask of every sample and
    ``opsm_clipfrac`` summed over micro-batches / the number of samples. ``tool[i]`` inserts
    tool-response tokens (loss mask 0) after the first model token of sample i."""
    old, cur, adv, masks = [], [], [], []
    for i, (a, t) in enumerate(zip(lrs, lts, strict=True)):
        k = 0 if tool is None else tool[i]
        pad = torch.full((k,), -0.7, dtype=torch.float64)  # logprobs of tool tokens: ignored
        old.append(torch.cat([torch.tensor(a[:1]), pad, torch.tensor(a[1:])]))
        cur.append(torch.cat([torch.tensor(t[:1]), pad - 3.0, torch.tensor(t[1:])]))
        masks.append(torch.cat([torch.ones(1), torch.zeros(k), torch.ones(len(a) - 1)]).double())
        adv.append(torch.full((len(a) + k,), advantage, dtype=torch.float64))
    args = SimpleNamespace(opsm_delta=delta)
    total, keep = 0.0, []
    for cut in np.array_split(np.arange(len(lrs)), micro_batches):
        mask, clipfrac = compute_opsm_mask(
            args, [cur[i] for i in cut], [old[i] for i in cut], [adv[i] for i in cut],
            [masks[i] for i in cut],
        )  # fmt: skip
        total += clipfrac.item()
        keep.append(mask[torch.cat([masks[i] for i in cut]).bool()])
    return torch.cat(keep).numpy(), total / len(lrs)


def _batch(seed, n_seq=40):
    return exp_batch(seed, n_seq, [0.001, 0.01, 0.05, 0.2], lengths=(2, 40))


def _preset(lrs, lts, config, parts=3):
    return run_preset(SlimeOpsm(), lrs, lts, config, parts)


def _config(**kw) -> dict:
    return parse_sets(SlimeOpsm(), [f"{k}={v}" for k, v in kw.items()])


@pytest.mark.parametrize("delta", [1e-4, 1e-3, 5e-3, 2e-2, 0.1])  # a sweep of --opsm-delta
@pytest.mark.parametrize(("sign", "advantage"), [("negative", -1.0), ("positive", 1.0)])
def test_mask_and_clipfrac_equal_slime(delta: float, sign: str, advantage: float) -> None:
    lrs, lts = _batch(int(delta * 1e4))
    got = _preset(lrs, lts, _config(opsm_delta=delta, advantage_sign=sign))
    keep, clipfrac = slime_opsm(lrs, lts, delta, advantage)
    assert got["opsm_clipfrac"] == pytest.approx(clipfrac, rel=1e-12, abs=1e-15)
    assert got["token_fraction"] == pytest.approx(1.0 - keep.mean(), rel=1e-12, abs=1e-15)
    assert got["weight_mean"] == pytest.approx(keep.mean(), rel=1e-12)
    assert got["weight_min"] == keep.min() and got["weight_max"] == keep.max()
    # the KL condition alone: what OPSM masks among negative-advantage sequences
    _, if_negative = slime_opsm(lrs, lts, delta, -1.0)
    assert got["opsm_seq_kl_over_delta_fraction"] == pytest.approx(if_negative, rel=1e-12)
    if sign == "negative" and delta in (1e-3, 5e-3):
        assert 0 < got["sequence_fraction"] < 1  # the threshold bites
    if sign == "positive":
        assert got["opsm_clipfrac"] == 0 and got["ess"] == 1.0  # OPSM spares positive advantages


def test_clipfrac_rises_as_delta_falls() -> None:
    lrs, lts = _batch(5)
    fracs = [
        _preset(lrs, lts, _config(opsm_delta=d))["opsm_clipfrac"] for d in (0.1, 1e-2, 1e-3, 1e-4)
    ]
    assert fracs == sorted(fracs) and fracs[0] < fracs[-1]


def test_zero_advantage_is_not_masked() -> None:
    """slime masks ``advantage < 0`` only: a group whose rewards are equal (advantage 0) is kept,
    as with advantage_sign=positive."""
    lrs, lts = _batch(6)
    keep, clipfrac = slime_opsm(lrs, lts, 1e-3, 0.0)
    got = _preset(lrs, lts, _config(opsm_delta=1e-3, advantage_sign="positive"))
    assert clipfrac == got["opsm_clipfrac"] == 0 and keep.all()


def test_tool_tokens_leave_the_mask_alone_and_weigh_in_slimes_clipfrac() -> None:
    """``seq_kl`` is a mean over the loss mask, so tool-response tokens change neither it nor the
    mask of the model tokens; slime's ``opsm_clipfrac`` adds L / M per masked sample (L response
    tokens, M in the loss mask), the preset 1 (documented)."""
    lrs, lts = _batch(9)
    tool = [3 if i % 2 else 0 for i in range(len(lrs))]
    keep, clipfrac = slime_opsm(lrs, lts, 1e-3, -1.0, tool=tool)
    got = _preset(lrs, lts, _config(opsm_delta=1e-3))
    assert got["token_fraction"] == pytest.approx(1.0 - keep.mean(), rel=1e-12)
    starts = np.cumsum([0] + [len(a) for a in lrs[:-1]])
    masked = np.maximum.reduceat(1.0 - keep, starts) > 0
    lengths = np.array([len(a) for a in lrs])
    assert got["opsm_clipfrac"] == pytest.approx(masked.mean(), rel=1e-12)
    assert clipfrac == pytest.approx((masked * (lengths + tool) / lengths).mean(), rel=1e-12)


def test_cli_per_step_groups_equal_slime_per_step(store: Path, tmp_path: Path) -> None:
    batches = {step: nonpositive(_batch(40 + step, n_seq=12)) for step in range(2)}
    ingest_steps(store, tmp_path, "o", batches)
    doc, per_step = whatif_per_step("o", "slime-opsm", ["opsm_delta=0.002"])
    assert doc["source"] == "slime/utils/ppo_utils.py"
    for step, (lrs, lts) in batches.items():
        _, want = slime_opsm(lrs, lts, 0.002, -1.0)
        assert per_step[step]["opsm_clipfrac"] == pytest.approx(want, rel=1e-12)
