"""The K3 cube: agreement with a plain numpy reference, merge laws, layout and input checks."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mismatchctl.stats.cube.cube import Cube, Field, check_codes, check_tokens, merge_all
from mismatchctl.stats.cube.spec import CubeSpec, Dim, codes_label
from tests.helpers import examples
from tests.stats.cube.cube_reference import random_tokens, reference_state, small_spec

RTOL = 1e-9


def _assert_state_close(got: np.ndarray, want: np.ndarray) -> None:
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=1e-300)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("block_cap", [3, 128])
def test_cube_equals_reference(seed: int, block_cap: int) -> None:
    spec = small_spec(block_cap)
    lr, lt, seq, tok, seqc = random_tokens(spec, np.random.default_rng(seed), 60)
    cube = Cube.from_tokens(spec, lr, lt, seq, tok, seqc)
    _assert_state_close(cube.state, reference_state(spec, lr, lt, seq, tok, seqc))
    assert cube.tokens == len(lr)
    assert cube.sequences == len(np.unique(seq))
    assert cube.k3_sum == pytest.approx(float(np.sum(np.expm1(lt - lr) - (lt - lr))), rel=1e-12)


@pytest.mark.parametrize("max_order", [1, 2])
@pytest.mark.parametrize("dtype", [np.int16, np.int32, np.int64])
def test_lower_orders_and_code_dtypes(max_order: int, dtype: type) -> None:
    spec = small_spec(3, max_order)
    lr, lt, seq, tok, seqc = random_tokens(spec, np.random.default_rng(7), 30)
    cube = Cube.from_tokens(spec, lr, lt, seq, tok.astype(dtype), seqc.astype(dtype))
    _assert_state_close(cube.state, reference_state(spec, lr, lt, seq, tok, seqc))
    assert max(len(t.dims) for t in spec.tables) == max_order


def test_no_token_dimensions_and_no_sequence_dimensions() -> None:
    rng = np.random.default_rng(3)
    for spec in (
        CubeSpec((), (Dim("step", 5), Dim("gpu", 3))),
        CubeSpec((Dim("bin", 4), Dim("kv", 6)), ()),
    ):
        lr, lt, seq, _, _ = random_tokens(small_spec(), rng, 25)
        tok = np.zeros((len(lr), len(spec.token_dims)), np.int16)
        for k, d in enumerate(spec.token_dims):
            tok[:, k] = rng.integers(0, d.size, len(lr))
        seqc = np.zeros((25, len(spec.seq_dims)), np.int64)
        for k, d in enumerate(spec.seq_dims):
            seqc[:, k] = rng.integers(0, d.size, 25)
        cube = Cube.from_tokens(spec, lr, lt, seq, tok, seqc)
        _assert_state_close(cube.state, reference_state(spec, lr, lt, seq, tok, seqc))


def _pieces(seq: np.ndarray, cuts: list[int]) -> list[slice]:
    """Slices cut at the given sequence boundaries (empty pieces allowed)."""
    starts = np.flatnonzero(np.r_[True, seq[1:] != seq[:-1]])
    bounds = [0, *sorted(int(starts[c]) if c < len(starts) else len(seq) for c in cuts), len(seq)]
    return [slice(a, b) for a, b in itertools.pairwise(bounds)]


@settings(max_examples=examples(30), deadline=None)
@given(seed=st.integers(0, 2**16), cuts=st.lists(st.integers(0, 40), max_size=6))
def test_merge_of_random_partitions_equals_one_shot(seed: int, cuts: list[int]) -> None:
    """Partitions at sequence boundaries, empty pieces and pieces of one sequence included,
    merged in a random order and grouping, equal the one-shot cube."""
    spec = small_spec()
    rng = np.random.default_rng(seed)
    lr, lt, seq, tok, seqc = random_tokens(spec, rng, 30, max_len=12)
    whole = Cube.from_tokens(spec, lr, lt, seq, tok, seqc)
    parts = [Cube.from_tokens(spec, lr[s], lt[s], seq[s], tok[s], seqc) for s in _pieces(seq, cuts)]
    rng.shuffle(parts)
    merged = merge_all(parts, spec)
    _assert_state_close(merged.state, whole.state)
    if len(parts) >= 3:  # associativity: (a + b) + c == a + (b + c)
        left = parts[0].merge(parts[1]).merge(parts[2])
        right = parts[0].merge(parts[1].merge(parts[2]))
        _assert_state_close(left.state, right.state)


def test_empty_cube_is_the_identity_and_single_tokens_merge() -> None:
    spec = small_spec()
    lr, lt, seq, tok, seqc = random_tokens(spec, np.random.default_rng(1), 20)
    cube = Cube.from_tokens(spec, lr, lt, seq, tok, seqc)
    empty = Cube.from_tokens(spec, lr[:0], lt[:0], seq[:0], tok[:0], seqc)
    assert not empty.state.any()
    np.testing.assert_array_equal(cube.merge(empty).state, cube.state)
    np.testing.assert_array_equal(empty.merge(cube).state, cube.state)
    one = Cube.from_tokens(spec, lr[:1], lt[:1], seq[:1], tok[:1], seqc)
    assert one.tokens == 1 and one.sequences == 1
    r = lt[0] - lr[0]
    k3 = np.expm1(r) - r
    want = [1, k3, k3 * k3, 1, k3, 1, k3 * k3, k3, k3, 1]
    np.testing.assert_allclose(one.state[0], want, rtol=1e-15)


def test_blocked_dimension_has_an_exact_table_that_sums_to_its_blocks() -> None:
    """``step`` (7 values, block cap 3) is seen in blocks everywhere but its exact 1-d table;
    a sequence dimension's blocks hold disjoint sequences, so every field adds up exactly."""
    spec = small_spec(block_cap=3)
    lr, lt, seq, tok, seqc = random_tokens(spec, np.random.default_rng(5), 80)
    cube = Cube.from_tokens(spec, lr, lt, seq, tok, seqc)
    exact, blocked = cube.table(["step"], exact=True), cube.table(["step"])
    assert exact.shape == (7, 10) and blocked.shape == (3, 10)
    summed = np.zeros_like(blocked)
    np.add.at(summed, spec.block_of(spec.index("step")), exact)
    np.testing.assert_allclose(summed, blocked, rtol=1e-12)
    assert list(spec.block_of(spec.index("step"))) == [0, 0, 0, 1, 1, 2, 2]
    both = cube.table(["turn", "step"])
    assert both.shape == (3, 3, 10)  # sequence dims outermost, then token dims
    assert cube.table(["bin"], exact=True).shape == (4, 10)  # a blocked token dimension


