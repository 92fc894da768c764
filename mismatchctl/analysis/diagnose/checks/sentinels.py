"""Fill values where a logprob should be: values at or below the sentinel bound, and runs of
one-sided exact 0.0 (``stats/sentinels.py``)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from mismatchctl.analysis.diagnose.check import (
    DATA,
    Check,
    CheckEvidence,
    absent,
    advice_if,
    grade,
    renamed,
)
from mismatchctl.analysis.diagnose.context import CheckModule, Context
from mismatchctl.analysis.diagnose.samples import Sample, samples_of
from mismatchctl.analysis.diagnose.text import pct
from mismatchctl.stats.sentinels import FILL_OTHER_MAX, SENTINEL_MAX, ZERO_RUN_MIN

NAME = "sentinels"
LAYER = DATA
TITLE = "Sentinel values among model tokens"
ORDER = 30
READS: tuple[CheckModule, ...] = ()


@dataclass(frozen=True)
class Thresholds:
    SENTINEL_FAIL_SHARE: float = 1e-3
    """Tokens inside one-sided 0.0 runs above this share of all tokens: fail (any: warn). Any
    value <= -1000 fails. Definitions in ``mismatchctl.stats.sentinels``."""

    SHARPER_SIDE: float = 0.25
    """One-sided 0.0 runs are not fills when their side sits this much above the other (mean
    logprob per token, e^0.25 = 1.28x the probability) on the tokens where neither side is 0.0
    (``SentinelState.sharper``): that side computes a far sharper distribution (a temperature
    or a logit scale only it applies) whose near-certain tokens round to p = 1, and the runs
    are its certainty, which the semantic checks then judge. A writer's fill leaves the filled
    side's other values as they were: on the sampled tokens the rollout side sits above the
    trainer by the KL between them, 0.002 per token at most in the healthy runs of eight
    corpora, 0.21 at most in their semantic faults (a temperature of 0.7 against 1.0); the
    Cohere member's engine without its logit scale of 1/16 (``f-u-logit-scale-off``, sampling
    near greedily) 1.8, whose 11% of tokens in such runs failed as the dump's fills, named the
    data. Faults of other classes reach it too (a pre-training checkpoint 0.6-1.0, one gpu's
    loud kernel 0.5, routes replayed a position late 1.6) and none of them puts 0.0 runs in
    the dumps; beside such a fault a writer's fill would be taken for that side's certainty,
    and the fault is named."""


T = Thresholds()


@dataclass(frozen=True, kw_only=True)
class Sides(CheckEvidence):
    """A count on each side."""

    rollout: int
    trainer: int


@dataclass(frozen=True, kw_only=True)
class Evidence(CheckEvidence):
    """Values at or below ``SENTINEL_MAX`` on each side, one-sided exact 0.0 on each side, the
    tokens in runs of at least ``ZERO_RUN_MIN`` of them and their share, the steps holding most
    (step -> tokens, the first 20), some sequences, and what became of non-finite values."""

    values_le_sentinel: Sides = renamed(f"values_le_{SENTINEL_MAX:g}")
    one_sided_zeros: Sides
    zero_run_tokens: int = renamed(f"zero_run_tokens_min_run_{ZERO_RUN_MIN}")
    zero_run_share: float
    sharper_side: float | None = absent()
    """Written when the runs sit on one side: how much higher that side's logprobs are than
    the other's where neither is 0.0 (``SHARPER_SIDE``)."""
    steps: dict[int, int]
    samples: list[Sample]
    non_finite: str


def run(ctx: Context) -> Check:
    s = ctx.state.sentinels
    low = s.low_rollout + s.low_trainer
    share = s.zero_run_tokens / s.tokens if s.tokens else 0.0
    evidence = Evidence(
        values_le_sentinel=Sides(rollout=s.low_rollout, trainer=s.low_trainer),
        one_sided_zeros=Sides(rollout=s.zero_rollout, trainer=s.zero_trainer),
        zero_run_tokens=s.zero_run_tokens,
        zero_run_share=share,
        steps=dict(sorted(s.steps.items(), key=lambda kv: -kv[1])[:20]),
        samples=samples_of(ctx.report.selection, s.examples),
        non_finite="rejected at ingest (with --skip-bad such samples are dropped and counted "
        f"as dropped_sequences: {ctx.report.excluded.get('dropped_sequences', 0)})",
    )
    sharper = s.sharper
    if sharper is not None:
        evidence = dataclasses.replace(evidence, sharper_side=sharper)
    certain = sharper is not None and sharper >= T.SHARPER_SIDE
    fills = 0 if certain else s.zero_run_tokens
    verdict = grade(low > 0 or (not certain and share >= T.SENTINEL_FAIL_SHARE), fills > 0)
    finding = (
        f"{low} value(s) <= {SENTINEL_MAX:g}; {s.zero_run_tokens} token(s) ({pct(share)}) in "
        f"runs of >= {ZERO_RUN_MIN} one-sided exact 0.0 where the other side goes down to "
        f"p <= {math.exp(FILL_OTHER_MAX):g}"
    )
    if certain:
        side = "rollout" if s.zero_run_rollout else "trainer"
        finding += (
            f"; not fills: the {side} side sits {sharper:.2g} above the other per token where "
            "neither is 0.0, a far sharper distribution whose near-certain tokens round to "
            "p = 1 (see the temperature check)"
        )
    advice = (
        "a fill value sits where a logprob should be: check the mask against the value arrays "
        "(masked positions hold 0.0 in verl and slime, -9999 in SkyRL) and the samples listed"
    )
    return Check(LAYER, NAME, TITLE, verdict, finding, evidence, advice_if(verdict, advice))
