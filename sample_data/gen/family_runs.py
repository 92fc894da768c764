"""The second family's runs: healthy runs of several shapes and settings, an improvement, faults
of every class at the sizes this model gives them, and combinations of two. Each run is rolled
out by the bf16 engine (gen/family_engine.py) and scored by the fp32 trainer, six RL steps of
multi-turn rollouts with tool responses, written as verl-style Parquet dumps.

``LONG_RESPONSES`` (family.py --long-responses, a model trained at --context 1024): healthy runs
whose responses run to 600-1000 tokens (8-12 turns of 64-96 tokens, or one of 600-700) and two
faults beside them, for the checks of `diagnose` whose statistics scale with response length."""

from __future__ import annotations

import copy
import random
import zlib
from dataclasses import dataclass, field, replace
from pathlib import Path

import pyarrow as pa
import torch

from gen.corpus import pick_prompt
from gen.edits import RENDERS
from gen.engine import TRAINER_DTYPES
from gen.family_config_edits import EDITS, engine_config
from gen.family_engine import EngineKernel, Sampler, decode_turn, prepare_engine, score
from gen.family_model import FamilyModel, FamilyTraining, build
from gen.rollout import Sample, keep_first_routes, stable_seed
from gen.routes import CAPTURE_BUGS, ENCODINGS, route_columns, shifted
from gen.tools import tool_response
from gen.writers import prompt_columns, write_parquet_step

MODEL = "llama-4x128-bpe1024"
STEPS = 6
MAX_NEW, MIN_NEW = 48, 16  # a turn's tokens at most; a newline token ends it after MIN_NEW
CONTEXT = FamilyTraining().context  # the default trained context (a model's: FamilyModel.context)
LONG_CONTEXT = 1024  # the trained context LONG_RESPONSES needs


@dataclass(frozen=True)
class FamilyRun:
    name: str
    kind: str  # healthy, improvement, fault, combo
    cause: str | None
    fault: str
    size: str | None
    baseline: str
    sampler: Sampler = field(default_factory=Sampler)
    trainer_temperature: float | None = None  # None: the sampler's
    trainer_dtype: str = "fp32"  # "bf16": the trainer's forward in bf16, its logits upcast
    kernel: EngineKernel = field(default_factory=EngineKernel)
    weights: str = "current"  # "lag": one optimizer step behind; "stale": one RL step behind;
    # "early": a pre-training checkpoint; "behind:F": a fraction F (0 < F < 1) of the way from
    # the step's checkpoint back to the previous step's (gen/family_sweep.py)
    gpus: int = 1  # requests spread over this many devices by uid hash
    faulty_gpu: int = -1  # that device's engine departs: `gpu_kernel`, else bf16 norm statistics
    gpu_kernel: EngineKernel | None = None
    fp32_head: bool = False
    render: str = ""  # a key of gen/edits.RENDERS: the trainer's copy of each tool response
    engine_config: str = ""  # a key of gen/family_config_edits.EDITS: the engine builds the model
    # from a config read otherwise (gen/family_unseen.py)
    stop_zero: bool = False  # the engine reports 0.0 for the stop token ending a turn
    loader: str = "a"
    prompts: int = 8
    group: int = 4
    turns: tuple[int, int] = (2, 3)
    max_new: int = MAX_NEW  # a turn's tokens at most (fewer where the context ends first)
    min_new: int = MIN_NEW  # a newline token ends a turn after this many
    # the MoE member (gen/family_moe.py) only:
    routing: str = "natural"  # "replay": the trainer uses the engine's routes (R3);
    # "replay-late": it replays each position's routes at the next position (a capture bug
    # that the replay itself carries into the logprobs)
    router_rounding: torch.dtype | None = None  # the engine's router logits in this fp8 format
    capture_bug: str = ""  # gen/routes.py: how the trainer's dumped routes are misaligned
    encoding: str = "lists"  # gen/routes.py: how the routes are written
    from_step: int = 0  # the engine's kernel and weights from this step on, the plain engine
    # serving the current weights before (gen/family_restart.py); 0: at every step


