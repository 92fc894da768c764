"""Write TRL GRPOTrainer completions tables: ``fixtures/trl/completions_<step>.parquet``.

As TRL 1.16.0 writes them with ``log_completions=True`` (trl/trainer/grpo_trainer.py, ``log``):
``pd.DataFrame({"step", "prompt", "completion", <one column per reward function>, <log_extra
columns>, "advantage"}).to_parquet(...)``, prompts and completions as conversations (lists of
messages) or as text. Needs pandas: ``python tests/data/make_trl_fixtures.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).parent))
from make_fixtures import OUT

TRL = OUT / "trl"


def write(step: int, prompts: list, completions: list, rewards: dict[str, list[float]]) -> None:
    n = len(prompts)
    table = {
        "step": [step] * n,
        "prompt": prompts,
        "completion": completions,
        **rewards,
        "advantage": [0.5 if i % 2 else -0.5 for i in range(n)],
    }
    TRL.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(table).to_parquet(TRL / f"completions_{step:05d}.parquet")


def main() -> None:
    question = [{"role": "user", "content": "What is 6 x 7?"}]
    answers = [[{"role": "assistant", "content": c}] for c in ("42", "<think>6*7</think> 42")]
    write(
        10,
        [question, question],
        answers,
        {"accuracy_reward": [1.0, 1.0], "format_reward": [0.0, 1.0]},
    )
    write(20, ["The sky is", "The sky is"], [" blue.", " green."], {"reward_len": [-3.0, -4.0]})


if __name__ == "__main__":
    main()
