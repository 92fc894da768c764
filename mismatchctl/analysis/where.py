"""``--where KEY=VALUE``: a cell of any split key, as the tables write its value.

A value is matched against the labels the engine gives each key (``engines/keys.py``), written
the way the report's tables write them or more briefly:

- ``bin=[0.001, 0.01)`` or ``bin=0.001-0.01`` (a probability bin of ``--bins``, by its edges);
- ``kv_position=1024``, ``kv_position=[1024, 2048)`` or ``kv_position=1024-2047`` (a position bin
  by its lower edge or its range; likewise ``turn_position``, ``length`` and ``order``);
- ``turn=0|1|2|3+``, ``turn_kind=first|later``;
- ``run``, ``gpu``, ``step``, ``tag:<name>``, ``attr:<name>``: the value itself.

A value that is none of a binned key's labels is a usage error listing them; a value of a data
key (run, step, gpu, tag, attribute) that no token has leaves the cell empty, which the command
reports.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mismatchctl.engines import plan as K
from mismatchctl.engines.keys import Label, PartKeys, key_labels
from mismatchctl.errors import UsageError
from mismatchctl.stats.bins import bin_label
from mismatchctl.stats.positions import order_label, position_label

FIXED = (K.TURN, K.TURN_KIND, K.BIN, *K.POSITION_KEYS, K.DUMP_ORDER)


@dataclass(frozen=True)
class Condition:
    """One ``KEY=VALUE``: for a binned key, the labels it accepts (known before reading)."""

    key: str
    value: str
    labels: tuple[Label, ...] | None = None  # None: a data key, compared as text

    def accepts(self, label: Label) -> bool:
        if self.labels is not None:
            return label in self.labels
        if label is None:
            return False
        return str(label) == self.value

    def __str__(self) -> str:
        return f"{self.key}={self.value}"


def parse_where(
    values: Sequence[str], edges: np.ndarray, binning: K.Binning = K.DEFAULT_BINNING
) -> list[Condition]:
    """Each ``--where`` as a condition (all must hold)."""
    out = []
    for text in values:
        key, eq, value = (p.strip() for p in text.partition("="))
        if not eq or not key or not value:
            raise UsageError(
                f"--where `{text}` is not KEY=VALUE",
                "write e.g. --where bin=0.001-0.01 or --where turn_kind=later.",
            )
        if not K.is_key(key):
            raise UsageError(f"--where `{text}`: unknown key `{key}`", f"use {K.KEYS_HELP}.")
        out.append(_condition(key, value, edges, binning))
    return out


def _condition(key: str, value: str, edges: np.ndarray, binning: K.Binning) -> Condition:
    if key not in FIXED:
        if key == K.STEP and not _is_int(value):
            raise UsageError(f"--where step={value}: a step is an integer", "e.g. --where step=42.")
        return Condition(key, value)
    labels = key_labels(key, edges, binning)
    texts = {lab: _forms(key, lab, edges, binning) for lab in labels}
    found = tuple(lab for lab, forms in texts.items() if _match(value, forms))
    if not found:
        shown = ", ".join(forms[0] for forms in texts.values())
        raise UsageError(
            f"--where {key}={value}: no {key} has that value",
            f"the values of {key} are: {shown}.",
        )
    return Condition(key, value, found)


def _forms(key: str, label: Label, edges: np.ndarray, binning: K.Binning) -> list[str]:
    """How a label may be written: as the tables write it first, then the short forms."""
    if key == K.BIN:
        k = int(label)  # type: ignore[arg-type]
        return [bin_label(edges, k), f"{edges[k]:g}-{edges[k + 1]:g}"]
    if key in K.POSITION_KEYS or key == K.DUMP_ORDER:
        lo = int(label)  # type: ignore[arg-type]
        if key == K.DUMP_ORDER:
            shown = order_label(lo, binning.order_block)
        else:
            shown = position_label(binning.positions, lo)
        forms = [shown, str(lo)]
        if shown.startswith("[") and shown.endswith(")"):
            a, b = shown[1:-1].split(",")
            if b.strip() != "inf":
                forms.append(f"{a.strip()}-{int(b) - 1}")
        return forms
    return [str(label)]


def _match(value: str, forms: list[str]) -> bool:
    """Text equality, or for ``a-b`` ranges equal bounds as numbers (``1e-3-0.01``)."""
    if value in forms:
        return True
    bounds = _range(value)
    return bounds is not None and any(_range(f) == bounds for f in forms[1:])


def _range(text: str) -> tuple[float, float] | None:
    for i, c in enumerate(text):
        if c == "-" and i > 0 and text[i - 1] not in "eE":
            try:
                a, b = float(text[:i]), float(text[i + 1 :])
            except ValueError:
                return None
            return (a, b) if math.isfinite(a) and math.isfinite(b) else None
    return None


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


def cell_mask(conditions: Sequence[Condition], keys: PartKeys) -> np.ndarray | None:
    """The rows of a slice inside every condition's cell (None: no condition)."""
    if not conditions:
        return None
    mask = np.ones(keys.n, dtype=bool)
    for cond in conditions:
        kc = keys.get(cond.key)
        ok = np.array([cond.accepts(lab) for lab in kc.labels], dtype=bool)
        codes = np.broadcast_to(kc.codes, (keys.n,)) if np.ndim(kc.codes) == 0 else kc.codes
        mask &= ok[codes]
    return mask


def where_keys(conditions: Sequence[Condition]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(c.key for c in conditions))


__all__ = ["Condition", "cell_mask", "parse_where", "where_keys"]
