"""A certification as sections: the verdict and the shares, the first divergence in step order
and the largest |r|, the distribution of first divergent positions, the earliest divergences."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mismatchctl.analysis import sections as sec
from mismatchctl.analysis.json_form import Row
from mismatchctl.analysis.tokens.view import TOKEN_PLACE

if TYPE_CHECKING:
    from mismatchctl.analysis.certify.certify import Certification


def _where(row: Row) -> str:
    kv = "" if row["kv_position"] is None else f", kv_position {row['kv_position']}"
    return (
        f"run {row['run']}, step {row['step']}, sample {row['sample_id']} (seq {row['seq']}), "
        f"turn {row['turn']}, position {row['position']}{kv}, token {row['token_id']}: "
        f"rollout {row['rollout_logprob']:.9g}, trainer {row['trainer_logprob']:.9g}"
    )


def certify_sections(c: Certification) -> list[sec.Section]:
    crit = "bitwise equal" if c.tolerance == 0 else f"|r| <= {c.tolerance:g}"
    verdict = (
        f"HOLDS: every one of {c.tokens:,} tokens is {crit}"
        if c.holds
        else f"FAILS: {c.tokens - c.within_tolerance_tokens:,} of {c.tokens:,} tokens are not "
        f"{crit}"
    )
    facts = [
        sec.Fact("selection", c.selector, sec.Kind.LABEL),
        sec.Fact("criterion", crit, sec.Kind.TEXT),
        sec.Fact("tokens", c.tokens, sec.Kind.COUNT),
        sec.Fact("exactly equal tokens", c.equal_token_share, sec.Kind.SHARE,
               remark=f"{c.equal_tokens:,}"),
        sec.Fact("tokens within the tolerance", c.within_tolerance_share, sec.Kind.SHARE,
               remark=f"{c.within_tolerance_tokens:,}"),
        sec.Fact("sequences", c.sequences, sec.Kind.COUNT),
        sec.Fact("sequences equal throughout", c.equal_sequence_share, sec.Kind.SHARE,
               remark=f"{c.equal_sequences:,}"),
        sec.Fact("max |r|", c.max_abs_log_ratio),
    ]  # fmt: skip
    lines = [sec.Line(verdict, "bold" if c.holds else "warn")]
    if c.first_divergence:
        lines.append(sec.Line(f"first divergence (step order): {_where(c.first_divergence)}"))
    if c.max_abs_log_ratio_at and not c.holds:
        lines.append(sec.Line(f"max |r| at: {_where(c.max_abs_log_ratio_at)}"))
    out: list[sec.Section] = [
        sec.Facts("certify-summary", f"Certify: {c.selector}", facts),
        sec.Lines("certify-verdict", None, lines),
    ]
    if not c.holds:
        out += [histogram_table(c), earliest_table(c)]
    return out


def histogram_table(c: Certification) -> sec.Table:
    diverged = c.sequences - c.equal_sequences
    rows = [
        {"positions": f"{b.lo}" if b.to == b.lo else f"{b.lo}-{'' if b.to is None else b.to}",
         "sequences": b.sequences, "share": b.sequences / diverged}
        for b in c.first_divergent_position
    ]  # fmt: skip
    columns = [
        sec.Column("positions", "first divergent position", sec.Kind.LABEL),
        sec.Column("sequences", "sequences", sec.Kind.COUNT),
        sec.Column("share", "share of diverging", sec.Kind.SHARE),
    ]
    note = "Position in the dump's arrays of each diverging sequence's first token with |r| above the tolerance."
    return sec.Table("certify-first", "Where sequences first diverge", columns, rows, note=note)


def earliest_table(c: Certification) -> sec.Table:
    rows = [{**r, "rank": n} for n, r in enumerate(c.earliest_divergences, 1)]
    columns = [
        *TOKEN_PLACE,
        sec.Column("token_id", "token", sec.Kind.ID),
        sec.Column("rollout_logprob", "rollout logprob", sec.Kind.CORR),
        sec.Column("trainer_logprob", "trainer logprob", sec.Kind.CORR),
        sec.Column("log_ratio", "r"),
    ]
    note = "The sequences whose first divergence comes earliest (ties: run, step, seq)."
    return sec.Table("certify-earliest", "Earliest divergences", columns, rows, note=note)
