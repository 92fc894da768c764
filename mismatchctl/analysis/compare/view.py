"""A comparison as sections (configuration, headline with intervals and verdicts, where the gap
lives, bins, turn kinds, gpus, steps, training curves) and as JSON."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from mismatchctl.analysis import sections as sec
from mismatchctl.analysis.compare.curves import CurvePair
from mismatchctl.analysis.compare.same import SHOWN, Identical
from mismatchctl.analysis.curves_view import curve_pairs_table, has_logs
from mismatchctl.analysis.pairing.view import paired_sections
from mismatchctl.analysis.report import figure_data as FD
from mismatchctl.analysis.report.view import POOLED, distribution_figures, key_label, routing_splits
from mismatchctl.analysis.routing.view import compare_routing, compare_routing_splits
from mismatchctl.curves.series import KL
from mismatchctl.display import number
from mismatchctl.engines import plan as K
from mismatchctl.stats import bin_label
from mismatchctl.stats import registry as M

if TYPE_CHECKING:
    from mismatchctl.analysis.compare.compare import Comparison

MAX_STEP_ROWS = 30  # beyond this, the first and last 15 steps (all in the JSON and the figure)
MAX_CURVE_FIGURES = 12
# A bin holding less than this share of a side's tokens has a vllm_kl of a handful of tokens:
# the bin chart draws it hatched and faint, not as a bar to read.
SPARSE_SHARE = 0.001
SAME_LOGPROBS = (
    "Both sides hold the same sequences with the same logprobs (per sequence the same token "
    "count and sums of both logprobs, K3 and |r|): what differs is their MoE routing (Routing, "
    "below)."
)


def comparison_sections(c: Comparison) -> list[sec.Section]:
    a, b = c.a.selection.label, c.b.selection.label
    out: list[sec.Section] = [
        sec.Facts("compare", f"Compare  A: {a}   B: {b}", []),
        config_table(c),
        headline_table(c),
        *([sec.Lines("same-logprobs", None, [sec.Line(SAME_LOGPROBS, "bold")])]
          if c.same_logprobs else []),
        sec.Lines("verdicts", "Verdict (bootstrap over whole sequences)", [
            sec.Line(r.verdict, "bold" if r.significant else "") for r in c.headline if r.verdict
        ]),
        *paired_sections(c.pairing, a, b),
        sec.Figure("fig-steps", "Per-step vllm_kl, both sides", "compare_steps", c,
               "vllm_kl of each batch (step) of side A and side B on a log axis, over the "
               "severity bands; steps are aligned on their numbers."),
        gap_table(c),
        sec.Figure("fig-bins", "vllm_kl by inference probability, both sides", "compare_bins",
               bins_plot(c), "vllm_kl of each p_infer bin for both sides (log scale). A bin "
               f"holding under {SPARSE_SHARE:.1%} of a side's tokens is drawn hatched and faint: "
               "its vllm_kl rests on a handful of tokens."),
        bins_table(c),
        keyed_table(c.turn_kinds, K.TURN_KIND, "By turn kind"),
    ]  # fmt: skip
    if len(c.gpus) > 1 or any(r.a_tokens == 0 or r.b_tokens == 0 for r in c.gpus):
        out.append(keyed_table(c.gpus, K.GPU, "By gpu"))
    out.append(steps_table(c))
    out += [_split_table(c, split, rows) for split, rows in c.splits.items()]
    for side, rep in (("A", c.a), ("B", c.b)):
        figs = [f for f in distribution_figures(rep, _side_run(rep)) if f.kind == "log_ppl"]
        if figs:
            title = f"{side}: {rep.selection.label}: log-perplexity of segments"
            out.append(sec.Block(f"scatter-{side.lower()}", title, figs, media="html"))
    out.append(curves_section(c))
    out += compare_routing(c.a.routing, c.b.routing)
    by_a, by_b = dict(routing_splits(c.a)), dict(routing_splits(c.b))
    out += compare_routing_splits([(s, by_a.get(s, []), by_b.get(s, [])) for s in c.splits])
    out += (
        [sec.Lines("notes", None, [sec.Line(f"note: {n}", "note") for n in c.notes])]
        if c.notes
        else []
    )
    return out


def identical_sections(same: Identical) -> list[sec.Section]:
    """Two sides that hold the same data: said once, with what both hold."""
    a, b = same.a.label, same.b.label
    facts = [sec.Fact(m.header, same.metrics[m], sec.Kind.of(m.fmt)) for m in SHOWN]
    said = [
        sec.Line(f"identical: no difference. `{a}` and `{b}` hold the same data", "bold"),
        sec.Line(f"{same.basis}.", "dim"),
    ]
    return [
        sec.Facts("compare", f"Compare  A: {a}   B: {b}", []),
        sec.Lines("identical", None, said),
        sec.Facts("identical-both", "Both sides", facts),
    ]


def _side_run(rep: Any) -> str:
    """Whose distributions a side shows: its run, or its runs pooled."""
    names = rep.selection.names
    return names[0] if len(names) == 1 else POOLED


def config_table(c: Comparison) -> sec.Section:
    if not c.config:
        return sec.Lines(
            "config", None, [sec.Line("Configuration: no tag differs between the two sides.")]
        )
    columns = [
        sec.Column("key", "tag", sec.Kind.LABEL), sec.Column("a", "A", sec.Kind.LABEL),
        sec.Column("b", "B", sec.Kind.LABEL),
    ]  # fmt: skip
    return sec.Table("config", "Configuration that differs", columns, [asdict(r) for r in c.config])


def ci_text(low: float | None, high: float | None, of: str | None) -> str | None:
    if low is None or high is None:
        return None
    return f"{number(low, 3)} .. {number(high, 3)} ({of})"


def headline_table(c: Comparison) -> sec.Table:
    rows = [
        {**r.to_dict(), "ci": ci_text(r.ci_low, r.ci_high, r.ci_of), "bold": bool(r.significant),
         "kind": sec.Kind.of(M.by_key(r.metric).fmt)}  # each side as `report` writes the metric
        for r in c.headline
    ]  # fmt: skip
    columns = [
        sec.Column("metric", "metric", sec.Kind.LABEL),
        sec.Column("a", "A", sec.Kind.VALUE, kind_key="kind"),
        sec.Column("b", "B", sec.Kind.VALUE, kind_key="kind"),
        sec.Column("difference", "B - A", sec.Kind.VALUE),
        sec.Column("ratio", "B / A", sec.Kind.RATIO), sec.Column("ci", "95% CI", sec.Kind.TEXT),
    ]  # fmt: skip
    return sec.Table("headline", "Headline", columns, rows, bold_key="bold")


def gap_table(c: Comparison) -> sec.Table:
    rows = [
        {"turn_kind": g.turn_kind, "bin": bin_label(c.a.bin_edges, int(g.bin)),
         "contribution": g.contribution, "share_of_gap": g.share_of_gap}
        for g in c.gap
    ]  # fmt: skip
    columns = [
        sec.Column("turn_kind", "turn kind", sec.Kind.LABEL),
        sec.Column("bin", "p_infer bin", sec.Kind.LABEL),
        sec.Column("contribution", "contribution to B - A", sec.Kind.VALUE),
        sec.Column("share_of_gap", "share of gap", sec.Kind.SHARE),
    ]  # fmt: skip
    return sec.Table(
        "gap",
        "Where the vllm_kl gap lives (turn kind x p_infer bin)",
        columns,
        rows,
        keys=2,
        note="Each cell's K3 sum per token of its side, B minus A: the contributions add up to "
        "vllm_kl(B) - vllm_kl(A).",
    )


def bins_table(c: Comparison) -> sec.Table:
    rows = [{**asdict(r), "bin": bin_label(c.a.bin_edges, int(r.bin))} for r in c.bins]
    columns = [
        sec.Column("bin", "p_infer bin", sec.Kind.LABEL),
        *_sides(M.TOKEN_SHARE),
        *_sides(M.VLLM_KL),
        sec.Column("vllm_kl_ratio", "B / A", sec.Kind.RATIO),
        *_sides(M.KL_SHARE),
    ]
    return sec.Table("bins", "By inference probability", columns, rows)


def _sides(metric: M.Metric) -> list[sec.Column]:
    """Side A's and side B's column of one metric (row keys ``a_<name>``, ``b_<name>``)."""
    return [sec.Column.of(metric, f"{s}_{metric}", f"{s.upper()} {metric.header}") for s in "ab"]


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


def keyed_table(rows: list[Any], key: str, title: str) -> sec.Table:
    columns = [
        sec.Column(key, key, sec.Kind.LABEL),
        *_sides(M.TOKENS),
        *_sides(M.VLLM_KL),
        sec.Column("vllm_kl_ratio", "B / A", sec.Kind.RATIO),
        *_sides(M.LOG_PPL_PEARSON),
    ]
    return sec.Table(f"by-{key}", title, columns, [r.to_dict() for r in rows])


def _split_table(c: Comparison, split: K.Split, rows: list[Any]) -> sec.Table:
    """A ``--by`` split side by side, its values labelled as in the report's tables."""
    name = " x ".join(split)
    table = keyed_table(rows, name, "By " + name)
    table.id = sec.slug("by", *split)
    for row in table.rows:
        values = row[name] if len(split) > 1 else [row[name]]
        labels = [key_label(c.a, k, v) for k, v in zip(split, values, strict=True)]
        row[name] = " / ".join(str(v) for v in labels) if len(split) > 1 else labels[0]
    return table