def test_function_of_dimensions_are_never_conjoined() -> None:
    spec = small_spec()
    turn, kind = spec.index("turn"), spec.index("turn_kind")
    assert all(not {turn, kind} <= set(t.dims) for t in spec.tables)
    assert spec.table_index([turn, kind]) is None
    assert spec.table_index([kind, spec.index("bin")]) is not None


@pytest.mark.parametrize("sparse", [False, True])
def test_a_mask_adds_what_the_kept_tokens_alone_add(sparse: bool) -> None:
    """``keep``: the kept tokens' sums bit for bit those of a filtered copy (the masked-out
    tokens may be NaN), a sequence without a kept token no cluster; a dense and a part's
    state alike."""
    from mismatchctl.stats.cube.part import PartCube

    spec = small_spec(3)
    lr, lt, seq, tok, seqc = random_tokens(spec, np.random.default_rng(11), 40)
    rng = np.random.default_rng(12)
    keep = np.where(rng.random(len(lr)) < 0.6, 2, 1).astype(np.uint8)
    keep[seq == seq[0]] = 1  # one whole sequence left out
    lt = np.where(keep == 1, np.nan, lt)
    kept = keep == 2
    rows = np.unique(seq[kept], return_inverse=True)[1]
    want = Cube.from_tokens(spec, lr[kept], lt[kept], rows, tok[kept], seqc[np.unique(seq[kept])])
    got = PartCube(spec) if sparse else Cube(spec)
    got.add(lr, lt, seq, tok, seqc, keep=keep, bit=2)
    state = got.dense().state if sparse else got.state
    assert np.array_equal(state, want.state)
    assert want.sequences == len(np.unique(seq)) - 1
    with pytest.raises(ValueError, match="finite"):
        Cube(spec).add(lr, lt, seq, tok, seqc, keep=keep, bit=1)


