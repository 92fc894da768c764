"""A part's excess as mass removed on one side (``analysis/diagnose/causes/processor.py``): the
semantics names a code path's part whose mean ratio falls, the code paths' parts keep theirs."""

from __future__ import annotations

from pathlib import Path

import pytest

from mismatchctl.analysis.diagnose.causes.processor import _finer, removed
from mismatchctl.stats.signed_parts import OneSigned
from tests.analysis.diagnose.stores import calibration


def _one(deficit: float, z: float, excess: float, below_z: float = 9.9) -> OneSigned:
    return OneSigned(7600, deficit, z, excess, 0.64, 0.54, below_z)


def test_mass_removed_needs_a_deficit_many_times_the_excess() -> None:
    """``sem-badwords-subtle``'s part (a deficit 13x its excess K3) against a code path's
    largest (1.6x, not significant), a stop fault's (0.68x at z -16) and loud noise (0.2x)."""
    assert removed(_one(-0.0052, -12.9, 0.0004))
    assert not removed(_one(-0.00054, -1.35, 0.000335))  # cp-prefix-subtle
    assert not removed(_one(-0.0324, -15.8, 0.0475))  # stop-zero-turn-ends
    assert not removed(_one(-0.0156, -4.5, 0.081))  # a loud split-KV path
    assert not removed(_one(-0.0052, -12.9, 0.0004, below_z=1.0))  # no more tokens below 0
    assert not removed(_one(-0.0052, -12.9, -0.0001))  # a part no hotter than the rest


def test_the_cubes_turn_positions_map_onto_the_finer_cells() -> None:
    """The cube's first 16 tokens of a turn are the cells' first 8 and next 8."""
    assert _finer([0]) == [0, 1]
    assert _finer([1, 2]) == [2, 3]
    assert _finer([4]) == [5]


@pytest.mark.parametrize("baseline", [None, "h-b"])
def test_a_faint_bad_words_mask_is_named_by_the_mass_its_part_lacks(
    calibration_store: Path, baseline: str | None
) -> None:
    """A bad-words mask on ``#`` in the engine (3.5x a healthy run), under the run-wide checks'
    thresholds: the first 16 tokens of each turn are 4.3x the rest, and their mean ratio lacks
    13x their excess K3. The semantics is named from that part; the code path loses on the
    evidence against it, and the burst at the turns' starts it makes is no second cause."""
    cause = calibration._cause(calibration_store, "sem-badwords-subtle", baseline)["cause"]
    assert cause["key"] == "semantics" and "logit processor" in cause["variant"]
    assert cause["where"] == "turn_position 0-15" and cause["also"] == []
    assert "mass removed on one side" in cause["because"]
    assert "bad-words mask" in cause["next"]
    rows = {r["key"]: r for r in cause["runner_ups"]}
    assert any("mass removed" in a for a in rows["code_path"]["against"])
    assert rows["template"]["lost"] == f"{cause['label']} sets off its checks too"


@pytest.mark.parametrize(
    "run", ["cp-prefill-pad", "cp-chunk-merge", "cp-splitkv-subtle", "hw-l20-splitkv-subtle"]
)
def test_a_code_paths_part_is_two_signed(calibration_store: Path, run: str) -> None:
    """A prefill path at the turns' starts (the mask's part), a chunk merge, a split-KV path
    alone or on one gpu: noise of a larger scale keeps the part's mean ratio, nothing against
    the path and no semantics."""
    cause = calibration._cause(calibration_store, run)["cause"]
    rows = {r["key"]: r for r in [cause, *cause["runner_ups"]]}
    assert cause["key"] != "semantics" and rows["semantics"]["verdict"] == "ok"
    assert not any("mass removed" in a for a in rows["code_path"]["against"])
