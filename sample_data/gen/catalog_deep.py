"""The same faults on a third model: a deeper, narrower dense model trained with another seed
(``tinylm-deep``, 8 layers of width 64, 4 heads of 16, seed 3): twice the depth of the 4-layer
model at half its width, where the wide one had fewer layers of twice the width, so the bf16
rounding a token meets passes through twice as many layers of smaller dot products.

Its healthy runs are the false-alarm budget on that model (two loaders, temperatures 0.6 and 1.0,
one turn and many turns, four devices, decode waves); its faults repeat the wide model's (every
class at its subtle size); and it holds the combinations of two faults that the 4-layer model's
corpus names in full (the MoE one aside: this model is dense)."""

from __future__ import annotations

from gen.calib_spec import CalibRun
from gen.catalog_models import healthy_shapes, repeated
from gen.catalog_wide import REPEATED

MODEL = "tinylm-deep"
COMBINED = (
    "combo-stale-splitkv",
    "combo-topp-template",
    "combo-stale-gpu",
    "combo-topp-stale",
    "combo-topp-fp8kv",
    "combo-fp8kv-gpu",
    "combo-template-fp8kv",
    "combo-temp-fp8kv",
)


DEEP: tuple[CalibRun, ...] = (
    *healthy_shapes(MODEL, "h-deep", "an 8-layer model of width 64 (seed 3)"),
    *(repeated(name, "deep", MODEL, "h-deep-a", "h-deep-gpus") for name in (*REPEATED, *COMBINED)),
)
