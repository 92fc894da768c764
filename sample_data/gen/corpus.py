"""Offline text: the Python standard library's own source files.

The module lists are fixed and sorted so the corpus is identical on every machine that runs the same
Python minor version. Training text and prompt text come from disjoint modules.
"""

from __future__ import annotations

import random
import sysconfig
from pathlib import Path

import torch

TRAIN_MODULES: tuple[str, ...] = (
    "argparse.py",
    "ast.py",
    "bisect.py",
    "calendar.py",
    "collections/__init__.py",
    "configparser.py",
    "contextlib.py",
    "copy.py",
    "csv.py",
    "dataclasses.py",
    "datetime.py",
    "difflib.py",
    "enum.py",
    "fractions.py",
    "functools.py",
    "glob.py",
    "heapq.py",
    "inspect.py",
    "ipaddress.py",
    "json/decoder.py",
    "json/encoder.py",
    "logging/__init__.py",
    "pprint.py",
    "random.py",
    "shutil.py",
    "statistics.py",
    "string.py",
    "textwrap.py",
    "threading.py",
    "typing.py",
)

# the "RL dataset": prompts are snippets of modules the model never saw in training
PROMPT_MODULES: tuple[str, ...] = (
    "abc.py",
    "numbers.py",
    "operator.py",
    "queue.py",
    "sched.py",
    "shlex.py",
    "tokenize.py",
    "weakref.py",
)


def stdlib_dir() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def read_modules(names: tuple[str, ...]) -> list[bytes]:
    root = stdlib_dir()
    missing = [n for n in names if not (root / n).is_file()]
    if missing:
        raise FileNotFoundError(f"stdlib modules not found under {root}: {missing}")
    return [(root / n).read_bytes() for n in sorted(names)]


def training_tokens() -> torch.Tensor:
    """All training modules concatenated as one uint8 byte stream (as int64 ids)."""
    blob = b"\n\n".join(read_modules(TRAIN_MODULES))
    return torch.frombuffer(bytearray(blob), dtype=torch.uint8).long()


def prompt_lines() -> list[bytes]:
    """Lines (with their newline) of the prompt modules, in a fixed order."""
    lines: list[bytes] = []
    for text in read_modules(PROMPT_MODULES):
        lines.extend(text.splitlines(keepends=True))
    return lines


def prompt_line_sources() -> list[str]:
    """The module each line of `prompt_lines()` comes from (its `data_source`), line by line."""
    sources: list[str] = []
    for name, text in zip(sorted(PROMPT_MODULES), read_modules(PROMPT_MODULES), strict=True):
        sources.extend([name] * len(text.splitlines(keepends=True)))
    return sources


def pick_prompt(
    lines: list[bytes], rng: random.Random, min_len: int, max_len: int
) -> tuple[bytes, int]:
    """A snippet that starts at a non-blank line, ends on a newline when possible, within bounds;
    and the index of its first line."""
    while True:
        start = rng.randrange(len(lines))
        if not lines[start].strip():
            continue
        target = rng.randint(min_len, max_len)
        snippet = b""
        for line in lines[start:]:
            if len(snippet) + len(line) > target:
                break
            snippet += line
        if len(snippet) >= min_len:
            return snippet, start
        # the first line alone was too long: cut it at the target length
        candidate = b"".join(lines[start : start + 4])[:target]
        if len(candidate) >= min_len:
            return candidate, start
