"""The same stack with the trainer in bf16: mixed precision as FSDP and Megatron run it (the
weights and activations in bf16, the logits upcast to fp32 before the log-softmax), where every
other run of the corpus scores in fp32. A real run's trainer is this one; its own rounding is a
second noise on every token, and the prefill it computes (a full forward) departs from the
engine's decode in bf16 on both sides.

Made after every threshold, as a held-out check: its healthy shapes (the false-alarm budget,
each against another run with a bf16 trainer) and the 4-layer model's faults at their subtle
size, the loud split-KV merge, and the combinations of two the deep model repeats, each over a
baseline of the same stack."""

from __future__ import annotations

from dataclasses import replace

from gen.calib_spec import CalibRun
from gen.catalog_deep import COMBINED
from gen.catalog_models import healthy_shapes, original
from gen.catalog_wide import REPEATED

PREFIX = "h-bt"
MORE = ("cp-splitkv-loud", "pol-stale-ckpt", "sem-raw-subtle", "pr-fp8kv-v")


def bf16_trainer(run: CalibRun, name: str, baseline: str) -> CalibRun:
    """``run`` scored by a bf16 trainer as ``name``, over ``baseline``, on a stream of its own."""
    return replace(run, name=name, trainer_dtype="bf16", baseline=baseline, stream="",
                   fault=f"{run.fault}; the trainer in bf16")  # fmt: skip


def _repeated(name: str) -> CalibRun:
    run = original(name)
    base = f"{PREFIX}-gpus" if run.baseline == "h-gpus" else f"{PREFIX}-a"
    return bf16_trainer(run, f"{name}-bt", base)


OTHER_MODELS = (("tinylm-deep", "h-deep-bt", "the 8-layer model"),
                ("tinylm-mid", "h-mid-bt", "the 5-layer model"))  # fmt: skip
"""The deep and mid models' healthy shapes scored by a bf16 trainer (the false-alarm budget of
two more models' noise beside a trainer's own rounding)."""

TRAINER_BF16: tuple[CalibRun, ...] = (
    *(bf16_trainer(r, r.name, r.baseline) for r in healthy_shapes(
        "tinylm", PREFIX, "bf16 KV-cache engine, the 4-layer model")),
    *(_repeated(name) for name in (*REPEATED, *MORE, *COMBINED)),
    *(bf16_trainer(r, r.name, r.baseline) for model, prefix, what in OTHER_MODELS
      for r in healthy_shapes(model, prefix, f"bf16 KV-cache engine, {what}")),
)  # fmt: skip
