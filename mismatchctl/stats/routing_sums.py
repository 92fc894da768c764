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
SHIFTS = ("position_before", "position_after", "layer_below", "layer_above")
"""The misalignments the routes' alignment test sets the trainer's routes at (``alignment``)."""
SHIFT_TEXT = {
    "position_before": "a position later (row t against the rollout's row t - 1)",
    "position_after": "a position earlier (row t against the rollout's row t + 1)",
    "layer_below": "a layer up (each layer against the rollout's layer below)",
    "layer_above": "a layer down (each layer against the rollout's layer above)",
}
"""How each shift sets the trainer's routes against the rollout's, for findings and notes."""
NOT_SHIFTED = 255
"""A ``route_shifted`` byte of a comparison not made (a row or a layer missing, or a row off the
test's sample)."""


def shifted_sums(shifted: np.ndarray, layers: int) -> tuple[np.ndarray, np.ndarray]:
    """Per shift of ``SHIFTS``, the layers agreeing and the layer pairs compared, over the
    ``route_shifted`` bytes of some tokens (uint8 [tokens, 4])."""
    equal, slots = np.zeros(len(SHIFTS), np.int64), np.zeros(len(SHIFTS), np.int64)
    for c in range(len(SHIFTS)):
        col = shifted[:, c]
        valid = col != NOT_SHIFTED
        equal[c] = int(col[valid].sum(dtype=np.int64))
        slots[c] = int(valid.sum()) * (layers if c < 2 else layers - 1)
    return equal, slots


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
    # the alignment test (``SHIFTS``): per shift, the layers agreeing and the layer pairs compared
    shifted_equal: np.ndarray = field(default_factory=lambda: np.zeros(4, np.int64))
    shifted_slots: np.ndarray = field(default_factory=lambda: np.zeros(4, np.int64))

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
            "shifted_equal",
            "shifted_slots",
        ):
            setattr(out, name, getattr(self, name) + getattr(other, name))
        return out

    def add_shifted(self, shifted: np.ndarray) -> None:
        """Add a slice's ``route_shifted`` bytes (uint8 [tokens, 4]; ``shifted_sums``)."""
        equal, slots = shifted_sums(shifted, self.layers)
        self.shifted_equal += equal
        self.shifted_slots += slots

    def alignment(self) -> dict[str, float | None]:
        """Per misalignment of ``SHIFTS``, the share of the (token, layer) routes whose top-k sets
        agree once the trainer's row is set a position before or after the rollout's, or each
        of its layers against the rollout's layer below or above (None: none compared, or
        parts written before the test). The aligned share is ``routing_layer_agreement``."""
        return {
            name: float(e / n) if n > 0 else None
            for name, e, n in zip(SHIFTS, self.shifted_equal, self.shifted_slots, strict=True)
        }

    def sums(self, replay: bool) -> RoutingSums:
        """The sums the eleven metrics need (``replay``: the run says routing replay is on)."""
        counts = np.array(
            [self.compared, self.all_equal, self.layer_equal, self.overlap, self.missing,
             self.unpaired, *self.n],
            np.int64,
        )  # fmt: skip
        slots = self.compared * self.layers
        replayed = (self.compared, self.all_equal) if replay else (0, 0)
        return RoutingSums(counts, self.k3.copy(), slots, slots * self.top_k, *replayed)

    def metrics(self, replay: bool) -> dict[str, float | int | None]:
        return self.sums(replay).metrics(replay)

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


