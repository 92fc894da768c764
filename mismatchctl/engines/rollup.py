"""From the engine's finest groups to every requested split: projection and merge."""

from __future__ import annotations

from mismatchctl.engines.keys import Label
from mismatchctl.engines.plan import Pass, Split
from mismatchctl.stats import Partial

Groups = dict[tuple[Label, ...], Partial]


def rollup(split: Split, p: Pass, finest: Groups) -> Groups:
    """Merge the pass's groups onto the split's keys (exact: only sequence-level keys vanish)."""
    idx = [p.keys.index(k) for k in split]
    out: Groups = {}
    for key, partial in finest.items():
        sub = tuple(key[i] for i in idx)
        out[sub] = out[sub].merge(partial) if sub in out else partial
    return out


def sort_key(key: tuple[Label, ...]) -> tuple:
    """Order groups by their labels, numbers numerically, missing values last."""
    return tuple((v is None, isinstance(v, str), v if v is not None else 0) for v in key)
