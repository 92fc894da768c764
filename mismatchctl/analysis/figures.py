"""Figure data of the HTML report, computed by the engine in the same read as the metrics.

``FigureExtra`` is a ``PartExtra`` of the local engine: from each part it computes fixed-size
densities and a bottom-k sample of segments, which merge exactly (``stats.density``,
``stats.sample``). ``figure_data`` turns the merged state into what the figures draw. Memory and
page size are bounded whatever the number of tokens: the grids are fixed and the sample holds at
most ``k`` segments per turn kind.
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

    def compute(self, table: pa.Table, keys: PartKeys) -> FigureState:
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
        return FigureState(
            Density2D.of(P_INFER_LOG, LOG_RATIO, pr, lt - lr),
            Density2D.of(PROB, PROB, pr, pt),
            log_ppl,
            SegmentSample.of(keys.run, segs, self.k, self.seed),
        )

    def merge(self, a: FigureState, b: FigureState) -> FigureState:
        return a.merge(b)

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


def figure_data(state: FigureState | None, extra: FigureExtra) -> FigureData:
    """Finalize the merged state (None when no part was read: empty figures)."""
    state = state if state is not None else extra.empty()
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
