"""How work runs in parallel: the default number of workers, and Ray (an optional extra):
importing it with an install hint, connecting to a cluster (or starting a local one), and
collecting task results in submission order. Used by the engines and by the staged ingest.

Library errors raised inside a task (a damaged part, an unreadable dump) are returned as a
``Failure`` value rather than raised, so that the driver re-raises the very ``MismatchError``
(message and hint) instead of Ray's wrapper of it.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from mismatchctl.errors import EngineError, MismatchError, MissingDependencyError

DEFAULT_WORKERS = 2  # threads of the local engine and of ingest; CPUs of a local Ray
INSTALL_HINT = "pip install 'mismatchctl[ray]'"
ADDRESS_ENV = "RAY_ADDRESS"  # Ray's own variable: ray.init() connects to it when set
LOCAL_ADDRESSES = {"local"}  # start a Ray on this machine, like no address at all
CONNECT_TIMEOUT = 10.0  # seconds for the head node to accept a TCP connection


@dataclass
class Failure:
    """A library error raised in a task, carried back to the driver as a value."""

    error: MismatchError


def import_ray() -> ModuleType:
    """The ``ray`` module, or a MissingDependencyError naming the extra to install."""
    try:
        import ray
    except ImportError:
        raise MissingDependencyError(
            "--engine ray needs Ray, which is not installed",
            f"install the extra: {INSTALL_HINT} (or run with --engine local).",
        ) from None
    return ray


def package_dir() -> str:
    """The directory of the running mismatchctl package, shipped to the workers of a cluster."""
    return str(Path(__file__).resolve().parent)  # parallel.py is at the package's root


def runtime_env() -> dict[str, Any]:
    """Workers import mismatchctl from the driver's source tree (``py_modules``); its
    dependencies (pyarrow, numpy, polars) must be installed on the cluster's nodes."""
    return {"py_modules": [package_dir()]}


def connect(address: str | None, workers: int) -> ModuleType:
    """Connect to the Ray of this process if there is one (``ray.init`` already called), else to
    ``address`` (or ``$RAY_ADDRESS``), else start a local Ray with ``workers`` CPUs."""
    import logging  # here: the command line starts without it

    ray = import_ray()
    if ray.is_initialized():
        return ray
    address = address or os.environ.get(ADDRESS_ENV) or None
    common: dict[str, Any] = {
        "ignore_reinit_error": True,
        "log_to_driver": False,  # a worker's prints must not reach stdout (`--json -`)
        "logging_level": logging.WARNING,
        "runtime_env": runtime_env(),
    }
    try:
        if address is None or address in LOCAL_ADDRESSES:
            ray.init(num_cpus=max(1, workers), include_dashboard=False, **common)
        else:
            _check_reachable(address)
            ray.init(address=address, **common)
    except (ConnectionError, RuntimeError, ValueError, TimeoutError) as exc:
        where = f"the Ray cluster at {address}" if address else "a local Ray"
        raise EngineError(
            f"cannot start or reach {where}: {_first_line(exc)}",
            "start a cluster with `ray start --head` and pass --ray-address auto (same machine) "
            "or --ray-address ray://HEAD:10001; or leave --ray-address out for a local Ray.",
        ) from None
    return ray


@functools.cache
def remote(func: Callable[..., Any]) -> Any:
    """``func`` as a Ray remote function that takes one CPU (made once per function)."""
    return import_ray().remote(num_cpus=1)(func)


def ordered(
    ray: ModuleType, refs: Sequence[Any], on_done: Callable[[int, Any], None] | None = None
) -> Iterator[Any]:
    """The results of ``refs`` in submission order (so merges never depend on which task ends
    first); ``on_done(i, result)`` as each one completes. A ``Failure`` is raised as its error.
    Whatever stops the iteration early cancels the tasks still running and waits for them."""
    index = {ref: i for i, ref in enumerate(refs)}
    pending, done, following = list(refs), {}, 0
    try:
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            if pending:  # and everything else that has finished meanwhile
                more, pending = ray.wait(pending, num_returns=len(pending), timeout=0)
                ready += more
            for ref in ready:
                i = index[ref]
                done[i] = _get(ray, ref)
                if on_done:
                    on_done(i, done[i])
            while following in done:
                value = done.pop(following)
                if isinstance(value, Failure):
                    raise value.error
                yield value
                following += 1
    finally:
        if pending:
            stop(ray, pending)


def stop(ray: ModuleType, refs: Sequence[Any]) -> None:
    """Cancel tasks and wait until none of them runs any more (so that none still writes)."""
    for ref in refs:
        with contextlib.suppress(Exception):  # finished meanwhile, or already cancelled
            ray.cancel(ref)
    ray.wait(list(refs), num_returns=len(refs))


def _get(ray: ModuleType, ref: Any) -> Any:
    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as exc:
        cause = exc.cause if isinstance(exc.cause, MismatchError) else None
        if cause is not None:
            raise cause from None
        raise
    except (ray.exceptions.WorkerCrashedError, ray.exceptions.ObjectLostError) as exc:
        raise EngineError(
            f"a Ray task was lost: {_first_line(exc)}",
            "a worker died (out of memory?) or a node left the cluster: run again, or with "
            "fewer --workers.",
        ) from None


def _check_reachable(address: str) -> None:
    """Fail fast on a HOST:PORT (or ray://HOST:PORT) that does not answer: Ray itself retries
    for minutes. Other forms (``auto``) are left to Ray."""
    import socket

    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not host or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT).close()
    except OSError as exc:
        raise ConnectionError(f"nothing answers at {host}:{port} ({exc.strerror or exc})") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
