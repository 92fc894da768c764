"""Generate one calibration run: train (or load) its model, roll out each step through its engine
(and replicas), score with the fp32 trainer, apply its trainer-side or writer fault, write the
Parquet dumps. Rollouts are kept per `CalibRun.rollout_key` so runs that differ only on the
trainer's side share them."""

from __future__ import annotations

import copy
import hashlib
import json
import time
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch

from gen.calib_spec import CalibRun, CalibSize, ModelSpec, Replica
from gen.calib_weights import SCHEDULES, WEIGHTS, Setting, Weights, kept_iterations
from gen.corpus import training_tokens
from gen.edits import RENDERS, append_stop, apply_edit
from gen.engine import TRAINER_DTYPES, EngineConfig, InferenceEngine, TrainerScorer, WaveEngine
from gen.moe import MoEConfig
from gen.rollout import Sample, make_samples, roll_out, score, stable_seed
from gen.routes import route_columns
from gen.train import Trained, train
from gen.writers import prompt_columns, write_parquet_step

TAGS = {"source": "calibration"}


def cache_key(spec: ModelSpec) -> str:
    """The checkpoint cache's file name: the model config, the training config and the seed."""
    blob = json.dumps(
        {
            "model": type(spec.cfg).__name__,
            "cfg": asdict(spec.cfg),
            "train": asdict(spec.train),
            "seed": spec.seed,
            "torch": torch.__version__,
        },
        sort_keys=True,
    )
    return f"{spec.label}-{hashlib.sha256(blob.encode()).hexdigest()[:16]}.pt"


def load_or_train(spec: ModelSpec, cache: Path) -> Trained:
    """The model's checkpoints from the cache, or trained now and cached."""
    path = cache / cache_key(spec)
    if path.is_file():
        saved = torch.load(path, weights_only=True)
        return Trained(saved["checkpoints"], saved["losses"], saved["states"])
    t0 = time.perf_counter()
    trained = train(
        spec.cfg, spec.train, training_tokens(), spec.seed, False, kept_iterations(spec.train)
    )
    cache.mkdir(parents=True, exist_ok=True)
    saved = {"checkpoints": trained.checkpoints, "losses": trained.losses, "states": trained.states}
    torch.save(saved, path.with_suffix(".tmp"))
    path.with_suffix(".tmp").rename(path)
    loss = np.mean(trained.losses[-20:])
    print(f"trained {spec.label} in {time.perf_counter() - t0:.0f}s, loss {loss:.3f}", flush=True)
    return trained


