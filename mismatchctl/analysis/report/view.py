"""A report as sections (``analysis.sections``): what the terminal and the HTML page show.

One run (or ``--pool``): its headline, the distributions, the probability bins, first vs later
turns, the steps and its training curves. Several runs: nothing is pooled over unrelated runs:
a summary row per run, the bins and turns side by side per run, each run's steps; the HTML page
adds each run's own block (headline, distributions, tables) with a run selector; the terminal
keeps to the side-by-side tables. Then the hardware table and the extra ``--by`` splits.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mismatchctl.analysis import sections as sec
from mismatchctl.analysis.curves_view import curves_block
from mismatchctl.analysis.report import figure_data as FD
from mismatchctl.analysis.report.report import Group, Report
from mismatchctl.analysis.routing.view import routing_sections
from mismatchctl.analysis.worst.view import worst_block
from mismatchctl.display import number
from mismatchctl.engines import plan as K
from mismatchctl.stats import BAND_NAMES, EXP_MAX, band, bin_label
from mismatchctl.stats import registry as M
from mismatchctl.stats.entropy_bins import entropy_label
from mismatchctl.stats.positions import order_label, position_label

HOT_FACTOR, HOT_SHARE = 2.0, 0.05  # a bin is hot when its kl share > 2x its token share and 5%
TURN_ROWS = (
    M.TOKENS,
    M.SEQUENCES,
    M.VLLM_KL,
    M.KL_K1,
    M.ABS_LOG_RATIO_MEAN,
    M.PROB_ABS_DIFF_MEAN,
    M.PROB_PEARSON,
    M.ROLLOUT_LOG_PPL,
    M.TRAINER_LOG_PPL,
    M.LOG_PPL_ABS_DIFF,
    M.LOG_PPL_PEARSON,
    M.TRAINER_PPL,
)
# Splits with tables of their own; every other split gets a generic table.
FIXED: list[K.Split] = [*K.default_splits(True), (K.TURN_KIND,), (K.BIN,)]
POOLED = "all runs"


@dataclass
class RunVerdict:
    """What another result says of one run of the report (a diagnosis, composed by
    ``analysis/diagnosed_report.py``): its verdict and top finding for the run's summary row,
    and its sections as one block, folded under the run's block."""

    verdict: str
    finding: str
    block: sec.Block


def report_sections(
    report: Report, pool: bool = False, verdicts: Mapping[str, RunVerdict] | None = None
) -> list[sec.Section]:
    """The report's sections; ``verdicts`` (per run) add a verdict to each run's summary row
    and their block, collapsed, to the run's block."""
    runs = report.selection.names
    verdicts = verdicts or {}
    out: list[sec.Section] = []
    if len(runs) > 1 and not pool:
        out += [summary_table(report, verdicts), bins_by_run(report), turns_by_run(report)]
        out += [steps_by_run(report), steps_figure(report, K.RUN)]
        out += [run_block(report, run, verdicts.get(run), media="html") for run in runs]
    else:
        name = runs[0] if len(runs) == 1 else POOLED
        if verdicts or len(runs) > 1:
            out.append(summary_table(report, verdicts))
        out.append(run_block(report, name, verdicts.get(name), steps=False))
        out.append(steps_figure(report, K.RUN))
        out += [s for run in runs for s in _steps(report, run)]
    out += curves_sections(report)
    out += worst_block(report.worst)
    if report.hardware is not None:
        out += [hardware_table(report), steps_figure(report, K.GPU)]
    # one run's --by step is its per-step table, shown above
    fixed = [*FIXED, (K.STEP,)] if len(runs) == 1 else FIXED
    out += [split_table(report, split) for split in report.splits if split not in fixed]
    out += routing_sections(report.routing, report.routing_layers, routing_splits(report))
    if report.notes:
        out.append(sec.Lines("notes", "Notes", [sec.Line(n, "note") for n in report.notes]))
    return out


# --- summary --------------------------------------------------------------------------------


