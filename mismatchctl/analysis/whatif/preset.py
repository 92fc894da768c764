"""``whatif --preset``: one framework's correction, configured by the framework's own keys, on a
selection: per cell (run, step, gpu) the preset's mergeable state, computed in the report's read
of each part, rolled up to the whole selection, each run, each batch (run x step) and each gpu,
with the framework's own metric names beside whatif's common ones."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from mismatchctl import schema as S
from mismatchctl.analysis.diagnose import corrections
from mismatchctl.analysis.report.report import Report, report_on
from mismatchctl.analysis.selection import reread, resolve_text
from mismatchctl.analysis.whatif.remedy import discards_signal, remedy_dict
from mismatchctl.engines import plan as K
from mismatchctl.engines.choice import LOCAL_ENGINE, Engine
from mismatchctl.engines.keys import PartKeys, decode, group_codes
from mismatchctl.engines.rollup import sort_key
from mismatchctl.errors import UsageError
from mismatchctl.parallel import DEFAULT_WORKERS
from mismatchctl.stats import registry as M
from mismatchctl.stats.presets.base import Config, Preset, merge, parse_sets
from mismatchctl.stats.presets.registry import all_presets
from mismatchctl.store import Store

SPLITS: list[K.Split] = [(), (K.RUN,), (K.RUN, K.STEP), (K.GPU,)]
CellKey = tuple[Any, ...]  # (run, step, gpu)
COMMON = (
    M.TOKENS, M.SEQUENCES, M.TOKEN_FRACTION, M.SEQUENCE_FRACTION,
    M.WEIGHT_MEAN, M.WEIGHT_STD, M.WEIGHT_MIN, M.WEIGHT_MAX, M.ESS,
)  # fmt: skip


def preset_config(name: str, sets: list[str]) -> tuple[Preset, Config]:
    """The preset of ``--preset NAME`` and its config with every ``--set KEY=VALUE``."""
    presets = all_presets()
    if name not in presets:
        raise UsageError(
            f"--preset `{name}`: no such preset (presets: {', '.join(presets)})",
            "`mismatchctl whatif --list-presets` lists them with their keys and sources.",
        )
    preset = presets[name]
    try:
        config = parse_sets(preset, sets)
        preset.check(config)
    except ValueError as exc:
        keys = " ".join(f"{k}={v}" for k, v in preset.defaults.items())
        raise UsageError(
            f"--preset {name}: {exc}", f"set the framework's keys with --set, e.g. {keys}."
        ) from None
    return preset, config


@dataclass(frozen=True)
class PresetList:
    """Every preset: its name, the framework version and source file it follows, its keys
    (``whatif --list-presets``)."""

    presets: list[Preset]

    def to_dict(self) -> dict[str, Any]:
        return {
            "presets": [
                {
                    "preset": p.name, "framework": p.framework, "source": p.source,
                    "describes": p.describes, "defaults": dict(p.defaults),
                }
                for p in self.presets
            ]
        }  # fmt: skip


def list_presets() -> PresetList:
    return PresetList(list(all_presets().values()))


class PresetExtra:
    """Engine extra: the preset's state per (step, gpu) cell of one part."""

    columns: tuple[str, ...] = (S.GPU,)

    def __init__(self, preset: Preset, config: Config) -> None:
        self.preset, self.config = preset, config
        self.names = preset.fields(config)

    def compute(self, table: pa.Table, keys: PartKeys) -> dict[CellKey, np.ndarray]:
        lr, lt, seq = keys.column(S.ROLLOUT), keys.column(S.TRAINER), keys.column(S.SEQ)
        code, size, labels = group_codes(keys, (K.STEP, K.GPU))
        turns = {"turn": np.asarray(keys.column(S.TURN))} if _uses_turns(self.preset) else {}
        states = self.preset.compute(
            np.asarray(lr, np.float64), np.asarray(lt, np.float64), np.asarray(seq),
            np.asarray(code, np.int64), size, self.config, **turns,
        )  # fmt: skip
        tokens = self.names.index("tokens")
        return {
            (keys.run, *decode(int(i), labels)): states[i]
            for i in np.flatnonzero(states[:, tokens] > 0)
        }

    def merge(self, a: dict, b: dict) -> dict:
        out = dict(a)
        for key, state in b.items():
            out[key] = merge(out[key], state, self.names) if key in out else state
        return out


