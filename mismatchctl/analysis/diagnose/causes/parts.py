"""What the causes of a part of the run read of the localized check and of the steps: each run's
first code-path finding (the search's largest specific excess) and the share of the run's mass
the elevated steps explain."""

from __future__ import annotations

import itertools
from typing import Any

from mismatchctl.analysis.diagnose.as_baseline import region_of
from mismatchctl.analysis.diagnose.causes.hypothesis import part_share
from mismatchctl.analysis.diagnose.check import Check, evidence_of
from mismatchctl.analysis.diagnose.checks import localized
from mismatchctl.analysis.diagnose.context import Context, RunView
from mismatchctl.analysis.diagnose.contrasts import hotter
from mismatchctl.analysis.diagnose.levels import LEVEL
from mismatchctl.analysis.diagnose.parts import FindingRow, code_path
from mismatchctl.engines import plan as K
from mismatchctl.stats.localize.explain import contrast_within


def first_findings(local: Check | None) -> list[FindingRow]:
    """Each run's first code-path finding (rows of ``parts.finding_row``), largest share
    first."""
    e = evidence_of(local, localized.Evidence)
    runs = e.runs.values() if e is not None else []
    firsts = [run.code_path_findings[0] for run in runs if run.code_path_findings]
    return sorted(firsts, key=lambda f: -(f.excess_share or 0.0))


def on_gpus(where: dict[str, str]) -> bool:
    return K.GPU in where


def on_steps_only(where: dict[str, str]) -> bool:
    return set(where) <= {K.STEP, K.BIN}


def where_text(where: dict[str, str]) -> str:
    return ", ".join(f"{k} {v}" for k, v in where.items())


def steps_share(view: RunView) -> tuple[float | None, str]:
    """The share of the run's mass its elevated steps explain (their mass share times ``1 -
    1/ratio`` of the split), and the steps; None without a split."""
    sp, rates = view.split, view.rates
    if sp is None or not sp.elevated or len(rates) == 0:
        return None, ""
    weights = rates.tokens * rates.ratio
    total = float(weights.sum())
    if total <= 0:
        return None, ""
    mass = float(weights[sp.elevated].sum()) / total
    steps = ", ".join(rates.labels[i] for i in sp.elevated[:6])
    if len(sp.elevated) > 6:
        steps += f" and {len(sp.elevated) - 6} more"
    return part_share(mass, sp.ratio), steps


def steps_claim(view: RunView) -> float | None:
    """The share of the run's tokens its elevated steps hold; None without a split."""
    sp, rates = view.split, view.rates
    if sp is None or not sp.elevated or len(rates) == 0:
        return None
    total = float(rates.tokens.sum())
    return float(rates.tokens[sp.elevated].sum()) / total if total > 0 else None


def finding_region(ctx: Context, where: dict[str, str]) -> dict[str, list[int]] | None:
    """The cube codes (dimension -> search-level codes) of the localized finding at ``where``
    (a row of ``first_findings``), None when no run's search holds it."""
    for view in ctx.runs.values():
        if (region := region_of(view, where)) is not None:
            return region
    return None


def steps_region(view: RunView) -> dict[str, list[int]] | None:
    """The cube codes of a run's elevated steps (None without a split)."""
    if view.split is None or not view.split.elevated:
        return None
    return {K.STEP: [int(view.rates.codes[i]) for i in view.split.elevated]}


def path_on_one_gpu(ctx: Context) -> tuple[str, dict[str, Any]] | None:
    """A run's first code-path finding (not on a gpu) that one gpu's tokens hold: within the
    finding's part, that gpu against the others at the same token probabilities shows the
    localized pattern (a kernel path only one gpu generation takes). The gpu and the finding's
    row, or None."""
    for view in ctx.runs.values():
        spec = view.cube.spec
        if K.GPU not in {d.name for d in spec.dims}:
            continue
        paths = [f for f in view.local.findings if code_path(f) and K.GPU not in f.where]
        if not paths:
            continue
        f = paths[0]
        g = spec.index(K.GPU)
        named = _held_region(spec, f.region, g)
        if named is None:
            continue
        for code in range(spec.levels(g)):
            found = contrast_within(view.cube, named, K.GPU, [code], K.BIN, LEVEL)
            if hotter(found):
                held = {"where": f.where, "ratio": found, "region": named, "gpu": code}
                return spec.level_label(g, [code]), {**held, "view": view}
    return None


def hot_on_other_gpus(held: dict[str, Any]) -> bool:
    """Whether the part ``path_on_one_gpu`` found is hotter than the rest on the other gpus too,
    at the same token probabilities (the localized pattern): a fault of that part on every gpu
    beside a gpu hot everywhere, which is hotter within any part."""
    view, named, code = held["view"], held["region"], held["gpu"]
    spec = view.cube.spec
    others = [c for c in range(spec.levels(spec.index(K.GPU))) if c != code]
    dim, codes = next(iter(named.items()))
    within = {K.GPU: others, **{n: c for n, c in named.items() if n != dim}}
    return hotter(contrast_within(view.cube, within, dim, codes, K.BIN, LEVEL))


def _held_region(spec: Any, region: dict[int, Any], gpu: int) -> dict[str, list[int]] | None:
    """The finding's region on as many of its dimensions as a table of the cube holds beside
    the gpu and the probability bin (the cube keeps tables of a few dimensions only)."""
    bins = spec.index(K.BIN)
    dims = [d for d in region if d not in (gpu, bins)]
    for size in range(len(dims), 0, -1):
        for sub in itertools.combinations(dims, size):
            if spec.table_index(sorted({gpu, bins, *sub})) is not None:
                return {spec.dims[d].name: [int(c) for c in region[d]] for d in sub}
    return None
