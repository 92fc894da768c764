"""Long healthy runs of the family's Llama, for a false-alarm check of `diagnose` on runs of
hundreds of steps (every other corpus has 6 to 12):

    python sample_data/family_long.py --out DIR [--family FAM]   # three runs, ~8 min on 2 cores
    python sample_data/confusion.py --corpus DIR --fresh           # alone and over a baseline

``L-a`` and ``L-b`` (150 steps of 16 sequences, two prompt loaders) and ``L-500`` (500 steps of
8 sequences): healthy, each step sampled and scored with the same weights, which cycle over
the family's RL checkpoints (steps 1-6, 7-12, ...: the weights move between steps as in
training, never between the two sides). The model is the one ``family.py --out FAM`` trained
(``FAM/cache/``; trained there when absent). Runs go to DIR/runs/NAME/, DIR/corpus.json lists
them as ``family.py`` does (``L-a``'s baseline ``L-b``, the others' ``L-a``); a run already
there is kept. docs/diagnose.md "Long healthy runs" says what they are named.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import os
import shutil
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from family import THREADS, load_model
from gen.calib_measure import corpus_entry, run_fields
from gen.corpus import prompt_line_sources, prompt_lines
from gen.family_model import VOCAB, FamilyModel
from gen.family_runs import (
    MODEL,
    FamilyRun,
    healthy,
    make_samples,
    prompt_columns,
    roll,
    scored,
    write_parquet_step,
)

LONG: tuple[tuple[FamilyRun, int], ...] = (
    (healthy("L-a", "healthy, 150 steps of 16 sequences", "L-b", prompts=4), 150),
    (healthy("L-b", "healthy, 150 steps of 16 sequences", "L-a", loader="b", prompts=4), 150),
    (healthy("L-500", "healthy, 500 steps of 8 sequences", "L-a", loader="c", prompts=2), 500),
)


def cycled(model: FamilyModel, steps: int) -> FamilyModel:
    """The model whose RL checkpoint at step s (1..steps) is its checkpoint 1 + (s - 1) mod n."""

    def cycle(states: list[dict[str, torch.Tensor]]) -> list[dict[str, torch.Tensor]]:
        n = len(states) - 1
        return [states[0], *(states[1 + (s - 1) % n] for s in range(1, steps + 1))]

    return dataclasses.replace(
        model, checkpoints=cycle(model.checkpoints), lagging=cycle(model.lagging)
    )


def write_long(run: FamilyRun, model: FamilyModel, steps: int, out: Path, seed: int) -> None:
    prompts, sources = prompt_lines(), prompt_line_sources()
    for step in range(1, steps + 1):
        samples = make_samples(run, model, prompts, sources, step, seed)
        roll(run, model, samples, step, seed)
        scored(run, model, samples, step)
        write_parquet_step(
            out / f"step_{step:04d}.parquet",
            step,
            copy.deepcopy(samples),
            {"source": "family"},
            prompt_columns(samples),
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="the corpus directory")
    parser.add_argument(
        "--family", type=Path, default=None, help="a family.py corpus whose model to use (DIR)"
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)
    torch.set_num_threads(THREADS)
    model = load_model((args.family or args.out) / "cache", args.seed, VOCAB)
    runs: list[tuple[dict[str, object], float]] = []
    for run, steps in LONG:
        final = args.out / "runs" / run.name
        t0 = time.perf_counter()
        if not final.is_dir():
            scratch = args.out / "runs" / f".{run.name}.partial"
            shutil.rmtree(scratch, ignore_errors=True)
            scratch.mkdir(parents=True)
            write_long(run, cycled(model, steps), steps, scratch, args.seed)
            scratch.rename(final)
            print(f"{run.name}: {steps} steps", flush=True)
        fields = {**run_fields(run), "model": MODEL, "steps": steps}
        runs.append((fields, round(time.perf_counter() - t0, 1)))
    entries = [corpus_entry(args.out, fields, seconds) for fields, seconds in runs]
    listing = {"size": "family-long", "seed": args.seed, "runs": entries}
    (args.out / "corpus.json").write_text(json.dumps(listing, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
