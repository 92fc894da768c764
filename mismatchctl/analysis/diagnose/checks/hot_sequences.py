"""Sequences hotter than the others of their step: a fault of some requests that no column of the
dumps names (``stats/hot_sequences.py``)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

from mismatchctl.analysis.diagnose.check import (
    NA,
    OK,
    PATH,
    Check,
    CheckModule,
    advice_if,
    fired,
    grade,
)
from mismatchctl.analysis.diagnose.checks import localized
from mismatchctl.analysis.diagnose.context import Context
from mismatchctl.analysis.diagnose.levels import LOCAL_FACTOR, LOCAL_FAIL
from mismatchctl.analysis.diagnose.runs import worst_run
from mismatchctl.analysis.diagnose.samples import samples_of
from mismatchctl.analysis.diagnose.text import pct
from mismatchctl.stats.hot_sequences import Z_TAIL, HotSequences, summarize
from mismatchctl.stats.localize_result import ratio_text

NAME = "hot_sequences"
LAYER = PATH
TITLE = "Sequences hotter than the others of their step"
ORDER = 190
READS: tuple[CheckModule, ...] = (localized,)


@dataclass(frozen=True)
class Thresholds:
    SEQ_HOT_MIN: int = 10
    SEQ_HOT_SHARE: float = 0.02
    SEQ_ASYMMETRY: float = 4.0
    """Sequences hotter than the other sequences of their step (``stats/hot_sequences.py``: each
    sequence's z on the relative mismatch log(|r| / |lr|) of its tokens, at the same turn kind
    and token probability, centered on its step's median; hot above 3, cold below -3, 0.13%
    each under the null): warn when at least ``SEQ_HOT_MIN`` sequences and ``SEQ_HOT_SHARE`` of
    those tested are hot, ``SEQ_ASYMMETRY`` times as many as are cold (sequences that merely
    differ, by context or length, fill both tails alike: the 16 sample runs have 0-16 hot and
    1-16 cold, top-p 14 against 7), and the hot ones' K3 rate at the same cells is
    ``LOCAL_FACTOR`` times the others' (as a localized part); fail from ``LOCAL_FAIL``. Planted
    (1 sequence in 8 at 3x, 32 a step for 24 steps): 35 hot against 6 cold, rate 3.1x; at 10x
    95 against 4, rate 9.8x."""


T = Thresholds()


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
        and found.rate_ratio >= LOCAL_FACTOR
    )
    return grade(pattern and found.rate_ratio >= LOCAL_FAIL, pattern), finding, evidence


def run(ctx: Context) -> Check:
    """Each run's sequences against the others of their step (the worst run's verdict; with
    several runs, evidence ``runs`` has each)."""
    runs = {run: _judge(summarize(state)) for run, state in ctx.state.hot_sequences.runs().items()}
    if not runs:
        return Check(LAYER, NAME, TITLE, NA, "no sequence to test")
    for run_verdict, _, run_evidence in runs.values():
        if run_verdict != OK:  # the hottest sequences with their sample ids, to `show` them
            run_evidence["examples"] = _with_sample_ids(ctx, run_evidence["examples"])
    verdict, finding, evidence = worst_run(runs)
    named = fired(ctx.result(localized))
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
    return Check(LAYER, NAME, TITLE, verdict, finding, evidence, advice_if(verdict, advice))


def _with_sample_ids(ctx: Context, examples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    found = [(e["run"], e["step"], e["seq"], f"z {e['z']:.2f}") for e in examples]
    rows = samples_of(ctx.report.selection, found)
    return [
        {**{k: v for k, v in row.items() if k != "what"}, "z": e["z"]}
        for row, e in zip(rows, examples, strict=True)
    ]
