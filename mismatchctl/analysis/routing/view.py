"""MoE routing as sections: the runs' routing metrics side by side, the first-flip layer
histogram (HTML), per run its layers (agreement, overlap, first differing layer) and the K3 of
flipped vs same tokens per probability bin, and the routing of every group of the `--by`
splits. Nothing is shown for a selection without routes."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from mismatchctl.analysis import sections as sec
from mismatchctl.analysis.routing.routing import RoutingResult, first_flip_plot
from mismatchctl.stats import routing_sums as R

K = sec.Kind
SUMMARY = (
    (R.ROUTING_TOKEN_AGREEMENT, "token agreement", K.SHARE),
    (R.ROUTING_LAYER_AGREEMENT, "layer agreement", K.SHARE),
    (R.ROUTING_OVERLAP_MEAN, "overlap", K.SHARE),
    (R.VLLM_KL_FLIPPED, "vllm_kl flipped", K.VALUE),
    (R.VLLM_KL_SAME, "vllm_kl same", K.VALUE),
    (R.ROUTING_K3_SHARE_FLIPPED, "K3 share flipped", K.SHARE),
    (R.VLLM_KL_AFTER_FLIP, "vllm_kl after a flip", K.VALUE),
    (R.VLLM_KL_BEFORE_FLIP, "vllm_kl before any flip", K.VALUE),
    (R.ROUTING_MISSING_TOKENS, "missing", K.COUNT),
    (R.ROUTING_UNPAIRED_TOKENS, "unpaired", K.COUNT),
    (R.R3_VIOLATION_FRACTION, "R3 violations", K.SHARE),
)


# the summary's columns a split's routing table leaves out
SUMMARY_ONLY = (
    R.ROUTING_LAYER_AGREEMENT,
    R.ROUTING_OVERLAP_MEAN,
    R.ROUTING_MISSING_TOKENS,
    R.R3_VIOLATION_FRACTION,
)
# the columns of a split's routing table (the split's keys first)
SPLIT_SUMMARY = tuple(column for column in SUMMARY if column[0] not in SUMMARY_ONLY)
HOW_FIRST_FLIP = (
    "For each run, the compared positions whose routes differ on some layer, by the lowest "
    "layer on which they differ (x: the MoE layer, y: the share of those positions). Flips "
    "that start in the first layers reach every later layer's input; a peak at one deep layer "
    "points at that layer's router (a near-tie of its logits)."
)


def routing_sections(
    routing: Mapping[str, RoutingResult],
    by_layer: bool = False,
    splits: Sequence[tuple[tuple[str, ...], list[dict[str, Any]]]] = (),
) -> list[sec.Section]:
    """The Routing sections of a report (none without routes); ``by_layer``: `--by layer`;
    ``splits``: per `--by` split, its groups' rows (the keys' labels and the routing
    metrics)."""
    if not routing:
        return []
    out: list[sec.Section] = [summary_table(routing)]
    aligned = alignment_table(routing)
    out += [aligned] if aligned is not None else []
    plot = first_flip_plot(dict(routing))
    if plot is not None:
        out.append(
            sec.Figure("routing-first-flip", "First differing layer", "routing_first_flip", plot,
                     HOW_FIRST_FLIP)
        )  # fmt: skip
    for run, result in routing.items():
        out += [layers_table(run, result)] if by_layer else []
        out.append(bins_table(run, result))
    replay = any(r.replay for r in routing.values())
    out += [split_table(split, rows, replay) for split, rows in splits if rows]
    return out


def split_table(split: tuple[str, ...], rows: list[dict[str, Any]], replay: bool) -> sec.Table:
    """The routing of each group of a `--by` split (groups without routes left out)."""
    columns = [sec.Column(key, key, K.LABEL) for key in split]
    columns += [sec.Column(key, header, kind) for key, header, kind in SPLIT_SUMMARY]
    if replay:
        columns.append(sec.Column(R.R3_VIOLATION_FRACTION, "R3 violations", K.SHARE))
    return sec.Table(
        sec.slug("routing-split", *split),
        "Routing by " + " x ".join(split),
        columns,
        rows,
        note="each group's tokens with routes (docs/metrics.md, Routing); groups without "
        "routes are left out",
        keys=len(split),
    )


def compare_routing(
    a: Mapping[str, RoutingResult], b: Mapping[str, RoutingResult]
) -> list[sec.Section]:
    """Two sides' routing side by side (e.g. without and with replay): one row per side's run,
    then per MoE layer and per probability bin a column group per side's run."""
    if not a and not b:
        return []
    rows = {f"A: {run}": r for run, r in a.items()} | {f"B: {run}": r for run, r in b.items()}
    runs = _side_runs(a, b)
    return [
        summary_table(rows, "Routing (MoE), both sides"),
        _side_by_side(
            "routing-layers-both", "Routing by MoE layer, both sides",
            sec.Column("layer", "layer", K.ID), LAYER_COLUMNS,
            {name: r.partial.by_layer() for name, r in runs.items()}, "layer",
            "per layer, over each side's compared positions: the share with equal expert sets, "
            "the mean overlap |A ∩ B| / top-k, and the share of the differing positions whose "
            "lowest differing layer it is",
        ),
        _side_by_side(
            "routing-bins-both", "Routing by inference probability, both sides",
            sec.Column("bin", "p_infer", K.LABEL), BIN_COLUMNS,
            {name: r.bins() for name, r in runs.items()}, "bin",
            "mean K3 of the paired tokens whose producing position's routes differ on some "
            "layer (flipped) or on none (same), per p_infer bin (bins without a paired token "
            "on either side left out)",
            lambda row: bool(row["flipped_tokens"] or row["same_tokens"]),
        ),
    ]  # fmt: skip


