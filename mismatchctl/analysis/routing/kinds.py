"""A token's routing kind from its ``route_paired`` (-1 unpaired, 0 same, 1 + the lowest
differing layer when flipped): light, so that `show` does not load the routing metrics."""

from __future__ import annotations

FLIPPED, SAME, UNPAIRED = "flipped", "same", "unpaired"


def paired_kind(paired: int) -> str:
    """``flipped``, ``same`` or ``unpaired``, from a token's ``route_paired``."""
    return FLIPPED if paired >= 1 else SAME if paired == 0 else UNPAIRED


def first_flip_layer(paired: int) -> int | None:
    """The lowest differing layer of a token's producing position (None unless flipped)."""
    return paired - 1 if paired >= 1 else None
