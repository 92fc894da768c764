"""The held-out kinds of fault (sample_data/gen/model_faults.py, gen/catalog_unseen.py) on tiny
tensors and a tiny model: each departs from the trainer's arithmetic where it claims to, and
nowhere else."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch starts its thread pool
torch = pytest.importorskip("torch")
pytest.importorskip("pyarrow")

SAMPLE = Path(__file__).resolve().parents[2] / "sample_data"
sys.path.insert(0, str(SAMPLE))

from gen.catalog import BY_NAME, check_catalog  # noqa: E402
from gen.catalog_unseen import UNSEEN  # noqa: E402
from gen.engine import EngineConfig, InferenceEngine, TurnLimits  # noqa: E402
from gen.faults import NumericPath, install_path  # noqa: E402
from gen.model import ModelConfig, TinyLM, rope_tables  # noqa: E402
from gen.model_faults import (  # noqa: E402
    Bf16StatsNorm,
    StaticFp8Input,
    quantize_weight_only,
    window_keys,
    window_mask,
)

TINY = ModelConfig(n_layers=2, d_model=32, n_heads=2, d_ff=64, max_len=320)
PROMPTS = [list(b"def f(x):\n    return x * 2\n"), list(b"print(f(3))\n")]


def engine_model(**knobs: object) -> TinyLM:
    torch.manual_seed(0)
    model = TinyLM(TINY).eval()
    install_path(model, NumericPath(**knobs))  # type: ignore[arg-type]
    return model


def test_the_unseen_runs_are_registered_and_well_formed() -> None:
    check_catalog()
    assert all(BY_NAME[r.name] is r for r in UNSEEN)
    kinds = {r.kind for r in UNSEEN}
    assert kinds == {"healthy", "fault", "combo"}
    assert all(r.engine.path is not None for r in UNSEEN)  # each departs in the engine


def test_a_sliding_window_hides_only_keys_past_its_width() -> None:
    allowed = torch.ones(6, 6, dtype=torch.bool).tril()[None, None]
    masked = window_mask(allowed, 3)
    assert (masked != allowed).nonzero()[:, 2:].tolist() == [[3, 0], [4, 0], [4, 1], [5, 0],
                                                              [5, 1], [5, 2]]  # fmt: skip
    assert torch.equal(window_mask(allowed, 6), allowed)  # a window as wide as the row
    keys = torch.ones(2, 5, dtype=torch.bool)
    assert window_keys(keys, 3).tolist() == [[False, False, True, True, True]] * 2
    assert window_keys(keys, 5) is keys


def test_another_rotary_base_departs_with_the_position() -> None:
    cos, sin = rope_tables(TINY)
    cos2, sin2 = rope_tables(TINY, 10500.0)
    err = (cos2 - cos).abs().amax(dim=1) + (sin2 - sin).abs().amax(dim=1)
    assert err[0] == 0 < err[1] < err[10] < err[100] < err[300]  # a drift that grows
    model = engine_model(rope_theta=10500.0)
    assert torch.equal(model.rope_cos, cos2) and torch.equal(model.rope_sin, sin2)


def test_the_softmax_scale_moves_the_query_rows_only() -> None:
    plain, scaled = engine_model(), engine_model(attn_scale=1.1)
    for a, b in zip(plain.blocks, scaled.blocks, strict=True):
        assert torch.allclose(b.qkv.weight[:32], a.qkv.weight[:32] * 1.1)
        assert torch.equal(b.qkv.weight[32:], a.qkv.weight[32:])  # keys and values
        assert torch.equal(b.fc1.weight, a.fc1.weight)


def test_norm_faults_touch_the_norms_only() -> None:
    eps = engine_model(norm_eps=0.1)
    assert {m.eps for m in eps.modules() if isinstance(m, torch.nn.LayerNorm)} == {0.1}
    bf16 = engine_model(norm_bf16=True)
    norms = [m for m in bf16.modules() if isinstance(m, Bf16StatsNorm)]
    assert len(norms) == 2 * 2 + 1 and not any(
        isinstance(m, torch.nn.LayerNorm) for m in bf16.modules()
    )
    ln = torch.nn.LayerNorm(64)
    x = torch.randn(8, 64, generator=torch.Generator().manual_seed(0)) * 3 + 5
    out, ref = Bf16StatsNorm(ln)(x), ln(x)
    assert not torch.equal(out, ref) and torch.allclose(out, ref, atol=0.1)


def test_weight_only_integers_keep_their_levels_per_channel() -> None:
    w = torch.randn(16, 64, generator=torch.Generator().manual_seed(1))
    for bits in (8, 4):
        q = quantize_weight_only(w, bits)
        top = 2 ** (bits - 1) - 1
        scale = w.abs().amax(dim=1, keepdim=True) / top
        assert ((q - w).abs() <= scale / 2 + 1e-6).all()
        levels = (q / scale).round()
        assert torch.allclose(q, levels * scale, atol=1e-5) and levels.abs().max() == top
    model, plain = engine_model(mlp_bits=4), engine_model()
    assert not torch.equal(model.blocks[0].fc1.weight, plain.blocks[0].fc1.weight)
    assert torch.equal(model.blocks[0].qkv.weight, plain.blocks[0].qkv.weight)


def test_a_static_fp8_range_saturates_what_lies_beyond_it() -> None:
    lin = torch.nn.Linear(4, 4, bias=False)
    lin.weight.data = torch.eye(4)
    out = StaticFp8Input(lin, 1.0)(torch.tensor([[0.5, -3.0, 2.0, 0.25]]))
    assert out.tolist() == [[0.5, -1.0, 1.0, 0.25]]
    model = engine_model(mlp_act_layer=1, mlp_act_amax=1.0)
    assert isinstance(model.blocks[1].fc2, StaticFp8Input)
    assert isinstance(model.blocks[0].fc2, torch.nn.Linear)


def generate(path: NumericPath) -> list[tuple[list[int], list[float]]]:
    torch.manual_seed(0)
    state = TinyLM(TINY).state_dict()
    engine = InferenceEngine(TINY, state, EngineConfig(dtype=torch.float32, path=path))
    return engine.generate(PROMPTS, TurnLimits(12, 12), torch.Generator().manual_seed(0))


def test_recompute_preemption_rebuilds_the_evicted_rows_by_a_prefill() -> None:
    plain = generate(NumericPath())
    same = generate(NumericPath(preempt_at=5, preempt_every=2))
    for (toks, lps), (toks2, lps2) in zip(plain, same, strict=True):
        assert toks == toks2 and torch.allclose(torch.tensor(lps), torch.tensor(lps2), atol=1e-5)
    # a decode-only fault: the evicted row's KV, rebuilt by the prefill, loses it from then on
    shifted = generate(NumericPath(decode_rope="shift"))
    evicted = generate(NumericPath(decode_rope="shift", preempt_at=5, preempt_every=2))
    assert evicted[0][1][:5] == shifted[0][1][:5] and evicted[0][1][5:] != shifted[0][1][5:]
    assert evicted[1] == shifted[1]  # the row kept its cache


def test_a_window_wider_than_every_context_changes_nothing() -> None:
    plain = generate(NumericPath())
    assert generate(NumericPath(window=64)) == plain  # the contexts stay under 42 slots
    narrow = generate(NumericPath(window=16))
    assert [lps[:2] for _, lps in narrow] != [lps[:2] for _, lps in plain]
