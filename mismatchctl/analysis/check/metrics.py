"""The metrics `check` can judge: the registry's metrics a selection has. Apart from the gate
(``check.py``), which reads the store, so that the command's help can list them without loading
the engines."""

from __future__ import annotations

from mismatchctl.stats import registry as M

# the statistics of a selection's per-batch vllm_kl (``stats.bands.step_summary``)
STEP_METRICS = (
    M.BATCHES, M.VLLM_KL_STEP_MEDIAN, M.VLLM_KL_STEP_P90, M.VLLM_KL_STEP_MAX,
    *M.BAND_SHARE.values(),
)  # fmt: skip


def gated_metrics() -> list[str]:
    """The registry's metrics a selection has: its count, token and sequence metrics (the
    whole selection's, as `report` gives them) and the statistics of its per-batch vllm_kl."""
    levels = (M.Level.COUNT, M.Level.TOKEN, M.Level.SEQUENCE)
    whole = [m for m in M.ALL if m.level in levels and m not in M.QUANTILE_METRICS]
    return [str(m) for m in (*whole, *STEP_METRICS)]
