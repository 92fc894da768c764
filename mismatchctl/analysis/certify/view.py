"""A certification as sections: the verdict and the shares, the first divergence in step order
and the largest |r|, the distribution of first divergent positions, the earliest divergences."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mismatchctl.analysis import sections as sec
from mismatchctl.analysis.tokens.view import TOKEN_PLACE

if TYPE_CHECKING:
    from mismatchctl.analysis.certify.certify import Certification


def _where(row: dict[str, Any]) -> str:
    kv = "" if row["kv_position"] is None else f", kv_position {row['kv_position']}"
    return (
        f"run {row['run']}, step {row['step']}, sample {row['sample_id']} (seq {row['seq']}), "
        f"turn {row['turn']}, position {row['position']}{kv}, token {row['token_id']}: "
        f"rollout {row['rollout_logprob']:.9g}, trainer {row['trainer_logprob']:.9g}"
    )


def certify_sections(c: Certification) -> list[sec.Section]:
    s, d = c.state, c.to_dict()["certify"]
    crit = "bitwise equal" if c.tolerance == 0 else f"|r| <= {c.tolerance:g}"
    verdict = (
        f"HOLDS: every one of {s.tokens:,} tokens is {crit}"
        if c.holds
        else f"FAILS: {s.tokens - s.within:,} of {s.tokens:,} tokens are not {crit}"
    )
    facts = [
        sec.Fact("selection", c.selector, sec.Kind.LABEL),
        sec.Fact("criterion", crit, sec.Kind.TEXT),
        sec.Fact("tokens", s.tokens, sec.Kind.COUNT),
        sec.Fact("exactly equal tokens", d["equal_token_share"], sec.Kind.SHARE,
               remark=f"{s.equal:,}"),
        sec.Fact("tokens within the tolerance", d["within_tolerance_share"], sec.Kind.SHARE,
               remark=f"{s.within:,}"),
        sec.Fact("sequences", s.sequences, sec.Kind.COUNT),
        sec.Fact("sequences equal throughout", d["equal_sequence_share"], sec.Kind.SHARE,
               remark=f"{s.equal_sequences:,}"),
        sec.Fact("max |r|", d["max_abs_log_ratio"]),
    ]  # fmt: skip
    lines = [sec.Line(verdict, "bold" if c.holds else "warn")]
    if d["first_divergence"]:
        lines.append(sec.Line(f"first divergence (step order): {_where(d['first_divergence'])}"))
    if d["max_abs_log_ratio_at"] and not c.holds:
        lines.append(sec.Line(f"max |r| at: {_where(d['max_abs_log_ratio_at'])}"))
    out: list[sec.Section] = [
        sec.Facts("certify-summary", f"Certify: {c.selector}", facts),
        sec.Lines("certify-verdict", None, lines),
    ]
    if not c.holds:
        out += [histogram_table(c), earliest_table(c)]
    return out


def histogram_table(c: Certification) -> sec.Table:
    diverged = c.state.sequences - c.state.equal_sequences
    rows = [
        {"positions": f"{lo}" if hi == lo else f"{lo}-{'' if hi is None else hi}",
         "sequences": n, "share": n / diverged}
        for lo, hi, n in c.histogram()
    ]  # fmt: skip
    columns = [
        sec.Column("positions", "first divergent position", sec.Kind.LABEL),
        sec.Column("sequences", "sequences", sec.Kind.COUNT),
        sec.Column("share", "share of diverging", sec.Kind.SHARE),
    ]
    note = "Position in the dump's arrays of each diverging sequence's first token with |r| above the tolerance."
    return sec.Table("certify-first", "Where sequences first diverge", columns, rows, note=note)


def earliest_table(c: Certification) -> sec.Table:
    rows = [{**r, "rank": n} for n, r in enumerate(c.state.earliest.rows, 1)]
    columns = [
        *TOKEN_PLACE,
        sec.Column("token_id", "token", sec.Kind.ID),
        sec.Column("rollout_logprob", "rollout logprob", sec.Kind.CORR),
        sec.Column("trainer_logprob", "trainer logprob", sec.Kind.CORR),
        sec.Column("log_ratio", "r"),
    ]
    note = "The sequences whose first divergence comes earliest (ties: run, step, seq)."
    return sec.Table("certify-earliest", "Earliest divergences", columns, rows, note=note)
