"""The report page's "Worst sequences": the same listing as `tokens --sequences`, from the
report's own read; each row links to a heat view of the sequence's tokens on the page."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import mismatchctl
from mismatchctl import api
from mismatchctl.render import html
from tests.analysis.tokens.tokens_data import tokens_dump
from tests.helpers import cli


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("worst")
    files = [tokens_dump(root / f"d{i}.parquet", seed=40 + i) for i in range(2)]
    mismatchctl.ingest(files, run="a", store=root / "store")
    mismatchctl.ingest([tokens_dump(root / "e.parquet", seed=50)], run="b", store=root / "store")
    return root / "store"


def test_the_listing_is_tokens_sequences(store: Path) -> None:
    rep = mismatchctl.report(["a"], store=store, figures=True)
    assert rep.worst is not None and len(rep.worst.rows) == 10
    listed = api.tokens("a", store=store, sequences=True, top=10)
    assert rep.worst.rows == listed.rows
    assert rep.worst.k3_sum == pytest.approx(listed.cell_k3_sum, rel=1e-12)
    for row, view in zip(rep.worst.rows, rep.worst.views, strict=True):
        shown = api.show("a", row["sample_id"], step=row["step"], store=store)
        assert [t["position"] for t in view.tokens] == [t["position"] for t in shown.tokens]
        assert [t["k3"] for t in view.tokens] == [t["k3"] for t in shown.tokens]
        assert sum(t["k3"] for t in view.tokens) == pytest.approx(row["k3_sum"], rel=1e-12)
    assert mismatchctl.report(["a"], store=store).worst is None  # only for the HTML page


def test_two_runs_and_the_page_links(store: Path, tmp_path: Path) -> None:
    rep = mismatchctl.report(["a", "b"], store=store, figures=True)
    both = [(r["run"], r["seq"]) for r in rep.worst.rows]
    a = api.tokens("a", store=store, sequences=True, top=10).rows
    b = api.tokens("b", store=store, sequences=True, top=10).rows
    merged = sorted(a + b, key=lambda r: (-r["score"], r["run"], r["step"], r["seq"]))[:10]
    assert both == [(r["run"], r["seq"]) for r in merged]
    page = html.page("r", "s", api.sections(rep))
    links = set(re.findall(r'<a href="#(worst-\d[^"]+)">', page))
    assert len(links) == 10
    for anchor in links:
        assert f'<details id="{anchor}"' in page
    ran = cli("report", "a", "--store", str(store), "-q", "--html", str(tmp_path / "r.html"))
    assert ran.code == 0 and "Worst sequences by summed K3" in (tmp_path / "r.html").read_text()
    assert "Worst sequences" not in ran.out  # the terminal report does not show it


def test_a_tokenizer_that_cannot_be_read_is_noted(store: Path, tmp_path: Path) -> None:
    from mismatchctl.store.run_settings import TOKENIZER, set_run_setting

    set_run_setting(mismatchctl.open_store(store), "b", TOKENIZER, str(tmp_path / "gone.json"))
    rep = mismatchctl.report(["b"], store=store, figures=True)
    assert rep.worst is not None and "run b: its tokenizer cannot be read" in rep.worst.notes[0]
    assert rep.worst.views[0].tokens[0]["text"].isdigit()  # ids, as without a tokenizer
    assert "its tokenizer cannot be read" in html.page("r", "s", api.sections(rep))
    set_run_setting(mismatchctl.open_store(store), "b", TOKENIZER, "bytes")
    rep = mismatchctl.report(["b"], store=store, figures=True)
    assert rep.worst.notes == [] and rep.worst.views[0].tokenizer == "bytes"