def compare_routing_splits(
    splits: Sequence[tuple[tuple[str, ...], list[dict[str, Any]], list[dict[str, Any]]]],
) -> list[sec.Section]:
    """Per `--by` split of `compare`, its groups' routing on side A and side B (a group is
    named by its keys' labels; groups without routes on either side left out)."""
    out: list[sec.Section] = []
    for split, rows_a, rows_b in splits:
        if not rows_a and not rows_b:
            continue
        name = " x ".join(split)
        sides = {"A": _group_named(rows_a, split), "B": _group_named(rows_b, split)}
        out.append(
            _side_by_side(
                sec.slug("routing-by", *split), f"Routing by {name}, both sides",
                sec.Column(name, name, K.LABEL), SPLIT_BOTH, sides, name,
                "each side's group: its tokens with routes (docs/metrics.md, Routing)",
            )
        )  # fmt: skip
    return out


def _group_named(rows: list[dict[str, Any]], split: tuple[str, ...]) -> list[dict[str, Any]]:
    """Each group's row with its name: its keys' labels joined (``first / 3``)."""
    name = " x ".join(split)
    return [{**r, name: " / ".join(str(r[k]) for k in split)} for r in rows]


SPLIT_BOTH = SPLIT_SUMMARY[:4]  # agreement, K3 of flipped and same, K3 share flipped
LAYER_COLUMNS = (
    (R.ROUTING_LAYER_AGREEMENT, "agreement", K.SHARE),
    (R.ROUTING_OVERLAP_MEAN, "overlap", K.SHARE),
    ("first_flip_share", "first differing", K.SHARE),
)
BIN_COLUMNS = (
    ("flipped_tokens", "flipped", K.COUNT),
    (R.VLLM_KL_FLIPPED, "vllm_kl flipped", K.VALUE),
    (R.VLLM_KL_SAME, "vllm_kl same", K.VALUE),
)


def _side_runs(
    a: Mapping[str, RoutingResult], b: Mapping[str, RoutingResult]
) -> dict[str, RoutingResult]:
    """The column groups' names: ``A`` and ``B`` when each side has one run, else ``A run``."""
    out = {}
    for side, runs in (("A", a), ("B", b)):
        for run, result in runs.items():
            out[side if len(runs) == 1 else f"{side} {run}"] = result
    return out


