"""Sequences without a model token: a mask column that is not the response (loss) mask."""

from __future__ import annotations

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
from mismatchctl.analysis.diagnose.text import pct
from mismatchctl.stats import registry as M

NAME = "empty_sequences"
LAYER = DATA
TITLE = "Sequences without model tokens (empty mask)"
ORDER = 40
READS: tuple[CheckModule, ...] = ()


@dataclass(frozen=True)
class Thresholds:
    EMPTY_WARN_SHARE: float = 0.2
    """Sequences without a model token (fully masked) above this share: warn. Rejected or
    truncated samples are normal in small numbers; a fifth of them is worth checking the mask
    mapping."""

    EMPTY_FAIL_SHARE: float = 0.5
    """More than half the sequences empty: the mask column is most likely not a response
    mask."""


T = Thresholds()


@dataclass(frozen=True, kw_only=True)
class Evidence(CheckEvidence):
    """The sequences without a model token, every sequence (with them) and the share; the
    sequences dropped at ingest (``--skip-bad``)."""

    empty_sequences: int
    sequences: int = renamed(M.SEQUENCES.key)
    share: float
    dropped_sequences: int


def run(ctx: Context) -> Check:
    empty = ctx.report.excluded.get("empty_sequences", 0)
    whole = ctx.report.whole()
    total = empty + (whole.partial.sequences if whole else 0)
    share = empty / total if total else 0.0
    evidence = Evidence(
        empty_sequences=empty,
        sequences=total,
        share=share,
        dropped_sequences=ctx.report.excluded.get("dropped_sequences", 0),
    )
    verdict = grade(share >= T.EMPTY_FAIL_SHARE, share >= T.EMPTY_WARN_SHARE)
    advice = (
        "check that the mask column is the response (loss) mask, not attention_mask or an "
        "inverted mask: `mismatchctl runs show RUN` lists the columns used"
    )
    return Check(
        LAYER, NAME, TITLE, verdict,
        f"{empty} of {total} sequences ({pct(share)}) have no model token", evidence,
        advice_if(verdict, advice),
    )  # fmt: skip
