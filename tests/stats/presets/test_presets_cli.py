"""What every `whatif --preset` shares at the command line, over the presets: a configuration a
framework would refuse is refused with the framework's own words (exit 1, a hint), and
`whatif --list-presets` names each preset's framework version, its source file and its defaults.
Each preset's numbers against its framework are in ``test_preset_<framework>.py``."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.stats.presets.preset_data import listed_preset, refused

# (preset, --set values, a words of the error): each framework's own checks of its config
REFUSED = {
    "areal-rejection": [
        (["level=turn"], "level must be one of"),
        (["action=clamp", "metric=kl_k3", "upper=1"], "action='clamp' only supports"),
        (["upper=1"], "upper must be > 1.0 for 'ratio'"),
        (["lower=6"], "cannot be greater than upper"),
        (["metric=kl_k2", "upper=-1"], "upper must be positive for 'kl_k2'"),
    ],
    "dppo": [
        (["dppo_type=topk_tv"], "dppo_type `topk_tv`: binary_tv or binary_kl"),
        (["advantage_sign=both"], "advantage_sign `both`: positive or negative"),
        (["delta_low=small"], "delta_low `small`: a number"),
    ],
    "slime-opsm": [
        (["advantage_sign=both"], "advantage_sign `both`: negative or positive"),
        (["opsm_delta=small"], "opsm_delta `small`: a number"),
        (["use_opsm=true"], "has no key `use_opsm`"),
    ],
    "roll-train-infer": [
        (["is_weight.weight_type=turn"], "is_weight.weight_type `turn`: one of"),
        (["filters.0.enabled=yes"], "filters.0.enabled `yes`: true or false"),
        (["filters.0.ratio_low=low"], "filters.0.ratio_low `low`: a number"),
        (["filters.1.enabled=true"], "has no key `filters.1.enabled`"),
    ],
    "skyrl-off-policy": [
        ([], "SkyRL's defaults correct nothing"),
        (["tis_ratio_type=tokens"], "tis_ratio_type `tokens`: null, token or sequence"),
        (["sequence_mask_metric=geo"], "sequence_mask_metric `geo`"),
        (["token_mask_is_threshold_low=0.5"], "only when both are set"),
        (["tis_ratio_type=token", "token_tis_ratio_clip_high=big"], "a number"),
    ],
    "verl-rollout-corr": [
        ([], "neither rollout_is nor rollout_rs is set"),
        (["rollout_is=tokens"], "rollout_is `tokens`: null, token or sequence"),
        (["rollout_is=token", "rollout_is_threshold=2_0.5"], "lower <= upper"),
        (["rollout_is=token", "rollout_is_batch_normalize=1"], "true or false"),
        (["rollout_rs=seq_mean_k4", "rollout_rs_threshold=2"], "rollout_rs `seq_mean_k4`"),
        (["rollout_rs=token_k3"], "rollout_rs_threshold must be provided"),
        (["rollout_rs=token_k3", "rollout_rs_threshold=0.1_2"], "one upper bound"),
        (["rollout_rs=token_k1", "rollout_rs_threshold=2_0.5"], "lower <= upper"),
        (["rolout_is=token"], "has no key `rolout_is`"),
    ],
}


@pytest.mark.parametrize(
    ("preset", "sets", "found"),
    [
        pytest.param(preset, sets, found, id=f"{preset}-{i}")
        for preset, cases in REFUSED.items()
        for i, (sets, found) in enumerate(cases)
    ],
)
def test_bad_configs_are_refused(store: Path, preset: str, sets: list, found: str) -> None:
    assert found in refused(preset, sets)


@dataclass(frozen=True)
class Listed:
    """What `--list-presets` says of a preset: words its framework line holds (and how it
    starts), its source file (whole or its end), and some of its defaults (or all of them)."""

    framework_has: tuple[str, ...] = ()
    framework_starts: str = ""
    source: str | None = None
    source_ends: str = ""
    defaults: dict[str, Any] = field(default_factory=dict)
    all_defaults: bool = False


LISTED = {
    "areal-rejection": Listed(
        framework_has=("4aef98d8",),
        defaults=dict(
            level="token", action="mask", metric="ratio", agg="mean", upper=5.0, lower=None
        ),
        all_defaults=True,
    ),
    "dppo": Listed(
        framework_has=("a9564572",),
        source_ends="ppo_utils.py",
        defaults={"delta_low": 0.2, "dppo_type": "binary_tv"},
    ),
    "slime-opsm": Listed(
        framework_has=("624b824a", "31f1ca96"),
        source="slime/utils/ppo_utils.py",
        defaults={"opsm_delta": 1e-4, "advantage_sign": "negative"},
        all_defaults=True,
    ),
    "roll-train-infer": Listed(
        framework_has=("8eb27cc2",),
        defaults={"is_weight.upper_bound": 1.2, "filters.0.ratio_low": 0.8},
    ),
    "skyrl-off-policy": Listed(
        framework_has=("a9564572", "0.3.0"),
        source_ends="off_policy_correction_utils.py",
        defaults={"geo_mask_low": 0.99},
    ),
    "trl-vllm-is": Listed(framework_starts="TRL 1.16.0", source="trl/trainer/grpo_trainer.py"),
    "verl-rollout-corr": Listed(
        framework_starts="verl 0.9.1",
        source="verl/trainer/ppo/rollout_corr_helper.py",
        defaults={"rollout_is_threshold": 2.0, "rollout_is_batch_normalize": False},
    ),
}


@pytest.mark.parametrize("preset", sorted(LISTED))
def test_list_presets_names_version_and_source(preset: str) -> None:
    listed, want = listed_preset(preset), LISTED[preset]
    assert all(word in listed["framework"] for word in want.framework_has)
    assert listed["framework"].startswith(want.framework_starts)
    assert want.source is None or listed["source"] == want.source
    assert listed["source"].endswith(want.source_ends)
    defaults = listed["defaults"] if want.all_defaults else {
        key: listed["defaults"][key] for key in want.defaults
    }  # fmt: skip
    assert defaults == want.defaults
    # a default's type as the framework's (False is not 0, 2.0 not "2.0")
    assert [type(defaults[k]) for k in want.defaults] == [type(v) for v in want.defaults.values()]
