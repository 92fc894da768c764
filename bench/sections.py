"""Writing one section of docs/benchmarks.md: each benchmark script owns one ``## `` section."""

from __future__ import annotations

from pathlib import Path


def replace_section(path: Path, title: str, content: str) -> None:
    """Replace the section that starts with ``title`` (up to the next ``## ``) by ``title`` and
    ``content``, in place, or append it; every other section is kept. The file is read just
    before writing, so scripts run one after the other keep each other's sections."""
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    block = f"{title}\n\n{content.strip()}\n"
    start = text.find(title)
    if start < 0:
        path.write_text(text.rstrip() + "\n\n" + block)
        return
    end = text.find("\n## ", start + len(title))
    rest = text[end + 1 :] if end >= 0 else ""
    path.write_text(text[:start] + block + ("\n" + rest if rest else ""))
