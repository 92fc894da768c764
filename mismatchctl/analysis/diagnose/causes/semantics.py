"""Logprob semantics: the two sides compute different distributions (raw against processed
logprobs, a temperature, a truncation or a logit processor on one side)."""

from __future__ import annotations

from collections.abc import Callable

from mismatchctl.analysis.diagnose.advice import PROCESSED_HINT
from mismatchctl.analysis.diagnose.causes import code_path, sequences
from mismatchctl.analysis.diagnose.causes.hypothesis import Support, worst_of
from mismatchctl.analysis.diagnose.causes.processor import mass_removed, sentence
from mismatchctl.analysis.diagnose.check import FAIL, WARN, Check, evidence_of, fired
from mismatchctl.analysis.diagnose.checks import (
    offset,
    policy_signs,
    temperature,
    token_shift,
    top_p,
)
from mismatchctl.analysis.diagnose.context import CheckModule, Context
from mismatchctl.analysis.diagnose.text import pct
from mismatchctl.stats.hot_sequences import NONZERO, POSITIVE, HotSequenceState, line_rows
from mismatchctl.stats.line_slope import LineSlope, line_share, line_slope

KEY = "semantics"
CLASS = "semantics"
LABEL = "logprob semantics (the two sides compute different distributions)"
SIGNATURE = (
    "a signed, deterministic transform at every token from the first step: r linear in the "
    "logprob (raw logprobs, a temperature: slope 1/T - 1), r <= 0 on every kept token with a "
    "mean ratio equal to the kept mass (top-p, top-k, min-p renormalised on one side), or a "
    "signed shift on the tokens a logit processor touches"
)
TELLS_APART = (
    "another policy moves r both ways, its mean ratio stays 1 and it has no slope against the "
    "logprob; numeric noise is symmetric"
)
EVERY_TOKEN = True
EXPLAINS = ("sequences", "policy", "tool_turns", "code_path", "precision")
"""A transform at every token raises every token's K3 over a baseline alike, with no part hotter
and no response leaning: exactly the precision's evidence (a uniform excess), which is therefore
no second cause beside it. A slope against the logprob (raw logprobs, a temperature) moves the
rare tokens most: the low-probability concentration the precision reads without a baseline is
its too. In the corpus the semantic faults that had the precision named beside them over ``h-b``
are 1.9-1273x its rate at the same token mix, "spread uniformly" (the ``baseline`` check), and
``sem-temp-loud`` alone holds 27% of its K3 in the 0.7% of tokens under p = 0.001.
The fitted transform cannot be peeled from ``r`` (``peel.py``): a temperature's line in the
logprob explains 25-55% of ``r``'s variance, the rest being each context's log-partition, which
the dumps do not hold. The other way round a precision loss adds no slope: beside one named over
a baseline, a line told by its slope's scatter between responses is named (``beside_noise``). ``policy``: a logit bias, a bad-words mask or a penalty leans the
responses that hold the ids it shifts (``policy_signs`` 1.6-4.4 on ``sem-bias-*``,
``sem-badwords-*``, ``sem-freq-subtle``); a truncation's kept mass and a temperature's
log-partition belong to the context, which a response's tokens share, so about each bin's
median r (the sign test with each probability bin's tokens counted above its median instead of
0) their responses lean as much as stale weights' do (``sem-topk-loud`` 3.2,
``sem-topp-subtle`` 1.6, ``pol-stale-iter`` 1.6). A semantics that only lowers r (``lowers``:
a truncation) moves no token above the healthy noise: a lean there is another policy's
(``policy.lean_above_truncation``, ``peel.py``).
A logit processor too faint for the ``token_shift`` check's per-id threshold shows only as the
lean of the responses that hold its ids: when a shift of its own for each id carries
``ID_MODEL_SHARE`` of ``r``'s variance, the lean is its echo (``ids_explain``), and the
semantics is named with it (``sem-bias-subtle``). A hot part is no such echo: a part at fixed
positions (a turn's first tokens) holds fixed ids, whose shifts then follow the part's, and the
per-id sums cannot tell the ids' shift inside the part from outside it.
``code_path``: beside a transform at every token a part's K3 holds the transform's shift as the
rest's does, so a subtle path adds a few percent to it (``combo-temp-splitkv``: a split-KV path
beside a temperature, about 2%). Peeling the line (each token's r less the fitted line in the
logprob) leaves each context's log-partition, which no KV position or batch moves
(``sem-temp-loud``: KV 128 and up 1.04x the rest), yet the path's KV 128 and up is only 1.15x
there, within the healthy runs' own 0.59-1.19x: the relation holds (docs/diagnose.md, "What the
matrix misses")."""
CORRECTION = "no: importance sampling cannot fix two different distributions; make them one"
READS: tuple[CheckModule, ...] = (offset, temperature, top_p, token_shift)
ECHOES: tuple[CheckModule, ...] = (policy_signs,)
"""The check a logit processor on a few ids sets off when it is under ``token_shift``'s
thresholds: the responses holding the ids lean."""

