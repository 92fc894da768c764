"""The turns after tool responses: every later turn worse than the first turns at the same token
probabilities (how the engine takes in the tool output, long contexts)."""

from __future__ import annotations

from mismatchctl.analysis.diagnose.cause_evidence import later_by_position_advice
from mismatchctl.analysis.diagnose.causes.hypothesis import Support, part_share
from mismatchctl.analysis.diagnose.check import Check, evidence_of, fired
from mismatchctl.analysis.diagnose.checks import localized, tool_responses, turn_edges, turn_ends
from mismatchctl.analysis.diagnose.context import CheckModule, Context

KEY = "tool_turns"
CLASS = "code path"
LABEL = "the turns after tool responses"
SIGNATURE = (
    "every turn after a tool response hotter than the first turns at the same token "
    "probabilities, alike at every position within them (not only their first tokens)"
)
TELLS_APART = (
    "a rendering fault sits in the first tokens after the tool response and decays, unless the "
    "trainer's copy is re-tokenized so that every later token sees another context alike (then "
    "the two look the same: compare the tool output's token ids); a long-context path makes the "
    "far positions of the later turns hotter than their near ones"
)
EVERY_TOKEN = False
EXPLAINS = ("sequences",)
CORRECTION = (
    "no: fix how the two sides take in the tool output (another rendering of it, or a path of "
    "the engine); importance sampling would only reweight the damage"
)
"""The later turns hotter at the same token probabilities are a rate, not the low-probability
mix the tool responses bring (which a sequence-level correction tempers, BACKGROUND.md): a
rendering the trainer re-tokenized gives every later token another context (the Llama family's
``f-tpl-tag``, named here, docs/diagnose.md "Another family"), and a path of the engine computes
them otherwise; no correction makes either right."""
READS: tuple[CheckModule, ...] = (tool_responses, localized, turn_edges, turn_ends)


def support(ctx: Context) -> Support | None:
    tool, local = ctx.result(tool_responses), ctx.result(localized)
    e = evidence_of(tool, tool_responses.Evidence)
    if tool is None or tool.verdict == "n/a" or e is None:
        return None
    ratio, ci = e.same_probs_ratio, e.same_probs_ratio_ci
    s = e.later_token_share
    mass = later_mass_share(tool)
    local_e = evidence_of(local, localized.Evidence)
    by_position = fired(local) and local is not None and local_e is not None and local_e.later_turns
    own = fired(tool) and not e.code_path and not e.template
    hit = own or by_position
    return Support(
        verdict=tool.verdict if own else local.verdict if by_position and local else "ok",
        share=part_share(mass, ratio) if hit else 0.0,
        because=tool.finding if own or not by_position else local.finding,
        checks=tuple(c.name for c in ((tool,) if own else (local,)) if c is not None),
        ratio=ratio,
        ci=None if ci is None else (ci[0], ci[1]),
        claim=s,
        where="the turns after tool responses",
        against=_narrower(ctx),
    )


def later_mass_share(tool: Check) -> float | None:
    """The share of the K3 mass in the turns after tool responses (the tool_responses check's
    evidence)."""
    e = evidence_of(tool, tool_responses.Evidence)
    if e is None:
        return None
    first, later, s = e.first_vllm_kl, e.later_vllm_kl, e.later_token_share
    if first is None or later is None or s is None:
        return None
    total = first * (1 - s) + later * s
    return later * s / total if total > 0 else None


def _narrower(ctx: Context) -> tuple[str, ...]:
    """A narrower part of the later turns that holds their excess: the later turns are then
    that part seen as a whole."""
    found = []
    edges, ends = ctx.result(turn_edges), ctx.result(turn_ends)
    edges_e = evidence_of(edges, turn_edges.Evidence)
    if fired(edges) and edges_e is not None and edges_e.template:
        found.append(
            "their first tokens after the tool response are hotter than the rest (a "
            "rendering fault's burst: turn_edges)"
        )
    if fired(ends):
        found.append("their excess sits on the turns' last token (the stop: turn_ends)")
    return tuple(found)


def advice(ctx: Context, found: Support) -> str:
    if found.checks and found.checks[0] == localized.NAME:  # found by position only
        return later_by_position_advice(ctx)
    tool = ctx.result(tool_responses)
    return (tool.next if tool is not None and tool.next else None) or (
        "look at the worst later turns (`mismatchctl tokens "
        f"{ctx.label} --where turn_kind=later`) and how both sides take in the tool output"
    )