def summary_table(report: Report, verdicts: Mapping[str, RunVerdict]) -> sec.Table:
    """One row per run: its size, vllm_kl with its band, and (with a verdict: a diagnosis) the
    verdict and the top finding."""
    later_first = _later_first(report)
    columns = [
        sec.Column("run", "run", sec.Kind.LABEL), sec.Column.of(M.TOKENS), sec.Column.of(M.SEQUENCES),
        sec.Column("steps", "steps", sec.Kind.COUNT), sec.Column.of(M.VLLM_KL, band_key="band"),
        sec.Column("band", "band", sec.Kind.BAND, band_key="band"), sec.Column.of(M.KL_K1),
        sec.Column.of(M.ABS_LOG_RATIO_MEAN), sec.Column.of(M.PROB_PEARSON),
        sec.Column("later_first", "later/first", sec.Kind.RATIO),
    ]  # fmt: skip
    if verdicts:
        columns += [
            sec.Column("verdict", "verdict", sec.Kind.VERDICT),
            sec.Column("finding", "top finding", sec.Kind.TEXT),
        ]
    rows = []
    for run in report.selection.names:
        g = report.run(run)
        if g is None:
            continue
        m = g.metrics
        row = {
            "run": run,
            M.TOKENS: m[M.TOKENS],
            M.SEQUENCES: m[M.SEQUENCES],
            "steps": len(_run_steps(report, run)),
            M.VLLM_KL: m[M.VLLM_KL],
            "band": band(m[M.VLLM_KL]),
            M.KL_K1: m[M.KL_K1],
            M.ABS_LOG_RATIO_MEAN: m[M.ABS_LOG_RATIO_MEAN],
            M.PROB_PEARSON: m[M.PROB_PEARSON],
            "later_first": later_first.get(run),
        }
        v = verdicts.get(run)
        if v is not None:
            row["verdict"], row["finding"] = v.verdict, v.finding
        rows.append(row)
    title = "Runs" if len(rows) > 1 else "Run"
    return sec.Table("summary", title, columns, rows)


def _later_first(report: Report) -> dict[str, float | None]:
    kinds: dict[str, dict[str, Any]] = {}
    for g in report.split(K.RUN, K.TURN_KIND):
        kinds.setdefault(g.by[K.RUN], {})[g.by[K.TURN_KIND]] = g.metrics.get(M.VLLM_KL)
    return {run: ratio(k.get("first"), k.get("later")) for run, k in kinds.items()}


def ratio(a: float | None, b: float | None) -> float | None:
    """b / a when both are finite numbers and a is not 0."""
    if a is None or b is None or a == 0 or not math.isfinite(a) or not math.isfinite(b):
        return None
    return b / a


def _run_steps(report: Report, run: str) -> list[Any]:
    return [g.by[K.STEP] for g in report.split(K.RUN, K.STEP) if g.by[K.RUN] == run]


# --- one run (or the pooled selection) ------------------------------------------------------


def run_block(
    report: Report,
    run: str,
    verdict: RunVerdict | None = None,
    media: str = "all",
    steps: bool = True,
) -> sec.Block:
    pooled = run == POOLED
    whole = report.whole() if pooled else report.run(run)
    assert whole is not None
    sections: list[sec.Section] = [headline(report, run, whole)]
    if verdict is not None:
        sections.append(verdict.block)
    sections += distribution_figures(report, run)
    sections += [bins_table(report, run), turns_table(report, run)]
    if steps and not pooled:
        sections += _steps(report, run)
    title = f"Run {run}" if not pooled else f"{len(report.selection.names)} runs, pooled"
    if report.selection.steps is not None:
        title += f", steps {report.selection.steps}"
    if media == "html":  # one of several runs: folded on the page, a run selector opens it
        m = whole.metrics
        summary = f"vllm_kl {number(m[M.VLLM_KL])} ({band(m[M.VLLM_KL]) or '-'})"
        if verdict is not None:
            summary += f"; {verdict.verdict}: {verdict.finding}"
        return sec.Block(
            sec.slug("run", run), title, sections, collapsed=True, summary=summary, media=media
        )
    return sec.Block(sec.slug("run", run), title, sections, media=media)


