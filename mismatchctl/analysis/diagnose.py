"""`diagnose`: every check of the five layers on one selection, from one read of the store.

The layers follow the lesson of the vLLM V0 -> V1 migration (BACKGROUND.md): rule out data
problems and *semantic* mismatch (the two sides computing different distributions), then locate
the *inference-path* mismatch (tokens, turns, hardware) and its *trajectory*, and only then ask
whether an *objective*-side correction is warranted. Thresholds: ``diagnose_thresholds``.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from mismatchctl.analysis import checks_curves as CC
from mismatchctl.analysis import checks_data as D
from mismatchctl.analysis import checks_path as P
from mismatchctl.analysis import checks_trajectory as R
from mismatchctl.analysis import diagnose_thresholds as T
from mismatchctl.analysis.diagnose_base import (
    DATA,
    FAIL,
    LAYERS,
    NA,
    OBJECTIVE,
    OK,
    PATH,
    SEMANTIC,
    WARN,
    Check,
    Context,
    fmt,
    pct,
    step_series,
    worst,
)
from mismatchctl.analysis.diagnose_extra import DiagnoseExtra
from mismatchctl.analysis.report import Report, report_on
from mismatchctl.analysis.selection import parse_selector, reread, resolve
from mismatchctl.analysis.whatif import SEQ_CELLS, WhatifExtra
from mismatchctl.engines.choice import LOCAL_ENGINE, Engine
from mismatchctl.parallel import DEFAULT_WORKERS
from mismatchctl.stats import registry as M
from mismatchctl.stats import whatif as WI
from mismatchctl.store import Store

CHECKS: list[Callable[[Context], Check]] = [
    D.alignment,
    D.token_ids,
    D.sentinels,
    D.empty_sequences,
    D.trailing_padding,
    D.duplicates,
    D.offset,
    D.temperature,
    D.top_p,
    P.low_probability,
    P.tool_responses,
    P.hardware,
    R.spikes,
    R.trend,
    R.spiral,
    R.severe_batches,
    R.staleness,
    CC.coincident_spikes,
    CC.rise_before_drop,
]
SUGGESTED = WI.Method("seq-mis", 2.0)  # the study's best correction (BACKGROUND.md)


@dataclass
class Diagnosis:
    report: Report
    checks: list[Check]

    @property
    def verdict(self) -> str:
        return worst([c.verdict for c in self.checks])

    @property
    def failed(self) -> bool:
        return any(c.verdict == FAIL for c in self.checks)

    def layer(self, name: str) -> list[Check]:
        return [c for c in self.checks if c.layer == name]

    @property
    def label(self) -> str:
        sel = self.report.selection
        return sel.label or ", ".join(sel.names)

    def counts(self) -> dict[str, int]:
        verdicts = [c.verdict for c in self.checks]
        return {v: verdicts.count(v) for v in (FAIL, WARN, OK, NA)}

    def top_finding(self) -> str:
        """The first failing check's finding, else the first warning's, else "no problem"."""
        for verdict in (FAIL, WARN):
            for c in self.checks:
                if c.verdict == verdict:
                    return f"{c.name}: {c.finding}"
        return "no check fails or warns"

    def sections(self, brief: bool = False) -> list[Any]:
        """The diagnosis as sections; ``brief``: the verdict and what fails or warns only."""
        from mismatchctl.analysis.diagnose_view import diagnosis_sections

        return diagnosis_sections(self, brief)

    def to_dict(self) -> dict[str, Any]:
        """The report's JSON plus a ``diagnosis`` section."""
        return {**self.report.to_dict(), "diagnosis": self.section_dict()}

    def section_dict(self) -> dict[str, Any]:
        return {
            "selection": self.report.selection.label,
            "verdict": self.verdict,
            "counts": self.counts(),
            "checks": [asdict(c) for c in self.checks],
        }

    def to_polars(self) -> Any:
        """One row per check: layer, name, title, verdict, finding, next."""
        import polars as pl

        keys = ("layer", "name", "title", "verdict", "finding", "next")
        return pl.DataFrame([{k: getattr(c, k) for k in keys} for c in self.checks])


