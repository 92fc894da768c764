"""Generate mismatchctl's bundled sample data with real numerical mismatch.

    python sample_data/generate.py --out sample_data/runs [--size full|ci] [--seed 0]

A small byte-level transformer is trained briefly on CPU on Python standard-library source; its
checkpoints along training are the RL training steps. Each run samples multi-turn rollouts with a
bf16 KV-cache inference path and rescores them with an fp32 full-forward trainer path; one knob of
the inference path (or of the weights, prompts or trainer input) differs per run. The synthetic multi-GPU run is derived from
`ref` and labelled so, as is the synthetic training log written for it (gen/training_log.py).
A small mixture-of-experts variant of the model, trained the same way, gives the MoE runs
(gen/moe_runs.py): both sides' routed experts are dumped, with and without routing replay.
Bit-for-bit reproducible for a seed on one machine (same Python, torch and pyarrow versions).
`--runs a,b` regenerates only the named runs and updates their manifest entries.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gen import bisect_model
from gen.corpus import (
    PROMPT_MODULES,
    TRAIN_MODULES,
    prompt_line_sources,
    prompt_lines,
    training_tokens,
)
from gen.engine import InferenceEngine, TrainerScorer
from gen.model import ModelConfig
from gen.moe import MoEConfig
from gen.moe_runs import MOE_RUNS, MoESize, moe_step
from gen.rollout import RolloutShape, Sample, make_samples, roll_out, score, stable_seed
from gen.routes import route_columns
from gen.runs import ADDED_RUNS, RUNS, SYNTHETIC_SHOWS, SYNTHETIC_TAGS, TOOL_RENDERS, RunSpec
from gen.synthetic import synthesize_step
from gen.tokenizer import FILE_NAME as TOKENIZER_FILE
from gen.tokenizer import write_tokenizer
from gen.train import TrainConfig, Trained, train
from gen.training_log import write_training_log
from gen.writers import prompt_columns, write_manifest, write_nemo_step, write_parquet_step

THREADS = 2  # fixed: CPU reductions depend on the thread count


@dataclass(frozen=True)
class Size:
    train: TrainConfig
    shape: RolloutShape
    n_steps: int
    ci: bool  # only the runs marked in_ci
    moe: MoESize  # the MoE model and runs (every MoE run is in every size)


SIZES: dict[str, Size] = {
    "full": Size(
        TrainConfig(warmup_iters=400, iters_per_step=10, n_checkpoints=9),
        RolloutShape(12, 4),
        8,
        ci=False,
        moe=MoESize(
            TrainConfig(warmup_iters=200, iters_per_step=10, n_checkpoints=5, batch=8),
            RolloutShape(12, 4),
            4,
        ),
    ),
    "ci": Size(
        TrainConfig(warmup_iters=40, iters_per_step=5, n_checkpoints=4),
        RolloutShape(4, 4),
        3,
        ci=True,
        moe=MoESize(
            TrainConfig(warmup_iters=20, iters_per_step=5, n_checkpoints=3, batch=8),
            RolloutShape(3, 4),
            2,
        ),
    ),
}
SYNTHETIC = "synthetic-gpus"


@dataclass
class Trainee:
    """The trained model: its config, training settings and weights."""

    cfg: ModelConfig
    train_cfg: TrainConfig
    trained: Trained

    def rollout_state(self, spec: RunSpec, step: int) -> dict[str, torch.Tensor]:
        """The weights the run's engine samples step `step` with."""
        if spec.iter_lag:
            it = self.train_cfg.warmup_iters + self.train_cfg.iters_per_step * step
            return self.trained.states[it - spec.iter_lag]
        return self.trained.checkpoints[step - spec.weight_lag]


@dataclass(frozen=True)
class Batches:
    """What every run's steps are built from: size, seed and the prompt lines with sources."""

    size: Size
    seed: int
    lines: list[bytes]
    sources: list[str]


def make_deterministic(seed: int) -> None:
    torch.manual_seed(seed)
    torch.set_num_threads(THREADS)
    torch.use_deterministic_algorithms(True)


