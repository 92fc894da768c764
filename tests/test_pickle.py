"""Untrusted `.pt` files: loaded with weights_only=True; a file that needs full unpickling is
refused without running anything from it, unless the user passes --trust-pickle."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import FIXTURES, cli, tree_digest

torch = pytest.importorskip("torch")


class Payload:
    """Unpickling this object opens (creates) ``marker``: the proof that code from the file ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (open, (str(self.marker), "w"))


def _slime_samples() -> list[dict]:
    return [
        {
            "sample_index": i,
            "rollout_log_probs": torch.tensor([-0.1, -0.5, -2.0]),
            "log_probs": torch.tensor([-0.12, -0.45, -2.1]),
            "loss_masks": [1, 1, 0],
        }
        for i in range(4)
    ]


@pytest.fixture
def seeded(store: Path) -> Path:
    assert cli("ingest", str(FIXTURES / "sequence.parquet"), "--run", "base", "-q").code == 0
    return store


def test_refused_without_running_the_payload(seeded: Path, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    path = tmp_path / "train_5.pt"
    torch.save({"rollout_id": 5, "samples": _slime_samples(), "meta": Payload(marker)}, path)
    before = tree_digest(seeded)
    ran = cli("ingest", str(path), "--run", "p", "-q")
    assert ran.code == 1
    assert not marker.exists()  # the refusal ran nothing from the file
    assert tree_digest(seeded) == before
    assert ran.err == (
        "Error: train_5.pt needs full unpickling to load (it refers to `io.open`, which "
        "weights_only=True loading does not allow); refused, so that no code from a dump runs"
        "\n\nHint: if you trust the file and whoever wrote it, pass --trust-pickle: full "
        "unpickling runs any code the file contains, with your permissions. Otherwise re-save "
        "the dump with plain tensors, lists and numbers.\n"
    )


def test_trust_pickle_loads_a_valid_dump(store: Path, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    path = tmp_path / "train_5.pt"
    torch.save({"rollout_id": 5, "samples": _slime_samples(), "meta": Payload(marker)}, path)
    ran = cli("ingest", str(path), "--run", "p", "--trust-pickle", "-q", "--json")
    assert ran.code == 0, ran.err
    assert marker.exists()  # what the flag means: the file's code did run
    totals = json.loads(ran.out)["totals"]
    assert totals["sequences"] == 4 and totals["model_tokens"] == 8
    shown = json.loads(cli("runs", "show", "p", "--json").out)
    assert "loaded with --trust-pickle (full unpickling)" in shown["sources"][0]["notes"]


def test_trust_pickle_with_content_that_is_no_dump(seeded: Path, tmp_path: Path) -> None:
    path = tmp_path / "train_1.pt"
    torch.save({"samples": [Payload(tmp_path / "m")]}, path)
    before = tree_digest(seeded)
    ran = cli("ingest", str(path), "--run", "p", "--trust-pickle", "-q")
    assert ran.code == 1
    assert ran.err.startswith(
        "Error: train_1.pt: sample 0 is a TextIOWrapper, expected a dict of per-sample values"
    )
    assert tree_digest(seeded) == before


def test_corrupt_pt_is_not_reported_as_unsafe(seeded: Path, tmp_path: Path) -> None:
    path = tmp_path / "train_2.pt"
    path.write_bytes(b"\x80\x02garbage that is no pickle")
    for extra in ([], ["--trust-pickle"]):
        ran = cli("ingest", str(path), "--run", "p", "-q", *extra)
        assert ran.code == 1
        assert ran.err.startswith("Error: cannot load train_2.pt as a torch file")
        assert "Hint: the file is truncated or corrupt" in ran.err
        assert "\x1b" not in ran.err  # torch's message carries terminal escapes


def test_help_states_the_risk() -> None:
    text = " ".join(cli("ingest", "--help").out.split())
    assert "--trust-pickle" in text
    assert "RUNS ANY CODE THE FILE CONTAINS" in text
