"""The package's version, read from the installed metadata (a leaf: it imports nothing of the
package, so every layer may read it without an import back up into ``mismatchctl``)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version


def _version() -> str:
    try:
        return version("mismatchctl")
    except PackageNotFoundError:  # running from a source tree that is not installed
        return "0.0.0+unknown"


__version__ = _version()
