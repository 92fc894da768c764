"""Write the tiny per-format fixtures in tests/data/fixtures/ (run: python tests/data/make_fixtures.py).

One logical dataset (two steps, multi-turn masks, an all-masked sample, right padding) is written in
every format mismatchctl reads, so the tests can check that each reader yields the same canonical
rows. Values are float32-representable so that every format stores them exactly.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

OUT = Path(__file__).parent / "fixtures"
PROMPT = [101, 102, 103]  # prompt token ids (NeMo and slime keep the prompt in the sequence)


def _lp(rng: np.random.Generator, n: int) -> list[float]:
    """float32-exact logprobs in [-6, 0]."""
    return [float(np.float32(v)) for v in -rng.exponential(0.8, n).clip(0, 6)]


def samples() -> list[dict]:
    """(step, sample id, token ids, mask, rollout, trainer, reward) of each response."""
    rng = np.random.default_rng(7)
    masks = {
        (3, 0): [1, 1, 1, 0, 0, 1, 1, 1, 0, 0],  # two turns, trailing padding
        (3, 1): [1, 1, 1, 1],
        (3, 2): [0, 0, 0],  # fully masked: an empty sequence
        (4, 0): [1, 1, 0, 1, 0, 0, 1, 1, 1],  # three turns
        (4, 1): [1, 0, 1, 1, 1, 1],
    }
    out = []
    for (step, sid), mask in masks.items():
        n = len(mask)
        roll, train = _lp(rng, n), _lp(rng, n)
        # masked positions hold 0.0, as verl and slime write them
        roll = [v if m else 0.0 for v, m in zip(roll, mask, strict=True)]
        train = [v if m else 0.0 for v, m in zip(train, mask, strict=True)]
        roll[0] = 0.0 if mask[0] else roll[0]  # a real model token with logprob exactly 0.0
        ids = [int(t) for t in rng.integers(1000, 2000, n)]
        out.append(
            dict(
                step=step,
                sid=sid,
                ids=ids,
                mask=mask,
                roll=roll,
                train=train,
                reward=float(sid) / 2,
            )
        )
    return out


def write_sequence(rows: list[dict]) -> None:
    width = max(len(r["mask"]) for r in rows)

    def pad(v: list, fill: float | int) -> list:
        return v + [fill] * (width - len(v))

    table = pa.table(
        {
            "step": pa.array([r["step"] for r in rows], pa.int64()),
            "uid": [str(r["sid"]) for r in rows],
            "responses": [pad(r["ids"], 0) for r in rows],
            "response_mask": pa.array([pad(r["mask"], 0) for r in rows], pa.list_(pa.int8())),
            "rollout_log_probs": pa.array(
                [pad(r["roll"], 0.0) for r in rows], pa.list_(pa.float32())
            ),
            "old_log_probs": pa.array([pad(r["train"], 0.0) for r in rows], pa.list_(pa.float32())),
            "reward": [r["reward"] for r in rows],
        }
    ).replace_schema_metadata({"engine": "vllm-0.10.1", "logprobs_mode": "processed"})
    pq.write_table(table, OUT / "sequence.parquet")


def write_token(rows: list[dict]) -> None:
    flat = []
    for r in rows:
        turn, prev = -1, 0
        for pos, m in enumerate(r["mask"]):
            turn += 1 if (m and not prev) else 0
            flat.append(
                dict(
                    step=r["step"],
                    sample_id=str(r["sid"]),
                    position=pos,
                    token_id=r["ids"][pos],
                    rollout_logprob=r["roll"][pos],
                    trainer_logprob=r["train"][pos],
                    is_model_token=bool(m),
                )
            )
            prev = m
    order = np.random.default_rng(1).permutation(len(flat))  # rows of a sample are scattered
    cols = {k: [flat[i][k] for i in order] for k in flat[0]}
    pq.write_table(pa.table(cols), OUT / "token.parquet")


def write_slime(rows: list[dict]) -> None:
    import torch

    for step in sorted({r["step"] for r in rows}):
        samples_ = [
            {
                "tokens": torch.tensor(PROMPT + r["ids"]),
                "response_lengths": len(r["ids"]),
                "loss_masks": r["mask"],
                "rollout_log_probs": torch.tensor(r["roll"], dtype=torch.float32),
                "log_probs": r["train"],
                "rewards": r["reward"],
                "sample_index": r["sid"],
            }
            for r in rows
            if r["step"] == step
        ]
        data = {"format_version": 2, "rollout_id": step, "rank": 0, "samples": samples_}
        torch.save(data, OUT / f"slime_train_{step}.pt")


def write_nemo(rows: list[dict]) -> None:
    for step in sorted({r["step"] for r in rows}):
        with (OUT / f"train_data_step{step}.jsonl").open("w") as fh:
            for r in (r for r in rows if r["step"] == step):
                n = len(PROMPT)
                obj = {
                    "token_ids": PROMPT + r["ids"],
                    "token_loss_mask": [0] * n + r["mask"],
                    # index j holds the logprob of token j; index 0 is a dummy
                    "generation_logprobs": [0.0] * n + r["roll"],
                    "prev_logprobs": [0.0] * n + r["train"],
                    "rewards": r["reward"],
                    "input_lengths": n + len(r["ids"]),
                }
                fh.write(json.dumps(obj, sort_keys=True) + "\n")


def write_golden() -> None:
    """The golden vector of the metric definitions: two sequences, one masked token."""
    table = pa.table(
        {
            "step": pa.array([0, 0], pa.int64()),
            "uid": ["A", "B"],
            "old_log_probs": [[-0.1, -1.0, -2.0], [-0.5, 0.0, -0.2]],
            "rollout_log_probs": [[-0.1, -0.9, -2.5], [-0.7, 0.0, -0.2]],
            "response_mask": pa.array([[1, 1, 1], [1, 0, 1]], pa.list_(pa.int8())),
        }
    )
    pq.write_table(table, OUT / "golden.parquet")


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    write_golden()
    rows = samples()
    write_sequence(rows)
    write_token(rows)
    write_nemo(rows)
    write_slime(rows)


if __name__ == "__main__":
    main()