@dataclass
class Builder:
    size: CalibSize
    seed: int
    lines: list[bytes]
    sources: list[str]
    cache: Path
    trained: dict[str, Trained] = field(default_factory=dict)
    rollouts: dict[tuple[object, ...], dict[int, list[Sample]]] = field(default_factory=dict)

    def model(self, key: str) -> Trained:
        if key not in self.trained:
            self.trained[key] = load_or_train(self.size.models[key], self.cache)
        return self.trained[key]

    def weights(self, run: CalibRun) -> Weights:
        other = self.model("tinylm-seed1") if run.weights == "wrong-checkpoint" else None
        return Weights(self.size.models[run.model].train, self.model(run.model), other)

    def n_steps(self, run: CalibRun) -> int:
        return self.size.long_steps if run.long else self.size.steps

    def setting(self, run: CalibRun, step: int) -> Setting:
        """The step's engine and batch shape (a growth schedule changes them step by step)."""
        shape = self.size.shapes[run.shape]
        if not run.schedule:
            return run.engine, shape
        return SCHEDULES[run.schedule](run.engine, shape, step, self.n_steps(run))

    def step_rollouts(self, run: CalibRun, step: int) -> list[Sample]:
        """The step's rollouts, unscored (shared by the runs with the same rollout key)."""
        key = run.rollout_key()
        done = self.rollouts.setdefault(key, {})
        if step not in done:
            done[step] = self.roll(run, step)
        return done[step]

    def roll(self, run: CalibRun, step: int) -> list[Sample]:
        if run.waves:
            return self.roll_waves(run, step)
        engine_cfg, shape = self.setting(run, step)
        samples = make_samples(shape, self.lines, step, self.seed, self.sources, run.loader)
        w, n = self.weights(run), self.n_steps(run)
        state = WEIGHTS[run.weights](w, step, n)
        stale = WEIGHTS[run.prefix_weights](w, step, n) if run.prefix_groups else None
        replicas: list[Replica | None] = [*run.replicas] or [None]
        which = [zlib.crc32(s.uid.encode()) % len(replicas) for s in samples]
        for i, rep in enumerate(replicas):
            members = [s for s, r in zip(samples, which, strict=True) if r == i]
            if not members:
                continue
            cfg = rep.engine if rep is not None and rep.engine else engine_cfg
            engine = self.engine(run, state, cfg, stale)
            gen = torch.Generator().manual_seed(
                stable_seed(self.seed, "sampling", run.sampling_stream, step, i)
            )
            roll_out(engine, members, shape.limits, gen, prefix_hits(run))
            for s in members:
                s.gpu = rep.gpu if rep is not None else ""
        return samples

    def roll_waves(self, run: CalibRun, step: int) -> list[Sample]:
        """The step's rollouts in waves: each group of `wave_groups` decoded by an engine that
        admits its wave size at once; each response labelled with its first turn's wave."""
        engine_cfg, shape = self.setting(run, step)
        samples = make_samples(shape, self.lines, step, self.seed, self.sources, run.loader)
        state = WEIGHTS[run.weights](self.weights(run), step, self.n_steps(run))
        model_cfg = self.size.models[run.model].cfg
        groups, first_id = wave_groups(samples, run.waves), 0
        for g, (members, size) in enumerate(zip(groups, run.waves, strict=True)):
            if not members:
                continue
            engine = WaveEngine(model_cfg, state, engine_cfg, None, size)
            gen = torch.Generator().manual_seed(
                stable_seed(self.seed, "sampling", run.sampling_stream, step, g)
            )
            roll_out(engine, members, shape.limits, gen, None)
            first_id = label_waves(members, size, first_id)
        return samples

    def engine(
        self,
        run: CalibRun,
        state: dict[str, torch.Tensor],
        cfg: EngineConfig,
        stale: dict[str, torch.Tensor] | None,
    ) -> InferenceEngine:
        model_cfg = self.size.models[run.model].cfg
        if not run.max_batch:
            return InferenceEngine(model_cfg, state, cfg, stale)
        return WaveEngine(model_cfg, state, cfg, stale, run.max_batch)

    def scored(self, run: CalibRun, step: int) -> list[Sample]:
        """The step's samples as the run's dump holds them."""
        samples = [copy.deepcopy(s) for s in self.step_rollouts(run, step)]
        if run.append_stop:
            append_stop(samples)
        temperature = run.trainer_temperature or self.setting(run, step)[0].temperature
        spec = self.size.models[run.model]
        state = self.model(run.model).checkpoints[step]
        scorer = TrainerScorer(spec.cfg, state, temperature, TRAINER_DTYPES[run.trainer_dtype])
        score(scorer, samples, RENDERS[run.render] if run.render else None, run.replay)
        return apply_edit(run.edit, samples) if run.edit else samples

    def write(self, run: CalibRun, run_dir: Path) -> None:
        for step in range(1, self.n_steps(run) + 1):
            samples = self.scored(run, step)
            extra = prompt_columns(samples)
            if run.replicas:
                extra["gpu"] = pa.array([s.gpu for s in samples], pa.string())
            if run.waves:
                extra |= batch_columns(samples)
            if isinstance(self.size.models[run.model].cfg, MoEConfig):
                width = max(len(s.response) for s in samples)
                extra |= route_columns(samples, width, "lists", run.capture_bug)
            path = run_dir / f"step_{step:04d}.parquet"
            write_parquet_step(path, step, samples, TAGS, extra)


def wave_groups(samples: list[Sample], waves: tuple[int, ...]) -> list[list[Sample]]:
    """The step's samples split by uid hash into one group per wave size, each group's share
    of the step in proportion to its size (waves of 12 and 4: three quarters and a quarter)."""
    bounds = np.cumsum(waves)
    groups: list[list[Sample]] = [[] for _ in waves]
    for s in samples:
        h = zlib.crc32(s.uid.encode()) % int(bounds[-1])
        groups[int(np.searchsorted(bounds, h, side="right"))].append(s)
    return groups


def label_waves(members: list[Sample], size: int, first_id: int) -> int:
    """Each member's wave (batch_id from ``first_id`` on, batch_size) as the engine's first
    turn serves them: ``size`` requests at a time, in order, the last wave what is left; the
    next wave's id."""
    for k, s in enumerate(members):
        start = k // size * size
        s.batch = (first_id + k // size, min(size, len(members) - start))
    return first_id + -(-len(members) // size)


def batch_columns(samples: list[Sample]) -> dict[str, pa.Array]:
    """Each response's wave: the dump's `batch_id` and `batch_size` columns."""
    labels = [s.batch for s in samples]
    assert all(b is not None for b in labels), "a response of a run in waves without its wave"
    return {
        "batch_id": pa.array([b[0] for b in labels if b], pa.int64()),
        "batch_size": pa.array([b[1] for b in labels if b], pa.int64()),
    }


def prefix_hits(run: CalibRun) -> Callable[[Sample], int] | None:
    """The prompt tokens that hit the stale prefix cache: the whole prompt for the first
    `prefix_groups` GRPO groups of the step, nothing for the others (None: no prefix cache)."""
    if not run.prefix_groups:
        return None

    def hits(sample: Sample) -> int:
        group = int(sample.uid.split("-p")[1].split("-")[0])
        return len(sample.prompt) if group < run.prefix_groups else 0

    return hits
