"""The family's long healthy runs (sample_data/family_long.py): the weights cycle over the RL
checkpoints from step to step, and a run's steps are written as the family's are, on a tiny
random Llama."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from tests.sample_data.family_deps import family_deps

torch = family_deps()

import pyarrow.parquet as pq  # noqa: E402
from family_long import LONG, cycled, write_long  # noqa: E402
from gen.family_model import FamilyModel, llama_config, new_model, train_tokenizer  # noqa: E402


def _model(n: int, tokenizer: bool = True) -> FamilyModel:
    """A tiny random Llama (over the family's BPE: ``tokenizer``) with ``n`` RL checkpoints,
    each its own."""
    tok = train_tokenizer() if tokenizer else None
    config = dataclasses.replace(llama_config(), hidden_size=32, intermediate_size=48,
                                 num_hidden_layers=1)  # fmt: skip
    torch.manual_seed(0)
    states = []
    for i in range(n):
        model = new_model(config)
        states.append({k: v + i * 1e-3 for k, v in model.state_dict().items()})
    return FamilyModel(tok, config, states, states, states[0], [])  # type: ignore[arg-type]


def test_the_runs_are_healthy_and_long() -> None:
    names = [run.name for run, _ in LONG]
    assert len(set(names)) == len(names)
    for run, steps in LONG:
        assert run.kind == "healthy" and run.baseline in names and run.baseline != run.name
        assert run.weights == "current" and steps >= 150


def test_the_weights_cycle_over_the_checkpoints() -> None:
    model = _model(4, tokenizer=False)  # checkpoints 0..3: steps take 1, 2, 3, 1, 2, 3, ...
    long = cycled(model, 8)
    assert len(long.checkpoints) == 9
    for step in range(1, 9):
        assert long.checkpoints[step] is model.checkpoints[1 + (step - 1) % 3]
        assert long.lagging[step] is model.lagging[1 + (step - 1) % 3]


def test_a_long_run_writes_every_step(tmp_path: Path) -> None:
    model = _model(3)
    run = dataclasses.replace(LONG[0][0], prompts=1, group=2, turns=(1, 1))
    write_long(run, cycled(model, 3), 3, tmp_path, seed=0)
    for step in (1, 2, 3):
        table = pq.read_table(tmp_path / f"step_{step:04d}.parquet")
        assert table.num_rows == 2 and set(table.column("step").to_pylist()) == {step}
        for rollout, trainer, mask in zip(
            table.column("rollout_log_probs").to_pylist(),
            table.column("old_log_probs").to_pylist(),
            table.column("response_mask").to_pylist(),
            strict=True,
        ):
            kept = [(a, b) for a, b, m in zip(rollout, trainer, mask, strict=True) if m]
            assert kept and all(abs(a - b) < 0.1 for a, b in kept)  # bf16 against fp32
