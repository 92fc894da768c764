"""Names a package loads on first use (PEP 562): its ``__getattr__`` is ``load``, so importing
the package does not import what it re-exports (the start-up of ``docs/architecture.md``)."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any


def load(package: str, namespace: dict[str, Any], home: Mapping[str, str], name: str) -> Any:
    """``name`` from its module (``home``: each name's module, by its full name), bound in the
    package's ``namespace`` so that later lookups find it there; an AttributeError for a name
    the package does not have."""
    module = home.get(name)
    if module is None:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    namespace[name] = value
    return value
