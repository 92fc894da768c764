"""`whatif --preset trl-vllm-is` against TRL's own code and against its arithmetic.

TRL (in the ``dev`` extra) computes the vLLM importance-sampling correction inline in
``GRPOTrainer._generate_and_score_completions`` (trl/trainer/grpo_trainer.py, TRL 1.16.0): no
function of its own takes a batch. ``test_preset_equals_trl_grpo_trainer`` therefore runs that
method of a real ``GRPOTrainer`` (a tiny random model on CPU, rollouts with their logprobs from a
``rollout_func``) and compares the preset, on the same tokens, with the ratios TRL returns
(``importance_sampling_ratio``) and the ``sampling/*`` metrics it logs. The other tests use a
torch transcription of that code (in float64, with tails a trainer does not produce).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from mismatchctl.stats.presets.base import parse_sets
from mismatchctl.stats.presets.trl import TrlVllmIs
from tests.stats.presets.preset_data import exp_batch, padded, run_preset
from tests.trl_grpo import sample_with_stale_copy, tiny_grpo_setup

MODES = ["token_truncate", "token_mask", "sequence_truncate", "sequence_mask"]


def trl_reference(lrs, lts, mode, clip_min, clip_max):
    old, sampling, mask = padded(lrs, lts)
    per_token_logps_diff = (old - sampling) * mask
    sequence_level_is = mode in ["sequence_mask", "sequence_truncate"]
    if sequence_level_is:
        logps_diff = per_token_logps_diff.sum(dim=-1, keepdim=True)
    else:
        logps_diff = per_token_logps_diff
    ratio = torch.exp(logps_diff)
    if mode in ["sequence_truncate", "token_truncate"]:
        ratio = torch.clamp(ratio, min=clip_min, max=clip_max)
    else:
        min_val = clip_min if clip_min is not None else -math.inf
        max_val = clip_max if clip_max is not None else math.inf
        ratio = ratio.masked_fill((ratio < min_val) | (ratio > max_val), value=0.0)
    b = mask.bool()
    delta = torch.abs(old - sampling)[b]
    flat = ratio.flatten() if sequence_level_is else ratio[b]
    return {
        "sampling/sampling_logp_difference/mean": torch.mean(delta).item(),
        "sampling/sampling_logp_difference/max": torch.max(delta).item(),
        "sampling/importance_sampling_ratio/min": torch.min(flat).item(),
        "sampling/importance_sampling_ratio/mean": torch.mean(flat).item(),
        "sampling/importance_sampling_ratio/max": torch.max(flat).item(),
    }


def _batch(seed):
    return exp_batch(seed, 20, [0.01, 0.05, 0.3], lengths=(1, 25))


def _preset(lrs, lts, config, parts=2):
    return run_preset(TrlVllmIs(), lrs, lts, config, parts)


@pytest.mark.parametrize(
    "mode", ["token_truncate", "token_mask", "sequence_truncate", "sequence_mask"]
)
@pytest.mark.parametrize(
    ("clip_min", "clip_max"), [(None, 3.0), (0.5, 2.0), (0.9, 1.1), (0.5, None)]
)
def test_sampling_metrics_equal_trl(mode: str, clip_min, clip_max) -> None:
    if mode.endswith("truncate") and clip_max is None:
        clip_max = 2.0
    lrs, lts = _batch(3)
    sets = [f"vllm_importance_sampling_mode={mode}",
            f"vllm_importance_sampling_clip_min={clip_min}",
            f"vllm_importance_sampling_clip_max={clip_max}"]  # fmt: skip
    got = _preset(lrs, lts, parse_sets(TrlVllmIs(), sets))
    want = trl_reference(lrs, lts, mode, clip_min, clip_max)
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-12), key


def test_default_is_sequence_mask_at_3() -> None:
    config = parse_sets(TrlVllmIs(), [])
    assert config["vllm_importance_sampling_mode"] == "sequence_mask"
    assert config["vllm_importance_sampling_clip_max"] == 3.0
    with pytest.raises(ValueError, match="must be less than"):
        TrlVllmIs().check(parse_sets(TrlVllmIs(), ["vllm_importance_sampling_clip_min=4"]))


@pytest.fixture(scope="module")
def grpo_trainer(tmp_path_factory: pytest.TempPathFactory):
    """A real ``GRPOTrainer`` whose rollouts come from a ``rollout_func`` returning the sampler's
    logprobs, as TRL's vLLM server mode gives them. ``use_vllm`` is switched on after the trainer
    is built (building with it would start a vLLM client), so that
    ``_generate_and_score_completions`` applies the correction; the weight sync to a vLLM server
    is marked done, since the sampler copies the current weights itself."""
    trl = pytest.importorskip("trl", reason="TRL is not installed (the dev extra has it)")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is marked experimental
        model, tokenizer, dataset = tiny_grpo_setup()
        args = trl.GRPOConfig(
            output_dir=str(tmp_path_factory.mktemp("trl") / "out"),
            per_device_train_batch_size=8,
            num_generations=2,
            max_completion_length=8,
            max_steps=1,
            report_to="none",
            use_cpu=True,
            save_strategy="no",
            seed=0,
        )
        trainer = trl.GRPOTrainer(
            model=model,
            reward_funcs=lambda completions, **kw: [float(len(c)) for c in completions],
            args=args,
            train_dataset=dataset,
            processing_class=tokenizer,
            rollout_func=sample_with_stale_copy,
        )
    trainer.use_vllm = True
    trainer._last_loaded_step = trainer.state.global_step
    threads = torch.get_num_threads()
    torch.set_num_threads(
        1
    )  # a 16-wide model: more threads only contend (the suite runs in parallel)
    yield trainer, [{"prompt": p} for p in dataset["prompt"]]
    torch.set_num_threads(threads)


SWEEP = [  # TRL's default cap, bands that bite, open ends: token ratios are near 1, sequence
    # ratios (of 8 tokens) farther
    *[(m, lo, hi) for m in MODES[:2] for lo, hi in
      [(None, 3.0), (0.9, 1.1), (0.97, 1.03), (0.95, None), (None, 1.02)]],
    *[(m, lo, hi) for m in MODES[2:] for lo, hi in
      [(None, 3.0), (0.5, 2.0), (0.8, 1.25), (0.7, None), (None, 1.1)]],
]  # fmt: skip


@pytest.mark.slow  # a real GRPOTrainer: importing TRL and transformers alone takes ~20 s
@pytest.mark.parametrize(("mode", "clip_min", "clip_max"), SWEEP)
def test_preset_equals_trl_grpo_trainer(grpo_trainer, mode: str, clip_min, clip_max) -> None:
    """TRL computes in float32 (its log-probabilities are float32), the preset in float64 on the
    same float32 values: numbers agree to float32 rounding (2e-6), masks exactly."""
    trainer, batch = grpo_trainer
    trainer.vllm_importance_sampling_mode = mode
    trainer.vllm_importance_sampling_clip_min = clip_min
    trainer.vllm_importance_sampling_clip_max = clip_max
    out = trainer._generate_and_score_completions(batch)
    logged = trainer._metrics["train" if trainer.model.training else "eval"]
    want = {k: v[-1] for k, v in logged.items() if k.startswith("sampling/")}
    mask = (out["completion_mask"] * out.get("tool_mask", 1)).bool()
    sampled, old = out["sampling_per_token_logps"], out["old_per_token_logps"]
    lrs = [sampled[i][mask[i]].double().numpy() for i in range(len(mask))]
    lts = [old[i][mask[i]].double().numpy() for i in range(len(mask))]
    sets = [f"vllm_importance_sampling_mode={mode}",
            f"vllm_importance_sampling_clip_min={clip_min}",
            f"vllm_importance_sampling_clip_max={clip_max}"]  # fmt: skip
    got = _preset(lrs, lts, parse_sets(TrlVllmIs(), sets))
    assert len(want) == 5
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=2e-6, abs=1e-9), key
    ratio = out["importance_sampling_ratio"]  # (B, T) per token, (B, 1) per sequence
    applied = ratio.expand_as(mask)[mask].double().numpy()
    assert got["token_fraction"] == (applied == 0).mean()  # masked: TRL sets the ratio to 0
    assert got["weight_mean"] == pytest.approx(applied.mean(), rel=2e-6)
    assert got["weight_min"] == pytest.approx(applied.min(), rel=2e-6, abs=1e-9)
    assert got["weight_max"] == pytest.approx(applied.max(), rel=2e-6)
    ess = applied.sum() ** 2 / (len(applied) * (applied**2).sum()) if applied.any() else None
    assert got["ess"] == pytest.approx(ess, rel=2e-6)
    diff = [t - r for r, t in zip(lrs, lts, strict=True)]
    raw = np.exp(
        np.concatenate([np.full(len(d), d.sum()) if "sequence" in mode else d for d in diff])
    )
    corrected = ~np.isclose(applied, raw, rtol=1e-5)
    assert corrected.mean() < 1  # some of TRL's ratios are left as they are
    if (clip_min, clip_max) != (None, 3.0):  # and the bands of the sweep bite
        assert corrected.any()
