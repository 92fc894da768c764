"""The numpy twins of the compiled kernels (``stats/kernels_numpy.py``) give the same bits, and
``stats/kernel_choice.py`` picks them for a process's first tokens only.

Bit for bit, not to a tolerance: a report may run either (small slices the twins, large ones
the compiled loops), so a difference in the last bit would make the same tokens give different
JSON. The slices hold what can tell two implementations apart: zeros of both signs (the sign
of an extreme), probabilities on the bin edges, ratios beyond the clamps and beyond float64's
``exp``, one-token runs and empty slices."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mismatchctl import api
from mismatchctl.sample_runs import ingest_demo, load_manifest
from mismatchctl.stats import hist_lookup, kernel_choice, kernels, kernels_numpy, seqhash
from mismatchctl.stats.state import Col, empty_state
from mismatchctl.stats.tails import Tails
from mismatchctl.stats.turnruns import _thresholds
from mismatchctl.store import open_store
from tests.analysis.pairing.paired_data import responses, trainer_of, write
from tests.helpers import cli, slow_param

TOKEN_FIELDS = int(Col.IS_OOB) + 1


def _bits(a: np.ndarray) -> np.ndarray:
    """The array's bytes, so that 0.0 and -0.0 (and every last bit) differ."""
    a = np.ascontiguousarray(a)
    return a.view(np.uint8) if a.dtype.kind == "f" else a


def _same(fast: tuple, twin: tuple) -> None:
    assert len(fast) == len(twin)
    for i, (a, b) in enumerate(zip(fast, twin, strict=True)):
        assert a.dtype == b.dtype, (i, a.dtype, b.dtype)
        assert a.shape == b.shape, (i, a.shape, b.shape)
        assert np.array_equal(_bits(a), _bits(b)), f"output {i} differs"


def _slice(seed: int, n_seqs: int = 60) -> dict[str, np.ndarray]:
    """Sequences of 1-4 turns of 1-50 tokens with small and large mismatches and the edge
    cases: logprobs of -0.0 and 0.0 (ratios of both signed zeros), ratios over 20 and over
    ``EXP_MAX`` (709.78: ``exp`` overflows), equal logprobs."""
    rng = np.random.default_rng(seed)
    seq, turn, position = [], [], []
    for i in range(n_seqs):
        at = int(rng.integers(0, 40))
        for t in range(int(rng.integers(1, 5))):
            k = int(rng.integers(1, 51))
            seq += [i] * k
            turn += [t] * k
            position += list(range(at, at + k))
            at += k + int(rng.integers(0, 30))
    n = len(seq)
    lr = -rng.exponential(1.5, n)
    lt = np.minimum(lr + rng.normal(0, 0.05, n) * (1 + 20 * (rng.random(n) < 0.05)), 0.0)
    pick = rng.random(n)
    lr[pick < 0.04] = 0.0
    lt[pick < 0.02] = -0.0  # r = -0.0 - 0.0 = -0.0
    lt[(pick >= 0.04) & (pick < 0.06)] = lr[(pick >= 0.04) & (pick < 0.06)]  # r = +0.0
    wild = (pick >= 0.06) & (pick < 0.07)
    lr[wild] = -rng.uniform(25, 60, int(wild.sum()))  # |r| over the chi2 clamp of 20
    lt[wild] = -rng.uniform(0, 1, int(wild.sum()))
    huge = (pick >= 0.07) & (pick < 0.075)
    lr[huge] = -800.0  # r = 800: exp(r) overflows
    lt[huge] = 0.0
    return {
        "lr": lr,
        "lt": lt,
        "seq": np.asarray(seq, np.int64),
        "turn": np.asarray(turn, np.int32),
        "position": np.asarray(position, np.int32),
    }


