"""Dumps of the same responses scored twice (the paired comparison of `compare`), written with
the project's DumpWriter, and a numpy reference of each sequence read back from the dumps.

Every step holds 4 prompt groups of 4 responses that share their sample id (verl's ``uid``),
some with a masked tool response between two turns; in every group two responses are equal
(the same tokens: what the occurrence index has to keep apart)."""

from __future__ import annotations

import glob
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from mismatchctl.dump import DumpWriter
from mismatchctl.dump import layout as C


@dataclass
class Response:
    step: int
    uid: str
    ids: np.ndarray
    mask: np.ndarray
    rollout: np.ndarray


def responses(seed: int = 0, steps: int = 3, groups: int = 4, n: int = 4) -> list[Response]:
    rng = np.random.default_rng(seed)
    out = []
    for step in range(steps):
        for g in range(groups):
            uid = f"s{step}-g{g}"
            made: list[Response] = []
            for k in range(n):
                if k == n - 1:  # a repeat of the group's first response (the same tokens)
                    first = made[0]
                    made.append(Response(step, uid, first.ids.copy(), first.mask.copy(),
                                         -rng.exponential(1.0, len(first.ids))))  # fmt: skip
                    continue
                length = int(rng.integers(8, 30))
                mask = np.ones(length, dtype=bool)
                if rng.random() < 0.5:  # a tool response between two turns
                    at = int(rng.integers(2, length - 5))
                    mask[at : at + int(rng.integers(2, 5))] = False
                ids = rng.integers(0, 500, length)
                made.append(Response(step, uid, ids, mask, -rng.exponential(1.0, length)))
            out += made
    return out


def changed(resp: list[Response], every: int = 1) -> list[Response]:
    """The responses with one token id changed in every ``every``-th one."""
    out = []
    for i, r in enumerate(resp):
        ids = r.ids.copy()
        if i % every == 0:
            ids[int(np.flatnonzero(r.mask)[0])] += 1
        out.append(Response(r.step, r.uid, ids, r.mask, r.rollout))
    return out


def trainer_of(resp: list[Response], seed: int, scale: float) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [np.minimum(r.rollout + rng.normal(0.0, scale, len(r.rollout)), 0.0) for r in resp]


def write(
    directory: Path,
    resp: list[Response],
    trainer: list[np.ndarray],
    ids: bool = True,
    order: list[int] | None = None,
) -> Path:
    """One dump file per step; ``order``: the order the responses are written in (per step)."""
    order = list(range(len(resp))) if order is None else order
    with DumpWriter(directory) as writer:
        for step in sorted({r.step for r in resp}):
            rows = [i for i in order if resp[i].step == step]
            writer.add(
                step,
                [resp[i].rollout for i in rows],
                [trainer[i] for i in rows],
                [resp[i].mask for i in rows],
                token_ids=[resp[i].ids for i in rows] if ids else None,
                sample_ids=[resp[i].uid for i in rows],
            )
    return directory


def shuffled_groups(resp: list[Response], seed: int) -> list[int]:
    """A write order with every prompt group's responses in another order."""
    rng = np.random.default_rng(seed)
    groups: dict[tuple[int, str], list[int]] = {}
    for i, r in enumerate(resp):
        groups.setdefault((r.step, r.uid), []).append(i)
    return [i for members in groups.values() for i in rng.permutation(members).tolist()]


@dataclass
class Written:
    """A sequence as read back from the dump: its key, token ids and positions (model tokens),
    token count, K3 sum and rollout logprobs over its model tokens."""

    step: int
    uid: str
    ids: tuple[int, ...]
    positions: tuple[int, ...]
    tokens: int
    k3: float
    rollout: tuple[float, ...]


def read_back(directory: Path) -> list[Written]:
    """Every sequence of the dumps, in file then row order (the store's seq order)."""
    out = []
    for path in sorted(glob.glob(str(directory / "*.parquet"))):
        for row in pq.read_table(path).to_pylist():
            mask = np.asarray(row[C.MASK], dtype=bool)
            lr = np.asarray(row[C.ROLLOUT], dtype=np.float64)[mask]
            lt = np.asarray(row[C.TRAINER], dtype=np.float64)[mask]
            ids = row.get(C.TOKENS)
            where = np.flatnonzero(mask)
            r = lt - lr
            out.append(Written(
                row[C.STEP], row[C.SAMPLE_ID],
                tuple(np.asarray(ids)[where].tolist()) if ids is not None else (),
                tuple(where.tolist()), int(mask.sum()), float(np.sum(np.expm1(r) - r)),
                tuple(lr.tolist()),
            ))  # fmt: skip
    return out
