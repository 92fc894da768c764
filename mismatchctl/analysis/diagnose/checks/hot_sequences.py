"""Sequences hotter than the others of their step: a fault of some requests that no column of the
dumps names (``stats/hot_sequences.py``)."""

from __future__ import annotations

import dataclasses
import shlex
from dataclasses import dataclass

from mismatchctl.analysis.diagnose.check import (
    NA,
    OK,
    PATH,
    Check,
    CheckEvidence,
    advice_if,
    fired,
    grade,
)
from mismatchctl.analysis.diagnose.checks import localized
from mismatchctl.analysis.diagnose.context import CheckModule, Context
from mismatchctl.analysis.diagnose.levels import LOCAL_FACTOR, LOCAL_FAIL
from mismatchctl.analysis.diagnose.runs import WorstRun, worst_run
from mismatchctl.analysis.diagnose.samples import samples_of
from mismatchctl.analysis.diagnose.text import pct
from mismatchctl.stats.hot_sequences import Z_TAIL, HotSequences, summarize
from mismatchctl.stats.localize.result import ratio_text

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


@dataclass(frozen=True, kw_only=True)
class Example(CheckEvidence):
    """One of the hottest sequences: where, and its z."""

    run: str
    step: int
    seq: int
    z: float


@dataclass(frozen=True, kw_only=True)
class Shown(CheckEvidence):
    """One of the hottest sequences of a run that fires, with its sample id (what `show`
    takes; None when the store's sequence rows do not hold it)."""

    run: str
    step: int
    sample_id: str | None
    seq: int
    z: float


@dataclass(frozen=True, kw_only=True)
class Sequences(CheckEvidence):
    """One run's sequences tested, hot and cold, the hot ones' tokens, share of the K3 mass and
    rate over the others' at the same cells, and the hottest (``Shown`` with their sample ids
    when the run fires)."""

    tested: int
    hot: int
    cold: int
    hot_tokens: int
    hot_mass_share: float
    rate_ratio: float
    examples: list[Example] | list[Shown]


@dataclass(frozen=True, kw_only=True)
class Evidence(WorstRun[Sequences]):
    """The worst run's sequences (and with several runs every run's, ``runs``)."""


def _judge(found: HotSequences) -> tuple[str, str, Sequences]:
    """One run's verdict, sentence and evidence."""
    evidence = Sequences(
        tested=found.tested,
        hot=found.hot,
        cold=found.cold,
        hot_tokens=found.hot_tokens,
        hot_mass_share=found.hot_mass_share,
        rate_ratio=found.rate_ratio,
        examples=[
            Example(run=run, step=step, seq=seq, z=z) for run, step, seq, z in found.examples
        ],
    )
    finding = (
        f"{found.hot} of {found.tested} sequences tested are hotter than the others of their "
        f"step at the same token probabilities (z > {Z_TAIL:g}), {found.cold} colder"
    )
    if found.hot:
        finding += (
            f"; the hot ones carry {pct(found.hot_mass_share)} of the K3 mass at "
            f"{ratio_text(found.rate_ratio)}x the others' rate"
        )
    pattern = many_hot(found) and found.rate_ratio >= LOCAL_FACTOR
    return grade(pattern and found.rate_ratio >= LOCAL_FAIL, pattern), finding, evidence


def many_hot(found: HotSequences) -> bool:
    """At least ``SEQ_HOT_MIN`` sequences and ``SEQ_HOT_SHARE`` of those tested are hot,
    ``SEQ_ASYMMETRY`` times as many as are cold (the counts of the pattern, without its rate)."""
    return (
        found.hot >= T.SEQ_HOT_MIN
        and found.hot >= T.SEQ_HOT_SHARE * found.tested
        and found.hot >= T.SEQ_ASYMMETRY * max(found.cold, 1)
    )


def run(ctx: Context) -> Check:
    """Each run's sequences against the others of their step (the worst run's verdict; with
    several runs, evidence ``runs`` has each)."""
    runs = {run: _judge(summarize(state)) for run, state in ctx.state.hot_sequences.runs().items()}
    if not runs:
        return Check(LAYER, NAME, TITLE, NA, "no sequence to test")
    for run, (run_verdict, run_finding, own) in list(runs.items()):
        if run_verdict != OK:  # the hottest sequences with their sample ids, to `show` them
            shown = _with_sample_ids(ctx, own.examples)  # type: ignore[arg-type]
            runs[run] = (run_verdict, run_finding, dataclasses.replace(own, examples=shown))
    verdict, finding, evidence = worst_run(runs, Evidence)
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
    hottest = next(
        (e for e in evidence.worst.examples if isinstance(e, Shown) and e.sample_id), None
    )
    show = (
        f"`mismatchctl show {shlex.quote(hottest.run)} {shlex.quote(str(hottest.sample_id))}"
        f" --step {hottest.step}` shows the hottest, "
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


def _with_sample_ids(ctx: Context, examples: list[Example]) -> list[Shown]:
    found = [(e.run, e.step, e.seq, f"z {e.z:.2f}") for e in examples]
    rows = samples_of(ctx.report.selection, found)
    return [
        Shown(run=row.run, step=row.step, sample_id=row.sample_id, seq=row.seq, z=e.z)
        for row, e in zip(rows, examples, strict=True)
    ]