def _args(d: dict[str, np.ndarray], kind: str, tails: Tails) -> tuple:
    lr, lt = d["lr"], d["lt"]
    starts = kernels.run_starts(d["seq"], d["turn"])
    pr = np.exp(lr)
    with np.errstate(over="ignore"):  # as bin_cells gives them: numpy's, over the slice
        pt, rm1 = np.exp(lt), np.expm1(lt - lr)
    # interior edges: a few fixed ones and some of the slice's own probabilities (ties)
    inner = np.unique(np.r_[1e-3, 0.1, 0.5, 0.9, np.sort(pr)[:: max(len(pr) // 7, 1)]])
    inner = inner[(inner > 0) & np.isfinite(inner)]
    empty_f, empty_i = np.zeros(0), np.zeros(0, np.int32)
    position, kv_base, kv_inner, tp_inner = empty_i, np.zeros(0, np.int64), empty_f, empty_f
    if kind in ("kv", "both"):
        position = d["position"]
        kv_base = np.random.default_rng(1).integers(0, 100, len(starts)).astype(np.int64)
        kv_inner = np.array([8.0, 32.0, 64.0, 100.0, 128.0])
    if kind in ("tp", "both"):
        tp_inner = np.array([1.0, 4.0, 16.0, 32.0])
    extra, n_extra = empty_i, 1
    if kind in ("extra", "both"):  # the entropy x trainer-probability codes of the engine
        n_extra = 9 * 11
        extra = np.random.default_rng(2).integers(0, n_extra, len(lr)).astype(np.int32)
    tables = hist_lookup.index_tables()
    assert tables is not None
    lookup = tables if kind != "nohist" else kernels_numpy_no_lookup()
    return (lr, lt, pr, pt, rm1, starts, inner, position, kv_base, kv_inner, tp_inner, extra,
            n_extra,
            _thresholds(tails), *lookup)  # fmt: skip


def kernels_numpy_no_lookup() -> hist_lookup.IndexTables:
    return hist_lookup.IndexTables(np.zeros(0), np.zeros(0, np.int32), 0, 0)


TAILS = {
    "default": Tails(),
    # a clamp of 0.01 and a tau of 1.001: most tokens take the rare branches; an IS band
    # that many tokens leave; a clamp of 1000: expm1 of the clamped ratio overflows
    "tight": Tails(clamp=0.01, tau=1.001, is_lower=0.999, is_upper=1.001),
    "loose": Tails(clamp=1000.0, tau=100.0, is_lower=0.01, is_upper=100.0),
}


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("kind", ["bins", "kv", "tp", "extra", "both", "nohist"])
@pytest.mark.parametrize("tails", sorted(TAILS))
def test_cell_sums_equal_the_compiled_kernel_bit_for_bit(seed: int, kind: str, tails: str) -> None:
    args = _args(_slice(seed), kind, TAILS[tails])
    with np.errstate(all="ignore"):
        _same(kernels.cell_sums(*args), kernels_numpy.cell_sums(*args))


def test_an_empty_slice_and_one_token() -> None:
    d = _slice(0)
    for n in (0, 1):
        part = {k: v[:n] for k, v in d.items()}
        args = _args(part, "both", Tails())
        _same(kernels.cell_sums(*args), kernels_numpy.cell_sums(*args))


def test_the_signed_zero_of_an_extreme_is_the_first_met() -> None:
    """min(a, b) keeps a on a tie in the compiled loop: the first zero of a cell decides."""
    lr = np.array([0.0, 0.0, -1.0, 0.0, 0.0, -1.0])
    lt = np.array([-0.0, 0.0, -1.5, 0.0, -0.0, -0.5])  # r: -0, +0, -.5 | +0, -0, +.5
    seq = np.array([0, 0, 0, 1, 1, 1], np.int64)
    turn = np.zeros(6, np.int32)
    d = {"lr": lr, "lt": lt, "seq": seq, "turn": turn, "position": np.arange(6, dtype=np.int32)}
    args = _args(d, "bins", Tails())
    fast, twin = kernels.cell_sums(*args), kernels_numpy.cell_sums(*args)
    _same(fast, twin)
    # cells: (seq 0, p=1): -0 then +0; (seq 0, p=e^-1): -0.5; (seq 1, p=1): +0 then -0; +0.5
    assert np.signbit(twin[3][:, Col.R_MAX]).tolist() == [True, True, False, False]
    assert np.signbit(twin[3][:, Col.R_MIN]).tolist() == [True, True, False, False]


@pytest.mark.parametrize("seed", range(5))
def test_merge_token_rows_equal_the_compiled_kernel(seed: int) -> None:
    rng = np.random.default_rng(seed)
    d = _slice(seed)
    args = _args(d, "both", Tails())
    s = kernels.cell_sums(*args)[3]
    s[rng.random(len(s)) < 0.1] = empty_state(1)[0, :TOKEN_FIELDS]  # rows with no token
    code = rng.integers(0, 9, len(s)).astype(np.int64)
    fast, twin = empty_state(9), empty_state(9)
    with np.errstate(all="ignore"):
        kernels.merge_token_rows(s, code, fast)
        kernels_numpy.merge_token_rows(s, code, twin)
    assert np.array_equal(_bits(fast), _bits(twin))


def test_histogram_lookup_and_counts_and_run_starts() -> None:
    tables = hist_lookup.index_tables()
    assert tables is not None
    rng = np.random.default_rng(3)
    r = np.r_[rng.normal(0, 1, 5000) * 10.0 ** rng.integers(-300, 300, 5000), 0.0, -0.0,
              tables.bounds[1:-1], -tables.bounds[1:-1], np.nextafter(tables.bounds[1:-1], 0)]  # fmt: skip
    assert np.array_equal(kernels.hist_index(r, *tables), kernels_numpy.hist_index(r, *tables))
    bucket = kernels.hist_index(r, *tables)
    tok_cell = rng.integers(0, 40, len(r)).astype(np.int32)
    group = rng.integers(0, 6, 40).astype(np.int64)
    assert np.array_equal(
        kernels.histogram_counts(bucket, tok_cell, group, 6),
        kernels_numpy.histogram_counts(bucket, tok_cell, group, 6),
    )
    d = _slice(2)
    assert np.array_equal(
        kernels.run_starts(d["seq"], d["turn"]), kernels_numpy.run_starts(d["seq"], d["turn"])
    )


@pytest.mark.parametrize("n", [1, 7, 384, 3000])
def test_resample_sums_and_sequence_hashes_equal_the_compiled_kernels(n: int) -> None:
    rng = np.random.default_rng(n)
    values = rng.normal(0, 1, (n, 9)) * 10.0 ** rng.integers(-8, 8, (n, 9))
    values[rng.random((n, 9)) < 0.05] = -0.0
    picks = rng.integers(0, n, (50, n), dtype=np.int32)
    fast, twin = kernels.resample_sums(values, picks), kernels_numpy.resample_sums(values, picks)
    assert np.array_equal(_bits(fast), _bits(twin))
    tokens = n * 20
    ids = rng.integers(0, 2**31, tokens).astype(np.int64).view(np.uint64)
    missing = rng.random(tokens) < 0.01
    position = rng.integers(0, 5000, tokens).astype(np.int32)
    bits = rng.normal(0, 1, tokens).view(np.uint64)
    starts = np.unique(np.r_[0, rng.integers(1, tokens, n - 1)]).astype(np.int64)
    for a, b in zip(
        seqhash.sequence_hashes(ids, missing, position, bits, starts),
        kernels_numpy.sequence_hashes(ids, missing, position, bits, starts),
        strict=True,
    ):
        assert a.dtype == b.dtype and np.array_equal(a, b)


def test_the_twins_serve_a_process_until_its_budget_is_spent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(kernel_choice, "_compiled", None)
    monkeypatch.setattr(kernel_choice, "_spent", 0)
    monkeypatch.setattr(kernel_choice, "NUMPY_BUDGET", 1000)
    monkeypatch.setattr(kernel_choice, "NUMPY_CALL", 700)
    assert kernel_choice.kernels_for(800) is kernels  # a call too large for the twins
    monkeypatch.setattr(kernel_choice, "_compiled", None)
    assert kernel_choice.kernels_for(600) is kernels_numpy
    assert kernel_choice.kernels_for(0) is kernels_numpy
    assert kernel_choice.hashes_for(16) is kernels_numpy  # 16 tokens hashed: 1 of the budget
    assert kernel_choice.kernels_for(500) is kernels  # over the budget: compiled, for good
    assert kernel_choice.kernels_for(1) is kernels
    assert kernel_choice.hashes_for(1) is seqhash


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("twins") / "store"
    ingest_demo(open_store(path), [r for r in load_manifest() if r.name in ("ref", "faulty-attn")])
    # the same responses scored by two trainers: `compare` pairs them (the paired bootstrap)
    resp = responses(seed=3)
    base = path.parent
    api.ingest([str(write(base / "a", resp, trainer_of(resp, 1, 0.05)))], "pa", store=path)
    api.ingest([str(write(base / "b", resp, trainer_of(resp, 2, 0.15)))], "pb", store=path)
    return path


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(("report", "ref", "faulty-attn", "--by-gpu", "--by", "kv_position",
                      "--by", "turn_kind,turn_position", "--by", "step,bin"), id="report"),
        pytest.param(("compare", "ref", "faulty-attn"), id="compare"),
        slow_param(("compare", "pa", "pb"), id="compare-paired"),
        slow_param(("diagnose", "faulty-attn", "--baseline", "ref"), id="diagnose"),  # its report's part
    ],
)  # fmt: skip
def test_a_view_gives_the_same_json_with_either_kernels(
    two_runs: Path, args: tuple[str, ...], monkeypatch: pytest.MonkeyPatch, no_part_cache: None
) -> None:
    out = {}
    for name, budget in (("twins", 1 << 40), ("compiled", 0)):
        monkeypatch.setattr(kernel_choice, "_compiled", None)
        monkeypatch.setattr(kernel_choice, "_spent", 0)
        monkeypatch.setattr(kernel_choice, "NUMPY_BUDGET", budget)
        monkeypatch.setattr(kernel_choice, "NUMPY_CALL", budget)
        ran = cli(*args, "--store", str(two_runs), "--json", "-", "-q")
        assert ran.code in (0, 3), ran.err  # diagnose: 3 when a check fails
        out[name] = ran.out
        if args[1] == "pa":
            assert json.loads(ran.out)["comparison"]["paired"]["paired"] is True
        assert (kernel_choice._compiled is None) == (name == "twins")
    assert json.loads(out["twins"])  # the same bytes, not only equal numbers
    assert out["twins"] == out["compiled"]
