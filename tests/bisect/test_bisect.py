"""``bisect``: the harness against direct calls of the model, a run whose rollout side comes
from a known setting named as reproducing it, a run with a path outside the grid named as such,
and the refusals (a hub id, no prompt ids, another checkpoint)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from mismatchctl import api
from mismatchctl.bisect import rescore
from mismatchctl.bisect import settings as G
from mismatchctl.bisect.model import load as load_model
from mismatchctl.errors import InputError, ModelMismatchError, UsageError
from tests.bisect import data
from tests.helpers import cli

SETTINGS = {s.name: s for s in G.grid(G.Sampler(0.8, 0.9, 5), chunk=3)}


def test_the_harness_equals_direct_calls_of_the_model(ckpt: Path) -> None:
    """Re-scored logprobs equal the model called directly under the setting (1e-6), and the
    incremental path (prefill, then a token at a time through the KV cache) equals the full
    forward in float32 (1e-5)."""
    model, loaded = data.load(ckpt), load_model(str(ckpt))
    ids, prompt, _ = data.sequences()[1]
    seq = rescore.Sequence(ids, prompt, np.arange(prompt, len(ids)))
    fp32 = data.full_logprobs(model, ids)[prompt:]
    got = {n: rescore.logprobs(rescore.Variant(loaded, SETTINGS[n]), seq) for n in
           ("start", "temperature=0.8", "bf16", "incremental")}  # fmt: skip
    np.testing.assert_allclose(got["start"], fp32, rtol=0, atol=1e-6)
    hot = data.full_logprobs(model, ids, temperature=0.8)[prompt:]
    np.testing.assert_allclose(got["temperature=0.8"], hot, rtol=0, atol=1e-6)
    bf16 = data.full_logprobs(data.load(ckpt).to(torch.bfloat16), ids)[prompt:]
    np.testing.assert_allclose(got["bf16"], bf16, rtol=0, atol=1e-6)
    assert np.abs(got["bf16"] - fp32).max() > 1e-4  # bf16 is a change the grid can see
    np.testing.assert_allclose(got["incremental"], fp32, rtol=0, atol=1e-5)
    padded = rescore.batch_logprobs(rescore.Variant(loaded, SETTINGS["padded-left"]),
                              [rescore.Sequence(i, p, np.arange(p, len(i)))
                               for i, p, _ in data.sequences()[:3]])  # fmt: skip
    np.testing.assert_allclose(padded[1], fp32, rtol=0, atol=1e-5)


def test_top_p_renormalises_over_the_kept_tokens(ckpt: Path) -> None:
    loaded = load_model(str(ckpt))
    ids, prompt, _ = data.sequences()[0]
    seq = rescore.Sequence(ids, prompt, np.arange(prompt, len(ids)))
    plain = rescore.logprobs(rescore.Variant(loaded, SETTINGS["start"]), seq)
    top = rescore.logprobs(rescore.Variant(loaded, SETTINGS["top-p=0.9"]), seq)
    assert np.all(top >= plain - 1e-7) and np.all(top <= 0)
    assert np.any(top > plain + 1e-3)  # the mass cut off is given back to the kept tokens


def test_a_sampler_setting_is_named(runs: Path, ckpt: Path) -> None:
    """The engine sampled at temperature 0.8 (the run's tag): that setting reproduces it."""
    b = api.bisect("temp", str(ckpt), store=runs, settings=["bf16", "temperature=0.8"])
    assert b.best == "temperature=0.8" and b.reproduces
    assert b.outcome("temperature=0.8").overall.k3_rollout < 1e-12
    assert b.best_change == "temperature=0.8"
    assert b.outcome("temperature=0.8").overall.share == pytest.approx(1.0)
    assert b.to_dict()["bisect"]["verdict"][0].startswith("temperature=0.8 ")
    assert set(b.by_turn_best) == {"first", "later"}  # two sequences have a tool response


def test_the_engine_path_is_named(runs: Path, ckpt: Path) -> None:
    """The engine decoded in bf16 through a KV cache: of every setting, bf16+incremental
    reproduces it; the start passes the trainer check."""
    b = api.bisect("engine", str(ckpt), store=runs)
    ran = [o.name for o in b.outcomes] + [n for n, _ in b.skipped]
    assert sorted(ran) == sorted(s.name for s in G.grid(G.Sampler(), chunk=512))
    skipped = dict(b.skipped)  # the start's own attention; flash needs CUDA; no long prompt
    assert (
        "start's own" in skipped["attn-sdpa"]
        and "longer than the chunk" in skipped["prefill-chunk=512"]
    )
    assert b.best == "bf16+incremental" and b.reproduces, b.to_dict()
    assert b.outcome("bf16+incremental").overall.k3_rollout < 1e-12
    # bf16 alone gets part of the way: the rest is the decode path's order of operations
    assert b.best_change == "bf16" and 0.2 < b.outcome("bf16").overall.share < 0.9
    assert b.outcomes[0].overall.k3_trainer <= b.trainer_threshold
    lo, hi = b.outcomes[0].overall.k3_rollout_ci
    assert lo <= b.outcomes[0].overall.k3_rollout <= hi


def test_a_path_outside_the_grid_is_said(runs: Path, ckpt: Path) -> None:
    b = api.bisect("noise", str(ckpt), store=runs, settings=["bf16", "incremental", "kv-fp8"])
    assert not b.reproduces
    assert b.to_dict()["bisect"]["verdict"][0].startswith("nothing here reproduces")


def test_the_command_line_and_its_json(runs: Path, ckpt: Path) -> None:
    ran = cli("bisect", "temp", "--model", str(ckpt), "--settings", "temperature=0.8",
              "--store", str(runs), "--json", "-", "-q")  # fmt: skip
    assert ran.code == 0, ran.err
    d = json.loads(ran.out)["bisect"]
    assert d["best"] == "temperature=0.8" and d["reproduces"]
    assert [s["setting"] for s in d["settings"]] == ["start", "temperature=0.8"]
    shown = cli("bisect", "temp", "--model", str(ckpt), "--settings", "temperature=0.8",
                "--store", str(runs), "-q")  # fmt: skip
    assert shown.code == 0 and "reproduces the rollout logprobs" in shown.out


def test_a_factory_model_runs_what_it_supports(runs: Path) -> None:
    b = api.bisect("temp", "tests.bisect.data:factory", store=runs)
    assert b.best == "temperature=0.8" and b.reproduces
    skipped = dict(b.skipped)
    assert {"incremental", "kv-fp8", "padded-left", "lm_head-fp32"} <= set(skipped)
    assert "KV cache" in skipped["incremental"]


def test_a_hub_id_is_refused_with_a_hint(runs: Path) -> None:
    ran = cli("bisect", "temp", "--model", "meta-llama/Llama-3.1-8B", "--store", str(runs))
    assert ran.code == 1
    assert "Error:" in ran.err and "Hint:" in ran.err and "never downloaded" in ran.err
    with pytest.raises(UsageError, match="no such directory"):
        load_model("Qwen/Qwen3-0.6B")


def test_a_dump_without_prompt_ids_is_refused(runs: Path, ckpt: Path) -> None:
    with pytest.raises(InputError, match="prompt") as exc:
        api.bisect("noprompt", str(ckpt), store=runs)
    assert "prompts" in (exc.value.hint or "")


def test_another_checkpoint_is_named(runs: Path, tmp_path: Path) -> None:
    other = data.tiny_model(tmp_path / "other", seed=1)
    with pytest.raises(ModelMismatchError, match="not the one the run used"):
        api.bisect("temp", str(other), store=runs, settings=["bf16"])
    ran = cli("bisect", "temp", "--model", str(other), "--store", str(runs), "-q")
    assert ran.code == 3 and "not the one the run used" in ran.err


def test_cuda_is_refused_cleanly_without_one(runs: Path, ckpt: Path) -> None:
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    with pytest.raises(UsageError, match="no CUDA device"):
        api.bisect("temp", str(ckpt), store=runs, device="cuda")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_on_cuda_the_same_setting_is_named_as_on_the_cpu(runs: Path, ckpt: Path) -> None:
    """``--device cuda``: the model re-scores on the GPU (one batch at a time) and names what
    the CPU names, the trainer check passing in float32 there too."""
    settings = ["bf16", "temperature=0.8"]
    cpu = api.bisect("temp", str(ckpt), store=runs, settings=settings)
    gpu = api.bisect("temp", str(ckpt), store=runs, settings=settings, device="cuda")
    assert gpu.device == "cuda" and gpu.best == cpu.best == "temperature=0.8" and gpu.reproduces
    assert gpu.outcomes[0].overall.k3_trainer <= gpu.trainer_threshold
    assert gpu.mismatch == pytest.approx(cpu.mismatch, rel=1e-12)  # the dump's own numbers
