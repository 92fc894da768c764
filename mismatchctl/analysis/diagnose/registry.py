"""Every check of `diagnose`: each module of ``checks/`` is one, found there (``LISTED``, in the
order the diagnosis lists them: their ``ORDER``), and run in an order derived from what each
declares it reads (``run_order``)."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Sequence

from mismatchctl.analysis.diagnose import checks
from mismatchctl.analysis.diagnose.check import LAYERS, Check, Every
from mismatchctl.analysis.diagnose.context import CheckModule, Context


def discover() -> list[CheckModule]:
    """Every module of ``checks/``, by its ``ORDER``."""
    found = [
        importlib.import_module(f"{checks.__name__}.{m.name}")
        for m in pkgutil.iter_modules(checks.__path__)
    ]
    return sorted(found, key=lambda c: c.ORDER)  # type: ignore[attr-defined]


class RegistryError(ValueError):
    """Checks whose declarations cannot be run in an order: a check that reads one not
    registered or of a later layer (or every check of its own), two checks of one name or one
    ``ORDER``, or checks that read each other."""


def run_order(declared: Sequence[CheckModule]) -> list[CheckModule]:
    """The order to run the ``declared`` checks in: each after every check it reads
    (``reads_of``), and among the checks ready to run the one of the earliest layer, then the
    one of the lowest ``ORDER``. Declarations that no order can run are refused (``refuse``)."""
    refuse(declared)
    order: list[CheckModule] = []
    ran: set[str] = set()
    waiting = list(declared)
    while waiting:
        ready = [c for c in waiting if {r.NAME for r in reads_of(c, declared)} <= ran]
        if not ready:
            names = ", ".join(c.NAME for c in waiting)
            raise RegistryError(f"these checks read each other, none can run first: {names}")
        first = min(ready, key=lambda c: (LAYERS.index(c.LAYER), c.ORDER))
        order.append(first)
        ran.add(first.NAME)
        waiting.remove(first)
    return order


def reads_of(check: CheckModule, declared: Sequence[CheckModule]) -> tuple[CheckModule, ...]:
    """The checks that ``check`` reads, ``Every`` check of a layer spelled out, by ``ORDER``."""
    found = {
        c.NAME: c
        for read in check.READS
        for c in (
            [c for c in declared if read.layer == c.LAYER] if isinstance(read, Every) else [read]
        )
    }
    return tuple(sorted(found.values(), key=lambda c: c.ORDER))


def refuse(declared: Sequence[CheckModule]) -> None:
    """Raise ``RegistryError`` for two checks of one name or one ``ORDER``, a layer that is
    none of ``LAYERS``, a check that reads one not declared, or one of a later layer: a check
    reads only checks of its own layer or an earlier one, and ``Every`` check of an earlier
    layer only (the layers go from data integrity to the objective: a check never waits for a
    later layer's verdict)."""
    names = {c.NAME for c in declared}
    if len(names) != len(declared) or len({c.ORDER for c in declared}) != len(declared):
        raise RegistryError("two checks have the same name or the same ORDER")
    for c in declared:
        if c.LAYER not in LAYERS:
            raise RegistryError(f"{c.NAME}: layer {c.LAYER!r} is not one of {LAYERS}")
        for read in c.READS:
            if isinstance(read, Every):
                if read.layer not in LAYERS[: LAYERS.index(c.LAYER)]:
                    raise RegistryError(f"{c.NAME} ({c.LAYER}) reads every check of {read.layer}")
                continue
            if read.NAME not in names:
                raise RegistryError(f"{c.NAME} reads {read.NAME}, which is not registered")
            if LAYERS.index(read.LAYER) > LAYERS.index(c.LAYER):
                raise RegistryError(
                    f"{c.NAME} ({c.LAYER}) reads {read.NAME} of a later layer ({read.LAYER})"
                )


LISTED: tuple[CheckModule, ...] = tuple(discover())  # as the diagnosis lists them (and its JSON)
RUN_ORDER = run_order(LISTED)


def run_checks(ctx: Context) -> list[Check]:
    """Every check in ``RUN_ORDER``, each reading what it declares (``reads_of``); the results
    of those that apply, in ``LISTED`` order."""
    found = {check.NAME: ctx.run(check, reads_of(check, LISTED)) for check in RUN_ORDER}
    return [r for check in LISTED if (r := found[check.NAME]) is not None]