AT_STEPS = "a sampling setting changed at some steps: mass removed there on the rollout side"
"""The variant ``step_change.py`` names."""
VARIANTS = {
    top_p.NAME: "truncation: top-p, top-k or min-p renormalised on one side",
    token_shift.NAME: "a logit processor on one side (a penalty, a logit bias, a bad-words mask)",
    temperature.NAME: "raw logprobs or a temperature on one side",
    offset.NAME: "a one-sided shift of the logprobs",
}


def kl_only(ctx: Context) -> bool:
    """Whether the ``offset`` check's mean ``r`` is the two sides' KL divergence, not a shift
    (its ``SHIFT_BEYOND_KL``)."""
    return offset.kl_only(evidence_of(ctx.result(offset), offset.Evidence))


def far_line(ctx: Context) -> bool:
    """Whether the ``temperature`` check's alarm is the faint line of two far-apart
    distributions (its ``FAR_LINE_SHARE``), not a temperature's."""
    t = ctx.result(temperature)
    e = evidence_of(t, temperature.Evidence)
    return fired(t) and temperature.far_line(ctx, e.diff_r2 if e is not None else None)


def support(ctx: Context) -> Support | None:
    found = [ctx.result(c) for c in READS]
    far = far_line(ctx)
    hits = [
        c for c in found
        if fired(c)
        and not (c.name == offset.NAME and kl_only(ctx))
        and not (c.name == temperature.NAME and far)
    ]  # fmt: skip
    if not hits:
        return (
            _by_ids(ctx)
            or by_part(ctx)
            or Support("ok", 0.0, "no semantic sign", tuple(c.name for c in found if c))
        )
    faint = _faint_only(hits)
    if faint:  # mass removed, no more: a part's mask, some requests' setting, or a truncation
        other = _by_ids(ctx) or by_part(ctx)
        if other is not None and other.alarm:
            return other
    # the most specific sign names the variant: a truncation's deficit, then the slope
    lead = next(c for name in VARIANTS for c in hits if c.name == name)
    some = sequences.some_requests(ctx) if faint else ()
    return Support(
        verdict=worst_of(hits),
        share=0.0 if some else None,
        because=lead.finding,
        checks=tuple(c.name for c in hits),
        where="every token",
        variant=VARIANTS[lead.name],
        against=_leaning(ctx) if lead.name == temperature.NAME else some,
        least=line_least(next((c for c in hits if c.name == temperature.NAME), None)),
    )


def _faint_only(hits: list[Check]) -> bool:
    """The only semantic sign is the ``top_p`` check's mass removed beyond the noise (its
    ``faint`` form): a mask or a truncation too faint for the kept-mass signature. Where a part
    lacks the mass (``by_part``: a bad-words mask strongest where its tokens are likely) or ids
    shift on their own (``_by_ids``), that names the variant; where some requests are hotter
    than the others of their step, the setting is theirs (``sequences``: top-p on a third of the
    requests lacks 33x its K3 run-wide)."""
    if [c.name for c in hits] != [top_p.NAME]:
        return False
    e = evidence_of(hits[0], top_p.Evidence)
    return e is not None and e.faint


def line_least(line: Check | None) -> float | None:
    """What a temperature's line explains at the least: its share of ``r``'s variance (K3 is
    ``r^2 / 2`` to second order), wherever its excess sits. On a model next to uniform
    (``family.py --pretrain 3``) a temperature's excess grows 4.9x over six steps as training
    sharpens the logits it divides, and the later steps (66% of the mass) were named a growth
    first while the line held 98% of ``r``'s variance; a trained model's logits hold their
    scale and its temperature's steps stay alike. ``line``: the ``temperature`` check when it
    alarms (whichever semantic sign names the variant), else None."""
    if line is None:
        return None
    e = evidence_of(line, temperature.Evidence)
    return None if e is None else e.diff_r2


