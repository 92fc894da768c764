"""Multi-turn rollouts: model turn, tool response (masked), model turn, ... then trainer scoring."""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from gen.corpus import pick_prompt
from gen.engine import NEWLINE, InferenceEngine, TrainerScorer, TurnLimits
from gen.tools import tool_response


@dataclass(frozen=True)
class RolloutShape:
    """Size of one RL step's batch and of its rollouts."""

    n_prompts: int
    group_size: int  # responses per prompt (GRPO group)
    prompt_min: int = 32
    prompt_max: int = 80
    limits: TurnLimits = field(default_factory=lambda: TurnLimits(max_new=40, min_new=12))
    min_turns: int = 2
    max_turns: int = 3
    tool_echo: bool = False  # longer tool responses that echo the expression (gen/tools.py)


@dataclass
class Sample:
    """One response. Lists over response positions; mask 1 = model token, 0 = tool response."""

    uid: str
    prompt: list[int]
    n_turns: int
    tool_rng: random.Random
    response: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    rollout_lp: list[float] = field(default_factory=list)
    trainer_lp: list[float] = field(default_factory=list)
    stopped: list[bool] = field(default_factory=list)  # per model turn: ended at the stop byte
    data_source: str = ""  # the prompt module the prompt's first line comes from
    tool_echo: bool = False  # the tool responses echo their expression
    gpu: str = ""  # the replica (device) that served the response, in a multi-device run
    batch: tuple[int, int] | None = None  # a run in waves: (batch_id, batch_size) of its wave
    # MoE only: expert ids int16 [rows, layers, top_k] per input position from position 0 of
    # prompt + response; the engine's for [0, len(sequence) - 1), the trainer's for every position
    rollout_routes: np.ndarray | None = None
    trainer_routes: np.ndarray | None = None

    @property
    def sequence(self) -> list[int]:
        return self.prompt + self.response

    @property
    def reward(self) -> float:
        # a simple, honest format reward: the share of model turns that finished their line
        return sum(self.stopped) / len(self.stopped)


def stable_seed(*parts: object) -> int:
    """A seed from readable parts that does not depend on PYTHONHASHSEED."""
    return zlib.crc32("/".join(map(str, parts)).encode())


def make_samples(
    shape: RolloutShape,
    prompts: list[bytes],
    step: int,
    seed: int,
    sources: list[str] | None = None,
    loader: str = "",
) -> list[Sample]:
    """The step's batch: same prompts, turn counts and tool calls in every run (seeded loader).

    `sources` names the module of each prompt line (the samples' `data_source`); a non-empty
    `loader` names another seeded loader: other prompts, turn counts and tool calls.
    """
    stream = ("prompts", step) if not loader else ("prompts", loader, step)
    rng = random.Random(stable_seed(seed, *stream))
    samples = []
    for p in range(shape.n_prompts):
        snippet, start = pick_prompt(prompts, rng, shape.prompt_min, shape.prompt_max)
        tool = ("tool", step, p) if not loader else ("tool", loader, step, p)
        for j in range(shape.group_size):
            samples.append(
                Sample(
                    uid=f"step{step}-p{p:02d}-r{j}",
                    prompt=list(snippet),
                    n_turns=rng.randint(shape.min_turns, shape.max_turns),
                    tool_rng=random.Random(stable_seed(seed, *tool, j)),
                    data_source=sources[start] if sources else "",
                    tool_echo=shape.tool_echo,
                )
            )
    return samples


def append(sample: Sample, tokens: list[int], logprobs: list[float], mask: int) -> None:
    sample.response.extend(tokens)
    sample.mask.extend([mask] * len(tokens))
    sample.rollout_lp.extend(logprobs)


def roll_out(
    engine: InferenceEngine,
    samples: list[Sample],
    limits: TurnLimits,
    gen: torch.Generator,
    cached: Callable[[Sample], int] | None = None,
) -> None:
    """Generate every model turn batch by batch, inserting a tool response between turns.

    `cached`: how many leading tokens of a sample's context hit the engine's prefix cache."""
    for turn in range(max(s.n_turns for s in samples)):
        batch = [s for s in samples if s.n_turns > turn]
        hits = [cached(s) for s in batch] if cached is not None else None
        outputs = engine.generate([s.sequence for s in batch], limits, gen, hits)
        if engine.routes is not None:
            keep_first_routes(batch, engine.routes)
        for sample, (tokens, logprobs) in zip(batch, outputs, strict=True):
            append(sample, tokens, logprobs, 1)
            stopped = tokens[-1] == NEWLINE and len(tokens) >= limits.min_new
            sample.stopped.append(stopped)
            if sample.n_turns > turn + 1:
                # the tool output starts on its own line even if the turn was cut mid-line
                response = tool_response(sample.tool_rng, sample.tool_echo)
                tool = (b"" if tokens[-1] == NEWLINE else b"\n") + response
                append(sample, list(tool), [0.0] * len(tool), 0)


def keep_first_routes(samples: list[Sample], routes: list[np.ndarray]) -> None:
    """Each position keeps the routes of the first turn that computed it, as an engine with a
    prefix cache records them (each turn's prefill recomputes the earlier positions here): the
    rows that produced the earlier turns' logprobs stay."""
    for sample, rows in zip(samples, routes, strict=True):
        have = sample.rollout_routes
        if have is None:
            sample.rollout_routes = rows
        else:
            sample.rollout_routes = np.concatenate([have, rows[len(have) :]])


def trainer_copy(sample: Sample, render: Callable[[bytes], bytes]) -> tuple[list[int], list[int]]:
    """The trainer's copy of the sequence, each tool response re-rendered by `render`; and for
    every response position its index in that copy (-1 for tool positions)."""
    seq = list(sample.prompt)
    where: list[int] = []
    mask = sample.mask
    i = 0
    while i < len(mask):
        j = i
        while j < len(mask) and mask[j] == mask[i]:
            j += 1
        if mask[i]:
            where.extend(range(len(seq), len(seq) + j - i))
            seq.extend(sample.response[i:j])
        else:
            where.extend([-1] * (j - i))
            seq.extend(render(bytes(sample.response[i:j])))
        i = j
    return seq, where


def score(
    scorer: TrainerScorer,
    samples: list[Sample],
    render: Callable[[bytes], bytes] | None = None,
    replay: bool = False,
) -> None:
    """Trainer logprobs of the response tokens (0.0 on tool positions, as verl stores them), and
    an MoE trainer's routes.

    `render`: the trainer's copy of each tool response differs from the text the engine saw.
    `replay` (MoE): the trainer uses the engine's routes (rollout routing replay).
    """
    n_prompt = [len(s.prompt) for s in samples]
    if render is None:
        seqs = [s.sequence for s in samples]
        where = [
            list(range(p, p + len(s.response))) for p, s in zip(n_prompt, samples, strict=True)
        ]
    else:
        seqs, where = map(list, zip(*(trainer_copy(s, render) for s in samples), strict=True))
    if replay:
        engine_routes = [s.rollout_routes for s in samples if s.rollout_routes is not None]
        assert render is None and len(engine_routes) == len(samples)
        full = scorer.score(seqs, replay=engine_routes)
    else:
        full = scorer.score(seqs)
    if scorer.routes is not None:
        assert render is None
        for sample, routes in zip(samples, scorer.routes, strict=True):
            sample.trainer_routes = routes
    for i, (sample, lps) in enumerate(zip(samples, full, strict=True)):
        sample.trainer_lp = [
            lps[w] if m else 0.0 for w, m in zip(where[i], sample.mask, strict=True)
        ]
