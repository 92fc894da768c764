"""family.py --pretrain (sample_data/family.py): a shorter pre-training keeps the default's names
and schedule untouched, gives its own cache file and label, spaces its checkpoints by its own
length, and trains a model flatter than the default's."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tests.sample_data.family_deps import family_deps

torch = family_deps()

import family  # noqa: E402
from gen.family_model import (  # noqa: E402
    VOCAB,
    FamilyModel,
    FamilyTraining,
    llama_config,
    new_model,
    train_family,
    train_tokenizer,
)


def test_the_default_pretraining_changes_nothing() -> None:
    assert family.PRETRAIN == FamilyTraining().warmup_iters == 900
    assert family.pretrain_suffix(family.PRETRAIN) == ""
    assert family.pretraining(family.PRETRAIN) == {}
    assert family.label_of(VOCAB, None, "llama") == "llama-4x128-bpe1024"


def test_a_shorter_pretraining_has_its_own_label_and_schedule() -> None:
    assert family.label_of(VOCAB, None, "llama", pretrain=90) == "llama-4x128-bpe1024-w90"
    assert family.label_of(VOCAB, None, "cohere", 1024, 90) == "cohere-4x128-bpe1024-c1024-w90"
    assert family.pretraining(90) == {"warmup_iters": 90, "iters_per_step": 3, "early_iter": 30}
    assert family.pretraining(3) == {"warmup_iters": 3, "iters_per_step": 2, "early_iter": 1}


def test_each_pretraining_has_its_own_cache_file(tmp_path: Path) -> None:
    config = dataclasses.replace(llama_config(), hidden_size=32, intermediate_size=48,
                                 num_hidden_layers=1)  # fmt: skip
    state = new_model(config).state_dict()
    tiny = FamilyModel(train_tokenizer(), config, [state], [state], state, [])
    for name, losses in (("family-seed0.pt", [1.0]), ("family-seed0-w90.pt", [5.0])):
        saved = dataclasses.replace(tiny, tokenizer=None, losses=losses)
        torch.save({"model": saved, "tokenizer": tiny.tokenizer.to_str()}, tmp_path / name)
    assert family.load_model(tmp_path, 0, VOCAB).losses == [1.0]
    assert family.load_model(tmp_path, 0, VOCAB, pretrain=90).losses == [5.0]


@pytest.mark.parametrize("value", ["0", "901"])
def test_a_pretraining_out_of_range_is_refused(value: str, tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=f"--pretrain {value}: out of range"):
        family.main(["--out", str(tmp_path), "--pretrain", value])
    assert not (tmp_path / "cache").exists()


@pytest.mark.slow
def test_a_short_pretraining_trains_a_flat_model() -> None:
    """Three iterations before RL step 0: seven checkpoints two iterations apart, the model
    still next to uniform over the vocabulary (ln 1024 = 6.93)."""
    model = train_family(FamilyTraining(**family.pretraining(3)), log=False)
    assert len(model.checkpoints) == len(model.lagging) == 7
    assert len(model.losses) == 3 + 2 * 6
    assert 6.0 < model.losses[-1] < 6.93
