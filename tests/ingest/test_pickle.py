"""Untrusted `.pt` files: loaded with weights_only=True; a file that needs full unpickling is
refused without running anything from it, unless the user passes --trust-pickle."""

from __future__ import annotations

import json
import os
import pickle
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
        f"Error: {path} needs full unpickling to load (it refers to `io.open`, which "
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
        f"Error: {path}: sample 0 is a TextIOWrapper, expected a dict of per-sample values"
    )
    assert tree_digest(seeded) == before


def test_corrupt_pt_is_not_reported_as_unsafe(seeded: Path, tmp_path: Path) -> None:
    path = tmp_path / "train_2.pt"
    path.write_bytes(b"\x80\x02garbage that is no pickle")
    for extra in ([], ["--trust-pickle"]):
        ran = cli("ingest", str(path), "--run", "p", "-q", *extra)
        assert ran.code == 1
        assert ran.err.startswith(f"Error: cannot load {path} as a torch file")
        assert "Hint: the file is truncated or corrupt" in ran.err
        assert "\x1b" not in ran.err  # torch's message carries terminal escapes


def test_help_states_the_risk() -> None:
    text = " ".join(cli("ingest", "--help").out.split())
    assert "--trust-pickle" in text
    assert "RUNS ANY CODE THE FILE CONTAINS" in text


class System:
    """Unpickling this runs ``os.system`` (pickled as ``posix.system``): the command only
    creates ``marker``, the proof that it ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("how", ["torch.save", "pickle protocol 5", "pickle protocol 0"])
def test_os_system_payload_is_refused_by_name(seeded: Path, tmp_path: Path, how: str) -> None:
    """torch says `Trying to load unsupported GLOBAL posix.system whose module posix is
    blocked` (torch.save) or only `Unsupported operand 149` (a raw protocol-5 pickle, refused
    at its FRAME opcode): both are unsafe files naming the global, never "corrupt"."""
    marker = tmp_path / "pwned"
    path = tmp_path / "train_6.pt"
    data = {"rollout_id": 6, "samples": _slime_samples(), "meta": System(marker)}
    if how == "torch.save":
        torch.save(data, path)
    else:
        path.write_bytes(pickle.dumps(data, protocol=int(how[-1])))
    before = tree_digest(seeded)
    ran = cli("ingest", str(path), "--run", "p", "-q")
    assert ran.code == 1
    assert not marker.exists()
    assert tree_digest(seeded) == before
    # a plain pickle of tensors also needs torch.storage._load_from_bytes (a nested full load)
    named = "" if how == "torch.save" else "`torch.storage._load_from_bytes` and "
    assert ran.err.startswith(
        f"Error: {path} needs full unpickling to load (it refers to {named}`posix.system`, which "
        "weights_only=True loading does not allow); refused, so that no code from a dump runs"
    )
    assert "pass --trust-pickle" in ran.err
    assert "Detected pickle protocol" not in ran.err  # torch's warning is not shown


@pytest.mark.parametrize(
    ("message", "name"),
    [
        (
            "Weights only load failed. ...\n\n\nTrying to load unsupported GLOBAL posix.system "
            "whose module posix is blocked.\n\nCheck the documentation of torch.load ...",
            "posix.system",
        ),
        (
            "Weights only load failed. ...\nWeightsUnpickler error: Unsupported global: GLOBAL "
            "pathlib.PosixPath was not an allowed global by default. Please use ...",
            "pathlib.PosixPath",
        ),
        (
            "Weights only load failed. ...\nWeightsUnpickler error: Can only build Tensor, "
            "Parameter, OrderedDict or types allowlisted via `add_safe_globals`, but got "
            "<class 'collections.Counter'>",
            "collections.Counter",
        ),
        (
            "Can only create new object for nn.Parameter or classes allowlisted via "
            "`add_safe_globals` but got <class 'my.Thing'>",
            "my.Thing",
        ),
        ("Weights only load failed. ...\nUnsupported operand 149\n\nCheck ...", None),
        ("Invalid magic number; corrupt file?", None),
    ],
)
def test_torch_refusal_wordings(message: str, name: str | None) -> None:
    from mismatchctl.ingest.torch_load import refused_global

    assert refused_global(message) == name


def test_plain_pickle_without_globals_is_not_called_corrupt(seeded: Path, tmp_path: Path) -> None:
    """A valid pickle (protocol 0: opcodes torch's loader does not read) that refers to no
    global: not unsafe, not corrupt; the message says what it is."""
    path = tmp_path / "train_7.pt"
    path.write_bytes(pickle.dumps({"rollout_id": 7, "samples": []}, protocol=0))
    ran = cli("ingest", str(path), "--run", "p", "-q")
    assert ran.code == 1
    assert ran.err.startswith(
        f"Error: cannot load {path} with weights_only=True: Unsupported operand 100 (it is a "
        "pickle that refers to no unsafe global, but not one written by torch.save)"
    )
    assert "re-save the dump with torch.save" in ran.err and "--trust-pickle" in ran.err
