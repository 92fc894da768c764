"""Tiny random members of the family for its tests (tests/sample_data/test_family_*.py): their
weights made sharper than the initial ones, token ids, and the KL of two sets of logits."""

from __future__ import annotations

from typing import Any

import pytest

from tests.sample_data.family_deps import family_deps

torch = family_deps()

import gen.family_engine as engine_module  # noqa: E402
from gen.family_engine import (  # noqa: E402
    EngineKernel,
    Sampler,
    decode_turn,
    prepare_engine,
    score,
)
from gen.family_model import build, new_model  # noqa: E402


def tiny_state(config: Any, key_norm: float | None = None) -> dict[str, Any]:
    """Random weights, sharper than the initial ones (logits of a few units), the norms' weights
    away from their initial values (so that ``1 + w`` and ``w`` differ); ``key_norm``: every
    ``k_norm`` weight set to it (a member that norms its keys). GPT-2's names too: its norms
    ``ln_*``, its token and position embeddings ``wte`` and ``wpe``."""
    torch.manual_seed(0)
    model = new_model(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or ".ln_" in name:
                p.add_(torch.randn_like(p) * 0.2)
                if key_norm is not None and "k_norm" in name:
                    p.fill_(key_norm)
            elif any(k in name for k in ("embed", "lm_head", ".wte.", ".wpe.")):  # untied heads too
                p.normal_(0.0, 0.25)
            else:
                p.mul_(2.0)
    return model.state_dict()


def ids(n: int, length: int, seed: int = 2) -> Any:
    return torch.randint(0, 64, (n, length), generator=torch.Generator().manual_seed(seed))


def kl(reference: Any, logits: Any) -> float:
    ref = torch.log_softmax(reference.float(), -1)
    lp = torch.log_softmax(logits.float(), -1)
    return float((ref.exp() * (ref - lp)).sum(-1).mean())


def bf16_departure(config: Any) -> tuple[float, float]:
    """A tiny member's bf16 engine against its fp32 trainer on two 40-token contexts: the KL of
    their logits and the largest logit (the distributions are not flat)."""
    from gen.family_engine import EngineKernel, prepare_engine
    from gen.family_model import build

    state = tiny_state(config)
    trainer = build(config, state, torch.float32)
    engine = prepare_engine(build(config, state, torch.bfloat16), EngineKernel(), False, False)
    x = ids(2, 40)
    with torch.no_grad():
        want, got = trainer(x).logits, engine(x).logits
    return kl(want, got), float(want.abs().max())


def fp32_head_logits(config: Any) -> tuple[Any, Any, Any]:
    """A tiny tied member's engine with the fp32 head on two 20-token contexts, checked to hold
    an fp32 copy of the bf16 embeddings: its last hidden states, its logits (fp32), and the
    plain bf16 engine's logits."""
    from gen.family_engine import EngineKernel, Fp32Head, prepare_engine
    from gen.family_model import build

    state = tiny_state(config)
    engine = prepare_engine(build(config, state, torch.bfloat16), EngineKernel(), True, False)
    assert isinstance(engine.lm_head, Fp32Head) and engine.lm_head.weight.dtype == torch.float32
    embed = engine.get_input_embeddings().weight
    assert embed.dtype == torch.bfloat16 and torch.equal(engine.lm_head.weight, embed.float())
    plain = prepare_engine(build(config, state, torch.bfloat16), EngineKernel(), False, False)
    x = ids(2, 20)
    with torch.no_grad():
        hidden = engine.base_model(x).last_hidden_state.float()
        return hidden @ engine.lm_head.weight.t(), engine(x).logits, plain(x).logits


def decode(
    config: Any, state: dict[str, Any], kernel: EngineKernel, dtype: Any
) -> tuple[list[list[int]], list[tuple[list[int], list[float]]]]:
    """Two contexts (5 and 12 tokens) and 30 tokens decoded for each through the cache."""
    engine = prepare_engine(build(config, state, dtype), kernel, False, False)
    contexts = [ids(1, 5, 5)[0].tolist(), ids(1, 12, 6)[0].tolist()]
    sampler = Sampler(temperature=1.5)
    gen = torch.Generator().manual_seed(7)
    return contexts, decode_turn(engine, contexts, sampler, set(), 30, 30, gen)


def assert_split_kv_merges_act_past_the_split(
    config: Any, state: dict[str, Any] | None = None
) -> None:
    """A split-KV decode merged in fp32 is the plain kernel's attention; merged with fp8
    log-sum-exps, or a key late, it departs once the keys pass the split and not before;
    ``state``: the member's weights (else `tiny_state`'s)."""
    state = tiny_state(config) if state is None else state
    split = 16  # the batch is 12 keys wide (left-padded): decode step 5 has 17 keys
    fp32 = torch.float32
    _, plain = decode(config, state, EngineKernel(), fp32)
    _, exact = decode(config, state, EngineKernel(split_at=split, lse_dtype=fp32), fp32)
    for (tokens, lps), (other, olps) in zip(plain, exact, strict=True):
        assert tokens == other and max(abs(a - b) for a, b in zip(lps, olps, strict=True)) < 1e-4
    faults = [
        EngineKernel(split_at=split, lse_dtype=engine_module.FP8),
        EngineKernel(split_at=split, lse_dtype=fp32, drop_key=True),
    ]
    before = split - 12 + 1  # the prefill's token and the decode steps within the split
    for kernel in faults:
        _, faulty = decode(config, state, kernel, fp32)
        for (_, lps), (_, flps) in zip(plain, faulty, strict=True):
            assert max(abs(a - b) for a, b in zip(lps[:before], flps[:before], strict=True)) < 1e-5
            moved = [abs(a - b) for a, b in zip(lps[before:], flps[before:], strict=True)]
            assert max(moved) > 1e-3


def assert_decode_is_the_trainers_and_fp8_rounds_keys(
    config: Any, state: dict[str, Any], engine: Any, seen: list[tuple[int, int, Any]]
) -> None:
    """With the kernel recording each call's ``(layer, query length, keys)`` in ``seen`` (an
    fp32 ``engine`` already prepared): decoding through the cache calls it at every decode step
    of both layers and gives the trainer's logprobs; the keys it held were not on the fp8 grid,
    and an fp8 cache's engine holds them rounded to e4m3 and moves the logits a little."""
    seen.clear()
    contexts, plain = decode(config, state, EngineKernel(), torch.float32)
    assert {layer for layer, _, _ in seen} == {0, 1}
    assert len([n for _, n, _ in seen if n == 1]) == 2 * 29  # every decode step, every layer
    seqs = [c + tokens for c, (tokens, _) in zip(contexts, plain, strict=True)]
    rows = score(build(config, state, torch.float32), seqs, 1.5)
    for c, (_, lps), row in zip(contexts, plain, rows, strict=True):
        assert lps == pytest.approx(row[len(c) :], abs=1e-4)
    assert not all(torch.equal(k, k.to(engine_module.FP8).float()) for _, _, k in seen)
    seen.clear()
    fp8 = prepare_engine(
        build(config, state, torch.float32), EngineKernel(fp8_kv=True), False, False
    )
    y = ids(2, 30)
    with torch.no_grad():
        want, got = engine(y).logits, fp8(y).logits
    rounded = [k for _, _, k in seen[2:]]  # the fp8 engine's two layers
    assert len(rounded) == 2 and all(
        torch.equal(k, k.to(engine_module.FP8).float()) for k in rounded
    )
    assert 1e-7 < kl(want, got) < 1e-2


def recorded_prefill(
    monkeypatch: pytest.MonkeyPatch, config: Any, state: dict[str, Any], qkv: Any
) -> tuple[Any, list[tuple[int, int, Any]], Any]:
    """An fp32 engine whose kernel records each call's ``(layer, query length, keys)``, and a
    12-token prefill through it: the engine, the records, and the output of its first layer's
    projection of the keys (``qkv(engine)``: the module, GPT-NeoX's fused query_key_value or
    GPT-2's c_attn)."""
    seen: list[tuple[int, int, Any]] = []
    sdpa = engine_module.sdpa_attention_forward

    def record(module: Any, q: Any, k: Any, *rest: object, **kw: object) -> object:
        seen.append((module.layer_idx, q.shape[-2], k.detach().clone()))
        return sdpa(module, q, k, *rest, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(engine_module, "sdpa_attention_forward", record)
    engine = prepare_engine(build(config, state, torch.float32), EngineKernel(), False, False)
    projected: list[Any] = []
    hook = qkv(engine).register_forward_hook(lambda _m, _i, out: projected.append(out.detach()))
    with torch.no_grad():
        engine(ids(1, 12, 6))
    hook.remove()
    return engine, seen, projected[0]


def assert_fp32_head_replaces_the_untied_head(config: Any) -> None:
    """A tiny untied member's engine with the fp32 head: an fp32 copy of the bf16 head (not of
    the embeddings), giving fp32 logits equal to the last hidden states times it, unlike the
    plain bf16 engine's."""
    from gen.family_engine import EngineKernel, Fp32Head, prepare_engine
    from gen.family_model import build

    state = tiny_state(config)
    engine = prepare_engine(build(config, state, torch.bfloat16), EngineKernel(), True, False)
    plain = prepare_engine(build(config, state, torch.bfloat16), EngineKernel(), False, False)
    assert isinstance(engine.lm_head, Fp32Head) and engine.lm_head.weight.dtype == torch.float32
    assert torch.equal(engine.lm_head.weight, plain.lm_head.weight.float())
    assert not torch.equal(engine.lm_head.weight, engine.get_input_embeddings().weight.float())
    x = ids(2, 20)
    with torch.no_grad():
        hidden = engine.base_model(x).last_hidden_state.float()
        logits = engine(x).logits
        assert logits.dtype == torch.float32
        assert torch.allclose(logits, hidden @ engine.lm_head.weight.t(), atol=1e-5)
        assert not torch.equal(logits, plain(x).logits.float())
