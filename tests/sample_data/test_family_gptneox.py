"""The family's GPT-NeoX member (sample_data/gen/family_gptneox.py, family.py --arch gptneox) on
a tiny random GPT-NeoX: the engine's bf16 path departs from the fp32 trainer a little, its
kernel sees the partly rotated keys of every layer and its faults (fp8 KV cache, split-KV
merges) act there, the bf16 norm fault takes the LayerNorm's form in every norm, the fp32 head
replaces the untied one."""

from __future__ import annotations

import pytest

from tests.sample_data.family_deps import family_deps

torch = family_deps()

from gen.family_engine import (  # noqa: E402
    EngineKernel,
    prepare_engine,
)
from gen.family_gptneox import gptneox_config, layernorm_bf16  # noqa: E402
from gen.family_model import VOCAB, build, new_model  # noqa: E402
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM  # noqa: E402

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

HEAD = 16
ROTARY = 4  # a quarter of each head


def tiny_config() -> GPTNeoXConfig:
    return GPTNeoXConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                         num_attention_heads=2, max_position_embeddings=256, hidden_act="gelu",
                         rope_parameters={"rope_type": "default", "rope_theta": 10_000.0,
                                          "partial_rotary_factor": 0.25},
                         use_parallel_residual=True, tie_word_embeddings=False,
                         layer_norm_eps=1e-5, attn_implementation="sdpa")  # fmt: skip


def test_the_gptneox_member_is_an_untied_sdpa_pythia_of_the_family_size() -> None:
    config = gptneox_config(VOCAB)
    assert config.rope_parameters["rope_theta"] == 10_000.0
    assert config.rope_parameters["partial_rotary_factor"] == 0.25
    model = new_model(config)
    assert isinstance(model, GPTNeoXForCausalLM)
    assert model.config._attn_implementation == "sdpa" == config._attn_implementation
    assert model.lm_head.weight is not model.gpt_neox.embed_in.weight
    layer = model.gpt_neox.layers[0]
    assert layer.use_parallel_residual and model.config.hidden_act == "gelu"
    for norm in (layer.input_layernorm, layer.post_attention_layernorm):
        assert isinstance(norm, torch.nn.LayerNorm) and norm.bias is not None
    assert isinstance(model.gpt_neox.final_layer_norm, torch.nn.LayerNorm)
    attn = layer.attention
    assert (attn.head_size, attn.rotary_ndims) == (32, 8)
    assert attn.query_key_value.out_features == 3 * 128 and attn.query_key_value.bias is not None
    assert layer.mlp.dense_h_to_4h.out_features == 352 and len(model.gpt_neox.layers) == 4
    assert sum(p.numel() for p in model.parameters()) < 1_000_000


def test_the_bf16_engine_departs_a_little_from_the_fp32_trainer() -> None:
    departure, largest = bf16_departure(tiny_config())
    assert 1e-7 < departure < 1e-2
    assert largest > 5.0  # the distributions are not flat: the check has teeth


def test_the_kernel_sees_every_layers_partly_rotated_keys_and_the_fp8_cache_rounds_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every layer's attention goes through the engine's kernel in prefill and decode (an fp32
    engine: it then gives the trainer's logprobs); the keys the kernel holds are the projected
    ones with only their first quarter rotated; the fp8 cache rounds them to e4m3 and moves the
    logits, a little."""
    config = tiny_config()
    state = tiny_state(config)
    engine, seen, out = recorded_prefill(
        monkeypatch, config, state, lambda e: e.gpt_neox.layers[0].attention.query_key_value
    )
    keys = out.view(1, 12, 2, 3 * HEAD).transpose(1, 2).chunk(3, dim=-1)[1]
    kernel_keys = seen[0][2]
    assert torch.equal(kernel_keys[..., ROTARY:], keys[..., ROTARY:])  # not rotated
    assert torch.equal(kernel_keys[:, :, 0], keys[:, :, 0])  # position 0: no rotation
    assert (kernel_keys[:, :, 1:, :ROTARY] - keys[:, :, 1:, :ROTARY]).abs().max() > 1e-2
    assert_decode_is_the_trainers_and_fp8_rounds_keys(config, state, engine, seen)


def test_the_split_kv_merges_act_past_the_split_only() -> None:
    assert_split_kv_merges_act_past_the_split(tiny_config())


def test_the_bf16_layernorm_statistics_reach_every_norm() -> None:
    """Every LayerNorm (two a layer and the final one) computes its mean and variance in bf16,
    weight and bias applied: close to torch's float statistics, not equal; a constant row is
    normed to the bias."""
    config = tiny_config()
    state = tiny_state(config)
    plain = prepare_engine(build(config, state, torch.bfloat16), EngineKernel(), False, False)
    device = prepare_engine(build(config, state, torch.bfloat16), EngineKernel(), False, True)
    norms = [m for m in device.modules() if isinstance(m, torch.nn.LayerNorm)]
    assert len(norms) == 2 * 2 + 1 and all("forward" in vars(m) for m in norms)
    norm = device.gpt_neox.layers[0].post_attention_layernorm
    x = (torch.randn(3, 5, 32, generator=torch.Generator().manual_seed(4)) * 3.0 + 1.0).to(
        torch.bfloat16
    )
    want = plain.gpt_neox.layers[0].post_attention_layernorm(x).float()  # statistics in float
    got = norm(x).float()
    assert got.dtype == want.dtype and not torch.equal(got, want)
    assert torch.allclose(got, want, rtol=0.05, atol=0.05)
    flat = torch.full((2, 32), 7.0, dtype=torch.bfloat16)
    assert torch.equal(norm(flat), norm.bias.expand(2, 32))
    unit = torch.nn.LayerNorm(32).to(torch.bfloat16)  # weight 1, bias 0: the statistics alone
    normed = layernorm_bf16(unit, x).float()
    assert normed.mean(-1).abs().max() < 0.05 and (normed.var(-1, False) - 1).abs().max() < 0.05
    y = ids(2, 30)
    with torch.no_grad():
        a, b = plain(y).logits, device(y).logits
    assert not torch.equal(a, b) and kl(a, b) < 1e-2


def test_the_fp32_head_replaces_the_untied_head() -> None:
    assert_fp32_head_replaces_the_untied_head(tiny_config())
