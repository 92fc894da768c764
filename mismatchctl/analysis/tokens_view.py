"""The worst tokens or sequences as sections: what was listed (cell, order, its tokens and K3)
and one table, best first."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mismatchctl.analysis import sections as S
from mismatchctl.display import number
from mismatchctl.stats import registry as M

if TYPE_CHECKING:
    from mismatchctl.analysis.tokens import Tokens

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


def tokens_sections(t: Tokens) -> list[S.Section]:
    what = "sequences" if t.sequences else "tokens"
    words = (SEQ_SORT_WORDS if t.sequences else SORT_WORDS)[t.sort]
    ties = SEQ_TIE_ORDER if t.sequences else TIE_ORDER
    facts = [
        S.Fact("selection", t.selector, S.Kind.LABEL),
        S.Fact("cell", " and ".join(t.where) or "every token", S.Kind.LABEL),
        S.Fact("tokens in the cell", t.cell_tokens, S.Kind.COUNT),
    ]
    if t.sequences:
        facts.append(S.Fact("sequences in the cell", t.cell_sequences, S.Kind.COUNT))
    facts += [
        S.Fact("K3 sum of the cell", t.cell_k3_sum),
        S.Fact("vllm_kl of the cell", _mean(t.cell_k3_sum, t.cell_tokens)),
        S.Fact("order", f"{words}, largest first ({ties})", S.Kind.TEXT),
    ]
    if t.tokenizers and not t.sequences:
        named = sorted(set(t.tokenizers.values()))
        facts.append(S.Fact("tokenizer", ", ".join(named), S.Kind.LABEL))
    title = f"Worst {what}: {t.selector}"
    table = sequence_table(t) if t.sequences else token_table(t)
    out: list[S.Section] = [S.Facts("tokens-summary", title, facts), table]
    if t.notes:
        out.append(S.Lines("tokens-notes", None, [S.Line(f"note: {n}", "note") for n in t.notes]))
    return out


def _mean(total: float, n: int) -> float | None:
    return total / n if n else None


def _share(part: float, total: float) -> float | None:
    return part / total if total else None


def token_table(t: Tokens) -> S.Table:
    rows = []
    for n, r in enumerate(t.rows, 1):
        rows.append({**r, "rank": n, "k3_share": _share(r["k3"], t.cell_k3_sum)})
    columns = [
        S.Column("rank", "#", S.Kind.ID),
        S.Column("run", "run", S.Kind.LABEL),
        S.Column("step", "step", S.Kind.ID),
        S.Column("sample_id", "sample", S.Kind.LABEL),
        S.Column("turn", "turn", S.Kind.ID),
        S.Column("position", "pos", S.Kind.ID),
        S.Column("kv_position", "kv pos", S.Kind.ID),
        S.Column("p_rollout", "p_rollout"),
        S.Column("p_trainer", "p_trainer"),
        S.Column("log_ratio", "r"),
        S.Column("k3", "K3"),
        S.Column("k3_share", "K3 share", S.Kind.SHARE),
        S.Column("context", "token in context", S.Kind.TEXT),
    ]
    note = (
        "r = trainer - rollout logprob; K3 share: of the cell's K3 sum; in context: the token in "
        f"[brackets] with up to {t.context} model tokens each side (ids without --tokenizer; "
        "<oov:ID>: an id the vocabulary does not hold), |N masked|: masked positions (a tool "
        "response) in between."
    )
    if any(r["kv_position"] is None for r in rows):
        note += f" {NO_KV}"
    return S.Table("tokens", f"Top {len(rows)} tokens", columns, rows, keys=1, note=note)


def sequence_table(t: Tokens) -> S.Table:
    rows: list[dict[str, Any]] = []
    for n, r in enumerate(t.rows, 1):
        rows.append({**r, "rank": n, "k3_share": _share(r["k3_sum"], t.cell_k3_sum)})
    columns = [
        S.Column("rank", "#", S.Kind.ID),
        S.Column("run", "run", S.Kind.LABEL),
        S.Column("step", "step", S.Kind.ID),
        S.Column("sample_id", "sample", S.Kind.LABEL),
        S.Column("seq", "seq", S.Kind.ID),
        S.Column("tokens", "tokens", S.Kind.COUNT),
        S.Column("turns", "turns", S.Kind.COUNT),
        S.Column("k3_sum", "K3 sum"),
        S.Column("k3_share", "K3 share", S.Kind.SHARE),
        S.Column("log_ratio_sum", "sum r"),
        S.Column("chi2", "chi2"),
        S.Column(M.ABS_LOG_RATIO_MAX, "max |r|"),
        S.Column("worst_position", "at pos", S.Kind.ID),
    ]
    note = (
        "Sums over each sequence's tokens in the cell; K3 share: of the cell's K3 sum; max |r| "
        f"and the position of its first token; {CHI2}."
    )
    if any(r["chi2"] is not None and number(r["chi2"]) == "-1" for r in rows):
        note += f" {CHI2_FLOOR}"
    return S.Table("sequences", f"Top {len(rows)} sequences", columns, rows, keys=1, note=note)
