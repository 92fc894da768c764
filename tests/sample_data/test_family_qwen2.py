"""The family's Qwen2 member (sample_data/gen/family_qwen2.py, family.py --arch qwen2) on a tiny
random Qwen2: the engine's bf16 path departs from the fp32 trainer a little, its kernel sees the
keys with their projection's bias, rotated, and its faults (fp8 KV cache, split-KV merges) act
there, the bf16 norm fault reaches every RMSNorm, the fp32 head replaces the tied one."""

from __future__ import annotations

import pytest

from tests.sample_data.family_deps import family_deps

torch = family_deps()

from gen.family_engine import EngineKernel, prepare_engine  # noqa: E402
from gen.family_model import VOCAB, build, new_model  # noqa: E402
from gen.family_qwen2 import qwen2_config  # noqa: E402
from transformers import Qwen2Config, Qwen2ForCausalLM  # noqa: E402
from transformers.models.qwen2.modeling_qwen2 import Qwen2RMSNorm  # noqa: E402

from tests.sample_data.family_tiny import (  # noqa: E402
    assert_decode_is_the_trainers_and_fp8_rounds_keys,
    assert_split_kv_merges_act_past_the_split,
    bf16_departure,
    fp32_head_logits,
    ids,
    kl,
    recorded_prefill,
    tiny_state,
)

HEAD = 8
KV_HEADS = 2


def tiny_config() -> Qwen2Config:
    return Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=KV_HEADS,
                       max_position_embeddings=256,
                       rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0},
                       use_sliding_window=False, tie_word_embeddings=True, rms_norm_eps=1e-6,
                       pad_token_id=None, attn_implementation="sdpa")  # fmt: skip


def test_the_qwen2_member_is_a_tied_sdpa_qwen2_with_qkv_biases() -> None:
    config = qwen2_config(VOCAB)
    assert config.rope_parameters["rope_theta"] == 1_000_000.0
    assert config.layer_types == ["full_attention"] * 4
    model = new_model(config)
    assert isinstance(model, Qwen2ForCausalLM)
    assert model.config._attn_implementation == "sdpa" == config._attn_implementation
    assert model.lm_head.weight is model.model.embed_tokens.weight
    attn = model.model.layers[0].self_attn
    assert attn.q_proj.bias.shape == (128,) and attn.k_proj.bias.shape == (64,)
    assert attn.v_proj.bias.shape == (64,) and attn.o_proj.bias is None
    assert isinstance(model.model.layers[0].input_layernorm, Qwen2RMSNorm)
    assert sum(p.numel() for p in model.parameters()) < 1_000_000


def test_the_bf16_engine_departs_a_little_from_the_fp32_trainer() -> None:
    departure, largest = bf16_departure(tiny_config())
    assert 1e-7 < departure < 1e-2
    assert largest > 5.0  # the distributions are not flat: the check has teeth


def test_the_kernel_sees_the_biased_keys_and_the_fp8_cache_rounds_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every layer's attention goes through the engine's kernel in prefill and decode (an fp32
    engine: it then gives the trainer's logprobs); the keys it holds are the projection's
    output with its bias, rotated (position 0 as projected); the fp8 cache rounds them to e4m3
    and moves the logits, a little."""
    config = tiny_config()
    state = tiny_state(config)
    state["model.layers.0.self_attn.k_proj.bias"] = torch.full((KV_HEADS * HEAD,), 2.0)
    engine, seen, out = recorded_prefill(
        monkeypatch, config, state, lambda e: e.model.layers[0].self_attn.k_proj
    )
    keys = out.view(1, 12, KV_HEADS, HEAD).transpose(1, 2)
    kernel_keys = seen[0][2]
    assert torch.equal(kernel_keys[:, :, 0], keys[:, :, 0])  # position 0: no rotation
    assert (kernel_keys[:, :, 1:] - keys[:, :, 1:]).abs().max() > 1e-2
    assert kernel_keys[:, :, 0].mean() > 1.0  # the bias (2.0) is in the cached keys
    assert_decode_is_the_trainers_and_fp8_rounds_keys(config, state, engine, seen)


def test_the_split_kv_merges_act_past_the_split_only() -> None:
    assert_split_kv_merges_act_past_the_split(tiny_config())


def test_the_bf16_norm_statistics_reach_every_norm() -> None:
    config = tiny_config()
    state = tiny_state(config)
    plain = prepare_engine(build(config, state, torch.bfloat16), EngineKernel(), False, False)
    device = prepare_engine(build(config, state, torch.bfloat16), EngineKernel(), False, True)
    norms = [m for m in device.modules() if isinstance(m, Qwen2RMSNorm)]
    assert len(norms) == 2 * 2 + 1 and all("forward" in vars(m) for m in norms)
    x = (torch.randn(3, 5, 32, generator=torch.Generator().manual_seed(4)) * 3.0).to(torch.bfloat16)
    want = plain.model.layers[1].post_attention_layernorm(x).float()
    got = device.model.layers[1].post_attention_layernorm(x).float()
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
