"""One knob of each fault class through its range (sample_data/gen/family_sweep.py, family.py
--sweep): weights a fraction of an RL step behind lie on the line between two checkpoints, the
catalogue holds its baselines and one class per single fault, and --sweep refuses the options
whose runs it does not make."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.sample_data.family_deps import family_deps

torch = family_deps()

import family  # noqa: E402
from gen.family_model import FamilyModel, llama_config, new_model  # noqa: E402
from gen.family_runs import FamilyRun, behind, check_family  # noqa: E402
from gen.family_sweep import SWEEP  # noqa: E402

CAUSES = {"semantics", "policy", "code_path", "hardware", "precision", "template"}


def two_checkpoints() -> FamilyModel:
    torch.manual_seed(0)
    config = llama_config(64)
    before = new_model(config).state_dict()
    now = new_model(config).state_dict()
    return FamilyModel(None, config, [before, now], [before, now], before, [])


def test_weights_behind_lie_on_the_line_back_to_the_previous_step() -> None:
    model = two_checkpoints()
    now, before = model.checkpoints[1], model.checkpoints[0]
    for fraction in (0.1, 0.5):
        state = behind(model, 1, fraction)
        for name, value in state.items():
            want = now[name] + fraction * (before[name] - now[name])
            assert torch.allclose(value, want), name
    moved = [n for n in now if not torch.equal(now[n], before[n])]
    assert moved and all(not torch.equal(behind(model, 1, 0.1)[n], now[n]) for n in moved)


def test_the_sweep_holds_its_baselines_and_a_class_per_fault() -> None:
    check_family(SWEEP)
    names = [r.name for r in SWEEP]
    assert names[:2] == ["f-h-a", "f-h-b"]
    faults = [r for r in SWEEP if r.kind in ("fault", "combo")]
    assert len(faults) >= 30
    for run in faults:
        assert set(run.cause.split("+")) <= CAUSES, run.name
        assert run.size in ("subtle", "loud"), run.name
        assert run.baseline == "f-h-a", run.name
    for knob in ("s-temp-", "s-topp-", "s-rep-", "s-behind-"):  # each swept over four sizes or more
        assert sum(n.startswith(knob) for n in names) >= 4, knob


def test_a_fraction_outside_the_step_is_refused() -> None:
    run = FamilyRun("x", "fault", "policy", "", "subtle", "f-h-a", weights="behind:1.5")
    with pytest.raises(AssertionError, match="x"):
        check_family((*SWEEP, run))


@pytest.mark.parametrize(
    "other", [["--moe"], ["--unseen"], ["--context", "1024", "--long-responses"]]
)
def test_the_sweep_refuses_what_it_does_not_make(other: list[str], tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="--sweep"):
        family.main(["--out", str(tmp_path), "--sweep", *other])
    assert not (tmp_path / "cache").exists()
