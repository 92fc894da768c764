"""A comparison as sections (configuration, headline with intervals and verdicts, where the gap
lives, bins, turn kinds, gpus, steps, training curves) and as JSON."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from mismatchctl.analysis import figure_data as FD
from mismatchctl.analysis.compare_curves import CurvePair
from mismatchctl.analysis.curves_view import curve_pairs_table, has_logs
from mismatchctl.analysis.report_view import POOLED, distribution_figures
from mismatchctl.analysis.sections import (
    Block,
    Column,
    Facts,
    Figure,
    Kind,
    Line,
    Lines,
    Section,
    Table,
)
from mismatchctl.curves.series import KL
from mismatchctl.display import number
from mismatchctl.engines import plan as K
from mismatchctl.stats import bin_label
from mismatchctl.stats import registry as M

if TYPE_CHECKING:
    from mismatchctl.analysis.compare import Comparison

MAX_STEP_ROWS = 30  # beyond this, the first and last 15 steps (all in the JSON and the figure)
MAX_CURVE_FIGURES = 12
# A bin holding less than this share of a side's tokens has a vllm_kl of a handful of tokens:
# the bin chart draws it hatched and faint, not as a bar to read.
SPARSE_SHARE = 0.001


def comparison_sections(c: Comparison) -> list[Section]:
    a, b = c.a.selection.label, c.b.selection.label
    out: list[Section] = [
        Facts("compare", f"Compare  A: {a}   B: {b}", []),
        config_table(c),
        headline_table(c),
        Lines("verdicts", "Verdict (bootstrap over whole sequences)", [
            Line(r.verdict, "bold" if r.significant else "") for r in c.headline if r.verdict
        ]),
        Figure("fig-steps", "Per-step vllm_kl, both sides", "compare_steps", c,
               "vllm_kl of each batch (step) of side A and side B on a log axis, over the "
               "severity bands; steps are aligned on their numbers."),
        gap_table(c),
        Figure("fig-bins", "vllm_kl by inference probability, both sides", "compare_bins",
               bins_plot(c), "vllm_kl of each p_infer bin for both sides (log scale). A bin "
               f"holding under {SPARSE_SHARE:.1%} of a side's tokens is drawn hatched and faint: "
               "its vllm_kl rests on a handful of tokens."),
        bins_table(c),
        keyed_table(c.turn_kinds, K.TURN_KIND, "By turn kind"),
    ]  # fmt: skip
    if len(c.gpus) > 1 or any(r.a_tokens == 0 or r.b_tokens == 0 for r in c.gpus):
        out.append(keyed_table(c.gpus, K.GPU, "By gpu"))
    out.append(steps_table(c))
    for side, rep in (("A", c.a), ("B", c.b)):
        figs = [f for f in distribution_figures(rep, _side_run(rep)) if f.kind == "log_ppl"]
        if figs:
            title = f"{side}: {rep.selection.label}: log-perplexity of segments"
            out.append(Block(f"scatter-{side.lower()}", title, figs, media="html"))
    out.append(curves_section(c))
    out += [Lines("notes", None, [Line(f"note: {n}", "note") for n in c.notes])] if c.notes else []
    return out


def _side_run(rep: Any) -> str:
    """Whose distributions a side shows: its run, or its runs pooled."""
    names = rep.selection.names
    return names[0] if len(names) == 1 else POOLED


def config_table(c: Comparison) -> Section:
    if not c.config:
        return Lines("config", None, [Line("Configuration: no tag differs between the two sides.")])
    columns = [
        Column("key", "tag", Kind.LABEL),
        Column("a", "A", Kind.LABEL),
        Column("b", "B", Kind.LABEL),
    ]
    return Table("config", "Configuration that differs", columns, [asdict(r) for r in c.config])


def ci_text(low: float | None, high: float | None, of: str | None) -> str | None:
    if low is None or high is None:
        return None
    return f"{number(low, 3)} .. {number(high, 3)} ({of})"


def headline_table(c: Comparison) -> Table:
    rows = [
        {**r.to_dict(), "ci": ci_text(r.ci_low, r.ci_high, r.ci_of), "bold": bool(r.significant)}
        for r in c.headline
    ]  # fmt: skip
    columns = [
        Column("metric", "metric", Kind.LABEL),
        Column("a", "A", Kind.VALUE),
        Column("b", "B", Kind.VALUE),
        Column("difference", "B - A", Kind.VALUE),
        Column("ratio", "B / A", Kind.RATIO),
        Column("ci", "95% CI", Kind.TEXT),
    ]
    return Table("headline", "Headline", columns, rows, bold_key="bold")


def gap_table(c: Comparison) -> Table:
    rows = [
        {"turn_kind": g.turn_kind, "bin": bin_label(c.a.bin_edges, int(g.bin)),
         "contribution": g.contribution, "share_of_gap": g.share_of_gap}
        for g in c.gap
    ]  # fmt: skip
    columns = [
        Column("turn_kind", "turn kind", Kind.LABEL),
        Column("bin", "p_infer bin", Kind.LABEL),
        Column("contribution", "contribution to B - A", Kind.VALUE),
        Column("share_of_gap", "share of gap", Kind.SHARE),
    ]
    return Table(
        "gap",
        "Where the vllm_kl gap lives (turn kind x p_infer bin)",
        columns,
        rows,
        keys=2,
        note="Each cell's K3 sum per token of its side, B minus A: the contributions add up to "
        "vllm_kl(B) - vllm_kl(A).",
    )


def bins_table(c: Comparison) -> Table:
    rows = [{**asdict(r), "bin": bin_label(c.a.bin_edges, int(r.bin))} for r in c.bins]
    columns = [
        Column("bin", "p_infer bin", Kind.LABEL),
        Column("a_token_share", "A token share", Kind.SHARE, M.TOKEN_SHARE),
        Column("b_token_share", "B token share", Kind.SHARE, M.TOKEN_SHARE),
        Column("a_vllm_kl", "A vllm_kl", Kind.VALUE, M.VLLM_KL),
        Column("b_vllm_kl", "B vllm_kl", Kind.VALUE, M.VLLM_KL),
        Column("vllm_kl_ratio", "B / A", Kind.RATIO),
        Column("a_kl_share", "A kl share", Kind.SHARE, M.KL_SHARE),
        Column("b_kl_share", "B kl share", Kind.SHARE, M.KL_SHARE),
    ]
    return Table("bins", "By inference probability", columns, rows)


def bins_plot(c: Comparison) -> FD.CompareBins:
    return FD.CompareBins(
        labels=[bin_label(c.a.bin_edges, int(r.bin)) for r in c.bins],
        sides=[
            FD.CompareSide(c.a.selection.label, [r.a_vllm_kl for r in c.bins],
                           [_sparse(r.a_token_share) for r in c.bins]),
            FD.CompareSide(c.b.selection.label, [r.b_vllm_kl for r in c.bins],
                           [_sparse(r.b_token_share) for r in c.bins]),
        ],
    )  # fmt: skip


def _sparse(share: float | None) -> bool:
    return share is None or share < SPARSE_SHARE


def keyed_table(rows: list[Any], key: str, title: str) -> Table:
    columns = [
        Column(key, key, Kind.LABEL),
        Column("a_tokens", "A tokens", Kind.COUNT, M.TOKENS),
        Column("b_tokens", "B tokens", Kind.COUNT, M.TOKENS),
        Column("a_vllm_kl", "A vllm_kl", Kind.VALUE, M.VLLM_KL),
        Column("b_vllm_kl", "B vllm_kl", Kind.VALUE, M.VLLM_KL),
        Column("vllm_kl_ratio", "B / A", Kind.RATIO),
        Column("a_log_ppl_pearson", "A log-ppl ρ", Kind.CORR, M.LOG_PPL_PEARSON),
        Column("b_log_ppl_pearson", "B log-ppl ρ", Kind.CORR, M.LOG_PPL_PEARSON),
    ]
    return Table(f"by-{key}", title, columns, [r.to_dict() for r in rows])


def steps_table(c: Comparison) -> Table:
    rows = [asdict(r) for r in c.steps]
    half = MAX_STEP_ROWS // 2
    note = None
    if len(rows) > MAX_STEP_ROWS:
        note = f"first and last {half} of {len(rows)} steps (all in --json and the figure)"
        rows = rows[:half] + rows[-half:]
    columns = [
        Column("step", "step", Kind.ID),
        Column("a_vllm_kl", "A vllm_kl", Kind.VALUE, M.VLLM_KL),
        Column("b_vllm_kl", "B vllm_kl", Kind.VALUE, M.VLLM_KL),
        Column("vllm_kl_ratio", "B / A", Kind.RATIO),
    ]
    return Table("steps", "Per step vllm_kl (aligned on step)", columns, rows, note=note)


def curves_section(c: Comparison) -> Section:
    if not has_logs(c.curves):
        return Lines("curves", None, [Line(
            "Training curves: neither side has training logs attached (mismatchctl "
            "ingest-metrics FILE --run RUN); dump-derived curves are in --json and --html.", "dim")])  # fmt: skip
    figures: list[Section] = []
    pairs = [p for p in c.curves if _drawn(p)]
    for i, p in enumerate(pairs[:MAX_CURVE_FIGURES]):
        figures.append(Figure(f"fig-curve-{i}", p.metric, "compare_curve", p))
    lines = []
    if len(pairs) > MAX_CURVE_FIGURES:
        lines.append(Line(f"{len(pairs) - MAX_CURVE_FIGURES} more paired curves in the table "
                          "and in --json.", "note"))  # fmt: skip
    sections: list[Section] = [curve_pairs_table(c.curves), *figures]
    if lines:
        sections.append(Lines("curve-notes", None, lines))
    return Block("curves", "Training curves, both sides", sections, bare=True)


def _drawn(p: CurvePair) -> bool:
    """vllm_kl, and every curve a training log brings, when both sides have it."""
    if p.a is None or p.b is None:
        return False
    return p.metric == KL or not (p.a.series.from_dumps and p.b.series.from_dumps)


def comparison_dict(c: Comparison) -> dict[str, Any]:
    sides = {"a": c.a.to_dict(), "b": c.b.to_dict()}
    out = {k: sides["a"][k] for k in ("schema_version", "tool", "aggregation", "bin_edges")}
    out["runs"] = {**sides["a"]["runs"], **sides["b"]["runs"]}
    out["excluded"] = {side: doc["excluded"] for side, doc in sides.items()}
    out["groups"] = [
        {**g, "by": {"side": side, **g["by"]}} for side, doc in sides.items() for g in doc["groups"]
    ]
    out["comparison"] = {
        "a": c.a.selection.label,
        "b": c.b.selection.label,
        "config_diff": [asdict(r) for r in c.config],
        "headline": [r.to_dict() for r in c.headline],
        "gap": [asdict(g) for g in c.gap],
        "bins": [asdict(r) for r in c.bins],
        "turn_kind": [r.to_dict() for r in c.turn_kinds],
        "gpu": [r.to_dict() for r in c.gpus],
        "steps": [asdict(r) for r in c.steps],
        "hardware": {side: doc.get("hardware") for side, doc in sides.items()},
        "notes": c.notes,
        "curves": [_pair_dict(p) for p in c.curves],
    }
    out["curves"] = {side: doc.get("curves", {}) for side, doc in sides.items()}
    return out


def _pair_dict(p: CurvePair) -> dict[str, Any]:
    return {
        "metric": p.metric,
        "a": None if p.a is None else p.a.series.name,
        "b": None if p.b is None else p.b.series.name,
        "common_steps": p.common_steps,
        "only_a_steps": p.only_a_steps,
        "only_b_steps": p.only_b_steps,
        "mean_a": p.mean_a,
        "mean_b": p.mean_b,
        "ratio": p.ratio,
        "pearson_with_vllm_kl_a": None if p.a is None else p.a.pearson,
        "pearson_with_vllm_kl_b": None if p.b is None else p.b.pearson,
    }
