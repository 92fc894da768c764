"""The family's Gemma2 member (sample_data/gen/family_gemma2.py, family.py --arch gemma2) on a
tiny random Gemma2: the engine's bf16 path departs from the fp32 trainer a little, each engine
knob that has a Gemma2 form uses it, and the sliding window is kept through the KV cache."""

from __future__ import annotations

import pytest

from tests.sample_data.family_deps import family_deps

torch = family_deps()

import gen.family_engine as engine_module  # noqa: E402
from gen.family_engine import (  # noqa: E402
    EngineKernel,
    Sampler,
    bf16_norm_stats,
    decode_turn,
    prepare_engine,
    score,
)
from gen.family_gemma2 import gemma2_config  # noqa: E402
from gen.family_model import build, new_model  # noqa: E402
from transformers import Gemma2Config, Gemma2ForCausalLM  # noqa: E402
from transformers.models.gemma2.modeling_gemma2 import Gemma2RMSNorm  # noqa: E402

from tests.sample_data.family_tiny import (  # noqa: E402
    bf16_departure,
    fp32_head_logits,
    ids,
    kl,
    tiny_state,
)

WINDOW = 8


def tiny_config(window: int = WINDOW, softcap: float = 30.0) -> Gemma2Config:
    return Gemma2Config(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                        max_position_embeddings=256, sliding_window=window,
                        final_logit_softcapping=softcap, attn_logit_softcapping=None,
                        query_pre_attn_scalar=8, tie_word_embeddings=True, rms_norm_eps=1e-6,
                        attn_implementation="sdpa")  # fmt: skip


def test_the_gemma2_member_is_a_tied_sdpa_gemma2_with_alternating_windows() -> None:
    config = gemma2_config(1024)
    assert config.layer_types == ["sliding_attention", "full_attention"] * 2
    model = new_model(config)
    assert isinstance(model, Gemma2ForCausalLM)
    assert model.config._attn_implementation == "sdpa" == config._attn_implementation
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert model.config.final_logit_softcapping == 30.0
    assert sum(p.numel() for p in model.parameters()) < 1_000_000


def test_the_bf16_engine_departs_a_little_from_the_fp32_trainer() -> None:
    departure, largest = bf16_departure(tiny_config())
    assert 1e-7 < departure < 1e-2
    assert largest > 5.0  # the distributions are not flat: the check has teeth


def test_the_bf16_norm_statistics_take_gemma2s_form() -> None:
    torch.manual_seed(4)
    norm = Gemma2RMSNorm(32, eps=1e-6)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(32) * 0.5)
    norm = norm.to(torch.bfloat16)
    x = (torch.randn(6, 32) * 3.0).to(torch.bfloat16)
    want = norm(x).float()  # statistics in float, (1 + w)
    holder = torch.nn.Sequential(norm)
    bf16_norm_stats(holder)  # type: ignore[arg-type]
    got = norm(x).float()
    assert got.dtype == want.dtype and not torch.equal(got, want)
    assert torch.allclose(got, want, rtol=0.05, atol=0.05)  # (1 + w), not w

    config = tiny_config()
    state = tiny_state(config)
    plain = prepare_engine(build(config, state, torch.bfloat16), EngineKernel(), False, False)
    device = prepare_engine(build(config, state, torch.bfloat16), EngineKernel(), False, True)
    x = ids(2, 30)
    with torch.no_grad():
        assert not torch.equal(plain(x).logits, device(x).logits)
        assert kl(plain(x).logits, device(x).logits) < 1e-2


def test_the_fp32_head_replaces_the_tied_head_and_the_soft_cap_still_applies() -> None:
    raw, logits, plain = fp32_head_logits(tiny_config(softcap=2.0))  # a cap the raw logits pass
    assert logits.dtype == torch.float32 and raw.abs().max() > 4.0
    assert torch.allclose(logits, 2.0 * torch.tanh(raw / 2.0), atol=1e-5)
    assert not torch.equal(logits, plain.float())


def test_sliding_window_decode_through_the_cache_matches_the_trainer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An fp32 engine (the engine's kernel, left padding, the KV cache: the sliding layers keep
    the last WINDOW - 1 keys) gives the trainer's logprobs well past the window; a trainer with
    no window does not, and the masks the kernel is given hold the window."""
    config = tiny_config()
    state = tiny_state(config)
    masks: list[tuple[int | None, int, torch.Tensor | None]] = []
    sdpa = engine_module.sdpa_attention_forward

    def record(module: torch.nn.Module, q: torch.Tensor, *rest: object, **kw: object) -> object:
        mask = rest[2]
        masks.append((kw.get("sliding_window"), q.shape[-2], mask))  # type: ignore[arg-type]
        return sdpa(module, q, *rest, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(engine_module, "sdpa_attention_forward", record)
    engine = prepare_engine(build(config, state, torch.float32), EngineKernel(), False, False)
    contexts = [ids(1, 5, 5)[0].tolist(), ids(1, 12, 6)[0].tolist()]
    sampler = Sampler(temperature=1.5)  # diverse enough not to settle into a repeated token
    outs = decode_turn(engine, contexts, sampler, set(), 30, 30, torch.Generator().manual_seed(7))
    seqs = [c + tokens for c, (tokens, _) in zip(contexts, outs, strict=True)]
    rows = score(build(config, state, torch.float32), seqs, 1.5)
    wide = config.to_dict() | {"sliding_window": 10_000}
    unwindowed = score(build(Gemma2Config(**wide), state, torch.float32), seqs, 1.5)
    for c, (tokens, lps), row, other in zip(contexts, outs, rows, unwindowed, strict=True):
        assert len(tokens) == 30
        assert lps == pytest.approx(row[len(c) :], abs=1e-4)
        far = [abs(a - b) for a, b in zip(lps, other[len(c) :], strict=True)][WINDOW:]
        assert max(far) > 1e-2  # the window matters past it: the match above is a real check
    prefill = [(w, m) for w, n, m in masks if n > 1]
    assert {w for w, _ in prefill} == {WINDOW, None}
    for window, mask in prefill:  # row 1 is unpadded, its last query sees WINDOW keys or all 12
        assert mask is not None and int(mask[1, 0, -1].sum()) == (12 if window is None else WINDOW)
    last = [(w, m) for w, n, m in masks[-2:]]
    assert last[0][0] == WINDOW and last[0][1] is not None
    assert last[0][1].shape[-1] == WINDOW  # the cache's sliding layer: WINDOW - 1 keys + 1
