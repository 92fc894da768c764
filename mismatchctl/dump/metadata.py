"""The Parquet key-value metadata of a dump: the run tags, the step, and the layout version.

A tag is written only if ``ingest`` reads it back as the same tag (a simple key, a short printable
value without surrounding spaces, not a reserved key); anything else is refused when the writer is
made, not silently dropped at ingest.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mismatchctl.display import shown
from mismatchctl.dump.layout import LAYOUT_KEY, LAYOUT_VERSION
from mismatchctl.errors import UsageError
from mismatchctl.ingest.source import tags_from_metadata

MAX_TAG_VALUE = 256


def checked_tags(tags: Mapping[str, Any] | None) -> dict[str, str]:
    """The tags as text (numbers are written as ``str(value)``), each one ingest reads back."""
    out: dict[str, str] = {}
    for key, value in (tags or {}).items():
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise UsageError(
                f"tags: `{shown(str(key), 70)}` has a {type(value).__name__} value "
                "(expected text or a number)",
                "pass tags such as {'gpu': 'H20', 'engine': 'vllm-0.18.1', 'tp': 2}.",
            )
        text = str(value)
        if not isinstance(key, str) or tags_from_metadata(_encoded(key, text)) != {key: text}:
            raise UsageError(f"tags: {_why(key, text)}", _TAG_HINT)
        out[key] = text
    return out


_TAG_HINT = (
    "tag keys: letters, digits, `_`, `.` and `-`, at most 64 characters, not starting with a "
    f"digit, not `step`; values: printable text of 1 to {MAX_TAG_VALUE} characters without "
    "leading or trailing spaces."
)


def _encoded(key: str, text: str) -> dict[bytes, bytes]:
    return {key.encode(errors="surrogatepass"): text.encode(errors="surrogatepass")}


def _why(key: Any, text: str) -> str:
    """Why ingest would not read this tag back as it is."""
    if not isinstance(key, str):
        return f"key {shown(repr(key), 70)} is not text"
    if key in ("step", "pandas", "huggingface"):
        return f"key `{key}` is reserved (ingest does not read it as a tag)"
    if text != text.strip() or not text:
        return f"`{shown(key, 70)}`: value {shown(repr(text), 70)} is empty or padded with spaces"
    if len(text) > MAX_TAG_VALUE:
        return f"`{shown(key, 70)}`: value of {len(text)} characters (at most {MAX_TAG_VALUE})"
    return f"`{shown(key, 70)}` = {shown(repr(text), 70)} is not a simple key with printable text"


def file_metadata(step: int, tags: Mapping[str, str]) -> dict[str, str]:
    return {**tags, "step": str(step), LAYOUT_KEY: LAYOUT_VERSION}
