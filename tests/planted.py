"""Dumps with planted causes, in the sequence layout (one Parquet row per response).

Tokens are sampled from softmax distributions over a small vocabulary (contexts from peaked to
flat), so both logprob sides behave like a model's: the rollout side is the log-probability of
the sampled token under the distribution it was sampled from, the trainer side its
log-probability under the trainer's distribution. The clean trainer side carries small symmetric
noise growing with -lr: ``lt = lr * exp(sigma * eps)`` (r has standard deviation ~sigma |lr|,
and lt stays <= 0). Each cause changes one thing:

- ``shift``: the trainer array shifted one position later (its first value is a masked 0.0);
- ``temperature``: the rollout side sampled and scored at T = 0.7, the trainer untempered;
- ``top_p``: the rollout side renormalised over the top-p = 0.8 nucleus;
- ``sentinel``: trainer values overwritten with 0.0 on the last 8 tokens of some sequences,
  and with -9999 once;
- ``spike``: sigma x sqrt(factor) on two steps (``spike_steps``); ``trend``: sigma growing 30-fold over the run;
- ``gpu``: sigma x 15 on the sequences of gpu A100; ``stale``: sigma x 12 on the sequences made
  with the previous weights (weight_version = step - 1);
- ``tool``: sigma x 8 on the turns after a tool response;
- ``template``: a rendering fault: the turns after a tool response get sigma x
  (1 + (sqrt(factor) - 1) exp(-d / 3)) at distance d from their start (the trainer saw a slightly
  different tool response; the first turns are untouched);
- ``lowprob``: tokens sampled with p < 1e-3 get a trainer probability 3 to 20 times smaller
  (``factor`` times smaller when given);
- ``spiral``: the trend, while the contexts flatten over the run (both perplexities climb);
- ``path``: a code path fault: sigma x sqrt(factor) on the tokens at KV position >= ``LONG_KV``
  (prompt-free: tokens before them in the sequence, tool tokens included) in the steps
  ``PATH_STEPS`` (a kernel that only long contexts in some batch shapes take);
- ``policy``: stale or wrong weights with no version column: the trainer scores under logits
  perturbed by N(0, eps^2) per vocabulary entry (another policy; every token, both signs);
- ``improved``: sigma x 0.7 everywhere (a benign improvement over ``clean``).
- ``toolmix``: the turns after a tool response sample from distributions flatter by
  sqrt(factor) (more low-probability tokens, whose mismatch is larger under the same noise: the
  amplification of BACKGROUND.md, a change of the token mix, not of each token's mismatch).

``factor`` sets the size of ``spike``, ``gpu``, ``stale``, ``tool``, ``template``, ``path`` and
``policy`` (and the probability ratio of ``lowprob``):
about the ratio of the affected tokens' vllm_kl to the clean run's (K3 ~ r^2 / 2, so sigma
scales by its square root); the defaults are the loud values the first tests were built on.
"""

from __future__ import annotations

import dataclasses
import fcntl
import functools
import pickle
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

if TYPE_CHECKING:
    from mismatchctl.analysis.diagnose import Diagnosis

VOCAB = 64
SIGMA = 0.02
SPIKE_STEPS = (7, 15)  # in runs of 16 steps or more; shorter runs spike at their middle step
LONG_KV = 48
PATH_STEPS = frozenset(range(1, 24, 3))  # every third step
POLICY_EPS = 0.063  # logit perturbation at factor 2: 2.0x the clean vllm_kl (measured, seeds 1-2)
DEFAULT_FACTOR = {"spike": 225.0, "gpu": 225.0, "stale": 144.0, "tool": 64.0, "path": 100.0,
                  "policy": 10.0, "template": 100.0}  # fmt: skip


@dataclass
class Plan:
    cause: str = "clean"
    steps: int = 24
    per_step: int = 16
    seed: int = 0
    factor: float | None = None  # None: DEFAULT_FACTOR of the cause

    @property
    def boost(self) -> float:
        """The sigma multiplier of the affected tokens."""
        f = self.factor if self.factor is not None else DEFAULT_FACTOR.get(self.cause, 1.0)
        return float(np.sqrt(f))


def _log_softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=1, keepdims=True))


def _sample(rng: np.random.Generator, logp: np.ndarray) -> np.ndarray:
    c = np.exp(logp).cumsum(axis=1)
    u = rng.random((len(logp), 1)) * c[:, -1:]
    return np.minimum((c < u).sum(axis=1), logp.shape[1] - 1)


def _top_p(logp: np.ndarray, p: float) -> np.ndarray:
    probs = np.exp(logp)
    order = np.argsort(-probs, axis=1)
    sorted_p = np.take_along_axis(probs, order, axis=1)
    keep_sorted = (sorted_p.cumsum(axis=1) - sorted_p) < p
    keep = np.zeros_like(keep_sorted)
    np.put_along_axis(keep, order, keep_sorted, axis=1)
    kept = np.where(keep, probs, 0.0)
    with np.errstate(divide="ignore"):
        return np.log(kept / kept.sum(axis=1, keepdims=True))


