"""Text from dumps and users shown safely: control characters never reach a terminal raw.

A run name, tag, gpu name, sample id, file name or metric name can come from a file someone else
wrote. Printed as it is, an escape sequence in it could rewrite the user's terminal (or hide part of
an error message), and a right-to-left override could make it read differently. Run names, tags,
gpus and sample ids with such characters are rejected at ingest; file names and metric names from
training logs are kept as they are. Everything shown on a terminal goes through :func:`visible`
(data strings, by the renderers) or :func:`printable` (messages; and every console of the CLI
escapes what reaches it, ``cli/common.py``); JSON output escapes them as ``\\uXXXX``.
"""

from __future__ import annotations

import difflib
import math
import os
import re
from collections.abc import Iterable

# C0 and C1 control characters, DEL, and the bidirectional overrides and isolates.
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
# ... and, when shown, the line and paragraph separators U+2028 and U+2029 too: a terminal may
# break the line there (a name holding them is no damage, only nothing to print raw); _KEEP
# leaves tab and newline to a multi-line message
_SHOWN = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_KEEP = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def has_control(text: str) -> bool:
    return CONTROL.search(text) is not None


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: object) -> str:
    """A data string for the terminal: every control character escaped, newline and tab too (it
    is one value on one line); nothing cut."""
    return _SHOWN.sub(_escape, str(text))


def shown(text: str, limit: int = 200) -> str:
    """``text`` for a one-line message: control characters escaped, cut at ``limit`` characters."""
    cut = text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"
    return _SHOWN.sub(_escape, cut)


def printable(message: str) -> str:
    """A multi-line message with every control character but newline and tab escaped."""
    return _KEEP.sub(_escape, message)


# What json.dumps(ensure_ascii=False) leaves raw: DEL, C1 controls, bidirectional controls. JSON
# itself escapes C0 (and never writes these characters outside strings).
_JSON_RAW = re.compile("[\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def json_safe(text: str) -> str:
    """JSON text with the control characters json leaves raw written as ``\\uXXXX`` escapes."""
    return _JSON_RAW.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def file_label(path: str | os.PathLike[str] | object) -> str:
    """A file as messages name it: its path as the user gave it (a relative path stays relative;
    a file found inside a directory input is that directory, as given, joined with its path
    inside), so that two ``step_3/data.parquet`` are told apart; control characters escaped."""
    return shown(os.fspath(path) if isinstance(path, os.PathLike) else str(path), 400)


OVERFLOW = "overflow"  # a value beyond float64 (null in JSON), e.g. exp(r) for r > 709.78


def number(x: float | int | None, digits: int = 4) -> str:
    """A number as every output writes it: integers with separators; floats in ``digits``
    significant digits, scientific when small or large; ``-`` when missing; ``overflow`` for a
    value beyond float64 (inf, or the NaN of inf - inf; null in JSON)."""
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


def percent(x: float | None) -> str:
    """A fraction as a percentage with one decimal; ``-`` when missing."""
    if x is None:
        return "-"
    return f"{100 * x:.1f}%" if math.isfinite(x) else OVERFLOW


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """A hint's "did you mean `a` or `b`? " for the known names closest to a mistyped one (in
    any case; difflib's ratio at least 0.6, a far second left out), "" when none is close: the
    hint names the likely one instead of listing them all."""
    choices = list(known)
    lower = {c.lower(): c for c in choices}
    score = {c: difflib.SequenceMatcher(None, name.lower(), c).ratio() for c in lower}
    close = difflib.get_close_matches(name.lower(), list(lower), n=2, cutoff=0.6)
    close = [c for c in close if score[c] >= score[close[0]] - 0.1]
    return (
        f"did you mean {' or '.join(f'`{shown(lower[c], 80)}`' for c in close)}? " if close else ""
    )
