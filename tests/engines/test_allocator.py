"""glibc keeps freed blocks for reuse (the kernels' temporaries), once per process."""

from __future__ import annotations

import sys

import pytest

from mismatchctl.allocator import keep_freed_memory


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_thresholds_are_raised_once() -> None:
    assert keep_freed_memory() is True
    assert keep_freed_memory() is True  # idempotent
