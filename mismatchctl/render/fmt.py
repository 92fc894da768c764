"""Number formatting and severity styles shared by the terminal renderers."""

from __future__ import annotations

import math

from rich.text import Text

from mismatchctl.display import visible

BAND_STYLE = {"low": "green", "medium": "yellow", "high": "bold dark_orange", "severe": "bold red"}


def num(x: float | int | None, digits: int = 4) -> str:
    """Integers with separators; floats in 4 significant digits, scientific when small or large."""
    if x is None:
        return "-"
    if isinstance(x, int):
        return f"{x:,}"
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if x == 0:
        return "0"
    if 1e-3 <= abs(x) < 1e4:
        return f"{x:.{digits}g}"
    return f"{x:.{digits - 1}e}"


def step_span(lo: int, hi: int) -> str:
    """Steps ``lo`` to ``hi`` as ``--steps`` reads them: ``3-8``, or ``-6..-5`` with a negative."""
    return f"{lo}-{hi}" if lo >= 0 else f"{lo}..{hi}"


def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def band_text(name: str | None) -> Text:
    return Text(name or "-", style=BAND_STYLE.get(name or "", ""))


def kl_text(x: float | None, name: str | None) -> Text:
    return Text(num(x), style=BAND_STYLE.get(name or "", ""))


def label(value: object) -> str:
    """A group's key (a run, gpu or tag value from the data) as shown: control characters
    escaped (``display.visible``)."""
    return "(none)" if value is None else visible(value)
