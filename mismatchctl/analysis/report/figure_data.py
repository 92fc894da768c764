"""Figure data of the HTML report, computed by the engine in the same read as the metrics.

``FigureExtra`` is a ``PartExtra`` of the local engine: from each part it computes fixed-size
densities and a bottom-k sample of segments, which merge exactly (``stats.density``,
``stats.sample``), per run (a part belongs to one run), so that every distribution is drawn per
run and pooled only when asked. ``figure_data`` turns a merged state into what the figures draw.
Memory and page size are bounded whatever the number of tokens: the grids are fixed and the
sample holds at most ``k`` segments per turn kind and run.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from mismatchctl import schema as S
from mismatchctl.engines import plan as K
from mismatchctl.engines.keys import PartKeys
from mismatchctl.stats import TURN_KIND_LABELS
from mismatchctl.stats.density import Axis, Density2D
from mismatchctl.stats.sample import DEFAULT_K, SegmentSample
from mismatchctl.stats.segments import segments

# r crosses from linear to logarithmic display at 1e-3; |r| beyond 20 lands in the end rows.
R_SCALE = 1e-3
R_LIMIT = float(np.arcsinh(20.0 / R_SCALE))
# p_infer from 1e-12 to 1, 20 bins per decade; smaller probabilities land in the first column.
P_INFER_LOG = Axis("log10", -12.0, 0.0, 240, scale=1e-12)
LOG_RATIO = Axis("asinh", -R_LIMIT, R_LIMIT, 200, scale=R_SCALE)
PROB = Axis("linear", 0.0, 1.0, 100)
# segment log-ppl from 1e-4 to 100, 30 bins per decade
LOG_PPL = Axis("log10", -4.0, 2.0, 180, scale=1e-4)


@dataclass(frozen=True)
class FigureState:
    """The mergeable per-part state."""

    mismatch: Density2D  # log10 p_infer x asinh(r / R_SCALE), over tokens
    probs: Density2D  # p_infer x p_train, over tokens
    log_ppl: tuple[Density2D, ...]  # rollout x trainer log-ppl, over segments, per turn kind
    sample: SegmentSample

    def merge(self, other: FigureState) -> FigureState:
        return FigureState(
            self.mismatch.merge(other.mismatch),
            self.probs.merge(other.probs),
            tuple(a.merge(b) for a, b in zip(self.log_ppl, other.log_ppl, strict=True)),
            self.sample.merge(other.sample),
        )


class FigureExtra:
    """Computes a ``FigureState`` per part (the engine's ``PartExtra`` protocol)."""

    columns: tuple[str, ...] = (S.STEP, S.SEQ, S.TURN, S.ROLLOUT, S.TRAINER)

    def __init__(self, k: int = DEFAULT_K, seed: int = 0) -> None:
        self.k, self.seed = k, seed

    def compute(self, table: pa.Table, keys: PartKeys) -> dict[str, FigureState]:
        lr, lt = keys.column(S.ROLLOUT), keys.column(S.TRAINER)
        kind = keys.get(K.TURN_KIND).codes
        pr, pt = np.exp(lr), np.exp(lt)
        segs = segments(keys.column(S.SEQ), kind, keys.column(S.STEP), lr, lt)
        log_ppl = tuple(
            Density2D.of(
                LOG_PPL,
                LOG_PPL,
                segs.rollout_log_ppl[segs.kind == code],
                segs.trainer_log_ppl[segs.kind == code],
            )
            for code in range(len(TURN_KIND_LABELS))
        )
        state = FigureState(
            Density2D.of(P_INFER_LOG, LOG_RATIO, pr, lt - lr),
            Density2D.of(PROB, PROB, pr, pt),
            log_ppl,
            SegmentSample.of(keys.run, segs, self.k, self.seed),
        )
        return {keys.run: state}

    def merge(self, a: dict[str, FigureState], b: dict[str, FigureState]) -> dict[str, FigureState]:
        out = dict(a)
        for run, state in b.items():
            out[run] = out[run].merge(state) if run in out else state
        return out

    def empty(self) -> FigureState:
        return FigureState(
            Density2D.empty(P_INFER_LOG, LOG_RATIO),
            Density2D.empty(PROB, PROB),
            tuple(Density2D.empty(LOG_PPL, LOG_PPL) for _ in TURN_KIND_LABELS),
            SegmentSample.empty(self.k, self.seed),
        )


@dataclass(frozen=True)
class FigureData:
    """What the report's figures draw (besides the report's own groups)."""

    mismatch: Density2D
    probs: Density2D
    log_ppl: Density2D  # all segments
    log_ppl_by_kind: dict[str, Density2D]
    sample: SegmentSample
    kind_labels: tuple[str, ...] = TURN_KIND_LABELS

    def sample_kind(self, label: str) -> np.ndarray:
        """Indices of the sampled segments of one turn kind."""
        return np.flatnonzero(self.sample.kind == self.kind_labels.index(label))


def figure_data(states: dict[str, FigureState] | None, extra: FigureExtra) -> dict[str, FigureData]:
    """Per run, what its figures draw (no run when no part was read)."""
    return {run: _finalize(state) for run, state in (states or {}).items()}


def pooled(states: dict[str, FigureData]) -> FigureData:
    """The figure data of every run together (``--pool``)."""
    items = list(states.values())
    if not items:
        return _finalize(FigureExtra().empty())
    out = items[0]
    for other in items[1:]:
        out = FigureData(
            out.mismatch.merge(other.mismatch),
            out.probs.merge(other.probs),
            out.log_ppl.merge(other.log_ppl),
            {k: d.merge(other.log_ppl_by_kind[k]) for k, d in out.log_ppl_by_kind.items()},
            out.sample.merge(other.sample),
        )
    return out


def _finalize(state: FigureState) -> FigureData:
    combined = state.log_ppl[0]
    for density in state.log_ppl[1:]:
        combined = combined.merge(density)
    return FigureData(
        mismatch=state.mismatch,
        probs=state.probs,
        log_ppl=combined,
        log_ppl_by_kind=dict(zip(TURN_KIND_LABELS, state.log_ppl, strict=True)),
        sample=state.sample,
    )


# --- what each figure of the page draws (built by the views, drawn by render/figures.py) -------


@dataclass(frozen=True)
class BinBox:
    """A probability bin of the report: its label, edges and metrics (mean and p01-p99 of r)."""

    label: str
    lo: float
    hi: float
    metrics: dict


@dataclass(frozen=True)
class MismatchPlot:
    density: Density2D  # log10 p_infer x asinh(r)
    bins: list[BinBox]


@dataclass(frozen=True)
class ProbsPlot:
    density: Density2D  # p_infer x p_train
    pearson: float | None


@dataclass(frozen=True)
class LogPplPlot:
    data: FigureData
    kinds: dict[str, dict]  # turn kind -> its metrics (Pearson r, segments)


@dataclass
class StepLine:
    name: object  # the run or gpu
    steps: list
    values: list
    bands: list


@dataclass(frozen=True)
class StepsPlot:
    key: str  # "run" or "gpu"
    lines: list[StepLine]


@dataclass(frozen=True)
class CompareSide:
    label: str
    values: list  # vllm_kl per bin (None where the side has no token)
    sparse: list  # per bin: holds almost no token of the side (drawn faint)


@dataclass(frozen=True)
class CompareBins:
    labels: list[str]
    sides: list[CompareSide]


@dataclass(frozen=True)
class RatePlot:
    """Mean K3 per value of one dimension, target (and baseline): explain's finding plots."""

    dim: str
    labels: list[str]
    target: list  # per value, None where the side has no token
    baseline: list | None
    tokens: list[int]
    highlighted: list[str]  # the values the finding names
