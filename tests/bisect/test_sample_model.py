"""``bisect`` on the sample data's shipped checkpoint through its factory (a file:function): the
factory's module against TinyLM's own two paths, the engine path named on the sample run, the
trainer's temperature found, and the demo's phase and its refusals."""

from __future__ import annotations

import copy
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from mismatchctl import api
from mismatchctl.analysis.bisect.sample import draw
from mismatchctl.analysis.selectors import parse_steps
from mismatchctl.bisect import rescore
from mismatchctl.bisect import settings as G
from mismatchctl.bisect.model import cpu_threads
from mismatchctl.bisect.model import load as load_model
from mismatchctl.errors import UsageError
from mismatchctl.sample_runs import BisectTarget, bisect_target, default_data_dir
from mismatchctl.store import open_store

pytest.importorskip("safetensors")

DATA = default_data_dir()
FACTORY = str(DATA / "gen" / "bisect_model.py") + ":load"
SETTINGS = {s.name: s for s in G.at_trainer_temperature(G.grid(G.Sampler(0.9)), 0.9)}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shipped checkpoint's run alone, ingested."""
    target = bisect_target()
    assert isinstance(target, BisectTarget), target
    path = tmp_path_factory.mktemp("sample") / "store"
    api.demo_ingest(path, [r for r in api.demo_runs() if r.name == target.run])
    return path


@pytest.fixture(scope="module")
def lm() -> torch.nn.Module:
    """TinyLM itself, from the generator's code, with the shipped weights."""
    sys.path.insert(0, str(DATA))
    from gen.bisect_model import load  # the generator's package, as generate.py imports it

    return load().lm


def _sequences(store: Path, n: int) -> list[rescore.Sequence]:
    drawn = draw(open_store(store), "ref-b", n, parse_steps("8"), 0)
    return [
        rescore.Sequence(i, p, t)
        for i, p, t in zip(drawn.ids, drawn.prompts, drawn.targets, strict=True)
    ]


def _pick(logits: torch.Tensor, seq: rescore.Sequence, rows: np.ndarray) -> np.ndarray:
    lp = torch.log_softmax(logits.float() / 0.9, dim=-1)
    tokens = torch.as_tensor(seq.ids[seq.targets])[:, None]
    return lp[torch.as_tensor(rows)].gather(1, tokens)[:, 0].double().numpy()


def _engine_path(lm: torch.nn.Module, seq: rescore.Sequence) -> torch.Tensor:
    """TinyLM's own inference path, called directly: prefill the prompt, decode the rest."""
    from gen.model import AttentionKernel

    ids = torch.as_tensor(seq.ids[None])
    valid = torch.ones_like(ids[:, : seq.prompt], dtype=torch.bool)
    with torch.inference_mode():
        logits, cache = lm.prefill(ids[:, : seq.prompt], valid, capacity=lm.cfg.max_len)
        rows = [logits[0]]
        for i in range(seq.prompt, int(seq.targets[-1])):
            rows.append(lm.decode(ids[:, i], cache, AttentionKernel())[0])
    return torch.stack(rows)


def test_the_factory_equals_tinylms_own_paths(store: Path, lm: torch.nn.Module) -> None:
    """The re-scored logprobs equal TinyLM's trainer forward (1e-6) and, under the incremental
    settings, its own prefill / decode path in the setting's dtype (1e-5)."""
    loaded = load_model(FACTORY)
    assert not loaded.hf and loaded.stepwise
    seq = _sequences(store, 2)[1]
    with torch.inference_mode():
        full = lm(torch.as_tensor(seq.ids[None]))[0]
    start = rescore.logprobs(rescore.Variant(loaded, SETTINGS["start"]), seq)
    np.testing.assert_allclose(start, _pick(full, seq, seq.targets - 1), rtol=0, atol=1e-6)
    rows = seq.targets - seq.prompt
    bf16 = copy.deepcopy(lm).to(torch.bfloat16)
    # float32: 1e-5; bfloat16: 1e-3, since oneDNN may pick another bf16 kernel for the same
    # shapes on a loaded machine (seen once in a dozen runs), while the engine path differs from
    # the trainer's by about 1e-2 per token here: a wrong path still fails
    for name, model, atol in (("incremental", lm, 1e-5), ("bf16+incremental", bf16, 1e-3)):
        got = rescore.logprobs(rescore.Variant(loaded, SETTINGS[name]), seq)
        direct = _pick(_engine_path(model, seq), seq, rows)
        np.testing.assert_allclose(got, direct, rtol=0, atol=atol, err_msg=name)
    # the cache's storage is applied: bf16 moves the logprobs, fp8 moves them further
    inc = rescore.logprobs(rescore.Variant(loaded, SETTINGS["incremental"]), seq)
    d = {n: np.abs(rescore.logprobs(rescore.Variant(loaded, SETTINGS[n]), seq) - inc).mean()
         for n in ("kv-bf16", "kv-fp8")}  # fmt: skip
    assert 0 < d["kv-bf16"] < d["kv-fp8"], d


