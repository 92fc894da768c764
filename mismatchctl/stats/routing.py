"""Routing metrics (MoE) as a mergeable partial: sums over token rows, finalised into metrics.

Inputs per model token (``docs/store.md``, routing rows): the bitmask of layers whose top-k sets
agree on its own row (``compared`` False: not recorded on both sides), its per-layer overlap,
the comparison of the row that produced its logprob (-1 unpaired, 0 same, 1 flipped), whether a
compared row before its own differs, and its K3 ``expm1(r) - r`` with ``r = trainer - rollout``.
Exact definitions: docs/metrics.md, "Routing".
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

ROUTING_TOKEN_AGREEMENT = "routing_token_agreement"
ROUTING_LAYER_AGREEMENT = "routing_layer_agreement"
ROUTING_OVERLAP_MEAN = "routing_overlap_mean"
ROUTING_MISSING_TOKENS = "routing_missing_tokens"
VLLM_KL_FLIPPED = "vllm_kl_flipped"
VLLM_KL_SAME = "vllm_kl_same"
ROUTING_K3_SHARE_FLIPPED = "routing_k3_share_flipped"
ROUTING_UNPAIRED_TOKENS = "routing_unpaired_tokens"
VLLM_KL_AFTER_FLIP = "vllm_kl_after_flip"
VLLM_KL_BEFORE_FLIP = "vllm_kl_before_flip"
R3_VIOLATION_FRACTION = "r3_violation_fraction"


@dataclass
class RoutingPartial:
    """Sums over token rows; ``merge`` adds them (any order: they are sums of integers and of
    K3 in float64, merged in part order by the callers)."""

    layers: int
    top_k: int
    compared: int = 0
    all_equal: int = 0
    layer_equal: int = 0
    overlap: int = 0
    missing: int = 0
    unpaired: int = 0
    n: np.ndarray = field(
        default_factory=lambda: np.zeros(4, np.int64)
    )  # flip, same, after, before
    k3: np.ndarray = field(default_factory=lambda: np.zeros(4, np.float64))
    by_layer_equal: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    by_layer_overlap: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    by_layer_first_flip: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    # per probability bin of the rollout (the report's edges): tokens and K3 sums of the
    # flipped (column 0) and same (column 1) paired tokens
    bins: int = 0
    bin_n: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), np.int64))
    bin_k3: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), np.float64))

    def __post_init__(self) -> None:
        for name in ("by_layer_equal", "by_layer_overlap", "by_layer_first_flip"):
            if len(getattr(self, name)) != self.layers:
                setattr(self, name, np.zeros(self.layers, np.int64))
        if len(self.bin_n) != self.bins:
            self.bin_n = np.zeros((self.bins, 2), np.int64)
            self.bin_k3 = np.zeros((self.bins, 2), np.float64)

    def merge(self, other: RoutingPartial) -> RoutingPartial:
        if (self.layers, self.top_k, self.bins) != (other.layers, other.top_k, other.bins):
            raise ValueError("routing partials of different layers / top-k / bins do not merge")
        out = RoutingPartial(self.layers, self.top_k, bins=self.bins)
        for name in ("compared", "all_equal", "layer_equal", "overlap", "missing", "unpaired"):
            setattr(out, name, getattr(self, name) + getattr(other, name))
        for name in (
            "n",
            "k3",
            "by_layer_equal",
            "by_layer_overlap",
            "by_layer_first_flip",
            "bin_n",
            "bin_k3",
        ):
            setattr(out, name, getattr(self, name) + getattr(other, name))
        return out

    def metrics(self, replay: bool) -> dict[str, float | int | None]:
        def ratio(a: float, b: float) -> float | None:
            return float(a / b) if b else None

        paired_k3 = self.k3[0] + self.k3[1]
        return {
            ROUTING_TOKEN_AGREEMENT: ratio(self.all_equal, self.compared),
            ROUTING_LAYER_AGREEMENT: ratio(self.layer_equal, self.compared * self.layers),
            ROUTING_OVERLAP_MEAN: ratio(self.overlap, self.compared * self.layers * self.top_k),
            ROUTING_MISSING_TOKENS: self.missing,
            VLLM_KL_FLIPPED: ratio(self.k3[0], self.n[0]),
            VLLM_KL_SAME: ratio(self.k3[1], self.n[1]),
            ROUTING_K3_SHARE_FLIPPED: ratio(self.k3[0], paired_k3),
            ROUTING_UNPAIRED_TOKENS: self.unpaired,
            VLLM_KL_AFTER_FLIP: ratio(self.k3[2], self.n[2]),
            VLLM_KL_BEFORE_FLIP: ratio(self.k3[3], self.n[3]),
            R3_VIOLATION_FRACTION: ratio(self.compared - self.all_equal, self.compared)
            if replay
            else None,
        }

    def by_layer(self) -> list[dict[str, float | int | None]]:
        """Per layer: agreement and overlap over the compared tokens, and the share of the
        differing tokens whose first differing layer it is."""
        flips = int(self.by_layer_first_flip.sum())
        c = self.compared
        return [
            {
                "layer": i,
                ROUTING_LAYER_AGREEMENT: float(self.by_layer_equal[i] / c) if c else None,
                ROUTING_OVERLAP_MEAN: float(self.by_layer_overlap[i] / (c * self.top_k))
                if c
                else None,
                "first_flip_share": float(self.by_layer_first_flip[i] / flips) if flips else None,
            }
            for i in range(self.layers)
        ]

    def by_bin(self) -> list[dict[str, float | int | None]]:
        """Per probability bin: the paired tokens' counts and mean K3, flipped and same."""
        out = []
        for b in range(self.bins):
            (nf, ns), (kf, ks) = self.bin_n[b], self.bin_k3[b]
            out.append(
                {
                    "bin": b,
                    "flipped_tokens": int(nf),
                    VLLM_KL_FLIPPED: float(kf / nf) if nf else None,
                    "same_tokens": int(ns),
                    VLLM_KL_SAME: float(ks / ns) if ns else None,
                }
            )
        return out


