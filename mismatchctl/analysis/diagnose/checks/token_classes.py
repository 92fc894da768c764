"""Which kinds of tokens the worst tokens are (byte-fallback pieces, special tokens,
whitespace-only tokens), with a tokenizer: ``analysis/token_classes.py`` reads what it needs."""

from __future__ import annotations

from dataclasses import dataclass

from mismatchctl.analysis.diagnose.check import DATA, NA, Check, CheckEvidence, advice_if, grade
from mismatchctl.analysis.diagnose.context import CheckModule, Context
from mismatchctl.analysis.token_classes import ClassFinding
from mismatchctl.display import shown

NAME = "token_classes"
LAYER = DATA
TITLE = "Token classes: byte-fallback, special or whitespace tokens among the worst"
ORDER = 120
READS: tuple[CheckModule, ...] = ()


@dataclass(frozen=True)
class Thresholds:
    CLASS_TOP_SHARE: float = 0.01
    """The worst tokens whose class is counted (``build.py`` sizes the read by these three): the
    1% of the selection's model tokens with the largest |r| (as turn_edges' ``TOP_SHARE``),
    ..."""

    CLASS_TOP_LEAST: int = 50
    """... at least 50 (a count of fewer says nothing) ..."""

    CLASS_TOP_MOST: int = 500
    """... and at most 500: the top-k keeps its rows in memory per part in flight, and 500
    tokens already tell a 2x excess of a class holding 2% of the tokens (10 expected, 20 found)
    at 3 SE."""

    CLASS_FACTOR: float = 2.0
    """A class (byte-fallback, special, whitespace-only) is over-represented among the worst
    tokens when it holds at least twice the count that chance puts there at the same token
    probabilities (``LOCAL_FACTOR``'s reasoning: the smallest excess of the faults we know,
    above healthy drift), ..."""

    CLASS_Z: float = 3.0
    """... ``CLASS_Z`` standard errors above that expectation (the binomial variance of the
    count, summed over the probability bins: three classes tested, each at about one in a
    thousand by chance) ..."""

    CLASS_MIN: int = 5
    """... and it holds at least 5 of the worst tokens: a class of a few special tokens may
    expect 0.1 of them by chance, and 2 found would be 6 SE without being a cluster."""

    CLASS_FAIL_SHARE: float = 0.5
    """An over-represented class that holds half the worst tokens or more fails: the mismatch is
    mostly on that kind of token, not a tail of it. (Not a larger factor: the expectation is
    taken at the same token probabilities, where a class such as whitespace may hold a third of
    the likely tokens, so that no count reaches more than three times chance.)"""


T = Thresholds()


@dataclass(frozen=True, kw_only=True)
class TokenExample(CheckEvidence):
    """A token's text among the worst of a class, and how often."""

    text: str
    count: int


@dataclass(frozen=True, kw_only=True)
class ClassRow(CheckEvidence):
    """A class's count among the worst tokens against chance at the same token probabilities:
    the count, its expectation and standard error, their ratio (``enrichment``; None when none
    is expected) and z (None without variance), its share of the worst tokens and of every
    token, and its most frequent tokens."""

    worst: int
    expected: float
    se: float
    enrichment: float | None
    z: float | None
    share_of_worst: float
    share_of_tokens: float
    examples: list[TokenExample]


@dataclass(frozen=True, kw_only=True)
class Evidence(CheckEvidence):
    """The worst tokens classified, the classified tokens, those without a known id and those
    of runs without a tokenizer, each class (byte, special, whitespace) and the classes
    over-represented."""

    worst_tokens: int
    classified_tokens: int
    unclassified_tokens: int
    tokens_without_tokenizer: int
    classes: dict[str, ClassRow]
    over_represented: list[str]


WORDS = {"byte": "byte-fallback", "special": "special", "whitespace": "whitespace-only"}
ADVICE = (
    "a tokenization or rendering fault: the trainer does not score the engine's token ids in "
    "the engine's context (it re-tokenizes the decoded text, normalizes or strips whitespace, "
    "renders special tokens as text or drops them, merges byte-fallback pieces); feed the "
    "trainer the engine's token ids and compare both sides' ids around the listed tokens "
    "(`mismatchctl tokens {label} --sort abs-r`)"
)


def run(ctx: Context) -> Check:
    """Each class's count among the largest-|r| tokens against chance at the same token
    probabilities: over-represented at ``CLASS_FACTOR`` and ``CLASS_Z`` standard errors (with at
    least ``CLASS_MIN`` tokens); failing when it holds ``CLASS_FAIL_SHARE`` of them."""
    s = ctx.classes
    if s is None:
        return Check(LAYER, NAME, TITLE, NA, ctx.classes_note or _NO_TOKENIZER)
    if s.top < T.CLASS_TOP_LEAST:
        return Check(LAYER, NAME, TITLE, NA,
                     f"{s.top} classified tokens: too few to count (at least "
                     f"{T.CLASS_TOP_LEAST})")  # fmt: skip
    hot = [c for c in s.classes if _over(c)]
    fail = any(_fails(c) for c in hot)
    verdict = grade(fail, bool(hot))
    evidence = Evidence(
        worst_tokens=s.top,
        classified_tokens=s.tokens,
        unclassified_tokens=s.unclassified,
        tokens_without_tokenizer=s.without_tokenizer,
        classes={c.name: _row(c) for c in s.classes},
        over_represented=[c.name for c in hot],
    )
    finding = _finding(s.top, s.classes, hot)
    if s.unclassified or s.without_tokenizer:
        finding += (
            f" ({s.unclassified:,} tokens without a known id and {s.without_tokenizer:,} of runs "
            "without a tokenizer not classified)"
        )
    return Check(LAYER, NAME, TITLE, verdict, finding, evidence,
                 advice_if(verdict, ADVICE.format(label=ctx.label)))  # fmt: skip


_NO_TOKENIZER = (
    "no tokenizer remembered for the selection's runs: `--tokenizer PATH` (here, or with "
    "`tokens` or `show`) reads one and remembers it"
)


def _over(c: ClassFinding) -> bool:
    return c.worst >= T.CLASS_MIN and c.enrichment >= T.CLASS_FACTOR and c.z >= T.CLASS_Z


def _fails(c: ClassFinding) -> bool:
    return c.share_worst >= T.CLASS_FAIL_SHARE


def _row(c: ClassFinding) -> ClassRow:
    finite = c.expected > 0
    return ClassRow(
        worst=c.worst, expected=c.expected, se=c.se,
        enrichment=c.enrichment if finite else None, z=c.z if c.se > 0 else None,
        share_of_worst=c.share_worst, share_of_tokens=c.share_all,
        examples=[TokenExample(text=t, count=n) for t, n in c.examples],
    )  # fmt: skip


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
