"""Run ``bisect``: find the hot cells (explain's localization, or ``--cell``), draw the sample
stratified by them, load the model, check that the start setting gives the trainer side,
re-score under every other setting (one model variant alive at a time, one sequence or one
batch at a time), and judge (``judge.py``; docs/bisect.md).

The trainer check: K3(start vs trainer) <= max(TRAINER_FLOOR, TRAINER_SHARE x the sample's
mismatch). The floor is float32 noise: a trainer on other hardware or kernels differs from this
float32 forward by |d| ~ 1e-5 at most (K3 ~ d^2 / 2 ~ 5e-11), far under 1e-9; another
checkpoint differs by a policy step's KL (1e-5 and up). The share keeps the start's own error
under 1% of what is being apportioned."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from mismatchctl.analysis.bisect.judge import Bisect, CellInfo, Setup, judge
from mismatchctl.analysis.bisect.sample import Sampled, draw
from mismatchctl.analysis.selectors import StepRange
from mismatchctl.errors import ModelMismatchError, UsageError
from mismatchctl.store import Store

TRAINER_FLOOR = 1e-9
TRAINER_SHARE = 0.01
BATCH = 8  # sequences per padded batch (padded-left, padded-right)
ENGINE_BATCH = 16  # sequences the engine path decodes together
PREFILL_CHUNK = 512  # tokens per chunk of the chunked prefill (--prefill-chunk)

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
    top_k: int | None = None,
    start: str = "fp32",
    prefill_chunk: int = PREFILL_CHUNK,
    cells: Sequence[str] = (),
    seed: int = 0,
    on_plan: Callable[[str], None] | None = None,
    on_pass: Progress | None = None,
) -> Bisect:
    from mismatchctl.bisect import settings as G
    from mismatchctl.bisect.model import check_device, cpu_threads
    from mismatchctl.bisect.model import load as load_model

    _check(sample, prefill_chunk)
    check_device(device)
    tags = store.run(run).tags
    sampler = G.Sampler(_tag(tags, "temperature", temperature), _tag(tags, "top_p", top_p),
                        _int(_tag(tags, "top_k", top_k)))  # fmt: skip
    chosen = G.choose(G.grid(sampler, G.check_start(start), prefill_chunk), names)
    drawn, infos, masks = _draw(store, run, sample, steps, seed, cells, on_plan)
    loaded = load_model(model, device)
    _check_vocab(loaded, drawn, model)
    runnable, skipped = _runnable(loaded, chosen, drawn)
    tokens = sum(len(t) for t in drawn.targets)
    with cpu_threads(loaded) as threads:
        if on_plan:
            on_plan(f"re-scoring {len(drawn.ids):,} sequences ({tokens:,} model tokens) under "
                    f"{len(runnable)} settings: {len(drawn.ids) * len(runnable):,} passes, "
                    f"{_threads(threads)}")  # fmt: skip
        scored, runnable = _score_all(loaded, drawn, runnable, sampler.temperature, on_pass)
    temperature = sampler.temperature if runnable[0].temperature else None
    setup = Setup(start, temperature, threshold)
    return judge(run, model, device, drawn, runnable, scored, skipped, seed, infos, masks, setup)


def _check(sample: int, chunk: int) -> None:
    if sample < 1:
        raise UsageError(f"--sample {sample}: expected at least 1", "pass --sample N, N >= 1.")
    if chunk < 1:
        raise UsageError(f"--prefill-chunk {chunk}: expected at least 1",
                         "pass --prefill-chunk N, N >= 1 (tokens per chunk).")  # fmt: skip


def _draw(
    store: Store, run: str, sample: int, steps: StepRange | None, seed: int,
    given: Sequence[str], on_plan: Callable[[str], None] | None,
) -> tuple[Sampled, list[CellInfo], list[np.ndarray]]:  # fmt: skip
    """The sample, stratified by the hot cells; each cell's facts and its tokens in the sample
    (a flat mask over the sample's model tokens)."""
    from mismatchctl.analysis.bisect.cells import hot_cells, read_cells

    hot = hot_cells(store, run, steps, given)
    member = read_cells(hot)
    if given and not member:
        raise UsageError(
            f"no model token of `{run}` is in the cell {' '.join(f'--cell {c}' for c in given)}",
            "check the values with `mismatchctl report RUN --by KEY` (KEY: the key of --cell); "
            "data keys (step, gpu, tags, attributes) match their values exactly.",
        )
    if on_plan:
        on_plan(hot.why_none or "hot cells: " + "; ".join(c.label for c in hot.cells))
    drawn = draw(store, run, sample, steps, seed, member, len(hot.cells))
    inside = read_cells(hot, set(drawn.seqs))
    masks = []
    for k in range(len(hot.cells)):
        parts = [np.isin(p, inside[s][k]) if s in inside else np.zeros(len(p), dtype=bool)
                 for s, p in zip(drawn.seqs, drawn.positions, strict=True)]  # fmt: skip
        masks.append(np.concatenate(parts))
    kept, sentences = drawn.drawn(), hot.found or [""] * len(hot.cells)
    infos = [CellInfo(c.label, c.source, sum(1 for b in member.values() if b >> k & 1),
                      drawn.sizes[k], kept[k], sentences[k])
             for k, c in enumerate(hot.cells)]  # fmt: skip
    drawn.note = hot.why_none
    return drawn, infos, masks


def _threads(n: int) -> str:
    if n == 1:
        return "on one torch thread (a small model: OMP_NUM_THREADS sets another count)"
    return f"on {n} torch threads"


def _tag(tags: dict[str, str], name: str, given: float | None) -> float | None:
    """The value given, else the run's tag (None: neither, or a tag that is not a number)."""
    if given is not None:
        return given
    try:
        return float(tags[name]) if name in tags else None
    except ValueError:
        return None


def _int(x: float | None) -> int | None:
    return None if x is None else int(x)


def _check_vocab(loaded: Any, drawn: Sampled, model: str) -> None:
    vocab = getattr(getattr(loaded.module, "config", None), "vocab_size", None)
    top = max(int(i.max()) for i in drawn.ids)
    if vocab is not None and top >= vocab:
        raise ModelMismatchError(
            f"--model {model}: the run has token id {top}, beyond the model's vocabulary "
            f"({vocab} ids): the checkpoint is not the one the run used",
            "pass the checkpoint whose weights the trainer used.",
        )


def _runnable(loaded: Any, chosen: list, drawn: Sampled) -> tuple[list, list[tuple[str, str]]]:
    runnable, skipped = [], []
    for s in chosen:
        why = _why_not(loaded, s, drawn)
        if why is None:
            runnable.append(s)
        else:
            skipped.append((s.name, why))
    return runnable, skipped


def _why_not(loaded: Any, s: Any, drawn: Sampled) -> str | None:
    """Why a setting is not run on this model and sample (None: it is)."""
    from mismatchctl.bisect.kvcache import kv_supported
    from mismatchctl.bisect.rescore import attention_of

    why = s.unsupported(loaded.hf, loaded.stepwise)
    if why is None and s.kv is not None and loaded.hf:
        why = kv_supported(loaded.module)
    if why is None and s.chunk is not None and max(drawn.prompts) <= s.chunk:
        why = (f"no sampled prompt is longer than the chunk ({max(drawn.prompts):,} tokens at "
               "most): it is the incremental setting itself")  # fmt: skip
    if why is None and s.attention is not None:
        why = _attention_why(s.attention, attention_of(loaded.module), loaded.device)
    return why


def _attention_why(name: str, own: str | None, device: str) -> str | None:
    import importlib.util

    if name == own:
        return f"the start's own attention implementation ({own})"
    if name.startswith("flash") and (
        device != "cuda" or not importlib.util.find_spec("flash_attn")
    ):
        return "flash attention needs a CUDA device and the flash_attn package"
    return None


def _score_all(
    loaded: Any, drawn: Sampled, runnable: list, temperature: float | None,
    on_pass: Progress | None,
) -> tuple[dict[str, np.ndarray], list]:  # fmt: skip
    """Every setting's logprobs of the sample's model tokens (flat), the start first, and the
    settings as run. After the start, the trainer check (the rest would measure against the
    wrong model); when it fails and the run has a sampling temperature, the start again with
    the logits divided by it: a trainer that divides by it passes there, and every setting is
    then run at that temperature."""
    from mismatchctl.bisect import settings as G

    out: dict[str, np.ndarray] = {}
    done, total = 0, len(drawn.ids) * len(runnable)

    def run(setting: Any) -> np.ndarray:
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
    _trainer_check(drawn, start, loaded.name, runnable[0].what)
    out[runnable[0].name] = start
    for setting in runnable[1:]:
        out[setting.name] = run(setting)
    return out, runnable


def _score_setting(
    loaded: Any, drawn: Sampled, setting: Any, tick: Callable[[int], None]
) -> list[np.ndarray]:
    from mismatchctl.bisect import rescore

    variant = rescore.Variant(loaded, setting)
    seqs = [rescore.Sequence(i, p, t)
            for i, p, t in zip(drawn.ids, drawn.prompts, drawn.targets, strict=True)]  # fmt: skip
    out: list[np.ndarray] = []
    try:
        if setting.padding is not None:
            for k in range(0, len(seqs), BATCH):
                out += rescore.batch_logprobs(variant, seqs[k : k + BATCH], setting.padding)
                tick(len(out))
        elif setting.incremental:
            out = engine_batches(variant, seqs, tick)
        else:
            for s in seqs:
                out.append(rescore.logprobs(variant, s))
                tick(len(out))
    except (IndexError, RuntimeError) as exc:
        raise UsageError(
            f"--model {loaded.name}: the model failed on the run's tokens under `{setting.name}` "
            f"({str(exc).splitlines()[0]})",
            "a factory's module must take input ids [batch, length] and return logits "
            "[batch, length, vocab]; the checkpoint must be the run's (its vocabulary).",
        ) from None
    return out


def engine_batches(variant: Any, seqs: list, tick: Callable[[int], None]) -> list[np.ndarray]:
    """The engine path, ENGINE_BATCH sequences decoded together (one batch alive at a time):
    the sample ordered by length so that a batch's rows end close together (less padding
    decoded)."""
    from mismatchctl.bisect import rescore

    order = sorted(range(len(seqs)), key=lambda i: (len(seqs[i].ids), i))
    out: list[np.ndarray] = [np.empty(0)] * len(seqs)
    for k in range(0, len(order), ENGINE_BATCH):
        part = order[k : k + ENGINE_BATCH]
        for i, x in zip(
            part, rescore.engine_logprobs(variant, [seqs[i] for i in part]), strict=True
        ):
            out[i] = x
        tick(min(k + ENGINE_BATCH, len(seqs)))
    return out


def _k3s(drawn: Sampled, start: np.ndarray) -> tuple[float, float]:
    """(K3 of the start against the trainer side, K3 of trainer vs rollout) over the sample's
    tokens, each sequence weighted as its stratum says."""
    from mismatchctl.stats.per_token import k3

    trainer, rollout = np.concatenate(drawn.trainer), np.concatenate(drawn.rollout)
    w = np.repeat(drawn.weights(), [len(t) for t in drawn.targets])
    return (float(np.average(k3(start - trainer), weights=w)),
            float(np.average(k3(trainer - rollout), weights=w)))  # fmt: skip


def _trainer_ok(drawn: Sampled, start: np.ndarray) -> bool:
    got, mismatch = _k3s(drawn, start)
    return bool(got <= threshold(mismatch))


def _trainer_check(drawn: Sampled, start: np.ndarray, model: str, what: str) -> None:
    got, mismatch = _k3s(drawn, start)
    limit = threshold(mismatch)
    if not got <= limit:
        tokens = sum(len(t) for t in drawn.targets)
        raise ModelMismatchError(
            f"--model {model}: the start setting ({what}) gives the run's trainer logprobs to "
            f"K3 {got:.3g} over {tokens:,} tokens, above the trainer check's threshold "
            f"{limit:.3g}: the checkpoint is not the one the run used (or the trainer did not "
            "compute as the start does: --start bf16 for a bfloat16 trainer)",
            "pass the checkpoint of the weights the trainer scored these steps with (--steps "
            "narrows to the steps of one checkpoint); docs/bisect.md, the trainer check.",
        )


def threshold(mismatch: float) -> float:
    """The trainer check's largest K3(start vs trainer) for a sample whose mismatch (K3 of
    trainer vs rollout) is ``mismatch``."""
    return max(TRAINER_FLOOR, TRAINER_SHARE * mismatch)
