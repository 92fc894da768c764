"""``ingest/ready.py``: a file cut anywhere before its end is not complete; the whole file is;
temp names and dotfiles are not candidates."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from mismatchctl.ingest.ready import candidates, incomplete, is_candidate
from tests.helpers import FIXTURES
from tests.watch_writer import write_step


def _cuts(data: bytes) -> list[int]:
    """Every length of the last 64 bytes and 32 spread over the rest (the footer is at the end)."""
    n = len(data)
    return sorted({*range(max(0, n - 64), n), *range(0, n, max(1, n // 32))})


def _assert_complete_only_whole(src: Path, tmp_path: Path) -> None:
    data = src.read_bytes()
    dest = tmp_path / src.name
    for cut in _cuts(data):
        dest.write_bytes(data[:cut])
        assert incomplete(dest) is not None, f"{src.name} cut at {cut} of {len(data)} bytes"
    dest.write_bytes(data)
    assert incomplete(dest) is None


def test_parquet_is_complete_only_whole(tmp_path: Path) -> None:
    _assert_complete_only_whole(write_step(tmp_path / "src", 1, 0.02), tmp_path)


def test_jsonl_is_complete_when_its_last_line_ends(tmp_path: Path) -> None:
    src = FIXTURES / "train_data_step3.jsonl"
    data = src.read_bytes()
    dest = tmp_path / src.name
    ends = {i + 1 for i, b in enumerate(data) if b == ord("\n")}
    for cut in _cuts(data):
        dest.write_bytes(data[:cut])
        assert (incomplete(dest) is None) == (cut in ends), cut


def test_torch_zip_is_complete_only_whole(tmp_path: Path) -> None:
    _assert_complete_only_whole(FIXTURES / "slime_train_4.pt", tmp_path)


def test_raw_pickle_is_complete_only_whole(tmp_path: Path) -> None:
    src = tmp_path / "src" / "batch.pkl"
    src.parent.mkdir()
    src.write_bytes(pickle.dumps({"a": list(range(200)), "b": "x" * 300}, protocol=5))
    _assert_complete_only_whole(src, tmp_path)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("step_1.parquet", True),
        ("sub/step_1.PQ", True),
        ("train_4.pt", True),
        ("step_1.parquet.tmp", False),
        (".step_1.parquet", False),
        (".staging/step_1.parquet", False),
        ("step_1.parquet.partial", False),
        ("notes.txt", False),
    ],
)
def test_candidates_skip_temp_names_and_dotfiles(tmp_path: Path, name: str, expected: bool) -> None:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x")
    assert is_candidate(path, tmp_path) is expected
    assert (path in candidates(tmp_path)) is expected