def _side_by_side(
    table_id: str,
    title: str,
    key: sec.Column,
    columns: Sequence[tuple[str, str, Any]],
    rows_of: Mapping[str, list[dict[str, Any]]],
    by: str,
    note: str,
    shown: Callable[[dict[str, Any]], bool] = lambda row: True,
) -> sec.Table:
    """One row per value of ``by`` (a layer, a bin) met on either side and ``shown`` on one;
    per side's run, its ``columns`` (empty where that side has no such row: a model with fewer
    layers)."""
    cols = [key]
    merged: dict[Any, dict[str, Any]] = {}
    kept: set[Any] = set()
    for name, rows in rows_of.items():
        prefix = name.lower().replace(" ", "_")
        cols += [sec.Column(f"{prefix}_{k}", f"{name} {h}", kind) for k, h, kind in columns]
        for row in rows:
            out = merged.setdefault(row[by], {key.key: row[by]})
            out.update({f"{prefix}_{k}": row.get(k) for k, _, _ in columns})
            if shown(row):
                kept.add(row[by])
    rows = [row for value, row in merged.items() if value in kept]
    return sec.Table(table_id, title, cols, rows, note=note, keys=1)


def summary_table(routing: Mapping[str, RoutingResult], title: str = "Routing (MoE)") -> sec.Table:
    columns = [sec.Column("run", "run", K.LABEL), sec.Column("shape", "layers x top-k", K.LABEL)]
    columns += [sec.Column(key, header, kind) for key, header, kind in SUMMARY]
    rows = [
        {"run": run, "shape": f"{r.partial.layers} x {r.partial.top_k}", **r.metrics}
        for run, r in routing.items()
    ]
    note = (
        "sets of expert ids compared per layer (order ignored); flipped / same: tokens whose "
        "producing position's routes differ on some layer / on none; R3 violations only for runs "
        "tagged routing_replay=r3 (docs/metrics.md, Routing)"
    )
    return sec.Table("routing", title, columns, rows, note=note)


ALIGNMENT = (
    ("position_before", "a position before"),
    ("position_after", "a position after"),
    ("layer_below", "a layer below"),
    ("layer_above", "a layer above"),
)


def alignment_table(routing: Mapping[str, RoutingResult]) -> sec.Table | None:
    """The routes' alignment test per run (None when no run's parts carry it): the layer
    routes' agreement as aligned and with the trainer's routes set a position or a layer off."""
    rows = []
    for run, r in routing.items():
        shifted = r.partial.alignment()
        if any(v is not None for v in shifted.values()):
            rows.append({"run": run, "aligned": r.metrics[R.ROUTING_LAYER_AGREEMENT], **shifted})
    if not rows:
        return None
    columns = [sec.Column("run", "run", K.LABEL), sec.Column("aligned", "aligned", K.SHARE)]
    columns += [sec.Column(key, header, K.SHARE) for key, header in ALIGNMENT]
    note = (
        "the share of (token, layer) routes whose expert sets agree, aligned and with the "
        "trainer's routes set against the rollout's a position before or after, or each layer "
        "against the rollout's layer below or above: routes misaligned by a shift agree there; "
        "aligned routes agree far more than shifted ones (docs/metrics.md, Routing)"
    )
    return sec.Table("routing-alignment", "Routing alignment", columns, rows, note=note)


def layers_table(run: str, result: RoutingResult) -> sec.Table:
    columns = [
        sec.Column("layer", "layer", K.ID),
        sec.Column(R.ROUTING_LAYER_AGREEMENT, "agreement", K.SHARE),
        sec.Column(R.ROUTING_OVERLAP_MEAN, "overlap", K.SHARE),
        sec.Column("first_flip_share", "first differing layer", K.SHARE),
    ]
    return sec.Table(
        sec.slug("routing-layers", run),
        f"Routing of {run} by MoE layer",
        columns,
        result.partial.by_layer(),
        note="first differing layer: the share of differing positions whose lowest differing "
        "layer it is",
    )


def bins_table(run: str, result: RoutingResult) -> sec.Table:
    columns = [
        sec.Column("bin", "p_infer", K.LABEL),
        sec.Column("flipped_tokens", "flipped tokens", K.COUNT),
        sec.Column(R.VLLM_KL_FLIPPED, "vllm_kl flipped", K.VALUE),
        sec.Column("same_tokens", "same tokens", K.COUNT),
        sec.Column(R.VLLM_KL_SAME, "vllm_kl same", K.VALUE),
    ]
    return sec.Table(
        sec.slug("routing-bins", run),
        f"Routing of {run}: K3 of flipped vs same tokens by inference probability",
        columns,
        [row for row in result.bins() if row["flipped_tokens"] or row["same_tokens"]],
        note="paired tokens only; bins without any are left out",
    )