def run_step(spec: RunSpec, model: Trainee, batches: Batches, step: int) -> list[Sample]:
    """Roll out the step's batch with the run's rollout weights; score it with checkpoint step."""
    engine_cfg = spec.fault_engine if step in spec.fault_steps else spec.engine
    assert engine_cfg is not None, spec.name
    engine = InferenceEngine(model.cfg, model.rollout_state(spec, step), engine_cfg)
    scorer = TrainerScorer(model.cfg, model.trained.checkpoints[step], spec.engine.temperature)
    shape, seed = batches.size.shape, batches.seed
    samples = make_samples(shape, batches.lines, step, seed, batches.sources, spec.loader)
    gen = torch.Generator().manual_seed(stable_seed(seed, "sampling", spec.name, step))
    roll_out(engine, samples, shape.limits, gen)
    render = TOOL_RENDERS[spec.tool_render] if spec.tool_render else None
    score(scorer, samples, render)
    return samples


def write_step(spec: RunSpec, run_dir: Path, step: int, samples: list[Sample]) -> None:
    if spec.fmt == "nemo-jsonl":
        write_nemo_step(run_dir / f"train_data_step{step}.jsonl", samples)
        return
    extra: dict[str, pa.Array] = {}
    if spec.weight_lag:
        extra["weight_version"] = pa.array([step - spec.weight_lag] * len(samples), pa.int64())
    if spec.prompt_columns:
        extra |= prompt_columns(samples)
    write_parquet_step(run_dir / f"step_{step:04d}.parquet", step, samples, spec.tags, extra)


def measured_vllm_kl(samples: Sequence[Sample]) -> float:
    """Mean K3 over the model tokens, r = trainer - rollout logprob (4 significant digits)."""
    r = np.concatenate(
        [
            np.asarray(s.trainer_lp, np.float64)[np.asarray(s.mask) == 1]
            - np.asarray(s.rollout_lp, np.float64)[np.asarray(s.mask) == 1]
            for s in samples
        ]
    )
    return float(f"{np.mean(np.expm1(r) - r):.4g}")


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


def train_model(cfg: ModelConfig, size: Size, seed: int, specs: Sequence[RunSpec]) -> Trained:
    """Train the model, keeping the intermediate weights the runs' `iter_lag`s need."""
    t0 = time.perf_counter()
    print(f"training TinyLM on {len(TRAIN_MODULES)} stdlib modules", flush=True)
    train_cfg = size.train
    ends = [
        train_cfg.warmup_iters + train_cfg.iters_per_step * k for k in range(1, size.n_steps + 1)
    ]
    lags = {spec.iter_lag for spec in specs if spec.iter_lag and in_size(spec, size)}
    keep_iters = {it - lag for it in ends for lag in lags}
    trained = train(cfg, train_cfg, training_tokens(), seed, keep_iters=keep_iters)
    loss = np.mean(trained.losses[-20:])
    print(f"trained in {time.perf_counter() - t0:.0f}s, final loss {loss:.3f}", flush=True)
    return trained


def in_size(spec: RunSpec, size: Size) -> bool:
    return spec.in_ci or not size.ci


def run_names(size: Size) -> list[str]:
    """Every run of the size, in the manifest's order."""
    return [
        *(spec.name for spec in RUNS if in_size(spec, size)),
        SYNTHETIC,
        *(spec.name for spec in ADDED_RUNS if in_size(spec, size)),
        *(spec.name for spec in MOE_RUNS),
    ]


def run_all(
    specs: Sequence[RunSpec],
    model: Trainee,
    batches: Batches,
    out: Path,
    manifest_dir: Path,
    selected: Collection[str],
) -> tuple[list[dict[str, object]], dict[int, list[Sample]]]:
    """Every selected run of `specs` (those in the size): manifest entries, and ref's samples per
    step."""
    entries: list[dict[str, object]] = []
    ref_samples: dict[int, list[Sample]] = {}
    for spec in specs:
        if not in_size(spec, batches.size) or spec.name not in selected:
            continue
        t1 = time.perf_counter()
        run_dir = fresh_dir(out / spec.name)
        everything: list[Sample] = []
        for step in range(1, (spec.n_steps or batches.size.n_steps) + 1):
            samples = run_step(spec, model, batches, step)
            write_step(spec, run_dir, step, samples)
            everything.extend(samples)
            if spec.name == "ref":
                ref_samples[step] = samples
        took = time.perf_counter() - t1
        print(f"run {spec.name}: {took:.0f}s, vllm_kl {measured_vllm_kl(everything)}", flush=True)
        entries.append(
            manifest_entry(spec.name, out, manifest_dir, spec.fmt, spec.tags, True, spec.shows)
        )
    return entries, ref_samples


