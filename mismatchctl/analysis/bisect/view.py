"""``bisect`` as sections and JSON: the verdict first (overall, then each hot cell and the
control sample), the sample and its cells, every setting's numbers, the settings per cell,
and (HTML) a figure of every setting's K3 against the rollout side, overall and per cell."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mismatchctl.analysis import sections as sec

if TYPE_CHECKING:
    from mismatchctl.analysis.bisect.judge import Bisect
    from mismatchctl.analysis.bisect.metrics import Numbers


# a single change accounting for less of the mismatch than this does not explain any of it
ALONE = 0.05
LOOK_THERE = ("the engine has a path these settings do not have (an attention kernel, a fused "
              "op, its sampler's processing): look there")  # fmt: skip


def _g(x: float) -> str:
    return f"{x:.2g}"


def _share(n: Numbers) -> str:
    if n.share is None:
        return "-"
    ci = "" if n.share_ci is None else f" [{n.share_ci[0]:.0%}, {n.share_ci[1]:.0%}]"
    return f"{n.share:.0%}{ci}"


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
               f"{_g(best.overall.k3_rollout)} (the trainer's own setting: "
               f"{_g(start.k3_rollout)})"]  # fmt: skip
    else:
        out = [f"nothing here reproduces the rollout logprobs: the closest, {best.name}, leaves "
               f"K3 {_g(best.overall.k3_rollout)} of the trainer setting's "
               f"{_g(start.k3_rollout)} ({_share(best.overall)} accounted for): "
               f"{LOOK_THERE}"]  # fmt: skip
    if b.best_change is not None:
        out.append(_change(b))
    out += [_cell_line(b, cell) for cell in b.by_cell_best]
    for kind, name in b.by_turn_best.items():
        o = b.outcome(name).by_turn[kind]
        if o.tokens:
            out.append(f"{kind} turns ({o.tokens:,} tokens): closest is {name}, K3 "
                       f"{_g(o.k3_rollout)}, {_share(o)} of their mismatch")  # fmt: skip
    return out


def _change(b: Bisect) -> str:
    assert b.best_change is not None
    change = b.outcome(b.best_change)
    if (change.overall.share or 0.0) < ALONE:
        return (f"no single change accounts for the mismatch alone (the most, {change.name}: "
                f"{_share(change.overall)}): it takes the changes together")  # fmt: skip
    cells = "; ".join(f"{_where(c)}: {_share(n)}" for c, n in change.by_cell.items())
    return (f"of the single changes, {change.name} ({change.what}) moves the trainer side "
            f"furthest toward the rollout: it accounts for {_share(change.overall)} of the "
            f"mismatch" + (f" ({cells})" if cells else ""))  # fmt: skip


def _where(cell: str) -> str:
    from mismatchctl.analysis.bisect.judge import CONTROL

    return "in the control sample" if cell == CONTROL else f"in the hot cell ({cell})"


def _cell_line(b: Bisect, cell: str) -> str:
    """The sentence of one hot cell (or the control sample)."""
    best = b.outcome(b.by_cell_best[cell])
    n, start = best.by_cell[cell], b.outcomes[0].by_cell[cell]
    head = f"{_where(cell)} ({n.tokens:,} tokens, K3 {_g(start.k3_rollout)})"
    if start.k3_rollout == 0:
        return f"{head}: the two sides are equal there"
    if b.by_cell_reproduces[cell]:
        return (f"{head}: {best.name} reproduces the rollout side there (K3 "
                f"{_g(n.k3_rollout)}, {_share(n)} of its mismatch)")  # fmt: skip
    return (f"{head}: nothing here reproduces the rollout side: the closest, {best.name}, "
            f"accounts for {_share(n)} of its mismatch; {LOOK_THERE}")  # fmt: skip


def bisect_sections(b: Bisect) -> list[sec.Section]:
    lines = [sec.Line(t, "bold" if i == 0 else "") for i, t in enumerate(verdict(b))]
    out: list[sec.Section] = [
        sec.Lines("bisect-verdict", f"Bisect: {b.run}", lines),
        sec.Facts("bisect-summary", "Sample", _facts(b)),
    ]
    if b.cells:
        out.append(_cells_table(b))
    out.append(_table(b))
    if b.by_cell_best:
        out.append(_by_cell_table(b))
    out.append(sec.Figure("bisect-k3", "K3 against the rollout side, per setting", "bisect_k3",
                        plot_data(b), HOW_K3))  # fmt: skip
    notes = [f"{name}: skipped, {why}" for name, why in b.skipped]
    if b.without_prompt:
        notes.append(f"{b.without_prompt:,} sampled sequences left out: the store has not "
                     "their prompt's token ids")  # fmt: skip
    if notes:
        out.append(sec.Lines("bisect-notes", "Notes", [sec.Line(n, "note") for n in notes]))
    return out


def _facts(b: Bisect) -> list[sec.Fact]:
    how = (f"stratified by the hot cells (seed {b.seed}) of {b.candidates:,}" if b.cells else
           f"a uniform sample (seed {b.seed}) of {b.candidates:,}"
           + (f"; {b.cells_note}" if b.cells_note else ""))  # fmt: skip
    facts = [
        sec.Fact("run", b.run, sec.Kind.LABEL),
        sec.Fact("model", b.model, sec.Kind.TEXT),
        sec.Fact("device", b.device, sec.Kind.TEXT),
        sec.Fact("sequences re-scored", b.sequences, sec.Kind.COUNT, remark=how),
        sec.Fact("model tokens", b.tokens, sec.Kind.COUNT),
        sec.Fact("mismatch (K3, trainer vs rollout)", b.mismatch,
               remark="each sequence weighted by its stratum: the run's, estimated" if b.cells
               else None),
        sec.Fact("trainer check", b.outcomes[0].overall.k3_trainer,
               remark=f"K3 of the start ({b.start}) against the trainer side, at most "
               f"{_g(b.trainer_threshold)}"),
    ]  # fmt: skip
    if b.trainer_temperature is not None:
        facts.append(sec.Fact("trainer temperature", f"{b.trainer_temperature:g}", sec.Kind.TEXT,
                            remark="the trainer divides its logits by the run's temperature: "
                            "every setting here does"))  # fmt: skip
    return facts


def _cells_table(b: Bisect) -> sec.Table:
    rows = [{"cell": c.label, "source": c.source, "touching": c.touching or None,
             "stratum": c.stratum, "drawn": c.drawn, "sentence": c.sentence}
            for c in b.cells]  # fmt: skip
    columns = [
        sec.Column("cell", "cell", sec.Kind.LABEL),
        sec.Column("source", "from", sec.Kind.TEXT),
        sec.Column("touching", "sequences with a token in it", sec.Kind.COUNT),
        sec.Column("stratum", "its stratum's sequences", sec.Kind.COUNT),
        sec.Column("drawn", "drawn", sec.Kind.COUNT),
        sec.Column("sentence", "explain", sec.Kind.TEXT),
    ]
    note = ("a stratum: the sequences with a token in the cell and in no earlier one; the "
            "control: those with none in any. docs/bisect.md, the sample")  # fmt: skip
    return sec.Table("bisect-cells", "Hot cells", columns, rows, note=note)


def _table(b: Bisect) -> sec.Table:
    rows = []
    for o in b.outcomes:
        n = o.overall
        rows.append({
            "setting": o.name, "what": o.what,
            "k3_rollout": n.k3_rollout,
            "k3_rollout_ci": f"{_g(n.k3_rollout_ci[0])} - {_g(n.k3_rollout_ci[1])}",
            "mean_d_rollout": n.mean_d_rollout,
            "k3_trainer": n.k3_trainer, "mean_d_trainer": n.mean_d_trainer,
            "share": _share(n), "best": o.name == b.best,
        })  # fmt: skip
    columns = [
        sec.Column("setting", "setting", sec.Kind.LABEL),
        sec.Column("what", "what it changes", sec.Kind.TEXT),
        sec.Column("k3_rollout", "K3 vs rollout"),
        sec.Column("k3_rollout_ci", "95% interval", sec.Kind.TEXT),
        sec.Column("mean_d_rollout", "mean d vs rollout"),
        sec.Column("k3_trainer", "K3 vs trainer"),
        sec.Column("mean_d_trainer", "mean d vs trainer"),
        sec.Column("share", "share of mismatch", sec.Kind.TEXT),
    ]
    note = ("d = re-scored - side over the sample's model tokens; K3 = mean(exp(d) - 1 - d); "
            "intervals: a bootstrap over whole sequences; share = 1 - K3(setting vs rollout) / "
            "K3(start vs rollout). docs/bisect.md")  # fmt: skip
    return sec.Table("bisect-settings", "Settings", columns, rows, note=note, bold_key="best")


def _by_cell_table(b: Bisect) -> sec.Table:
    """Every setting's K3 against the rollout side and share, per hot cell and the control."""
    cells = list(b.by_cell_best)
    rows = []
    for o in b.outcomes:
        row: dict[str, Any] = {"setting": o.name}
        for i, c in enumerate(cells):
            row[f"k3_{i}"] = o.by_cell[c].k3_rollout
            row[f"share_{i}"] = _share(o.by_cell[c])
        rows.append(row)
    columns = [sec.Column("setting", "setting", sec.Kind.LABEL)]
    for i, c in enumerate(cells):
        columns += [sec.Column(f"k3_{i}", f"{c}: K3 vs rollout"),
                    sec.Column(f"share_{i}", f"{c}: share", sec.Kind.TEXT)]  # fmt: skip
    note = ("each cell's tokens in the sample (the control: the tokens of the sequences drawn "
            "from the control stratum); share = 1 - K3(setting) / K3(start) there")  # fmt: skip
    return sec.Table("bisect-cells-settings", "Settings per cell", columns, rows, note=note)


HOW_K3 = (
    "Each setting's K3 against the rollout side (log scale) with its 95% bootstrap interval: "
    "over the whole sample and in each hot cell and the control sample. The start is the "
    "trainer's setting: a bar far under the start's reproduces the rollout side there."
)


@dataclass
class BisectPlot:
    """Per group (``overall``, each cell, ``control``), every setting's K3 against the rollout
    side and its interval (None where the group has no token)."""

    settings: list[str]
    groups: list[str]
    k3: list[list[float | None]]  # [group][setting]
    lo: list[list[float | None]]
    hi: list[list[float | None]]
    best: list[str]  # the closest setting of each group


def plot_data(b: Bisect) -> BisectPlot:
    groups = ["overall", *b.by_cell_best]
    k3, lo, hi = [], [], []
    for g in groups:
        ns = [o.overall if g == "overall" else o.by_cell[g] for o in b.outcomes]
        k3.append([n.k3_rollout for n in ns])
        lo.append([n.k3_rollout_ci[0] for n in ns])
        hi.append([n.k3_rollout_ci[1] for n in ns])
    best = [b.best or b.outcomes[0].name, *b.by_cell_best.values()]
    return BisectPlot([o.name for o in b.outcomes], groups, k3, lo, hi, best)


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
