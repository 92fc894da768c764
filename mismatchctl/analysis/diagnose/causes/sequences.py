"""Some requests: sequences hotter than the others of their step at the same token probabilities,
that no column of the dump names (one inference replica, rollouts across a weight update)."""

from __future__ import annotations

from collections.abc import Callable

from mismatchctl.analysis.diagnose.causes.hypothesis import Support, part_share, worst_of
from mismatchctl.analysis.diagnose.check import FAIL, WARN, evidence_of, fired
from mismatchctl.analysis.diagnose.checks import hot_sequences, localized, policy_signs
from mismatchctl.analysis.diagnose.context import CheckModule, Context
from mismatchctl.analysis.diagnose.text import pct
from mismatchctl.stats.hot_sequences import HotSequenceState, summarize
from mismatchctl.stats.sign_coherence import SignCoherence, off_hot, sign_coherence

KEY = "sequences"
CLASS = "code path"
LABEL = "some requests"
SIGNATURE = (
    "a set of sequences hotter than the others of their step at the same turn kind and token "
    "probability, many more than are colder, no column naming them (a replica, rollouts across "
    "an update, a sampling setting of some requests: their responses may lean, the others' do "
    "not)"
)
TELLS_APART = (
    "sequences that merely differ (by context or length) fill both tails alike; a fault of a "
    "named part (a gpu, long contexts) makes the sequences it hits hot too: that part is the "
    "cause; other weights for every request lean every response, not only the hot ones"
)
EVERY_TOKEN = False
EXPLAINS = ()
CORRECTION = "a sequence-level correction (seq-mis) masks them; first find what they share"
READS: tuple[CheckModule, ...] = (hot_sequences, policy_signs, localized)


def support(ctx: Context) -> Support | None:
    hot = ctx.result(hot_sequences)
    found = evidence_of(hot, hot_sequences.Evidence)
    if hot is None or hot.verdict == "n/a" or found is None:
        return None
    e = found.worst
    ratio = e.rate_ratio
    signs = ctx.result(policy_signs) if leaning(ctx) else None
    return Support(
        verdict=worst_of([hot, signs]),
        share=part_share(e.hot_mass_share, ratio) if fired(hot) else 0.0,
        because=hot.finding + (f"; {signs.finding}" if signs is not None else ""),
        checks=(hot_sequences.NAME, *((policy_signs.NAME,) if signs is not None else ())),
        ratio=ratio,
        where=f"{e.hot} of {e.tested} sequences",
        against=_named_part(ctx),
    )


def _named_part(ctx: Context) -> tuple[str, ...]:
    """Against: the localized check names a part of the run, which the hot requests may be (a
    template fault on a third of the requests makes them hot and their turns' starts hotter:
    both explain 95% of the excess). This cause is the requests no column names; a part that
    is named is weighed by its own cause, whose fault sets this one off (``EXPLAINS``)."""
    local = ctx.result(localized)
    if not fired(ctx.result(hot_sequences)) or not fired(local):
        return ()
    return (
        "the localized check names a part of the run the hot requests may be: the cause of "
        "that part is weighed for them",
    )


def in_requests(ctx: Context) -> bool:
    """Some requests are hotter than the others of their step (the hot_sequences check), no
    part of the run is named (no code path's check fires) and the other requests' responses do
    not lean (:func:`others_lean`): what leans, leans in them."""
    if not fired(ctx.result(hot_sequences)):
        return False
    if any(fired(ctx.result(c)) for c in policy_signs.CODE_PATH_CHECKS):
        return False
    return not others_lean(ctx)


def hot_requests(ctx: Context) -> hot_sequences.Sequences | None:
    """The ``hot_sequences`` check's worst run's evidence when some requests are hotter than
    the others of their step and what stands out is theirs (:func:`in_requests`), else None."""
    found = evidence_of(ctx.result(hot_sequences), hot_sequences.Evidence)
    return None if found is None or not in_requests(ctx) else found.worst


def some_requests(ctx: Context) -> tuple[str, ...]:
    """Against a faint truncation's whole-run claim (``semantics._faint_only``): some requests
    are hotter than the others of their step, counted as ``requests_outside`` counts them
    (``hot_sequences.many_hot``: the counts of its pattern, not its rate), so the mass may be
    removed in them alone, a setting that only they carry, or they are another cause's part;
    either way not every token's. The ``sequences`` cause, a part and the second pass weigh
    them. Top-p on a third of the requests beside a split-KV path on another third: 192 of 576
    sequences hot, 1 cold, at 1.3x the others' rate (under the check's alarm)."""
    found = [summarize(st, examples=0) for st in ctx.state.hot_sequences.runs().values()]
    many = [h for h in found if hot_sequences.many_hot(h)]
    if not many:
        return ()
    e = max(many, key=lambda h: h.hot / max(h.tested, 1))
    return (
        f"{e.hot} of {e.tested} sequences are hotter than the others of their step, {e.cold} "
        "colder: the mass may be removed in some requests only, a setting that they alone "
        "carry, not at every token",
    )


