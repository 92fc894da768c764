"""`mismatchctl show`: the sequence found by its sample id, its tokens against the dump's arrays,
tool responses as text (their token ids kept at ingest) or as gaps with their length, sequences
sharing a sample id, golden terminal (with its colours) and HTML output, the pruned read, and the
errors.

Regenerate the golden files after a deliberate change with ``MISMATCHCTL_UPDATE_GOLDEN=1 pytest
tests/analysis/show/test_show.py`` and review the diff."""

from __future__ import annotations

import io
import json
import os
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from rich.console import Console

import mismatchctl
from mismatchctl import api
from mismatchctl.errors import StoreError, UsageError
from mismatchctl.render import html, terminal
from mismatchctl.store import parts as store_parts
from tests.analysis.tokens.tokens_data import tokens_dump
from tests.helpers import cli

GOLDEN_DIR = Path(__file__).parents[2] / "golden"
TEXT = [*b"Hello, tool!", *b"=42", *b" Done.\n"]  # "=42": the tool response
MASK = [1] * 12 + [0] * 3 + [1] * 7
R = [0.0, 0.0005, -0.005, 0.05, -0.3, 0.7, -2.0, 0.0, 0.0, 0.0, 0.0, 0.0] + [0.0] * 3 + [
    0.0, 0.02, 0.0, 0.0, 0.0, 0.0, 0.0,
]  # fmt: skip


