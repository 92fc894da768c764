"""Write the verl ``DataProto.save_to_disk`` fixtures with verl's own class.

Run with verl and tensordict installed (the committed files were made with verl 0.9.1,
tensordict 0.10.0, torch 2.13 CPU, Python 3.11): ``python tests/data/make_verl_fixtures.py``.
mismatchctl itself reads these files without verl.

The batches follow verl 0.9.1's agent loop and PPO trainer (verl/experimental/agent_loop/
agent_loop.py ``_postprocess``, verl/trainer/ppo/ray_trainer.py ``fit``): prompts left-padded and
responses right-padded with 0, int64 ids and masks, float32 logprobs and scores, ``uid`` and the
dataset fields as ``dtype=object`` arrays in ``non_tensor_batch``, ``global_steps`` and
``temperature`` in ``meta_info``. The samples are the shared dataset of make_fixtures.py, so the
readers' canonical rows can be compared with the other formats'.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from make_fixtures import OUT, PROMPT, samples

PROMPT_WIDTH = 5  # rollout.prompt_length: PROMPT left-padded with two 0s
RESPONSE_WIDTH = 10  # rollout.response_length: every batch is padded to it


def _padded(rows: list[dict], width: int) -> dict[str, np.ndarray]:
    """The agent loop's tensors of ``rows`` (numpy; converted to torch by the caller)."""
    n = len(rows)
    out = {
        k: np.zeros((n, width), dtype=np.int64) for k in ("responses", "response_mask", "resp_attn")
    }
    for k in ("rollout_log_probs", "old_log_probs", "token_level_scores"):
        out[k] = np.zeros((n, width), dtype=np.float32)
    for i, r in enumerate(rows):
        m = len(r["ids"])
        out["responses"][i, :m] = r["ids"]
        out["response_mask"][i, :m] = r["mask"]
        out["resp_attn"][i, :m] = 1
        out["rollout_log_probs"][i, :m] = r["roll"]
        out["old_log_probs"][i, :m] = r["train"]
        out["token_level_scores"][i, m - 1] = r["reward"]  # the score sits on the last token
    prompts = np.zeros((n, PROMPT_WIDTH), dtype=np.int64)
    prompts[:, PROMPT_WIDTH - len(PROMPT) :] = PROMPT
    prompt_attn = (prompts != 0).astype(np.int64)
    out["prompts"] = prompts
    out["input_ids"] = np.concatenate([prompts, out["responses"]], axis=1)
    out["attention_mask"] = np.concatenate([prompt_attn, out.pop("resp_attn")], axis=1)
    out["position_ids"] = np.clip(np.cumsum(out["attention_mask"], axis=1) - 1, 0, None)
    return out


def _non_tensor(rows: list[dict]) -> dict[str, np.ndarray]:
    def objects(values: list) -> np.ndarray:
        arr = np.empty(len(values), dtype=object)
        arr[:] = values
        return arr

    return {
        "uid": np.array([str(r["sid"]) for r in rows], dtype=object),
        "data_source": objects(["openai/gsm8k"] * len(rows)),
        "reward_model": objects([{"ground_truth": "42", "style": "rule"} for _ in rows]),
        "raw_prompt": objects([[{"role": "user", "content": "What is 6 x 7?"}] for _ in rows]),
        "index": objects([r["sid"] for r in rows]),
        "__num_turns__": np.array([2 for _ in rows], dtype=np.int32),
        "extras": objects([None for _ in rows]),
    }


def data_proto(rows: list[dict], step: int, drop: tuple[str, ...] = ()):
    import torch
    from tensordict import TensorDict
    from verl.protocol import DataProto

    padded = _padded(rows, RESPONSE_WIDTH)
    tensors = {k: torch.from_numpy(v) for k, v in padded.items() if k not in drop}
    batch = TensorDict(tensors, batch_size=[len(rows)])
    meta = {"global_steps": step, "temperature": 1.0, "global_token_num": [5] * len(rows)}
    return DataProto(batch=batch, non_tensor_batch=_non_tensor(rows), meta_info=meta)


def _tool_rows() -> list[dict]:
    """Two multi-turn responses whose tool tokens (mask 0) hold 0.0 on the rollout side and a
    real logprob on the trainer side, as verl's tool agent loop writes them."""
    rng = np.random.default_rng(11)
    rows = []
    for sid in range(2):
        mask = [1, 1, 1, 0, 0, 0, 0, 0, 1, 1]
        train = [float(np.float32(-v)) for v in rng.exponential(1.5, len(mask)) + 0.8]
        roll = [t if m else 0.0 for t, m in zip(train, mask, strict=True)]
        ids = [int(t) for t in rng.integers(1000, 2000, len(mask))]
        rows.append(dict(sid=sid, ids=ids, mask=mask, roll=roll, train=train, reward=1.0))
    return rows


def main() -> None:
    rows = samples()
    for step in (3, 4):
        data_proto([r for r in rows if r["step"] == step], step).save_to_disk(
            OUT / f"verl_batch_step{step}.pkl"
        )
    os.environ["VERL_DATAPROTO_SERIALIZATION_METHOD"] = "numpy"
    step3 = [r for r in rows if r["step"] == 3]
    data_proto(step3, 3).save_to_disk(OUT / "verl_batch_numpy_step3.pkl")
    del os.environ["VERL_DATAPROTO_SERIALIZATION_METHOD"]
    # the generation output: no old_log_probs yet (and no scores)
    gen = data_proto(step3, 3, drop=("old_log_probs", "token_level_scores"))
    gen.save_to_disk(OUT / "verl_gen_batch.dp")
    # single-turn responses without response_mask (mask = the response part of attention_mask)
    single = [{**r, "mask": [1] * len(r["ids"])} for r in rows if r["step"] == 4]
    single = [{**r, "roll": [v or -0.25 for v in r["roll"]]} for r in single]
    single = [{**r, "train": [v or -0.5 for v in r["train"]]} for r in single]
    data_proto(single, 5, drop=("response_mask",)).save_to_disk(OUT / "verl_no_mask_step5.pkl")
    data_proto(_tool_rows(), 6, drop=("response_mask",)).save_to_disk(
        OUT / "verl_no_mask_tools_step6.pkl"
    )


if __name__ == "__main__":
    main()
