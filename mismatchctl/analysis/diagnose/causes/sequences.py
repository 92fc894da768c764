"""Some requests: sequences hotter than the others of their step at the same token probabilities,
that no column of the dump names (one inference replica, rollouts across a weight update)."""

from __future__ import annotations

from mismatchctl.analysis.diagnose.causes.hypothesis import Support, part_share
from mismatchctl.analysis.diagnose.check import evidence_of, fired
from mismatchctl.analysis.diagnose.checks import hot_sequences
from mismatchctl.analysis.diagnose.context import CheckModule, Context

KEY = "sequences"
CLASS = "code path"
LABEL = "some requests"
SIGNATURE = (
    "a set of sequences hotter than the others of their step at the same turn kind and token "
    "probability, many more than are colder, no column naming them"
)
TELLS_APART = (
    "sequences that merely differ (by context or length) fill both tails alike; a fault of a "
    "named part (a gpu, long contexts) makes the sequences it hits hot too: that part is the "
    "cause"
)
EVERY_TOKEN = False
EXPLAINS = ()
CORRECTION = "a sequence-level correction (seq-mis) masks them; first find what they share"
READS: tuple[CheckModule, ...] = (hot_sequences,)


def support(ctx: Context) -> Support | None:
    hot = ctx.result(hot_sequences)
    found = evidence_of(hot, hot_sequences.Evidence)
    if hot is None or hot.verdict == "n/a" or found is None:
        return None
    e = found.worst
    ratio = e.rate_ratio
    return Support(
        verdict=hot.verdict,
        share=part_share(e.hot_mass_share, ratio) if fired(hot) else 0.0,
        because=hot.finding,
        checks=(hot_sequences.NAME,),
        ratio=ratio,
        where=f"{e.hot} of {e.tested} sequences",
    )


def advice(ctx: Context, found: Support) -> str:
    hot = ctx.result(hot_sequences)
    return (hot.next if hot is not None else None) or "list them: `mismatchctl tokens --sequences`"
