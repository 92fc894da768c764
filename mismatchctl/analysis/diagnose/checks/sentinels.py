"""Fill values where a logprob should be: values at or below the sentinel bound, and runs of
one-sided exact 0.0 (``stats/sentinels.py``)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from mismatchctl.analysis.diagnose.check import (
    DATA,
    Check,
    CheckEvidence,
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
    verdict = grade(low > 0 or share >= T.SENTINEL_FAIL_SHARE, s.zero_run_tokens > 0)
    finding = (
        f"{low} value(s) <= {SENTINEL_MAX:g}; {s.zero_run_tokens} token(s) ({pct(share)}) in "
        f"runs of >= {ZERO_RUN_MIN} one-sided exact 0.0 where the other side goes down to "
        f"p <= {math.exp(FILL_OTHER_MAX):g}"
    )
    advice = (
        "a fill value sits where a logprob should be: check the mask against the value arrays "
        "(masked positions hold 0.0 in verl and slime, -9999 in SkyRL) and the samples listed"
    )
    return Check(LAYER, NAME, TITLE, verdict, finding, evidence, advice_if(verdict, advice))
