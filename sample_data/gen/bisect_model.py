"""The sample model's shipped checkpoint, and the factory `mismatchctl bisect` loads it with.

One trainer checkpoint of the dense TinyLM ships with the sample data: the float32 weights the
trainer scored one step of one run with (`BISECT_RUN`, `BISECT_STEP`), as safetensors, with its
config beside it as JSON. `generate.py` writes it with that run; `export_model.py` writes it alone.

    mismatchctl bisect ref-b --steps 8 --model sample_data/gen/bisect_model.py:load

`load()` returns a module with TinyLM's two paths: `forward(ids)` is the trainer's full forward;
`prefill(ids, kv)` and `decode(token, cache, kv)` are the engine's (TinyLM.prefill / decode with
the plain decode kernel), so bisect runs its incremental and KV-cache settings through them.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import torch
from torch import nn

if str(Path(__file__).resolve().parents[1]) not in sys.path:  # loaded by file path (bisect)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gen.model import AttentionKernel, KVCache, ModelConfig, PathHooks, TinyLM

BISECT_RUN = "ref-b"
BISECT_STEP = 8
MODEL_DIR = Path(__file__).resolve().parents[1] / "model"
STEM = f"{BISECT_RUN}-step{BISECT_STEP}"

Store = Callable[[int, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


def save(state: dict[str, torch.Tensor], cfg: ModelConfig, out: Path = MODEL_DIR) -> Path:
    """Write the checkpoint (float32 safetensors) and its config JSON; the weights' path."""
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    weights = out / f"{STEM}.safetensors"
    save_file({k: v.detach().float().contiguous().clone() for k, v in state.items()}, weights)
    meta = {"run": BISECT_RUN, "step": BISECT_STEP, "dtype": "float32", "model": asdict(cfg)}
    (out / f"{STEM}.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return weights


class Storing(PathHooks):
    """The plain engine path, with the cache storing what `store` makes of each new K/V (the
    prefill attends to the stored states too, as bisect's transformers caches do)."""

    def __init__(self, store: Store, prefilling: bool) -> None:
        self.store, self.prefilling = store, prefilling

    def prefill_kv(
        self, layer: int, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return self.store(layer, k, v)

    def cache_kv(
        self, layer: int, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if self.prefilling:  # already made by prefill_kv
            return k, v
        return self.store(layer, k, v)


class SampleModel(nn.Module):
    """TinyLM as bisect calls it (docs/bisect.md, a factory's module)."""

    def __init__(self, lm: TinyLM) -> None:
        super().__init__()
        self.lm = lm

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.lm(ids)

    def prefill(
        self, ids: torch.Tensor, kv: Store | None = None, valid: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, KVCache]:
        self.lm.hooks = None if kv is None else Storing(kv, prefilling=True)
        valid = torch.ones_like(ids, dtype=torch.bool) if valid is None else valid
        # the cache's slots, not positions (those count from each row's first token)
        return self.lm.prefill(ids, valid, capacity=ids.shape[1] + self.lm.cfg.max_len)

    def decode(
        self, token: torch.Tensor, cache: KVCache, kv: Store | None = None
    ) -> tuple[torch.Tensor, KVCache]:
        self.lm.hooks = None if kv is None else Storing(kv, prefilling=False)
        # a row past its sequence's end (fed padding, never read) stays inside the rope tables
        cache.positions = cache.positions.clamp_max(self.lm.cfg.max_len - 1)
        return self.lm.decode(token, cache, AttentionKernel()), cache


def load(path: Path | None = None) -> SampleModel:
    """The shipped checkpoint (or the one at `path`) as a float32 SampleModel in eval mode."""
    from safetensors.torch import load_file

    weights = path or MODEL_DIR / f"{STEM}.safetensors"
    meta = json.loads(weights.with_suffix(".json").read_text(encoding="utf-8"))
    lm = TinyLM(ModelConfig(**meta["model"]))
    lm.load_state_dict(load_file(str(weights)))
    return SampleModel(lm).eval()
