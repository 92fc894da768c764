"""`compare` of two sides that hold the same data: nothing differs, and that is the answer (two
copies of a run, a run and a selector of its rows), not an error.

The same data means the same model tokens with the same logprobs, known one of two ways: both
selectors read the same parts of the store with the same row filter (known before reading), or
both sides hold the same sequences, bit for bit: per sequence the token count and the sums of
both logprobs, of K3 and of |r| (``stats.bootstrap.SeqStats.same``; what two ingests of the
same files give). With MoE routes, their routing must be the same too; two sides whose logprobs
are the same but whose routes differ are compared (``compare.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mismatchctl.analysis.report.report import Report
from mismatchctl.engines.plan import Selection
from mismatchctl.stats import registry as M

SAME_PARTS = "both sides read the same parts of the store with the same row filter"
SAME_SEQUENCES = (
    "both sides hold the same sequences, bit for bit: per sequence the same token count and the "
    "same sums of both logprobs, K3 and |r|"
)
# the numbers an identical comparison still states, once for both sides
SHOWN = (M.TOKENS, M.SEQUENCES, M.VLLM_KL, M.ABS_LOG_RATIO_MEAN, M.PROB_PEARSON)


@dataclass(frozen=True)
class Identical:
    """Two sides that hold the same data: no difference, said once with what both hold."""

    a: Selection
    b: Selection
    report: Report  # side A's (side B's is the same)
    basis: str  # how the sameness is known: SAME_PARTS or SAME_SEQUENCES

    @property
    def metrics(self) -> dict[str, Any]:
        whole = self.report.whole()
        return {m: (whole.metrics.get(m) if whole else None) for m in SHOWN}

    def to_dict(self) -> dict[str, Any]:
        """The report's envelope, the runs of both sides, and ``comparison.identical``."""
        doc = self.report.to_dict()
        out = {k: doc[k] for k in ("schema_version", "tool", "aggregation", "bin_edges")}
        out["runs"] = {**{r.name: {"tags": r.tags} for r in self.b.runs}, **doc["runs"]}
        out["comparison"] = {
            "a": self.a.label,
            "b": self.b.label,
            "identical": True,
            "basis": self.basis,
            "metrics": {str(m): v for m, v in self.metrics.items()},
        }
        return out

    def to_polars(self) -> Any:
        """One row per metric: its value on both sides."""
        import polars as pl

        rows = [{"metric": str(m), "a": v, "b": v} for m, v in self.metrics.items()]
        return pl.DataFrame(rows, infer_schema_length=None)


def same_routing(a: Report, b: Report) -> bool:
    """Both sides' MoE routing the same (or neither side with routes); compared as text, so
    that a metric without a value (NaN) equals itself."""
    return repr([r.to_dict() for r in a.routing.values()]) == repr(
        [r.to_dict() for r in b.routing.values()]
    )
