"""What the causes of a part of the run read of the localized check and of the steps: each run's
first code-path finding (the search's largest specific excess) and the share of the run's mass
the elevated steps explain."""

from __future__ import annotations

from typing import Any

from mismatchctl.analysis.diagnose.causes.hypothesis import part_share
from mismatchctl.analysis.diagnose.check import Check
from mismatchctl.analysis.diagnose.context import RunView
from mismatchctl.engines import plan as K


def first_findings(local: Check | None) -> list[dict[str, Any]]:
    """Each run's first code-path finding (rows of ``parts.finding_row``), largest share
    first."""
    if local is None:
        return []
    runs = local.evidence.get("runs", {}).values()
    firsts = [run["code_path_findings"][0] for run in runs if run.get("code_path_findings")]
    return sorted(firsts, key=lambda f: -(f.get("excess_share") or 0.0))


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
