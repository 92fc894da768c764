"""Run ``bisect``: draw the sample, load the model, check that the start setting gives the
trainer side, re-score under every other setting (one model variant alive at a time, one
sequence or one padded batch at a time), and judge (docs/bisect.md).

Thresholds:
- the trainer check: K3(start vs trainer) <= max(TRAINER_FLOOR, TRAINER_SHARE x the sample's
  mismatch). The floor is float32 noise: a trainer on other hardware or kernels differs from
  this float32 forward by |d| ~ 1e-5 at most (K3 ~ d^2 / 2 ~ 5e-11), far under 1e-9; another
  checkpoint differs by a policy step's KL (1e-5 and up). The share keeps the start's own error
  under 1% of what is being apportioned.
- reproduces: the best setting leaves at most REPRODUCE_RESIDUAL of the start's K3 against the
  rollout side (it accounts for at least 90% of the mismatch)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mismatchctl.analysis.bisect.metrics import Numbers, Resamples, Sides, numbers
from mismatchctl.analysis.bisect.sample import Sampled, draw
from mismatchctl.analysis.selectors import StepRange
from mismatchctl.errors import ModelMismatchError, UsageError
from mismatchctl.store import Store

TRAINER_FLOOR = 1e-9
TRAINER_SHARE = 0.01
REPRODUCE_RESIDUAL = 0.1
BATCH = 8  # sequences per padded batch (padded-left)
STEPWISE_BATCH = 16  # sequences a factory's engine path decodes together


@dataclass
class Outcome:
    """One setting: its name, what it changes, how many changes from the start, its numbers
    overall and per turn kind (``first``, ``later``: when the sample has later turns)."""

    name: str
    what: str
    changes: int
    overall: Numbers
    by_turn: dict[str, Numbers] = field(default_factory=dict)


@dataclass
class Bisect:
    run: str
    model: str
    device: str
    sequences: int
    tokens: int
    candidates: int
    without_prompt: int
    mismatch: float  # K3 of trainer vs rollout over the sample's tokens
    trainer_threshold: float
    outcomes: list[Outcome]
    skipped: list[tuple[str, str]]
    seed: int
    best: str = ""
    best_change: str | None = None
    reproduces: bool = False
    by_turn_best: dict[str, str] = field(default_factory=dict)
    trainer_temperature: float | None = None  # the trainer divides its logits by it

    def outcome(self, name: str) -> Outcome:
        return next(o for o in self.outcomes if o.name == name)

    def sections(self) -> list:
        from mismatchctl.analysis.bisect.view import bisect_sections

        return bisect_sections(self)

    def to_dict(self) -> dict:
        from mismatchctl.analysis.bisect.view import bisect_dict

        return bisect_dict(self)

    def to_polars(self) -> Any:
        import polars as pl

        rows = self.to_dict()["bisect"]["settings"]
        return pl.DataFrame([{k: v for k, v in r.items() if k != "by_turn"} for r in rows])


Progress = Callable[[str, int, int], None]  # (setting, passes done, passes in all)


def build_bisect(
    store: Store,
    run: str,
    model: str,
    *,
    sample: int = 200,
    steps: StepRange | None = None,
    device: str = "cpu",
    names: list[str] | None = None,
    temperature: float | None = None,
    top_p: float | None = None,
    seed: int = 0,
    on_plan: Callable[[str], None] | None = None,
    on_pass: Progress | None = None,
) -> Bisect:
    from mismatchctl.bisect import model as M
    from mismatchctl.bisect import settings as G

    if sample < 1:
        raise UsageError(f"--sample {sample}: expected at least 1", "pass --sample N, N >= 1.")
    M.check_device(device)
    tags = store.run(run).tags
    temperature = temperature if temperature is not None else _tag(tags, "temperature")
    top_p = top_p if top_p is not None else _tag(tags, "top_p")
    chosen = G.choose(G.grid(temperature, top_p), names)
    drawn = draw(store, run, sample, steps, seed)
    loaded = M.load(model, device)
    _check_vocab(loaded, drawn, model)
    runnable, skipped = _runnable(loaded, chosen)
    tokens = sum(len(t) for t in drawn.targets)
    with M.cpu_threads(loaded) as threads:
        if on_plan:
            on_plan(f"re-scoring {len(drawn.ids):,} sequences ({tokens:,} model tokens) under "
                    f"{len(runnable)} settings: {len(drawn.ids) * len(runnable):,} passes, "
                    f"{_threads(threads)}")  # fmt: skip
        scored, runnable = _score_all(loaded, drawn, runnable, temperature, on_pass)
    result = _judge(run, model, device, drawn, runnable, scored, skipped, seed)
    result.trainer_temperature = temperature if runnable[0].temperature else None
    return result


def _threads(n: int) -> str:
    if n == 1:
        return "on one torch thread (a small model: OMP_NUM_THREADS sets another count)"
    return f"on {n} torch threads"


def _tag(tags: dict[str, str], name: str) -> float | None:
    try:
        return float(tags[name]) if name in tags else None
    except ValueError:
        return None


def _check_vocab(loaded, drawn: Sampled, model: str) -> None:
    vocab = getattr(getattr(loaded.module, "config", None), "vocab_size", None)
    top = max(int(i.max()) for i in drawn.ids)
    if vocab is not None and top >= vocab:
        raise ModelMismatchError(
            f"--model {model}: the run has token id {top}, beyond the model's vocabulary "
            f"({vocab} ids): the checkpoint is not the one the run used",
            "pass the checkpoint whose weights the trainer used.",
        )


def _runnable(loaded, chosen) -> tuple[list, list[tuple[str, str]]]:
    from mismatchctl.bisect.kvcache import kv_supported

    runnable, skipped = [], []
    kv_why = kv_supported(loaded.module) if loaded.hf else None
    for s in chosen:
        why = s.unsupported(loaded.hf, loaded.stepwise)
        if why is None and s.kv is not None and kv_why is not None:
            why = kv_why
        if why is None:
            runnable.append(s)
        else:
            skipped.append((s.name, why))
    return runnable, skipped


def _score_all(
    loaded, drawn: Sampled, runnable, temperature: float | None, on_pass: Progress | None
) -> tuple[dict[str, np.ndarray], list]:
    """Every setting's logprobs of the sample's model tokens (flat), the start first, and the
    settings as run. After the start, the trainer check (the rest would measure against the
    wrong model); when it fails and the run has a sampling temperature, the start again with
    the logits divided by it: a trainer that divides by it passes there, and every setting is
    then run at that temperature."""
    from mismatchctl.bisect import settings as G

    out: dict[str, np.ndarray] = {}
    done, total = 0, len(drawn.ids) * len(runnable)

    def run(setting) -> np.ndarray:
        nonlocal done

        def tick(k: int, base: int = done) -> None:
            if on_pass is not None:
                on_pass(setting.name, base + k, total)

        flat = np.concatenate(_score_setting(loaded, drawn, setting, tick))
        done += len(drawn.ids)
        return flat

    start = run(runnable[0])
    if not _trainer_ok(drawn, start) and temperature is not None:
        total += len(drawn.ids)
        hot = G.at_trainer_temperature(runnable, temperature)
        warm = run(hot[0])
        if _trainer_ok(drawn, warm):
            runnable, start = hot, warm
    _trainer_check(drawn, start, loaded.name)
    out[runnable[0].name] = start
    for setting in runnable[1:]:
        out[setting.name] = run(setting)
    return out, runnable


def _score_setting(
    loaded, drawn: Sampled, setting, tick: Callable[[int], None]
) -> list[np.ndarray]:
    from mismatchctl.bisect import rescore as R

    variant = R.Variant(loaded, setting)
    seqs = [R.Sequence(i, p, t)
            for i, p, t in zip(drawn.ids, drawn.prompts, drawn.targets, strict=True)]  # fmt: skip
    out: list[np.ndarray] = []
    try:
        if setting.padded:
            for k in range(0, len(seqs), BATCH):
                out += R.batch_logprobs(variant, seqs[k : k + BATCH])
                tick(len(out))
        elif setting.incremental and not loaded.hf:
            out = _stepwise(variant, seqs, tick)
        else:
            for s in seqs:
                out.append(R.logprobs(variant, s))
                tick(len(out))
    except (IndexError, RuntimeError) as exc:
        raise UsageError(
            f"--model {loaded.name}: the model failed on the run's tokens under `{setting.name}` "
            f"({str(exc).splitlines()[0]})",
            "a factory's module must take input ids [batch, length] and return logits "
            "[batch, length, vocab]; the checkpoint must be the run's (its vocabulary).",
        ) from None
    return out


def _stepwise(variant, seqs: list, tick: Callable[[int], None]) -> list[np.ndarray]:
    """A factory module's engine path, STEPWISE_BATCH sequences decoded together: the sample
    ordered by length so that a batch's rows end close together (less padding decoded)."""
    from mismatchctl.bisect import rescore as R

    order = sorted(range(len(seqs)), key=lambda i: (len(seqs[i].ids), i))
    out: list[np.ndarray] = [np.empty(0)] * len(seqs)
    for k in range(0, len(order), STEPWISE_BATCH):
        part = order[k : k + STEPWISE_BATCH]
        for i, x in zip(part, R.stepwise_logprobs(variant, [seqs[i] for i in part]), strict=True):
            out[i] = x
        tick(min(k + STEPWISE_BATCH, len(seqs)))
    return out


