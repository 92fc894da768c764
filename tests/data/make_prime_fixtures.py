"""Write prime-rl fixtures: token exports ``fixtures/token_exports/step_<N>/rank_0.jsonl`` and an
inference Parquet ``fixtures/prime_rollouts/step_<N>/<uuid>.parquet``.

The records follow prime-rl's trainer/rl/token_export.py (commit 559b447, schema version 1):
the same keys in the same order, per-token lists over the whole sequence (prompt and response,
positions aligned with ``token_ids``), floats as float32 values, non-finite values as null,
weight streams as lists of nulls when absent, one compact JSON object per line
(``json.dumps(record, separators=(",", ":"), allow_nan=False)``). Sequences without a loss-mask
token are not exported, as there.

The inference Parquet follows prime-rl before its orchestrator (commit 1107257, mid-2025):
``pa.Table.from_pylist(records, schema=pa_schema)`` with the schema of
src/zeroband/utils/parquet.py, one row per completion, ``input_logprobs`` zeros for the prompt.
Run: ``python tests/data/make_prime_fixtures.py``.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).parent))
from make_fixtures import OUT, PROMPT, samples

EXPORTS = OUT / "token_exports"
VOCAB = 151_936
DPPO_MASK = 0.2  # DefaultLossConfig.dppo_mask_low / dppo_mask_high


def _f32(values) -> list[float | None]:
    out = np.asarray(values, dtype=np.float32).tolist()
    return [v if math.isfinite(v) else None for v in out]


def export_record(
    step: int,
    index: int,
    token_ids: list[int],
    loss_mask: list[bool],
    inference: list[float],
    trainer: list[float],
    weights: dict[str, list[float] | None] | None = None,
) -> dict:
    """One exported sequence (rank 0, micro step 0), diagnostics computed as prime-rl does."""
    n = len(token_ids)
    lt, li = np.asarray(trainer, np.float32), np.asarray(inference, np.float32)
    log_ratio = lt - li
    ratio = np.exp(log_ratio)
    delta = np.exp(lt) - np.exp(li)
    advantages = np.where(loss_mask, 0.5 if index % 2 else -0.5, 0.0).astype(np.float32)
    mask = np.asarray(loss_mask)
    high, low = delta > DPPO_MASK, delta < -DPPO_MASK
    invalid = np.where(advantages > 0, high, low)
    weights = weights or {}
    return {
        "schema_version": 1,
        "step": step,
        "rank": 0,
        "micro_step": 0,
        "micro_sequence_idx": index,
        "export_sequence_idx": index,
        "env_name": "gsm8k",
        "token_ids": token_ids,
        "position_ids": list(range(n)),
        "loss_mask": [bool(m) for m in loss_mask],
        "advantages": _f32(advantages),
        "inference_logprobs": _f32(li),
        "trainer_logprobs": _f32(lt),
        "entropy": _f32(np.linspace(0.1, 2.0, n)),
        "mismatch_kl": _f32(ratio - log_ratio - 1),
        "log_importance_ratio": _f32(log_ratio),
        "importance_ratio": _f32(ratio),
        "prob_delta": _f32(delta),
        "is_masked": (mask & invalid).tolist(),
        "is_masked_high": (mask & (advantages > 0) & high).tolist(),
        "is_masked_low": (mask & (advantages < 0) & low).tolist(),
        **{k: weights.get(k) or [None] * n for k in ("rl_weights", "ce_weights", "ref_kl_weights")},
    }


def record_of(row: dict, index: int) -> dict:
    """A shared-dataset response as prime-rl exports it: the prompt first (loss mask 0,
    inference 0.0, the trainer's own prompt logprobs, the first shifted to log(1/vocab))."""
    n = len(PROMPT)
    prompt_lp = [math.log(1 / VOCAB), -2.5, -1.25][:n]
    return export_record(
        row["step"],
        index,
        PROMPT + row["ids"],
        [False] * n + [bool(m) for m in row["mask"]],
        [0.0] * n + row["roll"],
        prompt_lp + row["train"],
    )


def write(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for rec in records:
            fh.write(json.dumps(rec, separators=(",", ":"), allow_nan=False) + "\n")


INFERENCE_SCHEMA = pa.schema(
    [
        ("input_tokens", pa.list_(pa.int32())),
        ("output_tokens", pa.list_(pa.int32())),
        ("input_logprobs", pa.list_(pa.float32())),
        ("output_logprobs", pa.list_(pa.float32())),
        ("prompt", pa.string()),
        ("problem_id", pa.string()),
        ("completion", pa.string()),
        ("advantages", pa.float32()),
        ("rewards", pa.float32()),
        ("task_rewards", pa.float32()),
        ("length_penalties", pa.float32()),
        ("proofs", pa.binary()),
        ("step", pa.int32()),
        ("target_lengths", pa.int32()),
        ("task_type", pa.string()),
        ("seed", pa.int64()),
        ("temperature", pa.float32()),
    ]
)


def write_inference(rows: list[dict], step: int) -> None:
    records = [
        {
            "problem_id": "7",
            "input_tokens": PROMPT,
            "output_tokens": r["ids"],
            "input_logprobs": [0.0] * len(PROMPT),
            "output_logprobs": [
                v if m else -0.125 for v, m in zip(r["roll"], r["mask"], strict=True)
            ],
            "prompt": "What is 6 x 7?",
            "completion": "42",
            "advantages": r["reward"] - 0.5,
            "rewards": r["reward"],
            "task_rewards": r["reward"],
            "length_penalties": 0.0,
            "proofs": b"",
            "step": step,
            "target_lengths": -1,
            "task_type": "math",
            "seed": 1234 + r["sid"],
            "temperature": 1.0,
        }
        for r in rows
        if r["step"] == step
    ]
    path = OUT / "prime_rollouts" / f"step_{step}" / "0b7f5bd4-8f1e-4c1a-9d3e-6a2f1c0e9b21.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(records, schema=INFERENCE_SCHEMA), path)


def main() -> None:
    rows = samples()
    for step in (3, 4):
        exported = [r for r in rows if r["step"] == step and any(r["mask"])]
        records = [record_of(r, i) for i, r in enumerate(exported)]
        write(EXPORTS / f"step_{step}" / "rank_0.jsonl", records)
    write_inference(rows, 3)


if __name__ == "__main__":
    main()