def headline(report: Report, run: str, whole: Group) -> sec.Facts:
    """The key numbers of one run (or of the pooled selection)."""
    m = whole.metrics
    pooled = run == POOLED
    names = report.selection.names if pooled else [run]
    infos = [r for r in report.selection.runs if r.name in names]
    facts: list[sec.Fact] = []
    if not pooled and infos and infos[0].tags:
        tags = " ".join(f"{k}={v}" for k, v in infos[0].tags.items())
        facts.append(sec.Fact("tags", tags, sec.Kind.LABEL))
    kinds = {
        g.by[K.TURN_KIND]: g.metrics
        for g in (
            report.split(K.TURN_KIND)
            if pooled
            else [g for g in report.split(K.RUN, K.TURN_KIND) if g.by[K.RUN] == run]
        )
    }
    steps = sorted({s for name in names for s in _run_steps(report, name)})
    vband = band(m[M.VLLM_KL])
    facts += [
        sec.Fact(M.TOKENS.header, m[M.TOKENS], sec.Kind.COUNT),
        sec.Fact(M.SEQUENCES.description.split(" with")[0], m[M.SEQUENCES], sec.Kind.COUNT),
        sec.Fact("steps", len(steps), sec.Kind.COUNT),
        sec.Fact(M.VLLM_KL, m[M.VLLM_KL], sec.Kind.VALUE, vband, overflow_text(m)),
        *tail_facts(report, m),
        sec.Fact(M.KL_K1, m[M.KL_K1]),
        sec.Fact(M.ABS_LOG_RATIO_MEAN, m[M.ABS_LOG_RATIO_MEAN]),
        sec.Fact(M.PROB_PEARSON, m[M.PROB_PEARSON], sec.Kind.CORR),
        sec.Fact(
            f"{M.LOG_PPL_PEARSON} first turn",
            kinds.get("first", {}).get(M.LOG_PPL_PEARSON),
            sec.Kind.CORR,
        ),
        sec.Fact(
            f"{M.LOG_PPL_PEARSON} later turns",
            kinds.get("later", {}).get(M.LOG_PPL_PEARSON),
            sec.Kind.CORR,
        ),
    ]
    empty = sum(report.empty_by_run.get(n, 0) for n in names)
    dropped = sum(r.dropped_sequences for r in infos)
    facts.append(
        sec.Fact(
            "excluded", f"{empty:,} empty sequences, {dropped:,} dropped at ingest", sec.Kind.TEXT
        )
    )
    facts.append(sec.Fact("aggregation", report.aggregation, sec.Kind.TEXT))
    if report.selection.steps is not None:
        facts.append(sec.Fact("step range", str(report.selection.steps), sec.Kind.TEXT))
    return sec.Facts(sec.slug("headline", run), "", facts)  # under its run's title


def tail_facts(report: Report, m: Mapping[str, Any]) -> list[sec.Fact]:
    """Beside K3, its clamped value and the share of extreme tokens (the tail-robust views a
    framework's chart may show instead), labelled with their thresholds."""
    tails = report.binning.tails
    extreme = tails.extreme_metric
    return [
        sec.Fact(f"{M.VLLM_KL_CLAMPED.header} (±{tails.clamp:g})", m.get(M.VLLM_KL_CLAMPED)),
        sec.Fact(f"{extreme.header} (|r|>ln{tails.tau:g})", m.get(extreme), sec.Kind.SHARE),
    ]


def overflow_text(metrics: Mapping[str, Any]) -> str | None:
    """Why a group's vllm_kl is not a number, or None when it is: the tokens whose exp(r) is
    beyond float64, or (without one) a sum beyond it."""
    kl = metrics.get(M.VLLM_KL)
    if kl is None or math.isfinite(kl):
        return None
    n = metrics.get(M.OVERFLOW_TOKENS) or 0
    if n:
        return (
            f"overflow: exp(r) is beyond float64 (r > {EXP_MAX:.2f}) in {n:,} "
            f"token{'s' if n != 1 else ''}; {M.VLLM_KL}, {M.RATIO_DEV_1E4} and "
            f"{M.VLLM_KL_SEQ_MEAN} are not numbers (null in JSON)"
        )
    return (
        f"overflow: the sum of exp(r) is beyond float64; {M.VLLM_KL} is not a number (null in JSON)"
    )


def _bin_groups(report: Report, run: str) -> list[Group]:
    if run == POOLED:
        return report.split(K.BIN)
    return [g for g in report.split(K.RUN, K.BIN) if g.by[K.RUN] == run]


