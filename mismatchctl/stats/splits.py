"""Per-token group keys derived from the ``turn`` column (turn 0 = first turn of a sequence).

Codes are small int64 arrays ready for ``chunk_partials``; the labels are the values of the
``turn_kind`` and ``turn`` keys of a group's ``by`` in the JSON output.
"""

from __future__ import annotations

import numpy as np

TURN_KIND_LABELS: tuple[str, ...] = ("first", "later")
TURN_INDEX_LABELS: tuple[str, ...] = ("0", "1", "2", "3+")


def _turns(turn: np.ndarray) -> np.ndarray:
    turn = np.asarray(turn, dtype=np.int64)
    if len(turn) and turn.min() < 0:
        raise ValueError(f"turn indices must be >= 0 (found {turn.min()})")
    return turn


def turn_kind(turn: np.ndarray) -> np.ndarray:
    """0 (``first``) for turn 0, 1 (``later``) for turns after a tool response."""
    return (_turns(turn) >= 1).astype(np.int64)


def turn_index(turn: np.ndarray) -> np.ndarray:
    """Codes 0, 1, 2, 3 for turns 0, 1, 2 and 3+ (labels ``TURN_INDEX_LABELS``)."""
    return np.minimum(_turns(turn), len(TURN_INDEX_LABELS) - 1)
