"""Writers for the two on-disk formats (see FORMATS.md): verl-style Parquet and NeMo-RL JSONL."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from gen.rollout import Sample


def _pad(rows: Sequence[Sequence[float | int]], width: int, dtype: type) -> np.ndarray:
    out = np.zeros((len(rows), width), dtype=dtype)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return out


def _list_column(matrix: np.ndarray, value_type: pa.DataType) -> pa.ListArray:
    width = matrix.shape[1]
    offsets = pa.array(np.arange(0, matrix.size + 1, width, dtype=np.int32))
    return pa.ListArray.from_arrays(offsets, pa.array(matrix.reshape(-1), type=value_type))


def prompt_columns(samples: Sequence[Sample]) -> dict[str, pa.Array]:
    """Per-sequence columns: the prompt token ids (verl's `prompts`, ragged, no padding) and the
    module the prompt was cut from (verl's `data_source`)."""
    return {
        "prompts": pa.array([s.prompt for s in samples], type=pa.list_(pa.int64())),
        "data_source": pa.array([s.data_source for s in samples], type=pa.string()),
    }


def write_parquet_step(
    path: Path,
    step: int,
    samples: Sequence[Sample],
    tags: dict[str, str],
    extra: dict[str, pa.Array] | None = None,
) -> None:
    """One file per step, one row per response, lists right-padded to the batch's max length."""
    width = max(len(s.response) for s in samples)
    columns: dict[str, pa.Array] = {
        "step": pa.array([step] * len(samples), type=pa.int64()),
        "uid": pa.array([s.uid for s in samples], type=pa.string()),
        "responses": _list_column(_pad([s.response for s in samples], width, np.int64), pa.int64()),
        "response_mask": _list_column(_pad([s.mask for s in samples], width, np.int8), pa.int8()),
        "rollout_log_probs": _list_column(
            _pad([s.rollout_lp for s in samples], width, np.float32), pa.float32()
        ),
        "old_log_probs": _list_column(
            _pad([s.trainer_lp for s in samples], width, np.float32), pa.float32()
        ),
        "reward": pa.array([s.reward for s in samples], type=pa.float64()),
    }
    columns.update(extra or {})
    table = pa.table(columns).replace_schema_metadata({k: str(v) for k, v in sorted(tags.items())})
    pq.write_table(table, path, compression="zstd")


def _float32_list(values: Sequence[float]) -> str:
    # the shortest text that parses back to the same float32 (numpy's str of a float32)
    return "[" + ",".join(str(v) for v in np.asarray(values, dtype=np.float32)) + "]"


def nemo_line(sample: Sample) -> str:
    """A NeMo-RL train_data line: arrays over the full sequence, logprob of token j at index j."""
    n_prompt = len(sample.prompt)
    zeros = [0.0] * n_prompt  # index 0 is the dummy entry; prompt tokens carry no logprob
    fields = {
        "generation_logprobs": _float32_list(zeros + sample.rollout_lp),
        "input_lengths": json.dumps(len(sample.sequence)),
        "prev_logprobs": _float32_list(zeros + sample.trainer_lp),
        "rewards": json.dumps(sample.reward),
        "token_ids": json.dumps(sample.sequence),
        "token_loss_mask": json.dumps([0] * n_prompt + sample.mask),
    }
    return "{" + ",".join(f"{json.dumps(k)}:{fields[k]}" for k in sorted(fields)) + "}"


def write_nemo_step(path: Path, samples: Sequence[Sample]) -> None:
    with path.open("w", encoding="utf-8", newline="\n") as f:
        for sample in samples:
            f.write(nemo_line(sample) + "\n")


def write_manifest(path: Path, manifest: dict[str, object]) -> None:
    path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