def others_lean(ctx: Context) -> bool:
    """Whether in some run the sequences that are not hot lean at the policy_signs check's
    thresholds (``sign_coherence.off_hot``): a lean of every response beside the hot requests.
    A setting or weights of a third of the requests leave the others at 0.90-1.26 (their hot
    ones lean at their step's rates, the others do not); a rotary base far off, whose long
    requests are hot, 1.31; the policy runs of the corpus, with none or a few hot, 1.66-2.14."""
    return any(_leans(sign_coherence(off_hot(s))) for s in ctx.state.hot_sequences.runs().values())


def requests_outside(
    ctx: Context, restrict: Callable[[HotSequenceState], HotSequenceState], text: str
) -> Support | None:
    """Outside a named part (``restrict``: its outside's tokens, ``outside.Outside``), the lean
    of some requests: the responses lean there at the ``policy_signs`` check's thresholds, some
    requests are hotter than the others of their step there as the ``hot_sequences`` check
    counts them (``SEQ_HOT_MIN``, ``SEQ_HOT_SHARE``, ``SEQ_ASYMMETRY`` times the cold ones; not
    its rate, which the part's own hot sequences blur), and the others do not lean
    (``off_hot``): the lean is between those requests and the rest, as a setting or weights of
    some requests make it, not of every response. A top-p truncation on a third of the requests
    beside a split-KV path on another third: in the first turns, outside the path's part, 171 of
    536 sequences hot and none cold, the responses leaning 6.15 and the others 0.98. The
    corpus's policy runs beside a path (``combo-stale-splitkv*``, ``combo-window-fp8kv``) have
    0-6 hot: every response leans. None when no run's outside shows it."""
    t = policy_signs.T
    best: tuple[SignCoherence, int, int] | None = None
    for state in ctx.state.hot_sequences.runs().values():
        kept = restrict(state)
        found = sign_coherence(kept)
        if not _leans(found):
            continue
        hot = summarize(kept, examples=0)
        if not hot_sequences.many_hot(hot) or _leans(sign_coherence(off_hot(kept))):
            continue
        if best is None or found.dispersion > best[0].dispersion:
            best = (found, hot.hot, hot.tested)
    if best is None:
        return None
    found, hot_count, tested = best
    return Support(
        verdict=FAIL if found.dispersion >= t.SIGN_DISPERSION_FAIL else WARN,
        share=None,
        because=(
            f"outside the named part, in {text}: {hot_count} of {tested} sequences are hotter "
            "than the others of their step, and the count of tokens with r > 0 in each "
            f"sequence spreads {found.dispersion:.2f}x as much as independent signs give "
            f"(chi-square p = {found.p_value:.2g}; {pct(found.extreme_share)} at |z| > 3) "
            "while the other sequences do not lean: those requests lean, not every response"
        ),
        checks=(hot_sequences.NAME, policy_signs.NAME),
        where=f"{hot_count} of {tested} sequences, in {text}",
        variant=LEANING,
    )


LEANING = "some requests leaning one way"


def _leans(found: SignCoherence) -> bool:
    t = policy_signs.T
    return (
        bool(found.tested)
        and found.p_value < t.SIGN_ALPHA
        and (found.dispersion >= t.SIGN_DISPERSION_WARN)
    )


def leaning(ctx: Context) -> bool:
    """The hot requests' responses lean one way (the policy_signs check): they, not every
    response, carry the lean (``policy._some_requests``)."""
    return in_requests(ctx) and fired(ctx.result(policy_signs))


def advice(ctx: Context, found: Support) -> str:
    """The hot_sequences check's next step, after what their lean says where they lean (the
    policy_signs check fires, or the lean outside a named part: ``requests_outside``)."""
    hot = ctx.result(hot_sequences)
    step = (hot.next if hot is not None else None) or "list them: `mismatchctl tokens --sequences`"
    if not leaning(ctx) and found.variant != LEANING:
        return step
    return (
        "their responses lean one way (the policy_signs check): those requests were sampled "
        "with other weights (a replica behind, rollouts that straddled a weight update) or with "
        "a sampling setting that only they carry (a temperature, top-p, top-k, min-p or a "
        "penalty per request): compare their requests' sampling parameters and weight "
        f"versions with the others'; {step}"
    )