def token_logprobs(
    rng: np.random.Generator, n: int, cause: str, sharpness: float = 1.0, eps: float = 0.0
) -> tuple[np.ndarray, np.ndarray]:
    """(rollout, noiseless trainer) logprobs of n sampled tokens; ``eps``: the trainer's logits
    perturbed by N(0, eps^2) per vocabulary entry (another policy)."""
    scale = rng.choice([1.0, 3.0, 6.0, 10.0], n, p=[0.2, 0.3, 0.3, 0.2]) * sharpness
    logits = rng.normal(0.0, 1.0, (n, VOCAB)) * scale[:, None]
    base = _log_softmax(logits)
    sampler = base
    if cause == "temperature":
        sampler = _log_softmax(base / 0.7)
    elif cause == "top_p":
        sampler = _top_p(base, 0.8)
    tok = _sample(rng, sampler)
    rows = np.arange(n)
    trainer = base
    if eps > 0:
        trainer = _log_softmax(logits + rng.normal(0.0, eps, (n, VOCAB)))
    return sampler[rows, tok], trainer[rows, tok]


def spike_steps(steps: int) -> tuple[int, ...]:
    """The steps ``spike`` plants its spikes in, for a run of ``steps`` steps."""
    return tuple(s for s in SPIKE_STEPS if s < steps - 1) or (steps // 2,)


def _sigma(plan: Plan, step: int, gpu: str, stale: bool) -> float:
    sigma = SIGMA
    if plan.cause == "spike" and step in spike_steps(plan.steps):
        sigma *= plan.boost
    if plan.cause in ("trend", "spiral"):
        sigma *= 30 ** (step / (plan.steps - 1))
    if plan.cause == "gpu" and gpu == "A100":
        sigma *= plan.boost
    if plan.cause == "stale" and stale:
        sigma *= plan.boost
    if plan.cause == "improved":
        sigma *= 0.7
    return sigma


def rows(plan: Plan) -> list[dict]:
    rng = np.random.default_rng(plan.seed)
    out = []
    for step in range(plan.steps):
        for i in range(plan.per_step):
            gpu = "A100" if i % 2 else "H20"
            stale = plan.cause == "stale" and i % 3 == 0
            out.append(_row(rng, plan, step, i, gpu, stale))
    if plan.cause == "sentinel":
        out[5]["old_log_probs"][2] = -9999.0
    return out


def _row(rng: np.random.Generator, plan: Plan, step: int, i: int, gpu: str, stale: bool) -> dict:
    first, tool, later = int(rng.integers(15, 45)), 0, 0
    if (i // 2) % 2 == 0:  # half of the rollouts, on both gpus, call a tool and go on
        tool, later = int(rng.integers(3, 8)), int(rng.integers(8, 25))
    mask = np.r_[np.ones(first), np.zeros(tool), np.ones(later)].astype(np.int8)
    n = first + later
    sharpness = 1.0 - 0.6 * step / (plan.steps - 1) if plan.cause == "spiral" else 1.0
    eps = POLICY_EPS * np.sqrt(max(plan.boost**2 - 1.0, 0.0)) if plan.cause == "policy" else 0.0
    lr, lt = token_logprobs(rng, n, plan.cause, sharpness, eps)
    if plan.cause == "toolmix" and later:  # flatter distributions after the tool response
        lr[first:], lt[first:] = token_logprobs(rng, later, plan.cause, 1.0 / plan.boost)
    sigma = np.full(n, _sigma(plan, step, gpu, stale))
    if plan.cause == "tool":
        sigma[first:] *= plan.boost
    if plan.cause == "template":
        sigma[first:] *= 1.0 + (plan.boost - 1.0) * np.exp(-np.arange(later) / 3.0)
    if plan.cause == "path" and step in PATH_STEPS:
        kv = np.r_[np.arange(first), first + tool + np.arange(later)]  # tokens before each
        sigma[kv >= LONG_KV] *= plan.boost
    lt = lt * np.exp(sigma * rng.standard_normal(n))
    if plan.cause == "lowprob":
        rare = lr < np.log(1e-3)
        lo, hi = (3.0, 20.0) if plan.factor is None else (plan.factor, plan.factor)
        lt[rare] -= rng.uniform(np.log(lo), np.log(hi), int(rare.sum()))
    roll, train = np.zeros(len(mask)), np.zeros(len(mask))
    roll[mask == 1], train[mask == 1] = lr, lt
    if plan.cause == "shift":
        train = np.r_[0.0, train[:-1]]
    if plan.cause == "sentinel" and i % 5 == 0:
        train[np.flatnonzero(mask)[-8:]] = 0.0
    return {
        "step": step,
        "uid": f"s{step}-{i}",
        "rollout_log_probs": roll.tolist(),
        "old_log_probs": train.tolist(),
        "response_mask": mask.tolist(),
        "gpu": gpu,
        "weight_version": step - 1 if stale else step,
    }


SCHEMA = pa.schema(
    [
        ("step", pa.int64()),
        ("uid", pa.string()),
        ("rollout_log_probs", pa.list_(pa.float64())),
        ("old_log_probs", pa.list_(pa.float64())),
        ("response_mask", pa.list_(pa.int8())),
        ("gpu", pa.string()),
        ("weight_version", pa.int64()),
    ]
)


def write(plan: Plan, path: Path, *, weight_version: bool = True) -> Path:
    table = pa.Table.from_pylist(rows(plan), schema=SCHEMA)
    if not weight_version:
        table = table.drop_columns(["weight_version"])
    pq.write_table(table, path)
    return path


def write_biased(path: Path, bias: float, seed: int) -> Path:
    """A planted clean run (independent noise per token; responses of about 15 to 70 model
    tokens) whose every model token's trainer logprob is moved by ``-bias`` (a trainer at
    another temperature would do so), clipped at 0: a per-token bias for the length-scaling
    test (its sums grow like T, the noise's like sqrt(T))."""
    write(Plan("clean", per_step=32, seed=seed), path, weight_version=False)
    table = pq.read_table(path)
    rows = table.to_pylist()
    for row in rows:
        mask = np.asarray(row["response_mask"]) == 1
        lt = np.asarray(row["old_log_probs"])
        lt[mask] = np.minimum(lt[mask] - bias, 0.0)
        row["old_log_probs"] = lt.tolist()
    pq.write_table(table.from_pylist(rows, schema=table.schema), path)
    return path


def write_scaled(plan: Plan, path: Path, scale: Callable[[dict, np.ndarray], np.ndarray]) -> Path:
    """The planted dump (no weight_version column) with each model token's noise
    ``log(lt / lr)`` times ``sqrt(scale(row, kv))``, ``kv`` the model tokens' KV positions
    (tokens before each, tool tokens too): ``sigma`` times ``sqrt(f)`` multiplies a token's K3
    by about ``f``, as the planted causes scale theirs."""
    write(plan, path, weight_version=False)
    rows = pq.read_table(path).to_pylist()
    for row in rows:
        mask = np.asarray(row["response_mask"]) == 1
        lr = np.asarray(row["rollout_log_probs"])
        lt = np.asarray(row["old_log_probs"])
        f = np.sqrt(scale(row, np.flatnonzero(mask)))
        a, t = lr[mask], lt[mask]
        lt[mask] = np.where(a < 0, a * np.exp(f * np.log(t / np.where(a < 0, a, -1.0))), t)
        row["old_log_probs"] = lt.tolist()
    table = pq.read_table(path)
    pq.write_table(table.from_pylist(rows, schema=table.schema), path)
    return path


Scale = Callable[[dict, np.ndarray], np.ndarray]  # (row, model tokens' KV positions) -> factor


def scaled_store(
    root: Path,
    runs: dict[str, tuple[int, Scale]],
    per_step: int = 32,
    tags: dict[str, dict[str, str]] | None = None,
) -> Path:
    """A store under ``root`` with a healthy run per name (``Plan("clean")`` with its seed)
    whose model tokens' mismatch is scaled by its ``write_scaled`` function; ``tags``: the
    ingest tags of some runs."""
    import mismatchctl

    for name, (seed, scale) in runs.items():
        plan = Plan("clean", per_step=per_step, seed=seed)
        path = write_scaled(plan, root / f"{name}.parquet", scale)
        mismatchctl.ingest([path], run=name, store=root / "store", tags=(tags or {}).get(name, {}))
    return root / "store"


def checks(store: Path, run: str, baseline: str | None = None) -> dict:
    """Every check of ``diagnose`` on a run, by name. Diagnosed once per store, run and
    baseline (``diagnosis``): for the module-scoped stores of planted runs, which no test
    changes after they are written."""
    return {c.name: c for c in diagnosis(store, run, baseline).checks}


SHARED: dict[Path, Path] = {}
"""Stores built once for every test worker (tests/analysis/diagnose/conftest.py) -> the
directory their diagnoses are kept in."""


@functools.cache
def diagnosis(store: Path, run: str, baseline: str | None = None) -> Diagnosis:
    """``api.diagnose`` of a run of a store that does not change, computed once: several tests
    read the same diagnosis (the suite's time is mostly diagnose's); once for every test
    worker when the store is ``SHARED``. Kept without its report's ``extra_states`` (the
    read's mergeable states, which no test of a kept diagnosis reads: 14.5 MB of a larger
    run's 15 MB pickle, about 1 GB a session written, read back and deleted; 0.5 MB without)."""
    from mismatchctl import api

    kept = SHARED.get(Path(store))
    if kept is None:
        return _without_states(api.diagnose(run, store=store, baseline=baseline))
    name = f"{run}@{baseline}".replace("/", "_")
    path = kept / f"{name}.pickle"
    with (kept / f"{name}.lock").open("w") as lock:  # one worker diagnoses, the others wait
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.exists():
            found = _without_states(api.diagnose(run, store=store, baseline=baseline))
            path.write_bytes(pickle.dumps(found))
            return found
    return pickle.loads(path.read_bytes())


def _without_states(found: Diagnosis) -> Diagnosis:
    return dataclasses.replace(found, report=dataclasses.replace(found.report, extra_states=[]))
