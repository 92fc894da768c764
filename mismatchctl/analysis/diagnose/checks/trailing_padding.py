"""Right padding stored as model tokens: sequences that end in a run of exact 0.0 on both sides
(a dump ingested without its mask; ``stats/sentinels.py``)."""

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
from mismatchctl.analysis.diagnose.samples import Sample, samples_of
from mismatchctl.analysis.diagnose.text import pct
from mismatchctl.stats import registry as M
from mismatchctl.stats.sentinels import PAD_RUN_MIN

NAME = "trailing_padding"
LAYER = DATA
TITLE = "Padding stored as model tokens"
ORDER = 50
READS: tuple[CheckModule, ...] = ()


@dataclass(frozen=True)
class Thresholds:
    TRAILING_ZERO_RUN: int = PAD_RUN_MIN
    """8 (``stats.sentinels.PAD_RUN_MIN``): a sequence whose last 8 or more stored tokens are
    exactly 0.0 on both sides ends in right padding stored as model tokens (a dump ingested
    without its mask). Real responses end in at most a few tokens that round to probability 1
    on both sides (a closing tag, the end-of-sequence token after a stop string); right padding
    runs for tens to thousands of positions. Any such sequence warns."""

    TRAILING_ZERO_FAIL_SHARE: float = 1e-3
    """Tokens inside such trailing runs above this share of all tokens: fail. Padding enters
    every per-token mean with r = 0 (vllm_kl, mean |r|, the perplexities), pulling it down by
    its share; from 0.1% that bias reaches the third significant digit the report prints."""


T = Thresholds()


@dataclass(frozen=True, kw_only=True)
class Evidence(CheckEvidence):
    """The sequences, those ending in ``min_run`` or more tokens at exact 0.0 on both sides and
    their tokens, those tokens' share of all, and some of the sequences."""

    sequences: int = renamed(M.SEQUENCES.key)
    padded_sequences: int
    padded_tokens: int
    token_share: float = renamed(M.TOKEN_SHARE.key)
    min_run: int
    samples: list[Sample]


def run(ctx: Context) -> Check:
    t = ctx.state.trailing
    share = t.padded_tokens / t.tokens if t.tokens else 0.0
    examples = [(run, step, seq, f"ends in {n} tokens at 0.0") for run, step, seq, n in t.examples]
    evidence = Evidence(
        sequences=t.sequences,
        padded_sequences=t.padded,
        padded_tokens=t.padded_tokens,
        token_share=share,
        min_run=T.TRAILING_ZERO_RUN,
        samples=samples_of(ctx.report.selection, examples),
    )
    verdict = grade(share >= T.TRAILING_ZERO_FAIL_SHARE, t.padded > 0)
    finding = (
        f"{t.padded} of {t.sequences} sequences end in >= {T.TRAILING_ZERO_RUN} tokens at exact "
        f"0.0 on both sides ({t.padded_tokens} tokens, {pct(share)} of the tokens)"
    )
    advice = (
        "right padding was stored as model tokens (a dump ingested without its mask): re-ingest "
        "it with the mask (`--map mask=<column>`); `mismatchctl runs show RUN` lists the columns "
        "used and the notes of each source"
    )
    return Check(LAYER, NAME, TITLE, verdict, finding, evidence, advice_if(verdict, advice))
