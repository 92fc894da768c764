"""What the checks of `diagnose` read: the report, the extra state of the report's read, per-run
step series and cubes, the baseline, and the results of the checks they declare they read."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from mismatchctl.analysis.diagnose.check import Check, Every
from mismatchctl.analysis.diagnose.extra import DiagnoseState
from mismatchctl.analysis.diagnose.levels import LEVEL
from mismatchctl.analysis.explain import NONE_LABEL
from mismatchctl.analysis.report.report import Report
from mismatchctl.analysis.token_classes import ClassSummary
from mismatchctl.analysis.turn_edges import EdgeState
from mismatchctl.engines import plan as K
from mismatchctl.stats import registry as M
from mismatchctl.stats.cube.cube import Cube, merge_all
from mismatchctl.stats.hot_sequences import HotSequenceState
from mismatchctl.stats.localize.explain import contrast
from mismatchctl.stats.localize.result import Explanation
from mismatchctl.stats.localize.tables import SideTables
from mismatchctl.stats.sign_coherence import SignCoherence
from mismatchctl.stats.step_regimes import StepRates, StepSplit, StepTrend


@dataclass
class RunSteps:
    """One run's batches in step order (not `sections.StepSeries`, the section that draws steps)."""

    steps: np.ndarray
    vllm_kl: np.ndarray  # NaN where not computable
    trainer_ppl: np.ndarray
    bands: list[str | None]


@dataclass
class RunView:
    """One run of the selection as the relative checks see it: its K3 cube, its steps' rates,
    their split into two groups and their trend (``stats/step_regimes.py``), and where its
    mismatch concentrates (``explain`` without a baseline); ``tables``: the cube's search
    tables, made once for all of them and the checks' contrasts."""

    name: str
    tags: dict[str, str]
    cube: Cube
    rates: StepRates
    split: StepSplit | None
    trend: StepTrend | None
    local: Explanation
    tables: SideTables = field(repr=False, compare=False)


@dataclass
class BaselineView:
    """The selection against ``--baseline``: the explanation of its excess (``explain``), the
    gpus the baseline ran on, its cube, and its routing metrics when it has MoE routes
    (``stats/routing_sums.py``'s, its runs merged)."""

    label: str
    explanation: Explanation
    gpus: list[str] = field(default_factory=list)
    cube: Cube | None = None  # the baseline's own cube (same spec): contrasts of a part
    routing: dict[str, float | int | None] | None = None
    signs: SignCoherence | None = None  # its responses' own lean (``baseline_signs.py``)
    sequences: HotSequenceState | None = None  # its per-sequence sums, its runs joined


class CheckModule(Protocol):
    """A module of ``checks/``: one check. ``ORDER``: where the diagnosis (and its JSON) lists
    it, ascending, and which of two checks of a layer ready together runs first; ``READS``: the
    check modules whose results it reads (``Context.result``), or ``Every`` check of an earlier
    layer; ``run``: its result, or None when the check does not apply to the data at all (no MoE
    routes: no routing check)."""

    NAME: str
    LAYER: str
    TITLE: str
    ORDER: int
    READS: tuple[CheckModule | Every, ...]
    run: Callable[[Context], Check | None]


class UndeclaredRead(LookupError):
    """A check read the result of a check it does not declare in its ``READS``."""


