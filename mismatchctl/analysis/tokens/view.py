"""The worst tokens or sequences as sections: what was listed (cell, order, its tokens and K3)
and one table, best first."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mismatchctl.analysis import sections as sec
from mismatchctl.display import number
from mismatchctl.stats import registry as M

if TYPE_CHECKING:
    from mismatchctl.analysis.tokens.tokens import Tokens

SORT_WORDS = {
    "k3": "K3 contribution (rho - 1 - r)",
    "abs-r": "|r| = |trainer - rollout logprob|",
    "prob-diff": "|p_trainer - p_rollout|",
}
SEQ_SORT_WORDS = {
    "k3": "summed K3 over the sequence's tokens in the cell",
    "chi2": "chi2 = exp(2 clamp(sum r, -20, 20)) - 1 (signed: trainer more confident first)",
    "abs-sum-r": "|sum r| over the sequence's tokens in the cell",
}
TIE_ORDER = "ties: run, step, seq, position ascending"
NO_KV = (
    "kv pos -: the dump gave no prompt length for that sequence, so its KV position is unknown "
    "(kv pos = pos + the prompt length; `mismatchctl runs show RUN` counts the sequences that "
    "have one)."
)
CHI2 = "chi2 = exp(2 sum r) - 1, sum r clamped to [-20, 20] (0: both sides agree)"
CHI2_FLOOR = (
    "chi2 -1 is its floor, not a missing value: exp(2 sum r) is near 0 when the rollout side "
    "gave the sequence far more probability (sum r below about -5); their sum r still ranks them."
)
SEQ_TIE_ORDER = "ties: run, step, seq ascending"


def tokens_sections(t: Tokens) -> list[sec.Section]:
    what = "sequences" if t.sequences else "tokens"
    words = (SEQ_SORT_WORDS if t.sequences else SORT_WORDS)[t.sort]
    ties = SEQ_TIE_ORDER if t.sequences else TIE_ORDER
    facts = [
        sec.Fact("selection", t.selector, sec.Kind.LABEL),
        sec.Fact("cell", " and ".join(t.where) or "every token", sec.Kind.LABEL),
        sec.Fact("tokens in the cell", t.cell_tokens, sec.Kind.COUNT),
    ]
    if t.sequences:
        facts.append(sec.Fact("sequences in the cell", t.cell_sequences, sec.Kind.COUNT))
    facts += [
        sec.Fact("K3 sum of the cell", t.cell_k3_sum),
        sec.Fact("vllm_kl of the cell", _mean(t.cell_k3_sum, t.cell_tokens)),
        sec.Fact("order", f"{words}, largest first ({ties})", sec.Kind.TEXT),
    ]
    if t.tokenizers and not t.sequences:
        named = sorted(set(t.tokenizers.values()))
        facts.append(sec.Fact("tokenizer", ", ".join(named), sec.Kind.LABEL))
    title = f"Worst {what}: {t.selector}"
    table = sequence_table(t) if t.sequences else token_table(t)
    out: list[sec.Section] = [sec.Facts("tokens-summary", title, facts), table]
    if t.notes:
        out.append(
            sec.Lines("tokens-notes", None, [sec.Line(f"note: {n}", "note") for n in t.notes])
        )
    return out


def _mean(total: float, n: int) -> float | None:
    return total / n if n else None


def _share(part: float, total: float) -> float | None:
    return part / total if total else None


TOKEN_PLACE = (
    sec.Column("rank", "#", sec.Kind.ID),
    sec.Column("run", "run", sec.Kind.LABEL),
    sec.Column("step", "step", sec.Kind.ID),
    sec.Column("sample_id", "sample", sec.Kind.LABEL),
    sec.Column("turn", "turn", sec.Kind.ID),
    sec.Column("position", "pos", sec.Kind.ID),
    sec.Column("kv_position", "kv pos", sec.Kind.ID),
)
"""The columns that say where a listed token is (its rank, run, step, sample, turn and
positions): the tables of ``tokens`` and ``certify`` lead with them."""
SEQUENCE_PLACE = TOKEN_PLACE[:4]
"""Where a listed sequence is (its rank, run, step and sample): the sequences' table leads with
them."""


def token_table(t: Tokens) -> sec.Table:
    rows = []
    for n, r in enumerate(t.rows, 1):
        rows.append({**r, "rank": n, "k3_share": _share(r["k3"], t.cell_k3_sum)})
    columns = [
        *TOKEN_PLACE,
        sec.Column("p_rollout", "p_rollout"),
        sec.Column("p_trainer", "p_trainer"),
        sec.Column("log_ratio", "r"),
        sec.Column("k3", "K3"),
        sec.Column("k3_share", "K3 share", sec.Kind.SHARE),
        sec.Column("context", "token in context", sec.Kind.TEXT),
    ]
    note = (
        "r = trainer - rollout logprob; K3 share: of the cell's K3 sum; in context: the token in "
        f"[brackets] with up to {t.context} model tokens each side (ids without --tokenizer; "
        "<oov:ID>: an id the vocabulary does not hold), |N masked|: masked positions (a tool "
        "response) in between."
    )
    if any(r["kv_position"] is None for r in rows):
        note += f" {NO_KV}"
    return sec.Table("tokens", f"Top {len(rows)} tokens", columns, rows, keys=1, note=note)


def sequence_table(t: Tokens) -> sec.Table:
    rows: list[dict[str, Any]] = []
    for n, r in enumerate(t.rows, 1):
        rows.append({**r, "rank": n, "k3_share": _share(r["k3_sum"], t.cell_k3_sum)})
    columns = [
        *SEQUENCE_PLACE,
        sec.Column("seq", "seq", sec.Kind.ID),
        sec.Column("tokens", "tokens", sec.Kind.COUNT),
        sec.Column("turns", "turns", sec.Kind.COUNT),
        sec.Column("k3_sum", "K3 sum"),
        sec.Column("k3_share", "K3 share", sec.Kind.SHARE),
        sec.Column("log_ratio_sum", "sum r"),
        sec.Column("chi2", "chi2"),
        sec.Column(M.ABS_LOG_RATIO_MAX, "max |r|"),
        sec.Column("worst_position", "at pos", sec.Kind.ID),
    ]
    note = (
        "Sums over each sequence's tokens in the cell; K3 share: of the cell's K3 sum; max |r| "
        f"and the position of its first token; {CHI2}."
    )
    if any(r["chi2"] is not None and number(r["chi2"]) == "-1" for r in rows):
        note += f" {CHI2_FLOOR}"
    return sec.Table("sequences", f"Top {len(rows)} sequences", columns, rows, keys=1, note=note)