def _leaning(ctx: Context) -> tuple[str, ...]:
    """Against a temperature's (or raw logprobs') line: whole responses leaning one way, at the
    ``policy_signs`` check's own alarm, that no logit processor's ids explain. A temperature
    moves each token by its own logit times one factor and its context's log-partition: at the
    same token probabilities the signs of ``r`` within a response are no more alike than between
    responses (``policy_signs`` 0.87-1.27 on ``sem-temp-*``, ``sem-raw-*`` and
    ``combo-temp-*``, never alarmed). Another function at every token leans them and draws a
    faint line too (``un-act-fp8-clip``, the engine's MLP activations saturating: a lean of
    1.69, p 7e-9, and a line of 5.5% of ``r``'s variance): the policy's evidence, not the
    temperature's (docs/diagnose.md "Faults never calibrated"). A line of
    ``temperature.T.FAR_LINE_SHARE`` of ``r``'s variance or more is the transform's own (25-59%
    for every temperature and raw-logprob fault of every corpus; other functions' faint lines
    5.2-7.6%), and a lean beside it is that transform's: each context's log-partition term,
    which a response's like contexts share (the Qwen3 member of the family: a temperature of
    0.7 against 1.0 leans its responses 1.67, p 1.8e-8, its line 54%)."""
    signs = ctx.result(policy_signs)
    if not fired(signs) or ids_explain(ctx) is not None:
        return ()
    line = evidence_of(ctx.result(temperature), temperature.Evidence)
    if line is not None and (line.diff_r2 or 0.0) >= temperature.T.FAR_LINE_SHARE:
        return ()
    return (
        "whole responses lean one way (policy_signs), which a temperature or raw logprobs do "
        "not make: another function at every token draws such a line too",
    )


def lowers(ctx: Context, found: Support) -> bool:
    """Whether the semantics found only lowers ``r`` (up to the noise): a truncation
    renormalised on the rollout side (``top_p``'s signature leads), or a one-sided shift with
    the rollout side higher (``offset`` leads, its mean ``r`` below zero: a renormalisation
    whose mean ratio other weights' two-signed ``r`` hides from the ``top_p`` check, as in
    ``combo-topp-stale``, 72% of the tokens below zero and a mean ratio of 0.984)."""
    if found.variant != VARIANTS[offset.NAME]:
        return found.variant == VARIANTS[top_p.NAME]
    e = evidence_of(ctx.result(offset), offset.Evidence)
    mean = e.log_ratio_mean if e is not None else None
    return mean is not None and mean < 0


LINE_T = 6.0
"""Beside a precision loss, a temperature's line is told by its slope's distance to 1 over its
scatter between responses (``stats/line_slope.py``, a bootstrap over sequences), not by its
share of r's variance: the loss moves each token on its own, whatever its logprob, so it adds
variance and no slope. The calibration corpus' healthy and improved runs give |t| up to 2.9 (2.6
in the held-out corpus), its precision losses up to 5.2 (an fp8 lm_head, 0.0017 from 1), a
temperature 0.9 against 0.91 beside an fp8 KV cache 10.7 (slope 0.9946, the line 2.5% of the
variance)."""


def beside_noise(ctx: Context) -> Support | None:
    """The line of a temperature under a precision loss's noise: a slope at least the
    ``temperature`` check's ``TEMP_SLOPE_WARN`` from 1 at ``LINE_T`` or more in some run; None
    when no run's line is that far and that sure."""
    found = [(run, s) for run, sums in sorted(ctx.state.sequences.runs.items())
             if (s := line_slope(sums.line)) is not None and _far(s)]  # fmt: skip
    if not found:
        return None
    run, s = max(found, key=lambda x: abs(x[1].t))
    many = len(ctx.state.sequences.runs) > 1
    return Support(
        verdict="warn",
        share=None,
        because=(
            f"{f'{run}: ' if many else ''}trainer ~ {s.slope:.4g} x rollout logprob + c, "
            f"{abs(s.t):.1f} standard errors from 1 over the responses (a bootstrap of the "
            f"sequences): a line the precision loss's noise, which moves each token on its own, "
            "cannot draw; its share of r's variance is under the temperature check's as that "
            "noise adds to r"
        ),
        checks=(temperature.NAME,),
        where="every token",
        variant=VARIANTS[temperature.NAME],
    )


