"""The JSON writer: the same document as json's own indented output (NaN and infinities as
null, control characters escaped, non-ASCII text kept), objects indented, and a flat list item
(a token, a point) or a list of plain values on one line."""

from __future__ import annotations

import json
import math

import numpy as np

from mismatchctl.render.json import dumps


def test_same_document_as_json_module() -> None:
    doc = {
        "run": "é-run\x01",
        "n": np.int64(3),
        "x": np.float64(0.25),
        "bad": [math.nan, math.inf, -math.inf],
        "tokens": [{"position": i, "r": i / 3, "text": "a\u202eb"} for i in range(5)],
        "nested": [{"where": {"gpu": "H20"}, "rows": [[1, 2], [3]]}, [], {}],
        "empty": {},
        "edges": [],
    }
    text = dumps(doc)
    want = {
        "run": "é-run\x01", "n": 3, "x": 0.25, "bad": [None, None, None],
        "tokens": [{"position": i, "r": i / 3, "text": "a\u202eb"} for i in range(5)],
        "nested": [{"where": {"gpu": "H20"}, "rows": [[1, 2], [3]]}, [], {}],
        "empty": {}, "edges": [],
    }  # fmt: skip
    assert json.loads(text) == want
    assert "\x01" not in text and "\u202e" not in text  # escaped
    assert "\\u0001" in text and "é" in text


def test_layout() -> None:
    text = dumps({"a": [1, 2.5, None], "rows": [{"x": 1}, {"x": 2, "y": [1]}], "o": {"k": 1}})
    assert text == (
        "{\n"
        '  "a": [1, 2.5, null],\n'
        '  "rows": [\n'
        '    {"x": 1},\n'
        "    {\n"
        '      "x": 2,\n'
        '      "y": [1]\n'
        "    }\n"
        "  ],\n"
        '  "o": {\n'
        '    "k": 1\n'
        "  }\n"
        "}"
    )
