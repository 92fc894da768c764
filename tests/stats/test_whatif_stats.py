"""Correction what-if states: exact float64 references, the hand-checked golden vector, merges
over partitions (empty and one-token parts included), segments and the batch filter."""

from __future__ import annotations

import math
from itertools import pairwise

import numpy as np
import pytest
from stats_helpers import flatten, make_sequences

from mismatchctl.stats import whatif as WI
from mismatchctl.stats.whatif import Method

Seq = tuple[np.ndarray, np.ndarray]

# METRICS.md golden vector: r_A = [0, -0.1, 0.5] (S_A = 0.4), r_B = [0.2, 0] (S_B = 0.2).
GOLDEN: list[Seq] = [
    (np.array([-0.1, -0.9, -2.5]), np.array([-0.1, -1.0, -2.0])),
    (np.array([-0.7, -0.2]), np.array([-0.5, -0.2])),
]


def reference(seqs: list[Seq], method: Method) -> dict[str, float | int | None]:
    """Straight from METRICS.md and the unit table of ``mismatchctl.stats.whatif``."""
    clamp = lambda x: min(20.0, max(-20.0, x))  # noqa: E731
    raw, applied, hit_tokens, hit_seqs, tokens = [], [], 0, 0, 0
    t = method.threshold
    for lr, lt in seqs:
        r = [float(b - a) for a, b in zip(lr, lt, strict=True)]
        tokens += len(r)
        s = sum(r)
        if method.name in ("token-tis", "token-mis"):
            rho = [math.exp(clamp(x)) for x in r]
            over = [x > t for x in rho]
            raw += rho
            if method.name == "token-tis":
                applied += [min(x, t) for x in rho]
            else:
                applied += [0.0 if o else x for x, o in zip(rho, over, strict=True)]
            hit_tokens += sum(over)
            hit_seqs += any(over)
            continue
        ratio = math.exp(clamp(s))
        if method.name in ("seq-tis", "seq-mis"):
            hit = ratio > t
            w = min(ratio, t) if method.name == "seq-tis" else (0.0 if hit else ratio)
        elif method.name == "geo-rs":
            g = math.exp(clamp(s / len(r)))
            hit, ratio = not (t[0] <= g <= t[1]), g
            w = 0.0 if hit else 1.0
        elif method.name == "k3-rs":
            hit = np.mean([math.exp(x) - 1 - x for x in r]) > t
            w = 0.0 if hit else 1.0
        else:  # veto
            hit = min(math.exp(clamp(x)) for x in r) < t
            w = 0.0 if hit else 1.0
        raw.append(ratio)
        applied.append(w)
        hit_seqs += hit
        hit_tokens += len(r) * hit
    return _summary(raw, applied, hit_tokens / tokens, hit_seqs / len(seqs))


def _summary(raw: list[float], applied: list[float], tf: float, sf: float) -> dict:
    out: dict = {"units": len(raw), "token_fraction": tf, "sequence_fraction": sf}
    for name, w in (("raw", np.array(raw)), ("weight", np.array(applied))):
        out.update({f"{name}_mean": w.mean(), f"{name}_std": w.std()})
        out.update({f"{name}_min": w.min(), f"{name}_max": w.max()})
        key = "ess_raw" if name == "raw" else "ess"
        out[key] = w.sum() ** 2 / (len(w) * (w @ w)) if (w @ w) > 0 else None
    return out


def one_cell(seqs: list[Seq], methods: list[Method]) -> np.ndarray:
    lr, lt, seq = flatten(seqs)
    return WI.cell_states(lr, lt, seq, np.zeros(len(lr), np.int64), 1, methods)[0]


def assert_close(got: dict, want: dict) -> None:
    for key, value in want.items():
        if value is None:
            assert got[key] is None, key
        else:
            assert got[key] == pytest.approx(value, rel=1e-9, abs=1e-12), key


METHODS = [
    Method("token-tis", 1.5),
    Method("token-mis", 1.5),
    Method("seq-tis", 1.4),
    Method("seq-mis", 1.4),
    Method("geo-rs", (0.9, 1.12)),
    Method("k3-rs", 0.02),
    Method("veto", 0.95),
]


def test_golden_vector_by_hand() -> None:
    states = one_cell(GOLDEN, METHODS)
    got = {m.name: WI.finalize(states[j]) for j, m in enumerate(METHODS)}
    # token TIS at 1.5: rho = [1, e^-0.1, e^0.5, e^0.2, 1]; only e^0.5 = 1.6487 is clipped
    assert got["token-tis"]["token_fraction"] == 0.2
    assert got["token-tis"]["sequence_fraction"] == 0.5
    assert got["token-tis"]["raw_mean"] == pytest.approx(1.1549922893792515, rel=1e-12)
    assert got["token-tis"]["raw_std"] == pytest.approx(0.26788106933886696, rel=1e-12)
    assert got["token-tis"]["weight_max"] == 1.5
    assert got["token-tis"]["ess"] == pytest.approx(0.9649969048511912, rel=1e-12)
    assert got["token-mis"]["weight_mean"] == pytest.approx(0.8252480352392257, rel=1e-12)
    assert got["token-mis"]["weight_min"] == 0.0
    # sequence ratios e^0.4 = 1.4918 (A, above 1.4) and e^0.2 = 1.2214 (B)
    assert got["seq-tis"]["weight_mean"] == pytest.approx((1.4 + math.exp(0.2)) / 2, rel=1e-12)
    assert got["seq-tis"]["ess"] == pytest.approx(0.9953796937001769, rel=1e-12)
    assert got["seq-tis"]["ess_raw"] == pytest.approx(0.9901639988223625, rel=1e-12)
    assert got["seq-mis"]["token_fraction"] == 0.6  # A's 3 of 5 tokens
    assert got["seq-mis"]["ess"] == pytest.approx(0.5, rel=1e-12)  # weights [0, e^0.2]
    # G_A = e^(0.4/3) = 1.1426 is outside [0.9, 1.12], G_B = e^0.1 = 1.1052 inside
    assert got["geo-rs"]["sequence_fraction"] == 0.5
    assert got["geo-rs"]["raw_max"] == pytest.approx(math.exp(0.4 / 3), rel=1e-12)
    # mean K3: A 0.05119 > 0.02, B 0.01070 <= 0.02; veto: A's smallest rho e^-0.1 < 0.95
    assert got["k3-rs"]["sequence_fraction"] == 0.5 and got["veto"]["sequence_fraction"] == 0.5
    assert got["veto"]["weight_mean"] == 0.5 and got["veto"]["ess"] == 0.5


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    seqs = make_sequences(rng, 40, max_len=30)
    methods = [*METHODS, Method("seq-mis", 2.0), Method("k3-rs", 0.01), Method("veto", 1e-4)]
    states = one_cell(seqs, methods)
    for j, m in enumerate(methods):
        assert_close(WI.finalize(states[j]), reference(seqs, m))


