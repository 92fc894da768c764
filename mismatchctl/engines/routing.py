"""MoE routing read per token part: the part's twin under ``routing/`` (the same rows in the same
order, ``docs/store.md``) beside the part's logprobs, reduced to a ``RoutingPartial``; local
threads or Ray tasks, merged in part order either way (the same numbers)."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from mismatchctl import schema as S
from mismatchctl.engines.choice import Engine
from mismatchctl.engines.plan import PartTask, RowFilter, row_mask
from mismatchctl.errors import MismatchError, StoreError
from mismatchctl.parallel import DEFAULT_WORKERS, Failure
from mismatchctl.stats import assign_bins
from mismatchctl.stats.routing import RoutingPartial, routing_partial

TOKENS_DIR, ROUTING_DIR = "/tokens/", "/routing/"


@dataclass(frozen=True)
class RoutingTask:
    run: str
    tokens: str  # the token part's path
    routing: str  # its twin's


def twin_path(token_path: str) -> str:
    """The routing part of a token part (the same name under ``routing/``)."""
    head, sep, tail = token_path.rpartition(TOKENS_DIR)
    return head + ROUTING_DIR + tail if sep else token_path


def part_routing(task: RoutingTask, rows: RowFilter | None, edges: np.ndarray) -> RoutingPartial:
    """The routing sums of one token part (rows inside the filter) and its twin."""
    columns = [S.STEP, S.SEQ, S.ROLLOUT, S.TRAINER]
    if rows is not None and rows.gpu is not None:
        columns.append(S.GPU)
    tok = pq.read_table(task.tokens, columns=columns)
    rt = pq.read_table(task.routing)
    if rt.num_rows != tok.num_rows or not rt.column(S.SEQ).equals(tok.column(S.SEQ)):
        raise StoreError(
            f"run `{task.run}`: routing part {task.routing} does not match its token part "
            f"{task.tokens}",
            "run `mismatchctl runs check`; re-ingest the run if a part is damaged.",
        )
    if rows is not None and rows.active:
        keep = row_mask(tok, rows)
        tok, rt = tok.filter(keep), rt.filter(keep)
    return _reduce(tok, rt, edges)


def _reduce(tok: pa.Table, rt: pa.Table, edges: np.ndarray) -> RoutingPartial:
    layers = rt.schema.field(S.ROUTE_OVERLAP).type.byte_width
    top_k = int(rt.column(S.ROUTE_TOP_K)[0].as_py()) if rt.num_rows else 0
    equal_col = rt.column(S.ROUTE_EQUAL).combine_chunks()
    compared = equal_col.is_valid().to_numpy(zero_copy_only=False)
    equal = equal_col.fill_null(0).to_numpy(zero_copy_only=False)
    overlap = _overlap(rt.column(S.ROUTE_OVERLAP).combine_chunks(), layers)
    rollout = tok.column(S.ROLLOUT).to_numpy()
    r = tok.column(S.TRAINER).to_numpy() - rollout
    k3 = np.expm1(r) - r
    return routing_partial(
        layers,
        top_k,
        equal,
        compared,
        overlap,
        rt.column(S.ROUTE_PAIRED).to_numpy(),
        rt.column(S.ROUTE_FLIP_BEFORE).to_numpy(zero_copy_only=False),
        k3,
        (assign_bins(np.exp(rollout), edges), len(edges) - 1),
    )


def _overlap(col: pa.Array, layers: int) -> np.ndarray:
    """uint8 [rows, layers] (rows without a comparison read as zeros: never summed)."""
    if len(col) == 0:
        return np.zeros((0, layers), np.uint8)
    raw = np.frombuffer(col.buffers()[1], dtype=np.uint8)
    return raw[col.offset * layers : (col.offset + len(col)) * layers].reshape(-1, layers)


def routing_tasks(tasks: Sequence[PartTask], known: set[str]) -> list[RoutingTask]:
    """The token parts of ``tasks`` that have a routing twin among ``known`` paths."""
    return [
        RoutingTask(t.run, t.path, twin_path(t.path)) for t in tasks if twin_path(t.path) in known
    ]


def _one(task: RoutingTask, rows: RowFilter | None, edges: np.ndarray) -> RoutingPartial | Failure:
    try:
        return part_routing(task, rows, edges)
    except MismatchError as exc:
        return Failure(exc)


def run_routing(
    tasks: list[RoutingTask],
    rows: RowFilter | None,
    edges: np.ndarray,
    engine: Engine,
    workers: int = DEFAULT_WORKERS,
) -> dict[str, RoutingPartial]:
    """Per run, its parts' partials merged in task order (threads, or Ray tasks)."""
    if engine.is_ray and tasks:
        results = _ray_results(tasks, rows, edges, engine, workers)
    else:
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            results = list(pool.map(lambda t: _one(t, rows, edges), tasks))
    out: dict[str, RoutingPartial] = {}
    for task, result in zip(tasks, results, strict=True):
        if isinstance(result, Failure):
            raise result.error
        total = out.get(task.run)
        if total is not None and (total.layers, total.top_k) != (result.layers, result.top_k):
            raise StoreError(
                f"run `{task.run}` holds routes of {total.layers} layers x top-{total.top_k} "
                f"and of {result.layers} layers x top-{result.top_k} ({task.tokens})",
                "routes of one run come from one model: ingest each model into its own run.",
            )
        out[task.run] = result if total is None else total.merge(result)
    return out


def _ray_results(
    tasks: list[RoutingTask],
    rows: RowFilter | None,
    edges: np.ndarray,
    engine: Engine,
    workers: int,
) -> list[RoutingPartial | Failure]:
    import os

    from mismatchctl.parallel import connect, ordered, remote

    ray = connect(engine.address, workers)

    def absolute(path: str) -> str:
        return path if "://" in path else os.path.abspath(path)

    shipped = [RoutingTask(t.run, absolute(t.tokens), absolute(t.routing)) for t in tasks]
    fn = remote(_one)
    refs = [fn.remote(t, rows, edges) for t in shipped]
    return list(ordered(ray, refs, lambda i, _: None))
