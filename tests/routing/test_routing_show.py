"""`show` on a run with MoE routes: each token's producing position's routing (flipped at which
layer, same, unpaired) in the JSON, flipped tokens marked (underlined) in the terminal and the
HTML with a legend entry, golden outputs of a hand-made sequence; the report's worst sequences
mark them too.

Regenerate the golden files after a deliberate change with ``MISMATCHCTL_UPDATE_GOLDEN=1 pytest
tests/routing/test_routing_show.py`` and review the diff."""

from __future__ import annotations

import io
import os
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from rich.console import Console

import mismatchctl
from mismatchctl import api
from mismatchctl.analysis.show.view import FLIP_MARK
from mismatchctl.render import html, terminal

GOLDEN_DIR = Path(__file__).parents[1] / "golden"
TEXT = list(b"Route me, ok")  # 12 byte tokens; positions 6-7 ("me") are a tool response
MASK = [1] * 6 + [0] * 2 + [1] * 4
R = [0.0, 0.002, 0.0, 0.3, 0.0, 1.2, 0.0, 0.0, 0.0, 0.05, 0.0, 0.0]
LAYERS = 3


def _routes() -> tuple[list, list]:
    """Engine rows ``[l, l + 1]`` per layer; the trainer differs at row 2 on layer 1 (token 3
    flipped, first at layer 1) and at row 4 on layers 0 and 2 (token 5, first at layer 0); the
    engine did not record row 9 (token 10 unpaired); row 7 (a tool position) differs on layer
    2, so token 8, the first after the tool response, is flipped at layer 2."""
    eng = [[[x, x + 1] for x in range(LAYERS)] for _ in TEXT]
    tr = [[list(reversed(pair)) for pair in row] for row in eng]  # the same sets, reordered
    tr[2][1] = [1, 5]
    tr[4][0], tr[4][2] = [6, 7], [2, 4]
    tr[7][2] = [3, 0]
    eng[9] = [[-1, -1] for _ in range(LAYERS)]
    return eng, tr


EXPECTED = [
    ("unpaired", None),  # position 0: no producing row in a response-aligned dump
    ("same", None),
    ("same", None),
    ("flipped", 1),
    ("same", None),
    ("flipped", 0),
    ("flipped", 2),  # position 8
    ("same", None),
    ("unpaired", None),  # position 10: row 9 not recorded
    ("same", None),
]


def _check(name: str, text: str) -> None:
    path = GOLDEN_DIR / name
    if os.environ.get("MISMATCHCTL_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text()


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("show-moe")
    lr = [-1.5] * len(TEXT)
    eng, tr = _routes()
    rows = {
        "step": [0],
        "uid": ["moe1"],
        "responses": [TEXT],
        "response_mask": [MASK],
        "rollout_log_probs": [lr],
        "old_log_probs": [[a + b for a, b in zip(lr, R, strict=True)]],
        "prompt_length": [5],
        "rollout_routed_experts": [eng],
        "trainer_routed_experts": [tr],
    }
    pq.write_table(pa.table(rows), root / "moe.parquet")
    mismatchctl.ingest([root / "moe.parquet"], run="moe", store=root / "store")
    return root / "store"


def test_tokens_carry_their_producing_positions_routing(store: Path) -> None:
    s = api.show("moe", "moe1", store=store, tokenizer="bytes")
    assert [t["position"] for t in s.tokens] == [0, 1, 2, 3, 4, 5, 8, 9, 10, 11]
    assert [(t["routing"], t["first_flip_layer"]) for t in s.tokens] == EXPECTED
    heat = api.sections(s)[1]
    assert heat.mark == FLIP_MARK
    marked = [i.text for i in heat.items if getattr(i, "mark", False)]
    assert marked == ["t", " ", ","]  # positions 3, 5 and 8
    tips = [i.tip for i in heat.items if hasattr(i, "tip")]
    assert tips[3].endswith("routing flipped (first differing layer 1)")
    assert tips[1].endswith("routing same") and tips[0].endswith("routing unpaired")


def test_golden_terminal_and_html(store: Path) -> None:
    s = api.show("moe", "moe1", store=store, tokenizer="bytes")
    out = io.StringIO()
    Console(file=out, force_terminal=True, color_system="truecolor", width=100).print(
        terminal.render(api.sections(s))
    )
    text = out.getvalue()
    assert "\x1b[4m" + FLIP_MARK[:10] in text  # the legend entry, underlined
    _check("show_moe_terminal.ansi", text)
    page = html.page("show", "one sequence", api.sections(s))
    heat = re.search(r'<p class="heat-legend">.*?</div>', page, re.S)
    assert heat is not None
    assert heat.group(0).count('heat-mark"') == 3 + 1  # three tokens and the legend entry
    assert ".heat-mark" in page  # its style
    _check("show_moe_heat.html", heat.group(0) + "\n")


def test_report_worst_sequences_mark_flips(store: Path) -> None:
    rep = api.report(["moe"], store=store, figures=True)
    page = html.page("report", "moe", api.sections(rep))
    view = re.search(r'<div class="heat">.*?</div>', page, re.S)
    assert view is not None and view.group(0).count("heat-mark") == 3