def with_trainer(run: FamilyRun, dtype: str) -> FamilyRun:
    """``run`` scored by a trainer in ``dtype`` (``TRAINER_DTYPES``). Beside a bf16 trainer an
    engine lm_head in fp32 is no improvement: the two sides' heads round differently, one more
    exactly, so that run becomes a precision fault of no set size (the Gemma2 member's is 1.6x
    its baseline, the Llama's, Qwen3's and GPT-2's 0.7-0.8x: docs/diagnose.md "A trainer in
    bf16")."""
    if dtype == run.trainer_dtype:
        return run
    fault = f"{run.fault}; the trainer in {dtype}"
    if run.kind == "improvement" and run.fp32_head and dtype != "fp32":
        fault += " (its head in bf16: the sides' heads round differently)"
        return replace(run, kind="fault", cause="precision", size=None, trainer_dtype=dtype,
                       fault=fault)  # fmt: skip
    return replace(run, trainer_dtype=dtype, fault=fault)


def healthy(name: str, what: str, baseline: str = "f-h-b", **kw: object) -> FamilyRun:
    """A healthy run (the MoE member's catalogue passes its own ``baseline``)."""
    return FamilyRun(name, "healthy", None, what, None, baseline, **kw)  # type: ignore[arg-type]


def fault(
    name: str, cause: str, size: str, what: str, baseline: str = "f-h-a", **kw: object
) -> FamilyRun:
    """A fault, or a combination when ``cause`` joins two with ``+``."""
    kind = "combo" if "+" in cause else "fault"
    return FamilyRun(name, kind, cause, what, size, baseline, **kw)  # type: ignore[arg-type]


SPLIT_SUBTLE = EngineKernel(split_at=128, lse_dtype=torch.float8_e4m3fn)
SPLIT_LOUD = EngineKernel(split_at=96, drop_key=True)
FP8KV = EngineKernel(fp8_kv=True)

