"""Every preset of ``whatif --preset``, by name, in the order ``--list-presets`` lists them: the
one module that knows them all (each preset module knows only the base it extends)."""

from __future__ import annotations

from mismatchctl.stats.presets.areal import ArealRejection
from mismatchctl.stats.presets.base import Preset
from mismatchctl.stats.presets.dppo import Dppo
from mismatchctl.stats.presets.opsm import SlimeOpsm
from mismatchctl.stats.presets.roll import RollTrainInfer
from mismatchctl.stats.presets.skyrl import SkyrlOffPolicy
from mismatchctl.stats.presets.slime import SlimeTis
from mismatchctl.stats.presets.trl import TrlVllmIs
from mismatchctl.stats.presets.verl import VerlRolloutCorr


def all_presets() -> dict[str, Preset]:
    """Every preset, by name."""
    presets: list[Preset] = [
        VerlRolloutCorr(),
        TrlVllmIs(),
        SlimeTis(),
        SlimeOpsm(),
        SkyrlOffPolicy(),
        ArealRejection(),
        RollTrainInfer(),
        Dppo(),
    ]
    return {p.name: p for p in presets}
