"""Write the tiny per-format fixtures in tests/data/fixtures/ (run: python tests/data/make_fixtures.py).

One logical dataset (two steps, multi-turn masks, an all-masked sample, right padding) is written in
every format mismatchctl reads, so the tests can check that each reader yields the same canonical
rows. Values are float32-representable so that every format stores them exactly. The slime and
NeMo-RL files reproduce what those frameworks' writers produce (the comments above each writer name
the commit and file they follow); slime's rollout-only dump and two verl batches (with and without
tool responses, with prompts, attention_mask and response_mask) complete the set.
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


# --- slime ------------------------------------------------------------------------------------
# The train dump follows slime's save_debug_train_data (THUDM/slime 624b824a,
# slime/observability/train_data_utils.py, format_version 2): per data-parallel rank, the
# rollout_data a Megatron actor holds when it dumps (built by slime/ray/rollout.py's
# _convert_samples_to_train_data and _split_train_data_by_dp, tensorised by
# rollout_data_utils.tensorize_rollout_data_for_training: tokens int64, loss_masks int32,
# rollout_log_probs float32; log_probs, entropy, kl, advantages and returns float32 tensors added
# by the actor; response_lengths, rewards, truncated, total_lengths plain numbers), turned into one
# dict per sample sorted by rollout position, a dp_shards layout, and the whole-batch raw_reward.
SLIME_ID_COLUMNS = {"sample_indices": "sample_index", "partition": "rollout_position"}
SLIME_LAYOUT = ("micro_batch_indices", "num_microbatches", "global_batch_sizes")
SLIME_WHOLE_BATCH = ("raw_reward",)


def _slime_per_sample(value, n: int) -> bool:
    import torch

    if torch.is_tensor(value):
        return value.dim() >= 1 and value.size(0) == n
    return isinstance(value, list | tuple) and len(value) == n


def slime_train_payload(shards: list[dict], rollout_id: int, writer_rank: int) -> dict:
    """What save_debug_train_data hands to torch.save for these DP shards."""
    samples, layout, whole = [], [], {}
    for shard in shards:
        data, dp_rank = shard["rollout_data"], shard["data_parallel_rank"]
        n = len(data["response_lengths"])
        entry = {"rank": shard["rank"], "data_parallel_rank": dp_rank}
        for column in SLIME_ID_COLUMNS:
            entry[column] = list(data[column]) if data.get(column) is not None else None
        columns = {}
        for key, value in data.items():
            if key in SLIME_ID_COLUMNS:
                continue
            if key in SLIME_WHOLE_BATCH:
                whole.setdefault(key, value)
            elif key in SLIME_LAYOUT or not _slime_per_sample(value, n):
                entry[key] = value
            else:
                columns[key] = value
        for i in range(n):
            sample = {"data_parallel_rank": dp_rank}
            for column, scalar in SLIME_ID_COLUMNS.items():
                if data.get(column) is not None:
                    sample[scalar] = data[column][i]
            sample.update({key: column[i] for key, column in columns.items()})
            samples.append(sample)
        layout.append(entry)
    samples.sort(key=lambda sample: sample["rollout_position"])
    return {
        "format_version": 2,
        "rollout_id": rollout_id,
        "rank": writer_rank,
        "samples": samples,
        "dp_shards": layout,
        **whole,
    }


def _slime_rollout_data(rows: list[dict], positions: list[int], batch: list[dict]) -> dict:
    """One DP rank's rollout_data when the actor dumps it (see the comment above)."""
    import torch

    rng = np.random.default_rng(11)
    lp = [torch.tensor(r["train"], dtype=torch.float32) for r in rows]
    lengths = [len(PROMPT) + len(r["ids"]) for r in batch]
    return {
        "partition": positions,
        "tokens": [torch.tensor(PROMPT + r["ids"], dtype=torch.long) for r in rows],
        "response_lengths": [len(r["ids"]) for r in rows],
        "rewards": [r["reward"] for r in rows],
        "truncated": [0 for _ in rows],
        "loss_masks": [torch.tensor(r["mask"], dtype=torch.int) for r in rows],
        "sample_indices": [r["sid"] for r in rows],
        "rollout_ids": [r["sid"] for r in rows],
        "rollout_mask_sums": torch.tensor([sum(r["mask"]) for r in rows], dtype=torch.float32),
        "rollout_log_probs": [torch.tensor(r["roll"], dtype=torch.float32) for r in rows],
        "raw_reward": [r["reward"] for r in batch],
        "total_lengths": [lengths[p] for p in positions],
        "global_batch_sizes": [len(batch)],
        "num_microbatches": [1],
        "micro_batch_indices": [[list(range(len(rows)))]],
        "local_raw_reward": [r["reward"] for r in rows],
        "log_probs": lp,
        "entropy": [
            torch.tensor(rng.uniform(0, 2, len(r["ids"])), dtype=torch.float32) for r in rows
        ],
        "kl": [torch.zeros_like(x) for x in lp],
        "advantages": [
            torch.full_like(x, r["reward"] - 0.5) for x, r in zip(lp, rows, strict=True)
        ],
        "returns": [torch.full_like(x, r["reward"] - 0.5) for x, r in zip(lp, rows, strict=True)],
    }


