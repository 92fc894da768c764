"""Generate mismatchctl's bundled sample data with real numerical mismatch.

    python sample_data/generate.py --out sample_data/runs [--size full|ci] [--seed 0]

A small byte-level transformer is trained briefly on CPU on Python standard-library source; its
checkpoints along training are the RL training steps. Each run samples multi-turn rollouts with a
bf16 KV-cache inference path and rescores them with an fp32 full-forward trainer path; one knob of
the inference path differs per run. The synthetic multi-GPU run is derived from `ref` and labelled
so, as is the synthetic training log written for it (gen/training_log.py).
Bit-for-bit reproducible for a seed on one machine (same Python, torch and pyarrow versions).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gen.corpus import PROMPT_MODULES, TRAIN_MODULES, prompt_lines, training_tokens
from gen.engine import InferenceEngine, TrainerScorer
from gen.model import ModelConfig
from gen.rollout import RolloutShape, Sample, make_samples, roll_out, score, stable_seed
from gen.runs import RUNS, SYNTHETIC_SHOWS, SYNTHETIC_TAGS, RunSpec
from gen.synthetic import synthesize_step
from gen.train import TrainConfig, train
from gen.training_log import write_training_log
from gen.writers import write_manifest, write_nemo_step, write_parquet_step

THREADS = 2  # fixed: CPU reductions depend on the thread count


@dataclass(frozen=True)
class Size:
    train: TrainConfig
    shape: RolloutShape
    n_steps: int


SIZES: dict[str, Size] = {
    "full": Size(
        TrainConfig(warmup_iters=400, iters_per_step=10, n_checkpoints=9), RolloutShape(12, 4), 8
    ),
    "ci": Size(
        TrainConfig(warmup_iters=40, iters_per_step=5, n_checkpoints=4), RolloutShape(4, 4), 3
    ),
}


def make_deterministic(seed: int) -> None:
    torch.manual_seed(seed)
    torch.set_num_threads(THREADS)
    torch.use_deterministic_algorithms(True)


def run_step(
    spec: RunSpec,
    checkpoints: list[dict[str, torch.Tensor]],
    size: Size,
    prompts: list[bytes],
    step: int,
    seed: int,
    model_cfg: ModelConfig,
) -> list[Sample]:
    """Roll out the step's batch with checkpoint step - lag and score it with checkpoint step."""
    engine = InferenceEngine(model_cfg, checkpoints[step - spec.weight_lag], spec.engine)
    scorer = TrainerScorer(model_cfg, checkpoints[step], spec.engine.temperature)
    samples = make_samples(size.shape, prompts, step, seed)
    gen = torch.Generator().manual_seed(stable_seed(seed, "sampling", spec.name, step))
    roll_out(engine, samples, size.shape.limits, gen)
    score(scorer, samples)
    return samples


def write_step(spec: RunSpec, run_dir: Path, step: int, samples: list[Sample]) -> None:
    if spec.fmt == "nemo-jsonl":
        write_nemo_step(run_dir / f"train_data_step{step}.jsonl", samples)
        return
    extra = None
    if spec.weight_lag:
        extra = {
            "weight_version": pa.array([step - spec.weight_lag] * len(samples), type=pa.int64())
        }
    write_parquet_step(run_dir / f"step_{step:04d}.parquet", step, samples, spec.tags, extra)


def fresh_dir(path: Path) -> Path:
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


def manifest_entry(
    name: str,
    out: Path,
    manifest_dir: Path,
    fmt: str,
    tags: dict[str, str],
    captured: bool,
    shows: str,
) -> dict[str, object]:
    rel = (out / name).resolve().relative_to(manifest_dir.resolve()).as_posix()
    return {
        "name": name,
        "path": rel,
        "format": fmt,
        "tags": tags,
        "captured": captured,
        "shows": shows,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out", type=Path, required=True, help="directory that receives one folder per run"
    )
    parser.add_argument("--size", choices=sorted(SIZES), default="full")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--manifest", type=Path, default=None, help="default: <out>/../manifest.json"
    )
    args = parser.parse_args(argv)
    size = SIZES[args.size]
    manifest_path: Path = args.manifest or args.out.resolve().parent / "manifest.json"
    make_deterministic(args.seed)
    model_cfg = ModelConfig()

    t0 = time.perf_counter()
    print(f"training TinyLM on {len(TRAIN_MODULES)} stdlib modules ({args.size})", flush=True)
    checkpoints, losses = train(model_cfg, size.train, training_tokens(), args.seed)
    print(
        f"trained in {time.perf_counter() - t0:.0f}s, final loss {np.mean(losses[-20:]):.3f}",
        flush=True,
    )

    prompts = prompt_lines()
    steps = range(1, size.n_steps + 1)
    entries: list[dict[str, object]] = []
    ref_samples: dict[int, list[Sample]] = {}
    for spec in RUNS:
        t1 = time.perf_counter()
        run_dir = fresh_dir(args.out / spec.name)
        for step in steps:
            samples = run_step(spec, checkpoints, size, prompts, step, args.seed, model_cfg)
            write_step(spec, run_dir, step, samples)
            if spec.name == "ref":
                ref_samples[step] = samples
        print(f"run {spec.name}: {time.perf_counter() - t1:.0f}s", flush=True)
        entries.append(
            manifest_entry(
                spec.name, args.out, manifest_path.parent, spec.fmt, spec.tags, True, spec.shows
            )
        )

    run_dir = fresh_dir(args.out / "synthetic-gpus")
    rng = np.random.default_rng(stable_seed(args.seed, "synthetic-gpus"))
    for step in steps:
        samples, gpus = synthesize_step(ref_samples[step], step, size.n_steps, rng)
        extra = {"gpu": pa.array(gpus, type=pa.string())}
        write_parquet_step(
            run_dir / f"step_{step:04d}.parquet", step, samples, SYNTHETIC_TAGS, extra
        )
    # a SYNTHETIC training log for the synthetic run (gen/training_log.py), from its dumps
    logs_dir = args.out / "logs"
    logs_dir.mkdir(parents=True, exist_ok=True)
    log = write_training_log(
        sorted(run_dir.glob("step_*.parquet")),
        logs_dir / "synthetic-gpus.jsonl",
        np.random.default_rng(stable_seed(args.seed, "synthetic-gpus-log")),
    )
    entry = manifest_entry(
        "synthetic-gpus",
        args.out,
        manifest_path.parent,
        "parquet-sequence",
        SYNTHETIC_TAGS,
        False,
        SYNTHETIC_SHOWS,
    )
    entry["metrics"] = log.resolve().relative_to(manifest_path.parent.resolve()).as_posix()
    entries.append(entry)

    manifest = {
        "runs": entries,
        "generator": {
            "command": "python sample_data/generate.py --out <dir>"
            f" --size {args.size} --seed {args.seed}",
            "model": asdict(model_cfg),
            "train": asdict(size.train),
            "train_modules": list(TRAIN_MODULES),
            "prompt_modules": list(PROMPT_MODULES),
            "python": f"{sys.version_info.major}.{sys.version_info.minor}",
            "final_train_loss": round(float(np.mean(losses[-20:])), 4),
        },
    }
    write_manifest(manifest_path, manifest)
    print(f"done in {time.perf_counter() - t0:.0f}s -> {args.out}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
