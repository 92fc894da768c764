"""``causes/whole_steps.py``: some steps hot at every position of their responses are other
weights at those steps; a code path those steps take runs on some tokens of them."""

from __future__ import annotations

from pathlib import Path

from mismatchctl.analysis.diagnose.advice import STEPS_ADVICE
from mismatchctl.analysis.diagnose.causes import policy
from tests.planted import diagnosis


def test_stale_weights_whose_first_step_stands_out_alone_are_the_policy(
    held_out_store: Path,
) -> None:
    """``f-pol-stale`` alone (the Llama family, seed 0: weights a checkpoint behind): without a
    baseline the level is not seen, and step 1 stands 2.4x out of the others. Within step 1
    no turn, KV range or position in the turn is hotter than the rest: the policy, its part
    the step, the code path of that step its runner-up, the advice the weight versions
    first."""
    cause = diagnosis(held_out_store, "f-pol-stale").section_dict()["cause"]
    assert (cause["key"], cause["variant"]) == ("policy", policy.AT_STEPS)
    assert cause["where"] in ("step 1", "steps 1") and cause["also"] == []
    assert "hot throughout" in cause["because"] and "of 2 turn kinds" in cause["because"]
    assert cause["next"].startswith("the responses of step")
    assert "compare the weight versions" in cause["next"]
    path = next(r for r in cause["runner_ups"] if r["key"] == "code_path")
    assert path["verdict"] == "fail" and path["where"] == cause["where"]


def test_a_split_kv_path_of_some_steps_is_placed_within_them(held_out_store: Path) -> None:
    """``f-cp-splitkv-loud`` alone (the same family's off-by-one split-KV merge): its elevated
    steps are named, but within them the first turns are far hotter than the later ones (the
    KV lengths the faulty merge takes): a code path, alone and over its baseline."""
    for base in (None, "f-h-a"):
        cause = diagnosis(held_out_store, "f-cp-splitkv-loud", base).section_dict()["cause"]
        assert cause["key"] == "code_path" and cause["where"].startswith("step")
        assert "hot throughout" not in cause["because"] and cause["next"].endswith(STEPS_ADVICE)


def test_a_healthy_run_stays_quiet(held_out_store: Path) -> None:
    """``f-h-a``, alone and over the stale run: no alarm, nothing renamed."""
    for base in (None, "f-pol-stale"):
        found = diagnosis(held_out_store, "f-h-a", base).section_dict()
        assert (found["verdict"], found["cause"]["key"]) == ("ok", "none")


def test_weights_behind_beside_top_p_alone_are_told_by_their_steps(held_out_store: Path) -> None:
    """``f-combo-stale-topp`` alone (top-p 0.9 beside weights a checkpoint behind, the Llama
    family): the truncation is named, the responses lean too little above its reach to name
    the policy, and without a baseline no tail is filled; but step 1 stands 2.3x out of the
    others and is hot throughout its responses: the policy beside the truncation
    (``beside``)."""
    cause = diagnosis(held_out_store, "f-combo-stale-topp").section_dict()["cause"]
    assert cause["key"] == "semantics"
    (also,) = cause["also"]
    assert (also["key"], also["variant"], also["checks"]) == ("policy", policy.AT_STEPS, ["spikes"])
    assert also["where"] in ("step 1", "steps 1") and "beside logprob semantics" in also["because"]
    assert not any(r["key"] == "policy" for r in cause["runner_ups"])


def test_the_steps_of_a_policy_found_outside_them_are_its_own(held_out_store: Path) -> None:
    """``g1-pol-stale`` alone (the second Gemma2 draw's weights a checkpoint behind): step 1
    stands out, and the responses of the other steps lean (the second pass). Step 1 is hot
    throughout, its ids moved on their own: the same policy, named once with both findings,
    where it was a code path of step 1 with the policy beside."""
    cause = diagnosis(held_out_store, "g1-pol-stale").section_dict()["cause"]
    assert (cause["key"], cause["variant"], cause["also"]) == ("policy", policy.AT_STEPS, [])
    assert "hot throughout" in cause["because"] and "lean one way" in cause["because"]
    assert cause["checks"] == ["localized", "policy_signs"]  # the step's part, the lean