@dataclass
class Context:
    """What a check reads; ``run`` runs one, ``result`` and ``results`` give it the results of
    the checks it declares in its ``READS``."""

    report: Report
    state: DiagnoseState
    seq_mis: dict[str, Any] | None  # whatif metrics of seq-mis at C = 2 on the whole selection
    label: str  # the selector, for commands suggested in the advice
    series: dict[str, RunSteps] = field(default_factory=dict)
    runs: dict[str, RunView] = field(default_factory=dict)
    baseline: BaselineView | None = None
    edges: EdgeState | None = None  # the turn-edge cubes (checks/turn_edges, checks/turn_ends)
    classes: ClassSummary | None = None  # the worst tokens' classes (checks/token_classes)
    classes_note: str = ""  # why there are none (no tokenizer...)
    _done: dict[str, Check] = field(default_factory=dict, repr=False)  # results run, by name
    _reads: tuple[CheckModule, ...] = field(default=(), repr=False)  # what the running one reads
    _reading: str = field(default="", repr=False)  # the running check's name

    def run(self, check: CheckModule, reads: tuple[CheckModule, ...]) -> Check | None:
        """Run one check, which may read the results of ``reads`` (its ``READS``, spelled out
        by the registry), and keep its result; None when it does not apply."""
        self._reads, self._reading = reads, check.NAME
        try:
            found = check.run(self)
        finally:
            self._reads, self._reading = (), ""
        if found is not None:
            self._done[check.NAME] = found
        return found

    def result(self, check: CheckModule | str) -> Check | None:
        """The result of a check (its module, or its ``NAME``) that the running check reads;
        None when that check does not apply (the routing checks without routes). Reading a check
        not declared in ``READS`` is refused: the registry orders the run by what is declared."""
        name = check if isinstance(check, str) else check.NAME
        if name not in {c.NAME for c in self._reads}:
            reader = self._reading or "no check"
            raise UndeclaredRead(f"{reader} reads the {name} check without declaring it (READS)")
        return self._done.get(name)

    def results(self, *layers: str) -> list[Check]:
        """The results of the checks of these layers that the running check reads, in the
        order the diagnosis lists them."""
        found = [self._done.get(c.NAME) for c in self._reads]
        return [c for c in found if c is not None and c.layer in layers]

    @property
    def vllm_kl(self) -> float | None:
        whole = self.report.whole()
        return None if whole is None else whole.metrics.get(M.VLLM_KL)

    @functools.cached_property
    def cube(self) -> Cube | None:
        """The K3 cube of the whole selection (the runs' cubes merged)."""
        cubes = [v.cube for v in self.runs.values()]
        if len(cubes) == 1:  # one run: its own cube (read only here), not a copy of its state
            return cubes[0]
        return merge_all(cubes, cubes[0].spec) if cubes else None

    @functools.cached_property
    def tables(self) -> SideTables | None:
        """The search tables of :attr:`cube` (one run's: its view's), made once for every
        check's contrast (each made its own: 35 ms each on a cube of 1,000 steps)."""
        if len(self.runs) == 1:
            return next(iter(self.runs.values())).tables
        return None if self.cube is None else SideTables(self.cube)

    def contrast(
        self, region: dict[str, list[int]], stratum: str | None = K.BIN
    ) -> tuple[float, tuple[float, float]] | None:
        """A region of the selection (dimension -> codes) against the rest: its rate ratio at
        the same token mix over ``stratum`` and its interval (``stats.localize.contrast``)."""
        if self.cube is None or self.cube.tokens == 0:
            return None
        return contrast(self.cube, region, stratum, LEVEL, tables=self.tables)

    def gpu_code(self, gpu: str) -> int:
        """The cube's code of a gpu label."""
        spec = self.cube.spec if self.cube is not None else None
        if spec is None:
            raise ValueError("no cube")
        return spec.dims[spec.index(K.GPU)].labels.index(gpu)


def baseline_on_other_gpus(ctx: Context) -> tuple[list[str], list[str]] | None:
    """The selection's gpus and the baseline's, when they share none: a uniform excess between
    gpu generations is their numerics as much as a policy (BACKGROUND.md: the same code ran at
    vllm_kl 5e-4..1e-3 on H20 and 1e-2..1 on A100)."""
    mine = cube_gpus(ctx.cube, ctx.tables)
    theirs = ctx.baseline.gpus if ctx.baseline is not None else []
    if not mine or not theirs or set(mine) & set(theirs):
        return None
    return mine, theirs


def cube_gpus(cube: Cube | None, tables: SideTables | None = None) -> list[str]:
    """The gpu labels holding tokens in a cube (none without a gpu dimension); ``tables``: the
    cube's, when the caller has them. Tokens without a gpu label name no gpu: a baseline whose
    dumps have no gpu column ran on gpus unknown, not on other gpus than the run's (the
    Llama family's four-device run over a one-device baseline was named "another gpu
    generation" before)."""
    if cube is None or K.GPU not in {d.name for d in cube.spec.dims}:
        return []
    d = cube.spec.index(K.GPU)
    tokens = (SideTables(cube) if tables is None else tables).n[(d,)]
    labels = [cube.spec.level_label(d, [int(c)]) for c in np.flatnonzero(tokens > 0)]
    return [g for g in labels if g != NONE_LABEL]


def step_series(report: Report) -> dict[str, RunSteps]:
    rows: dict[str, list[tuple[int, float, float, str | None]]] = {}
    for g in report.split(K.RUN, K.STEP):
        m = g.metrics
        rows.setdefault(g.by[K.RUN], []).append(
            (g.by[K.STEP], _nan(m.get(M.VLLM_KL)), _nan(m.get(M.TRAINER_PPL)), g.band)
        )
    out = {}
    for run, items in rows.items():
        items.sort(key=lambda t: t[0])
        out[run] = RunSteps(
            np.array([t[0] for t in items], dtype=np.float64),
            np.array([t[1] for t in items]),
            np.array([t[2] for t in items]),
            [t[3] for t in items],
        )
    return out


def _nan(x: float | None) -> float:
    return math.nan if x is None else float(x)
