"""Readable names of a set of a dimension's values: a few ranges (or values) one by one, more by
their structure (``19-199: 61 of 181, in 30 short bursts``, ``1-22: 8 of 22, every 3rd``,
``gsm8k,math,code and 9 more (12 of 17)``).

A finding's exact set stays in its ``where`` (every range, as ``codes_label`` of
``stats/cube/spec.py`` writes it) and in the JSON; these names are for the sentences a person
reads.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from mismatchctl.stats.cube.spec import Dim, codes_label, run_label

MAX_RUNS = 3  # ranges of an ordered dimension named one by one
MAX_VALUES = 4  # values of an unordered dimension named one by one
SHOWN_VALUES = 3  # ... and the first ones named before "and N more"
SHORT_RUN = 4  # runs shorter than this on average are bursts, not stretches
MIN_PERIODIC = 4  # values at a constant stride named "every k-th" (fewer: a few values)


def runs(codes: Iterable[int]) -> list[tuple[int, int]]:
    """Runs of consecutive codes, ``(first, last)`` each, in order."""
    out: list[tuple[int, int]] = []
    for c in sorted(int(c) for c in codes):
        if out and c == out[-1][1] + 1:
            out[-1] = (out[-1][0], c)
        else:
            out.append((c, c))
    return out


def name_values(dim: Dim, codes: Iterable[int], present: Iterable[int] | None = None) -> str:
    """The name of a set of ``dim``'s codes; ``present``: the codes the selection has (default:
    every code): ranges and strides count among them (steps logged every 10 are consecutive
    steps), and they are the denominator of ``k of n``."""
    chosen = sorted({int(c) for c in codes})
    held = sorted({int(c) for c in (range(dim.size) if present is None else present)} | {*chosen})
    if not dim.ordered:
        if len(chosen) <= MAX_VALUES:
            return codes_label(dim, chosen)
        shown = codes_label(dim, chosen[:SHOWN_VALUES])
        return f"{shown} and {len(chosen) - SHOWN_VALUES} more ({len(chosen)} of {len(held)})"
    where = {c: i for i, c in enumerate(held)}
    at = [where[c] for c in chosen]
    found = runs(at)

    def label(a: int, b: int) -> str:
        return run_label(dim, held[a], held[b])

    if len(found) <= MAX_RUNS:
        return ",".join(label(a, b) for a, b in found)
    head = f"{label(at[0], at[-1])}: {len(chosen)} of {at[-1] - at[0] + 1}"
    stride = _stride(at)
    if stride is not None:
        return f"{head}, every {ordinal(stride)}"
    longest = max(found, key=lambda r: (r[1] - r[0], -r[0]))
    kind = "short bursts" if len(chosen) / len(found) < SHORT_RUN else "stretches"
    return f"{head}, in {len(found)} {kind} (the longest {label(*longest)})"


def _stride(codes: list[int]) -> int | None:
    """The common difference of the codes when they step evenly by 2 or more."""
    if len(codes) < MIN_PERIODIC:
        return None
    steps = set(np.diff(codes).tolist())
    return steps.pop() if len(steps) == 1 and min(steps) >= 2 else None


def ordinal(k: int) -> str:
    """``2nd``, ``3rd``, ``4th``, ``11th``, ``21st``."""
    if 10 <= k % 100 <= 20:
        return f"{k}th"
    return f"{k}{ {1: 'st', 2: 'nd', 3: 'rd'}.get(k % 10, 'th') }"