def write_slime(rows: list[dict]) -> None:
    """Step 3 on two data-parallel ranks (rank 0 holds rollout positions 0 and 2), step 4 on one."""
    import torch

    for step, ranks in ((3, [[0, 2], [1]]), (4, [[0, 1]])):
        batch = [r for r in rows if r["step"] == step]
        shards = [
            {
                "rank": 2 * dp,
                "data_parallel_rank": dp,
                "rollout_data": _slime_rollout_data([batch[p] for p in pos], pos, batch),
            }
            for dp, pos in enumerate(ranks)
        ]
        torch.save(slime_train_payload(shards, step, 0), OUT / f"slime_train_{step}.pt")


def slime_sample_dict(r: dict, step: int) -> dict:
    """slime's Sample.to_dict() (slime/utils/types.py) of one finished response: what
    save_debug_rollout_data (slime/observability/rollout_data_utils.py) writes per sample."""
    return {
        "group_index": r["sid"],
        "index": r["sid"],
        "rollout_id": None,
        "prompt": "Solve: 12 * 7 =",
        "tokens": PROMPT + r["ids"],
        "multimodal_inputs": None,
        "multimodal_train_inputs": None,
        "multimodal_train_input_id": None,
        "apply_chat_template_kwargs": {},
        "response": "84",
        "response_length": len(r["ids"]),
        "label": "84",
        "reward": r["reward"],
        "loss_mask": r["mask"],
        "weight_versions": [str(step)],
        "rollout_log_probs": r["roll"],
        "rollout_top_p_token_ids": None,
        "rollout_top_p_token_offsets": None,
        "rollout_routed_experts": None,
        "remove_sample": False,
        "teacher_log_probs": None,
        "status": "completed",
        "metadata": {},
        "generate_function_path": None,
        "custom_rm_path": None,
        "train_metadata": None,
        "session_id": None,
        "non_generation_time": 0.0,
        "spec_info": {
            "spec_accept_token_num": 0,
            "spec_draft_token_num": 0,
            "spec_verify_ct": 0,
            "completion_token_num": len(r["ids"]),
        },
        "prefix_cache_info": {"cached_tokens": 0, "total_prompt_tokens": len(PROMPT)},
    }


def write_slime_rollout(rows: list[dict]) -> None:
    """slime's --save-debug-rollout-data file of step 3: no trainer logprobs in it."""
    import torch

    samples = [slime_sample_dict(r, 3) for r in rows if r["step"] == 3]
    torch.save({"rollout_id": 3, "samples": samples}, OUT / "slime_rollout_3.pt")


# --- NeMo-RL -----------------------------------------------------------------------------------
# The GRPO loop (NVIDIA-NeMo/RL 7ea279ab, nemo_rl/algorithms/grpo.py) flattens each message log,
# right-pads the batch to its longest sequence rounded up to make_sequence_length_divisible_by
# (token_ids with the tokenizer's pad id, everything else with 0;
# nemo_rl/data/llm_message_utils.py::batched_message_log_to_flat_message), turns every tensor
# into a list (.tolist()) and logs it with Logger.log_batched_dict_as_jsonl
# (nemo_rl/utils/logger.py), which slices the batch one sample at a time (each list becomes a
# list of one) and writes {**sample, "idx": i} per line.
NEMO_PAD_ID = 0
NEMO_DIVISIBLE_BY = 8


def log_batched_dict_as_jsonl(to_log: dict[str, list], path: Path) -> None:
    """Logger.log_batched_dict_as_jsonl for a dict of lists (what the GRPO loop passes)."""
    size = len(next(iter(to_log.values())))
    with path.open("w") as f:
        for i in range(size):
            sample = {key: value[i : i + 1] for key, value in to_log.items()}
            f.write(json.dumps({**sample, "idx": i}, default=str) + "\n")


def _f32(values: list[float]) -> list[float]:
    return [float(v) for v in np.asarray(values, dtype=np.float32)]


