"""Fill values where a logprob should be: values at or below the sentinel bound, and runs of
one-sided exact 0.0 (``stats/sentinels.py``)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from mismatchctl.analysis.diagnose.check import DATA, Check, CheckModule, advice_if, grade
from mismatchctl.analysis.diagnose.context import Context
from mismatchctl.analysis.diagnose.samples import samples_of
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


def run(ctx: Context) -> Check:
    s = ctx.state.sentinels
    low = s.low_rollout + s.low_trainer
    share = s.zero_run_tokens / s.tokens if s.tokens else 0.0
    evidence: dict[str, Any] = {
        f"values_le_{SENTINEL_MAX:g}": {"rollout": s.low_rollout, "trainer": s.low_trainer},
        "one_sided_zeros": {"rollout": s.zero_rollout, "trainer": s.zero_trainer},
        f"zero_run_tokens_min_run_{ZERO_RUN_MIN}": s.zero_run_tokens,
        "zero_run_share": share,
        "steps": dict(sorted(s.steps.items(), key=lambda kv: -kv[1])[:20]),
        "samples": samples_of(ctx.report.selection, s.examples),
        "non_finite": "rejected at ingest (with --skip-bad such samples are dropped and counted "
        f"as dropped_sequences: {ctx.report.excluded.get('dropped_sequences', 0)})",
    }
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
