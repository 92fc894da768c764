"""A run's training curves as sections: the correlation of each curve with per-step vllm_kl, the
events the studies look for, what the join of the two tables left out, the figures and the
per-step table (docs/curves.md)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from mismatchctl.analysis import sections as sec
from mismatchctl.analysis.compare.curves import pair_dict
from mismatchctl.curves.analysis import Link, RunCurves
from mismatchctl.curves.correlate import MIN_LAG_PAIRS
from mismatchctl.curves.series import KL, value_at
from mismatchctl.display import number as num
from mismatchctl.engines.plan import step_span
from mismatchctl.stats import band
from mismatchctl.stats import registry as M

LINK_COLUMNS = (
    "curve",
    "from",
    "steps",
    "pearson",
    "spearman",
    "lead-lag of the changes (best |r|)",
)
MAX_TABLE_STEPS = 30
MAX_LISTED_STEPS = 12


def origin_text(origin: str) -> str:
    """Where a curve comes from: the dumps, or the training logs' file names."""
    if origin == "dumps":
        return "dumps"
    return ", ".join(Path(p).name for p in origin.split(", "))


def lag_text(link: Link) -> str:
    """The best lag of the step-to-step changes with its r, 95% interval and pairs; or why
    there is none (too few pairs of consecutive steps)."""
    best = link.best
    if best is None or best.r is None:
        pairs = max((p.n for p in link.lags), default=0)
        if pairs < MIN_LAG_PAIRS:
            return f"n/a: {pairs} step changes, need {MIN_LAG_PAIRS}"
        return "n/a: a curve does not change"
    r = f"r {best.r:+.2f}, 95% CI {best.ci_low:+.2f}..{best.ci_high:+.2f}, n {best.n}"
    if best.lag > 0:
        return f"vllm_kl leads by {best.lag} ({r})"
    if best.lag < 0:
        return f"vllm_kl follows by {-best.lag} ({r})"
    return f"same step ({r})"


def links_table(c: RunCurves) -> sec.Table:
    """Each curve against per-step vllm_kl: over how many steps, Pearson and Spearman of the
    values, and the best lead-lag of the step-to-step changes."""
    rows = [
        {
            "curve": link.metric,
            "from": origin_text(link.origin),
            "steps": link.n,
            "pearson": link.pearson,
            "spearman": link.spearman,
            "lag": lag_text(link),
        }
        for link in c.links
    ]
    columns = [
        sec.Column("curve", "curve", sec.Kind.LABEL), sec.Column("from", "from", sec.Kind.LABEL),
        sec.Column("steps", "steps", sec.Kind.COUNT), sec.Column("pearson", "pearson", sec.Kind.SIGNED),
        sec.Column("spearman", "spearman", sec.Kind.SIGNED),
        sec.Column("lag", "lead-lag of the changes (best |r|)", sec.Kind.TEXT),
    ]  # fmt: skip
    return sec.Table(
        sec.slug("curve-links", c.run),
        f"Training curves: {c.run} (each curve against per-step vllm_kl)",
        columns,
        rows,
    )


def steps_list(steps: list[int]) -> str:
    """``0-4, 7, 9-10`` (runs of consecutive steps), cut after MAX_LISTED_STEPS pieces."""
    pieces: list[str] = []
    i = 0
    while i < len(steps):
        j = i
        while j + 1 < len(steps) and steps[j + 1] == steps[j] + 1:
            j += 1
        pieces.append(str(steps[i]) if i == j else step_span(steps[i], steps[j]))
        i = j + 1
    more = len(pieces) - MAX_LISTED_STEPS
    text = ", ".join(pieces[:MAX_LISTED_STEPS])
    return text + (f", ... ({more} more ranges)" if more > 0 else "")


def join_notes(c: RunCurves) -> list[str]:
    """The steps one table has and the other lacks, and values that could not be used."""
    out = []
    if not c.has_logs:
        out.append(
            "no training logs attached: add them with `mismatchctl ingest-metrics FILE "
            f"--run {c.run}`; the curves below come from the dumps only"
        )
    if c.only_log_steps:
        out.append(
            f"{len(c.only_log_steps)} step(s) in the training logs have no dumps: "
            + steps_list(c.only_log_steps)
        )
    if c.only_dump_steps:
        out.append(
            f"{len(c.only_dump_steps)} dumped step(s) have no training-log value: "
            + steps_list(c.only_dump_steps)
        )
    for link in c.links:
        if link.nonfinite_steps:
            out.append(
                f"{link.metric}: {len(link.nonfinite_steps)} step(s) with a NaN or infinite "
                "value left out of its correlation: " + steps_list(link.nonfinite_steps)
            )
    return out


