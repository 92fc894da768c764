"""The per-step summary under the names the frameworks log, beside mismatchctl's own.

Every number is the report's, by the report's definitions (docs/metrics.md), of the step's model
tokens; a framework's name is given only where its own number is that one:

- verl (``verl/trainer/ppo/rollout_corr_helper.py``, ``compute_offpolicy_metrics``, verl 0.9.1;
  ``training/...`` from ``verl/utils/debug/metrics.py``, ``calculate_debug_metrics``): verl's
  means divide by the token count plus 1e-8 in float32, so its own charts differ from these by
  less than 1e-7 relative. Its ``rollout_probs_diff_std`` and ``log_ppl_diff_max/min`` are not
  in the report's state and are left out.
- prime-rl (``trainer/rl/train.py``: ``mismatch_kl/all`` over the loss-mask tokens, its
  ``Tensors.compute_stats``): the mean, and the max (K3 is convex in r: its maximum over the
  tokens is at the smallest or the largest r, which the state holds).
- TRL (``GRPOTrainer._generate_and_score_completions``, TRL 1.16): ``sampling_logp_difference``
  is ``|old - sampling|`` over the completion mask.
"""

from __future__ import annotations

import math

from mismatchctl.errors import one_of
from mismatchctl.stats import registry as M
from mismatchctl.stats.partial import Partial, Value
from mismatchctl.stats.state import EXP_MAX, Col

OWN = "mismatchctl"
VERL, PRIME, TRL = "verl", "prime-rl", "trl"
STYLES = (OWN, VERL, PRIME, TRL)

_VERL = {
    "rollout_corr/kl": M.KL_K1,
    "rollout_corr/k3_kl": M.VLLM_KL,
    "rollout_corr/chi2_token": M.CHI2_TOKEN,
    "rollout_corr/chi2_seq": M.CHI2_SEQ,
    "rollout_corr/training_ppl": M.TRAINER_PPL,
    "rollout_corr/training_log_ppl": M.TRAINER_LOG_PPL,
    "rollout_corr/rollout_ppl": M.ROLLOUT_PPL,
    "rollout_corr/rollout_log_ppl": M.ROLLOUT_LOG_PPL,
    "rollout_corr/log_ppl_diff": M.LOG_PPL_DIFF,
    "rollout_corr/log_ppl_abs_diff": M.LOG_PPL_ABS_DIFF,
    "rollout_corr/ppl_ratio": M.PPL_RATIO,
    "training/rollout_probs_diff_mean": M.PROB_ABS_DIFF_MEAN,
    "training/rollout_probs_diff_max": M.PROB_ABS_DIFF_MAX,
    "training/rollout_actor_probs_pearson_corr": M.PROB_PEARSON,
}
_TRL = {
    "sampling/sampling_logp_difference/mean": M.ABS_LOG_RATIO_MEAN,
    "sampling/sampling_logp_difference/max": M.ABS_LOG_RATIO_MAX,
}
K3_MAX = "mismatch_kl/all/max"


def check_style(style: str) -> str:
    return one_of(
        style,
        STYLES,
        f"style `{style}`",
        "name the framework whose metric names the summary should use.",
    )


def summary(part: Partial, metrics: dict[str, Value], style: str, prefix: str) -> dict[str, float]:
    """The step's numbers (``metrics``: ``Partial.finalize`` with quantiles) under mismatchctl's
    names, and under ``style``'s where it logs them; ``prefix`` before every name. Numbers that
    do not exist for the step (None: no tokens, an undefined correlation) are left out."""
    out: dict[str, Value] = dict(metrics)
    if style == VERL:
        out.update({name: metrics.get(key) for name, key in _VERL.items()})
    elif style == TRL:
        out.update({name: metrics.get(key) for name, key in _TRL.items()})
    elif style == PRIME:
        out["mismatch_kl/all/mean"] = metrics.get(M.VLLM_KL)
        out[K3_MAX] = k3_max(part)
    return {f"{prefix}{k}": float(v) for k, v in out.items() if v is not None}


def k3_max(part: Partial) -> float | None:
    """The largest K3 of the step's tokens: at its smallest or largest r (K3 is convex)."""
    if not part.tokens:
        return None
    ends = (float(part.state[Col.R_MIN]), float(part.state[Col.R_MAX]))
    return max(math.expm1(r) - r if r <= EXP_MAX else math.inf for r in ends)
