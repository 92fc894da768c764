"""``PartFold``: a part's passes computed once from its slices' runs and cells equal the groups of
each slice computed alone and merged (the engine's way before, kept here as the oracle): the same
groups and labels, every state within 1e-12, the r-histograms' counts exactly."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from mismatchctl import schema as S
from mismatchctl.engines.keys import PartKeys, decode, group_codes, key_labels
from mismatchctl.engines.part_fold import PartFold
from mismatchctl.engines.plan import DEFAULT_BINNING, plan
from mismatchctl.stats import parse_bins
from mismatchctl.stats.turnruns import bin_cells, run_partials, run_starts, token_partials

EDGES = parse_bins("log")
SPLITS = [("run",), ("step", "gpu"), ("turn_kind",), ("step", "bin"), ("gpu", "turn_kind", "bin")]


def _slice(seed: int, steps: list[int], gpus: list[str]) -> pa.Table:
    """Whole sequences of a few turns each, their step and gpu drawn from the lists given."""
    rng = np.random.default_rng(seed)
    seq, turn, step, gpu = [], [], [], []
    for s in range(40):
        n = int(rng.integers(5, 60))
        seq += [seed * 1000 + s] * n
        turn += sorted(rng.integers(0, 3, n).tolist())
        step += [int(rng.choice(steps))] * n
        gpu += [str(rng.choice(gpus))] * n
    lr = -rng.exponential(1.0, len(seq))
    lt = lr + rng.normal(0.0, 0.05, len(seq))
    return pa.table({
        S.STEP: np.array(step, np.int64), S.SEQ: np.array(seq, np.int64),
        S.TURN: np.array(turn, np.int32), S.ROLLOUT: lr, S.TRAINER: lt,
        S.GPU: pa.array(gpu).dictionary_encode(),
    })  # fmt: skip


def _cells(table: pa.Table) -> tuple[object, PartKeys]:
    keys = PartKeys(table, "r", {}, EDGES)
    seq, turn = keys.column(S.SEQ), keys.column(S.TURN)
    starts = run_starts(seq, turn)
    cells = bin_cells(
        keys.column(S.ROLLOUT), keys.column(S.TRAINER), seq, turn, EDGES, starts=starts
    )
    return cells, keys.at(starts)


def _slice_by_slice(tables: list[pa.Table], passes: list) -> list[dict]:
    """Each slice's groups alone, merged in slice order."""
    out: list[dict] = [{} for _ in passes]
    for table in tables:
        cells, run_keys = _cells(table)
        for total, p in zip(out, passes, strict=True):
            along = p.keys[: -len(p.token)] if p.token else p.keys
            code, size, labels = group_codes(run_keys, along)
            if p.token:
                parts = token_partials(cells, code, size, p.uses, p.with_hist)
                labels = [*labels, *(key_labels(k, EDGES) for k in p.token)]
            else:
                parts = run_partials(cells.runs, code, size)
            for i, part in enumerate(parts):
                if part.tokens > 0:
                    key = decode(i, labels)
                    total[key] = total[key].merge(part) if key in total else part
    return out


@pytest.mark.parametrize("n_slices", [1, 3])
def test_a_part_folded_once_equals_its_slices_merged(n_slices: int) -> None:
    # later slices bring steps and gpus the first did not have: the groups' index grows
    tables = [_slice(i, [i, i + 1], ["A100", "H20"][: 1 + i % 2]) for i in range(n_slices)]
    passes = plan(SPLITS)
    fold = PartFold(passes, EDGES, DEFAULT_BINNING)
    for table in tables:
        fold.add(*_cells(table))
    got, want = fold.groups(), _slice_by_slice(tables, passes)
    assert any(p.with_hist for p in passes) and any(not p.token for p in passes)
    for g, w in zip(got, want, strict=True):
        assert set(g) == set(w)
        for key, part in w.items():
            np.testing.assert_allclose(g[key].state, part.state, rtol=1e-12, atol=1e-300)
            if part.hist is not None:
                assert np.array_equal(g[key].hist, part.hist)
            else:
                assert g[key].hist is None


def test_a_part_without_slices_has_no_groups() -> None:
    passes = plan(SPLITS)
    assert PartFold(passes, EDGES, DEFAULT_BINNING).groups() == [{} for _ in passes]