@dataclass
class RoutingSums:
    """The sums of the eleven metrics over any group of tokens (a group of a report split):
    they merge across runs of different layers and top-k, the slots being counted per token.

    ``counts`` (int64, ten): compared rows, rows equal on every layer, equal layers,
    overlapping experts, missing rows, unpaired tokens, then the tokens of flipped, same, after
    a flip, before any flip; ``k3``: the K3 sums of the last four; ``layer_slots`` and
    ``overlap_slots``: the compared rows times layers (times top-k); ``replay_compared`` and
    ``replay_equal``: compared and all-equal rows of runs that say routing replay is on."""

    counts: np.ndarray
    k3: np.ndarray
    layer_slots: int = 0
    overlap_slots: int = 0
    replay_compared: int = 0
    replay_equal: int = 0

    def merge(self, other: RoutingSums) -> RoutingSums:
        return RoutingSums(
            self.counts + other.counts,
            self.k3 + other.k3,
            self.layer_slots + other.layer_slots,
            self.overlap_slots + other.overlap_slots,
            self.replay_compared + other.replay_compared,
            self.replay_equal + other.replay_equal,
        )

    def metrics(self, replay: bool | None = None) -> dict[str, float | int | None]:
        """docs/metrics.md, "Routing"; ``r3_violation_fraction`` over the rows of replay runs
        (None without any, or when ``replay`` is False)."""

        def ratio(a: float, b: float) -> float | None:
            return float(a / b) if b else None

        c = self.counts
        k3 = self.k3
        on = (self.replay_compared > 0) if replay is None else replay
        return {
            ROUTING_TOKEN_AGREEMENT: ratio(c[1], c[0]),
            ROUTING_LAYER_AGREEMENT: ratio(c[2], self.layer_slots),
            ROUTING_OVERLAP_MEAN: ratio(c[3], self.overlap_slots),
            ROUTING_MISSING_TOKENS: int(c[4]),
            VLLM_KL_FLIPPED: ratio(k3[0], c[6]),
            VLLM_KL_SAME: ratio(k3[1], c[7]),
            ROUTING_K3_SHARE_FLIPPED: ratio(k3[0], k3[0] + k3[1]),
            ROUTING_UNPAIRED_TOKENS: int(c[5]),
            VLLM_KL_AFTER_FLIP: ratio(k3[2], c[8]),
            VLLM_KL_BEFORE_FLIP: ratio(k3[3], c[9]),
            R3_VIOLATION_FRACTION: ratio(
                self.replay_compared - self.replay_equal, self.replay_compared
            )
            if on
            else None,
        }


@dataclass
class GroupCodes:
    """Per token, its group in each of several groupings (splits), as rows of one flat index
    space: ``codes[s, t]`` is token ``t``'s group in split ``s`` (offset by the sizes of the
    splits before it); ``size`` is the number of groups of all splits."""

    codes: np.ndarray  # int64 [splits, tokens]
    size: int


NO_GROUPS = GroupCodes(np.zeros((0, 0), np.int64), 0)


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
    groups: GroupCodes = NO_GROUPS,
) -> tuple[RoutingPartial, np.ndarray, np.ndarray]:
    """The sums of one slice of token rows (``overlap``: uint8 [tokens, layers]; ``paired``:
    -1, 0 or 1 + the producing row's lowest differing layer; ``bins``: each token's
    probability bin and the number of bins), and in the same pass the counts (int64 [groups,
    10], ``RoutingSums.counts``) and K3 sums (float64 [groups, 4]) of every group of
    ``groups``."""
    n_bins = 0 if bins is None else bins[1]
    p = RoutingPartial(layers, top_k, bins=n_bins)
    codes = np.zeros(len(k3), np.int64) if bins is None else bins[0]
    counts, k3s = np.zeros(8, np.int64), np.zeros(4, np.float64)
    by_layer = np.zeros((3, layers), np.int64)
    bin_n, bin_k3 = np.zeros((max(n_bins, 1), 2), np.int64), np.zeros((max(n_bins, 1), 2))
    g_counts = np.zeros((groups.size, 10), np.int64)
    g_k3 = np.zeros((groups.size, 4), np.float64)
    group_codes = groups.codes if groups.size else np.zeros((0, len(k3)), np.int64)
    from mismatchctl.stats.routing_sums_kernels import routing_sums  # numba: loaded on first use

    routing_sums(
        equal,
        compared,
        overlap,
        paired,
        before,
        k3,
        codes,
        layers,
        top_k,
        counts,
        k3s,
        by_layer,
        bin_n,
        bin_k3,
        np.ascontiguousarray(group_codes, np.int64),
        g_counts,
        g_k3,
    )
    p.compared, p.all_equal, p.missing, p.unpaired = (int(c) for c in counts[:4])
    p.n, p.k3 = counts[4:].copy(), k3s
    p.by_layer_equal, p.by_layer_overlap, p.by_layer_first_flip = (r.copy() for r in by_layer)
    p.layer_equal, p.overlap = int(by_layer[0].sum()), int(by_layer[1].sum())
    if n_bins:
        p.bin_n, p.bin_k3 = bin_n, bin_k3
    return p, g_counts, g_k3


def group_sums(
    counts: np.ndarray, k3: np.ndarray, layers: int, top_k: int, replay: bool
) -> RoutingSums:
    """One group's ``RoutingSums`` from its row of ``routing_partial``'s group arrays."""
    c = counts.copy()
    replayed = (int(c[0]), int(c[1])) if replay else (0, 0)
    return RoutingSums(c, k3.copy(), int(c[0]) * layers, int(c[0]) * layers * top_k, *replayed)
