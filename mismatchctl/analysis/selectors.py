"""Selectors for `compare`: a run name, tag filters, and an optional step range.

v1-a100                      a run
gpu=A100                     every row whose gpu is A100 (gpu is per row)
run=x,engine=vllm-0.18.1     run x, sources tagged engine=vllm-0.18.1
v1-final@steps=0..200        a run, steps 0 to 200 inclusive (``--steps`` syntax: ``-6..-5``,
                             ``150..``, ``..99``, ``42``; ``0-200`` still works for steps >= 0)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mismatchctl.analysis.selection import (
    Selection,
    StepRange,
    empty_selection_error,
    parse_steps,
    select,
)
from mismatchctl.errors import StoreError, UsageError
from mismatchctl.store import Store
from mismatchctl.store.location import demo_store_hint

RUN_KEY, GPU_KEY = "run", "gpu"


@dataclass(frozen=True)
class Selector:
    text: str
    run: str | None = None
    gpu: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    steps: StepRange | None = None


def parse_selector(text: str) -> Selector:
    base, at, mods = text.partition("@")
    steps = _modifiers(mods, text) if at else None
    if "=" not in base:
        if not base.strip():
            raise UsageError(
                f"selector `{text}` names no run", "write RUN, KEY=VALUE[,...] or RUN@steps=A..B."
            )
        return Selector(text, run=base.strip(), steps=steps)
    pairs: dict[str, str] = {}
    for item in base.split(","):
        key, eq, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or not key or not value:
            raise UsageError(
                f"selector `{text}`: `{item}` is not KEY=VALUE",
                "write e.g. gpu=A100 or run=x,engine=vllm-0.18.1.",
            )
        pairs[key] = value
    run, gpu = pairs.pop(RUN_KEY, None), pairs.pop(GPU_KEY, None)
    return Selector(text, run=run, gpu=gpu, tags=pairs, steps=steps)


def _modifiers(mods: str, text: str) -> StepRange | None:
    key, eq, value = mods.partition("=")
    if key.strip() != "steps" or not eq:
        raise UsageError(
            f"selector `{text}`: unknown modifier `@{mods}`",
            "the only modifier is @steps=A..B (e.g. v1-final@steps=0..200).",
        )
    return parse_steps(value)


def resolve(store: Store, sel: Selector) -> Selection:
    """The store slice a selector names, or an error saying what exists."""
    names = store.run_names()
    if sel.run is not None and sel.run not in names:
        raise StoreError(
            f"selector `{sel.text}`: no run `{sel.run}` in the store {store} "
            f"(runs: {', '.join(names) or 'none'})",
            "list the runs with `mismatchctl runs`." + demo_store_hint(str(store)),
        )
    infos = [store.run(sel.run)] if sel.run else store.runs()
    _check_tags(sel, infos)
    if sel.gpu is not None:
        gpus = sorted({g for r in infos for g in r.gpus})
        if sel.gpu not in gpus:
            raise StoreError(
                f"selector `{sel.text}`: no rows with gpu={sel.gpu} (gpus: {', '.join(gpus) or 'none'})",
                "tag runs with --tag gpu=NAME at ingest, or pick one of the gpus listed.",
            )
    selection = select(
        store, [sel.run] if sel.run else None, sel.steps, gpu=sel.gpu, tags=sel.tags, label=sel.text
    )
    if not selection.tasks:
        raise empty_selection_error(selection)
    return selection


def _check_tags(sel: Selector, infos: list) -> None:
    for key, value in sel.tags.items():
        values = sorted({s.tags[key] for r in infos for s in r.sources if key in s.tags})
        if not values:
            known = sorted(
                {k for r in infos for s in r.sources for k in s.tags} - {RUN_KEY, GPU_KEY}
            )
            raise StoreError(
                f"selector `{sel.text}`: no source has a tag `{key}` "
                f"(tags: {', '.join([RUN_KEY, GPU_KEY, *known])})",
                "`mismatchctl runs` lists each run's tags.",
            )
        if value not in values:
            raise StoreError(
                f"selector `{sel.text}`: no data with {key}={value} (values: {', '.join(values)})",
                "`mismatchctl runs` lists each run's tags.",
            )