def bins_table(report: Report, run: str) -> sec.Table:
    rows = []
    for g in _bin_groups(report, run):
        m = g.metrics
        kl_share, token_share = m.get(M.KL_SHARE) or 0.0, m.get(M.TOKEN_SHARE) or 0.0
        rows.append(
            {
                "bin": bin_label(report.bin_edges, int(g.by[K.BIN])),
                **{k: m.get(k) for k in BIN_COLUMNS},
                "hot": kl_share > HOT_FACTOR * token_share and kl_share > HOT_SHARE,
            }
        )
    columns = [sec.Column("bin", "p_infer bin", sec.Kind.LABEL)]
    columns += [sec.Column.of(k, hot_key="hot" if k == M.KL_SHARE else None) for k in BIN_COLUMNS]
    return sec.Table(
        sec.slug("bins", run),
        "By inference probability p_infer = exp(rollout logprob)",
        columns,
        rows,
        note="kl share in bold red: a bin holding more than twice its share of tokens in KL "
        "(and over 5%).",
    )


BIN_COLUMNS = (
    M.TOKENS,
    M.TOKEN_SHARE,
    M.VLLM_KL,
    M.KL_SHARE,
    M.PROB_DIFF_MEAN,
    M.LOG_RATIO_MEAN,
    M.LOG_RATIO_P01,
    M.LOG_RATIO_P50,
    M.LOG_RATIO_P99,
)


def turns_table(report: Report, run: str) -> sec.Table:
    groups = (
        report.split(K.TURN_KIND)
        if run == POOLED
        else [g for g in report.split(K.RUN, K.TURN_KIND) if g.by[K.RUN] == run]
    )
    kinds = {g.by[K.TURN_KIND]: g.metrics for g in groups}
    first, later = kinds.get("first", {}), kinds.get("later", {})
    rows = []
    for name in TURN_ROWS:
        a, b = first.get(name), later.get(name)
        rows.append(
            {
                "metric": "segments" if name == M.SEQUENCES else name,
                "first": a,
                "later": b,
                "ratio": ratio(a, b),
                "kind": sec.Kind.of(name.fmt),  # the registry's format (a correlation: 6 digits)
            }
        )
    columns = [
        sec.Column("metric", "metric", sec.Kind.LABEL),
        sec.Column("first", "first", sec.Kind.VALUE, kind_key="kind"),
        sec.Column("later", "later", sec.Kind.VALUE, kind_key="kind"),
        sec.Column("ratio", "later / first", sec.Kind.RATIO),
    ]  # fmt: skip
    return sec.Table(
        sec.slug("turns", run), "First turn vs turns after a tool response", columns, rows
    )


# --- several runs side by side ----------------------------------------------------------------


def bins_by_run(report: Report) -> sec.Table:
    """vllm_kl of each probability bin, one column per run (each run's kl shares are in its own
    bins table)."""
    runs = report.selection.names
    per: dict[int, dict[str, Any]] = {}
    for g in report.split(K.RUN, K.BIN):
        k, run = int(g.by[K.BIN]), g.by[K.RUN]
        row = per.setdefault(k, {"bin": bin_label(report.bin_edges, k)})
        row[run] = g.metrics.get(M.VLLM_KL)
    columns = [sec.Column("bin", "p_infer bin", sec.Kind.LABEL)]
    columns += [sec.Column(run, run, sec.Kind.VALUE, M.VLLM_KL) for run in runs]
    return sec.Table(
        "bins-by-run",
        "vllm_kl by inference probability p_infer, per run",
        columns,
        [per[k] for k in sorted(per)],
    )


