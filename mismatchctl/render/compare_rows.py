"""The comparison's tables as (headers, rows of text): one layout for the terminal and the HTML."""

from __future__ import annotations

from typing import Any

from mismatchctl.analysis.compare import Comparison
from mismatchctl.engines import plan as K
from mismatchctl.render.fmt import label, num, pct
from mismatchctl.stats import bin_label

Rows = tuple[list[str], list[list[str]]]


def bins_rows(c: Comparison) -> Rows:
    headers = [
        "p_infer bin",
        "A token share",
        "B token share",
        "A vllm_kl",
        "B vllm_kl",
        "B / A",
        "A kl share",
        "B kl share",
    ]
    rows = [
        [
            bin_label(c.a.bin_edges, int(r["bin"])),
            pct(r["a_token_share"]),
            pct(r["b_token_share"]),
            num(r["a_vllm_kl"]),
            num(r["b_vllm_kl"]),
            num(r["vllm_kl_ratio"]),
            pct(r["a_kl_share"]),
            pct(r["b_kl_share"]),
        ]
        for r in c.bins
    ]
    return headers, rows


def keyed_rows(rows_in: list[dict[str, Any]], key: str) -> Rows:
    headers = [
        key,
        "A tokens",
        "B tokens",
        "A vllm_kl",
        "B vllm_kl",
        "B / A",
        "A log-ppl ρ",
        "B log-ppl ρ",
    ]
    rows = [
        [
            label(r[key]),
            num(r["a_tokens"]),
            num(r["b_tokens"]),
            num(r["a_vllm_kl"]),
            num(r["b_vllm_kl"]),
            num(r["vllm_kl_ratio"]),
            num(r["a_log_ppl_pearson"]),
            num(r["b_log_ppl_pearson"]),
        ]
        for r in rows_in
    ]
    return headers, rows


def gap_rows(c: Comparison) -> Rows:
    headers = ["turn kind", "p_infer bin", "contribution to B - A", "share of gap"]
    rows = [
        [
            str(g[K.TURN_KIND]),
            bin_label(c.a.bin_edges, int(g[K.BIN])),
            num(g["contribution"]),
            pct(g["share_of_gap"]),
        ]
        for g in c.gap
    ]
    return headers, rows


def ci_text(row: dict[str, Any]) -> str:
    if row.get("ci_low") is None:
        return ""
    return f"{num(row['ci_low'], 3)} .. {num(row['ci_high'], 3)} ({row['ci_of']})"


def headline_rows(c: Comparison) -> Rows:
    headers = ["metric", "A", "B", "B - A", "B / A", "95% CI"]
    rows = [
        [r["metric"], num(r["a"]), num(r["b"]), num(r["difference"]), num(r["ratio"]), ci_text(r)]
        for r in c.headline
    ]
    return headers, rows
