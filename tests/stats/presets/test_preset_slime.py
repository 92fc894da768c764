"""`whatif --preset slime-tis` against slime's arithmetic, transcribed in torch from
slime/backends/megatron_utils/loss.py (THUDM/slime commit 624b824a): ``vanilla_tis_function`` and
``icepop_function``, their metrics reduced per sample (``sum_of_sample_mean`` of
slime/backends/megatron_utils/cp_utils.py without context parallelism, ``sample_denoms`` None)
and averaged over the samples."""

from __future__ import annotations

import pytest
import torch

from mismatchctl.stats.presets.base import parse_sets
from mismatchctl.stats.presets.slime import ICEPOP, SlimeTis
from tests.stats.presets.preset_data import exp_batch, run_preset


def slime_reference(lrs, lts, lo, hi, icepop):
    rollout = torch.cat([torch.tensor(a) for a in lrs])
    old = torch.cat([torch.tensor(t) for t in lts])
    ratio = torch.exp(old - rollout)
    if icepop:
        weight = torch.where((ratio >= lo) & (ratio <= hi), ratio, torch.zeros_like(ratio))
    else:
        weight = torch.clamp(ratio, min=lo, max=hi)
    metrics = {
        "tis": ratio,
        "tis_clipfrac": (weight != ratio).double(),
        "tis_abs": (ratio - 1).abs(),
    }
    lengths = [len(a) for a in lrs]
    masks = [torch.ones(n, dtype=torch.float64) for n in lengths]

    def sum_of_sample_mean(x):
        return sum(
            (x_i * m).sum() / torch.clamp_min(m.sum(), 1)
            for x_i, m in zip(x.split(lengths, dim=0), masks, strict=True)
        )

    return {k: (sum_of_sample_mean(v) / len(lengths)).item() for k, v in metrics.items()}, weight


def _batch(seed):
    return exp_batch(seed, 25, [0.05, 0.5, 1.5])


def _preset(lrs, lts, config, parts=3):
    return run_preset(SlimeTis(), lrs, lts, config, parts)


@pytest.mark.parametrize("icepop", [False, True])
@pytest.mark.parametrize(("lo", "hi"), [(0.0, 2.0), (0.5, 2.0), (0.5, 5.0), (0.8, 1.25)])
def test_metrics_equal_slime(icepop: bool, lo: float, hi: float) -> None:
    lrs, lts = _batch(int(hi * 10) + icepop)
    sets = [f"tis_clip={hi}", f"tis_clip_low={lo}"]
    if icepop:
        sets.append(f"custom_tis_function_path={ICEPOP}")
    got = _preset(lrs, lts, parse_sets(SlimeTis(), sets))
    want, weight = slime_reference(lrs, lts, lo, hi, icepop)
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-12), key
    w = weight.numpy()
    assert got["weight_mean"] == pytest.approx(w.mean(), rel=1e-12)
    assert got["ess"] == pytest.approx(w.sum() ** 2 / (len(w) * (w**2).sum()), rel=1e-12)
    masked = (w == 0).mean() if icepop else 0.0
    assert got["token_fraction"] == pytest.approx(masked)


def test_bad_function_is_refused() -> None:
    with pytest.raises(ValueError, match=r"custom_tis_function_path `my\.fn`"):
        SlimeTis().check(parse_sets(SlimeTis(), ["custom_tis_function_path=my.fn"]))
    with pytest.raises(ValueError, match="0 <= low <= high"):
        SlimeTis().check(parse_sets(SlimeTis(), ["tis_clip_low=3"]))
