"""The two consoles: data on stdout, messages and progress on stderr (a leaf: the error
boundary and the progress bars both write to them)."""

from __future__ import annotations

import os

from rich.console import Console

PIPE_WIDTH = 140  # tables written to a file or a pipe are not squeezed into 80 columns


def out_console() -> Console:
    """Data goes to stdout (so `--json - | jq` works)."""
    console = Console()
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(width=PIPE_WIDTH)
    return console


def err_console() -> Console:
    """Messages and progress go to stderr."""
    return Console(stderr=True)