def nemo_log_data(batch: list[dict], width: int | None = None) -> dict[str, list]:
    """The GRPO loop's log_data for a batch of flattened sequences, each a dict of ``tokens``
    (prompt + response + environment), ``mask``, ``gen`` and ``prev`` (full-sequence arrays,
    index 0 a dummy), ``reward``, ``content`` (the messages' texts)."""
    longest = max(len(b["tokens"]) for b in batch)
    width = width or -(-longest // NEMO_DIVISIBLE_BY) * NEMO_DIVISIBLE_BY

    def pad(values: list, fill) -> list:
        return values + [fill] * (width - len(values))

    return {
        "content": [b["content"] for b in batch],
        "rewards": _f32([b["reward"] for b in batch]),
        "input_lengths": [len(b["tokens"]) for b in batch],
        "token_ids": [pad(b["tokens"], NEMO_PAD_ID) for b in batch],
        "token_loss_mask": [pad(b["mask"], 0) for b in batch],
        "sample_loss_mask": [1.0 for _ in batch],
        "advantages": [_f32(pad([b["reward"] - 0.5] * len(b["tokens"]), 0.0)) for b in batch],
        "generation_logprobs": [_f32(pad(b["gen"], 0.0)) for b in batch],
        "prev_logprobs": [_f32(pad(b["prev"], 0.0)) for b in batch],
    }


def write_nemo(rows: list[dict]) -> None:
    rng = np.random.default_rng(5)
    for step in sorted({r["step"] for r in rows}):
        batch = []
        for r in (r for r in rows if r["step"] == step):
            n = len(PROMPT)
            prompt_lp = [0.0, *_lp(rng, n - 1)]  # the trainer scores the prompt; index 0 dummy
            batch.append(
                {
                    "tokens": PROMPT + r["ids"],
                    "mask": [0] * n + r["mask"],
                    # index j holds the logprob of token j; prompt positions: not generated
                    "gen": [0.0] * n + r["roll"],
                    "prev": prompt_lp + r["train"],
                    "reward": r["reward"],
                    "content": ["Solve: 12 * 7 =", "84"],
                }
            )
        log_batched_dict_as_jsonl(nemo_log_data(batch), OUT / f"train_data_step{step}.jsonl")


# --- verl ---------------------------------------------------------------------------------------
# A Parquet file a user builds from verl's DataProto batch (volcengine/verl b178a3cd,
# verl/experimental/agent_loop/agent_loop.py: prompts left-padded to prompt_length, responses
# right-padded to response_length; attention_mask covers prompt + response; response_mask is 1 on
# LLM-generated tokens only; rollout_log_probs 0.0 on tool-response tokens and padding
# (tool_agent_loop.py); old_log_probs from the actor, which scores every response token).
VERL_PROMPT_LENGTH = 8
VERL_RESPONSE_LENGTH = 16


def verl_batch(rng: np.random.Generator, turns: list[list[tuple[int, bool]]]) -> pa.Table:
    """One row per response: ``turns[i]`` lists (length, generated?) segments of response i
    (generated: the model's tokens; else a tool response)."""
    rows: dict[str, list] = {k: [] for k in ("uid", "prompts", "responses", "attention_mask",
                                              "response_mask", "rollout_log_probs",
                                              "old_log_probs")}  # fmt: skip
    for i, segments in enumerate(turns):
        prompt = [int(t) for t in rng.integers(1000, 2000, 3 + i)]
        ids, mask, roll, train = [], [], [], []
        for length, generated in segments:
            lp = _lp(rng, length)
            ids += [int(t) for t in rng.integers(1000, 2000, length)]
            mask += [1 if generated else 0] * length
            noise = [float(np.float32(v * 1.02)) for v in lp]
            roll += lp if generated else [0.0] * length
            train += noise if generated else _lp(rng, length)
        pad_p, pad_r = VERL_PROMPT_LENGTH - len(prompt), VERL_RESPONSE_LENGTH - len(ids)
        rows["uid"].append(f"u{i // 2}")  # one uid per prompt group of two responses
        rows["prompts"].append([0] * pad_p + prompt)
        rows["responses"].append(ids + [0] * pad_r)
        rows["attention_mask"].append(
            [0] * pad_p + [1] * len(prompt) + [1] * len(ids) + [0] * pad_r
        )
        rows["response_mask"].append(mask + [0] * pad_r)
        rows["rollout_log_probs"].append(roll + [0.0] * pad_r)
        rows["old_log_probs"].append(train + [0.0] * pad_r)
    types = {"attention_mask": pa.list_(pa.int64()), "response_mask": pa.list_(pa.int64()),
             "rollout_log_probs": pa.list_(pa.float32()), "old_log_probs": pa.list_(pa.float32())}  # fmt: skip
    return pa.table({k: pa.array(v, types.get(k)) for k, v in rows.items()})


def write_verl() -> None:
    rng = np.random.default_rng(3)
    single = [[(5, True)], [(9, True)], [(16, True)], [(2, True)]]
    pq.write_table(verl_batch(rng, single), OUT / "verl_step_5.parquet")
    tools = [[(4, True), (6, False), (3, True)], [(7, True)], [(2, True), (5, False), (5, True)]]
    pq.write_table(verl_batch(rng, tools), OUT / "verl_tools_step_5.parquet")


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
    write_slime_rollout(rows)
    write_verl()


if __name__ == "__main__":
    main()
