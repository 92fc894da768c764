"""The family's OLMo 2 member (sample_data/gen/family_olmo2.py, family.py --arch olmo2) on a tiny
random OLMo 2: the engine's bf16 path departs from the fp32 trainer a little, its kernel sees the
keys normed over the whole projection and rotated, and its faults (fp8 KV cache, split-KV merges)
act there, the bf16 norm fault reaches the post-norms and the query and key norms, the fp32 head
replaces the untied one."""

from __future__ import annotations

import pytest

from tests.sample_data.family_deps import family_deps

torch = family_deps()

from gen.family_engine import (  # noqa: E402
    EngineKernel,
    prepare_engine,
)
from gen.family_model import VOCAB, build, new_model  # noqa: E402
from gen.family_olmo2 import olmo2_config  # noqa: E402
from transformers import Olmo2Config, Olmo2ForCausalLM  # noqa: E402
from transformers.models.olmo2.modeling_olmo2 import Olmo2RMSNorm  # noqa: E402

from tests.sample_data.family_tiny import (  # noqa: E402
    assert_decode_is_the_trainers_and_fp8_rounds_keys,
    assert_fp32_head_replaces_the_untied_head,
    assert_split_kv_merges_act_past_the_split,
    bf16_departure,
    ids,
    kl,
    recorded_prefill,
    tiny_state,
)

HEAD = 8
HEADS = 4
KEY_NORM = 3.0  # every k_norm weight: the RMS of each cached key over all heads together


def tiny_config() -> Olmo2Config:
    return Olmo2Config(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                       num_attention_heads=HEADS, num_key_value_heads=HEADS,
                       max_position_embeddings=256,
                       rope_parameters={"rope_type": "default", "rope_theta": 500_000.0},
                       tie_word_embeddings=False, rms_norm_eps=1e-6, pad_token_id=None,
                       attn_implementation="sdpa")  # fmt: skip


def test_the_olmo2_member_is_an_untied_sdpa_olmo2_with_post_norms() -> None:
    config = olmo2_config(VOCAB)
    assert config.rope_parameters["rope_theta"] == 500_000.0
    assert config.num_key_value_heads == config.num_attention_heads == 4
    model = new_model(config)
    assert isinstance(model, Olmo2ForCausalLM)
    assert model.config._attn_implementation == "sdpa" == config._attn_implementation
    assert model.lm_head.weight is not model.model.embed_tokens.weight
    layer = model.model.layers[0]
    assert not hasattr(layer, "input_layernorm")  # no norm before a block
    for norm in (layer.post_attention_layernorm, layer.post_feedforward_layernorm):
        assert isinstance(norm, Olmo2RMSNorm) and norm.weight.shape == (128,)
    attn = layer.self_attn
    assert attn.q_norm.weight.shape == (128,) and attn.k_norm.weight.shape == (128,)
    assert attn.q_proj.bias is None and attn.k_proj.out_features == 128
    assert layer.mlp.gate_proj.out_features == 352 and len(model.model.layers) == 4
    assert sum(p.numel() for p in model.parameters()) < 1_100_000


def test_the_bf16_engine_departs_a_little_from_the_fp32_trainer() -> None:
    departure, largest = bf16_departure(tiny_config())
    assert 1e-7 < departure < 1e-2
    assert largest > 5.0  # the distributions are not flat: the check has teeth


def test_the_kernel_sees_keys_normed_across_the_heads_and_the_fp8_cache_rounds_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every layer's attention goes through the engine's kernel in prefill and decode (an fp32
    engine: it then gives the trainer's logprobs); the keys it holds are k_norm's over the whole
    projection, then rotated: their RMS over all heads together is the norm's weight, and no one
    head's is; the fp8 cache rounds them to e4m3 and moves the logits, a little."""
    config = tiny_config()
    state = tiny_state(config, key_norm=KEY_NORM)
    engine, seen, out = recorded_prefill(
        monkeypatch, config, state, lambda e: e.model.layers[0].self_attn.k_norm
    )
    keys = out.view(1, 12, HEADS, HEAD).transpose(1, 2)
    kernel_keys = seen[0][2]
    assert torch.equal(kernel_keys[:, :, 0], keys[:, :, 0])  # position 0: no rotation
    assert (kernel_keys[:, :, 1:] - keys[:, :, 1:]).abs().max() > 1e-2
    together = kernel_keys.pow(2).mean((1, 3)).sqrt()  # over heads and dimensions
    assert (together - KEY_NORM).abs().max() < 1e-3
    per_head = kernel_keys.pow(2).mean(-1).sqrt()
    assert (per_head - KEY_NORM).abs().max() > 0.1
    assert_decode_is_the_trainers_and_fp8_rounds_keys(config, state, engine, seen)


def test_the_split_kv_merges_act_past_the_split_only() -> None:
    assert_split_kv_merges_act_past_the_split(tiny_config())


def test_the_bf16_norm_statistics_reach_the_post_norms_and_the_qk_norms() -> None:
    """Every RMSNorm (the two post-norms and the query and key norms of a layer, the final one)
    computes its statistics in bf16 and multiplies its weight there: close to OLMo 2's float
    statistics with the weight multiplied in float, not equal."""
    config = tiny_config()
    state = tiny_state(config)
    plain = prepare_engine(build(config, state, torch.bfloat16), EngineKernel(), False, False)
    device = prepare_engine(build(config, state, torch.bfloat16), EngineKernel(), False, True)
    norms = [m for m in device.modules() if isinstance(m, Olmo2RMSNorm)]
    assert len(norms) == 4 * 2 + 1 and all("forward" in vars(m) for m in norms)
    x = (torch.randn(3, 5, 32, generator=torch.Generator().manual_seed(4)) * 3.0).to(torch.bfloat16)
    for name in ("post_attention_layernorm", "post_feedforward_layernorm"):
        want = getattr(plain.model.layers[0], name)(x).float()
        got = getattr(device.model.layers[0], name)(x).float()
        assert not torch.equal(got, want) and torch.allclose(got, want, rtol=0.05, atol=0.05)
    want = plain.model.layers[1].self_attn.k_norm(x).float()
    got = device.model.layers[1].self_attn.k_norm(x).float()
    assert not torch.equal(got, want) and torch.allclose(got, want, rtol=0.05, atol=0.05)
    y = ids(2, 30)
    with torch.no_grad():
        a, b = plain(y).logits, device(y).logits
    assert not torch.equal(a, b) and kl(a, b) < 1e-2


def test_the_fp32_head_replaces_the_untied_head() -> None:
    assert_fp32_head_replaces_the_untied_head(tiny_config())