FAMILY: tuple[FamilyRun, ...] = (
    healthy("f-h-a", "bf16 engine through transformers' KV cache vs fp32 trainer, loader a"),
    healthy("f-h-b", "as f-h-a, loader b", baseline="f-h-a", loader="b"),
    healthy("f-h-c", "as f-h-a, loader c", loader="c"),
    healthy(
        "f-h-t06", "temperature 0.6 on both sides", sampler=Sampler(temperature=0.6), loader="d"
    ),
    healthy(
        "f-h-t10", "temperature 1.0 on both sides", sampler=Sampler(temperature=1.0), loader="e"
    ),
    healthy("f-h-one-turn", "one turn, no tool response", turns=(1, 1), loader="f"),
    healthy(
        "f-h-many-turns",
        "four or five turns (within the trained context)",
        turns=(4, 5),
        loader="g",
    ),
    healthy("f-h-gpus", "four devices, one engine", gpus=4, loader="h"),
    healthy("f-h-big", "16 prompts x 4 per step", prompts=16, loader="i"),
    FamilyRun(
        "f-imp-fp32-head",
        "improvement",
        None,
        "the engine's lm_head in fp32",
        None,
        "f-h-a",
        fp32_head=True,
        loader="j",
    ),
    fault(
        "f-sem-temp-subtle",
        "semantics",
        "subtle",
        "engine samples at 0.97, the trainer scores at 1.0",
        sampler=Sampler(temperature=0.97),
        trainer_temperature=1.0,
    ),
    fault(
        "f-sem-temp-loud",
        "semantics",
        "loud",
        "engine samples at 0.7, trainer at 1.0",
        sampler=Sampler(temperature=0.7),
        trainer_temperature=1.0,
    ),
    fault(
        "f-sem-topp-subtle",
        "semantics",
        "subtle",
        "top-p 0.98, processed logprobs",
        sampler=Sampler(top_p=0.98),
    ),
    fault(
        "f-sem-topp-loud",
        "semantics",
        "loud",
        "top-p 0.9, processed logprobs",
        sampler=Sampler(top_p=0.9),
    ),
    fault(
        "f-sem-raw",
        "semantics",
        "loud",
        "raw logprobs at temperature 0.9",
        sampler=Sampler(logprobs="raw"),
    ),
    fault(
        "f-sem-rep-subtle",
        "semantics",
        "subtle",
        "a repetition penalty of 1.02 in the engine only",
        sampler=Sampler(repetition_penalty=1.02),
    ),
    fault(
        "f-sem-rep-loud",
        "semantics",
        "loud",
        "a repetition penalty of 1.1, engine only",
        sampler=Sampler(repetition_penalty=1.1),
    ),
    fault("f-pol-lag", "policy", "subtle", "weights one optimizer step behind", weights="lag"),
    fault(
        "f-pol-stale",
        "policy",
        "loud",
        "weights one RL step (20 optimizer steps) behind",
        weights="stale",
    ),
    fault("f-pol-early", "policy", "loud", "a pre-training checkpoint served", weights="early"),
    fault(
        "f-cp-splitkv-subtle",
        "code_path",
        "subtle",
        "split-KV decode past 128 keys, partials merged by fp8 log-sum-exps",
        kernel=SPLIT_SUBTLE,
    ),
    fault(
        "f-cp-splitkv-loud",
        "code_path",
        "loud",
        "split-KV decode past 96 keys, the second partial a key late",
        kernel=SPLIT_LOUD,
    ),
    fault("f-pr-fp8kv", "precision", "loud", "an fp8 KV cache (scale 1)", kernel=FP8KV),
    fault(
        "f-hw-norm",
        "hardware",
        "subtle",
        "one device of four: RMSNorm statistics in bf16",
        gpus=4,
        faulty_gpu=2,
    ),
    fault(
        "f-hw-fp8kv",
        "hardware",
        "loud",
        "one device of four with an fp8 KV cache",
        gpus=4,
        faulty_gpu=2,
        gpu_kernel=FP8KV,
    ),
    fault(
        "f-tpl-tag",
        "template",
        "loud",
        "the trainer renders the tool's opening tag otherwise",
        render="opening-tag",
    ),
    fault(
        "f-stop-zero",
        "stop",
        "loud",
        "the engine reports 0.0 for each turn's stop token",
        stop_zero=True,
    ),
    fault(
        "f-combo-stale-topp",
        "semantics+policy",
        "loud",
        "top-p 0.9 with stale weights",
        sampler=Sampler(top_p=0.9),
        weights="stale",
    ),
    fault(
        "f-combo-lag-topp",
        "semantics+policy",
        "subtle",
        "top-p 0.98 with weights an optimizer step behind",
        sampler=Sampler(top_p=0.98),
        weights="lag",
    ),
    fault(
        "f-combo-lag-splitkv",
        "policy+code_path",
        "loud",
        "weights an optimizer step behind beside the off-by-one split-KV merge",
        weights="lag",
        kernel=SPLIT_LOUD,
    ),
    fault(
        "f-combo-fp8kv-tpl",
        "template+precision",
        "loud",
        "an fp8 KV cache beside the re-rendered tag",
        kernel=FP8KV,
        render="opening-tag",
    ),
    fault(
        "f-combo-temp-gpu",
        "semantics+hardware",
        "loud",
        "temperature 0.97 vs 1.0 beside one device's fp8 KV cache",
        sampler=Sampler(temperature=0.97),
        trainer_temperature=1.0,
        gpus=4,
        faulty_gpu=2,
        gpu_kernel=FP8KV,
    ),
    fault(
        "f-combo-tpl-splitkv",
        "template+code_path",
        "loud",
        "the re-rendered tag beside the off-by-one split-KV merge",
        render="opening-tag",
        kernel=SPLIT_LOUD,
    ),
)

LONG_TURNS = {"turns": (8, 12), "max_new": 96, "min_new": 64}  # ~600-950 tokens a response

LONG_RESPONSES: tuple[FamilyRun, ...] = (
    healthy("f-L-h-a", "8-12 turns of 64-96 tokens, loader a", "f-L-h-b", **LONG_TURNS),
    healthy("f-L-h-b", "as f-L-h-a, loader b", "f-L-h-a", loader="b", **LONG_TURNS),
    healthy(
        "f-L-h-c",
        "as f-L-h-a at temperature 0.6 on both sides, loader c",
        "f-L-h-a",
        sampler=Sampler(temperature=0.6),
        loader="c",
        **LONG_TURNS,
    ),
    healthy(
        "f-L-h-one-turn",
        "one turn of 600-700 tokens, no tool response",
        "f-L-h-a",
        turns=(1, 1),
        max_new=700,
        min_new=600,
        loader="f",
    ),
    fault(
        "f-L-pol-stale",
        "policy",
        "loud",
        "as f-L-h-a, weights one RL step (20 optimizer steps) behind",
        "f-L-h-a",
        weights="stale",
        **LONG_TURNS,
    ),
    fault(
        "f-L-pr-fp8kv",
        "precision",
        "loud",
        "as f-L-h-a, an fp8 KV cache (scale 1)",
        "f-L-h-a",
        kernel=FP8KV,
        **LONG_TURNS,
    ),
)


