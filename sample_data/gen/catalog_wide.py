"""The same faults on another model: a wider, shallower dense model trained with another seed
(``tinylm-wide``, 3 layers of width 256, 8 heads). Its runs repeat faults of every class at their
subtle size where they have one, unchanged but for the model and the baseline, so a threshold
set on the 4-layer model's numbers is seen on a model whose healthy noise is its own."""

from __future__ import annotations

from dataclasses import replace

from gen.calib_spec import CalibRun
from gen.catalog_healthy import HEALTHY, healthy
from gen.catalog_other import COMBOS, HARDWARE, TEMPLATE_STOP_DATA
from gen.catalog_paths import CODE_PATH, PRECISION
from gen.catalog_semantics import POLICY, SEMANTICS

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


def _on_the_wide_model(name: str) -> CalibRun:
    runs = {r.name: r for r in (*SEMANTICS, *POLICY, *CODE_PATH, *PRECISION, *HARDWARE,
                                *TEMPLATE_STOP_DATA, *COMBOS, *HEALTHY)}  # fmt: skip
    run = runs[name]
    return replace(run, name=f"{name}-wide", model=MODEL, baseline="h-wide-a", stream="")


WIDE: tuple[CalibRun, ...] = (
    healthy("h-wide-a", "h-wide-b", "a 3-layer model of width 256 (seed 2)", model=MODEL),
    healthy("h-wide-b", "h-wide-a", "as h-wide-a, loader b", model=MODEL, loader="b"),
    *(_on_the_wide_model(name) for name in REPEATED),
)
