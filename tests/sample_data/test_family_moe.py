"""The family's MoE member (sample_data/gen/family_moe.py) on a tiny random Qwen2-MoE: tapping its
routers changes nothing, the engine records each input position's experts as the trainer would
choose them, the trainer replays given experts, and each fault does what it claims."""

from __future__ import annotations

import random

import numpy as np
import pytest

from tests.sample_data.family_deps import family_deps

torch = family_deps()

from gen.family_engine import EngineKernel, Sampler, decode_turn, prepare_engine, score  # noqa: E402
from gen.family_moe import MoEShape, moe_config, tap_routers  # noqa: E402
from gen.family_moe_runs import FAMILY_MOE  # noqa: E402
from gen.family_runs import check_family  # noqa: E402
from gen.rollout import Sample  # noqa: E402
from gen.routes import ROLLOUT, TRAINER, route_columns  # noqa: E402
from transformers import Qwen2MoeConfig, Qwen2MoeForCausalLM  # noqa: E402

LAYERS, TOP_K = 2, 2


def tiny(tapped: bool = True) -> Qwen2MoeForCausalLM:
    torch.manual_seed(0)
    cfg = Qwen2MoeConfig(vocab_size=64, hidden_size=32, intermediate_size=48,
                         num_hidden_layers=LAYERS, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=256, num_experts=6, num_experts_per_tok=TOP_K,
                         moe_intermediate_size=16, shared_expert_intermediate_size=24,
                         norm_topk_prob=False, attn_implementation="sdpa")  # fmt: skip
    model = Qwen2MoeForCausalLM(cfg).eval()
    for p in model.parameters():  # the routers start at zero: give them something to choose
        torch.nn.init.normal_(p, std=0.3)
    if tapped:
        tap_routers(model)
    return model


def test_tapping_the_routers_changes_nothing() -> None:
    ids = torch.randint(0, 64, (2, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(tiny(False)(ids).logits, tiny()(ids).logits)


def test_the_engine_records_each_input_positions_experts() -> None:
    model = prepare_engine(tiny(), EngineKernel(), fp32_head=False, norm_bf16=False)
    contexts = [[1, 2, 3, 4], [5, 6]]
    gen = torch.Generator().manual_seed(2)
    outs = decode_turn(model, contexts, Sampler(temperature=1.0), {7}, 10, 2, gen)
    assert model.turn_routes is not None
    for context, (tokens, _), routes in zip(contexts, outs, model.turn_routes, strict=True):
        inputs = context + tokens[:-1]  # the last sampled token is never an input
        assert routes.shape == (len(inputs), LAYERS, TOP_K)
        score(model, [inputs], temperature=1.0)
        assert np.array_equal(routes, model.scored_routes[0])  # fp32: the same experts


def test_the_trainer_replays_given_experts() -> None:
    model = tiny()
    seqs = [[1, 2, 3, 4, 5, 6], [7, 8, 9]]
    own = score(model, seqs, temperature=1.0)
    chosen = [r.copy() for r in model.scored_routes]
    again = score(model, seqs, temperature=1.0, replay=[r[:-1] for r in chosen])
    assert again == own  # replaying its own choice changes nothing
    other = [(r[:-1] + 1) % 6 for r in chosen]
    moved = score(model, seqs, temperature=1.0, replay=other)
    assert moved != own
    for want, got in zip(other, model.scored_routes, strict=True):
        assert np.array_equal(got[: len(want)], want)  # what it used is what it dumps


def test_an_fp8_router_flips_experts() -> None:
    ids = torch.randint(0, 64, (4, 40), generator=torch.Generator().manual_seed(3))
    plain = tiny()
    rounded = prepare_engine(tiny(), EngineKernel(), False, False, torch.float8_e5m2)
    score(plain, ids.tolist(), 1.0)
    score(rounded, ids.tolist(), 1.0)
    a, b = np.stack(plain.scored_routes), np.stack(rounded.scored_routes)
    flipped = np.mean(np.sort(a, -1) != np.sort(b, -1))
    assert 0 < flipped < 0.5


def test_the_layers_capture_bug_writes_each_layer_in_the_next_slot() -> None:
    rows = np.arange(3 * LAYERS * TOP_K, dtype=np.int16).reshape(3, LAYERS, TOP_K)
    s = Sample(uid="u", prompt=[1, 2], n_turns=1, tool_rng=random.Random(0),
               response=[3, 4], mask=[1, 1])  # fmt: skip
    s.rollout_routes, s.trainer_routes = rows[:3], rows
    plain = route_columns([s], 2, "lists")[TRAINER].to_pylist()[0]
    bug = route_columns([s], 2, "lists", "layers")[TRAINER].to_pylist()[0]
    assert bug[0][1] == plain[0][0] and bug[0][0] == plain[0][LAYERS - 1]
    assert route_columns([s], 2, "lists", "layers")[ROLLOUT].to_pylist()[0][0] == plain[0]


def test_the_moe_catalogue_covers_the_routing_classes() -> None:
    check_family(FAMILY_MOE)
    causes = {c for r in FAMILY_MOE if r.cause for c in r.cause.split("+")}
    assert {"routing", "routing_capture", "policy", "precision", "code_path"} <= causes
    assert sum(r.kind == "healthy" for r in FAMILY_MOE) >= 5
    assert any(r.kind == "improvement" and r.routing == "replay" for r in FAMILY_MOE)


def test_another_shape_keeps_the_routed_width_a_token_uses() -> None:
    shape = MoEShape.parse("6x32x8")
    assert shape == MoEShape(6, 32, 8) and shape.label == "qwen2moe-6x128-32e-top8"
    cfg = moe_config(1024, shape)
    assert (cfg.num_hidden_layers, cfg.num_experts, cfg.num_experts_per_tok) == (6, 32, 8)
    default = moe_config(1024)
    assert cfg.moe_intermediate_size * 8 == default.moe_intermediate_size * 4 == 256
    with pytest.raises(ValueError, match="top-k <= experts"):
        MoEShape.parse("4x4x8")
