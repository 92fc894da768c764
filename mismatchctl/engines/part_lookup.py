"""A part's pieces in the part cache (``part_cache.py``): which of a read's pieces (the passes'
groups, each extra's state) a part has kept, what is left to compute from its tokens, and the
part's whole ``Folded`` assembled from both, in the read's order. Shared by the local engine
and the Ray driver, so that both read a part once, for its missing pieces only, and fold the
same states in the same order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from mismatchctl.engines import part_cache
from mismatchctl.engines.plan import PartTask, Pass
from mismatchctl.stats import Partial

# ``engines/local.py``'s types, which imports this module: a read (its ``passes``, ``extras``),
# an extra, and a part's ``Folded`` (every pass's groups, every extra's state)
Read = Any
PartExtra = Any
Folded = tuple[list[Any], list[Any]]

MISSING = object()  # a piece the cache does not hold (an extra's state may be None)


class Lookup(NamedTuple):
    """One part's pieces: their entries' names (the passes' first) and what was found
    (``MISSING`` where nothing was)."""

    task: PartTask
    names: list[str | None]
    found: list[Any]

    @property
    def complete(self) -> bool:
        return all(f is not MISSING for f in self.found)


class Work(NamedTuple):
    """What is left to compute from a part's tokens: passes and extras for ``part_groups``."""

    passes: list[Pass]
    extras: list[PartExtra]


def look_up(read: Read, digests: Sequence[bytes | None], task: PartTask) -> Lookup:
    """The part's pieces of ``read`` (``digests``: ``part_cache.pieces`` of the read)."""
    names = part_cache.keys(task, digests)
    found: list[Any] = [[] if not read.passes else _groups(names[0], len(read.passes))]
    found += [_state(name, extra) for name, extra in zip(names[1:], read.extras, strict=True)]
    return Lookup(task, names, found)


def all_kept(read: Read, digests: Sequence[bytes | None], task: PartTask) -> bool:
    """Whether every piece of ``read`` has an entry for the part (stats only, nothing loaded:
    the Ray driver decides which parts to submit without holding every kept state at once)."""
    names = part_cache.keys(task, digests)
    needed = names[1:] if not read.passes else names
    return all(part_cache.kept(name) for name in needed)


def missing(read: Read, lookup: Lookup) -> Work:
    """The passes and extras to compute: the missing extras, and the passes when theirs are
    missing or a missing extra may reuse their turn runs (its sums are then the runs')."""
    extras = [e for e, f in zip(read.extras, lookup.found[1:], strict=True) if f is MISSING]
    runs = any(part_cache.uses_runs(e) for e in extras)
    passes = read.passes if lookup.found[0] is MISSING or runs else []
    return Work(list(passes), extras)


def assemble(read: Read, lookup: Lookup, computed: Folded | None) -> Folded:
    """The part's whole ``Folded`` in the read's order: the pieces found, and ``computed``
    (``part_groups`` of ``missing``) for the others, which are kept in the cache first (before
    the fold merges into the first part's states)."""
    groups, found = lookup.found[0], lookup.found[1:]
    if computed is None:
        return groups, found
    new_states = iter(computed[1])
    if groups is MISSING:
        groups = computed[0]
        part_cache.save(lookup.names[0], groups)
    states = []
    for name, extra, state in zip(lookup.names[1:], read.extras, found, strict=True):
        if state is MISSING:
            state = next(new_states)
            _save(name, extra, state)
        states.append(state)
    return groups, states


def _groups(name: str | None, n_passes: int) -> Any:
    """The passes' groups kept under ``name`` when they have the passes' shape (an entry of
    another shape is removed: the part is read again)."""
    found = part_cache.load(name)
    if found is None or name is None:
        return MISSING
    if (
        isinstance(found, list)
        and len(found) == n_passes
        and all(isinstance(g, dict) for g in found)
        and all(isinstance(p, Partial) for g in found for p in g.values())
    ):
        return found
    part_cache.discard(name)
    return MISSING


def _state(name: str | None, extra: PartExtra) -> Any:
    """An extra's state kept under ``name`` (an entry is a 1-tuple: a state may be None), in
    the extra's own form when it has one (``from_cache``: None when it does not fit this read,
    a miss)."""
    found = part_cache.load(name)
    if found is None or name is None:
        return MISSING
    if not (isinstance(found, tuple) and len(found) == 1):
        part_cache.discard(name)
        return MISSING
    (kept,) = found
    restore = getattr(extra, "from_cache", None)
    if kept is None or restore is None:
        return kept
    state = restore(kept)
    return MISSING if state is None else state


def _save(name: str | None, extra: PartExtra, state: Any) -> None:
    portable = getattr(extra, "cache_state", None)
    if name is None:
        return
    part_cache.save(name, (portable(state) if portable and state is not None else state,))
