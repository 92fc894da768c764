"""``whatif --preset`` and ``whatif --list-presets`` as sections: the preset and its config, then
per group its metrics (whatif's common numbers and the framework's own names); every preset with
its keys."""

from __future__ import annotations

from typing import Any

from mismatchctl.analysis import sections as sec
from mismatchctl.analysis.whatif.preset import COMMON, PresetList, PresetWhatif
from mismatchctl.engines import plan as K
from mismatchctl.stats import registry as M


def preset_list_sections(listed: PresetList) -> list[sec.Section]:
    """Every preset: what it describes, the framework it follows, its keys."""
    out: list[sec.Section] = []
    for p in listed.presets:
        keys = " ".join(f"{k}={v}" for k, v in p.defaults.items())
        lines = [
            sec.Line(p.describes),
            sec.Line(f"follows {p.framework}: {p.source}", "note"),
            sec.Line(f"keys (defaults): {keys}", "dim"),
        ]
        out.append(sec.Lines(f"preset-{p.name}", p.name, lines))
    return out


def preset_sections(w: PresetWhatif) -> list[sec.Section]:
    """The preset and its config, then per group its metrics: whatif's common numbers and the
    framework's own names."""
    p = w.preset
    config = ", ".join(f"{k}={v}" for k, v in w.config.items())
    lines = [
        sec.Line(f"{p.name}: {p.describes}"),
        sec.Line(f"follows {p.framework}, {p.source}; config: {config}", "note"),
    ]
    out: list[sec.Section] = [sec.Lines("whatif-preset", f"What-if: {w.label}", lines)]
    whole = w.whole().metrics
    facts = [sec.Fact(k, v, sec.Kind.TEXT if isinstance(v, str) else sec.Kind.VALUE)
             for k, v in whole.items() if k not in COMMON]  # fmt: skip
    common = [_common_fact(k, whole.get(k)) for k in COMMON]
    why = w.remedy(whole)
    common.append(sec.Fact("verdict", "ok: keeps the signal" if why is None else
                           f"discards signal: {why}; not advised", sec.Kind.TEXT))  # fmt: skip
    out.append(sec.Facts("whatif-preset-common", "Whole selection", common))
    out.append(sec.Facts("whatif-preset-framework", f"{p.name}: its own metrics", facts))
    out.append(_table(w, "By run", (K.RUN,)))
    if len(w.split(K.GPU)) > 1:
        out.append(_table(w, "By gpu", (K.GPU,)))
    out.append(_table(w, "Per step", (K.RUN, K.STEP)))
    return out


def _common_fact(key: str, value: Any) -> sec.Fact:
    metric = M.by_key(key)
    kind = {M.Fmt.COUNT: sec.Kind.COUNT, M.Fmt.SHARE: sec.Kind.SHARE}.get(
        metric.fmt, sec.Kind.VALUE
    )
    return sec.Fact(metric.header, value, kind)


def _table(w: PresetWhatif, title: str, split: K.Split) -> sec.Table:
    groups = w.split(*split)
    columns = [sec.Column(k, k, sec.Kind.ID if k == K.STEP else sec.Kind.LABEL) for k in split]
    shown = (M.TOKENS, M.TOKEN_FRACTION, M.SEQUENCE_FRACTION, M.WEIGHT_MEAN, M.ESS)
    columns += [sec.Column.of(k) for k in shown]
    rows = [{**g.by, **{k: g.metrics.get(k) for k in shown}} for g in groups]
    return sec.Table(f"whatif-preset-{'-'.join(split)}", title, columns, rows, keys=len(split))
