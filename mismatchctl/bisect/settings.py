"""The settings ``bisect`` re-scores under. The start is the trainer's: float32 weights and
activations, one teacher-forced forward over the whole sequence. Every other setting changes one
thing of it (``bf16+incremental`` two: the common engine path)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from mismatchctl.errors import UsageError

START = "start"


@dataclass(frozen=True)
class Setting:
    """How to re-score: ``dtype`` of weights and activations; ``lm_head_fp32``: the final norm
    and the lm_head kept in float32; ``incremental``: prefill the prompt, then one token at a
    time with a KV cache; ``kv``: the cache's storage (``bf16``, ``fp8``: e4m3 with a per-tensor
    scale); ``padded``: left-padded into a batch with the other sequences of its batch;
    ``temperature`` / ``top_p``: the sampler's processing of the logits."""

    name: str
    what: str
    dtype: str = "float32"
    lm_head_fp32: bool = False
    incremental: bool = False
    kv: str | None = None
    padded: bool = False
    temperature: float | None = None
    top_p: float | None = None
    changes: int = 1  # from the start

    def unsupported(self, hf: bool, stepwise: bool) -> str | None:
        """Why the model cannot run it (None: it can): ``hf``, a transformers model; ``stepwise``,
        a factory's module offering ``prefill`` and ``decode`` (docs/bisect.md)."""
        if hf:
            return None
        if self.incremental and not stepwise:
            return ("incremental decoding needs a KV cache: a transformers model, or a factory "
                    "module with prefill and decode")  # fmt: skip
        if self.padded:
            return "a padded batch needs an attention mask (a transformers model's)"
        if self.lm_head_fp32:
            return "keeping the lm_head in float32 needs a transformers model's output embeddings"
        return None


def at_trainer_temperature(settings: list[Setting], temperature: float) -> list[Setting]:
    """The settings when the trainer divides its logits by ``temperature`` (as many RL trainers
    do): every setting at that temperature, and the sampler's temperature setting turned into
    its one change from there, the raw logits."""
    out = []
    for s in settings:
        if s.temperature is not None:
            out.append(Setting("raw", f"the logits not divided by {temperature:g}",
                               temperature=1.0))  # fmt: skip
        elif s.name == START:
            out.append(replace(s, what=f"{s.what}, logits divided by {temperature:g}",
                               temperature=temperature))  # fmt: skip
        else:
            out.append(replace(s, temperature=temperature))
    return out


def grid(temperature: float | None, top_p: float | None) -> list[Setting]:
    """Every setting, the start first; the sampler's only with a value that changes the logits
    (a temperature other than 1, a top-p under 1)."""
    out = [
        Setting(START, "float32, full forward (the trainer's)", changes=0),
        Setting("bf16", "bfloat16 weights and activations", dtype="bfloat16"),
        Setting("fp16", "float16 weights and activations", dtype="float16"),
        Setting("lm_head-fp32", "bfloat16, the final norm and lm_head in float32",
                dtype="bfloat16", lm_head_fp32=True, changes=2),
        Setting("incremental", "one token at a time with a KV cache", incremental=True),
        Setting("bf16+incremental", "bfloat16, one token at a time with a KV cache",
                dtype="bfloat16", incremental=True, changes=2),
        Setting("kv-bf16", "KV cache stored in bfloat16", incremental=True, kv="bf16"),
        Setting("kv-fp8", "KV cache stored in fp8 e4m3 (a per-tensor scale)", incremental=True,
                kv="fp8"),
        Setting("padded-left", "left-padded into a batch with others", padded=True),
    ]  # fmt: skip
    if temperature is not None and temperature != 1:  # 1: the start itself
        out.append(Setting(f"temperature={temperature:g}", f"logits divided by {temperature:g}",
                           temperature=temperature))  # fmt: skip
    if top_p is not None and top_p < 1:  # 1 keeps every token: the start itself
        out.append(Setting(f"top-p={top_p:g}", f"top-p {top_p:g}, renormalised", top_p=top_p))
    return out


def choose(all_settings: list[Setting], names: Sequence[str] | None) -> list[Setting]:
    """The settings named (the start always first), or all of them."""
    if not names:
        return all_settings
    by_name = {s.name: s for s in all_settings}
    known = ", ".join(by_name)
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise UsageError(
            f"--settings: unknown setting `{unknown[0]}` (known: {known})",
            "name settings from the list; temperature and top-p need --temperature / --top-p "
            "or the run's tags.",
        )
    return [all_settings[0], *(by_name[n] for n in dict.fromkeys(names) if n != START)]
