"""Which engine computes the parts: ``local`` (a thread pool in this process) or ``ray`` (Ray
tasks, on a local Ray or a cluster). Both run the same ``part_groups`` and merge the same
partials; only where the parts are read differs."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mismatchctl.engines.local import run_passes, run_reads
from mismatchctl.errors import UsageError

LOCAL, RAY = "local", "ray"
ENGINES = (LOCAL, RAY)


@dataclass(frozen=True)
class Engine:
    name: str = LOCAL
    address: str | None = None  # Ray: "auto", "ray://host:10001"; None: $RAY_ADDRESS or local

    @property
    def is_ray(self) -> bool:
        return self.name == RAY

    def runner(self) -> Callable[..., Any]:
        """A function with the signature and result of ``engines.local.run_passes``."""
        if not self.is_ray:
            return run_passes
        from mismatchctl.engines.ray_engine import run_passes_ray  # imports ray only when used

        return functools.partial(run_passes_ray, address=self.address)

    def reads_runner(self) -> Callable[..., Any]:
        """A function with the signature and result of ``engines.local.run_reads``."""
        if not self.is_ray:
            return run_reads
        from mismatchctl.engines.ray_engine import run_reads_ray

        return functools.partial(run_reads_ray, address=self.address)


LOCAL_ENGINE = Engine()


def choose_engine(name: str | None = LOCAL, address: str | None = None) -> Engine:
    """The engine of ``--engine NAME [--ray-address ADDRESS]``, checked."""
    name = (name or LOCAL).strip().lower()
    if name not in ENGINES:
        raise UsageError(
            f"--engine `{name}` is not an engine", f"use one of: {', '.join(ENGINES)}."
        )
    if address is not None and name != RAY:
        raise UsageError(
            "--ray-address is only used with --engine ray",
            f"add --engine ray (or leave --ray-address out): --engine ray --ray-address {address}",
        )
    return Engine(name, address.strip() if address else None)