def build_diagnosis(
    store: Store,
    selector: str,
    *,
    workers: int = DEFAULT_WORKERS,
    on_part: Callable[[int], None] | None = None,
    engine: Engine = LOCAL_ENGINE,
) -> Diagnosis:
    def read() -> tuple[Report, list]:
        selection = resolve(store, parse_selector(selector))
        extras = [DiagnoseExtra(selection), WhatifExtra([SUGGESTED])]
        report = report_on(
            selection, by_gpu=True, workers=workers, on_part=on_part, extras=extras, engine=engine
        )
        return report, report.extra_states

    report, (state, cells) = reread(read)
    ctx = Context(report, state, _whole(cells), selector, step_series(report))
    for check in CHECKS:
        result = check(ctx)
        ctx.done[result.name] = result
    checks = list(ctx.done.values())
    checks.append(objective(ctx, checks))
    return Diagnosis(report, checks)


def _whole(cells: dict | None) -> dict | None:
    """The seq-mis what-if of the whole selection, from the cells of the extra."""
    if not cells:
        return None
    total = None
    for key, state in cells.items():
        if key[0] == SEQ_CELLS:
            total = state if total is None else WI.merge(total, state)
    return None if total is None else WI.finalize(total[0])


def objective(ctx: Context, checks: list[Check]) -> Check:
    """Is an objective-side correction warranted, given what the other layers found?"""
    title = "Is a correction warranted?"
    upstream = [c for c in checks if c.layer in (DATA, SEMANTIC) and c.verdict == FAIL]
    causes = [c for c in checks if c.layer == PATH and c.verdict in (WARN, FAIL)]
    severe = next(c for c in checks if c.name == "severe_batches")
    shares = [e["severe_share"] for e in severe.evidence.get("runs", {}).values()]
    severe_share = max(shares, default=0.0)
    vk = ctx.vllm_kl or 0.0
    evidence = {M.VLLM_KL: vk, "severe_share_max": severe_share, "seq_mis_2": ctx.seq_mis}
    if upstream:
        names = ", ".join(c.name for c in upstream)
        return Check(
            OBJECTIVE, "objective", title, WARN,
            f"not yet: {names} failed; a correction would hide a data or semantic problem",
            evidence, "fix the data and semantic problems first, then diagnose again",
        )  # fmt: skip
    needed = vk > T.MEDIUM_MAX or severe_share >= T.SEVERE_FAIL_SHARE
    if not needed:
        word = "optional" if vk > T.LOW_MAX else "not needed"
        finding = (
            f"{word}: vllm_kl {fmt(vk)}, at most {pct(severe_share)} of a run's batches severe"
        )
        names = ", ".join(c.name for c in causes)
        advice = f"the inference-path findings still deserve a look: {names}" if causes else None
        return Check(OBJECTIVE, "objective", title, OK, finding, evidence, advice)
    return Check(
        OBJECTIVE, "objective", title, WARN, _needed_finding(ctx, vk, severe_share), evidence,
        _advice(ctx, causes, severe_share),
    )  # fmt: skip


def _needed_finding(ctx: Context, vk: float, severe_share: float) -> str:
    text = (
        f"yes: vllm_kl {fmt(vk)}, up to {pct(severe_share)} of a run's batches severe, "
        "with no data or semantic problem found"
    )
    if ctx.seq_mis is not None:
        text += (
            f"; seq-mis at C = 2 would reject {pct(ctx.seq_mis[M.SEQUENCE_FRACTION])} of the "
            f"sequences (ESS {fmt(ctx.seq_mis[M.ESS])})"
        )
    return text


def _advice(ctx: Context, causes: list[Check], severe_share: float) -> str:
    label = shlex.quote(ctx.label)
    text = f"try `mismatchctl whatif {label} --method seq-mis --threshold 2`"
    if 0 < severe_share < T.SEVERE_FAIL_SHARE * 3:
        text += f", or a batch filter: `mismatchctl whatif {label} --method batch-filter:0.1`"
    if causes:
        text += (
            "; removing the cause found first is better (" + ", ".join(c.name for c in causes) + ")"
        )
    return text


def layers(d: Diagnosis) -> list[tuple[str, list[Check]]]:
    """The checks grouped by layer, in layer order."""
    return [(name, d.layer(name)) for name in LAYERS if d.layer(name)]


__all__ = ["Diagnosis", "build_diagnosis", "layers"]
