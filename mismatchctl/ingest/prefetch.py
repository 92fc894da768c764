"""Read ahead: the next batches of a source are decoded on a background thread while the current
one is canonicalised (Parquet decoding and most numpy work release the GIL)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")
_DONE = object()


def prefetch(items: Iterable[T], depth: int = 2) -> Iterator[T]:
    """Yield ``items`` in order, producing up to ``depth`` of them ahead on a thread. An error
    of the producer is raised here, at the item where it happened; leaving the loop early (an
    error in the consumer) stops the producer."""
    slots: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def produce() -> None:
        try:
            for item in items:
                if not _put(slots, item, stop):
                    return
            _put(slots, _DONE, stop)
        except BaseException as exc:  # handed to the consumer, raised there
            _put(slots, exc, stop)

    thread = threading.Thread(target=produce, name="prefetch", daemon=True)
    thread.start()
    try:
        while True:
            item = slots.get()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        thread.join()


def _put(slots: queue.Queue, item: object, stop: threading.Event) -> bool:
    """Put unless the consumer has stopped; False when it has."""
    while not stop.is_set():
        try:
            slots.put(item, timeout=0.05)
            return True
        except queue.Full:
            continue
    return False