def steps_table(c: Comparison) -> sec.Table:
    rows = [asdict(r) for r in c.steps]
    half = MAX_STEP_ROWS // 2
    note = None
    if len(rows) > MAX_STEP_ROWS:
        note = f"first and last {half} of {len(rows)} steps (all in --json and the figure)"
        rows = rows[:half] + rows[-half:]
    columns = [
        sec.Column("step", "step", sec.Kind.ID),
        sec.Column("a_vllm_kl", "A vllm_kl", sec.Kind.VALUE, M.VLLM_KL),
        sec.Column("b_vllm_kl", "B vllm_kl", sec.Kind.VALUE, M.VLLM_KL),
        sec.Column("vllm_kl_ratio", "B / A", sec.Kind.RATIO),
    ]  # fmt: skip
    return sec.Table("steps", "Per step vllm_kl (aligned on step)", columns, rows, note=note)


def curves_section(c: Comparison) -> sec.Section:
    if not has_logs(c.curves):
        return sec.Lines("curves", None, [sec.Line(
            "Training curves: neither side has training logs attached (mismatchctl "
            "ingest-metrics FILE --run RUN); dump-derived curves are in --json and --html.", "dim")])  # fmt: skip
    figures: list[sec.Section] = []
    pairs = [p for p in c.curves if _drawn(p)]
    for i, p in enumerate(pairs[:MAX_CURVE_FIGURES]):
        figures.append(sec.Figure(f"fig-curve-{i}", p.metric, "compare_curve", p))
    lines = []
    if len(pairs) > MAX_CURVE_FIGURES:
        lines.append(sec.Line(f"{len(pairs) - MAX_CURVE_FIGURES} more paired curves in the table "
                          "and in --json.", "note"))  # fmt: skip
    sections: list[sec.Section] = [curve_pairs_table(c.curves), *figures]
    if lines:
        sections.append(sec.Lines("curve-notes", None, lines))
    return sec.Block("curves", "Training curves, both sides", sections, bare=True)


def _drawn(p: CurvePair) -> bool:
    """vllm_kl, and every curve a training log brings, when both sides have it."""
    if p.a is None or p.b is None:
        return False
    return p.metric == KL or not (p.a.series.from_dumps and p.b.series.from_dumps)
