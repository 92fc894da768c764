"""The GPT-2 member of the family (sample_data/gen/family_gpt2.py, family.py --arch gpt2) on a
tiny random GPT-2, as the other members' files check theirs: the engine's bf16 path departs
from the fp32 trainer a little, its kernel sees every layer's keys (unrotated: GPT-2's
positions are in its embeddings) and its faults (fp8 KV cache, split-KV merges) act there, the
bf16 norm fault takes the LayerNorm's form in every norm, the fp32 head replaces the tied one."""

from __future__ import annotations

import pytest

from tests.sample_data.family_deps import family_deps

torch = family_deps()

from gen.family_engine import EngineKernel, prepare_engine  # noqa: E402
from gen.family_gpt2 import gpt2_config  # noqa: E402
from gen.family_model import VOCAB, build, new_model  # noqa: E402
from gen.family_size import MAX_CONTEXT  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402
from transformers.pytorch_utils import Conv1D  # noqa: E402

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

HEAD = 16  # the tiny GPT-2's head width


def tiny_gpt2() -> GPT2Config:
    return GPT2Config(vocab_size=64, n_embd=32, n_inner=48, n_layer=2, n_head=2, n_positions=256,
                      activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0,
                      attn_pdrop=0.0, bos_token_id=None, eos_token_id=None,
                      tie_word_embeddings=True, attn_implementation="sdpa")  # fmt: skip


def test_the_gpt2_member_is_a_tied_sdpa_gpt2_of_the_family_size() -> None:
    config = gpt2_config(VOCAB)
    assert config.n_positions == MAX_CONTEXT and config.activation_function == "gelu_new"
    assert (config.resid_pdrop, config.embd_pdrop, config.attn_pdrop) == (0.0, 0.0, 0.0)
    model = new_model(config)
    assert isinstance(model, GPT2LMHeadModel)
    assert model.config._attn_implementation == "sdpa" == config._attn_implementation
    assert model.lm_head.weight is model.transformer.wte.weight
    assert model.transformer.wpe.weight.shape == (MAX_CONTEXT, 128)  # learned positions
    assert not any("rotary" in name for name, _ in model.named_modules())
    layer = model.transformer.h[0]
    for norm in (layer.ln_1, layer.ln_2, model.transformer.ln_f):
        assert isinstance(norm, torch.nn.LayerNorm) and norm.bias is not None
    attn = layer.attn
    assert (attn.num_heads, attn.head_dim, attn.scaling) == (4, 32, 32**-0.5)
    assert isinstance(attn.c_attn, Conv1D) and attn.c_attn.weight.shape == (128, 3 * 128)
    assert attn.c_attn.bias is not None and isinstance(attn.c_proj, Conv1D)
    assert layer.mlp.c_fc.nf == 352 and len(model.transformer.h) == 4
    assert sum(p.numel() for p in model.parameters()) < 1_000_000


def test_the_gpt2_bf16_engine_departs_a_little_from_the_fp32_trainer() -> None:
    departure, largest = bf16_departure(tiny_gpt2())
    assert 1e-7 < departure < 1e-2
    assert largest > 5.0  # the distributions are not flat: the check has teeth


def test_the_kernel_sees_every_gpt2_layers_keys_and_the_fp8_cache_rounds_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every layer's attention goes through the engine's kernel in prefill and decode (an fp32
    engine: it then gives the trainer's logprobs); the keys the kernel holds are c_attn's
    projected keys as they are (no rotation: the positions were added to the embeddings); the
    fp8 cache rounds them to e4m3 and moves the logits, a little."""
    config = tiny_gpt2()
    state = tiny_state(config)
    engine, seen, out = recorded_prefill(
        monkeypatch, config, state, lambda e: e.transformer.h[0].attn.c_attn
    )
    keys = out.split(32, dim=-1)[1].view(1, 12, 2, HEAD).transpose(1, 2)
    assert torch.equal(seen[0][2], keys)
    assert_decode_is_the_trainers_and_fp8_rounds_keys(config, state, engine, seen)


def test_the_split_kv_merges_act_past_the_split_only_in_gpt2() -> None:
    """On sharper attention than `tiny_state`'s (c_attn's weights doubled, the attention
    logits four times larger): with `tiny_state`'s, the tiny GPT-2's attention is so near flat
    that the two partials' outputs are alike, and the fp8 rounding of their merge weights moves
    one row's logprobs by less than 1e-3."""
    config = tiny_gpt2()
    state = {k: v * 2.0 if "c_attn.weight" in k else v for k, v in tiny_state(config).items()}
    assert_split_kv_merges_act_past_the_split(config, state)


def test_the_bf16_layernorm_statistics_reach_every_gpt2_norm() -> None:
    """Every LayerNorm (ln_1 and ln_2 of each layer, ln_f) computes its mean and variance in
    bf16, weight and bias applied: close to torch's float statistics, not equal; a constant
    row is normed to the bias."""
    config = tiny_gpt2()
    state = tiny_state(config)
    plain = prepare_engine(build(config, state, torch.bfloat16), EngineKernel(), False, False)
    device = prepare_engine(build(config, state, torch.bfloat16), EngineKernel(), False, True)
    norms = [m for m in device.modules() if isinstance(m, torch.nn.LayerNorm)]
    assert len(norms) == 2 * 2 + 1 and all("forward" in vars(m) for m in norms)
    norm = device.transformer.h[0].ln_2
    x = (torch.randn(3, 5, 32, generator=torch.Generator().manual_seed(4)) * 3.0 + 1.0).to(
        torch.bfloat16
    )
    want = plain.transformer.h[0].ln_2(x).float()  # statistics in float
    got = norm(x).float()
    assert not torch.equal(got, want) and torch.allclose(got, want, rtol=0.05, atol=0.05)
    flat = torch.full((2, 32), 7.0, dtype=torch.bfloat16)
    assert torch.equal(norm(flat), norm.bias.expand(2, 32))
    y = ids(2, 30)
    with torch.no_grad():
        a, b = plain(y).logits, device(y).logits
    assert not torch.equal(a, b) and kl(a, b) < 1e-2


def test_the_fp32_head_replaces_gpt2s_tied_head() -> None:
    raw, logits, plain = fp32_head_logits(tiny_gpt2())
    assert logits.dtype == torch.float32
    assert torch.allclose(logits, raw, atol=1e-5)
    assert not torch.equal(logits, plain.float())
