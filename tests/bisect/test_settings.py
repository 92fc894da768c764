"""The settings of round three against direct calls of the model: top-k, a chunked prefill,
right padding, another attention implementation, fp8 KV scales per head, the transformers
engine path decoding a batch; and ``--start bf16`` on a run whose trainer scored in bfloat16."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from mismatchctl import api
from mismatchctl.bisect import kvcache as KV
from mismatchctl.bisect import rescore
from mismatchctl.bisect import settings as G
from mismatchctl.bisect.model import load as load_model
from mismatchctl.errors import ModelMismatchError, UsageError
from tests.bisect import data

SETTINGS = {s.name: s for s in G.grid(G.Sampler(top_k=5), chunk=3)}


def _seqs() -> list[rescore.Sequence]:
    return [rescore.Sequence(i, p, np.arange(p, len(i))) for i, p, _ in data.sequences()]


def _chunked(model: torch.nn.Module, seq: rescore.Sequence, chunk: int) -> np.ndarray:
    """The sequence alone through transformers' cache: the prompt in chunks, then decoded."""
    from transformers import DynamicCache  # imported by the tests that run, not at collection

    ids, cache, rows = torch.as_tensor(seq.ids[None]), DynamicCache(config=model.config), []
    with torch.inference_mode():
        for lo in range(0, seq.prompt, chunk):
            hi = min(lo + chunk, seq.prompt)
            logits = model(ids[:, lo:hi], cache=cache, use_cache=True).logits
        rows.append(logits[0, -1])
        for i in range(seq.prompt, int(seq.targets[-1])):
            rows.append(model(ids[:, i : i + 1], cache=cache, use_cache=True).logits[0, -1])
        lp = torch.log_softmax(torch.stack(rows).float(), -1)
        tokens = torch.as_tensor(seq.ids[seq.targets])[:, None]
    return lp[torch.as_tensor(seq.targets - seq.prompt)].gather(1, tokens)[:, 0].double().numpy()


def test_top_k_renormalises_over_the_k_most_probable(ckpt: Path) -> None:
    loaded, seq = load_model(str(ckpt)), _seqs()[0]
    got = rescore.logprobs(rescore.Variant(loaded, SETTINGS["top-k=5"]), seq)
    with torch.inference_mode():
        lp = torch.log_softmax(loaded.module(torch.as_tensor(seq.ids[None])).logits[0], -1)
    lp = lp[torch.as_tensor(seq.targets - 1)].double().numpy()
    want = []
    for row, token in zip(lp, seq.ids[seq.targets], strict=True):
        kept = set(np.argsort(row)[-5:].tolist()) | {int(token)}  # the sampled token is kept
        want.append(row[token] - np.logaddexp.reduce(row[sorted(kept)]))
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    raw = lp[np.arange(len(lp)), seq.ids[seq.targets]]
    assert np.all(got >= raw - 1e-9) and np.any(got > raw + 1e-3)  # the mass cut off given back


def test_a_chunked_prefill_equals_the_model_called_so(ckpt: Path) -> None:
    """The harness gives what the model gives called chunk by chunk (1e-6 in float32, where it
    is the full forward too, 1e-5; 5e-3 in bfloat16, where the harness's attention mask makes
    sdpa take a masked kernel that rounds otherwise than the unmasked call's: 1e-3 apart where
    the CPU has AVX-512, 2e-3 with AVX2 only)."""
    loaded, seq = load_model(str(ckpt)), _seqs()[2]  # a prompt of 8: chunks of 3, 3, 2
    fp32 = rescore.logprobs(rescore.Variant(loaded, SETTINGS["start"]), seq)
    chunked = rescore.logprobs(rescore.Variant(loaded, SETTINGS["prefill-chunk=3"]), seq)
    np.testing.assert_allclose(chunked, fp32, rtol=0, atol=1e-5)
    np.testing.assert_allclose(chunked, _chunked(data.load(ckpt), seq, 3), rtol=0, atol=1e-6)
    bf16 = G.Setting("c", "", dtype="bfloat16", incremental=True, chunk=3)
    got = rescore.logprobs(rescore.Variant(loaded, bf16), seq)
    direct = _chunked(data.load(ckpt).to(torch.bfloat16), seq, 3)
    np.testing.assert_allclose(got, direct, rtol=0, atol=5e-3)


def test_the_engine_batch_equals_each_sequence_alone(ckpt: Path) -> None:
    """Left-padded prompts of other lengths (in chunks, with gaps of padding between them),
    rows decoded past their end: each row's logprobs are its own (float32)."""
    loaded, seqs = load_model(str(ckpt)), _seqs()
    for name in ("incremental", "prefill-chunk=3"):
        variant = rescore.Variant(loaded, SETTINGS[name])
        together = rescore.engine_logprobs(variant, seqs)
        for s, got in zip(seqs, together, strict=True):
            np.testing.assert_allclose(got, rescore.engine_logprobs(variant, [s])[0], rtol=0,
                                       atol=1e-5, err_msg=name)  # fmt: skip


def test_right_padding_and_eager_attention(ckpt: Path) -> None:
    loaded, seqs = load_model(str(ckpt)), _seqs()[:3]
    fp32 = [rescore.logprobs(rescore.Variant(loaded, SETTINGS["start"]), s) for s in seqs]
    right = rescore.batch_logprobs(rescore.Variant(loaded, SETTINGS["padded-right"]), seqs, "right")
    for a, b in zip(right, fp32, strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)
    eager = data.load(ckpt)
    eager.set_attn_implementation("eager")
    got = rescore.logprobs(rescore.Variant(loaded, SETTINGS["attn-eager"]), seqs[1])
    want = data.full_logprobs(eager, seqs[1].ids)[seqs[1].targets]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    assert rescore.attention_of(loaded.module) == "sdpa"  # the start's own: attn-sdpa is not run


def test_fp8_scales_per_head() -> None:
    """Each KV head's scale from its own largest value: a head of small values keeps its
    precision, where a per-tensor scale set by a large head rounds it away."""
    x = torch.zeros(1, 2, 3, 4)
    x[0, 0] = 1e4
    x[0, 1] = torch.tensor([1e-3, 2e-3, 3e-3, 4e-3])
    head = KV._round(x, "fp8-head", {}, "k")
    tensor = KV._round(x, "fp8", {}, "k")
    np.testing.assert_allclose(head[0, 1].numpy(), x[0, 1].numpy(), rtol=0.07)
    assert torch.all(tensor[0, 1] == 0)  # under the per-tensor scale's smallest step
    assert torch.equal(head[0, 0], x[0, 0])


def test_a_bf16_trainer_needs_start_bf16(runs: Path, ckpt: Path) -> None:
    """The `bf16` run: a bfloat16 trainer, the engine's bf16 path. From a bf16 start the one
    change that reproduces it is the decode path; from float32 the trainer check fails."""
    b = api.bisect("bf16", str(ckpt), store=runs, start="bf16",
                   settings=["fp32", "incremental", "kv-fp8"])  # fmt: skip
    assert b.start == "bf16" and b.outcomes[0].what.startswith("bfloat16")
    assert b.best == "incremental" and b.best_change == "incremental" and b.reproduces
    assert "bf16+incremental" not in {s.name for s in G.grid(start="bf16")}
    with pytest.raises(ModelMismatchError, match="--start bf16"):
        api.bisect("bf16", str(ckpt), store=runs, settings=["incremental"])
    with pytest.raises(UsageError, match="--start fp16"):
        api.bisect("bf16", str(ckpt), store=runs, start="fp16")
