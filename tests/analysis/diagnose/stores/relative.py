"""diagnose as a detective: planted causes at small magnitudes (about 1.5-3x a healthy run's
vllm_kl, far below the absolute bands) and loud ones (100-1000x on the affected tokens), with
and without ``--baseline``; each is named with the right remedy, and healthy or improved runs
raise no alarm. The planted dumps: tests/planted.py (``factor`` is the affected tokens' vllm_kl
over the clean run's)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import mismatchctl
from tests.helpers import SLOW
from tests.planted import Plan, checks, write

PER_STEP = 32


# run name -> (plan, tags)
RUNS: dict[str, tuple[Plan, dict[str, str]]] = {
    "base": (Plan("clean", per_step=PER_STEP, seed=2), {}),
    "healthy": (Plan("clean", per_step=PER_STEP, seed=1), {}),
    "improved": (Plan("improved", per_step=PER_STEP, seed=3), {}),
    "gpu-small": (Plan("gpu", per_step=PER_STEP, seed=7, factor=3), {}),
    "gpu-loud": (Plan("gpu", per_step=PER_STEP, seed=7, factor=1000), {}),
    # 2x on one gpu of two, 16 rollouts a step: found by the localized check with the kv
    # positions but for the gpu's few longest (a sliver of its tokens): the gpu's, not a code
    # path
    "gpu-faint": (Plan("gpu", per_step=16, seed=7, factor=2), {}),
    "spike-small": (Plan("spike", steps=6, per_step=PER_STEP, seed=6, factor=3), {}),
    "spike-loud": (Plan("spike", steps=6, per_step=PER_STEP, seed=6, factor=1000), {}),
    "path-small": (Plan("path", per_step=PER_STEP, seed=4, factor=30), {}),
    "path-kv": (Plan("path", per_step=PER_STEP, seed=20, factor=10), {}),
    "path-loud": (Plan("path", per_step=PER_STEP, seed=4, factor=1000), {}),
    # 10x at KV >= 48 in every third step (the run 1.4x a healthy one): the later turns hold
    # the long KV positions, and only the set of faulty steps tells the path from the tool turns
    **{f"path-steps-{s}": (Plan("path", per_step=PER_STEP, seed=s, factor=10), {}) for s in (2, 4)},
    "policy-small": (Plan("policy", per_step=PER_STEP, seed=5, factor=2), {}),
    "policy-loud": (Plan("policy", per_step=PER_STEP, seed=5, factor=100), {}),
    "lagged-small": (Plan("policy", per_step=PER_STEP, seed=8, factor=1.1), {"weight_lag": "1"}),
    # twice the mismatch, estimated a little low (1.88x-1.999x, intervals 1.7-2.2): under a
    # point gate at 2x these were passed (diagnose/levels.py: the factors sit below the size)
    "gpu-2x": (Plan("gpu", per_step=PER_STEP, seed=1, factor=2), {}),
    "spike-2x": (Plan("spike", per_step=PER_STEP, seed=2, factor=2), {}),
    "tool-2x": (Plan("tool", per_step=PER_STEP, seed=3, factor=2), {}),
    # healthy runs twice as large (tighter intervals): the lower point gates raise no alarm
    **{f"healthy-64-{s}": (Plan("clean", per_step=64, seed=s), {}) for s in (3, 4, 5)},
    # a weight_version column: a third of the rollouts one version behind, their mismatch
    # doubled (faint) or the same as the current ones' (even: a lag that costs nothing)
    "stale-faint": (Plan("stale", per_step=16, seed=7, factor=2), {}),
    "stale-even": (Plan("stale", per_step=PER_STEP, seed=9, factor=1), {}),
    "template-small": (Plan("template", per_step=PER_STEP, seed=11, factor=3), {}),
    "template-loud": (Plan("template", per_step=PER_STEP, seed=11, factor=1000), {}),
    "template-faint": (Plan("template", per_step=PER_STEP, seed=2, factor=3), {}),
    "tool-small": (Plan("tool", per_step=PER_STEP, seed=11, factor=3), {}),
    "tool-mid": (Plan("tool", per_step=PER_STEP, seed=7, factor=10), {}),
    "tool-seen": (Plan("tool", per_step=PER_STEP, seed=1, factor=3), {}),
    "tool-loud": (Plan("tool", per_step=PER_STEP, seed=12), {}),
    # the 0.3% of tokens sampled at p < 1e-3 scored 2x (1.6x the healthy run overall) or 20x
    # less likely by the trainer
    "lowprob-small": (Plan("lowprob", per_step=PER_STEP, seed=13, factor=2), {}),
    "lowprob-loud": (Plan("lowprob", per_step=PER_STEP, seed=13, factor=20), {}),
    # the turns after a tool response sample flatter distributions (more unlikely tokens, each
    # no worse than a first turn's at its probability): the amplification of the study
    "toolmix": (Plan("toolmix", per_step=PER_STEP, seed=21, factor=16), {}),
}


ALARM = ("warn", "fail")


VERSIONED = ("stale-faint", "stale-even")


# the runs that only slow tests diagnose: written when those run
SLOW_ONLY = {"path-loud", "template-loud", "tool-mid", "tool-seen", "spike-2x", "tool-2x",
             "healthy-64-3", "healthy-64-5", "path-steps-4", "lowprob-loud"}  # fmt: skip


def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("relative")
    for name, (plan, tags) in RUNS.items():
        if name in SLOW_ONLY and not SLOW:
            continue
        path = write(plan, root / f"{name}.parquet", weight_version=name in VERSIONED)
        mismatchctl.ingest([path], run=name, store=root / "store", tags=tags)
    return root / "store"


def _checks(store: Path, run: str, baseline: str | None = None) -> dict:
    return checks(store, run, baseline)  # diagnosed once: several tests read the same runs


def _alarms(checks: dict) -> dict[str, str]:
    return {n: c.verdict for n, c in checks.items() if c.verdict in ALARM}


def _faulty_steps(run: Path) -> list[int]:
    """The steps whose vllm_kl is a decade above the run's quietest step, from the dump files
    with numpy (the faulty path runs in some steps only: sample_data/README.md)."""
    import pyarrow.parquet as pq

    levels = {}
    for path in sorted(run.glob("step_*.parquet")):
        t = pq.read_table(path).to_pydict()
        k3 = []
        sides = zip(t["rollout_log_probs"], t["old_log_probs"], t["response_mask"], strict=True)
        for lr, lt, m in sides:
            keep = np.array(m, bool)
            r = np.array(lt, np.float64)[keep] - np.array(lr, np.float64)[keep]
            k3.append(np.expm1(r) - r)
        levels[t["step"][0]] = float(np.concatenate(k3).mean())
    quiet = min(levels.values())
    return sorted(s for s, v in levels.items() if v > 10 * quiet)
