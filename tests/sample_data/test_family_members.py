"""What every dense member of the family shares beside the Llama (family.py --arch gemma2,
qwen3, gptneox, gpt2, olmo2, cohere, qwen2, granite, phi): its label in corpus.json, with the vocabulary and the training context
when they are not the defaults, and the refusal of --moe with it (the mixture of experts is a
Qwen2-MoE of its own), before anything is written; the engine finding each layer's attention
under the member's own names."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.sample_data.family_deps import family_deps

torch = family_deps()

from gen.family_cohere import cohere_config  # noqa: E402
from gen.family_engine import (  # noqa: E402
    EngineKernel,
    attention_modules,
    prepare_engine,
)
from gen.family_gemma2 import gemma2_config  # noqa: E402
from gen.family_gpt2 import gpt2_config  # noqa: E402
from gen.family_gptneox import gptneox_config  # noqa: E402
from gen.family_granite import granite_config  # noqa: E402
from gen.family_model import VOCAB, llama_config, new_model  # noqa: E402
from gen.family_olmo2 import olmo2_config  # noqa: E402
from gen.family_phi import phi_config  # noqa: E402
from gen.family_qwen2 import qwen2_config  # noqa: E402
from gen.family_qwen3 import qwen3_config  # noqa: E402

ARCHS = ("gemma2", "qwen3", "gptneox", "gpt2", "olmo2", "cohere", "qwen2", "granite", "phi")
CONFIGS = {
    "llama": llama_config,
    "gemma2": gemma2_config,
    "qwen3": qwen3_config,
    "gptneox": gptneox_config,
    "gpt2": gpt2_config,
    "olmo2": olmo2_config,
    "cohere": cohere_config,
    "qwen2": qwen2_config,
    "granite": granite_config,
    "phi": phi_config,
}


@pytest.mark.parametrize("arch", ARCHS)
def test_a_members_label_and_its_refusal_of_moe(arch: str, tmp_path: Path) -> None:
    import family

    assert family.label_of(VOCAB, None, arch) == f"{arch}-4x128-bpe1024"
    assert family.label_of(2048, None, arch, 1024) == f"{arch}-4x128-bpe2048-c1024"
    with pytest.raises(SystemExit, match=f"--moe with --arch {arch}"):
        family.main(["--out", str(tmp_path), "--arch", arch, "--moe"])
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("arch", CONFIGS)
def test_the_engine_finds_every_layers_attention(arch: str) -> None:
    """Each of the member's four layers has one attention module, the one that calls the
    attention interface, and the engine points it at the engine's config (and kernel)."""
    model = new_model(CONFIGS[arch](VOCAB))
    found = attention_modules(model)
    assert len(found) == 4 and all(type(m).__name__.endswith("Attention") for m in found)
    assert [m.layer_idx for m in found] == [0, 1, 2, 3]
    engine = prepare_engine(model, EngineKernel(fp8_kv=True), False, False)
    for m in found:
        assert m.config is engine.config and m.config._attn_implementation == "family_engine"
        assert m.config.engine_kernel == EngineKernel(fp8_kv=True)


def test_the_engines_fp32_head_keeps_the_heads_bias() -> None:
    """Phi's lm_head has a bias: the engine's fp32 head (an improvement) is the same head in
    fp32, its bias kept, so in fp32 it gives the model's own logits."""
    from gen.family_model import build

    config = phi_config(VOCAB)
    state = new_model(config).state_dict()
    state["lm_head.bias"] = torch.randn(VOCAB, generator=torch.Generator().manual_seed(0))
    model = build(config, state, torch.float32)
    ids = torch.randint(0, VOCAB, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = model(input_ids=ids).logits
        engine = prepare_engine(model, EngineKernel(), True, False)
        got = engine(input_ids=ids).logits
    assert engine.lm_head.bias is not None
    assert torch.allclose(got, want, atol=1e-5) and float(state["lm_head.bias"].abs().max()) > 1
