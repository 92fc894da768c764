"""What every `whatif --preset` shares (stats/presets/base.py): the state's common columns, written
once (``put_common``), and whatif's common numbers of them (``common_metrics``); each preset's
own numbers are tested against its framework in tests/stats/presets/test_preset_*.py."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from mismatchctl.stats import registry as M
from mismatchctl.stats.presets import base
from mismatchctl.stats.presets.base import (
    COUNTS,
    WEIGHTS,
    Chunk,
    Layout,
    common_metrics,
    parse_sets,
    put_common,
)
from mismatchctl.stats.presets.registry import all_presets

VALID = {  # the presets whose defaults correct nothing: a correction each
    "verl-rollout-corr": ["rollout_is=token"],
    "skyrl-off-policy": ["tis_ratio_type=token"],
}


def test_common_metrics_of_a_known_state() -> None:
    # weights 0, 1, 2 and 0 over 4 tokens of 2 sequences; one token (and so one sequence) masked
    v = dict(tokens=4.0, seqs=2.0, masked=1.0, seq_masked=1.0, app_sum=3.0, app_sq=5.0,
             app_min=0.0, app_max=2.0)  # fmt: skip
    got = common_metrics(v)
    assert got == {
        M.TOKENS: 4,
        M.SEQUENCES: 2,
        M.TOKEN_FRACTION: 0.25,
        M.SEQUENCE_FRACTION: 0.5,
        M.WEIGHT_MEAN: 0.75,
        M.WEIGHT_STD: math.sqrt(5 / 4 - 0.75**2),
        M.WEIGHT_MIN: 0.0,
        M.WEIGHT_MAX: 2.0,
        M.ESS: 3.0**2 / (4 * 5.0),
    }
    assert common_metrics(v | {"app_sum": 0.0, "app_sq": 0.0})[M.ESS] is None  # every weight 0


def test_put_common_writes_the_columns_per_cell() -> None:
    lay = Layout([*COUNTS, *WEIGHTS])
    out = lay.empty(2)
    code = np.array([0, 0, 0, 1, 1])  # sequences 7 (3 tokens, cell 0) and 9 (2 tokens, cell 1)
    chunk = Chunk(np.zeros(5), np.zeros(5), np.array([7, 7, 7, 9, 9]), code, 2)
    applied = np.array([1.0, 0.0, 2.0, np.inf, 0.5])
    put_common(out, lay.index, chunk, np.array([0, 3]), applied == 0.0, applied)
    col = lay.index
    assert out[:, col["tokens"]].tolist() == [3.0, 2.0]
    assert out[:, col["seqs"]].tolist() == [1.0, 1.0]
    assert out[:, col["masked"]].tolist() == [1.0, 0.0]
    assert out[:, col["seq_masked"]].tolist() == [1.0, 0.0]
    assert out[:, col["app_sum"]].tolist() == [3.0, np.inf]
    assert out[:, col["app_sq"]].tolist() == [5.0, np.inf]
    assert out[:, col["app_min"]].tolist() == [0.0, 0.5]
    assert out[:, col["app_max"]].tolist() == [2.0, np.inf]


@pytest.mark.parametrize("name", sorted(all_presets()))
def test_every_preset_states_the_common_columns_and_numbers(name: str) -> None:
    preset = all_presets()[name]
    config = parse_sets(preset, VALID.get(name, []))
    preset.check(config)
    names = preset.fields(config)
    assert set(COUNTS) | set(WEIGHTS) <= set(names)
    rng = np.random.default_rng(3)
    lr = -rng.exponential(1.0, 60)
    lt = lr + rng.normal(0.0, 0.3, 60)
    seq = np.repeat(np.arange(6), 10)
    state = preset.compute(lr, lt, seq, np.zeros(60, np.int64), 1, config)[0]
    got = preset.finalize(state, config)
    v = dict(zip(names, state.tolist(), strict=True))
    assert (got[M.TOKENS], got[M.SEQUENCES]) == (60, 6)
    assert 0.0 <= v["app_min"] <= got[M.WEIGHT_MEAN] <= v["app_max"]
    assert got[M.WEIGHT_MEAN] == pytest.approx(v["app_sum"] / 60, rel=1e-12)
    empty = preset.compute(lr[:0], lt[:0], seq[:0], np.zeros(0, np.int64), 1, config)[0]
    assert preset.finalize(empty, config)[M.TOKENS] == 0


def test_every_preset_module_is_listed() -> None:
    """The registry lists one preset of every framework's module of ``stats/presets/`` (a new
    module that it misses would never reach ``whatif --preset``)."""
    package = Path(base.__file__).parent
    modules = {f"{base.__package__}.{p.stem}" for p in package.glob("*.py")}
    modules -= {f"{base.__package__}.{name}" for name in ("__init__", "base", "registry")}
    assert sorted(type(p).__module__ for p in all_presets().values()) == sorted(modules)
