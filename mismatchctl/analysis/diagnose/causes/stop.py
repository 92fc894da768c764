"""The stop handled differently by the two sides: the end-of-sequence or stop-string token."""

from __future__ import annotations

from mismatchctl.analysis.diagnose.advice import STOP_ADVICE
from mismatchctl.analysis.diagnose.causes.hypothesis import Support, part_share
from mismatchctl.analysis.diagnose.check import CheckModule
from mismatchctl.analysis.diagnose.checks import turn_ends
from mismatchctl.analysis.diagnose.context import Context

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
CORRECTION = "no: a correction would only reweight it"
READS: tuple[CheckModule, ...] = (turn_ends,)


def support(ctx: Context) -> Support | None:
    ends = ctx.result(turn_ends)
    if ends is None or ends.verdict == "n/a":
        return None
    e = ends.evidence
    response = e.get("scope") == "end of the response"
    part = (e.get("response_end") or {}) if response else {"last": e.get("last")}
    found = part.get("last") or {}
    ratio, ci = found.get("rate_ratio"), found.get("rate_ratio_ci")
    mass = part.get("mass_share") if response else e.get("last_mass_share")
    return Support(
        verdict=ends.verdict,
        share=part_share(mass, ratio),
        because=ends.finding,
        checks=(turn_ends.NAME,),
        ratio=ratio,
        ci=None if ci is None else (ci[0], ci[1]),
        where="the responses' last token" if response else "every turn's last token",
    )


def advice(ctx: Context, found: Support) -> str:
    return STOP_ADVICE