def test_merge_over_partitions_with_empty_and_one_token_parts() -> None:
    rng = np.random.default_rng(5)
    seqs = make_sequences(rng, 30, max_len=20)
    seqs[3] = (seqs[3][0][:1], seqs[3][1][:1])
    cuts = [0, 0, 1, 4, 4, 17, 30]  # includes empty parts and a one-sequence part
    total = WI.empty_state((len(METHODS),))
    for lo, hi in reversed(list(pairwise(cuts))):
        total = WI.merge(total, one_cell(seqs[lo:hi], METHODS))
    whole = one_cell(seqs, METHODS)
    for j in range(len(METHODS)):
        assert_close(WI.finalize(total[j]), WI.finalize(whole[j]))


def test_segments_carry_their_sequence_weight() -> None:
    """Cells cutting a sequence (turn kinds) count each segment as a unit with its sequence's
    weight: golden B split in two segments, A kept whole in cell 0."""
    lr, lt, seq = flatten(GOLDEN)
    code = np.array([0, 0, 0, 0, 1])
    states = WI.cell_states(lr, lt, seq, code, 2, [Method("seq-mis", 1.4)])
    first, later = WI.finalize(states[0, 0]), WI.finalize(states[1, 0])
    assert (first["units"], first["tokens"], first["sequence_fraction"]) == (2, 4, 0.5)
    assert first["token_fraction"] == 0.75  # A's 3 tokens of 4
    assert (later["units"], later["tokens"], later["token_fraction"]) == (1, 1, 0.0)
    assert later["weight_mean"] == pytest.approx(math.exp(0.2), rel=1e-12)


def test_batch_filter_is_decided_after_merging() -> None:
    method = [Method("batch-filter", 0.03)]
    state = one_cell(GOLDEN, method)[0]
    assert state[WI.W.K3_SUM] / state[WI.W.TOKENS] == pytest.approx(0.0349923, abs=1e-7)
    kept = WI.finalize(state)
    assert kept["token_fraction"] == 0.0 and kept["weight_mean"] == 1.0 and kept["ess"] == 1.0
    skipped = WI.finalize(WI.reject_all(state))
    assert skipped["token_fraction"] == 1.0 and skipped["sequence_fraction"] == 1.0
    assert skipped["weight_max"] == 0.0 and skipped["ess"] is None
    assert skipped["raw_mean"] == kept["raw_mean"]
    empty = WI.reject_all(WI.empty_state())
    assert WI.finalize(empty)["weight_min"] is None


@pytest.mark.parametrize("name", ["token-tis", "token-mis", "seq-tis", "seq-mis"])
def test_threshold_boundary(name: str) -> None:
    """A ratio just below C is kept, just above it is clipped or rejected (rho <= C keeps)."""
    c, eps = 1.5, 1e-9
    seqs = [
        (np.array([-1.0]), np.array([-1.0 + math.log(c) - eps])),
        (np.array([-1.0]), np.array([-1.0 + math.log(c) + eps])),
    ]
    got = WI.finalize(one_cell(seqs, [Method(name, c)])[0])
    assert got["sequence_fraction"] == 0.5 and got["token_fraction"] == 0.5


def test_clamp_and_overflow() -> None:
    """A log ratio of 50 is clamped to 20 for the weight; its K3 overflows to inf and k3-rs
    rejects it."""
    seqs = [(np.array([-60.0, -1.0]), np.array([-10.0, -1.0]))]
    methods = [Method("token-tis", 2.0), Method("seq-mis", 2.0), Method("k3-rs", 0.01)]
    states = one_cell(seqs, methods)
    assert WI.finalize(states[0])["raw_max"] == pytest.approx(math.exp(20.0))
    assert WI.finalize(states[1])["raw_max"] == pytest.approx(math.exp(20.0))
    assert WI.finalize(states[2])["sequence_fraction"] == 1.0


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [("seq-mis", "2", 2.0), ("geo-rs", "0.999_1.001", (0.999, 1.001)), ("veto", "1e-4", 1e-4)],
)
def test_parse_threshold(name: str, text: str, expected: object) -> None:
    assert WI.parse_threshold(name, text) == expected


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("seq-miss", "2", "unknown method `seq-miss`"),
        ("seq-mis", "two", "is not a number"),
        ("seq-mis", "-1", "must be a positive number"),
        ("geo-rs", "0.999", "is not LOWER_UPPER"),
        ("geo-rs", "1.1_0.9", "lower bound above upper bound"),
    ],
)
def test_parse_threshold_errors(name: str, text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        WI.parse_threshold(name, text)
