"""The family's Cohere member (sample_data/gen/family_cohere.py, family.py --arch cohere) on a tiny
random Cohere: the engine's bf16 path departs from the fp32 trainer a little, its kernel sees the
keys rotated on interleaved pairs and its faults (fp8 KV cache, split-KV merges) act there, the
bf16 norm fault takes Cohere's bias-free LayerNorm form in every norm, the fp32 head replaces the
tied one with the logit scale after it."""

from __future__ import annotations

import pytest

from tests.sample_data.family_deps import family_deps

torch = family_deps()

from gen.family_cohere import LOGIT_SCALE, cohere_config, cohere_norm_bf16  # noqa: E402
from gen.family_engine import (  # noqa: E402
    EngineKernel,
    Fp32Head,
    prepare_engine,
)
from gen.family_model import VOCAB, build, new_model  # noqa: E402
from transformers import CohereConfig, CohereForCausalLM  # noqa: E402
from transformers.models.cohere.modeling_cohere import CohereLayerNorm  # noqa: E402

from tests.sample_data.family_tiny import (  # noqa: E402
    assert_decode_is_the_trainers_and_fp8_rounds_keys,
    assert_split_kv_merges_act_past_the_split,
    bf16_departure,
    ids,
    kl,
    recorded_prefill,
    tiny_state,
)

HEAD = 8
HEADS = 4


def tiny_config() -> CohereConfig:
    return CohereConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                        num_attention_heads=HEADS, num_key_value_heads=HEADS,
                        max_position_embeddings=256,
                        rope_parameters={"rope_type": "default", "rope_theta": 500_000.0},
                        logit_scale=0.5, tie_word_embeddings=True, layer_norm_eps=1e-5,
                        pad_token_id=None, bos_token_id=None, eos_token_id=None,
                        attn_implementation="sdpa")  # fmt: skip


def test_the_cohere_member_is_a_tied_sdpa_command_r_with_a_logit_scale() -> None:
    config = cohere_config(VOCAB)
    assert config.rope_parameters["rope_theta"] == 500_000.0 and not config.use_qk_norm
    assert config.num_key_value_heads == config.num_attention_heads == 4
    model = new_model(config)
    assert isinstance(model, CohereForCausalLM) and model.logit_scale == LOGIT_SCALE == 1 / 16
    assert model.config._attn_implementation == "sdpa" == config._attn_implementation
    assert model.lm_head.weight is model.model.embed_tokens.weight
    layer = model.model.layers[0]
    assert isinstance(layer.input_layernorm, CohereLayerNorm)
    assert not hasattr(layer, "post_attention_layernorm")  # one norm before a parallel block
    assert not hasattr(layer.input_layernorm, "bias")
    assert layer.self_attn.k_proj.out_features == 128 and layer.mlp.up_proj.out_features == 352
    assert len(model.model.layers) == 4 and sum(p.numel() for p in model.parameters()) < 1_000_000


def test_the_bf16_engine_departs_a_little_from_the_fp32_trainer() -> None:
    departure, largest = bf16_departure(tiny_config())
    assert 1e-7 < departure < 1e-2
    assert largest > 1.0  # the distributions are not flat: the check has teeth


