"""One sequence as sections: its facts (step, ids, tokens, turns, K3, max |r|) and the heat
text (each token coloured by |r|, a tooltip with its numbers, prompt and tool responses as
marked gaps with their length, a tool response's own tokens as text when ingest kept them)."""

from __future__ import annotations

import bisect
import math
from typing import TYPE_CHECKING, Any

from mismatchctl import schema as S
from mismatchctl.analysis import sections as sec
from mismatchctl.analysis.routing.kinds import FLIPPED

if TYPE_CHECKING:
    from mismatchctl.analysis.show.show import Show

# |r| levels: below 1e-3 unmarked, then 1e-3, 1e-2, 0.1, 0.5 and 1 (every level a colour)
HEAT_EDGES = (1e-3, 1e-2, 0.1, 0.5, 1.0)
HEAT_LEGEND = ["< 0.001", "0.001-0.01", "0.01-0.1", "0.1-0.5", "0.5-1", ">= 1"]
# with MoE routes: tokens whose producing position's experts differ on some layer are marked
FLIP_MARK = "underlined: routing flipped (the producing position's experts differ on a layer)"


def level(r: float) -> int:
    """The heat level of a token's r (``len(HEAT_EDGES)`` for |r| >= 1 or not finite)."""
    a = abs(r)
    if not math.isfinite(a):
        return len(HEAT_EDGES)
    return sum(a >= e for e in HEAT_EDGES)


def tip(t: dict[str, Any]) -> str:
    out = (
        f"position {t['position']}, turn {t['turn']}, id {t['token_id']}: "
        f"p_rollout {t['p_rollout']:.4g}, p_trainer {t['p_trainer']:.4g}, "
        f"r {t['log_ratio']:.4g}, K3 {t['k3']:.4g}"
    )
    if "routing" in t:
        layer = t.get("first_flip_layer")
        out += f", routing {t['routing']}" + (
            f" (first differing layer {layer})" if layer is not None else ""
        )
    return out


def flip_mark(tokens: list[dict[str, Any]]) -> str:
    """The legend entry of flipped tokens, for a sequence with routes ("" without)."""
    return FLIP_MARK if any("routing" in t for t in tokens) else ""


def heat_items(s: Show) -> list[sec.HeatToken | sec.HeatGap]:
    """Tokens in position order; a gap before the first (the prompt) and wherever positions
    jump (a tool response before a later turn), with the tool response's text when known."""
    sep = "" if s.tokenizer else " "
    items: list[sec.HeatToken | sec.HeatGap] = []
    prompt = s.sequence.get(S.PROMPT_TOKENS) or 0
    if prompt:
        items.append(sec.HeatGap(f"prompt: {prompt:,} tokens"))
    masked = [m["position"] for m in s.masked]
    prev = None
    for t in s.tokens:
        if prev is not None and t["position"] - prev["position"] > 1:
            n = t["position"] - prev["position"] - 1
            label = f"tool response: {n:,} tokens, then turn {t['turn']}"
            lo = bisect.bisect_right(masked, prev["position"])
            hi = bisect.bisect_left(masked, t["position"])
            text = sep.join(m["text"] for m in s.masked[lo:hi]) if hi > lo else None
            items.append(sec.HeatGap(label, text))
        flipped = t.get("routing") == FLIPPED
        items.append(sec.HeatToken(t["text"] + sep, level(t["log_ratio"]), tip(t), flipped))
        prev = t
    return items


def show_sections(s: Show) -> list[sec.Section]:
    seq = s.sequence
    toks = s.tokens
    k3 = sum(t["k3"] for t in toks)
    worst = max(toks, key=lambda t: abs(t["log_ratio"]), default=None)
    facts = [
        sec.Fact("run", s.run, sec.Kind.LABEL),
        sec.Fact("sample id", s.sample_id, sec.Kind.LABEL),
        sec.Fact("step", seq[S.STEP], sec.Kind.ID),
        sec.Fact("seq", seq[S.SEQ], sec.Kind.ID),
        sec.Fact("model tokens", seq[S.MODEL_TOKENS], sec.Kind.COUNT),
        sec.Fact("turns", seq[S.TURNS], sec.Kind.COUNT),
        sec.Fact("tool tokens", seq[S.TOOL_TOKENS], sec.Kind.COUNT),
        sec.Fact("K3 sum", k3),
        sec.Fact("vllm_kl of the sequence", k3 / len(toks) if toks else None),
        sec.Fact("sum r", sum(t["log_ratio"] for t in toks)),
    ]
    if worst is not None:
        facts.append(sec.Fact("max |r|", abs(worst["log_ratio"]),
                            remark=f"at position {worst['position']}"))  # fmt: skip
    if s.candidates > 1:
        facts.append(sec.Fact("sequences with this sample id", s.candidates, sec.Kind.COUNT,
                            remark=f"this is --index {s.index}"))  # fmt: skip
    if s.tokenizer:
        facts.append(sec.Fact("tokenizer", s.tokenizer, sec.Kind.LABEL))
    out: list[sec.Section] = [sec.Facts("show-summary", f"Sequence {s.sample_id}", facts)]
    if toks:
        items = heat_items(s)
        how = (
            "Each token on a background by |r| = |trainer - rollout logprob|; the HTML page's "
            + (
                "tooltips give its position, turn, id, both probabilities, r, K3 and its "
                "producing position's MoE routing. "
                if flip_mark(toks)
                else "tooltips give its position, turn, id, both probabilities, r and K3. "
            )
            + ("Token ids are shown (no tokenizer: --tokenizer PATH). " if not s.tokenizer else "")
            + _tool_how(s, items)
        )
        out.append(
            sec.Heat("show-heat", "Tokens", items, HEAT_LEGEND, how.strip(), flip_mark(toks))
        )
    else:
        out.append(sec.Lines("show-empty", None, [sec.Line("the sequence has no model tokens")]))
    if s.notes:
        out.append(sec.Lines("show-notes", None, [sec.Line(f"note: {n}", "note") for n in s.notes]))
    return out


def _tool_how(s: Show, items: list[sec.HeatToken | sec.HeatGap]) -> str:
    """How the tool responses are shown: as text under their marker, or by their length only."""
    if any(isinstance(i, sec.HeatGap) and i.text is not None for i in items):
        return "A tool response's tokens (masked, not scored) follow its marker, in italics."
    if s.sequence.get(S.TOOL_TOKENS):
        return (
            "Tool responses are shown by their length: their token ids were not kept at ingest "
            "(a dump without token ids, or --no-keep-masked)."
        )
    return ""
