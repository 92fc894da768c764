"""Fixed-edge 2D histograms (densities) for the report's figures.

Why fixed edges: like the r-histogram, a density with edges chosen up front merges by adding
counts, exactly and in any order, so a figure of billions of tokens costs one fixed-size array.

An ``Axis`` is a uniform grid in a *transformed* coordinate: ``linear`` (the value itself),
``log10`` (``log10(max(x, floor))``) or ``asinh`` (``asinh(x / scale)``: linear within ``scale``
of 0, logarithmic beyond, and symmetric, which suits the signed log ratio ``r``). Values outside
the grid are counted in the first or last bin, so every value is counted once; NaN is not counted.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

TRANSFORMS = ("linear", "log10", "asinh")


@dataclass(frozen=True)
class Axis:
    """``bins`` uniform bins on ``[lo, hi]`` in the transformed coordinate."""

    transform: str
    lo: float
    hi: float
    bins: int
    scale: float = 1.0  # asinh: the linear-to-log crossover; log10: the floor of x

    def __post_init__(self) -> None:
        if self.transform not in TRANSFORMS:
            raise ValueError(f"transform must be one of {TRANSFORMS} (found {self.transform!r})")
        if not (self.bins >= 1 and self.hi > self.lo and self.scale > 0):
            raise ValueError(f"need bins >= 1, hi > lo and scale > 0 (found {self})")

    @property
    def edges(self) -> np.ndarray:
        """Bin edges in the transformed coordinate (``bins + 1`` values)."""
        return np.linspace(self.lo, self.hi, self.bins + 1)

    def forward(self, x: np.ndarray | float) -> np.ndarray:
        """Raw values to the transformed coordinate the grid is uniform in."""
        x = np.asarray(x, dtype=np.float64)
        if self.transform == "log10":
            with np.errstate(invalid="ignore"):
                return np.log10(np.maximum(x, self.scale))
        if self.transform == "asinh":
            return np.arcsinh(x / self.scale)
        return x

    def inverse(self, u: np.ndarray | float) -> np.ndarray:
        """Transformed coordinate back to raw values (for tick labels)."""
        u = np.asarray(u, dtype=np.float64)
        if self.transform == "log10":
            return 10.0**u
        if self.transform == "asinh":
            return np.sinh(u) * self.scale
        return u

    def index(self, x: np.ndarray) -> np.ndarray:
        """Bin of every value (int64); out-of-range values go to the end bins, NaN gives -1."""
        u = self.forward(x)
        idx = np.floor((u - self.lo) * (self.bins / (self.hi - self.lo)))
        nan = np.isnan(idx)
        idx = np.clip(np.nan_to_num(idx, nan=0.0), 0, self.bins - 1).astype(np.int64)
        idx[nan] = -1
        return idx


@dataclass(frozen=True)
class Density2D:
    """Counts of (x, y) pairs per cell: ``counts[i, j]`` = pairs with x in bin i and y in bin j."""

    x: Axis
    y: Axis
    counts: np.ndarray  # int64, shape (x.bins, y.bins)

    @classmethod
    def empty(cls, x: Axis, y: Axis) -> Density2D:
        return cls(x, y, np.zeros((x.bins, y.bins), dtype=np.int64))

    @classmethod
    def of(cls, x: Axis, y: Axis, xs: np.ndarray, ys: np.ndarray) -> Density2D:
        """The density of the pairs ``(xs[i], ys[i])``; pairs with a NaN are left out."""
        xs, ys = np.asarray(xs), np.asarray(ys)
        if xs.shape != ys.shape or xs.ndim != 1:
            raise ValueError(f"xs and ys must be 1-D of one length (found {xs.shape}, {ys.shape})")
        i, j = x.index(xs), y.index(ys)
        ok = (i >= 0) & (j >= 0)
        flat = i[ok] * y.bins + j[ok]
        counts = np.bincount(flat, minlength=x.bins * y.bins).astype(np.int64)
        return cls(x, y, counts.reshape(x.bins, y.bins))

    @property
    def total(self) -> int:
        return int(self.counts.sum())

    def merge(self, other: Density2D) -> Density2D:
        """Exact: counts add. Both densities must share their axes."""
        if (self.x, self.y) != (other.x, other.y):
            raise ValueError("cannot merge densities with different axes")
        return Density2D(self.x, self.y, self.counts + other.counts)
