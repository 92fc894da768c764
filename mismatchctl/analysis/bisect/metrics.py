"""The re-scored logprobs against both sides: per setting, K3 = mean(exp(d) - 1 - d) and mean d
with d = re-scored - side, over the sample's model tokens (each sequence weighted by its
stratum's size over the sequences drawn of it: ``sample.py``), with 95% intervals from a
bootstrap over whole sequences, within each stratum (seeded; the same resamples for every
setting, so that settings compare paired); and the share of the sample's mismatch a setting accounts for,
1 - K3(setting vs rollout) / K3(start vs rollout)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mismatchctl.stats.per_token import k3

RESAMPLES = 1000
LEVEL = 0.95


@dataclass
class Numbers:
    """One setting's numbers over a set of tokens; ``*_ci``: the 95% interval."""

    tokens: int
    k3_rollout: float
    k3_rollout_ci: tuple[float, float]
    mean_d_rollout: float
    k3_trainer: float
    k3_trainer_ci: tuple[float, float]
    mean_d_trainer: float
    share: float | None = None  # of the mismatch accounted for (None for the start)
    share_ci: tuple[float, float] | None = None


class Resamples:
    """Sequence-bootstrap weights: how often each sequence is drawn in each resample (each
    stratum resampled apart, as many as it has), times the sequence's weight."""

    def __init__(self, sequences: int, seed: int, strata: np.ndarray | None = None,
                 weight: np.ndarray | None = None) -> None:  # fmt: skip
        rng = np.random.default_rng(seed)
        strata = np.zeros(sequences, dtype=np.int64) if strata is None else strata
        self.weights = np.zeros((RESAMPLES, sequences))
        for k in np.unique(strata):
            idx = np.flatnonzero(strata == k)
            self.weights[:, idx] = rng.multinomial(len(idx), np.full(len(idx), 1 / len(idx)),
                                                   size=RESAMPLES)  # fmt: skip
        self.weight = np.ones(sequences) if weight is None else weight
        self.weights *= self.weight

    def interval(self, sums: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(point, replicates) of sum / count, per sequence sums given."""
        with np.errstate(invalid="ignore", divide="ignore"):
            reps = (self.weights @ sums) / (self.weights @ counts)
            return (self.weight @ sums) / (self.weight @ counts), reps


def per_sequence(values: np.ndarray, owner: np.ndarray, n: int) -> np.ndarray:
    return np.bincount(owner, weights=values, minlength=n)


def _ci(reps: np.ndarray) -> tuple[float, float]:
    lo, hi = np.nanquantile(reps, [(1 - LEVEL) / 2, (1 + LEVEL) / 2])
    return float(lo), float(hi)


def _mean(d: np.ndarray, w: np.ndarray) -> float:
    return float(np.average(d, weights=w)) if len(d) else float("nan")


@dataclass
class Sides:
    """The sample's tokens: both sides' logprobs, the sequence of each (0..n-1) and a mask of
    the tokens counted (a turn kind, or all)."""

    rollout: np.ndarray
    trainer: np.ndarray
    owner: np.ndarray
    sequences: int


def numbers(x: np.ndarray, start: np.ndarray, sides: Sides, rs: Resamples,
            keep: np.ndarray | None = None) -> Numbers:  # fmt: skip
    """The numbers of re-scored logprobs ``x`` (``start``: the start setting's), over the
    tokens ``keep`` (all by default)."""
    keep = np.ones(len(x), dtype=bool) if keep is None else keep
    owner, n = sides.owner[keep], sides.sequences
    count = per_sequence(np.ones(int(keep.sum())), owner, n)
    d_roll, d_train = x[keep] - sides.rollout[keep], x[keep] - sides.trainer[keep]
    w = rs.weight[owner]
    k3_roll, reps_roll = rs.interval(per_sequence(k3(d_roll), owner, n), count)
    k3_train, reps_train = rs.interval(per_sequence(k3(d_train), owner, n), count)
    out = Numbers(
        tokens=int(keep.sum()),
        k3_rollout=float(k3_roll), k3_rollout_ci=_ci(reps_roll),
        mean_d_rollout=_mean(d_roll, w),
        k3_trainer=float(k3_train), k3_trainer_ci=_ci(reps_train),
        mean_d_trainer=_mean(d_train, w),
    )  # fmt: skip
    if x is not start:
        base, reps_base = rs.interval(
            per_sequence(k3(start[keep] - sides.rollout[keep]), owner, n), count
        )
        if base > 0:
            out.share = float(1 - k3_roll / base)
            with np.errstate(invalid="ignore", divide="ignore"):
                out.share_ci = _ci(1 - reps_roll / reps_base)
    return out


def short(x: float) -> str:
    """A number as the verdict and the tables write it: two significant digits."""
    return f"{x:.2g}"


def share_text(n: Numbers) -> str:
    """The share of the mismatch a setting accounts for, with its interval."""
    if n.share is None:
        return "-"
    ci = "" if n.share_ci is None else f" [{n.share_ci[0]:.0%}, {n.share_ci[1]:.0%}]"
    return f"{n.share:.0%}{ci}"
