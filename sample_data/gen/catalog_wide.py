"""The same faults on another model: a wider, shallower dense model trained with another seed
(``tinylm-wide``, 3 layers of width 256, 8 heads). Its runs repeat faults of every class at their
subtle size where they have one, unchanged but for the model and the baseline, so a threshold
set on the 4-layer model's numbers is seen on a model whose healthy noise is its own; its healthy
runs vary the loader, the temperature, the turns, the devices and the decode waves."""

from __future__ import annotations

from gen.calib_spec import CalibRun
from gen.catalog_healthy import healthy
from gen.catalog_models import repeated, shaped

MODEL = "tinylm-wide"
REPEATED = (
    "sem-topp-subtle",
    "sem-rep-subtle",
    "pol-stale-iter",
    "cp-splitkv-subtle",
    "cp-prefix-subtle",
    "pr-fp8kv",
    "hw-l20-splitkv-subtle",
    "tpl-crlf",
    "stop-zero-last",
    "combo-stale-splitkv-subtle",
)

WIDE: tuple[CalibRun, ...] = (
    healthy("h-wide-a", "h-wide-b", "a 3-layer model of width 256 (seed 2)", model=MODEL),
    healthy("h-wide-b", "h-wide-a", "as h-wide-a, loader b", model=MODEL, loader="b"),
    shaped("h-wide-t06", "t06", "h-wide-t06-b", MODEL),
    shaped("h-wide-t06-b", "t06", "h-wide-t06", MODEL, loader="b"),
    shaped("h-wide-many-turns", "many-turns", "h-wide-many-turns-b", MODEL),
    shaped("h-wide-many-turns-b", "many-turns", "h-wide-many-turns", MODEL, loader="b"),
    shaped("h-wide-gpus", "gpus", "h-wide-a", MODEL),
    shaped("h-wide-waves", "waves", "h-wide-b", MODEL, loader="b"),
    *(repeated(name, "wide", MODEL, "h-wide-a", "h-wide-gpus") for name in REPEATED),
)