def synthetic_run(
    ref_samples: dict[int, list[Sample]], batches: Batches, out: Path, manifest_dir: Path
) -> dict[str, object]:
    """The synthetic multi-GPU run from ref's samples, and its synthetic training log."""
    run_dir = fresh_dir(out / SYNTHETIC)
    seed, n_steps = batches.seed, batches.size.n_steps
    rng = np.random.default_rng(stable_seed(seed, "synthetic-gpus"))
    for step in range(1, n_steps + 1):
        samples, gpus = synthesize_step(ref_samples[step], step, n_steps, rng)
        extra = {"gpu": pa.array(gpus, type=pa.string())}
        path = run_dir / f"step_{step:04d}.parquet"
        write_parquet_step(path, step, samples, SYNTHETIC_TAGS, extra)
    # a SYNTHETIC training log for the synthetic run (gen/training_log.py), from its dumps
    logs_dir = manifest_dir / "logs"  # beside the runs: a run's directory ingests as it is
    logs_dir.mkdir(parents=True, exist_ok=True)
    log = write_training_log(
        sorted(run_dir.glob("step_*.parquet")),
        logs_dir / "synthetic-gpus.jsonl",
        np.random.default_rng(stable_seed(seed, "synthetic-gpus-log")),
    )
    entry = manifest_entry(
        "synthetic-gpus",
        out,
        manifest_dir,
        "parquet-sequence",
        SYNTHETIC_TAGS,
        False,
        SYNTHETIC_SHOWS,
    )
    entry["metrics"] = log.resolve().relative_to(manifest_dir.resolve()).as_posix()
    return entry


def moe_run_all(
    size: Size, batches: Batches, out: Path, manifest_dir: Path, selected: Collection[str]
) -> tuple[list[dict[str, object]], dict[str, object]]:
    """The MoE model trained, and the selected MoE runs: manifest entries, and the model's
    generator info (manifest key `generator.moe`)."""
    specs = [spec for spec in MOE_RUNS if spec.name in selected]
    cfg = MoEConfig()
    t0 = time.perf_counter()
    print(f"training the MoE model on {len(TRAIN_MODULES)} stdlib modules", flush=True)
    trained = train(cfg, size.moe.train, training_tokens(), batches.seed)
    loss = round(float(np.mean(trained.losses[-20:])), 4)
    print(f"trained in {time.perf_counter() - t0:.0f}s, final loss {loss:.3f}", flush=True)
    t1 = time.perf_counter()
    dirs = {spec.name: fresh_dir(out / spec.name) for spec in specs}
    everything: dict[str, list[Sample]] = {spec.name: [] for spec in specs}
    for step in range(1, size.moe.n_steps + 1):
        natural, replayed = moe_step(
            cfg, trained, size.moe.shape, batches.lines, batches.sources, batches.seed, step
        )
        for spec in specs:
            samples = replayed if spec.replay else natural
            width = max(len(s.response) for s in samples)
            extra = prompt_columns(samples)
            extra |= route_columns(samples, width, spec.encoding, spec.capture_bug)
            path = dirs[spec.name] / f"step_{step:04d}.parquet"
            write_parquet_step(path, step, samples, spec.tags, extra)
            everything[spec.name].extend(samples)
    entries = []
    for spec in specs:
        print(f"run {spec.name}: vllm_kl {measured_vllm_kl(everything[spec.name])}", flush=True)
        entry = manifest_entry(
            spec.name, out, manifest_dir, "parquet-sequence", spec.tags, True, spec.shows
        )
        entry["ingest"] = spec.ingest_options(cfg)
        entries.append(entry)
    print(f"MoE runs: {time.perf_counter() - t1:.0f}s", flush=True)
    info = {"model": asdict(cfg), "train": asdict(size.moe.train), "final_train_loss": loss}
    return entries, info


