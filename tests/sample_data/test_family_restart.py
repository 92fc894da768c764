"""Faults from a step on (sample_data/gen/family_restart.py, family.py --restart): before the
middle step the engine is the plain one serving the current weights, from it on the run's kernel
and weights; the catalogue holds its baselines and a planted class per fault, and --restart
refuses the options whose runs it does not make."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.sample_data.family_deps import family_deps

torch = family_deps()

import family  # noqa: E402
from gen.family_engine import EngineKernel  # noqa: E402
from gen.family_model import FamilyModel, llama_config, new_model  # noqa: E402
from gen.family_restart import FROM, RESTART  # noqa: E402
from gen.family_runs import STEPS, check_family, engine_for  # noqa: E402


def checkpoints() -> FamilyModel:
    """A model whose every step has its own random weights (and its own lagging copy)."""
    torch.manual_seed(0)
    config = llama_config(64)
    states = [new_model(config).state_dict() for _ in range(STEPS + 1)]
    lagging = [new_model(config).state_dict() for _ in range(STEPS + 1)]
    return FamilyModel(None, config, states, lagging, states[0], [])


def served(engine: torch.nn.Module, state: dict[str, torch.Tensor]) -> bool:
    """Whether the engine's weights are ``state``'s rounded to bf16."""
    own = engine.state_dict()
    return all(torch.equal(own[k], v.to(own[k].dtype)) for k, v in state.items() if k in own)


def test_the_fault_starts_at_the_middle_step() -> None:
    model = checkpoints()
    by_name = {r.name: r for r in RESTART}
    for step in range(1, STEPS + 1):
        later = step >= FROM
        stale = engine_for(by_name["f-r-stale"], model, step, faulty=False)
        assert served(stale, model.checkpoints[step - 1 if later else step]), step
        lag = engine_for(by_name["f-r-lag"], model, step, faulty=False)
        assert served(lag, model.lagging[step] if later else model.checkpoints[step]), step
        split = engine_for(by_name["f-r-split"], model, step, faulty=False)
        kernel = by_name["f-r-split"].kernel if later else EngineKernel()
        assert split.config.engine_kernel == kernel and kernel.split_at == (16 if later else 0)
        assert served(split, model.checkpoints[step])


def test_the_catalogue_holds_its_baselines_and_a_class_per_fault() -> None:
    check_family(RESTART)
    assert [r.name for r in RESTART[:2]] == ["f-h-a", "f-h-b"]
    faults = RESTART[2:]
    assert {r.cause for r in faults} == {"precision", "code_path", "policy"}
    assert all(r.from_step == FROM and r.kind == "fault" for r in faults)
    assert all(r.from_step == 0 for r in RESTART[:2])


@pytest.mark.parametrize("other", [["--moe"], ["--unseen"], ["--sweep"]])
def test_restart_refuses_what_it_does_not_make(other: list[str], tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="--restart"):
        family.main(["--out", str(tmp_path), "--restart", *other])
    assert not (tmp_path / "cache").exists()
