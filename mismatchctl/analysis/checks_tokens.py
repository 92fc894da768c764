"""The data-integrity check of which kinds of tokens the worst tokens are (byte-fallback pieces,
special tokens, whitespace-only tokens), with a tokenizer: ``analysis/token_classes.py`` reads
what it needs; thresholds in ``diagnose_thresholds`` ("token classes")."""

from __future__ import annotations

from typing import Any

from mismatchctl.analysis import diagnose_thresholds as T
from mismatchctl.analysis.diagnose_base import DATA, NA, Check, Context, advice_if, grade
from mismatchctl.analysis.token_classes import ClassFinding
from mismatchctl.display import shown

TITLE = "Token classes: byte-fallback, special or whitespace tokens among the worst"
WORDS = {"byte": "byte-fallback", "special": "special", "whitespace": "whitespace-only"}
ADVICE = (
    "a tokenization or rendering fault: the trainer does not score the engine's token ids in "
    "the engine's context (it re-tokenizes the decoded text, normalizes or strips whitespace, "
    "renders special tokens as text or drops them, merges byte-fallback pieces); feed the "
    "trainer the engine's token ids and compare both sides' ids around the listed tokens "
    "(`mismatchctl tokens {label} --sort abs-r`)"
)


def token_classes(ctx: Context) -> Check:
    """Each class's count among the largest-|r| tokens against chance at the same token
    probabilities: over-represented at ``CLASS_FACTOR`` and ``CLASS_Z`` standard errors (with at
    least ``CLASS_MIN`` tokens); failing when it holds ``CLASS_FAIL_SHARE`` of them."""
    s = ctx.classes
    if s is None:
        return Check(DATA, "token_classes", TITLE, NA, ctx.classes_note or _NO_TOKENIZER)
    if s.top < T.CLASS_TOP_LEAST:
        return Check(DATA, "token_classes", TITLE, NA,
                     f"{s.top} classified tokens: too few to count (at least "
                     f"{T.CLASS_TOP_LEAST})")  # fmt: skip
    hot = [c for c in s.classes if _over(c)]
    fail = any(_fails(c) for c in hot)
    verdict = grade(fail, bool(hot))
    evidence: dict[str, Any] = {
        "worst_tokens": s.top,
        "classified_tokens": s.tokens,
        "unclassified_tokens": s.unclassified,
        "tokens_without_tokenizer": s.without_tokenizer,
        "classes": {c.name: _row(c) for c in s.classes},
        "over_represented": [c.name for c in hot],
    }
    finding = _finding(s.top, s.classes, hot)
    if s.unclassified or s.without_tokenizer:
        finding += (
            f" ({s.unclassified:,} tokens without a known id and {s.without_tokenizer:,} of runs "
            "without a tokenizer not classified)"
        )
    return Check(DATA, "token_classes", TITLE, verdict, finding, evidence,
                 advice_if(verdict, ADVICE.format(label=ctx.label)))  # fmt: skip


_NO_TOKENIZER = (
    "no tokenizer remembered for the selection's runs: `--tokenizer PATH` (here, or with "
    "`tokens` or `show`) reads one and remembers it"
)


def _over(c: ClassFinding) -> bool:
    return c.worst >= T.CLASS_MIN and c.enrichment >= T.CLASS_FACTOR and c.z >= T.CLASS_Z


def _fails(c: ClassFinding) -> bool:
    return c.share_worst >= T.CLASS_FAIL_SHARE


def _row(c: ClassFinding) -> dict[str, Any]:
    finite = c.expected > 0
    return {
        "worst": c.worst, "expected": c.expected, "se": c.se,
        "enrichment": c.enrichment if finite else None, "z": c.z if c.se > 0 else None,
        "share_of_worst": c.share_worst, "share_of_tokens": c.share_all,
        "examples": [{"text": t, "count": n} for t, n in c.examples],
    }  # fmt: skip


def _finding(top: int, classes: list[ClassFinding], hot: list[ClassFinding]) -> str:
    if not hot:
        counts = "; ".join(
            f"{WORDS[c.name]} {c.worst} ({c.expected:.1f} expected)" for c in classes
        )
        return (
            f"no class is over-represented among the {top:,} largest-|r| tokens at the same "
            f"token probabilities: {counts}"
        )
    parts = []
    for c in hot:
        ex = ", ".join(f"{shown(repr(t), 24)} x{n}" for t, n in c.examples)
        parts.append(
            f"{WORDS[c.name]} tokens: {c.worst} of the {top:,} largest-|r| tokens "
            f"({c.share_worst:.1%}; {c.share_all:.1%} of all model tokens), {c.expected:.1f} "
            f"expected at the same token probabilities ({_times(c)}, {_se(c)}); e.g. {ex}"
        )
    return "; ".join(parts) + ": the worst tokens cluster on a kind of token"


def _times(c: ClassFinding) -> str:
    return f"{c.enrichment:.1f}x" if c.expected > 0 else "none expected"


def _se(c: ClassFinding) -> str:
    return f"{c.z:.0f} SE" if c.se > 0 else "no variance"


__all__ = ["token_classes"]
