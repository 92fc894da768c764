"""The inference-path check of sequences hotter than their peers: a fault of some requests that
no column of the dumps names (``stats/hot_sequences.py``; thresholds: diagnose_thresholds)."""

from __future__ import annotations

import shlex
from typing import Any

from mismatchctl.analysis import diagnose_thresholds as T
from mismatchctl.analysis.checks_data import samples_of
from mismatchctl.analysis.diagnose_base import (
    FAIL,
    NA,
    OK,
    PATH,
    WARN,
    Check,
    Context,
    advice_if,
    grade,
    pct,
    worst_run,
)
from mismatchctl.stats.hot_sequences import Z_TAIL, HotSequences, summarize
from mismatchctl.stats.localize_result import ratio_text

TITLE = "Sequences hotter than the others of their step"


def _judge(found: HotSequences) -> tuple[str, str, dict[str, Any]]:
    """One run's verdict, sentence and evidence."""
    evidence: dict[str, Any] = {
        "tested": found.tested,
        "hot": found.hot,
        "cold": found.cold,
        "hot_tokens": found.hot_tokens,
        "hot_mass_share": found.hot_mass_share,
        "rate_ratio": found.rate_ratio,
        "examples": [
            {"run": run, "step": step, "seq": seq, "z": z} for run, step, seq, z in found.examples
        ],
    }
    finding = (
        f"{found.hot} of {found.tested} sequences tested are hotter than the others of their "
        f"step at the same token probabilities (z > {Z_TAIL:g}), {found.cold} colder"
    )
    if found.hot:
        finding += (
            f"; the hot ones carry {pct(found.hot_mass_share)} of the K3 mass at "
            f"{ratio_text(found.rate_ratio)}x the others' rate"
        )
    pattern = (
        found.hot >= T.SEQ_HOT_MIN
        and found.hot >= T.SEQ_HOT_SHARE * found.tested
        and found.hot >= T.SEQ_ASYMMETRY * max(found.cold, 1)
        and found.rate_ratio >= T.LOCAL_FACTOR
    )
    return grade(pattern and found.rate_ratio >= T.LOCAL_FAIL, pattern), finding, evidence


def hot_sequences(ctx: Context) -> Check:
    """Each run's sequences against the others of their step (the worst run's verdict; with
    several runs, evidence ``runs`` has each)."""
    runs = {run: _judge(summarize(state)) for run, state in ctx.state.hot_sequences.runs().items()}
    if not runs:
        return Check(PATH, "hot_sequences", TITLE, NA, "no sequence to test")
    for run_verdict, _, run_evidence in runs.values():
        if run_verdict != OK:  # the hottest sequences with their sample ids, to `show` them
            run_evidence["examples"] = _with_sample_ids(ctx, run_evidence["examples"])
    verdict, finding, evidence = worst_run(runs)
    local = ctx.done.get("localized")
    named = local is not None and local.verdict in (WARN, FAIL)
    if verdict != OK:
        finding += ": a fault of some requests" + (
            " (the localized check names a part of the run)" if named
            else ", not of a part the dumps name"
        )  # fmt: skip
    label = shlex.quote(ctx.label)
    first = (
        "the localized check names a part of the run the hot requests may be: see it first; "
        "otherwise "
        if named
        else ""
    )
    hottest = next((e for e in evidence["examples"] if e.get("sample_id")), None)
    show = (
        f"`mismatchctl show {shlex.quote(hottest['run'])} {shlex.quote(str(hottest['sample_id']))}"
        f" --step {hottest['step']}` shows the hottest, "
        if hottest
        else ""
    )
    advice = first + (
        "some requests took another path: an inference replica or server of several, rollouts "
        "that straddled a weight update (in-flight updates, partial rollouts), a per-request "
        f"setting; {show}`mismatchctl tokens {label} --sequences` lists the worst (evidence "
        "`examples`); tag the dumps with the replica and the weight version of each sample "
        "(columns the localized search then names)"
    )
    return Check(
        PATH, "hot_sequences", TITLE, verdict, finding, evidence, advice_if(verdict, advice)
    )


def _with_sample_ids(ctx: Context, examples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    found = [(e["run"], e["step"], e["seq"], f"z {e['z']:.2f}") for e in examples]
    rows = samples_of(ctx.report.selection, found)
    return [
        {**{k: v for k, v in row.items() if k != "what"}, "z": e["z"]}
        for row, e in zip(rows, examples, strict=True)
    ]


__all__ = ["hot_sequences"]
