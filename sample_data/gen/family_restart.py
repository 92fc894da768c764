"""Faults from a step on, for the family's dense members (family.py --restart): the engine
changes at the middle step (a restart with another kernel or precision, or weights that fall
behind from there), the plain engine with the current weights before. Made after
``step_change``'s drift within the hot steps (``step_change.WITHIN_DRIFT``), on the TinyLM's
``gen/catalog_restart.py`` kinds, to try it on another model: the engine's arithmetic is one fixed
function at every step it runs, other weights a new difference at each step.

- ``f-r-fp8kv``: an fp8 KV cache from the middle step on (a restart with another kv-cache
  dtype): **precision**;
- ``f-r-split``: a split-KV decode whose second partial starts a key late, at every decode step
  past 16 keys (a replica's faulty kernel on nearly every token): **code_path**;
- ``f-r-lag``: the weights one optimizer step behind from the middle step on (an asynchronous
  rollout turned on at a restart): **policy**;
- ``f-r-stale``: the weights one RL step behind from there (a weight sync that stopped
  landing): **policy**;
- ``f-r-behind``: the weights 30% of the way back to the previous RL step from there (a
  partial sync): **policy**.

Every corpus holds the family's two healthy baselines (``f-h-a``, ``f-h-b``) too."""

from __future__ import annotations

from gen.family_engine import EngineKernel
from gen.family_runs import FAMILY, FP8KV, STEPS, FamilyRun, fault

BASELINES: tuple[FamilyRun, ...] = tuple(r for r in FAMILY if r.name in ("f-h-a", "f-h-b"))
FROM = STEPS // 2 + 1  # the middle step, as the TinyLM's restarts (gen/calib_weights.jump_step)
SPLIT_EVERY = EngineKernel(split_at=16, drop_key=True)

RESTART: tuple[FamilyRun, ...] = (
    *BASELINES,
    fault(
        "f-r-fp8kv",
        "precision",
        "subtle",
        f"an fp8 KV cache from step {FROM} on (a restart with another kv-cache dtype)",
        kernel=FP8KV,
        from_step=FROM,
    ),
    fault(
        "f-r-split",
        "code_path",
        "subtle",
        f"from step {FROM} on a split-KV decode whose second partial starts a key late, at every "
        "decode step past 16 keys (a replica's faulty kernel)",
        kernel=SPLIT_EVERY,
        from_step=FROM,
    ),
    fault(
        "f-r-lag",
        "policy",
        "subtle",
        f"weights one optimizer step behind from step {FROM} on (asynchronous rollouts turned on "
        "at a restart)",
        weights="lag",
        from_step=FROM,
    ),
    fault(
        "f-r-stale",
        "policy",
        "loud",
        f"weights one RL step behind from step {FROM} on (a weight sync that stopped landing)",
        weights="stale",
        from_step=FROM,
    ),
    fault(
        "f-r-behind",
        "policy",
        "subtle",
        f"weights 30% of the way back to the previous RL step from step {FROM} on (a partial sync)",
        weights="behind:0.3",
        from_step=FROM,
    ),
)
