"""A logit processor on one side only: a signed shift of ``r`` on the tokens seen before in the
response (a repetition, frequency or presence penalty), none elsewhere; the token ids shifted
most are listed beside (``stats/token_shift.py``)."""

from __future__ import annotations

from dataclasses import dataclass

from mismatchctl.analysis.diagnose.check import NA, SEMANTIC, Check, CheckEvidence, advice_if, grade
from mismatchctl.analysis.diagnose.checks import alignment, sentinels
from mismatchctl.analysis.diagnose.context import CheckModule, Context
from mismatchctl.analysis.diagnose.text import fmt, pct
from mismatchctl.stats.step_ids import drift
from mismatchctl.stats.token_shift import (
    IdShift,
    SeenShift,
    id_shift_share,
    seen_shift,
    shifted_ids,
)

NAME = "token_shift"
LAYER = SEMANTIC
TITLE = "A logit processor on one side (some tokens shifted)"
ORDER = 95
READS: tuple[CheckModule, ...] = (alignment, sentinels)


@dataclass(frozen=True)
class Thresholds:
    SEEN_SHIFT: float = 0.004
    SEEN_Z: float = 8.0
    """The tokens whose id occurred earlier in the response against the others at the same
    probability bin: a mean shift of 0.004 nats or more at 8 standard errors is a penalty on
    repeated tokens (repetition, frequency, presence) that one side applies. The calibration
    corpus' 34 healthy and improved runs stay within 0.0008 nats and 2.3 standard errors, its
    policy runs within 0.0025 and 3.6; a repetition penalty of 1.01 in the engine's logprobs
    gives 0.008 (z 25), a frequency penalty of 0.05 0.007 (z 24), a presence penalty of 0.5
    0.11 (z 55)."""

    FAIL_SHIFT: float = 0.04
    """A seen-token shift ten times ``SEEN_SHIFT``: fail."""

    ID_MIN_TOKENS: int = 30
    ID_SHIFT: float = 0.1
    ID_Z: float = 8.0
    """Token ids whose mean ``r`` is 0.1 nats or more from 0 at 8 standard errors (from 30 of
    their tokens) are listed as evidence, not judged: a logit bias or a bad-words mask shifts a
    few ids, but other weights shift some ids too (the corpus' wrong checkpoint: 3 ids carrying
    23% of the K3), so the ids alone do not tell a processor from a policy."""

    ID_WEIGHTS: float = 0.006
    """Each id's own shift carrying this share of ``r``'s variance or more: other weights (or
    another fixed function) move some ids' logits on their own, noise moves none. Read by the
    causes, not judged here: ``causes/step_change.py`` says how it was set, ``causes/drift.py``
    reads it with the shifts' drift."""

    ID_MODEL_SHARE: float = 0.15
    """A shift of its own for each token id (from ``ID_MIN_TOKENS`` of its tokens) carrying
    15% or more of ``r``'s variance (``stats/token_shift.id_shift_share``) is a logit processor
    on those ids, whatever the size of each shift: it is what leans the responses that hold
    them (``causes/semantics.py``), judged only where the ``policy_signs`` check alarms. The
    calibration corpus' healthy and improved runs give 0.004 at most, its runs on other weights
    (stale, partial, reloaded, a wrong checkpoint) 0.004-0.027, weights rounded to fp8 0.058 and
    an fp8 lm_head 0.099 (each id's row of the head rounded: a per-id shift too, the largest
    that is no logit processor); a logit bias of +0.05 on four ids 0.21, of +1.5 0.42. A
    bad-words mask is no per-id shift (0.024 and 0.048): it renormalises every kept token by the
    banned mass of its context."""


T = Thresholds()

ADVICE = (
    "one side applies a logit processor the other does not (a repetition, frequency or "
    "presence penalty; a logit bias or a bad-words mask) in the engine's processed "
    "logprobs: apply it in the trainer's logits too, or sample without it"
)


@dataclass(frozen=True, kw_only=True)
class Evidence(CheckEvidence):
    """The token ids shifted most (the first 20: ``stats/token_shift.IdShift``), the share of
    the K3 mass they carry, the shift of the tokens seen before in their response against
    the others (None: no such token), the share of ``r``'s variance a shift of its own for
    each id carries (``id_shift_share``; None: no id with enough tokens), and how far those
    shifts drift over the run: the first half of the steps' beyond the second half's, as a
    share of the first half's variance, and the two halves' correlation
    (``stats/step_ids.drift``; None: one step, or no id with enough tokens in both)."""

    shifted_ids: list[IdShift]
    shifted_mass_share: float
    seen_shift: SeenShift | None
    id_share: float | None = None
    id_drift: float | None = None
    id_drift_correlation: float | None = None


def run(ctx: Context) -> Check:
    if skipped := alignment.not_assessed(ctx, LAYER, NAME, TITLE):
        return skipped
    st = ctx.state.token_shift
    if len(st.n) == 0:
        return Check(LAYER, NAME, TITLE, NA, "the dump has no token ids")
    ids = shifted_ids(st, T.ID_MIN_TOKENS, T.ID_SHIFT, T.ID_Z)
    mass = sum(s.mass_share for s in ids)
    seen = seen_shift(st)
    share = id_shift_share(st, T.ID_MIN_TOKENS)
    moved = drift(ctx.state.step_ids)
    evidence = Evidence(
        shifted_ids=ids[:20],
        shifted_mass_share=mass,
        seen_shift=seen,
        id_share=share,
        id_drift=None if moved is None else moved.beyond,
        id_drift_correlation=None if moved is None else moved.correlation,
    )
    by_seen = seen is not None and abs(seen.shift) >= T.SEEN_SHIFT and abs(seen.z) >= T.SEEN_Z
    fail = by_seen and seen is not None and abs(seen.shift) >= T.FAIL_SHIFT
    verdict = grade(fail, by_seen)
    parts = []
    if seen is not None:
        parts.append(
            f"tokens seen before in their response: r {fmt(seen.shift)} nats from the others at "
            f"the same probabilities (z {fmt(seen.z)}; {pct(seen.seen_share)} of the tokens)"
        )
    parts.append(
        f"{len(ids)} token id(s) shifted by 0.1 nats or more at {T.ID_Z:g} SE, carrying "
        f"{pct(mass)} of the K3 mass"
        + (
            f" (id {ids[0].token_id}: mean r {fmt(ids[0].mean)}, {ids[0].tokens} tokens)"
            if ids
            else ""
        )
    )
    if share is not None:
        parts.append(
            f"each id's own shift carries {pct(share)} of r's variance"
            + (
                ""
                if moved is None
                else f" (drifting {pct(moved.beyond)} from the first half of the steps to the "
                f"second, correlated {moved.correlation:.2f})"
            )
        )
    finding = "; ".join(parts)
    if by_seen:
        finding += ": a penalty on repeated tokens (or another logit processor) on one side"
    return Check(LAYER, NAME, TITLE, verdict, finding, evidence, advice_if(verdict, ADVICE))