def _trainer_ok(drawn: Sampled, start: np.ndarray) -> bool:
    from mismatchctl.analysis.bisect.metrics import k3

    trainer, rollout = np.concatenate(drawn.trainer), np.concatenate(drawn.rollout)
    return bool(k3(start - trainer).mean() <= threshold(float(k3(trainer - rollout).mean())))


def _trainer_check(drawn: Sampled, start: np.ndarray, model: str) -> None:
    from mismatchctl.analysis.bisect.metrics import k3

    trainer, rollout = np.concatenate(drawn.trainer), np.concatenate(drawn.rollout)
    got = float(k3(start - trainer).mean())
    limit = threshold(float(k3(trainer - rollout).mean()))
    if not got <= limit:
        raise ModelMismatchError(
            f"--model {model}: the start setting (float32, full forward) gives the run's trainer "
            f"logprobs to K3 {got:.3g} over {len(trainer):,} tokens, above the trainer check's "
            f"threshold {limit:.3g}: the checkpoint is not the one the run used (or the trainer "
            "did not compute in float32)",
            "pass the checkpoint of the weights the trainer scored these steps with (--steps "
            "narrows to the steps of one checkpoint); docs/bisect.md, the trainer check.",
        )


def threshold(mismatch: float) -> float:
    """The trainer check's largest K3(start vs trainer) for a sample whose mismatch (K3 of
    trainer vs rollout) is ``mismatch``."""
    return max(TRAINER_FLOOR, TRAINER_SHARE * mismatch)


