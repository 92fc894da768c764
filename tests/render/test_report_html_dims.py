"""The report page with the splits of the per-token entropy, the trainer probability and the
batch size (`report --html --by entropy --by trainer_prob --by batch_size`): each split has its
section, listed in the contents, with a table whose rows are the bins, labelled as the terminal
labels them, in order, with the numbers of the report's JSON."""

from __future__ import annotations

import json
import re
from html import unescape
from pathlib import Path

import pytest

from tests.engines.test_dimensions_entropy_batch import entropy_batch_dump
from tests.helpers import cli

ENTROPY = ["[0, 0.001)", "[0.001, 0.01)", "[0.01, 0.1)", "[0.1, 0.5)", "[0.5, 1)", "[1, 2)",
           "[2, 4)", "[4, inf)"]  # fmt: skip
TRAINER_PROB = ["[0.01, 0.1)", "[0.1, 0.5)", "[0.5, 0.9)", "[0.9, 0.99)", "[0.99, 1]"]
BATCH_SIZE = ["1", "3", "8"]  # each step: 6 micro-batches of 8, 7 of 3 and one of 1
BY = ("--by", "entropy", "--by", "trainer_prob", "--by", "batch_size")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("html-dims")
    dump = entropy_batch_dump(root / "eb.parquet")
    ran = cli("ingest", str(dump), "--run", "d", "--store", str(root / "store"), "-q")
    assert ran.code == 0, ran.err
    return root / "store"


def _section(page: str, key: str) -> str:
    """The split's section of the page (its id escapes `_` as `_5f`)."""
    anchor = "split-" + key.replace("_", "_5f")
    found = re.search(rf'<section id="{anchor}">(.*?)</section>', page, re.S)
    assert found, f"no section {anchor}"
    assert f'<a href="#{anchor}">By {key}</a>' in page  # in the contents
    return found.group(1)


def _first_cells(section: str) -> list[str]:
    """Each row's label: its first cell, as the page shows it."""
    rows = re.findall(r"<tr><td[^>]*>(.*?)</td>", section, re.S)
    return [unescape(r) for r in rows]


def test_the_page_holds_the_three_splits_with_readable_bins(store: Path, tmp_path: Path) -> None:
    page_path = tmp_path / "report.html"
    ran = cli("report", "d", *BY, "--store", str(store), "--html", str(page_path), "-q")
    assert ran.code == 0, ran.err
    page = page_path.read_text()
    entropy = _section(page, "entropy")
    assert "<h2>By entropy</h2>" in entropy and '<th class="l">entropy</th>' in entropy
    assert _first_cells(entropy) == ENTROPY
    trainer = _section(page, "trainer_prob")
    assert '<th class="l">trainer_prob</th>' in trainer
    labels = _first_cells(trainer)
    assert labels[-len(TRAINER_PROB) :] == TRAINER_PROB  # the rarer bins first, ascending
    assert _first_cells(_section(page, "batch_size")) == BATCH_SIZE


def test_the_page_s_cells_are_the_json_s_numbers(store: Path, tmp_path: Path) -> None:
    page_path = tmp_path / "report.html"
    ran = cli("report", "d", *BY, "--store", str(store), "--html", str(page_path),
              "--json", "-", "-q")  # fmt: skip
    groups = json.loads(ran.out)["groups"]
    sizes = {g["by"]["batch_size"]: g for g in groups if list(g["by"]) == ["batch_size"]}
    section = _section(page_path.read_text(), "batch_size")
    for size, label in zip(sorted(sizes), BATCH_SIZE, strict=True):
        row = re.search(rf'<tr><td class="l">{label}</td><td class="n">([\d,]+)</td>', section)
        assert row and int(row.group(1).replace(",", "")) == sizes[size]["metrics"]["tokens"]