def test_the_kernel_sees_keys_rotated_on_interleaved_pairs_and_the_fp8_cache_rounds_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every layer's attention goes through the engine's kernel in prefill and decode (an fp32
    engine: it then gives the trainer's logprobs); the keys it holds are the projected ones
    rotated on interleaved pairs (dimensions 2i and 2i+1 keep their joint length, the halves'
    pairs i and i + 4 do not); the fp8 cache rounds them to e4m3 and moves the logits, a
    little."""
    config = tiny_config()
    state = tiny_state(config)
    engine, seen, out = recorded_prefill(
        monkeypatch, config, state, lambda e: e.model.layers[0].self_attn.k_proj
    )
    keys = out.view(1, 12, HEADS, HEAD).transpose(1, 2)
    kernel_keys = seen[0][2]
    assert torch.equal(kernel_keys[:, :, 0], keys[:, :, 0])  # position 0: no rotation
    assert (kernel_keys[:, :, 1:] - keys[:, :, 1:]).abs().max() > 1e-2

    def lengths(k: torch.Tensor, a: slice, b: slice) -> torch.Tensor:
        return (k[..., a].pow(2) + k[..., b].pow(2)).sqrt()

    interleaved = (slice(0, None, 2), slice(1, None, 2))
    halves = (slice(0, HEAD // 2), slice(HEAD // 2, None))
    assert torch.allclose(lengths(kernel_keys, *interleaved), lengths(keys, *interleaved),
                          atol=1e-5)  # fmt: skip
    assert (lengths(kernel_keys, *halves) - lengths(keys, *halves)).abs().max() > 1e-2
    assert_decode_is_the_trainers_and_fp8_rounds_keys(config, state, engine, seen)


def test_the_split_kv_merges_act_past_the_split_only() -> None:
    assert_split_kv_merges_act_past_the_split(tiny_config())


def test_the_bf16_norm_statistics_take_coheres_layernorm_form_in_every_norm() -> None:
    """Every Cohere LayerNorm (one a layer and the final one) computes its mean and variance in
    bf16, then its weight: close to Cohere's float statistics, not equal; a constant row is
    normed to 0 (no bias); a unit weight leaves the statistics alone: mean 0, variance 1."""
    config = tiny_config()
    state = tiny_state(config)
    plain = prepare_engine(build(config, state, torch.bfloat16), EngineKernel(), False, False)
    device = prepare_engine(build(config, state, torch.bfloat16), EngineKernel(), False, True)
    norms = [m for m in device.modules() if isinstance(m, CohereLayerNorm)]
    assert len(norms) == 2 + 1 and all("forward" in vars(m) for m in norms)
    x = (torch.randn(3, 5, 32, generator=torch.Generator().manual_seed(4)) * 3.0 + 1.0).to(
        torch.bfloat16
    )
    want = plain.model.layers[0].input_layernorm(x).float()  # statistics in float
    got = device.model.layers[0].input_layernorm(x).float()
    assert not torch.equal(got, want) and torch.allclose(got, want, rtol=0.05, atol=0.05)
    norm = device.model.layers[0].input_layernorm
    assert torch.equal(norm(torch.full((2, 32), 7.0, dtype=torch.bfloat16)).float(),
                       torch.zeros(2, 32))  # fmt: skip
    unit = CohereLayerNorm(32).to(torch.bfloat16)
    normed = cohere_norm_bf16(unit, x).float()
    assert normed.mean(-1).abs().max() < 0.05 and (normed.var(-1, False) - 1).abs().max() < 0.05
    y = ids(2, 30)
    with torch.no_grad():
        a, b = plain(y).logits, device(y).logits
    assert not torch.equal(a, b) and kl(a, b) < 1e-2


def test_the_fp32_head_replaces_the_tied_head_and_the_scale_follows_it() -> None:
    config = tiny_config()
    state = tiny_state(config)
    engine = prepare_engine(build(config, state, torch.bfloat16), EngineKernel(), True, False)
    plain = prepare_engine(build(config, state, torch.bfloat16), EngineKernel(), False, False)
    assert isinstance(engine.lm_head, Fp32Head) and engine.lm_head.weight.dtype == torch.float32
    assert torch.equal(engine.lm_head.weight, engine.model.embed_tokens.weight.float())
    x = ids(2, 20)
    with torch.no_grad():
        hidden = engine.model(x).last_hidden_state.float()
        logits = engine(x).logits
        assert logits.dtype == torch.float32
        want = (hidden @ engine.lm_head.weight.t()) * 0.5
        assert torch.allclose(logits, want, atol=1e-5)
        assert not torch.equal(logits, plain(x).logits.float())
