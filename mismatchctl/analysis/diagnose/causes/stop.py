"""The stop handled differently by the two sides: the end-of-sequence or stop-string token."""

from __future__ import annotations

from mismatchctl.analysis.diagnose.advice import STOP_ADVICE
from mismatchctl.analysis.diagnose.causes.hypothesis import Support, Weighed, part_share
from mismatchctl.analysis.diagnose.check import evidence_of
from mismatchctl.analysis.diagnose.checks import turn_ends
from mismatchctl.analysis.diagnose.context import CheckModule, Context

KEY = "stop"
CLASS = "template"
LABEL = "stop handling (the turns' last token)"
SIGNATURE = (
    "the last model token of responses (or of every turn) hot against the other tokens and "
    "against the tokens just before it; often one side exactly 0.0 there"
)
TELLS_APART = (
    "a long-context fault makes the ends hot but the tokens before them too (the contrast "
    "with the seven before it stays near 1)"
)
EVERY_TOKEN = False
EXPLAINS = ("sequences",)
WITHIN = ("tool_turns", "code_path")
"""The parts that hold the stop's tokens: the responses' last token ends their last turn, which
follows a tool response in a multi-turn run, so a stop fault makes the later turns hot as a
whole. Beside the stop they are a second cause only for the excess left once the stop's is
taken out (their share less the stop's): ``stop-zero-last`` 99.2% against the stop's 98.9%,
``stop-zero-stop`` 97.8% against 96.9%, nothing left. A fault of the tool turns at every
position beside a stop keeps its own excess there and is still named. So does a code path's
part that holds the ends (``stop-unsampled``: turn positions 16-63, 99.8% against the stop's
99.7%); a path's part elsewhere is counted less the stop's share too, which can leave out a
path named after a louder stop."""
CORRECTION = "no: a correction would only reweight it"
READS: tuple[CheckModule, ...] = (turn_ends,)


def support(ctx: Context) -> Support | None:
    ends = ctx.result(turn_ends)
    found_e = evidence_of(ends, turn_ends.Evidence)
    if ends is None or ends.verdict == "n/a" or found_e is None:
        return None
    e = found_e.worst
    response = e.scope == "end of the response"
    found, mass = e.last, e.last_mass_share
    if response:
        end = e.response_end
        found, mass = (end.last, end.mass_share) if end is not None else (None, None)
    ratio = found.rate_ratio if found is not None else None
    ci = found.rate_ratio_ci if found is not None else None
    share = part_share(mass, ratio)
    filled = found_e.filled
    if filled is not None and filled.filled and not (share and share > 0.5):
        # the ends compared with themselves in the top probability bin: their K3 mass is the
        # filled stops' own (a 0.0 where the other side gives p <= 0.5)
        share, ratio, ci = e.last_mass_share, None, None
        response = False
    return Support(
        verdict=ends.verdict,
        share=share,
        because=ends.finding,
        checks=(turn_ends.NAME,),
        ratio=ratio,
        ci=None if ci is None else (ci[0], ci[1]),
        where="the responses' last token" if response else "every turn's last token",
    )


ECHO = 0.9
"""A stop whose tokens hold this share of a part's excess or more is named before the part: the
part is where the turns' ends sit (``stop-unsampled``: a stop byte appended to the responses
cut at the length limit puts every hot end at turn positions 16-63, a part holding 99.8% of
the excess at 2496x, the ends alone 99.7% at 7684x and 3178x the seven tokens before them).
A path's part makes no end sharp (``turn_ends.STOP_SHARP``), so the part and the stop are one
finding, the narrower the better told; a path beside a stop keeps more excess than the stop's
tokens hold and stays first, the stop a second cause beside it when it explains a quarter of
the excess (``weigh.ALSO_SHARE``)."""

PARTS = ("code_path", "tool_turns", "sequences")
"""The causes of a part of the run that a stop's tokens can lie in."""


def over_part(first: Weighed, alarmed: list[Weighed]) -> Weighed | None:
    """The stop, when the cause ranked first is a part of the run and the stop's tokens hold
    ``ECHO`` of its excess or more (the part is the stop seen from elsewhere); None else."""
    if first.cause.KEY not in PARTS:
        return None
    stop = next((w for w in alarmed if w.cause.KEY == KEY), None)
    if stop is None or (stop.support.share or 0.0) < ECHO * (first.support.share or 0.0):
        return None
    return stop


def advice(ctx: Context, found: Support) -> str:
    return STOP_ADVICE