def _check(name: str, text: str) -> None:
    path = GOLDEN_DIR / name
    if os.environ.get("MISMATCHCTL_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text()


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Run `g`: one byte-level sequence `g1` with a tool response (golden), and `dup` twice
    (steps 0 and 1) and three times in all, ingested without the tool responses' token ids;
    run `gm`: the same with them (the default); run `a`: random multi-turn sequences."""
    root = tmp_path_factory.mktemp("show")
    lr = [-3.0] * len(TEXT)
    rows = {
        "step": [0, 0, 1, 1],
        "uid": ["g1", "dup", "dup", "dup"],
        "responses": [TEXT, TEXT[:5], TEXT[:6], TEXT[:7]],
        "response_mask": [MASK, [1] * 5, [1] * 6, [1] * 7],
        "rollout_log_probs": [lr, lr[:5], lr[:6], lr[:7]],
        "old_log_probs": [[a + b for a, b in zip(lr, R, strict=True)], lr[:5], lr[:6], lr[:7]],
        "prompt_length": [9, 9, 9, 9],
    }
    pq.write_table(pa.table(rows), root / "g.parquet")
    mismatchctl.ingest([root / "g.parquet"], run="g", store=root / "store", keep_masked=False)
    mismatchctl.ingest([root / "g.parquet"], run="gm", store=root / "store")
    files = [tokens_dump(root / f"d{i}.parquet", seed=i) for i in range(2)]
    mismatchctl.ingest(files, run="a", store=root / "store")
    return root / "store"


def test_tokens_against_the_dump(store: Path) -> None:
    dump = {r["uid"]: r for r in pq.read_table(store.parent / "d1.parquet").to_pylist()}
    for uid in ("s1-2-3", "s1-3-7", "s1-0-0"):
        s = api.show("a", uid, store=store)
        row = dump[uid]
        mask = np.array(row["response_mask"], bool)
        model = np.flatnonzero(mask)
        assert [t["position"] for t in s.tokens] == model.tolist()
        assert [t["token_id"] for t in s.tokens] == np.array(row["responses"])[model].tolist()
        assert [t["rollout_logprob"] for t in s.tokens] == [
            row["rollout_log_probs"][p] for p in model
        ]
        assert [t["trainer_logprob"] for t in s.tokens] == [row["old_log_probs"][p] for p in model]
        r = np.array(row["old_log_probs"])[model] - np.array(row["rollout_log_probs"])[model]
        np.testing.assert_allclose([t["k3"] for t in s.tokens], np.expm1(r) - r, rtol=1e-15)
        assert s.sequence["step"] == row["step"] and s.candidates == 1
        gaps = [i.label for i in api.sections(s)[1].items if hasattr(i, "label")]
        tool = (~mask[model[0] : model[-1] + 1]).sum()
        assert sum(int(g.split(": ")[1].split(" ")[0]) for g in gaps if "tool" in g) == tool
        # the tool responses' own token ids (kept at ingest), as the dump has them
        inside = np.arange(model[0], model[-1] + 1)
        masked = inside[~mask[inside]]
        assert [m["position"] for m in s.masked] == masked.tolist()
        assert [m["token_id"] for m in s.masked] == np.array(row["responses"])[masked].tolist()
        assert [m["text"] for m in s.masked] == [str(i) for i in np.array(row["responses"])[masked]]


def test_golden_terminal_with_colours_and_html(store: Path) -> None:
    s = api.show("g", "g1", store=store, tokenizer="bytes")
    out = io.StringIO()
    Console(file=out, force_terminal=True, color_system="truecolor", width=100).print(
        terminal.render(api.sections(s))
    )
    _check("show_g1_terminal.ansi", out.getvalue())
    page = html.page("show", "one sequence", api.sections(s))
    heat = re.search(r'<p class="heat-legend">.*?</div>', page, re.S)
    assert heat is not None
    _check("show_g1_heat.html", heat.group(0) + "\n")


def test_golden_tool_response_as_text(store: Path) -> None:
    """Run `gm` kept the tool response's token ids: the gap is followed by its text, marked."""
    s = api.show("gm", "g1", store=store, tokenizer="bytes")
    assert s.masked == [
        {"position": 12 + k, "token_id": b, "text": chr(b)} for k, b in enumerate(b"=42")
    ]
    out = io.StringIO()
    Console(file=out, force_terminal=True, color_system="truecolor", width=100).print(
        terminal.render(api.sections(s))
    )
    text = out.getvalue()
    assert "\x1b[3;36m=42\x1b[0m" in text  # italic cyan, after its marker
    _check("show_g1_masked_terminal.ansi", text)
    page = html.page("show", "one sequence", api.sections(s))
    heat = re.search(r'<p class="heat-legend">.*?</div>', page, re.S)
    assert heat is not None and 'class="heat-masked"' in heat.group(0)
    _check("show_g1_masked_heat.html", heat.group(0) + "\n")


def test_tool_response_without_its_ids_is_a_gap(store: Path) -> None:
    """Run `g` was ingested with keep_masked=False: the gap with its length, and why."""
    s = api.show("g", "g1", store=store, tokenizer="bytes")
    assert s.masked == [] and s.to_dict()["show"]["masked"] == []
    heat = api.sections(s)[1]
    gaps = [i for i in heat.items if hasattr(i, "label")]
    assert [g.text for g in gaps] == [None, None]
    assert "their token ids were not kept at ingest" in heat.how
    ids = api.show("gm", "g1", store=store, tokenizer=None)  # remembered: bytes
    assert ids.tokenizer == "bytes"
    st = mismatchctl.open_store(store)
    assert st.parts("g", "masked") == [] and len(st.parts("gm", "masked")) == 1


def test_tool_response_ids_without_a_tokenizer(store: Path) -> None:
    """Run `a` has no tokenizer: a tool response's ids follow its marker, like the tokens'."""
    s = api.show("a", "s1-2-3", store=store)
    gaps = [i for i in api.sections(s)[1].items if hasattr(i, "label")]
    texts = [g.text for g in gaps if g.text is not None]
    assert texts and all(t.replace(" ", "").isdigit() for t in texts)
    assert texts[0] == " ".join(m["text"] for m in s.masked[: len(texts[0].split())])


def test_levels_gaps_and_tooltips(store: Path) -> None:
    s = api.show("g", "g1", store=store, tokenizer="bytes")
    heat = api.sections(s)[1]
    tokens = [i for i in heat.items if hasattr(i, "level")]
    assert [t.level for t in tokens[:7]] == [0, 0, 1, 2, 3, 4, 5]
    assert "".join(t.text for t in tokens) == "Hello, tool! Done.\\n"
    gap = [i.label for i in heat.items if hasattr(i, "label")]
    assert gap == ["prompt: 9 tokens", "tool response: 3 tokens, then turn 1"]
    assert "p_trainer 0.006738" in tokens[6].tip and "r -2" in tokens[6].tip


def test_sequences_sharing_a_sample_id(store: Path) -> None:
    with pytest.raises(UsageError) as info:
        api.show("g", "dup", store=store)
    assert "3 sequences of run `g` have the sample id `dup`" in info.value.message
    assert "0: step 0, seq 1, 5 tokens; 1: step 1" in info.value.message
    with pytest.raises(UsageError) as info:
        api.show("g", "dup", step=1, store=store)
    assert "2 sequences of run `g` at step 1" in info.value.message
    s = api.show("g", "dup", step=1, index=1, store=store)
    assert len(s.tokens) == 7 and s.candidates == 2 and s.index == 1
    with pytest.raises(UsageError, match="--index 5"):
        api.show("g", "dup", index=5, store=store)


def test_errors(store: Path) -> None:
    with pytest.raises(StoreError, match="no sequence with sample id `nope` in run `g`"):
        api.show("g", "nope", store=store)
    with pytest.raises(StoreError, match="no sequence with sample id `g1` in run `g` at step 4"):
        api.show("g", "g1", step=4, store=store)
    with pytest.raises(StoreError, match="no run `zz`"):
        api.show("zz", "g1", store=store)
    ran = cli("show", "g", "dup", "--store", str(store))
    assert ran.code == 1 and "--index" in ran.err and not ran.out


def test_read_is_pruned_by_the_statistics(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Parts of many row groups: only the one whose seq statistics hold the sequence is read,
    and its tokens are the dump's."""
    cut = store_parts.whole_sequence_groups
    monkeypatch.setattr(store_parts, "whole_sequence_groups", lambda t: cut(t, 100))
    dump = tokens_dump(tmp_path / "d.parquet", seed=4)
    mismatchctl.ingest([dump], run="rg", store=tmp_path / "store")
    st = mismatchctl.open_store(tmp_path / "store")
    groups = [pq.ParquetFile(st.part_path(p)).num_row_groups for p in st.parts("rg")]
    assert sum(groups) >= 10
    read: list[list[int]] = []
    original = pq.ParquetFile.read_row_groups

    def spy(self: pq.ParquetFile, which: list[int], **kw: object) -> pa.Table:
        read.append(list(which))
        return original(self, which, **kw)

    monkeypatch.setattr(pq.ParquetFile, "read_row_groups", spy)
    rows = pq.read_table(dump).to_pylist()  # a sequence of the last step with a tool response
    row = next(r for r in rows if r["step"] == 3 and 0 in r["response_mask"])
    s = api.show("rg", row["uid"], store=tmp_path / "store")
    assert [len(g) for g in read] == [1, 1]  # a row group of tokens, one of tool responses
    assert len(s.masked) == len(row["response_mask"]) - sum(row["response_mask"])
    model = np.flatnonzero(row["response_mask"])
    assert [t["position"] for t in s.tokens] == model.tolist()


def test_cli_json_html_and_polars(store: Path, tmp_path: Path) -> None:
    ran = cli("show", "g", "g1", "--store", str(store), "--json", "-")
    doc = json.loads(ran.out)["show"]
    assert doc["sequence"]["seq"] == 0 and len(doc["tokens"]) == 19
    assert doc["tokenizer"] == "bytes"  # remembered from the golden test's --tokenizer bytes
    ran = cli("show", "g", "g1", "--store", str(store), "--html", str(tmp_path / "s.html"))
    page = (tmp_path / "s.html").read_text()
    assert ran.code == 0 and "heat-5" in page
    # a sequence's page draws no figure: no plotting library in it, a few tens of KB
    assert "plotly" not in page.lower() and "data-figure" not in page
    assert len(page.encode()) < 100_000
    df = api.show("g", "g1", store=store).to_polars()
    assert df.height == 19 and df["position"].to_list()[11:13] == [11, 15]


def test_rows_out_of_order_in_a_part(tmp_path: Path) -> None:
    """A part whose sequence's rows are interleaved with another's and not by position (the
    store's own writer keeps them together, in order): the same rows, by position."""
    from mismatchctl.analysis.show.show import _read_part

    seq = [7, 9, 7, 9, 7, 7]
    position = [3, 0, 1, 1, 0, 2]
    trainer = [-0.3, -0.9, -0.1, -0.8, -0.0, -0.2]
    path = tmp_path / "part.parquet"
    pq.write_table(pa.table({"seq": seq, "position": position, "trainer_logprob": trainer}), path)
    got = _read_part(pq.ParquetFile(path), 7, ("seq", "position", "trainer_logprob"))
    assert got is not None
    assert got.column("position").to_pylist() == [0, 1, 2, 3]
    assert got.column("trainer_logprob").to_pylist() == [-0.0, -0.1, -0.2, -0.3]
    in_order = _read_part(pq.ParquetFile(path), 9, ("seq", "position"))
    assert in_order is not None and in_order.column("position").to_pylist() == [0, 1]
    assert _read_part(pq.ParquetFile(path), 8, ("seq", "position")) is None