def test_a_given_k3_adds_what_the_loop_computes() -> None:
    """``k3``: each token's ``cube_kernels.token_k3``, computed once for several cubes, gives
    the state the loop's own computation gives, bit for bit; one of another length is refused."""
    from mismatchctl.stats.cube import kernels as cube_kernels

    spec = small_spec(3)
    lr, lt, seq, tok, seqc = random_tokens(spec, np.random.default_rng(13), 30)
    k3 = np.empty(len(lr))
    cube_kernels.token_k3(lr, lt, k3)
    given = Cube(spec)
    given.add(lr, lt, seq, tok, seqc, k3=k3)
    assert np.array_equal(given.state, Cube.from_tokens(spec, lr, lt, seq, tok, seqc).state)
    with pytest.raises(ValueError, match="k3 must have one entry per token"):
        Cube(spec).add(lr, lt, seq, tok, seqc, k3=k3[1:])


def test_tokens_checked_once_add_what_each_cubes_own_checks_add() -> None:
    """``add_checked``: tokens checked once (``check_tokens``) and codes once per spec
    (``check_codes``) give each masked cube the state ``add`` gives, bit for bit; the checks
    refuse what ``add`` refuses, and a cube of other codes, rows or an unchecked bit."""
    spec = small_spec(3)
    lr, lt, seq, tok, seqc = random_tokens(spec, np.random.default_rng(21), 40)
    keep = np.random.default_rng(22).choice(np.array([0, 1, 2, 3], np.uint8), len(lr))
    lt = np.where(keep == 0, np.nan, lt)  # a token no cube keeps need not be finite
    tokens, codes = check_tokens(lr, lt, seq, len(seqc), keep, 3), check_codes(spec, tok)
    for bit in (1, 2):
        want, got = Cube(spec), Cube(spec)
        want.add(lr, lt, seq, tok, seqc, keep=keep, bit=bit)
        got.add_checked(tokens, codes, seqc, bit=bit)
        assert np.array_equal(got.state, want.state) and got.tokens > 0
    with pytest.raises(ValueError, match="finite"):
        check_tokens(lr, lt, seq, len(seqc))  # no mask: every token
    with pytest.raises(ValueError, match="seq must index the rows"):
        check_tokens(lr, lt, seq, len(seqc) - 1, keep, 3)
    with pytest.raises(ValueError, match="contiguous"):
        moved = [np.roll(a, -1) for a in (lr, lt, seq, keep)]  # a first token moved to the end
        check_tokens(*moved[:3], len(seqc), moved[3], 3)
    bad = tok.copy()
    bad[5, 0] = spec.token_dims[0].size
    with pytest.raises(ValueError, match="token_codes: codes of dimension"):
        check_codes(spec, bad)
    with pytest.raises(ValueError, match="not among the bits checked"):
        Cube(spec).add_checked(tokens, codes, seqc, bit=4)
    with pytest.raises(ValueError, match="token codes checked for dimensions"):
        Cube(CubeSpec(spec.token_dims[:1], ())).add_checked(tokens, codes, seqc[:, :0], bit=1)
    with pytest.raises(ValueError, match="seq_codes must have the"):
        Cube(spec).add_checked(tokens, codes, seqc[1:], bit=1)


@pytest.mark.parametrize("dtype", [np.int16, np.int32])
def test_column_ranges_are_numpys_minimum_and_maximum(dtype: type) -> None:
    """The compiled per-column pass gives numpy's axis-0 minimum and maximum, one row too."""
    from mismatchctl.stats.cube import kernels as cube_kernels

    codes = np.random.default_rng(23).integers(-300, 900, (5000, 3)).astype(dtype)
    for rows in (codes, codes[:1], np.ascontiguousarray(codes[::-1])):
        lo, hi = cube_kernels.column_ranges(rows)
        assert np.array_equal(lo, rows.min(axis=0)) and np.array_equal(hi, rows.max(axis=0))


