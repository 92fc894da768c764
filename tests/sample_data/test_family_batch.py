"""family.py --batch (sample_data/family.py): every run's prompts x responses a step, parsed
with a clear error, and written as asked; on a tiny random Llama."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.sample_data.family_deps import family_deps

torch = family_deps()

import family  # noqa: E402
from gen.family_model import FamilyModel, llama_config, new_model, train_tokenizer  # noqa: E402
from gen.family_runs import STEPS  # noqa: E402


def test_a_batch_shape_is_parsed() -> None:
    assert family.batch_shape("64x8") == (64, 8)
    assert family.batch_shape("2X1") == (2, 1)
    for bad, said in (("3x", "expected PROMPTSxGROUP"), ("0x4", "must be positive")):
        with pytest.raises(argparse.ArgumentTypeError, match=said):
            family.batch_shape(bad)


def test_every_step_holds_the_batch_asked_for(tmp_path: Path) -> None:
    """A run made with ``--batch 3x2`` holds 3 prompts of 2 responses at every step."""
    config = dataclasses.replace(llama_config(), hidden_size=32, intermediate_size=48,
                                 num_hidden_layers=1)  # fmt: skip
    torch.manual_seed(0)
    states = [new_model(config).state_dict() for _ in range(STEPS + 1)]
    tiny = FamilyModel(None, config, states, states, states[0], [1.0])  # type: ignore[arg-type]
    (tmp_path / "cache").mkdir()
    torch.save(
        {"model": tiny, "tokenizer": train_tokenizer().to_str()},
        tmp_path / "cache" / "family-seed0.pt",
    )
    assert family.main(["--out", str(tmp_path), "--only", "f-h-a", "--batch", "3x2"]) == 0
    files = sorted((tmp_path / "runs" / "f-h-a").glob("*.parquet"))
    assert len(files) == STEPS
    for f in files:
        uids = pq.read_table(f, columns=["uid"]).column("uid").to_pylist()
        assert len(uids) == 6 and len({u.rsplit("-", 1)[0] for u in uids}) == 3
    listed = json.loads((tmp_path / "corpus.json").read_text())["runs"]
    assert [r["name"] for r in listed] == ["f-h-a"]
