"""The read-ahead of ingest: order kept, errors where they happen, and a stop on early exit."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from mismatchctl.ingest.prefetch import prefetch


def test_yields_every_item_in_order() -> None:
    assert list(prefetch(range(100), depth=3)) == list(range(100))
    assert list(prefetch([])) == []


def test_a_producer_error_is_raised_after_the_items_before_it() -> None:
    def items() -> Iterator[int]:
        yield 1
        yield 2
        raise ValueError("bad batch")

    seen = []
    with pytest.raises(ValueError, match="bad batch"):
        for item in prefetch(items()):
            seen.append(item)
    assert seen == [1, 2]


def test_leaving_the_loop_stops_the_producer() -> None:
    produced = []

    def items() -> Iterator[int]:
        for i in range(1_000_000):
            produced.append(i)
            yield i

    before = threading.active_count()
    for item in prefetch(items(), depth=2):
        if item == 5:
            break
    assert len(produced) <= 5 + 1 + 2 + 1  # the consumed ones, the queue and one in hand
    assert threading.active_count() == before  # the thread has ended
