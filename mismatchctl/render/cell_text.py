"""How a cell is written, the same in the terminal and in the HTML page: numbers by their kind,
data strings with their control characters made visible."""

from __future__ import annotations

import math
from typing import Any

from mismatchctl.analysis import sections as sec
from mismatchctl.display import OVERFLOW, number, percent, visible

BAND_STYLE = {"low": "green", "medium": "yellow", "high": "bold dark_orange", "severe": "bold red"}
# a token's |r| level (analysis/show/view.py), coolest first: the terminal's backgrounds and the
# HTML page's (the same colours)
HEAT_COLOURS = ("", "#fff3b0", "#ffd166", "#f79d5c", "#e8553e", "#b3001b")
HEAT_STYLE = (
    "",
    "black on #fff3b0",
    "black on #ffd166",
    "black on #f79d5c",
    "white on #e8553e",
    "bold white on #b3001b",
)
HEAT_MARK_STYLE = "underline"  # a marked token (MoE routing flipped), in the terminal
VERDICT_STYLE = {
    "ok": "green",
    "warn": "bold yellow",
    "fail": "bold red",
    "damaged": "bold red",
    "n/a": "dim",
}


def cell_text(value: Any, kind: sec.Kind) -> str:
    """A cell as text: ``-`` when missing, numbers by kind, strings escaped."""
    if value is None and kind == sec.Kind.LABEL:
        return "(none)"
    if value is None or value == "":
        return "-" if kind != sec.Kind.TEXT else ""
    if kind == sec.Kind.COUNT:
        return number(int(value)) if _finite(value) else OVERFLOW
    if kind == sec.Kind.ID:
        return str(value)
    if kind == sec.Kind.SHARE:
        return percent(float(value))
    if kind == sec.Kind.CORR:
        return number(value, 6)
    if kind == sec.Kind.SIGNED:
        return f"{value:+.3f}" if _finite(value) else OVERFLOW
    if kind == sec.Kind.VERDICT:  # the verdicts of the checks stand out; other states do not
        return str(value).upper() if value in ("ok", "warn", "fail") else visible(value)
    if kind in (sec.Kind.VALUE, sec.Kind.RATIO):
        return number(value) if isinstance(value, int | float) else visible(value)
    return visible(value)


def _finite(x: Any) -> bool:
    return not isinstance(x, float) or math.isfinite(x)
