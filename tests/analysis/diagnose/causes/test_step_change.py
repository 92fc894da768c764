"""``causes/step_change.py``: what changed at some steps whose responses are hot throughout:
the sampling (mass removed there), the weights (token ids moved on their own), or the engine's
arithmetic (neither: the code path of those steps)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mismatchctl import api
from mismatchctl.analysis.diagnose.advice import STEPS_ADVICE
from mismatchctl.analysis.diagnose.causes import code_path, policy, semantics
from mismatchctl.analysis.diagnose.causes.step_change import ID_WEIGHTS, WITHIN_DRIFT
from mismatchctl.engines import plan as K
from tests.planted import diagnosis

SAMPLE_RUNS = Path(__file__).parents[4] / "sample_data" / "runs"


def test_top_p_turned_on_at_a_step_is_the_semantics_of_those_steps(
    held_out_store: Path,
) -> None:
    """``un-topp-restart`` (top-p 0.9 from step 4 on, the processed logprobs returned): steps
    4-6 hot throughout, their mean ratio 50 standard errors under 1 and 23x their K3 per token,
    the other steps' at 1: the semantics of those steps, its advice the engine's sampling
    there; the code path of the steps is its runner-up, and says why."""
    cause = diagnosis(held_out_store, "un-topp-restart").section_dict()["cause"]
    assert (cause["key"], cause["variant"]) == ("semantics", semantics.AT_STEPS)
    assert (
        cause["where"] == "steps 4, 5, 6" and "mass removed on the rollout side" in cause["because"]
    )
    assert cause["next"].startswith("steps 4, 5, 6: the engine's sampling changed there")
    path = next(r for r in cause["runner_ups"] if r["key"] == "code_path")
    assert path["lost"].startswith("the same steps, hot throughout their responses")


def test_an_fp8_cache_from_a_step_on_is_the_engines_arithmetic(held_out_store: Path) -> None:
    """``un-fp8kv-restart`` (an fp8 KV cache from step 4 on): hot throughout, no mass removed,
    no token id moved on its own (0.0% of r's variance): the engine changed at those steps,
    the code path of the steps, whose advice asks what changed there."""
    found = diagnosis(held_out_store, "un-fp8kv-restart").section_dict()
    cause = found["cause"]
    assert (cause["key"], cause["variant"]) == ("code_path", code_path.PLACES[K.STEP])
    assert "no id moved on its own" in cause["because"] and cause["next"].endswith(STEPS_ADVICE)
    shift = next(c for c in found["checks"] if c["name"] == "token_shift")
    assert shift["evidence"]["id_share"] < ID_WEIGHTS


@pytest.fixture(scope="module")
def sample_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    store = tmp_path_factory.mktemp("spiky") / "store"
    api.ingest([SAMPLE_RUNS / "spiky-6"], "spiky-6", store=store)
    return store


def test_a_replicas_kernel_on_every_token_of_two_steps_stays_a_code_path(
    sample_store: Path,
) -> None:
    """The sample data's ``spiky-6``: steps 3 and 5 served by a replica whose faulty split-KV
    combine runs at every batch size and KV length. Hot throughout those steps, its ids move
    on their own less than other weights move them (0.52% of r's variance, the weights of
    every corpus 0.71% and more): the code path of those steps."""
    cause = api.diagnose("spiky-6", store=sample_store).section_dict()["cause"]
    assert cause["key"] == "code_path" and cause["where"] == "steps 3, 5"
    assert "hot throughout" in cause["because"] and "no id moved on its own" in cause["because"]


def test_ids_moved_alike_at_every_step_are_not_what_changed_at_some(
    held_out_store: Path,
) -> None:
    """``w90-combo-tpl-splitkv`` (a re-rendered tool tag at every step beside a split-KV merge
    that makes five steps of six hot): the ids' own shifts carry more of ``r``'s variance than
    the weights' sign asks (the tag's ids), but the hot steps move them exactly as the other
    step does (nothing beyond it, the shifts correlated 0.92): not other weights at those steps
    (it was named ``policy``) but the engine's arithmetic there, the code path of the steps."""
    found = diagnosis(held_out_store, "w90-combo-tpl-splitkv").section_dict()
    cause = found["cause"]
    assert (cause["key"], cause["variant"]) == ("code_path", code_path.PLACES[K.STEP])
    assert "as at the other steps; beyond the same ids' shift" in cause["because"]
    shift = next(c for c in found["checks"] if c["name"] == "token_shift")
    assert shift["evidence"]["id_share"] >= ID_WEIGHTS
    assert "policy" not in {a["key"] for a in cause.get("also", [])}


def test_ids_drifting_within_the_hot_steps_are_the_weights(held_out_store: Path) -> None:
    """``s29-reload-jump`` (layer 2 kept at step 3's weights from step 4 on): its ids carry
    0.57% of r's variance over the run, under what the run's share asks, but within steps 4-6
    their shifts drift (7.7% of the first half's variance: each step's gap to the kept layer is
    another), where the engine's arithmetic moves the same ids alike at every step it runs:
    the policy of those steps, alone and over its baseline (it was their code path)."""
    for baseline in (None, "s29-h-b"):
        found = diagnosis(held_out_store, "s29-reload-jump", baseline=baseline).section_dict()
        cause = found["cause"]
        assert (cause["key"], cause["variant"]) == ("policy", policy.AT_STEPS), baseline
        assert cause["where"] == "steps 4, 5, 6"
        assert "the shifts drift within those steps" in cause["because"]
        shift = next(c for c in found["checks"] if c["name"] == "token_shift")
        assert shift["evidence"]["id_share"] < ID_WEIGHTS


def test_a_faulty_kernel_from_a_step_drifts_less_than_the_weights(held_out_store: Path) -> None:
    """``un-fp8kv-splitkv-restart`` (the faulty kernel from step 4 beside an fp8 cache at every
    step): steps 4-6 hot throughout, their ids' shifts as alike in the first half of them as in
    the second (0.00%, under ``WITHIN_DRIFT``): the code path of the steps, the drift said."""
    cause = diagnosis(held_out_store, "un-fp8kv-splitkv-restart").section_dict()["cause"]
    assert (cause["key"], cause["variant"]) == ("code_path", code_path.PLACES[K.STEP])
    assert "drifting within the steps 0.0% of the first half's variance" in cause["because"]
    assert f"(under the {WITHIN_DRIFT:.1%} that names other weights by itself)" in cause["because"]


def test_stale_weights_at_their_hot_step_keep_the_policy(held_out_store: Path) -> None:
    """The Llama's ``f-pol-stale`` (weights an RL step behind, step 1 hot throughout): its
    ids move there beyond how they move at the other steps (2.0% of the step's variance, 0.07% at the others), so
    the steps' change stays other weights."""
    cause = diagnosis(held_out_store, "f-pol-stale").section_dict()["cause"]
    assert (cause["key"], cause["variant"]) == ("policy", policy.AT_STEPS)
    assert "beyond the same ids' shift at the other steps" in cause["because"]
