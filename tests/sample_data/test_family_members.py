"""What every dense member of the family shares beside the Llama (family.py --arch gemma2,
qwen3, gptneox): its label in corpus.json, with the vocabulary and the training context when
they are not the defaults, and the refusal of --moe with it (the mixture of experts is a
Qwen2-MoE of its own), before anything is written."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.sample_data.family_deps import family_deps

family_deps()

from gen.family_model import VOCAB  # noqa: E402

ARCHS = ("gemma2", "qwen3", "gptneox")


@pytest.mark.parametrize("arch", ARCHS)
def test_a_members_label_and_its_refusal_of_moe(arch: str, tmp_path: Path) -> None:
    import family

    assert family.label_of(VOCAB, None, arch) == f"{arch}-4x128-bpe1024"
    assert family.label_of(2048, None, arch, 1024) == f"{arch}-4x128-bpe2048-c1024"
    with pytest.raises(SystemExit, match=f"--moe with --arch {arch}"):
        family.main(["--out", str(tmp_path), "--arch", arch, "--moe"])
    assert not any(tmp_path.iterdir())
