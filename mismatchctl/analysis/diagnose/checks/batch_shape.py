"""Batch-shape dependence: sequences of the same steps computed in batches of different sizes,
with different mismatch at the same token probabilities: a kernel that is not batch-invariant
(``stats/batch_shape.py``)."""

from __future__ import annotations

from dataclasses import dataclass

from mismatchctl.analysis.diagnose.check import FAIL, NA, OK, PATH, WARN, Check, CheckEvidence
from mismatchctl.analysis.diagnose.context import CheckModule, Context
from mismatchctl.analysis.diagnose.text import fmt
from mismatchctl.stats.batch_shape import BatchShape, batch_shape

NAME = "batch_shape"
LAYER = PATH
TITLE = "Mismatch depends on the batch size"
ORDER = 185
READS: tuple[CheckModule, ...] = ()

ADVICE = (
    "sequences of the same steps differ in mismatch by the size of the batch they were "
    "computed in: a kernel whose reduction depends on the batch shape (split-K GEMMs, "
    "split-KV attention, a batch-size heuristic); use batch-invariant kernels (vLLM's "
    "VLLM_BATCH_INVARIANT, SGLang's deterministic inference) or the same micro-batch sizes on "
    "both sides; `mismatchctl report RUN --by batch_size,bin` shows where"
)


@dataclass(frozen=True)
class Thresholds:
    SPREAD_WARN: float = 1.5
    """Warn when the interval of the spread (the largest rate ratio of a batch size over the
    smallest, ``stats/batch_shape.py``) lies above 1.5x; calibrated with batch labels laid
    over the calibration corpus' healthy and improved runs (their engine decodes a turn's
    requests together, so any labelling is the null: each step's responses in dump order cut
    into waves of 12 and 4, of 8, 8 and 4, and in halves: spreads 1.00-1.49x, interval low
    ends at most 1.07x) and on the corpus' runs decoded in waves of 12 and 4 with each
    response's batch labelled (docs/diagnose.md): the healthy engine's ``h-waves`` 1.02x
    (0.89-1.17) and ``h-waves-b`` 1.06x (0.93-1.26), the batch-variant split-K engine's
    ``cp-batchvar-waves-32`` 7.9x (6.0-10.6) and ``cp-batchvar-waves-48`` 16x (8.4-35.3)."""

    SPREAD_FAIL: float = 3.0
    """Fail when the interval's low end is above 3x: one batch size's tokens carry three times
    the mismatch of another's at the same probabilities."""


T = Thresholds()


@dataclass(frozen=True)
class Evidence(CheckEvidence):
    runs: dict[str, BatchShape]
    """Each run's test (the runs whose dumps give batch sizes)."""


def run(ctx: Context) -> Check | None:
    found = {
        name: res
        for name, sums in sorted(ctx.state.sequences.runs.items())
        if (res := batch_shape(sums)) is not None
    }
    if not found:
        return Check(
            LAYER, NAME, TITLE, NA,
            "no batch sizes in the dumps (a batch_id or batch_size column per response)",
            None, "write each response's batch_id (and batch_size) in the dumps, or map the "
            "columns with --map batch_id=COL, to check batch-shape dependence",
        )  # fmt: skip
    evidence = Evidence(found)
    judged = {name: _verdict(res) for name, res in found.items()}
    order = (FAIL, WARN, OK, NA)
    name = min(judged, key=lambda n: order.index(judged[n]))
    res, verdict = found[name], judged[name]
    prefix = f"{name}: " if len(found) > 1 else ""
    return Check(
        LAYER, NAME, TITLE, verdict, prefix + _sentence(res), evidence,
        ADVICE if verdict in (WARN, FAIL) else None,
    )  # fmt: skip


def _verdict(res: BatchShape) -> str:
    if res.spread is None:
        return NA
    low = res.interval[0] if res.interval else None
    if low is not None and low > T.SPREAD_FAIL:
        return FAIL
    if low is not None and low > T.SPREAD_WARN:
        return WARN
    return OK


def _sentence(res: BatchShape) -> str:
    if res.spread is None:
        return (
            f"fewer than two batch sizes with enough tokens in shared steps ({res.steps} steps "
            "hold two sizes or more)"
        )
    lo, hi = res.interval or (None, None)
    sizes = ", ".join(f"{s.batch_size}: x{fmt(s.ratio)}" for s in res.sizes)
    return (
        f"at the same steps and token probabilities, batch size {res.high}'s tokens carry "
        f"x{fmt(res.spread)} the mismatch of batch size {res.low}'s (95% interval {fmt(lo)}-"
        f"{fmt(hi)}; rate ratio per size {sizes}; {res.steps} steps)"
    )
