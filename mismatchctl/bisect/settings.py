"""The settings ``bisect`` re-scores under. The start is the trainer's: float32 weights and
activations (or bfloat16: ``--start bf16``), one teacher-forced forward over the whole sequence.
Every other setting changes one thing of it (``bf16+incremental`` and the chunked prefill two:
the common engine path, and the prefill of that path)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from mismatchctl.errors import UsageError, one_of

START = "start"
DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
STARTS = ("fp32", "bf16")  # a trainer's precisions (--start)
# attention implementations as transformers names them (setting name -> implementation)
ATTENTION = {"attn-eager": "eager", "attn-sdpa": "sdpa", "attn-flash": "flash_attention_2"}
FACTORY_NEEDS = "needs a transformers model"


@dataclass(frozen=True)
class Setting:
    """How to re-score: ``dtype`` of weights and activations; ``lm_head_fp32``: the final norm
    and the lm_head kept in float32; ``incremental``: prefill the prompt, then one token at a
    time with a KV cache; ``chunk``: the prompt prefilled in chunks of that many tokens;
    ``kv``: the cache's storage (``bf16``; ``fp8``: e4m3 with a per-tensor scale; ``fp8-head``:
    a scale per KV head); ``attention``: the transformers attention implementation;
    ``padding``: ``left`` or ``right``, padded into a batch with the other sequences of its
    batch; ``temperature`` / ``top_p`` / ``top_k``: the sampler's processing of the logits."""

    name: str
    what: str
    dtype: str = "float32"
    lm_head_fp32: bool = False
    incremental: bool = False
    chunk: int | None = None
    kv: str | None = None
    attention: str | None = None
    padding: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    changes: int = 1  # from the start

    def unsupported(self, hf: bool, stepwise: bool) -> str | None:
        """Why the model cannot run it (None: it can): ``hf``, a transformers model; ``stepwise``,
        a factory's module offering ``prefill`` and ``decode`` (docs/bisect.md)."""
        if hf:
            return None
        if self.incremental and not stepwise:
            return ("incremental decoding needs a KV cache: a transformers model, or a factory "
                    "module with prefill and decode")  # fmt: skip
        if self.chunk is not None:
            return f"a chunked prefill {FACTORY_NEEDS}'s cache (a factory prefills whole)"
        if self.padding is not None:
            return f"a padded batch {FACTORY_NEEDS}'s attention mask"
        if self.lm_head_fp32:
            return f"keeping the lm_head in float32 {FACTORY_NEEDS}'s output embeddings"
        if self.attention is not None:
            return f"another attention implementation {FACTORY_NEEDS}"
        return None


def at_trainer_temperature(settings: list[Setting], temperature: float) -> list[Setting]:
    """The settings when the trainer divides its logits by ``temperature`` (as many RL trainers
    do): every setting at that temperature, and the sampler's temperature setting turned into
    its one change from there, the raw logits."""
    out = []
    for s in settings:
        if s.temperature is not None:
            out.append(Setting("raw", f"the logits not divided by {temperature:g}",
                               dtype=s.dtype, temperature=1.0))  # fmt: skip
        elif s.name == START:
            out.append(replace(s, what=f"{s.what}, logits divided by {temperature:g}",
                               temperature=temperature))  # fmt: skip
        else:
            out.append(replace(s, temperature=temperature))
    return out


@dataclass(frozen=True)
class Sampler:
    """The engine's sampler as tagged or given: the settings that apply it (a value that
    changes the logits only: a temperature other than 1, a top-p under 1, a top-k above 0)."""

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None


def grid(
    sampler: Sampler | None = None, start: str = "fp32", chunk: int | None = None
) -> list[Setting]:
    """Every setting, the start first: each one change from ``start`` (``fp32`` or ``bf16``);
    the chunked prefill with a ``chunk``; the sampler's with a value that changes the logits."""
    d = DTYPES[start]
    out = [Setting(START, f"{d}, full forward (the trainer's)", dtype=d, changes=0)]
    out += [Setting(n, f"{t} weights and activations", dtype=t)
            for n, t in DTYPES.items() if t != d]  # fmt: skip
    out.append(Setting("lm_head-fp32", "bfloat16, the final norm and lm_head in float32",
                       dtype="bfloat16", lm_head_fp32=True, changes=1 + (d != "bfloat16")))  # fmt: skip
    out += _engine_path(d, chunk)
    out += [Setting(n, f"attention implementation {a}", dtype=d, attention=a)
            for n, a in ATTENTION.items()]  # fmt: skip
    out += [Setting(f"padded-{side}", f"{side}-padded into a batch with others", dtype=d,
                    padding=side) for side in ("left", "right")]  # fmt: skip
    return out + _sampler(sampler or Sampler(), d)


def _engine_path(d: str, chunk: int | None) -> list[Setting]:
    out = [Setting("incremental", "one token at a time with a KV cache", dtype=d,
                   incremental=True)]  # fmt: skip
    if d != "bfloat16":
        out.append(Setting("bf16+incremental", "bfloat16, one token at a time with a KV cache",
                           dtype="bfloat16", incremental=True, changes=2))  # fmt: skip
    if chunk is not None:
        out.append(Setting(f"prefill-chunk={chunk}", f"one token at a time with a KV cache, the "
                           f"prompt prefilled in chunks of {chunk:,} tokens", dtype=d,
                           incremental=True, chunk=chunk, changes=2))  # fmt: skip
    out += [
        Setting("kv-bf16", "KV cache stored in bfloat16", dtype=d, incremental=True, kv="bf16"),
        Setting("kv-fp8", "KV cache stored in fp8 e4m3 (a per-tensor scale)", dtype=d,
                incremental=True, kv="fp8"),
        Setting("kv-fp8-head", "KV cache stored in fp8 e4m3 (a scale per KV head)", dtype=d,
                incremental=True, kv="fp8-head"),
    ]  # fmt: skip
    return out


def _sampler(s: Sampler, d: str) -> list[Setting]:
    out = []
    if s.temperature is not None and s.temperature != 1:  # 1: the start itself
        out.append(Setting(f"temperature={s.temperature:g}",
                           f"logits divided by {s.temperature:g}", dtype=d,
                           temperature=s.temperature))  # fmt: skip
    if s.top_p is not None and s.top_p < 1:  # 1 keeps every token: the start itself
        out.append(Setting(f"top-p={s.top_p:g}", f"top-p {s.top_p:g}, renormalised", dtype=d,
                           top_p=s.top_p))  # fmt: skip
    if s.top_k is not None and s.top_k > 0:  # 0 or -1: no top-k (vLLM's and SGLang's off)
        out.append(Setting(f"top-k={s.top_k}", f"top-k {s.top_k}, renormalised", dtype=d,
                           top_k=s.top_k))  # fmt: skip
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
            "name settings from the list; temperature, top-p and top-k need --temperature / "
            "--top-p / --top-k or the run's tags, a chunked prefill --prefill-chunk.",
        )
    return [all_settings[0], *(by_name[n] for n in dict.fromkeys(names) if n != START)]


def check_start(start: str) -> str:
    return one_of(
        start,
        STARTS,
        f"--start {start}",
        "pass --start bf16 for a trainer that scores in bfloat16 (the default: fp32).",
    )
