"""A tiny transformers model saved by the test (random weights, nothing downloaded) and runs
whose rollout side comes from a known setting, written with DumpWriter and ingested."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from mismatchctl import api
from mismatchctl.analysis.bisect.build import engine_batches
from mismatchctl.bisect import rescore
from mismatchctl.bisect.model import load as load_model
from mismatchctl.bisect.settings import Setting
from mismatchctl.dump import DumpWriter

if TYPE_CHECKING:  # transformers' model classes take seconds to import: only the tests that run
    # a model import them, not the collection of every test module
    from transformers import LlamaForCausalLM

VOCAB = 256


def tiny_model(path: Path, seed: int = 0) -> Path:
    """A 2-layer Llama (hidden 64, vocab 256) with random weights, saved to ``path``."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=256)  # fmt: skip
    model = LlamaForCausalLM(config)
    model.save_pretrained(path)
    return path


def load(path: Path) -> LlamaForCausalLM:
    from transformers import LlamaForCausalLM

    return LlamaForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def full_logprobs(model: LlamaForCausalLM, ids: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    """Every token's logprob but the first under one float32 forward: what a trainer computes."""
    with torch.inference_mode():
        logits = model(torch.as_tensor(ids[None])).logits[0].float() / temperature
        lp = torch.log_softmax(logits, -1)[:-1].gather(1, torch.as_tensor(ids[1:, None]))
    return np.concatenate([[0.0], lp[:, 0].double().numpy()])


# a sequence: prompt length, then mask runs of model (1) and tool (0) tokens; the last two end
# before KV position 16 (a control sample for a cell beyond it)
SHAPES = [(6, [(18, 1)]), (5, [(10, 1), (4, 0), (12, 1)]), (8, [(24, 1)]),
          (7, [(9, 1), (3, 0), (9, 1)]), (5, [(20, 1)]), (6, [(16, 1)]), (4, [(10, 1)]),
          (5, [(9, 1)])]  # fmt: skip


def sequences(seed: int = 3) -> list[tuple[np.ndarray, int, np.ndarray]]:
    """(token ids of the whole sequence, prompt length, response mask) per sequence."""
    rng = np.random.default_rng(seed)
    out = []
    for prompt, runs in SHAPES:
        mask = np.concatenate([np.full(n, m, dtype=np.int64) for n, m in runs])
        out.append((rng.integers(0, VOCAB, prompt + len(mask)), prompt, mask))
    return out


Side = Callable[[np.ndarray, int], np.ndarray]  # (ids, prompt) -> logprob of every token


def engine_sides(ckpt: Path, setting: Setting) -> dict[bytes, np.ndarray]:
    """Every sequence's logprobs (by its ids' bytes) through the engine path under ``setting``,
    decoded as bisect decodes them (sorted by length, ENGINE_BATCH at a time): an engine's."""
    loaded = load_model(str(ckpt))
    variant = rescore.Variant(loaded, setting)
    seqs = [rescore.Sequence(i, p, np.arange(p, len(i))) for i, p, _ in sequences()]
    got = engine_batches(variant, seqs, lambda _k: None)
    return {s.ids.tobytes(): x for s, x in zip(seqs, got, strict=True)}


def make_run(store: Path, run: str, root: Path, trainer: Side, rollout: Side,
             prompts: bool = True, tags: dict | None = None, steps: int = 1) -> None:  # fmt: skip
    """The sequences' two sides (each a logprob per position of the whole sequence) written as
    ``steps`` steps of a dump (the same sequences in each; responses as arrays, prompts as
    ids) and ingested as ``run``."""
    rows: dict[str, list] = {"rollout": [], "trainer": [], "mask": [], "ids": [], "prompts": []}
    for ids, prompt, mask in sequences():
        rows["rollout"].append(rollout(ids, prompt)[prompt:])
        rows["trainer"].append(trainer(ids, prompt)[prompt:])
        rows["mask"].append(mask)
        rows["ids"].append(ids[prompt:])
        rows["prompts"].append(ids[:prompt].tolist())
    with DumpWriter(root / run, tags=tags) as writer:
        for step in range(steps):
            writer.add(step, rows["rollout"], rows["trainer"], rows["mask"], token_ids=rows["ids"],
                       prompts=rows["prompts"] if prompts else None,
                       sample_ids=[f"s{step}-{i}" for i in range(len(SHAPES))])  # fmt: skip
    api.ingest([root / run], run, store=store)


class Logits(torch.nn.Module):
    """A module outside transformers' calling convention: input ids in, logits out."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.inner(ids).logits


def factory() -> torch.nn.Module:
    """The tiny model of seed 0 (the same weights ``tiny_model`` saves) through the factory
    path: ``tests.bisect.data:factory``."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=256)  # fmt: skip
    return Logits(LlamaForCausalLM(config))
