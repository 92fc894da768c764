"""Some requests: sequences hotter than the others of their step at the same token probabilities,
that no column of the dump names (one inference replica, rollouts across a weight update)."""

from __future__ import annotations

from mismatchctl.analysis.diagnose.causes.hypothesis import Support, part_share, worst_of
from mismatchctl.analysis.diagnose.check import evidence_of, fired
from mismatchctl.analysis.diagnose.checks import hot_sequences, localized, policy_signs
from mismatchctl.analysis.diagnose.context import CheckModule, Context
from mismatchctl.stats.sign_coherence import off_hot, sign_coherence

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


def others_lean(ctx: Context) -> bool:
    """Whether in some run the sequences that are not hot lean at the policy_signs check's
    thresholds (``sign_coherence.off_hot``): a lean of every response beside the hot requests.
    A setting or weights of a third of the requests leave the others at 0.90-1.26 (their hot
    ones lean at their step's rates, the others do not); a rotary base far off, whose long
    requests are hot, 1.31; the policy runs of the corpus, with none or a few hot, 1.66-2.14."""
    t = policy_signs.T
    for state in ctx.state.hot_sequences.runs().values():
        found = sign_coherence(off_hot(state))
        if (
            found.tested
            and found.p_value < t.SIGN_ALPHA
            and found.dispersion >= t.SIGN_DISPERSION_WARN
        ):
            return True
    return False


def leaning(ctx: Context) -> bool:
    """The hot requests' responses lean one way (the policy_signs check): they, not every
    response, carry the lean (``policy._some_requests``)."""
    return in_requests(ctx) and fired(ctx.result(policy_signs))


def advice(ctx: Context, found: Support) -> str:
    """The hot_sequences check's next step, after what their lean says where they lean (the
    policy_signs check fires)."""
    hot = ctx.result(hot_sequences)
    found = (hot.next if hot is not None else None) or "list them: `mismatchctl tokens --sequences`"
    if not leaning(ctx):
        return found
    return (
        "their responses lean one way (the policy_signs check): those requests were sampled "
        "with other weights (a replica behind, rollouts that straddled a weight update) or with "
        "a sampling setting that only they carry (a temperature, top-p, top-k, min-p or a "
        "penalty per request): compare their requests' sampling parameters and weight "
        f"versions with the others'; {found}"
    )