def turns_by_run(report: Report) -> sec.Table:
    """First turn vs turns after a tool response, one row per run."""
    kinds: dict[str, dict[str, Any]] = {}
    for g in report.split(K.RUN, K.TURN_KIND):
        kinds.setdefault(g.by[K.RUN], {})[g.by[K.TURN_KIND]] = g.metrics
    rows = []
    for run in report.selection.names:
        first, later = kinds.get(run, {}).get("first", {}), kinds.get(run, {}).get("later", {})
        total = (first.get(M.TOKENS) or 0) + (later.get(M.TOKENS) or 0)
        rows.append(
            {
                "run": run,
                "first_kl": first.get(M.VLLM_KL),
                "later_kl": later.get(M.VLLM_KL),
                "ratio": ratio(first.get(M.VLLM_KL), later.get(M.VLLM_KL)),
                "first_rho": first.get(M.LOG_PPL_PEARSON),
                "later_rho": later.get(M.LOG_PPL_PEARSON),
                "later_share": (later.get(M.TOKENS) or 0) / total if total else None,
            }
        )
    columns = [
        sec.Column("run", "run", sec.Kind.LABEL),
        sec.Column("first_kl", f"first {M.VLLM_KL}", sec.Kind.VALUE, M.VLLM_KL),
        sec.Column("later_kl", f"later {M.VLLM_KL}", sec.Kind.VALUE, M.VLLM_KL),
        sec.Column("ratio", "later / first", sec.Kind.RATIO),
        sec.Column("first_rho", "first log-ppl ρ", sec.Kind.CORR, M.LOG_PPL_PEARSON),
        sec.Column("later_rho", "later log-ppl ρ", sec.Kind.CORR, M.LOG_PPL_PEARSON),
        sec.Column("later_share", "later token share", sec.Kind.SHARE),
    ]  # fmt: skip
    return sec.Table(
        "turns-by-run", "First turn vs turns after a tool response, per run", columns, rows
    )


# --- steps --------------------------------------------------------------------------------------


def steps_by_run(report: Report) -> sec.Table:
    """Per-batch vllm_kl, one column per run, coloured by band; with many steps, the steps where
    some run has its largest values (every step is in the figure and the JSON)."""
    runs = report.selection.names
    per: dict[Any, dict[str, Any]] = {}
    for g in report.split(K.RUN, K.STEP):
        row = per.setdefault(g.by[K.STEP], {"step": g.by[K.STEP]})
        row[g.by[K.RUN]] = g.metrics.get(M.VLLM_KL)
        row[f"{g.by[K.RUN]}\0band"] = g.band
    steps = sorted(per, key=lambda s: (s is None, s))
    note = None
    if len(steps) > MAX_STEP_ROWS:
        top = sorted(steps, key=lambda s: -max(_sortable(per[s].get(r)) for r in runs))
        note = (
            f"{MAX_STEP_ROWS} of {len(steps)} steps: those with the largest vllm_kl of any run; "
            "every step in --json and the HTML figure"
        )
        steps = sorted(top[:MAX_STEP_ROWS])
    columns = [sec.Column("step", "step", sec.Kind.ID)]
    columns += [sec.Column(r, r, sec.Kind.VALUE, M.VLLM_KL, band_key=f"{r}\0band") for r in runs]
    return sec.Table("steps-by-run", "vllm_kl per step, per run", columns, [per[s] for s in steps],
                 note=note)  # fmt: skip


MAX_STEP_ROWS = 30

STEP_COLUMNS = (M.TOKENS, M.VLLM_KL, "band", M.KL_K1, M.ABS_LOG_RATIO_MEAN, M.TRAINER_PPL)


def _steps(report: Report, run: str) -> list[sec.Section]:
    groups = [g for g in report.split(K.RUN, K.STEP) if g.by[K.RUN] == run]
    if not groups:
        return []
    rows = [
        {
            "step": g.by[K.STEP],
            **{k: g.metrics.get(k) for k in STEP_COLUMNS if k != "band"},
            "band": g.band,
        }
        for g in groups
    ]
    columns = [sec.Column("step", "step", sec.Kind.ID)]
    for k in STEP_COLUMNS:
        if k == "band":
            columns.append(sec.Column("band", "band", sec.Kind.BAND, band_key="band"))
        else:
            columns.append(sec.Column.of(M.by_key(k), band_key="band" if k == M.VLLM_KL else None))
    worst = sorted(range(len(rows)), key=lambda i: -_sortable(rows[i][M.VLLM_KL]))
    table = sec.Table(sec.slug("steps", run), f"Per step: {run}", columns, rows)
    every = (K.STEP,) in report.splits
    return [
        sec.StepSeries(sec.slug("steps", run), f"Per step: {run}", table, M.VLLM_KL, worst, every)
    ]


def _sortable(x: float | None) -> float:
    return -math.inf if x is None or math.isnan(x) else x