def event_lines(c: RunCurves) -> list[str]:
    """What the studies look for, with the steps."""
    out = [
        "vllm_kl spikes: "
        + (steps_list(c.kl_spikes) if c.kl_spikes else "none (robust z > 3.5 vs the last 10 steps)")
    ]
    for m in c.spike_matches:
        if m.matches:
            pairs = ", ".join(
                f"{x.step_a}" + (f" ({m.metric} at {x.step_b})" if x.step_b != x.step_a else "")
                for x in m.matches
            )
            out.append(
                f"{len(m.matches)} of {m.kl_spikes} vllm_kl spikes coincide with {m.role} "
                f"({m.metric}) spikes: steps {pairs}"
            )
        elif m.kl_spikes:
            out.append(f"no vllm_kl spike coincides with a spike of {m.role} ({m.metric})")
    reward = c.roles.get("reward")
    if reward is not None:
        for p in c.rises:
            out.append(
                f"reward ({reward}) drops at step {p.drop_step} ({num(p.reward_before)} -> "
                f"{num(p.reward_after)}), {p.lead} step(s) after vllm_kl rose "
                f"{p.kl_factor:.1f}x over its baseline (from step {p.kl_rise_step})"
            )
        risen = {p.drop_step for p in c.rises}
        quiet = sorted({d.step for d in c.reward_drops} - risen - set(c.unassessed_drops))
        if quiet:
            out.append(
                f"{len(quiet)} reward drop(s) without a vllm_kl rise before them: steps "
                + steps_list(quiet)
            )
        if c.unassessed_drops:
            out.append(
                f"{len(c.unassessed_drops)} reward drop(s) not assessed for a vllm_kl rise (it "
                "needs 5 vllm_kl steps before the 10-step look-back): steps "
                + steps_list(c.unassessed_drops)
            )
    return out


def table_steps(c: RunCurves) -> tuple[list[int], str | None]:
    """The steps of the per-step table: all of them, or (when many) the event steps and the
    largest vllm_kl, with a note."""
    kl = c.series[KL]
    steps = sorted({int(s) for s in kl.steps} | set(c.log_steps))
    if len(steps) <= MAX_TABLE_STEPS:
        return steps, None
    pick = set(c.kl_spikes) | {p.drop_step for p in c.rises} | {d.step for d in c.reward_drops}
    finite = np.where(np.isfinite(kl.values), kl.values, -np.inf)
    for i in np.argsort(-finite, kind="stable")[:10]:
        pick.add(int(kl.steps[i]))
    chosen = sorted(pick)[:MAX_TABLE_STEPS]
    return chosen, (
        f"{len(chosen)} of {len(steps)} steps: vllm_kl spikes, reward drops and the 10 largest "
        "vllm_kl; every step in --json and the figure"
    )


def table_columns(c: RunCurves) -> list[str]:
    """vllm_kl, then the curves that play a role, then trainer_ppl; the rest stay in the JSON."""
    cols = [KL]
    for role in ("reward", "grad_norm", "entropy"):
        name = c.roles.get(role)
        if name is not None and name not in cols:
            cols.append(name)
    if M.TRAINER_PPL not in cols:
        cols.append(M.TRAINER_PPL)
    return cols


def step_band(c: RunCurves, step: int) -> str | None:
    v = value_at(c.series[KL], step)
    return None if v is None or math.isnan(v) else band(v)


def step_table(c: RunCurves) -> sec.Table:
    steps, note = table_steps(c)
    names = table_columns(c)
    rows = []
    for step in steps:
        row: dict = {"step": step, "band": step_band(c, step)}
        for i, name in enumerate(names):
            row[f"c{i}"] = value_at(c.series[name], step)
        rows.append(row)
    columns = [
        sec.Column("step", "step", sec.Kind.ID),
        sec.Column("c0", KL, sec.Kind.VALUE, M.VLLM_KL, band_key="band"),
        sec.Column("band", "band", sec.Kind.BAND, band_key="band"),
        *[sec.Column(f"c{i}", name, sec.Kind.VALUE) for i, name in enumerate(names) if i],
    ]
    return sec.Table(
        sec.slug("curve-steps", c.run),
        f"Per step: {c.run}, training curves",
        columns,
        rows,
        note=note,
    )


