"""The family's faults of kinds never calibrated (sample_data/gen/family_unseen.py,
gen/family_config_edits.py, family.py --unseen): each edit builds the engine's model from a copy
of the config read otherwise and acts where it says (a sliding window ignored only past it, a
dynamic rotary scaling only in forwards past its start, a logit scale or a soft-cap skipped on
the logits alone), the trainer's config untouched; the catalogue holds its baselines."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.sample_data.family_deps import family_deps

torch = family_deps()

from gen.family_cohere import LOGIT_SCALE, cohere_config  # noqa: E402
from gen.family_config_edits import DYNAMIC_FROM, EDITS, engine_config  # noqa: E402
from gen.family_gemma2 import gemma2_config  # noqa: E402
from gen.family_gptneox import gptneox_config  # noqa: E402
from gen.family_granite import granite_config  # noqa: E402
from gen.family_model import ARCHS, build, llama_config  # noqa: E402
from gen.family_olmo2 import olmo2_config  # noqa: E402
from gen.family_qwen3 import qwen3_config  # noqa: E402
from gen.family_runs import check_family  # noqa: E402
from gen.family_unseen import UNSEEN, unseen_catalogue  # noqa: E402

from tests.sample_data.family_tiny import ids, kl, tiny_state  # noqa: E402

VOCAB = 64
CAUSES = {"code_path", "precision", "semantics", "policy"}


def logits(config: Any, edit: str, length: int) -> tuple[Any, Any]:
    """The trainer's and the edited engine's logits (both fp32, the same weights) on one
    context of ``length`` tokens."""
    state = tiny_state(config)
    trainer = build(config, state, torch.float32)
    engine = build(engine_config(config, edit), state, torch.float32)
    x = ids(1, length)
    with torch.no_grad():
        return trainer(x).logits[0], engine(x).logits[0]


def test_an_edit_copies_the_config_and_leaves_the_trainers_alone() -> None:
    config = llama_config(VOCAB)
    assert engine_config(config, "") is config
    edited = engine_config(config, "norm-eps")
    assert edited is not config and edited.rms_norm_eps == pytest.approx(1e-5)
    assert config.rms_norm_eps == 1e-6
    assert engine_config(cohere_config(VOCAB), "norm-eps").layer_norm_eps == pytest.approx(1e-4)
    rope = engine_config(qwen3_config(VOCAB), "rope-dynamic").rope_parameters
    assert rope["rope_type"] == "dynamic" and rope["rope_theta"] == 1_000_000.0
    assert (
        engine_config(qwen3_config(VOCAB), "rope-dynamic").max_position_embeddings == DYNAMIC_FROM
    )
    assert qwen3_config(VOCAB).rope_parameters["rope_type"] == "default"


def test_a_window_ignored_changes_nothing_within_it_and_every_position_past_it() -> None:
    config = gemma2_config(VOCAB)
    window = config.sliding_window
    want, got = logits(config, "window-off", window + 24)
    assert torch.allclose(want[:window], got[:window], atol=1e-5)
    moved = (want[window:] - got[window:]).abs().amax(-1)
    assert bool((moved > 1e-4).all())


def test_a_dynamic_rotary_scaling_moves_only_forwards_past_its_start() -> None:
    for make in (llama_config, olmo2_config):
        config = make(VOCAB)
        short = logits(config, "rope-dynamic", DYNAMIC_FROM)
        assert torch.allclose(*short, atol=1e-5)
        want, got = logits(config, "rope-dynamic", DYNAMIC_FROM + 12)
        assert torch.allclose(want[0], got[0], atol=1e-5)  # position 0 is never rotated
        assert kl(want[1:], got[1:]) > 1e-6


def test_the_whole_head_rotated_moves_every_position_but_the_first() -> None:
    want, got = logits(gptneox_config(VOCAB), "rotary-full", 20)
    assert torch.allclose(want[0], got[0], atol=1e-5)
    assert bool(((want[1:] - got[1:]).abs().amax(-1) > 1e-4).all())


def test_a_logit_scale_not_applied_is_the_trainers_logits_over_the_scale() -> None:
    want, got = logits(cohere_config(VOCAB), "logit-scale-off", 20)
    assert torch.allclose(got * LOGIT_SCALE, want, rtol=1e-5, atol=1e-6)


def test_a_logits_scaling_not_applied_is_the_trainers_logits_times_the_scaling() -> None:
    config = granite_config(VOCAB)
    want, got = logits(config, "logits-scaling-off", 20)
    assert config.logits_scaling == 8.0
    assert torch.allclose(got, want * config.logits_scaling, rtol=1e-5, atol=1e-6)


def test_a_soft_cap_skipped_leaves_the_capped_logits_the_trainers() -> None:
    config = gemma2_config(VOCAB)
    cap = config.final_logit_softcapping
    want, got = logits(config, "final-softcap-off", 20)
    assert torch.allclose(cap * torch.tanh(got / cap), want, atol=1e-5)
    assert not torch.allclose(got, want, atol=1e-3)


def test_the_exact_gelu_moves_every_token_a_little() -> None:
    want, got = logits(gemma2_config(VOCAB), "gelu-exact", 20)
    moved = (want - got).abs().amax(-1)
    assert bool((moved > 1e-5).all()) and float(moved.max()) < 0.05


def test_the_catalogue_holds_its_baselines_and_planted_classes(tmp_path: Path) -> None:
    import family

    assert set(UNSEEN) <= set(ARCHS)
    for arch, runs in UNSEEN.items():
        catalogue = unseen_catalogue(arch)
        check_family(catalogue)
        assert [r.name for r in catalogue[:2]] == ["f-h-a", "f-h-b"]
        for run in runs:
            assert run.name.startswith("f-u-") and run.engine_config in EDITS
            assert set(run.cause.split("+")) <= CAUSES and run.baseline == "f-h-a"
    with pytest.raises(SystemExit, match="--unseen: no such runs for gpt2"):
        family.main(["--out", str(tmp_path), "--arch", "gpt2", "--unseen"])
    assert not any(tmp_path.iterdir())


def test_a_built_model_keeps_its_rotary_frequencies_in_fp32_unless_the_edit_says_bf16() -> None:
    """``build`` puts back the fp32 frequencies that the cast to bf16 rounded (engines compute
    their angles in fp32); ``rope-bf16`` keeps them rounded: both bf16 engines agree at
    position 0 (no angle) and part from there on."""
    config = llama_config(VOCAB)
    state = tiny_state(config)
    kept = build(config, state, torch.bfloat16)
    rounded = build(engine_config(config, "rope-bf16"), state, torch.bfloat16)
    table = build(config, state, torch.float32).model.rotary_emb.inv_freq
    for name in ("inv_freq", "original_inv_freq"):
        assert torch.equal(getattr(kept.model.rotary_emb, name), table)
        got = getattr(rounded.model.rotary_emb, name)
        assert got.dtype == torch.bfloat16 and torch.equal(got, table.to(torch.bfloat16))
    assert next(kept.parameters()).dtype == torch.bfloat16
    x = ids(1, 64)
    with torch.no_grad():
        a, b = kept(x).logits[0].float(), rounded(x).logits[0].float()
    assert torch.equal(a[0], b[0])
    assert not torch.equal(a[1:], b[1:])
