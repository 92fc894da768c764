"""The paired comparison as sections: what paired and how much, both sides' vllm_kl over the
pairs with the paired-bootstrap intervals of B - A and B / A, the per-sequence differences and
the pairs that differ most; or one line saying why the sides cannot pair."""

from __future__ import annotations

from mismatchctl.analysis import sections as sec
from mismatchctl.analysis.pairing.pairing import Pairing
from mismatchctl.display import number, percent

TITLE = "Paired comparison (the same responses on both sides)"


def paired_sections(p: Pairing | None, a: str, b: str) -> list[sec.Section]:
    if p is None:
        return []
    if not p.paired:
        return [
            sec.Lines("paired", None, [sec.Line(f"Paired comparison: none: {p.reason}.", "dim")])
        ]
    return [sec.Facts("paired", TITLE, _facts(p)), sec.Lines("paired-verdict", None, [
        sec.Line(verdict(p, a, b), "bold" if p.significant else "")]), _top_table(p)]  # fmt: skip


def _ci(ci: tuple[float | None, float | None]) -> str:
    low, high = ci
    if low is None or high is None:
        return "no interval"
    return f"95% CI {number(low, 3)} .. {number(high, 3)}"


def _facts(p: Pairing) -> list[sec.Fact]:
    d = p.per_sequence
    facts = [
        sec.Fact("identical responses", p.pairs, sec.Kind.COUNT,
               remark=f"{percent(p.identical_share)} of the {p.comparable:,} sequences with the "
               "same step and sample id on both sides"),
        sec.Fact("sequences of A / B paired", f"{p.pairs:,} of {p.sequences_a:,} / "
               f"{p.pairs:,} of {p.sequences_b:,}", sec.Kind.TEXT),
        sec.Fact("rollout logprobs bitwise equal", p.same_rollout, sec.Kind.COUNT,
               remark=f"of the {p.pairs:,} pairs"),
        sec.Fact("A vllm_kl over the pairs", p.vllm_kl_a),
        sec.Fact("B vllm_kl over the pairs", p.vllm_kl_b),
        sec.Fact("B - A", p.difference, remark=f"{_ci(p.difference_ci)} (paired bootstrap, "
               f"{p.resamples:,} resamples, seed {p.seed})"),
        sec.Fact("B / A", p.ratio, sec.Kind.RATIO, remark=_ci(p.ratio_ci)),
    ]  # fmt: skip
    if d.get("finite"):
        facts.append(sec.Fact(
            "per-sequence difference of vllm_kl (median)", d["median"],
            remark=f"5%-95%: {number(d['p05'], 3)} .. {number(d['p95'], 3)}; mean "
            f"{number(d['mean'], 3)}; B higher in {percent(d['b_higher_share'])}, equal in "
            f"{percent(d['equal_share'])}",
        ))  # fmt: skip
    return facts


def verdict(p: Pairing, a: str, b: str) -> str:
    """One sentence on the difference of vllm_kl over the pairs."""
    what = f"on the same {p.pairs:,} responses"
    if p.difference is None:
        return f"paired: vllm_kl {what}: no comparison (overflow beyond float64 on a side)"
    ci = _ci(p.difference_ci)
    if not p.significant:
        return (
            f"paired: no significant difference of vllm_kl {what} (B-A = {p.difference:+.3g}, {ci})"
        )
    word = "higher" if p.difference > 0 else "lower"
    return f"paired: {b}'s vllm_kl is {abs(p.difference):.3g} {word} than {a}'s {what} ({ci})"


def _top_table(p: Pairing) -> sec.Table:
    columns = [
        sec.Column("step", "step", sec.Kind.ID), sec.Column("sample_id", "sample", sec.Kind.LABEL),
        sec.Column("seq_a", "A seq", sec.Kind.ID), sec.Column("seq_b", "B seq", sec.Kind.ID),
        sec.Column("tokens", "tokens", sec.Kind.COUNT), sec.Column("vllm_kl_a", "A vllm_kl"),
        sec.Column("vllm_kl_b", "B vllm_kl"), sec.Column("difference", "B - A"),
    ]  # fmt: skip
    return sec.Table(
        "paired-top",
        f"Pairs that differ most (top {len(p.top)})",
        columns,
        [dict(r) for r in p.top],
        keys=2,
        note="Each pair's vllm_kl (its K3 mean) on each side, largest |B - A| first.",
    )