def write_bisect_model(
    model: Trainee, size: Size, manifest_dir: Path, selected: Collection[str]
) -> None:
    """The trainer checkpoint `bisect` runs on (gen/bisect_model.py), with its run."""
    if bisect_model.BISECT_RUN not in selected or size.n_steps < bisect_model.BISECT_STEP:
        return
    state = model.trained.checkpoints[bisect_model.BISECT_STEP]
    path = bisect_model.save(state, model.cfg, manifest_dir / "model")
    print(f"bisect checkpoint -> {path}", flush=True)


def generator_info(args: argparse.Namespace, model: Trainee) -> dict[str, object]:
    return {
        "command": command(args),
        "model": asdict(model.cfg),
        "train": asdict(model.train_cfg),
        "train_modules": list(TRAIN_MODULES),
        "prompt_modules": list(PROMPT_MODULES),
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "final_train_loss": round(float(np.mean(model.trained.losses[-20:])), 4),
    }


def command(args: argparse.Namespace) -> str:
    return f"python sample_data/generate.py --out <dir> --size {args.size} --seed {args.seed}"


def selection(arg: str | None, size: Size) -> list[str]:
    """The runs to generate: all of the size, or those named (comma-separated)."""
    names = run_names(size)
    if arg is None:
        return names
    chosen = [n.strip() for n in arg.split(",") if n.strip()]
    unknown = [n for n in chosen if n not in names]
    if unknown or not chosen:
        raise SystemExit(f"--runs: unknown run(s) {unknown} for this size; runs: {names}")
    if SYNTHETIC in chosen and "ref" not in chosen:
        raise SystemExit(f"--runs: {SYNTHETIC} is derived from ref's samples: select ref too")
    return chosen


def merged_manifest(
    path: Path,
    size: Size,
    entries: list[dict[str, object]],
    info: dict[str, object],
    args: argparse.Namespace,
) -> dict[str, object]:
    """The manifest with the generated runs' entries: with --runs, the existing manifest's other
    entries and generator info are kept (the order is the full generation's). `tokenizer`: the
    runs' tokenizer.json (every model here reads bytes), beside the manifest."""
    old: dict[str, Any] = {"runs": [], "generator": {}}
    if args.runs is not None and path.is_file():
        old = json.loads(path.read_text(encoding="utf-8"))
    by_name = {str(e["name"]): e for e in old["runs"]} | {str(e["name"]): e for e in entries}
    order = run_names(size)
    runs = [by_name[n] for n in order if n in by_name]
    runs += [e for n, e in by_name.items() if n not in order]
    generator = {**old["generator"], **info, "command": command(args)}
    return {
        "runs": runs,
        "generator": dict(sorted(generator.items())),
        "tokenizer": TOKENIZER_FILE,
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
    parser.add_argument(
        "--runs",
        default=None,
        help="comma-separated run names: generate only these and update their manifest entries "
        "(the others' files and entries are left as they are)",
    )
    args = parser.parse_args(argv)
    size = SIZES[args.size]
    selected = selection(args.runs, size)
    manifest_path: Path = args.manifest or args.out.resolve().parent / "manifest.json"
    manifest_dir = manifest_path.parent
    make_deterministic(args.seed)
    t0 = time.perf_counter()
    batches = Batches(size, args.seed, prompt_lines(), prompt_line_sources())

    entries: list[dict[str, object]] = []
    info: dict[str, object] = {}
    moe_names = {spec.name for spec in MOE_RUNS}
    if any(name not in moe_names for name in selected):  # a run of the dense model
        cfg = ModelConfig()
        model = Trainee(cfg, size.train, train_model(cfg, size, args.seed, (*RUNS, *ADDED_RUNS)))
        found, ref_samples = run_all(RUNS, model, batches, args.out, manifest_dir, selected)
        entries += found
        if SYNTHETIC in selected:
            entries.append(synthetic_run(ref_samples, batches, args.out, manifest_dir))
        entries += run_all(ADDED_RUNS, model, batches, args.out, manifest_dir, selected)[0]
        write_bisect_model(model, size, manifest_dir, selected)
        info |= generator_info(args, model)
    if moe_names & set(selected):
        found, info["moe"] = moe_run_all(size, batches, args.out, manifest_dir, selected)
        entries += found

    write_tokenizer(manifest_dir / TOKENIZER_FILE)
    write_manifest(manifest_path, merged_manifest(manifest_path, size, entries, info, args))
    print(f"done in {time.perf_counter() - t0:.0f}s -> {args.out}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
