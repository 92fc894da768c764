"""Mix versus rate: the change of ``vllm_kl`` between a baseline B and a target T along one
dimension, split exactly (shift-share; Kitagawa / Oaxaca-Blinder):

    k_T - k_B = sum_c (s_T,c - s_B,c) k_B,c          mix: tokens moved between cells
              + sum_c s_B,c (k_T,c - k_B,c)          rate: the cells themselves changed
              + sum_c (s_T,c - s_B,c)(k_T,c - k_B,c) interaction

with token shares ``s`` and per-cell mean K3 ``k``. The identity holds for any value given to
the rate of a side without tokens in a cell (its share is 0); the convention here: a cell only
the target has gets ``k_B,c = k_T,c`` (it is all mix: new tokens, no rate change claimed), a cell
only the baseline has gets ``k_T,c = k_B,c`` (its tokens left: mix again).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from mismatchctl.stats.cube.cube import Cube, Field
from mismatchctl.stats.cube.spec import codes_label


@dataclass
class Decomposition:
    """The split of ``total = k_T - k_B`` along one dimension; ``cells``: each value's own
    three terms (label, mix, rate, interaction), largest ``|mix| + |rate| + |interaction|``
    first."""

    dim: str
    total: float
    mix: float
    rate: float
    interaction: float
    cells: list[tuple[str, float, float, float]] = field(default_factory=list)


def shift_share(
    n_t: np.ndarray, a_t: np.ndarray, n_b: np.ndarray, a_b: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-cell mix, rate and interaction terms from the cells' tokens and K3 sums."""
    n_t, a_t, n_b, a_b = (np.asarray(x, np.float64) for x in (n_t, a_t, n_b, a_b))
    s_t, s_b = n_t / n_t.sum(), n_b / n_b.sum()
    with np.errstate(divide="ignore", invalid="ignore"):
        k_t = np.where(n_t > 0, a_t / n_t, np.nan)
        k_b = np.where(n_b > 0, a_b / n_b, np.nan)
    k_b = np.where(n_b > 0, k_b, np.where(n_t > 0, k_t, 0.0))
    k_t = np.where(n_t > 0, k_t, k_b)
    d_s, d_k = s_t - s_b, k_t - k_b
    return d_s * k_b, s_b * d_k, d_s * d_k


def decompose(target: Cube, baseline: Cube, dims: list[str] | None = None) -> list[Decomposition]:
    """The decomposition along every dimension (or the named ones), each on its exact 1-d table
    (a blocked dimension's exact values)."""
    if target.spec != baseline.spec:
        raise ValueError("target and baseline cubes must have the same dimensions")
    if target.tokens == 0 or baseline.tokens == 0:
        return []
    spec = target.spec
    total = target.k3_sum / target.tokens - baseline.k3_sum / baseline.tokens
    out = []
    for name in dims if dims is not None else [d.name for d in spec.dims]:
        t, b = target.table([name], exact=True), baseline.table([name], exact=True)
        mix, rate, inter = shift_share(
            t[:, Field.TOKENS], t[:, Field.K3], b[:, Field.TOKENS], b[:, Field.K3]
        )
        dim = spec.dims[spec.index(name)]
        order = np.argsort(-(np.abs(mix) + np.abs(rate) + np.abs(inter)), kind="stable")
        present = (t[:, Field.TOKENS] > 0) | (b[:, Field.TOKENS] > 0)
        cells = [
            (codes_label(dim, [int(c)]), float(mix[c]), float(rate[c]), float(inter[c]))
            for c in order
            if present[c]
        ]
        out.append(
            Decomposition(
                name, total, float(mix.sum()), float(rate.sum()), float(inter.sum()), cells
            )
        )
    return out