def line_outside(
    ctx: Context, restrict: Callable[[HotSequenceState], HotSequenceState], text: str
) -> Support | None:
    """The ``temperature`` check on the tokens outside a part named first (``outside.py``:
    ``restrict`` keeps them, ``text`` says where they are), at its own thresholds, none
    lowered: a slope ``TEMP_SLOPE_WARN`` from 1 (``LINE_T`` standard errors over the responses)
    and a line holding ``TEMP_R2_WARN`` of ``r``'s variance there. On the whole run a loud part's
    noise dilutes a temperature's line under the check's share (the trainer without the
    engine's 0.9 on every gpu beside one gpu's split-KV merge 206x the others,
    ``pair-temp-gpu``: 0.2% of the variance on the whole run, 54% on the other gpus, slope
    0.944); outside the part it is the temperature's own. Healthy runs' lines stay 6x under
    the slope's gate and 30x under the share's (the check's thresholds). The worst run's
    Support, None where no run's line stands there."""
    t = temperature.T
    best: tuple[str, LineSlope, float] | None = None
    for run, state in sorted(ctx.state.hot_sequences.runs().items()):
        rows = line_rows(restrict(state))
        if len(rows) == 0:
            continue
        s, share = line_slope(rows[:, [0, 1, 2, 3, 5]]), line_share(rows.sum(axis=0))
        if s is None or share is None or not _far(s) or share < t.TEMP_R2_WARN:
            continue
        if best is None or abs(s.t) > abs(best[1].t):
            best = (run, s, share)
    if best is None:
        return None
    run, s, share = best
    loud = abs(s.slope - 1.0) >= t.TEMP_SLOPE_FAIL and share >= t.TEMP_R2_FAIL
    finding = (
        f"trainer ~ {s.slope:.4g} x rollout logprob + c, {abs(s.t):.1f} standard errors from 1 "
        f"over the responses, the line {pct(share)} of r's variance there: a temperature (or "
        "raw logprobs) on one side"
    )
    return _outside(ctx, FAIL if loud else WARN, temperature, run, text, finding)


OUTSIDE_TOKENS = 200
"""Tokens with ``r != 0`` the outside of a part needs before its sign share is read: at 200 a
share of 90% lies 11 standard errors above the 50% of two-signed noise."""


def truncation_outside(
    ctx: Context, restrict: Callable[[HotSequenceState], HotSequenceState], text: str
) -> Support | None:
    """The ``top_p`` check's sign on the tokens outside a part named first (``outside.py``):
    the rollout side higher on ``TOPP_NEGATIVE_SHARE`` of the tokens with ``r != 0`` there, at
    the check's own threshold. A truncation renormalised on the rollout side divides every kept
    token's probability by the kept mass, wherever it lies; the noise a part adds on its tokens
    has both signs and dilutes the run's share and its K3 share: top-p 0.95 (4.9x a healthy
    run alone) beside one device of four whose split-KV merge takes a key late (12x) holds 20%
    of the excess, under ``weigh.ALSO_SHARE``, while the other devices' tokens lie 96% below
    zero (the OLMo 2 member's ``s-pair-topp-gpu``, ``family.py --sweep``). Healthy noise puts
    about half of the tokens there; weights, a precision loss, a template or a kernel move
    ``r`` both ways. The worst run's Support; None where no run's outside holds
    ``OUTSIDE_TOKENS`` or lies that far."""
    best: tuple[str, float] | None = None
    for run, state in sorted(ctx.state.hot_sequences.runs().items()):
        sums = restrict(state).sums
        n = float(sums[:, NONZERO].sum())
        if n < OUTSIDE_TOKENS:
            continue
        share = 1.0 - float(sums[:, POSITIVE].sum()) / n
        if share >= top_p.T.TOPP_NEGATIVE_SHARE and (best is None or share > best[1]):
            best = (run, share)
    if best is None:
        return None
    run, share = best
    finding = (
        f"the rollout side higher on {pct(share)} of the tokens (the top_p check's "
        f"{pct(top_p.T.TOPP_NEGATIVE_SHARE)}; noise puts half there): a truncation renormalised "
        "on one side"
    )
    return _outside(ctx, WARN, top_p, run, text, finding)


def _outside(
    ctx: Context, verdict: str, check: CheckModule, run: str, text: str, finding: str
) -> Support:
    """A semantic sign found outside a part named first, by ``check``, in ``run``."""
    many = len(ctx.state.hot_sequences.runs()) > 1
    return Support(
        verdict=verdict,
        share=None,
        because=(
            f"outside the named part, in {text}: {f'{run}: ' if many else ''}{finding}, on the "
            "tokens the first cause does not reach"
        ),
        checks=(check.NAME,),
        where=text,
        variant=VARIANTS[check.NAME],
    )


