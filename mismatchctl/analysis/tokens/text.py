"""A listed token's context as one line of text: the ids (or, with a tokenizer, the decoded
text) of the tokens before it, the token itself in brackets, the tokens after it, and a marker
``|N masked|`` where masked positions (a tool response, when turns are split) lie between two
model tokens of the context."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

# Turns token ids into the text of each (None: a token without an id).
Decoder = Callable[[Sequence[int | None]], list[str]]


def ids_text(ids: Sequence[int | None]) -> list[str]:
    """The default decoder: each id as its number, ``?`` where the dump has none."""
    return ["?" if i is None else str(i) for i in ids]


def context_text(row: dict[str, Any], decode: Decoder = ids_text, sep: str = " ") -> str:
    """``before [token] after`` with gap markers, from a token row of the listing."""
    before, after = row["before"], row["after"]
    positions = [*before["positions"], row["position"], *after["positions"]]
    texts = decode([*before["ids"], row["token_id"], *after["ids"]])
    k = len(before["positions"])
    texts[k] = f"[{texts[k]}]"
    out: list[str] = []
    for j, text in enumerate(texts):
        if j and positions[j] - positions[j - 1] > 1:
            out.append(
                f"{' ' if not sep else ''}|{positions[j] - positions[j - 1] - 1} masked|"
                f"{' ' if not sep else ''}"
            )
        out.append(text)
    return sep.join(out)
