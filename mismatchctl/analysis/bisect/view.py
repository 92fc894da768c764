"""``bisect`` as sections: the verdict first (overall, then each hot cell and the
control sample), the sample and its cells, every setting's numbers, the settings per cell,
and (HTML) a figure of every setting's K3 against the rollout side, overall and per cell."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mismatchctl.analysis import sections as sec
from mismatchctl.analysis.bisect.judge import Bisect, verdict
from mismatchctl.analysis.bisect.metrics import share_text, short


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
               f"{short(b.trainer_threshold)}"),
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
            "k3_rollout_ci": f"{short(n.k3_rollout_ci[0])} - {short(n.k3_rollout_ci[1])}",
            "mean_d_rollout": n.mean_d_rollout,
            "k3_trainer": n.k3_trainer, "mean_d_trainer": n.mean_d_trainer,
            "share": share_text(n), "best": o.name == b.best,
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
            row[f"share_{i}"] = share_text(o.by_cell[c])
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
