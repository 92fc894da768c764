"""The cause ``semantics`` (``analysis/diagnose/causes/semantics.py``)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import cast

import numpy as np
import pytest

from mismatchctl.analysis.diagnose.causes import semantics
from mismatchctl.analysis.diagnose.check import Check
from mismatchctl.analysis.diagnose.checks import token_shift
from mismatchctl.analysis.diagnose.context import Context
from mismatchctl.stats.seq_sums import seq_sums
from tests.analysis.diagnose.stores import calibration
from tests.planted import diagnosis
from tests.stats.test_line_slope import _run


def test_a_penalty_in_the_engines_logprobs_is_named_a_logit_processor(
    calibration_store: Path,
) -> None:
    """A repetition penalty of 1.01 in the engine's processed logprobs (2.8x a healthy run):
    the tokens seen before in their response are shifted, the others are not."""
    cause = calibration._cause(calibration_store, "sem-rep-subtle")["cause"]
    assert cause["key"] == "semantics" and "logit processor" in cause["variant"]
    assert "penalty" in cause["next"] and "token_shift" in cause["checks"]
    assert cause["correction"].startswith("no")


def test_a_transform_at_every_token_is_no_precision_loss_beside_it(
    calibration_store: Path,
) -> None:
    """Top-p on the engine side only (2.2x a healthy run): against the baseline every token is
    hotter alike, no part and no lean, which is the precision's evidence; the transform
    explains it, so the precision is a runner-up the semantics sets off, not a second cause."""
    cause = calibration._cause(calibration_store, "sem-topp-subtle", "h-b")["cause"]
    assert cause["key"] == "semantics" and cause["also"] == []
    precision = next(r for r in cause["runner_ups"] if r["key"] == "precision")
    assert precision["verdict"] in ("warn", "fail")  # the level is there: it alarms
    assert precision["lost"] == f"{cause['label']} sets off its checks too"


@pytest.mark.parametrize("baseline", [None, "h-b"])
def test_a_faint_logit_bias_is_named_by_its_ids_not_the_lean_it_makes(
    calibration_store: Path, baseline: str | None
) -> None:
    """A logit bias of +0.05 on four frequent ids in the engine (2.2x a healthy run): under the
    ``token_shift`` check's per-id threshold, it shows as responses that lean (the ones holding
    those ids). A shift of its own for each id carries a fifth of r's variance, so the lean is
    its echo: the semantics is named and the policy is a runner-up it sets off."""
    found = calibration._cause(calibration_store, "sem-bias-subtle", baseline)
    shift = next(c for c in found["checks"] if c["name"] == "token_shift")
    assert shift["verdict"] == "ok"  # no threshold lowered: the check itself stays quiet
    assert shift["evidence"]["id_share"] >= token_shift.T.ID_MODEL_SHARE
    cause = found["cause"]
    assert cause["key"] == "semantics" and "logit processor" in cause["variant"]
    assert {"token_shift", "policy_signs"} <= set(cause["checks"]) and cause["also"] == []
    assert "logit bias" in cause["next"]
    policy = next(r for r in cause["runner_ups"] if r["key"] == "policy")
    if baseline is None:  # the lean (1.63) is under the policy_signs gate alone (1.8)
        assert policy["verdict"] == "ok"
        return
    assert policy["verdict"] in ("warn", "fail") and "logit processor" in policy["against"][0]
    assert policy["lost"] == f"{cause['label']} sets off its checks too"


def test_other_weights_lean_without_a_shift_per_id(calibration_store: Path) -> None:
    """One optimizer step behind: the responses lean as much as under the faint bias (1.66 and
    1.63), but each id's own shift carries under 1% of r's variance: over its baseline (which
    the run exceeds: the lean's gate is then 1.5) the policy, nothing against it. Alone the
    lean is under the gate (1.8): a healthy run of another model leaned 1.57."""
    alone = calibration._cause(calibration_store, "pol-stale-iter")
    assert alone["verdict"] == "ok"
    baseline = calibration._runs()["pol-stale-iter"]["baseline"]
    found = calibration._cause(calibration_store, "pol-stale-iter", baseline)
    shift = next(c for c in found["checks"] if c["name"] == "token_shift")
    assert shift["evidence"]["id_share"] < 0.1 * token_shift.T.ID_MODEL_SHARE
    cause = found["cause"]
    assert cause["key"] == "policy" and cause["against"] == []
    semantics = next(r for r in cause["runner_ups"] if r["key"] == "semantics")
    assert semantics["verdict"] == "ok"


@pytest.mark.parametrize(("slope", "named"), [(0.9946, True), (1.0, False), (0.998, False)])
def test_a_temperatures_line_under_a_precision_loss(slope: float, named: bool) -> None:
    """Under independent noise that leaves the line a few percent of r's variance, a slope
    0.0054 from 1 is the temperature's, many standard errors from 1 over the responses; no
    slope, or one closer to 1 than the temperature check's 0.003, is not."""
    lr, lt, seq = _run(slope, 0.07)
    zeros = np.zeros(len(seq), np.int64)
    sums = seq_sums("run", lr, lt, seq, zeros, zeros, zeros, 1)
    ctx = cast(Context, SimpleNamespace(state=SimpleNamespace(sequences=sums)))
    found = semantics.beside_noise(ctx)
    assert (found is not None) is named
    if found is not None:
        assert found.variant == semantics.VARIANTS["temperature"]
        assert found.checks == ("temperature",) and "standard errors from 1" in found.because


def _checks(verdicts: dict[str, str], id_share: float | None = None) -> Context:
    """A context whose checks gave these verdicts (token_shift with this id share)."""
    found = {
        name: Check("semantic", name, name, verdict, f"{name}: a finding")
        for name, verdict in verdicts.items()
    }
    shift = token_shift.Evidence(shifted_ids=[], shifted_mass_share=0.0, seen_shift=None,
                                 id_share=id_share)  # fmt: skip
    found["token_shift"] = Check("semantic", "token_shift", "", "ok", "", shift)
    return cast(Context, SimpleNamespace(result=lambda m: found.get(m.NAME)))


@pytest.mark.parametrize(
    ("verdicts", "id_share", "against"),
    [
        ({"temperature": "warn", "policy_signs": "warn"}, None, True),
        ({"temperature": "fail", "policy_signs": "ok"}, None, False),
        ({"temperature": "warn", "policy_signs": "warn"}, 0.5, False),  # the ids' echo
        ({"temperature": "warn", "top_p": "fail", "policy_signs": "warn"}, None, False),
    ],
)
def test_a_temperatures_line_beside_leaning_responses_is_evidence_against_it(
    verdicts: dict[str, str], id_share: float | None, against: bool
) -> None:
    """A temperature or raw logprobs lean no response at the same token probabilities (the
    calibrated ones: ``policy_signs`` 0.87-1.27, never alarmed); saturating MLP activations
    in the engine lean them 1.69x and draw a faint line: the lean counts against the
    temperature's variant only, and not when a processor's ids explain it."""
    found = semantics.support(_checks(verdicts, id_share))
    assert found is not None and found.alarm
    assert bool(found.against) is against
    if against:
        assert found.variant == semantics.VARIANTS["temperature"]
        assert "policy_signs" in found.against[0]


def test_a_strong_line_keeps_a_lean_beside_it_as_its_own(held_out_store: Path) -> None:
    """``qw3-sem-temp-loud`` over ``qw3-h-a`` (the Qwen3 member: the engine at temperature 0.7,
    the trainer at 1.0): its responses lean (1.67, p 1.8e-8: each context's log-partition, which
    a response's like contexts share), but its line explains 54% of ``r``'s variance, a
    transform's own (other functions' faint lines 5.2-7.6%): the semantics is named, not
    another policy (it was, the lean counting against the temperature)."""
    from tests.planted import diagnosis

    found = diagnosis(held_out_store, "qw3-sem-temp-loud", "qw3-h-a").section_dict()
    signs = next(c for c in found["checks"] if c["name"] == "policy_signs")
    line = next(c for c in found["checks"] if c["name"] == "temperature")
    assert signs["verdict"] in ("warn", "fail") and line["evidence"]["diff_r2"] > 0.5
    cause = found["cause"]
    assert cause["key"] == "semantics" and cause["variant"] == semantics.VARIANTS["temperature"]
    assert cause["against"] == []


def test_a_line_holding_most_of_r_explains_the_steps_where_it_grows(held_out_store: Path) -> None:
    """``ut-sem-temp-subtle`` (a Llama pre-trained three iterations, ``family.py --pretrain
    3``: the engine at temperature 0.97, the trainer at 1.0): training sharpens the logits the
    temperature divides, so its excess grows 4.9x over the six steps, and the later steps held
    66% of the mass; its line holds 98% of ``r``'s variance. The temperature is named first
    (a growth was: the every-token cause explained only what the part left)."""
    from tests.planted import diagnosis

    found = diagnosis(held_out_store, "ut-sem-temp-subtle").section_dict()
    line = next(c for c in found["checks"] if c["name"] == "temperature")
    assert line["evidence"]["diff_r2"] > 0.9
    cause = found["cause"]
    assert cause["key"] == "semantics" and cause["variant"] == semantics.VARIANTS["temperature"]
    assert cause["share"] == pytest.approx(line["evidence"]["diff_r2"])


def test_a_causes_own_least_share_stands_against_the_parts() -> None:
    """A cause of every token gets what the parts leave, or its own least share when that is
    more; a part's score is its own share."""
    from mismatchctl.analysis.diagnose.causes import growth
    from mismatchctl.analysis.diagnose.causes.hypothesis import Support
    from mismatchctl.analysis.diagnose.causes.weigh import _score

    line = Support("warn", None, "a line", ("temperature",), least=0.98)
    assert _score(semantics, line, 0.66).score == pytest.approx(0.98)
    faint = Support("warn", None, "a line", ("temperature",), least=0.1)
    assert _score(semantics, faint, 0.66).score == pytest.approx(0.34)
    quiet = Support("ok", None, "no line", ("temperature",), least=0.98)
    assert _score(semantics, quiet, 0.66).score == 0.0
    part = Support("warn", 0.66, "later steps", ("trend",))
    assert _score(growth, part, 0.66).score == pytest.approx(0.66)


def test_a_truncation_beside_a_gpus_part_is_named_by_its_signs_outside(
    held_out_store: Path,
) -> None:
    """Top-p 0.95 beside one device of four splitting KV past 96 keys a key late
    (``ol-pair-topp-gpu``, the OLMo 2 member's ``s-pair-topp-gpu`` of ``family.py --sweep
    --seed 2``): the gpu holds 80% of the excess, the truncation's share is under the second
    cause's cut, but on the other gpus the rollout side is higher on nearly every token: the
    semantics stands there on the ``top_p`` check's own threshold (``truncation_outside``). The
    gpu fault alone leaves its outside two-signed (``sw-gpu-splitdrop-96``: hardware alone)."""
    cause = diagnosis(held_out_store, "ol-pair-topp-gpu").section_dict()["cause"]
    assert (cause["key"], cause["where"]) == ("hardware", "gpu gpu1")
    (also,) = cause["also"]
    assert also["key"] == "semantics" and also["variant"] == semantics.VARIANTS["top_p"]
    assert also["where"].startswith("the other gpus") or "gpu" in also["where"]
    assert "the rollout side higher on 9" in also["because"]
    alone = diagnosis(held_out_store, "sw-gpu-splitdrop-96").section_dict()["cause"]
    assert alone["also"] == []
