"""family.py --context and --long-responses (sample_data/family.py, gen/family_runs.py): the
default context leaves names, labels and runs as they were, a run's rollouts stop at its model's
trained context, and the long-response catalogue is well-formed; on a tiny random Llama."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tests.sample_data.family_deps import family_deps

torch = family_deps()

import family  # noqa: E402
from gen.corpus import prompt_line_sources, prompt_lines  # noqa: E402
from gen.family_engine import EngineKernel  # noqa: E402
from gen.family_model import (  # noqa: E402
    CONTEXT,
    VOCAB,
    FamilyModel,
    FamilyTraining,
    llama_config,
    new_model,
    train_tokenizer,
)
from gen.family_runs import (  # noqa: E402
    FAMILY,
    LONG_RESPONSES,
    MAX_NEW,
    MIN_NEW,
    MODEL,
    check_family,
    healthy,
    make_samples,
    roll,
)


@pytest.fixture(scope="module")
def tiny() -> FamilyModel:
    """A tiny random Llama over the family's BPE, two RL checkpoints, the default context."""
    config = dataclasses.replace(llama_config(), hidden_size=32, intermediate_size=48,
                                 num_hidden_layers=1)  # fmt: skip
    torch.manual_seed(0)
    state = new_model(config).state_dict()
    return FamilyModel(train_tokenizer(), config, [state, state], [state, state], state, [])


def test_the_default_context_keeps_names_labels_and_runs() -> None:
    assert CONTEXT == 320 and FamilyTraining().context == CONTEXT
    assert FamilyTraining().batch == 16
    assert family.context_suffix(CONTEXT) == ""
    assert family.label_of(VOCAB, None, "llama") == MODEL == "llama-4x128-bpe1024"
    assert family.label_of(VOCAB, None, "llama", 1024) == "llama-4x128-bpe1024-c1024"
    assert family.label_of(8192, None, "llama", 1024) == "llama-4x128-bpe8192-c1024"
    assert all((r.max_new, r.min_new) == (MAX_NEW, MIN_NEW) == (48, 16) for r in FAMILY)


def test_each_context_has_its_own_cache_file(tmp_path: Path, tiny: FamilyModel) -> None:
    """load_model reads family-seed0.pt at the default context, family-seed0-c1024.pt at 1024
    (each a saved model that it would otherwise train), and the model carries its context."""
    for name, losses in (("family-seed0.pt", [1.0]), ("family-seed0-c1024.pt", [2.0])):
        saved = dataclasses.replace(tiny, tokenizer=None, losses=losses)
        torch.save({"model": saved, "tokenizer": tiny.tokenizer.to_str()}, tmp_path / name)
    plain = family.load_model(tmp_path, 0, VOCAB)
    long = family.load_model(tmp_path, 0, VOCAB, context=1024)
    assert (plain.losses, plain.context) == ([1.0], CONTEXT)
    assert (long.losses, long.context) == ([2.0], 1024)


def _rolled(run: object, model: FamilyModel, step: int = 1) -> list:
    samples = make_samples(run, model, prompt_lines(), prompt_line_sources(), step, 0)  # type: ignore[arg-type]
    roll(run, model, samples, step, 0)  # type: ignore[arg-type]
    return samples


def test_a_runs_rollouts_stop_at_its_models_context(tiny: FamilyModel) -> None:
    short = dataclasses.replace(tiny, context=300)
    many = healthy("many", "many short turns", turns=(8, 12), max_new=24, min_new=8, prompts=3)
    samples = _rolled(many, short)
    assert all(len(s.sequence) <= 300 for s in samples)
    assert any(s.n_turns < 8 for s in samples)  # the context cut turns off
    assert all(len(s.stopped) == s.n_turns for s in samples)
    assert max(len(s.sequence) for s in samples) > 300 - 24 - 40  # it filled the context
    # one turn longer than the context leaves: the turn ends at it
    one = healthy("one", "one long turn", turns=(1, 1), max_new=700, min_new=600, prompts=2)
    samples = _rolled(one, short)
    assert max(len(s.sequence) for s in samples) == 300
    # the same run at a longer context goes on
    wide = _rolled(many, dataclasses.replace(tiny, context=1024))
    assert sum(s.n_turns for s in wide) > sum(len(s.stopped) for s in _rolled(many, short))
    assert all(len(s.sequence) <= 1024 for s in wide)


def test_the_default_rollouts_stay_within_320(tiny: FamilyModel) -> None:
    run = next(r for r in FAMILY if r.name == "f-h-many-turns")
    samples = _rolled(dataclasses.replace(run, prompts=2), tiny)
    assert all(len(s.sequence) <= 320 for s in samples)
    assert all(len(t) <= 48 for s in samples for t in _turns(s.mask))


def _turns(mask: list[int]) -> list[list[int]]:
    """The model turns' positions of a response mask."""
    turns: list[list[int]] = []
    for i, m in enumerate(mask):
        if m:
            if not i or not mask[i - 1]:
                turns.append([])
            turns[-1].append(i)
    return turns


def test_the_long_catalogue_is_well_formed() -> None:
    check_family(LONG_RESPONSES)
    names = [r.name for r in LONG_RESPONSES]
    assert names[:4] == ["f-L-h-a", "f-L-h-b", "f-L-h-c", "f-L-h-one-turn"]
    kinds = [r.kind for r in LONG_RESPONSES]
    assert kinds == sorted(kinds, key=lambda k: k != "healthy")  # healthy first
    base = {r.name: r.baseline for r in LONG_RESPONSES}
    assert base["f-L-h-a"] == "f-L-h-b"
    assert all(b == "f-L-h-a" for n, b in base.items() if n != "f-L-h-a")
    healthy_runs = [r for r in LONG_RESPONSES if r.kind == "healthy"]
    assert len({r.loader for r in healthy_runs}) == len(healthy_runs)
    assert next(r for r in healthy_runs if r.name == "f-L-h-c").sampler.temperature == 0.6
    for r in LONG_RESPONSES:  # ~600 tokens a response at least, ~32 sequences a step
        assert r.turns[0] * r.min_new >= 500 and r.prompts * r.group == 32, r.name
    faults = {r.name: r for r in LONG_RESPONSES if r.kind == "fault"}
    assert {(r.cause, r.weights, r.kernel) for r in faults.values()} == {
        ("policy", "stale", EngineKernel()),
        ("precision", "current", EngineKernel(fp8_kv=True)),
    }


def test_long_responses_need_the_long_context(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit, match="--context 1024"):
        family.main(["--out", str(tmp_path), "--long-responses", "--list"])
    with pytest.raises(SystemExit, match="out of range"):
        family.main(["--out", str(tmp_path), "--context", "2048", "--list"])
    assert family.main(["--out", str(tmp_path), "--context", "1024", "--long-responses",
                        "--list"]) == 0  # fmt: skip
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert listed == [r.name for r in LONG_RESPONSES]