HOW_OVERLAY = (
    "vllm_kl of each batch (red, left axis, log scale, over the severity bands) and one training "
    "curve (blue, right axis): pick the curve in the menu. The studies read spikes of vllm_kl "
    "against spikes of entropy, trainer perplexity and gradient norm, and a vllm_kl rise before "
    "the reward collapses."
)
HOW_LAGS = (
    "Pearson correlation of the step-to-step changes of vllm_kl at step s with those of each "
    "curve at step s + k. A peak at k > 0 means vllm_kl moves first (it leads the curve by k "
    "steps); k < 0 means the curve moves first. Click a legend entry to show or hide a curve."
)


LAGS_TITLE = "Lead-lag of the step-to-step changes"


def lags_missing(c: RunCurves) -> str | None:
    """Why no curve has a lead-lag at any lag (its figure would be an empty frame), or None."""
    points = [p for link in c.links for p in link.lags]
    if any(p.r is not None for p in points):
        return None
    pairs = max((p.n for p in points), default=0)
    if pairs < MIN_LAG_PAIRS:
        return (
            f"No lead-lag to draw: every curve is n/a. A curve's step-to-step changes pair with "
            f"those of vllm_kl at most {pairs} times, and a lag needs {MIN_LAG_PAIRS} pairs "
            "(changes from one step to the next, on steps that both vllm_kl and the curve have)."
        )
    return (
        f"No lead-lag to draw: every curve is n/a (fewer than {MIN_LAG_PAIRS} pairs of "
        "step-to-step changes, or a curve that does not change: the table's lead-lag column "
        "says which)."
    )


def lags_section(c: RunCurves) -> sec.Section:
    """The lead-lag figure; or, when every curve is n/a, the reason in its place (the page
    only: the terminal's table already says n/a per curve)."""
    why = lags_missing(c)
    if why is None:
        return sec.Figure(sec.slug("fig-lags", c.run), LAGS_TITLE, "curves_lags", c, HOW_LAGS)
    note = sec.Lines(sec.slug("lags-none", c.run), LAGS_TITLE, [sec.Line(why, "note")])
    return sec.Block(sec.slug("lags", c.run), LAGS_TITLE, [note], media="html", bare=True)


def curves_block(c: RunCurves) -> sec.Block:
    """A run's training curves: with training logs, everything; without, one line saying how to
    attach them (the dump-derived curves are in the JSON and the figure)."""
    notes = sec.Lines(
        sec.slug("curve-notes", c.run), None, [sec.Line(n, "note") for n in join_notes(c)]
    )
    if not c.has_logs:
        return sec.Block(sec.slug("curves", c.run), f"Training curves: {c.run}", [notes], collapsed=True,
                     summary="no training logs attached")  # fmt: skip
    sections: list[sec.Section] = [links_table(c), notes]
    sections.append(
        sec.Lines(sec.slug("curve-events", c.run), None, [sec.Line(x) for x in event_lines(c)])
    )
    sections.append(sec.Figure(sec.slug("fig-curves", c.run), "vllm_kl and the training curves",
                           "curves_overlay", c, HOW_OVERLAY))  # fmt: skip
    if c.links:
        sections.append(lags_section(c))
    sections.append(step_table(c))
    return sec.Block(sec.slug("curves", c.run), f"Training curves: {c.run}", sections)


def curve_pairs_table(pairs: list) -> sec.Table:
    """One row per paired curve of a comparison (means over the steps both sides have)."""
    rows = [
        {**pair_dict(p), "steps_a": None if p.a is None else len(p.a.series.steps),
         "steps_b": None if p.b is None else len(p.b.series.steps)}
        for p in pairs
    ]  # fmt: skip
    columns = [
        sec.Column("metric", "curve", sec.Kind.LABEL), sec.Column("steps_a", "steps A", sec.Kind.COUNT),
        sec.Column("steps_b", "steps B", sec.Kind.COUNT), sec.Column("common_steps", "common", sec.Kind.COUNT),
        sec.Column("mean_a", "mean A", sec.Kind.VALUE), sec.Column("mean_b", "mean B", sec.Kind.VALUE),
        sec.Column("ratio", "B / A", sec.Kind.RATIO),
        sec.Column("pearson_with_vllm_kl_a", "r(vllm_kl) A", sec.Kind.SIGNED),
        sec.Column("pearson_with_vllm_kl_b", "r(vllm_kl) B", sec.Kind.SIGNED),
    ]  # fmt: skip
    return sec.Table(
        "curve-pairs", "Training curves, aligned on step (means over the common steps)",
        columns, rows,
    )  # fmt: skip


def has_logs(pairs: list) -> bool:
    return any(t is not None and not t.series.from_dumps for p in pairs for t in (p.a, p.b))
