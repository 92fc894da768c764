"""A chat-template or rendering fault: the trainer's context around tool responses is not the one
the engine sampled from."""

from __future__ import annotations

from mismatchctl.analysis.diagnose.advice import TEMPLATE_ADVICE
from mismatchctl.analysis.diagnose.causes import prefill
from mismatchctl.analysis.diagnose.causes.hypothesis import Support, part_share, worst_of
from mismatchctl.analysis.diagnose.causes.tool_turns import later_mass_share
from mismatchctl.analysis.diagnose.check import Check, evidence_of, fired
from mismatchctl.analysis.diagnose.checks import token_classes, tool_responses, turn_edges
from mismatchctl.analysis.diagnose.context import CheckModule, Context

KEY = "template"
CLASS = "template"
LABEL = "chat template or rendering"
SIGNATURE = (
    "a burst in the first tokens after each tool response (tens of x), decaying with the "
    "distance, the first turns' starts untouched; the largest-|r| tokens crowd there"
)
TELLS_APART = (
    "engine numerics (prefill then decode) touch every turn start alike and stay within the "
    "healthy range of a few x; a long-context code path grows with the KV position, not from "
    "the turn start; a prefill path makes the burst too, but at the start of every prefill, "
    "the first turns' longer prompts' too, which no tool response reaches (prefill.py)"
)
EVERY_TOKEN = False
EXPLAINS = ("tool_turns", "sequences")
CORRECTION = "no: no importance correction fixes a different context"
READS: tuple[CheckModule, ...] = (turn_edges, token_classes, tool_responses)


def support(ctx: Context) -> Support | None:
    edges, classes = ctx.result(turn_edges), ctx.result(token_classes)
    e = evidence_of(edges, turn_edges.Evidence)
    if fired(classes) and classes is not None and (e is None or not e.template):
        return _classes(classes)
    if edges is None or edges.verdict == "n/a" or e is None:
        return None
    start = e.later_start
    ratio = start.rate_ratio if start is not None else None
    ci = start.rate_ratio_ci if start is not None else None
    verdict = worst_of([edges, classes if fired(classes) else None])
    share = part_share(e.edge_mass_share, ratio)
    tool = ctx.result(tool_responses)
    tool_e = evidence_of(tool, tool_responses.Evidence)
    if e.template and fired(tool) and tool is not None and tool_e is not None:
        # a different context changes every token after it: the burst at the turn start is
        # the tell-tale, the later turns' whole excess the fault's
        later = part_share(later_mass_share(tool), tool_e.same_probs_ratio)
        share = max(share or 0.0, later or 0.0)
    starts = prefill.prefill_starts(ctx) if e.template else None
    return Support(
        against=(prefill.sentence(starts),) if starts is not None and prefill.hot(starts) else (),
        verdict=edges.verdict if e.template else verdict if fired(classes) else "ok",
        share=share,
        because=edges.finding,
        checks=(turn_edges.NAME, *([token_classes.NAME] if fired(classes) else [])),
        ratio=ratio,
        ci=None if ci is None else (ci[0], ci[1]),
        where=f"the first {e.edge_tokens} tokens after each tool response",
    )


def _classes(classes: Check) -> Support:
    """A kind of token (whitespace, byte fallback, special) over-represented among the worst:
    what a re-tokenization does; its share is the class's share of the worst tokens beyond
    what chance puts there (a count, not a mass)."""
    e = evidence_of(classes, token_classes.Evidence)
    found = e.classes if e is not None else {}
    over = e.over_represented if e is not None else []
    share = 0.0
    for name in over:
        c = found.get(name)
        worst, expected = (c.worst or 0, c.expected or 0.0) if c is not None else (0, 0.0)
        if c is not None and worst > 0:
            share = max(share, (c.share_of_worst or 0.0) * max(0.0, 1 - expected / worst))
    return Support(
        verdict=classes.verdict,
        share=share,
        because=classes.finding,
        checks=(token_classes.NAME,),
        where=", ".join(over) + " tokens",
        variant="a re-tokenization: one kind of token among the worst",
    )


def advice(ctx: Context, found: Support) -> str:
    if found.checks == (token_classes.NAME,):
        classes = ctx.result(token_classes)
        if classes is not None and classes.next:
            return classes.next
    return TEMPLATE_ADVICE