def _judge(run, model, device, drawn: Sampled, runnable, scored, skipped, seed) -> Bisect:
    rollout, trainer = np.concatenate(drawn.rollout), np.concatenate(drawn.trainer)
    lengths = [len(t) for t in drawn.targets]
    owner = np.repeat(np.arange(len(lengths)), lengths)
    sides = Sides(rollout, trainer, owner, len(lengths))
    rs = Resamples(len(lengths), seed)
    turns = np.concatenate(drawn.turns)
    kinds = {"first": turns == 0, "later": turns > 0} if (turns > 0).any() else {}
    start = scored[runnable[0].name]
    outcomes = []
    for s in runnable:
        x = scored[s.name]
        o = Outcome(s.name, s.what, s.changes, numbers(x, start, sides, rs))
        o.by_turn = {k: numbers(x, start, sides, rs, keep) for k, keep in kinds.items()}
        outcomes.append(o)
    mismatch = float(np.mean(np.expm1(trainer - rollout) - (trainer - rollout)))
    result = Bisect(run, model, device, len(lengths), len(rollout), drawn.candidates,
                    drawn.without_prompt, mismatch, threshold(mismatch), outcomes, skipped,
                    seed)  # fmt: skip
    _verdict(result)
    return result


def _verdict(b: Bisect) -> None:
    others = b.outcomes[1:]
    if not others:
        return
    b.best = min(others, key=lambda o: o.overall.k3_rollout).name
    single = [o for o in others if o.changes == 1 and o.overall.share is not None]
    if single:
        b.best_change = max(single, key=lambda o: o.overall.share or 0.0).name
    best = b.outcome(b.best).overall
    b.reproduces = b.mismatch > 0 and (best.share or 0.0) >= 1 - REPRODUCE_RESIDUAL
    for kind in others[0].by_turn:
        b.by_turn_best[kind] = min(others, key=lambda o: o.by_turn[kind].k3_rollout).name
