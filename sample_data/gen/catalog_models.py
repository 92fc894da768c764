"""The catalogue's runs repeated on the other models: a fault unchanged but for the model and the
baseline, and the healthy shapes of gen/catalog_healthy.py (temperature, turns, devices, waves)
on a model of its own, so a threshold set on the 4-layer model's noise meets another's."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gen.calib_spec import CalibRun
from gen.catalog_common import WAVES
from gen.catalog_healthy import HEALTHY, HEALTHY_GPUS, at, healthy
from gen.catalog_other import COMBOS, HARDWARE, TEMPLATE_STOP_DATA
from gen.catalog_paths import CODE_PATH, PRECISION
from gen.catalog_semantics import POLICY, SEMANTICS

# A run at temperature 0.6 takes a baseline at 0.6 (as h-t06 does): both sides divide the logits
# by T, so the logit noise in r grows as 1/T and K3 as 1/T^2, every token alike; against a
# baseline at 0.9 that is (0.9/0.6)^2 = 2.25x, what a precision loss looks like (docs/diagnose.md
# "Another model"). 1.0 against 0.9 lowers it (0.81x), as 0.8 against 0.9 raises it 1.27x (h-t08).

# the knobs of a healthy shape (catalog_healthy's h-t06, h-many-turns, h-gpus, ...) and its line
SHAPES: dict[str, tuple[str, dict[str, Any]]] = {
    "t06": ("temperature 0.6 on both sides", {"engine": at(0.6)}),
    "t10": ("temperature 1.0 on both sides", {"engine": at(1.0)}),
    "one-turn": ("single-turn responses of up to 64 bytes", {"shape": "one-turn"}),
    "many-turns": ("4-5 turns, longer tool responses (echoed)", {"shape": "many-turns"}),
    "gpus": ("four devices (H100, H100, A100, L20 by request hash)", {"replicas": HEALTHY_GPUS}),
    "waves": ("decoded in waves of 12 and of 4", {"waves": WAVES}),
}


def original(name: str) -> CalibRun:
    """A run of the 4-layer model's catalogue by name."""
    runs = {r.name: r for r in (*SEMANTICS, *POLICY, *CODE_PATH, *PRECISION, *HARDWARE,
                                *TEMPLATE_STOP_DATA, *COMBOS, *HEALTHY)}  # fmt: skip
    return runs[name]


def repeated(name: str, suffix: str, model: str, baseline: str, gpus: str) -> CalibRun:
    """The run `name` on `model` as `name-suffix`: its knobs unchanged, its own sampling stream;
    its baseline `baseline`, or `gpus` (that model's four-device run) where the original's is
    four-device."""
    run = original(name)
    base = gpus if run.baseline == "h-gpus" else baseline
    return replace(run, name=f"{name}-{suffix}", model=model, baseline=base, stream="")


def shaped(name: str, shape: str, baseline: str, model: str, loader: str = "a") -> CalibRun:
    """The healthy shape `shape` (SHAPES) on `model`, with prompts of `loader`."""
    what, knobs = SHAPES[shape]
    return healthy(name, baseline, f"{what}, loader {loader}", model=model, loader=loader, **knobs)


def healthy_shapes(model: str, prefix: str, what: str) -> tuple[CalibRun, ...]:
    """A model's eleven healthy runs: a pair (two loaders), temperatures 0.6 (a pair) and 1.0,
    one turn and many turns (pairs), four devices and decode waves; ``prefix`` names them
    (``h-deep``: ``h-deep-a``, ``h-deep-t06``...), ``what`` says the model."""
    a, b = f"{prefix}-a", f"{prefix}-b"
    return (
        healthy(a, b, what, model=model),
        healthy(b, a, f"as {a}, loader b", model=model, loader="b"),
        shaped(f"{prefix}-t06", "t06", f"{prefix}-t06-b", model, loader="c"),
        shaped(f"{prefix}-t06-b", "t06", f"{prefix}-t06", model, loader="b"),
        shaped(f"{prefix}-t10", "t10", b, model, loader="d"),
        shaped(f"{prefix}-one-turn", "one-turn", f"{prefix}-one-turn-b", model),
        shaped(f"{prefix}-one-turn-b", "one-turn", f"{prefix}-one-turn", model, loader="b"),
        shaped(f"{prefix}-many-turns", "many-turns", f"{prefix}-many-turns-b", model),
        shaped(f"{prefix}-many-turns-b", "many-turns", f"{prefix}-many-turns", model, loader="b"),
        shaped(f"{prefix}-gpus", "gpus", a, model, loader="e"),
        shaped(f"{prefix}-waves", "waves", b, model, loader="f"),
    )