def test_bisect_names_the_engine_path_on_the_sample_run(store: Path) -> None:
    """ref-b's engine: bf16 weights, prefill then one token at a time through a KV cache; its
    trainer: float32, full forward, logits divided by the temperature (0.9)."""
    target = bisect_target()
    assert isinstance(target, BisectTarget)
    b = api.bisect(target.run, target.model, steps=str(target.step), sample=6, store=store,
                   settings=["bf16", "incremental", "bf16+incremental"])  # fmt: skip
    assert b.trainer_temperature == pytest.approx(0.9)
    assert b.outcomes[0].overall.k3_trainer <= b.trainer_threshold
    # the engine's path is the closest and accounts for most of the mismatch; whether it
    # reproduces it (90%) depends on this CPU's bf16 kernels: the run was sampled on another
    # (docs/bisect.md "Limits of this version": 90% or more there, 53-67% on an AVX-512 BF16 CPU)
    assert b.best == "bf16+incremental", b.to_dict()["bisect"]["verdict"]
    shares = {o.name: o.overall.share or 0.0 for o in b.outcomes[1:]}
    assert shares["bf16+incremental"] > 0.5 and max(shares, key=shares.__getitem__) == b.best
    # neither bf16 nor the KV cache alone moves the trainer side toward the rollout: both do
    assert all((b.outcome(n).overall.share or 0) < 0.05 for n in ("bf16", "incremental"))
    assert b.to_dict()["bisect"]["verdict"][1].startswith("no single change accounts")
    assert b.to_dict()["bisect"]["trainer_temperature"] == pytest.approx(0.9)


def test_the_trainer_temperature_makes_the_sampler_setting_raw() -> None:
    named = G.at_trainer_temperature(G.grid(G.Sampler(0.9, 0.8)), 0.9)
    assert [s.name for s in named][-2:] == ["raw", "top-p=0.8"]
    assert {s.temperature for s in named if s.name != "raw"} == {0.9}
    assert next(s for s in named if s.name == "raw").temperature == 1.0
    # a temperature of 1 or a top-p of 1 changes nothing: no setting for them
    plain = [s.name for s in G.grid()]
    assert [s.name for s in G.grid(G.Sampler(1.0, 1.0, 0))] == plain
    assert [s.name for s in G.grid(G.Sampler(top_k=-1))] == plain


def test_a_file_factory_that_is_missing_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="cannot import it"):
        load_model(str(tmp_path / "nothing.py") + ":load")


def test_the_demo_says_why_it_skips_bisect(tmp_path: Path, monkeypatch) -> None:
    """No checkpoint in the data directory, or no torch: a reason, not an error."""
    data = tmp_path / "data"
    data.mkdir()
    assert "no model checkpoint" in str(api.demo_bisect(tmp_path / "store", str(data)))
    shutil.copytree(DATA / "model", data / "model")
    real = __import__("importlib").util.find_spec
    monkeypatch.setattr("importlib.util.find_spec", lambda n: None if n == "torch" else real(n))
    why = bisect_target(data)
    assert isinstance(why, str) and why.startswith("torch not installed")


@pytest.mark.slow
def test_a_batch_through_the_engine_path_equals_each_sequence_alone(store: Path) -> None:
    """Left-padded prompts of other lengths, rows decoded past their end: each row's logprobs
    are its own (float32: the batch shape's rounding only)."""
    variant = rescore.Variant(load_model(FACTORY), SETTINGS["incremental"])
    seqs = _sequences(store, 4)
    assert len({s.prompt for s in seqs}) > 1 and len({len(s.ids) for s in seqs}) > 1
    together = rescore.stepwise_logprobs(variant, seqs)
    for s, got in zip(seqs, together, strict=True):
        alone = rescore.stepwise_logprobs(variant, [s])[0]
        np.testing.assert_allclose(got, alone, rtol=0, atol=1e-5)


def test_a_small_model_runs_on_one_thread_unless_told(monkeypatch) -> None:
    loaded = load_model(FACTORY)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    torch.set_num_threads(2)
    with cpu_threads(loaded) as n:
        assert n == 1 == torch.get_num_threads()
    assert torch.get_num_threads() == 2  # restored
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    with cpu_threads(loaded) as n:
        assert n == 2 == torch.get_num_threads()