def curves_sections(report: Report) -> list[sec.Section]:
    """Each run's training curves (with training logs); one line naming the runs without."""
    out: list[sec.Section] = [curves_block(c) for c in report.curves.values() if c.has_logs]
    bare = [run for run, c in report.curves.items() if not c.has_logs]
    if bare:
        text = (
            "Training curves: no training logs attached to " + ", ".join(bare) + " (add them "
            "with `mismatchctl ingest-metrics FILE --run RUN`; their dump-derived per-step "
            "curves are in --json)"
        )
        out.append(sec.Lines("curves-none", None, [sec.Line(text, "dim")]))
    return out


# --- hardware and generic splits --------------------------------------------------------------


def hardware_table(report: Report) -> sec.Table:
    rows = []
    for h in report.hardware or []:
        shares = "/".join(_pct(h.step_summary.get(M.BAND_SHARE[b])) for b in BAND_NAMES)
        rows.append(
            {
                "gpu": h.gpu,
                "runs": ", ".join(h.runs),
                M.BATCHES: h.batches,
                M.TOKENS: h.tokens,
                M.VLLM_KL: h.vllm_kl,
                "band": h.band,
                **{k: h.step_summary.get(k) for k in STEP_STATS},
                "shares": shares,
                M.LATER_FIRST_VLLM_KL_RATIO: h.later_first_vllm_kl_ratio,
                M.LOW_PROB_TOKEN_SHARE: h.low_prob_token_share,
            }
        )
    columns = [
        sec.Column("gpu", "gpu", sec.Kind.LABEL),
        sec.Column("runs", "runs", sec.Kind.TEXT),
        sec.Column.of(M.BATCHES),
        sec.Column.of(M.TOKENS),
        sec.Column.of(M.VLLM_KL, band_key="band"),
        *[sec.Column.of(k) for k in STEP_STATS],
        sec.Column("shares", "/".join(BAND_NAMES), sec.Kind.LABEL),
        sec.Column.of(M.LATER_FIRST_VLLM_KL_RATIO),
        sec.Column.of(M.LOW_PROB_TOKEN_SHARE),
    ]
    return sec.Table(
        "hardware",
        "By hardware (per-batch vllm_kl over each gpu's batches; bands: share of batches)",
        columns,
        rows,
        keys=2,
    )


STEP_STATS = (M.VLLM_KL_STEP_MEDIAN, M.VLLM_KL_STEP_P90, M.VLLM_KL_STEP_MAX)


def _pct(x: float | None) -> str:
    """Shares joined into one cell (the four bands): a percentage, or '-'."""
    return "-" if x is None else f"{100 * x:.1f}%"


SPLIT_COLUMNS = (
    M.TOKENS,
    M.VLLM_KL,
    M.KL_K1,
    M.ABS_LOG_RATIO_MEAN,
    M.PROB_PEARSON,
    M.ROLLOUT_PROB_MEAN,
    M.LOG_PPL_PEARSON,
)


def key_label(report: Report, key: str, value: Any) -> Any:
    """A group's value of a key as the tables show it: a bin's probability range (of either
    side), an entropy bin's range (``[0.1, 0.5)``), a position
    bin's range (``[1024, 2048)``), an order block's sequence range; other values as they are."""
    if value is None:
        return value
    if key in (K.BIN, K.TRAINER_PROB):
        return bin_label(report.bin_edges, int(value))
    if key == K.ENTROPY:
        return entropy_label(value)
    if key in K.POSITION_KEYS:
        return position_label(report.binning.positions, int(value))
    if key == K.DUMP_ORDER:
        return order_label(int(value), report.binning.order_block)
    return value


def routing_splits(report: Report) -> list[tuple[K.Split, list[dict[str, Any]]]]:
    """Per `--by` split of runs with MoE routes, its groups with routes: labels and metrics."""
    out = []
    for split in report.routing_splits:
        rows = [
            {**{k: key_label(report, k, v) for k, v in g.by.items()}, **g.routing}
            for g in report.groups[split]
            if g.routing is not None
        ]
        out.append((split, rows))
    return out


def split_table(report: Report, split: K.Split) -> sec.Table:
    rows = []
    for g in report.groups[split]:
        row: dict[str, Any] = {key: key_label(report, key, v) for key, v in g.by.items()}
        row.update({k: g.metrics.get(k) for k in SPLIT_COLUMNS})
        row["band"] = band(g.metrics.get(M.VLLM_KL))
        rows.append(row)
    columns = [sec.Column(key, key, sec.Kind.LABEL) for key in split]
    columns += [
        sec.Column.of(M.by_key(k), band_key="band" if k == M.VLLM_KL else None)
        for k in SPLIT_COLUMNS
    ]
    return sec.Table(
        sec.slug("split", *split), "By " + " x ".join(split), columns, rows, keys=len(split)
    )