def _uses_turns(preset: Preset) -> bool:
    """Whether the preset also takes each token's turn (``compute(..., turn=)``)."""
    return bool(getattr(preset, "uses_turns", False))


@dataclass
class PresetGroup:
    by: dict[str, Any]
    metrics: dict[str, Any]


@dataclass(frozen=True)
class PresetWhatif:
    report: Report
    preset: Preset
    config: Config
    groups: dict[K.Split, list[PresetGroup]]

    @property
    def label(self) -> str:
        sel = self.report.selection
        return sel.label or ", ".join(sel.names)

    def split(self, *keys: str) -> list[PresetGroup]:
        return self.groups.get(tuple(keys), [])

    def whole(self) -> PresetGroup:
        return self.groups[()][0]

    def preset_dict(self) -> dict[str, Any]:
        p = self.preset
        return {
            "preset": p.name, "framework": p.framework, "source": p.source,
            "describes": p.describes, "config": dict(self.config),
        }  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        """The report's JSON plus a ``whatif`` section: the preset, its config, the groups."""
        groups = [
            {"by": g.by, "metrics": g.metrics, "remedy": remedy_dict(self.remedy(g.metrics))}
            for gs in self.groups.values()
            for g in gs
        ]
        return {
            **self.report.to_dict(),
            "whatif": {
                "selection": self.report.selection.label,
                **self.preset_dict(),
                "groups": groups,
            },
        }

    def to_polars(self) -> Any:
        import polars as pl

        rows = []
        for gs in self.groups.values():
            for g in gs:
                row = {f"by_{k}": None if v is None else str(v) for k, v in g.by.items()}
                rows.append({**row, "preset": self.preset.name, **g.metrics})
        return pl.DataFrame(rows, infer_schema_length=None)

    def remedy(self, metrics: dict[str, Any]) -> str | None:
        """Whether the correction discards the signal (``analysis.remedy``): its masks reject
        most tokens, its ESS is below one half, or nearly every IS ratio is at the cap."""
        rejected = discards_signal(metrics, "token", "rejected")
        if rejected is not None:
            return rejected
        clipped = metrics.get(self.preset.clipped_key) if self.preset.clipped_key else None
        if clipped is not None and clipped >= corrections.MAX_CORRECTION_CLIPPED:
            unit = "sequence" if self.config.get("rollout_is") == "sequence" else "token"
            shares = {M.TOKEN_FRACTION: clipped, M.SEQUENCE_FRACTION: clipped}
            return discards_signal(shares, unit, "clipped")
        return None


def build_preset_whatif(
    store: Store,
    selector: str,
    preset: Preset,
    config: Config,
    *,
    workers: int = DEFAULT_WORKERS,
    on_part: Callable[[int], None] | None = None,
    engine: Engine = LOCAL_ENGINE,
) -> PresetWhatif:
    extra = PresetExtra(preset, config)

    def read() -> Report:
        selection = resolve_text(store, selector)
        return report_on(selection, workers=workers, on_part=on_part, extras=[extra], engine=engine)

    report = reread(read)
    cells: dict[CellKey, np.ndarray] = report.extra_states[0] or {}
    groups = {split: _groups(split, cells, extra) for split in SPLITS}
    return PresetWhatif(report, preset, config, groups)


def _groups(split: K.Split, cells: dict, extra: PresetExtra) -> list[PresetGroup]:
    position = {K.RUN: 0, K.STEP: 1, K.GPU: 2}
    rolled: dict[tuple[Any, ...], np.ndarray] = {}
    for key, state in cells.items():
        label = tuple(key[position[k]] for k in split)
        rolled[label] = merge(rolled[label], state, extra.names) if label in rolled else state
    return [
        PresetGroup(
            dict(zip(split, label, strict=True)), extra.preset.finalize(rolled[label], extra.config)
        )
        for label in sorted(rolled, key=sort_key)
    ]
