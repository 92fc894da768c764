"""A certification as sections: the verdict and the shares, the first divergence in step order
and the largest |r|, the distribution of first divergent positions, the earliest divergences."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mismatchctl.analysis import sections as X

if TYPE_CHECKING:
    from mismatchctl.analysis.certify import Certification


def _where(row: dict[str, Any]) -> str:
    kv = "" if row["kv_position"] is None else f", kv_position {row['kv_position']}"
    return (
        f"run {row['run']}, step {row['step']}, sample {row['sample_id']} (seq {row['seq']}), "
        f"turn {row['turn']}, position {row['position']}{kv}, token {row['token_id']}: "
        f"rollout {row['rollout_logprob']:.9g}, trainer {row['trainer_logprob']:.9g}"
    )


def certify_sections(c: Certification) -> list[X.Section]:
    s, d = c.state, c.to_dict()["certify"]
    crit = "bitwise equal" if c.tolerance == 0 else f"|r| <= {c.tolerance:g}"
    verdict = (
        f"HOLDS: every one of {s.tokens:,} tokens is {crit}"
        if c.holds
        else f"FAILS: {s.tokens - s.within:,} of {s.tokens:,} tokens are not {crit}"
    )
    facts = [
        X.Fact("selection", c.selector, X.Kind.LABEL),
        X.Fact("criterion", crit, X.Kind.TEXT),
        X.Fact("tokens", s.tokens, X.Kind.COUNT),
        X.Fact("exactly equal tokens", d["equal_token_share"], X.Kind.SHARE,
               remark=f"{s.equal:,}"),
        X.Fact("tokens within the tolerance", d["within_tolerance_share"], X.Kind.SHARE,
               remark=f"{s.within:,}"),
        X.Fact("sequences", s.sequences, X.Kind.COUNT),
        X.Fact("sequences equal throughout", d["equal_sequence_share"], X.Kind.SHARE,
               remark=f"{s.equal_sequences:,}"),
        X.Fact("max |r|", d["max_abs_log_ratio"]),
    ]  # fmt: skip
    lines = [X.Line(verdict, "bold" if c.holds else "warn")]
    if d["first_divergence"]:
        lines.append(X.Line(f"first divergence (step order): {_where(d['first_divergence'])}"))
    if d["max_abs_log_ratio_at"] and not c.holds:
        lines.append(X.Line(f"max |r| at: {_where(d['max_abs_log_ratio_at'])}"))
    out: list[X.Section] = [
        X.Facts("certify-summary", f"Certify: {c.selector}", facts),
        X.Lines("certify-verdict", None, lines),
    ]
    if not c.holds:
        out += [histogram_table(c), earliest_table(c)]
    return out


def histogram_table(c: Certification) -> X.Table:
    diverged = c.state.sequences - c.state.equal_sequences
    rows = [
        {"positions": f"{lo}" if hi == lo else f"{lo}-{'' if hi is None else hi}",
         "sequences": n, "share": n / diverged}
        for lo, hi, n in c.histogram()
    ]  # fmt: skip
    columns = [
        X.Column("positions", "first divergent position", X.Kind.LABEL),
        X.Column("sequences", "sequences", X.Kind.COUNT),
        X.Column("share", "share of diverging", X.Kind.SHARE),
    ]
    note = "Position in the dump's arrays of each diverging sequence's first token with |r| above the tolerance."
    return X.Table("certify-first", "Where sequences first diverge", columns, rows, note=note)


def earliest_table(c: Certification) -> X.Table:
    rows = [{**r, "rank": n} for n, r in enumerate(c.state.earliest.rows, 1)]
    columns = [
        X.Column("rank", "#", X.Kind.ID),
        X.Column("run", "run", X.Kind.LABEL),
        X.Column("step", "step", X.Kind.ID),
        X.Column("sample_id", "sample", X.Kind.LABEL),
        X.Column("turn", "turn", X.Kind.ID),
        X.Column("position", "pos", X.Kind.ID),
        X.Column("kv_position", "kv pos", X.Kind.ID),
        X.Column("token_id", "token", X.Kind.ID),
        X.Column("rollout_logprob", "rollout logprob", X.Kind.CORR),
        X.Column("trainer_logprob", "trainer logprob", X.Kind.CORR),
        X.Column("log_ratio", "r"),
    ]
    note = "The sequences whose first divergence comes earliest (ties: run, step, seq)."
    return X.Table("certify-earliest", "Earliest divergences", columns, rows, note=note)