def newline_ids(model: FamilyModel) -> set[int]:
    tok = model.tokenizer
    return {i for i in range(tok.get_vocab_size()) if "\n" in tok.decode([i])}


def make_samples(
    run: FamilyRun,
    model: FamilyModel,
    prompts: list[bytes],
    sources: list[str],
    step: int,
    seed: int,
) -> list[Sample]:
    rng = random.Random(stable_seed(seed, "family", run.loader, step))
    samples = []
    for p in range(run.prompts):
        snippet, start = pick_prompt(prompts, rng, 80, 200)
        ids = model.tokenizer.encode(snippet.decode("utf-8", "replace")).ids
        for j in range(run.group):
            samples.append(
                Sample(
                    uid=f"step{step}-p{p:02d}-r{j}",
                    prompt=ids,
                    n_turns=rng.randint(*run.turns),
                    tool_rng=random.Random(stable_seed(seed, "tool", run.loader, step, p, j)),
                    data_source=sources[start],
                )
            )
    return samples


def gpu_of(sample: Sample, n: int) -> int:
    return zlib.crc32(sample.uid.encode()) % n


def behind(model: FamilyModel, step: int, fraction: float) -> dict[str, torch.Tensor]:
    """Weights a ``fraction`` of an RL step behind: the step's checkpoint moved that far along
    the straight line back to the previous step's (20 optimizer steps apart, so 0.05 is about
    one optimizer step behind, as ``lag`` is)."""
    now, before = model.checkpoints[step], model.checkpoints[step - 1]
    return {
        k: v + fraction * (before[k] - v) if v.is_floating_point() else v for k, v in now.items()
    }


def engine_for(run: FamilyRun, model: FamilyModel, step: int, faulty: bool) -> torch.nn.Module:
    if step < run.from_step:
        run = replace(run, weights="current", kernel=EngineKernel())
    if run.weights.startswith("behind:"):
        state = behind(model, step, float(run.weights.removeprefix("behind:")))
    else:
        state = {
            "current": model.checkpoints[step],
            "lag": model.lagging[step],
            "stale": model.checkpoints[step - 1],
            "early": model.early,
        }[run.weights]
    kernel = run.gpu_kernel if faulty and run.gpu_kernel is not None else run.kernel
    return prepare_engine(
        build(engine_config(model.config, run.engine_config), state, torch.bfloat16),
        kernel,
        run.fp32_head,
        norm_bf16=faulty and run.gpu_kernel is None,
        router_rounding=run.router_rounding,
    )


def roll(run: FamilyRun, model: FamilyModel, samples: list[Sample], step: int, seed: int) -> None:
    """Each sample's turns, none past the model's trained context: a turn decodes at most
    ``run.max_new`` tokens and none past the context; a turn that could leave it is not begun."""
    tok = model.tokenizer
    context = model.context
    stops = newline_ids(model)
    gen = torch.Generator().manual_seed(stable_seed(seed, "sample", run.name, step))
    groups: dict[int, list[Sample]] = {}
    for s in samples:
        g = gpu_of(s, run.gpus)
        s.gpu = f"gpu{g}" if run.gpus > 1 else ""
        groups.setdefault(g, []).append(s)
    for g, members in sorted(groups.items()):
        engine = engine_for(run, model, step, g == run.faulty_gpu)
        for turn in range(max(s.n_turns for s in members)):
            batch = [s for s in members if s.n_turns > turn]
            if not batch:
                break
            room = context - max(len(s.sequence) for s in batch)
            assert room > 0, f"{run.name}: a prompt fills the trained context ({context})"
            budget = min(run.max_new, room)  # only a first turn's prompt can bind it
            outs = decode_turn(
                engine, [s.sequence for s in batch], run.sampler, stops, budget, run.min_new, gen
            )
            if engine.turn_routes is not None:
                keep_first_routes(batch, engine.turn_routes)
            for s, (tokens, lps) in zip(batch, outs, strict=True):
                stopped = tokens[-1] in stops
                if stopped and run.stop_zero:
                    lps = [*lps[:-1], 0.0]
                s.response += tokens
                s.mask += [1] * len(tokens)
                s.rollout_lp += lps
                s.stopped.append(stopped)
                if s.n_turns > turn + 1:
                    text = tool_response(s.tool_rng).decode()
                    if not tok.decode([tokens[-1]]).endswith("\n"):
                        text = "\n" + text
                    ids = tok.encode(text).ids
                    if len(s.sequence) + len(ids) + run.max_new > context:
                        s.n_turns = turn + 1  # the next turn would leave the trained context
                        continue
                    s.response += ids
                    s.mask += [0] * len(ids)
                    s.rollout_lp += [0.0] * len(ids)