def _far(s: LineSlope) -> bool:
    return abs(s.slope - 1.0) >= temperature.T.TEMP_SLOPE_WARN and abs(s.t) >= LINE_T


def ids_explain(ctx: Context) -> float | None:
    """The share of ``r``'s variance a shift of its own for each token id carries, when it is
    at least the ``token_shift`` check's ``ID_MODEL_SHARE`` (a logit processor on those ids: it
    explains the lean of the responses that hold them); None under it."""
    e = evidence_of(ctx.result(token_shift), token_shift.Evidence)
    share = None if e is None else e.id_share
    return share if share is not None and share >= token_shift.T.ID_MODEL_SHARE else None


def _by_ids(ctx: Context) -> Support | None:
    """No semantic check fires, yet the responses lean, and each id's own shift carries
    ``ID_MODEL_SHARE`` of ``r``'s variance: the echo of a logit processor on those ids (a logit
    bias, a penalty on given ids), not another policy."""
    share = ids_explain(ctx)
    echoes = [c for c in (ctx.result(m) for m in ECHOES) if c is not None and _leans(c)]
    if share is None or not echoes:
        return None
    return Support(
        verdict=worst_of(echoes) if any(fired(c) for c in echoes) else WARN,
        share=None,
        because=(
            f"a shift of its own for each token id carries {100 * share:.0f}% of r's variance "
            f"({token_shift.T.ID_MODEL_SHARE:.0%} or more: a logit processor on those ids); "
            f"what {' and '.join(c.name for c in echoes)} finds is its echo: "
            + "; ".join(c.finding for c in echoes)
        ),
        checks=(token_shift.NAME, *(c.name for c in echoes)),
        where="every token",
        variant=VARIANTS[token_shift.NAME],
    )


def _leans(signs: Check) -> bool:
    """The responses lean: the ``policy_signs`` check alarms, or its worst run's lean passes
    the gate of a lean beside other evidence (``SIGN_DISPERSION_WARN`` with ``SIGN_ALPHA``)
    where alone it stays under the check's own (``SIGN_DISPERSION_ALONE``). The ids' own shift
    is that evidence: 15% or more of r's variance (``ID_MODEL_SHARE``), where healthy runs
    reach 0.4% (``sem-bias-subtle``'s responses lean 1.63, under the gate alone)."""
    if fired(signs):
        return True
    e = evidence_of(signs, policy_signs.Evidence)
    if e is None:
        return False
    lean = e.worst.signs
    return policy_signs.leans(lean.dispersion, lean.p_value, policy_signs.T.SIGN_DISPERSION_WARN)


def by_part(ctx: Context) -> Support | None:
    """No semantic check fires, yet the part a code path would be named for lacks mass on one
    side (``processor.py``): a logit processor too faint for the run-wide checks, strongest
    where the tokens it bans are likely. It explains that part's excess (its share), and what
    the part sets off (the code path's relations: ``peel.py``)."""
    part = code_path.support(ctx)
    found = None if part is None else mass_removed(ctx, part)
    if part is None or found is None:
        return None
    return Support(
        verdict=part.verdict,
        share=part.share,
        because=f"{part.where}: {sentence(found)}; {part.because}",
        checks=part.checks,
        ratio=part.ratio,
        ci=part.ci,
        claim=part.claim,
        where=part.where,
        variant=VARIANTS[token_shift.NAME],
        region=part.region,
    )


def advice(ctx: Context, found: Support) -> str:
    if found.variant == AT_STEPS:
        return (
            f"{found.where}: the engine's sampling changed there (top-p, top-k or min-p, or a "
            "logit processor, turned on at a restart or a configuration reload) and the "
            "logprobs it returns are the processed ones: sample those steps with the others' "
            "settings, or have the engine return the logprobs the trainer computes; "
            "importance sampling would not fix it"
        )
    lead = next((ctx.result(c) for c in (top_p, token_shift) if found.variant == VARIANTS[c.NAME]),
                None)  # fmt: skip
    if lead is not None and lead.next:
        return lead.next
    if found.variant == VARIANTS[token_shift.NAME]:  # named by its ids' shifts (``_by_ids``)
        return token_shift.ADVICE
    return PROCESSED_HINT
