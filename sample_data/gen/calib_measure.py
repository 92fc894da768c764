"""What corpus.json reports of a written run: its vllm_kl, read back from its Parquet dumps."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq


def run_vllm_kl(run_dir: Path) -> float | None:
    """Mean K3 = exp(r) - 1 - r over the model tokens (mask 1), r = trainer - rollout logprob;
    None when it is not finite (a sentinel fill far below any logprob)."""
    total, count = 0.0, 0
    for path in sorted(run_dir.glob("step_*.parquet")):
        table = pq.read_table(path, columns=["response_mask", "rollout_log_probs", "old_log_probs"])
        cols = table.to_pydict()
        for mask, roll, trainer in zip(
            cols["response_mask"], cols["rollout_log_probs"], cols["old_log_probs"], strict=True
        ):
            keep = np.asarray(mask) == 1
            r = np.asarray(trainer, np.float64)[keep] - np.asarray(roll, np.float64)[keep]
            with np.errstate(over="ignore"):
                total += float(np.sum(np.expm1(r) - r))
            count += int(keep.sum())
    value = total / count if count else math.nan
    return float(f"{value:.4g}") if math.isfinite(value) else None


def ratio(value: float | None, base: float | None) -> float | None:
    if value is None or base is None or base <= 0:
        return None
    return float(f"{value / base:.3g}")


RUN_FIELDS = ("name", "kind", "cause", "fault", "size", "baseline")
"""What corpus.json says of every run, as its spec (a ``CalibRun`` or a ``FamilyRun``) says it."""


def run_fields(run: object) -> dict[str, object]:
    return {key: getattr(run, key) for key in RUN_FIELDS}


def corpus_entry(out: Path, fields: dict[str, object], seconds: float | None) -> dict[str, object]:
    """A run's corpus.json entry: its ``fields`` (``name`` and ``baseline`` among them), then its
    vllm_kl and its ratio to its baseline's as read back from the files, then ``seconds``."""
    value = run_vllm_kl(out / "runs" / str(fields["name"]))
    base_dir = out / "runs" / str(fields["baseline"])
    base = run_vllm_kl(base_dir) if base_dir.is_dir() else None
    return {**fields, "vllm_kl": value, "ratio_to_baseline": ratio(value, base), "seconds": seconds}
