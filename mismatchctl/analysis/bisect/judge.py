"""``bisect``'s result and its judgement: every setting's numbers overall, per turn kind, per
hot cell and in the control sample; the setting that reproduces the rollout side (it leaves at
most REPRODUCE_RESIDUAL of the start's K3 against the rollout side: it accounts for at least 90%
of the mismatch), and the single change that moves the trainer side furthest toward it; the
verdict's sentences (the JSON's ``verdict``, and the first lines its view shows) and the JSON."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mismatchctl.analysis.bisect.metrics import (
    Numbers,
    Resamples,
    Sides,
    numbers,
    share_text,
    short,
)
from mismatchctl.analysis.bisect.sample import Sampled
from mismatchctl.stats.per_token import k3

REPRODUCE_RESIDUAL = 0.1
CONTROL = "control"

# a single change accounting for less of the mismatch than this does not explain any of it
ALONE = 0.05
LOOK_THERE = ("the engine has a path these settings do not have (an attention kernel, a fused "
              "op, its sampler's processing), or ran on hardware whose kernels round otherwise "
              "(a replay reproduces the engine's bits only on its kind of device): look there")  # fmt: skip


@dataclass(frozen=True)
class Outcome:
    """One setting: its name, what it changes, how many changes from the start, its numbers
    overall, per turn kind (``first``, ``later``: when the sample has later turns) and per cell
    (each hot cell's label, and ``control``)."""

    name: str
    what: str
    changes: int
    overall: Numbers
    by_turn: dict[str, Numbers] = field(default_factory=dict)
    by_cell: dict[str, Numbers] = field(default_factory=dict)


@dataclass(frozen=True)
class CellInfo:
    """A hot cell (or the control sample): its label, where it comes from (``explain``,
    ``given``, ``control``), the run's sequences with a token in it, its stratum's sequences
    in the run and drawn, and explain's sentence of it."""

    label: str
    source: str
    touching: int
    stratum: int
    drawn: int
    sentence: str = ""


@dataclass(frozen=True)
class Bisect:
    run: str
    model: str
    device: str
    sequences: int
    tokens: int
    candidates: int
    without_prompt: int
    mismatch: float  # K3 of trainer vs rollout over the sample's tokens (weighted)
    outcomes: list[Outcome]
    skipped: list[tuple[str, str]]
    seed: int
    trainer_threshold: float = 0.0
    best: str = ""
    best_change: str | None = None
    reproduces: bool = False
    by_turn_best: dict[str, str] = field(default_factory=dict)
    trainer_temperature: float | None = None  # the trainer divides its logits by it
    start: str = "fp32"
    cells: list[CellInfo] = field(default_factory=list)  # the hot cells, then the control
    cells_note: str | None = None  # why the sample is uniform
    by_cell_best: dict[str, str] = field(default_factory=dict)
    by_cell_reproduces: dict[str, bool] = field(default_factory=dict)

    def outcome(self, name: str) -> Outcome:
        return next(o for o in self.outcomes if o.name == name)

    def to_dict(self) -> dict:
        return bisect_dict(self)

    def to_polars(self) -> Any:
        import polars as pl

        rows = self.to_dict()["bisect"]["settings"]
        keep = ("by_turn", "by_cell")
        return pl.DataFrame([{k: v for k, v in r.items() if k not in keep} for r in rows])


def judge(
    run: str, model: str, device: str, drawn: Sampled, runnable: list, scored: dict,
    skipped: list[tuple[str, str]], seed: int, cells: list[CellInfo], masks: list[np.ndarray],
    setup: Setup,
) -> Bisect:  # fmt: skip
    """Every setting's numbers and the verdict."""
    rollout, trainer = np.concatenate(drawn.rollout), np.concatenate(drawn.trainer)
    lengths = [len(t) for t in drawn.targets]
    owner = np.repeat(np.arange(len(lengths)), lengths)
    sides = Sides(rollout, trainer, owner, len(lengths))
    strata = np.asarray(drawn.strata, dtype=np.int64)
    rs = Resamples(len(lengths), seed, strata, drawn.weights())
    turns = np.concatenate(drawn.turns)
    kinds = {"first": turns == 0, "later": turns > 0} if (turns > 0).any() else {}
    regions, cells = _regions(cells, masks, strata[owner], drawn)
    start = scored[runnable[0].name]
    outcomes = []
    for s in runnable:
        x = scored[s.name]
        outcomes.append(
            Outcome(
                s.name, s.what, s.changes, numbers(x, start, sides, rs),
                by_turn={k: numbers(x, start, sides, rs, keep) for k, keep in kinds.items()},
                by_cell={k: numbers(x, start, sides, rs, keep) for k, keep in regions.items()},
            )
        )  # fmt: skip
    d = trainer - rollout
    w = rs.weight[owner]
    mismatch = float(np.average(k3(d), weights=w))
    return Bisect(run, model, device, len(lengths), len(rollout), drawn.candidates,
                  drawn.without_prompt, mismatch, outcomes, skipped, seed,
                  trainer_threshold=setup.threshold(mismatch),
                  trainer_temperature=setup.trainer_temperature, start=setup.start,
                  cells=cells, cells_note=drawn.note,
                  **_verdict(outcomes, mismatch))  # fmt: skip


@dataclass(frozen=True)
class Setup:
    """What the judge is told of the bisection beside the scores: the start setting, the
    trainer's temperature (None: the trainer does not divide its logits) and the trainer
    check's threshold for a sample's mismatch."""

    start: str
    trainer_temperature: float | None
    threshold: Callable[[float], float]


def _regions(
    cells: list[CellInfo], masks: list[np.ndarray], stratum: np.ndarray, drawn: Sampled
) -> tuple[dict[str, np.ndarray], list[CellInfo]]:
    """Each hot cell's tokens in the sample and the control sample's (the tokens of the
    sequences drawn from the control stratum); a region without a token is left out. With
    them, the cells and the control after them when it has tokens."""
    if not cells:
        return {}, []
    out = {c.label: m for c, m in zip(cells, masks, strict=True) if m.any()}
    control = stratum == len(cells)
    if control.any():
        out[CONTROL] = control
        cells = [*cells, CellInfo(CONTROL, CONTROL, 0, drawn.sizes[-1], drawn.drawn()[-1])]
    return out, cells


def _verdict(outcomes: list[Outcome], mismatch: float) -> dict[str, Any]:
    """The verdict's fields of ``Bisect``: the best setting overall, per turn kind and per
    cell, the best single change, and whether the best reproduces the mismatch."""
    others = outcomes[1:]
    if not others:
        return {}
    best = min(others, key=lambda o: o.overall.k3_rollout)
    single = [o for o in others if o.changes == 1 and o.overall.share is not None]
    by_cell = {c: min(others, key=lambda o: o.by_cell[c].k3_rollout) for c in others[0].by_cell}
    return {
        "best": best.name,
        "best_change": max(single, key=lambda o: o.overall.share or 0.0).name if single else None,
        "reproduces": mismatch > 0 and _reproduces(best.overall),
        "by_turn_best": {
            kind: min(others, key=lambda o: o.by_turn[kind].k3_rollout).name
            for kind in others[0].by_turn
        },
        "by_cell_best": {c: o.name for c, o in by_cell.items()},
        "by_cell_reproduces": {c: _reproduces(o.by_cell[c]) for c, o in by_cell.items()},
    }


def _reproduces(n: Numbers) -> bool:
    return (n.share or 0.0) >= 1 - REPRODUCE_RESIDUAL


def verdict(b: Bisect) -> list[str]:
    """The answer, first sentence first."""
    start = b.outcomes[0].overall
    if b.mismatch == 0:
        return [f"the sample's rollout and trainer logprobs are equal (K3 0 over {b.tokens:,} "
                "tokens): there is no mismatch to bisect"]  # fmt: skip
    if not b.best:
        return ["only the start setting ran: nothing to compare (see the skipped settings)"]
    best = b.outcome(b.best)
    if b.reproduces:
        out = [f"{best.name} ({best.what}) reproduces the rollout logprobs to K3 "
               f"{short(best.overall.k3_rollout)} (the trainer's own setting: "
               f"{short(start.k3_rollout)})"]  # fmt: skip
    else:
        out = [f"nothing here reproduces the rollout logprobs: the closest, {best.name}, leaves "
               f"K3 {short(best.overall.k3_rollout)} of the trainer setting's "
               f"{short(start.k3_rollout)} ({share_text(best.overall)} accounted for): "
               f"{LOOK_THERE}"]  # fmt: skip
    if b.best_change is not None:
        out.append(_change(b))
    out += [_cell_line(b, cell) for cell in b.by_cell_best]
    for kind, name in b.by_turn_best.items():
        o = b.outcome(name).by_turn[kind]
        if o.tokens:
            out.append(f"{kind} turns ({o.tokens:,} tokens): closest is {name}, K3 "
                       f"{short(o.k3_rollout)}, {share_text(o)} of their mismatch")  # fmt: skip
    return out


def _change(b: Bisect) -> str:
    assert b.best_change is not None
    change = b.outcome(b.best_change)
    if (change.overall.share or 0.0) < ALONE:
        return (f"no single change accounts for the mismatch alone (the most, {change.name}: "
                f"{share_text(change.overall)}): it takes the changes together")  # fmt: skip
    cells = "; ".join(f"{_where(c)}: {share_text(n)}" for c, n in change.by_cell.items())
    return (f"of the single changes, {change.name} ({change.what}) moves the trainer side "
            f"furthest toward the rollout: it accounts for {share_text(change.overall)} of the "
            f"mismatch" + (f" ({cells})" if cells else ""))  # fmt: skip


def _where(cell: str) -> str:
    return "in the control sample" if cell == CONTROL else f"in the hot cell ({cell})"


def _cell_line(b: Bisect, cell: str) -> str:
    """The sentence of one hot cell (or the control sample)."""
    best = b.outcome(b.by_cell_best[cell])
    n, start = best.by_cell[cell], b.outcomes[0].by_cell[cell]
    head = f"{_where(cell)} ({n.tokens:,} tokens, K3 {short(start.k3_rollout)})"
    if start.k3_rollout == 0:
        return f"{head}: the two sides are equal there"
    if b.by_cell_reproduces[cell]:
        return (f"{head}: {best.name} reproduces the rollout side there (K3 "
                f"{short(n.k3_rollout)}, {share_text(n)} of its mismatch)")  # fmt: skip
    return (f"{head}: nothing here reproduces the rollout side: the closest, {best.name}, "
            f"accounts for {share_text(n)} of its mismatch; {LOOK_THERE}")  # fmt: skip


def _numbers(n: Numbers) -> dict[str, Any]:
    return {
        "tokens": n.tokens,
        "k3_rollout": n.k3_rollout, "k3_rollout_ci": list(n.k3_rollout_ci),
        "mean_d_rollout": n.mean_d_rollout,
        "k3_trainer": n.k3_trainer, "k3_trainer_ci": list(n.k3_trainer_ci),
        "mean_d_trainer": n.mean_d_trainer,
        "share": n.share, "share_ci": None if n.share_ci is None else list(n.share_ci),
    }  # fmt: skip


def bisect_dict(b: Bisect) -> dict[str, Any]:
    """The JSON of ``bisect``: the verdict's sentences, the sample, every setting's numbers."""
    return {"bisect": {
        "run": b.run, "model": b.model, "device": b.device, "seed": b.seed, "start": b.start,
        "verdict": verdict(b),
        "sequences": b.sequences, "tokens": b.tokens, "candidates": b.candidates,
        "without_prompt": b.without_prompt, "mismatch_k3": b.mismatch,
        "trainer_check": {"k3": b.outcomes[0].overall.k3_trainer,
                          "threshold": b.trainer_threshold},
        "trainer_temperature": b.trainer_temperature,
        "best": b.best or None, "reproduces": b.reproduces, "best_change": b.best_change,
        "by_turn_best": b.by_turn_best,
        "cells": [{"cell": c.label, "source": c.source, "sequences_touching": c.touching,
                   "stratum_sequences": c.stratum, "drawn": c.drawn, "explain": c.sentence,
                   "best": b.by_cell_best.get(c.label),
                   "reproduces": b.by_cell_reproduces.get(c.label)} for c in b.cells],
        "uniform_because": b.cells_note,
        "settings": [{"setting": o.name, "what": o.what, "changes": o.changes,
                      **_numbers(o.overall),
                      "by_turn": {k: _numbers(v) for k, v in o.by_turn.items()},
                      "by_cell": {k: _numbers(v) for k, v in o.by_cell.items()}}
                     for o in b.outcomes],
        "skipped": [{"setting": n, "why": w} for n, w in b.skipped],
    }}  # fmt: skip
