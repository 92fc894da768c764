"""Number formatting and severity styles shared by the terminal renderers."""

from __future__ import annotations

import math

from rich.text import Text

from mismatchctl.display import visible
from mismatchctl.stats import EXP_MAX
from mismatchctl.stats import registry as M

BAND_STYLE = {"low": "green", "medium": "yellow", "high": "bold dark_orange", "severe": "bold red"}


OVERFLOW = "overflow"  # a value beyond float64 (null in JSON), e.g. exp(r) for r > 709.78


def num(x: float | int | None, digits: int = 4) -> str:
    """Integers with separators; floats in 4 significant digits, scientific when small or large.
    A value beyond float64 (inf, or the NaN of inf - inf or inf / inf; null in JSON) is
    ``overflow``."""
    if x is None:
        return "-"
    if isinstance(x, int):
        return f"{x:,}"
    if not math.isfinite(x):
        return OVERFLOW
    if x == 0:
        return "0"
    if 1e-3 <= abs(x) < 1e4:
        return f"{x:.{digits}g}"
    return f"{x:.{digits - 1}e}"


def step_span(lo: int, hi: int) -> str:
    """Steps ``lo`` to ``hi`` as ``--steps`` reads them: ``3-8``, or ``-6..-5`` with a negative."""
    return f"{lo}-{hi}" if lo >= 0 else f"{lo}..{hi}"


def pct(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{100 * x:.1f}%" if math.isfinite(x) else OVERFLOW


def overflow_text(metrics: dict) -> str | None:
    """Why a group's ``vllm_kl`` is not a number, or None when it is: the tokens whose ``exp(r)``
    is beyond float64, or (without one) a sum beyond it. The same words in terminal and HTML."""
    kl = metrics.get(M.VLLM_KL)
    if kl is None or math.isfinite(kl):
        return None
    n = metrics.get(M.OVERFLOW_TOKENS) or 0
    if n:
        return (
            f"overflow: exp(r) is beyond float64 (r > {EXP_MAX:.2f}) in {n:,} "
            f"token{'s' if n != 1 else ''}; vllm_kl, ratio_dev_1e4 and vllm_kl_seq_mean are "
            "not numbers (null in JSON)"
        )
    return "overflow: the sum of exp(r) is beyond float64; vllm_kl is not a number (null in JSON)"


def band_text(name: str | None) -> Text:
    return Text(name or "-", style=BAND_STYLE.get(name or "", ""))


def kl_text(x: float | None, name: str | None) -> Text:
    return Text(num(x), style=BAND_STYLE.get(name or "", ""))


def label(value: object) -> str:
    """A group's key (a run, gpu or tag value from the data) as shown: control characters
    escaped (``display.visible``)."""
    return "(none)" if value is None else visible(value)