def test_k3_is_not_clamped() -> None:
    """A huge log ratio overflows to inf (reported as such), a tiny one keeps its precision."""
    spec = CubeSpec((), (Dim("s", 1),))
    lr = np.array([-800.0, -1e-9])
    lt = np.array([0.0, -2e-9])
    cube = Cube.from_tokens(spec, lr, lt, np.array([0, 1]), np.zeros((2, 0), int), [[0], [0]])
    table = cube.table(["s"])
    assert np.isinf(cube.k3_sum) and np.isinf(table[0, Field.K3])
    tiny = Cube.from_tokens(spec, lr[1:], lt[1:], np.array([0]), np.zeros((1, 0), int), [[0]])
    assert tiny.k3_sum == pytest.approx(0.5e-18, rel=1e-6)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"seq": np.array([0, 1, 0])}, "contiguous"),
        ({"seq": np.array([0, 0, 5])}, "must index the rows"),
        ({"tok": np.array([[0, 0, 0], [3, 1, 0], [0, 0, 0]])}, "dimension 'turn'"),
        ({"seqc": np.array([[0, 0], [0, 2]])}, "dimension 'gpu'"),
        ({"lt": np.array([0.0, np.nan, 0.0])}, "finite"),
        ({"tok": np.zeros((3, 2), int)}, "3 columns"),
        ({"lt": np.zeros(2)}, "one row per token"),
        ({"tok": np.zeros((3, 3))}, "integer codes"),
    ],
)
def test_bad_input_is_a_clear_error(change: dict, message: str) -> None:
    spec = small_spec()
    args = {
        "lr": np.full(3, -0.1),
        "lt": np.full(3, -0.2),
        "seq": np.array([0, 0, 0]),
        "tok": np.zeros((3, 3), np.int16),
        "seqc": np.array([[0, 0], [0, 0]]),
    }
    args.update(change)
    with pytest.raises(ValueError, match=message):
        Cube.from_tokens(spec, args["lr"], args["lt"], args["seq"], args["tok"], args["seqc"])


def test_merge_refuses_another_spec() -> None:
    a, b = Cube(small_spec(3)), Cube(small_spec(128))
    with pytest.raises(ValueError, match="different dimensions"):
        a.merge(b)


def test_spec_checks_and_sizes() -> None:
    with pytest.raises(ValueError, match="unique"):
        CubeSpec((Dim("a", 2),), (Dim("a", 3),))
    with pytest.raises(ValueError, match="labels"):
        Dim("a", 2, ("x",))
    with pytest.raises(ValueError, match="function_of"):
        CubeSpec((Dim("a", 2, function_of="b"),), ())
    spec = small_spec(block_cap=3)
    # 0-d, 5 dims, 10 pairs minus (turn, turn_kind), 10 triples minus 3 with both, exact
    # step and bin
    assert len(spec.tables) == 1 + 5 + 9 + 7 + 2
    assert spec.n_cells == sum(t.cells for t in spec.tables)
    assert Cube(spec).nbytes == spec.n_cells * 10 * 8


def test_labels_of_code_sets() -> None:
    kv = Dim("kv_position", 4, ("0-1023", "1024-2047", "2048-4095", "4096-8191"))
    assert codes_label(kv, [1, 2]) == "1024-4095"
    assert codes_label(kv, [0, 2, 3]) == "0-1023,2048-8191"
    steps = Dim("step", 8)
    assert codes_label(steps, [2, 6]) == "2,6"
    assert codes_label(steps, [2, 3, 4]) == "2-4"
    gpu = Dim("gpu", 3, ("H20", "L20", "A100"), ordered=False)
    assert codes_label(gpu, [0, 2]) == "H20,A100"
    bins = Dim("bin", 3, ("[0, 0.1)", "[0.1, 0.5)", "[0.5, 1]"))
    assert codes_label(bins, [0, 1]) == "[0, 0.1)..[0.1, 0.5)"