# --- figures --------------------------------------------------------------------------------------


HOW_MISMATCH = (
    "Each cell counts tokens by their inference probability p_infer (x, log scale; smaller "
    "than 1e-12 in the first column) and their log ratio r = trainer − rollout logprob (y, linear "
    "within ±0.001 and logarithmic beyond). Red: the mean of r in each probability bin of the "
    "report, shaded: its p01–p99 range; hover the dots for the bin's numbers. A band that widens "
    "to the left means the rare tokens carry the mismatch."
)
HOW_PROBS = (
    "Each cell counts tokens by p_infer (x) and p_train (y), 100 bins per side, colour on a "
    "log scale. Tokens on the dashed diagonal agree; mass away from it is the mismatch in "
    "probability space."
)
HOW_LOG_PPL = (
    "One point per segment (a sequence's tokens in its first turn, or in its later turns after "
    "tool responses): x its rollout log-ppl, y its trainer log-ppl, both log scale. Grey: the "
    "density of all segments; points: a deterministic sample (up to 2,000 per turn kind, the "
    "same for the same data). Above the diagonal the trainer is less confident than the "
    "inference engine; the legend gives each kind's Pearson r over all its segments."
)
HOW_STEPS = (
    "vllm_kl of each batch (training step), log scale, over the severity bands: low ≤ 1e-3, "
    "medium ≤ 2e-2, high ≤ 1e-1, severe above. Batches with vllm_kl = 0 are not drawn."
)


def distribution_figures(report: Report, run: str) -> list[sec.Section]:
    """The three distributions of one run (or of every run pooled), when figure data was
    computed (the HTML writer asks for it)."""
    if report.figures is None:
        return []
    data = FD.pooled(report.figures) if run == POOLED else report.figures.get(run)
    if data is None:
        return []
    whole = report.whole() if run == POOLED else report.run(run)
    kinds = {
        g.by[K.TURN_KIND]: g.metrics
        for g in (
            report.split(K.TURN_KIND)
            if run == POOLED
            else [g for g in report.split(K.RUN, K.TURN_KIND) if g.by[K.RUN] == run]
        )
    }
    bins = [
        FD.BinBox(
            label=bin_label(report.bin_edges, int(g.by[K.BIN])),
            lo=float(report.bin_edges[int(g.by[K.BIN])]),
            hi=float(report.bin_edges[int(g.by[K.BIN]) + 1]),
            metrics=dict(g.metrics),
        )
        for g in _bin_groups(report, run)
    ]
    pearson = whole.metrics.get(M.PROB_PEARSON) if whole else None
    return [
        sec.Figure(sec.slug("fig-mismatch", run), "Mismatch vs inference probability", "mismatch",
               FD.MismatchPlot(data.mismatch, bins), HOW_MISMATCH),
        sec.Figure(sec.slug("fig-probs", run), "Token probabilities: p_infer vs p_train", "probs",
               FD.ProbsPlot(data.probs, pearson), HOW_PROBS),
        sec.Figure(sec.slug("fig-log-ppl", run), "Log-perplexity of segments: first vs later turns",
               "log_ppl", FD.LogPplPlot(data, {k: dict(v) for k, v in kinds.items()}),
               HOW_LOG_PPL),
    ]  # fmt: skip


def steps_figure(report: Report, key: str) -> sec.Figure:
    """Per-batch vllm_kl of each run (or gpu), for the HTML page."""
    lines: dict[Any, FD.StepLine] = {}
    for g in report.split(key, K.STEP):
        line = lines.setdefault(g.by[key], FD.StepLine(g.by[key], [], [], []))
        line.steps.append(g.by[K.STEP])
        line.values.append(g.metrics.get(M.VLLM_KL))
        line.bands.append(g.band)
    title = f"vllm_kl per step, per {key} (figure)"
    return sec.Figure(
        f"fig-steps-{key}", title, "steps", FD.StepsPlot(key, list(lines.values())), HOW_STEPS
    )
