"""The family's Qwen3 member (sample_data/gen/family_qwen3.py, family.py --arch qwen3) on a
tiny random Qwen3: the engine's bf16 path departs from the fp32 trainer a little, its kernel
sees the normed keys of every layer and its faults (fp8 KV cache, split-KV merges) act there,
the bf16 norm fault reaches the per-head query and key norms, the fp32 head replaces the tied
one."""

from __future__ import annotations

import pytest

from tests.sample_data.family_deps import family_deps

torch = family_deps()

import gen.family_engine as engine_module  # noqa: E402
from gen.family_engine import (  # noqa: E402
    EngineKernel,
    prepare_engine,
    score,
)
from gen.family_model import VOCAB, build, new_model  # noqa: E402
from gen.family_qwen3 import qwen3_config  # noqa: E402
from transformers import Qwen3Config, Qwen3ForCausalLM  # noqa: E402
from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm  # noqa: E402

from tests.sample_data.family_tiny import (  # noqa: E402
    assert_split_kv_merges_act_past_the_split,
    bf16_departure,
    decode,
    fp32_head_logits,
    ids,
    kl,
    tiny_state,
)

HEAD = 8
KEY_NORM = 3.0  # every k_norm weight: each cached key's RMS over its head


def tiny_config() -> Qwen3Config:
    return Qwen3Config(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=HEAD,
                       max_position_embeddings=256,
                       rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0},
                       tie_word_embeddings=True, rms_norm_eps=1e-6,
                       attn_implementation="sdpa")  # fmt: skip


def test_the_qwen3_member_is_a_tied_sdpa_qwen3_with_qk_norms() -> None:
    config = qwen3_config(VOCAB)
    assert config.layer_types == ["full_attention"] * 4 and config.sliding_window is None
    assert config.rope_parameters["rope_theta"] == 1_000_000.0
    model = new_model(config)
    assert isinstance(model, Qwen3ForCausalLM)
    assert model.config._attn_implementation == "sdpa" == config._attn_implementation
    assert model.lm_head.weight is model.model.embed_tokens.weight
    attn = model.model.layers[0].self_attn
    assert isinstance(attn.q_norm, Qwen3RMSNorm) and attn.k_norm.weight.shape == (32,)
    assert attn.q_proj.bias is None and attn.k_proj.bias is None and attn.v_proj.bias is None
    assert (attn.q_proj.out_features, attn.k_proj.out_features) == (128, 64)
    assert sum(p.numel() for p in model.parameters()) < 1_000_000


def test_the_bf16_engine_departs_a_little_from_the_fp32_trainer() -> None:
    departure, largest = bf16_departure(tiny_config())
    assert 1e-7 < departure < 1e-2
    assert largest > 5.0  # the distributions are not flat: the check has teeth


def test_the_kernel_sees_every_layers_normed_keys_and_the_fp8_cache_rounds_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every layer's attention goes through the engine's kernel in prefill and decode (an fp32
    engine: it then gives the trainer's logprobs); the keys the kernel holds, the cache's, are
    k_norm's and rotated (each head's RMS the norm's weight, kept by the rotation); the fp8
    cache rounds them and moves the logits, a little."""
    config = tiny_config()
    state = tiny_state(config, key_norm=KEY_NORM)
    seen: list[tuple[int, int, float]] = []
    sdpa = engine_module.sdpa_attention_forward

    def record(
        module: torch.nn.Module, q: torch.Tensor, k: torch.Tensor, *rest: object, **kw: object
    ) -> object:
        rms = float(k.float().pow(2).mean(-1).sqrt().sub(KEY_NORM).abs().max())
        seen.append((module.layer_idx, q.shape[-2], rms))
        return sdpa(module, q, k, *rest, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(engine_module, "sdpa_attention_forward", record)
    contexts, plain = decode(config, state, EngineKernel(), torch.float32)
    assert {layer for layer, _, _ in seen} == {0, 1}
    assert len([n for _, n, _ in seen if n == 1]) == 2 * 29  # every decode step, every layer
    assert max(rms for _, _, rms in seen) < 1e-3
    seqs = [c + tokens for c, (tokens, _) in zip(contexts, plain, strict=True)]
    rows = score(build(config, state, torch.float32), seqs, 1.5)
    for c, (_, lps), row in zip(contexts, plain, rows, strict=True):
        assert lps == pytest.approx(row[len(c) :], abs=1e-4)
    seen.clear()
    fp32 = [build(config, state, torch.float32) for _ in range(2)]
    engine = prepare_engine(fp32[0], EngineKernel(), False, False)
    fp8 = prepare_engine(fp32[1], EngineKernel(fp8_kv=True), False, False)
    x = ids(2, 30)
    with torch.no_grad():
        want, got = engine(x).logits, fp8(x).logits
    assert 1e-7 < kl(want, got) < 1e-2
    assert 0.01 < max(rms for _, _, rms in seen) < 0.5  # the keys rounded to e4m3


def test_the_split_kv_merges_act_past_the_split_only() -> None:
    assert_split_kv_merges_act_past_the_split(tiny_config())


def test_the_bf16_norm_statistics_reach_the_per_head_norms() -> None:
    config = tiny_config()
    state = tiny_state(config)
    plain = prepare_engine(build(config, state, torch.bfloat16), EngineKernel(), False, False)
    device = prepare_engine(build(config, state, torch.bfloat16), EngineKernel(), False, True)
    norms = [m for m in device.modules() if isinstance(m, Qwen3RMSNorm)]
    assert len(norms) == 2 * 4 + 1 and all("forward" in vars(m) for m in norms)
    attn = device.model.layers[0].self_attn
    x = (torch.randn(3, 5, 4, HEAD, generator=torch.Generator().manual_seed(4)) * 3.0).to(
        torch.bfloat16
    )
    want = plain.model.layers[0].self_attn.k_norm(x).float()  # statistics in float
    got = attn.k_norm(x).float()
    assert not torch.equal(got, want) and torch.allclose(got, want, rtol=0.05, atol=0.05)
    y = ids(2, 30)
    with torch.no_grad():
        a, b = plain(y).logits, device(y).logits
    assert not torch.equal(a, b) and kl(a, b) < 1e-2


def test_the_fp32_head_replaces_the_tied_head() -> None:
    raw, logits, plain = fp32_head_logits(tiny_config())
    assert logits.dtype == torch.float32
    assert torch.allclose(logits, raw, atol=1e-5)
    assert not torch.equal(logits, plain.float())
