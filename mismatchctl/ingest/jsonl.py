"""JSON lines read one object per line (NeMo-RL train data, prime-rl token exports): a line that
is not JSON, or not an object, is an error naming the file and the line."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from mismatchctl.errors import InputError


def json_objects(path: Path, label: str, unit: str, hint: str) -> Iterator[tuple[int, dict]]:
    """(line number, object) of every non-blank line; ``unit`` names what a line holds ("sample",
    "sequence"), ``hint`` what to do with a line that is not an object."""
    with path.open("rb") as fh:
        for number, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            obj = parsed(raw, label, number)
            if not isinstance(obj, dict):
                raise InputError(
                    f"{label}: line {number} is not a JSON object "
                    f"(found {type(obj).__name__}; expected one object per {unit})",
                    hint,
                )
            yield number, obj


def parsed(raw: bytes, label: str, number: int) -> object:
    """One line's JSON value. What ``json`` refuses to build is an error naming the line: text
    that is not JSON, an integer of more than 4,300 digits (Python's limit on converting
    text to int), arrays or objects nested deeper than the parser's recursion allows."""
    try:
        return json.loads(raw)
    except RecursionError:
        raise InputError(
            f"{label}: line {number} nests arrays or objects too deeply to be read",
            "a dump line holds flat lists of numbers; repair or remove that line.",
        ) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(
            f"{label}: line {number} is not valid JSON ({str(exc)[:200]})",
            "the file is truncated or corrupt; repair or remove that line.",
        ) from None
    except ValueError:  # an integer beyond Python's limit on digits converted from text
        raise InputError(
            f"{label}: line {number} holds an integer of more than {sys.get_int_max_str_digits():,} "
            "digits, which no dump value can be",
            "repair or remove that line.",
        ) from None


def require_keys(
    obj: dict, roles: Sequence[str], keys: Mapping[str, str], label: str, number: int, what: str
) -> None:
    """Every role's key is in the line's object; ``what`` names the role in the hint."""
    for role in roles:
        if keys[role] not in obj:
            raise InputError(
                f"{label}: line {number} has no `{keys[role]}` (found: {', '.join(obj)})",
                f"name the {role}{what} key with --map {role}=<key>.",
            )