def routing_partial(
    layers: int,
    top_k: int,
    equal: np.ndarray,
    compared: np.ndarray,
    overlap: np.ndarray,
    paired: np.ndarray,
    before: np.ndarray,
    k3: np.ndarray,
    bins: tuple[np.ndarray, int] | None = None,
) -> RoutingPartial:
    """The sums of one slice of token rows (``overlap``: uint8 [tokens, layers]; ``bins``: each
    token's probability bin and the number of bins)."""
    n_bins = 0 if bins is None else bins[1]
    p = RoutingPartial(layers, top_k, bins=n_bins)
    codes = np.zeros(len(k3), np.int64) if bins is None else bins[0]
    counts, k3s = np.zeros(8, np.int64), np.zeros(4, np.float64)
    by_layer = np.zeros((3, layers), np.int64)
    bin_n, bin_k3 = np.zeros((max(n_bins, 1), 2), np.int64), np.zeros((max(n_bins, 1), 2))
    from mismatchctl.stats.routing_kernels import routing_sums  # numba: loaded on first use

    routing_sums(
        equal,
        compared,
        overlap,
        paired,
        before,
        k3,
        codes,
        layers,
        counts,
        k3s,
        by_layer,
        bin_n,
        bin_k3,
    )
    p.compared, p.all_equal, p.missing, p.unpaired = (int(c) for c in counts[:4])
    p.n, p.k3 = counts[4:].copy(), k3s
    p.by_layer_equal, p.by_layer_overlap, p.by_layer_first_flip = (r.copy() for r in by_layer)
    p.layer_equal, p.overlap = int(by_layer[0].sum()), int(by_layer[1].sum())
    if n_bins:
        p.bin_n, p.bin_k3 = bin_n, bin_k3
    return p
