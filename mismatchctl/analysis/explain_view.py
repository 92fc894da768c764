"""An explanation as sections: the selection and its baseline, the findings (each with its
sentence, shares, rate ratio and intervals), the dimensions that explain nothing, the mix / rate
split of the change, the lift table, and (HTML) a plot per top finding: the rate by the values of
its dimension, target against baseline."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mismatchctl.analysis import sections as sec
from mismatchctl.engines import plan as K
from mismatchctl.stats import registry as M
from mismatchctl.stats.length_scaling import (
    BIAS,
    MIN_BIN_SEQUENCES,
    MIN_SPAN,
    NOISE,
    RISING,
    LengthScaling,
)
from mismatchctl.stats.localize.result import (
    BASELINE,
    Finding,
    finding_label,
    uniform_sentence,
    unlocated_sentence,
)

SHARE = M.TOKEN_SHARE.key

if TYPE_CHECKING:
    from mismatchctl.analysis.explain import Explain
    from mismatchctl.analysis.explain_length import SideScaling

MAX_FIGURES = 3
MAX_LIFT = 12


def explain_sections(e: Explain) -> list[sec.Section]:
    x = e.explanation
    title = f"Explain: {e.target}" + (f" against {e.baseline}" if e.baseline else "")
    facts = [
        sec.Fact("target tokens", x.tokens, sec.Kind.COUNT),
        sec.Fact("target vllm_kl", x.vllm_kl),
    ]
    if x.mode == BASELINE:
        facts += [
            sec.Fact("baseline tokens", x.baseline_tokens, sec.Kind.COUNT),
            sec.Fact("baseline vllm_kl", x.baseline_vllm_kl),
            sec.Fact("rate ratio at the same token mix", x.rate_ratio, sec.Kind.RATIO,
                   remark=_ci(x.rate_ratio_ci)),
        ]  # fmt: skip
    else:
        facts.append(sec.Fact("reference", "the rest of the selection at the same token probabilities", sec.Kind.TEXT))  # fmt: skip
    facts.append(sec.Fact("cells tested", x.tested, sec.Kind.COUNT))
    out: list[sec.Section] = [sec.Facts("explain", title, facts), findings_table(e)]
    out += [sec.Figure(f"fig-finding-{i}", f"Finding {i + 1}: rate by {p.dim}", "explain_rates", p,
                     HOW_RATES) for i, p in enumerate(e.plots[:MAX_FIGURES])]  # fmt: skip
    uniform = [sec.Line(uniform_sentence(u, x.mode)) for u in x.uniform]
    if uniform:
        out.append(sec.Lines("uniform", "Dimensions", uniform))
    if x.decomposition:
        out.append(decomposition_table(e))
    if x.new:
        new = [sec.Line(f"{_where(c.where)}: {c.tokens:,} tokens the baseline does not have "
                      f"({c.token_share:.1%} of the target's)") for c in x.new]  # fmt: skip
        out.append(sec.Lines("new-cells", "Cells only the target has", new))
    if x.mode != BASELINE and x.lift:
        out.append(lift_table(e))
    if e.length:
        out.append(length_block(e.length))
    if x.notes:
        out.append(
            sec.Lines("explain-notes", None, [sec.Line(f"note: {n}", "note") for n in x.notes])
        )
    return out


HOW_RATES = (
    "Mean K3 (vllm_kl) of the tokens at each value of the finding's dimension: the target and, "
    "with a baseline, the baseline; the bars' width follows nothing, the hover gives the tokens. "
    "A dimension of more than 60 ordered values (the steps of a long run) is drawn in 60 groups "
    "of consecutive values, each at its tokens' mean K3."
)


def _ci(ci: tuple[float, float] | None) -> str | None:
    return None if ci is None else f"95% CI {ci[0]:.3g} to {ci[1]:.3g}"


def _where(where: dict[str, str]) -> str:
    return ", ".join(f"{k} {v}" for k, v in where.items())


def findings_table(e: Explain) -> sec.Section:
    """The findings; without any, where the excess lives all the same: the cells a few
    sequences hold (leads), or a whole-selection excess spread evenly (``located``)."""
    x = e.explanation
    if x.findings:
        return _cells_block("findings", "Findings", x.findings, e, [])
    what = sec.Line(unlocated_sentence(x, e.target))
    if x.leads:
        return _cells_block("leads", "Findings: held by a few sequences", x.leads, e, [what])
    return sec.Lines("findings", "Findings", [what])


def _cells_block(
    key: str, title: str, cells: list[Finding], e: Explain, head: list[sec.Line]
) -> sec.Section:
    x = e.explanation
    rows = []
    for i, f in enumerate(cells):
        boot = e.intervals[i].rate_ratio_ci if key == "findings" and i < len(e.intervals) else None
        rows.append({"rank": i + 1, "where": finding_label(f), SHARE: f.token_share,
                     "share": f.excess_share if x.mode == BASELINE else f.mass_share,
                     "ratio": f.rate_ratio, "ci": _pair(f.rate_ratio_ci), "boot": _pair(boot)})  # fmt: skip
    share = "excess share" if x.mode == BASELINE else "K3 share"
    columns = [
        sec.Column("rank", "#", sec.Kind.ID), sec.Column("where", "where", sec.Kind.TEXT),
        sec.Column(SHARE, "token share", sec.Kind.SHARE), sec.Column("share", share, sec.Kind.SHARE),
        sec.Column("ratio", "rate ratio", sec.Kind.RATIO), sec.Column("ci", "95% CI", sec.Kind.LABEL),
    ]  # fmt: skip
    if key == "findings":  # a lead's sentence says how few sequences hold it
        columns.append(sec.Column("boot", "bootstrap CI", sec.Kind.LABEL))
    sentences = sec.Lines(f"{key.removesuffix('s')}-sentences", None,
                        [sec.Line(f.sentence) for f in cells])  # fmt: skip
    table = sec.Table(key, title, columns, rows)
    parts = [sec.Lines(f"{key}-head", None, head)] if head else []
    return sec.Block(f"{key}-block", title, [*parts, table, sentences], bare=True)


def _pair(ci: tuple[float, float] | None) -> str | None:
    return None if ci is None else f"{ci[0]:.3g} .. {ci[1]:.3g}"


def decomposition_table(e: Explain) -> sec.Table:
    rows = [
        {"dim": d.dim, "total": d.total, "mix": d.mix, "rate": d.rate, "inter": d.interaction,
         "top": ", ".join(c[0] for c in d.cells[:3])}
        for d in e.explanation.decomposition
        if d.dim != K.RUN  # the sides themselves
    ]  # fmt: skip
    columns = [
        sec.Column("dim", "dimension", sec.Kind.LABEL), sec.Column("total", "change of vllm_kl"),
        sec.Column("mix", "mix"), sec.Column("rate", "rate"), sec.Column("inter", "interaction"),
        sec.Column("top", "largest cells", sec.Kind.TEXT),
    ]  # fmt: skip
    return sec.Table(
        "decomposition",
        "Why it changed: mix (the tokens moved between cells) vs rate (the cells got worse)",
        columns,
        rows,
        note="mix + rate + interaction = the change of vllm_kl, exactly, along each dimension; "
        "CI: delta method on the cube's sequence-clustered variances; bootstrap CI: resampling "
        "whole sequences (Poisson weights).",
    )


def lift_table(e: Explain) -> sec.Table:
    rows = [
        {"where": _where(c.where), "tokens": c.tokens, SHARE: c.token_share,
         "mass_share": c.mass_share, "lift": c.lift}
        for c in e.explanation.lift[:MAX_LIFT]
    ]  # fmt: skip
    columns = [
        sec.Column("where", "cell", sec.Kind.LABEL), sec.Column("tokens", "tokens", sec.Kind.COUNT),
        sec.Column(SHARE, "token share", sec.Kind.SHARE),
        sec.Column("mass_share", "K3 share", sec.Kind.SHARE), sec.Column("lift", "lift", sec.Kind.RATIO),
    ]  # fmt: skip
    return sec.Table(
        "lift",
        "Where the K3 mass is, against the token share (lift; raw, not mix-adjusted)",
        columns,
        rows,
    )


LENGTH_KINDS = {
    NOISE: "like sqrt(T): independent per-token noise (numerics)",
    BIAS: "like T: a per-token bias (semantics or another policy)",
    RISING: "faster than T: the per-token mismatch grows with the length (a long-context code "
    "path)",
}
LENGTH_MIXED = "between sqrt(T) and T: noise with some bias"
HOW_LENGTH = (
    f"Responses binned by their model tokens T (half octaves); in each bin of {MIN_BIN_SEQUENCES}"
    " responses or more, the RMS of sum r over the response; the exponent is the slope of log "
    "RMS(sum r) on log T, weighted by the bins' responses (1/2: independent noise, 1: a bias "
    "per token), its interval a bootstrap over whole responses; as diagnose's length_scaling."
)


def length_sentence(res: LengthScaling) -> str:
    """What the exponent says, with its interval, the mean r and the crossover."""
    if res.exponent is None:
        return (
            f"not tested: the {res.sequences:,} responses' lengths do not span a factor of "
            f"{MIN_SPAN:g} between length bins of {MIN_BIN_SEQUENCES} responses or more"
        )
    lo, hi = res.interval or (None, None)
    span = f"95% interval {_num(lo)} to {_num(hi)}" if lo is not None else "no interval"
    cross = (
        f"; the bias overtakes the noise past {_num(res.crossover_tokens)} tokens"
        if res.crossover_tokens is not None
        else ""
    )
    kind = LENGTH_KINDS.get(res.verdict or "", LENGTH_MIXED)
    return (
        f"|sum r| grows as T^{_num(res.exponent)} ({span}, {res.sequences:,} responses): "
        f"{kind}; mean r {_num(res.bias_per_token)} per token{cross}"
    )


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}"


def length_block(sides: list[SideScaling]) -> sec.Block:
    """The test per side (a table and its sentences) and the sums by length bin."""
    rows = [
        {"side": s.side, "selection": s.selection, "responses": s.result.sequences,
         "exponent": s.result.exponent, "ci": _pair(s.result.interval),
         "verdict": s.result.verdict or "not tested", "bias": s.result.bias_per_token,
         "noise": s.result.noise_per_token, "cross": s.result.crossover_tokens}
        for s in sides
    ]  # fmt: skip
    columns = [
        sec.Column("side", "side", sec.Kind.LABEL), sec.Column("selection", "selection", sec.Kind.LABEL),
        sec.Column("responses", "responses", sec.Kind.COUNT), sec.Column("exponent", "exponent"),
        sec.Column("ci", "95% interval", sec.Kind.LABEL), sec.Column("verdict", "verdict", sec.Kind.LABEL),
        sec.Column("bias", "mean r per token"), sec.Column("noise", "noise per token (var)"),
        sec.Column("cross", "crossover tokens"),
    ]  # fmt: skip
    title = "Length scaling: sums of r over a response, noise (sqrt T) or bias (T)"
    table = sec.Table("length-scaling", title, columns, rows, note=HOW_LENGTH)
    sentences = [sec.Line(f"{s.side} {s.selection}: {length_sentence(s.result)}") for s in sides]
    parts = [table, sec.Lines("length-sentences", None, sentences), length_bins_table(sides)]
    return sec.Block("length-block", title, parts, bare=True)


def length_bins_table(sides: list[SideScaling]) -> sec.Table:
    """Each side's length bins: responses, mean T, mean and RMS of sum r, in the fit or not."""
    rows = [
        {"side": s.side, "lower": b.lower, "responses": b.sequences, "tokens": b.mean_tokens,
         "mean": b.mean_sum, "rms": b.rms_sum,
         "fit": "yes" if b.sequences >= MIN_BIN_SEQUENCES and b.rms_sum > 0 else "no"}
        for s in sides
        for b in s.result.bins
    ]  # fmt: skip
    columns = [
        sec.Column("side", "side", sec.Kind.LABEL), sec.Column("lower", "T from", sec.Kind.ID),
        sec.Column("responses", "responses", sec.Kind.COUNT), sec.Column("tokens", "mean T"),
        sec.Column("mean", "mean sum r"), sec.Column("rms", "RMS sum r"),
        sec.Column("fit", "in the fit", sec.Kind.LABEL),
    ]  # fmt: skip
    return sec.Table("length-bins", "Sums of r by response length", columns, rows, keys=2)