def trainer_copy(s: Sample, model: FamilyModel, render: str) -> tuple[list[int], list[int]]:
    """The trainer's sequence (each tool response re-rendered and re-tokenized) and, for each
    response position, its index there (-1 for tool positions)."""
    seq, where = list(s.prompt), []
    i = 0
    while i < len(s.mask):
        j = i
        while j < len(s.mask) and s.mask[j] == s.mask[i]:
            j += 1
        if s.mask[i]:
            where += range(len(seq), len(seq) + j - i)
            seq += s.response[i:j]
        else:
            where += [-1] * (j - i)
            text = model.tokenizer.decode(s.response[i:j]).encode()
            seq += model.tokenizer.encode(RENDERS[render](text).decode()).ids
        i = j
    return seq, where


def scored(run: FamilyRun, model: FamilyModel, samples: list[Sample], step: int) -> None:
    trainer = build(model.config, model.checkpoints[step], TRAINER_DTYPES[run.trainer_dtype])
    pairs = [
        trainer_copy(s, model, run.render)
        if run.render
        else (s.sequence, list(range(len(s.prompt), len(s.sequence))))
        for s in samples
    ]
    replay = None
    if run.routing != "natural":
        assert not run.render, "replay needs the engine's token sequence"
        replay = [s.rollout_routes for s in samples]
        if run.routing == "replay-late":
            replay = [shifted(r) for r in replay]
    temperature = run.trainer_temperature or run.sampler.temperature
    lps = score(trainer, [p[0] for p in pairs], temperature, replay=replay)
    for i, (s, (_, where), row) in enumerate(zip(samples, pairs, lps, strict=True)):
        s.trainer_lp = [row[w] if m else 0.0 for w, m in zip(where, s.mask, strict=True)]
        if trainer.scored_routes is not None:
            s.trainer_routes = trainer.scored_routes[i]


def write_run(
    run: FamilyRun,
    model: FamilyModel,
    prompts: list[bytes],
    sources: list[str],
    out: Path,
    seed: int,
) -> None:
    for step in range(1, STEPS + 1):
        samples = make_samples(run, model, prompts, sources, step, seed)
        roll(run, model, samples, step, seed)
        scored(run, model, samples, step)
        extra = prompt_columns(samples)
        if run.gpus > 1:
            extra["gpu"] = pa.array([s.gpu for s in samples], pa.string())
        if samples[0].rollout_routes is not None:
            width = max(len(s.response) for s in samples)
            extra |= route_columns(samples, width, run.encoding, run.capture_bug)
        write_parquet_step(
            out / f"step_{step:04d}.parquet",
            step,
            copy.deepcopy(samples),
            {"source": "family"},
            extra,
        )


def check_family(runs: tuple[FamilyRun, ...] = FAMILY) -> None:
    names = [r.name for r in runs]
    assert len(set(names)) == len(names), "duplicate run names"
    for r in runs:
        assert r.baseline in names and r.baseline != r.name, r.name
        assert r.render in ("", *RENDERS), r.name
        assert r.weights in ("current", "lag", "stale", "early") or (
            r.weights.startswith("behind:") and 0 < float(r.weights[7:]) < 1
        ), r.name
        assert r.engine_config in ("", *EDITS), r.name
        assert r.routing in ("natural", "replay", "replay-late"), r.name
        assert r.capture_bug in CAPTURE_BUGS and r.encoding in ENCODINGS, r.name
        assert r.routing != "natural" or not r.capture_bug, f"{r.name}: no replay, no capture"
        assert 0 < r.min_new <= r.max_new, r.name
        assert 0 <= r.from_step <= STEPS, r.name
