"""Token ids moved on their own, their shifts drifting over the run: weights that follow the
training (a rollout a step behind the trainer), not a fixed loss of precision.

A uniform excess over a baseline with no response leaning is a precision loss or weights too
close to lean (docs/diagnose.md, "Pairs the data cannot tell apart"). Two measures of the
``token_shift`` check tell them apart where the ids move:

- **moved**: each id's own shift carries ``token_shift.T.ID_WEIGHTS`` (0.6%) of ``r``'s
  variance or more. Noise moves no id on its own: an fp8 KV cache 0-0.18% in every corpus, a
  bf16 lm_head accumulator 0.08%. But another *fixed* function moves ids too: a wrong
  attention scale 1.4-4.9%, a norm's epsilon 5.4% (planted as precision losses), a re-rendered
  template 2.1-10%, a pre-training checkpoint 6.2%.
- **drifting**: the ids' shifts of the first half of the steps beyond the second half's
  (``stats/step_ids.drift``, a share of the first half's variance) reach ``DRIFT``. A fixed
  difference moves the same ids alike throughout: the attention scale 0.00-0.33%, the norm's
  epsilon 0.85%, templates 0.40-0.42%, the pre-training checkpoint 0.41% (the halves correlated
  0.60-0.91). Weights a step behind move the ids of each step's update, which changes as the
  training goes: 1.4-15% (the halves correlated -0.29 to 0.23): the seed-0 TinyLM's one
  optimizer step 4.7%, seed 29's 2.7% (2.4% beside a rotary base off, a layer one step behind
  2.3%), its partial sync of the lm_head 6.8%, the MoE's stale weights 1.4%, the Phi's one
  optimizer step 8.2%, the Llama pre-trained 90 iterations' one optimizer step 11.3% (alone
  and beside a split-KV merge 11.1%) and one RL step 15.3%.

Where both hold and the precision is still the cause named first (after the readings that
already take a level for other weights: its steps split, ``varying_level.py``; its responses
leaning outside a path, ``peel.level_leans``), it is read as other weights (``drifting_level``):
the policy, at the precision's verdict and score, the precision a runner-up saying why
(``runner_up``). Not without a baseline: a level alone is no alarm, and this only names one."""

from __future__ import annotations

from mismatchctl.analysis.diagnose.causes import policy, precision
from mismatchctl.analysis.diagnose.causes.hypothesis import Support, Weighed
from mismatchctl.analysis.diagnose.check import evidence_of, fired
from mismatchctl.analysis.diagnose.checks import baseline, offset, temperature, token_shift, top_p
from mismatchctl.analysis.diagnose.context import Context
from mismatchctl.analysis.diagnose.text import pct

DRIFT = 0.02
"""The ids' shifts of the first half of the steps beyond the second half's: 2% of the first
half's variance or more is weights that follow the training (the module's docstring: the fixed
differences 0.85% at most, the lags 2.3% and up but the MoE's 1.4%, which its lean names; the
margin under the TinyLM's lags is narrow, 2.3-2.7% in seed 29's draw)."""


def drifting(ctx: Context) -> str | None:
    """The sentence when a uniform excess over the baseline comes with token ids moved on their
    own and drifting (the module's docstring), no logit transform alarming; None otherwise."""
    base = ctx.result(baseline)
    b = evidence_of(base, baseline.Evidence)
    if not fired(base) or b is None or b.excess_shape != "uniform":
        return None
    if any(fired(ctx.result(c)) for c in (offset, temperature, top_p, token_shift)):
        return None  # a transform moves ids too, the same at every step
    e = evidence_of(ctx.result(token_shift), token_shift.Evidence)
    if e is None or e.id_share is None or e.id_drift is None:
        return None
    t = token_shift.T
    if not t.ID_WEIGHTS <= e.id_share < t.ID_MODEL_SHARE or e.id_drift < DRIFT:
        return None
    corr = "" if e.id_drift_correlation is None else f", correlated {e.id_drift_correlation:.2f}"
    return (
        f"each token id's own shift carries {pct(e.id_share)} of r's variance "
        f"({t.ID_WEIGHTS:.1%} or more: noise moves no id on its own), and those shifts drift "
        f"{pct(e.id_drift)} from the first half of the steps to the second ({DRIFT:.0%} or "
        f"more{corr}): weights that follow the training, not a fixed loss of precision"
    )


def drifting_level(ctx: Context, first: Weighed | None, also: list[Weighed]) -> Weighed | None:
    """The policy for the precision named first when its ids drift (``drifting``); None
    otherwise, or when the policy is already named beside it."""
    if first is None or first.cause is not precision or any(w.cause is policy for w in also):
        return None
    because = drifting(ctx)
    if because is None:
        return None
    s = first.support
    support = Support(
        **{
            **s.__dict__,
            "because": f"{s.because}; no response leans, but {because}",
            "checks": (*s.checks, token_shift.NAME),
            "variant": policy.DRIFTING,
            "against": (),
        }
    )
    return Weighed(policy, support, first.score)


def runner_up(first: Weighed | None, w: Weighed) -> str | None:
    """Why the precision lost to the policy ``drifting_level`` named (None: not that case)."""
    if first is None or first.support.variant != policy.DRIFTING or w.cause is not precision:
        return None
    return (
        "the same uniform excess, but its token ids move on their own and drift with the "
        "training, which a fixed loss of precision does not make them"
    )


__all__ = ["DRIFT", "drifting", "drifting_level", "runner_up"]
