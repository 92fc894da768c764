"""MoE routing as sections: the runs' routing metrics side by side, the first-flip layer
histogram (HTML), per run its layers (agreement, overlap, first differing layer) and the K3 of
flipped vs same tokens per probability bin, and the routing of every group of the `--by`
splits. Nothing is shown for a selection without routes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mismatchctl.analysis import sections as S
from mismatchctl.analysis.routing import RoutingResult, first_flip_plot
from mismatchctl.stats import routing as R

K = S.Kind
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


# the columns of a split's routing table (the split's keys first)
SPLIT_SUMMARY = (
    (R.ROUTING_TOKEN_AGREEMENT, "token agreement", K.SHARE),
    (R.VLLM_KL_FLIPPED, "vllm_kl flipped", K.VALUE),
    (R.VLLM_KL_SAME, "vllm_kl same", K.VALUE),
    (R.ROUTING_K3_SHARE_FLIPPED, "K3 share flipped", K.SHARE),
    (R.VLLM_KL_AFTER_FLIP, "vllm_kl after a flip", K.VALUE),
    (R.VLLM_KL_BEFORE_FLIP, "vllm_kl before any flip", K.VALUE),
    (R.ROUTING_UNPAIRED_TOKENS, "unpaired", K.COUNT),
)
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
) -> list[S.Section]:
    """The Routing sections of a report (none without routes); ``by_layer``: `--by layer`;
    ``splits``: per `--by` split, its groups' rows (the keys' labels and the routing
    metrics)."""
    if not routing:
        return []
    out: list[S.Section] = [summary_table(routing)]
    plot = first_flip_plot(dict(routing))
    if plot is not None:
        out.append(
            S.Figure("routing-first-flip", "First differing layer", "routing_first_flip", plot,
                     HOW_FIRST_FLIP)
        )  # fmt: skip
    for run, result in routing.items():
        out += [layers_table(run, result)] if by_layer else []
        out.append(bins_table(run, result))
    replay = any(r.replay for r in routing.values())
    out += [split_table(split, rows, replay) for split, rows in splits if rows]
    return out


def split_table(split: tuple[str, ...], rows: list[dict[str, Any]], replay: bool) -> S.Table:
    """The routing of each group of a `--by` split (groups without routes left out)."""
    columns = [S.Column(key, key, K.LABEL) for key in split]
    columns += [S.Column(key, header, kind) for key, header, kind in SPLIT_SUMMARY]
    if replay:
        columns.append(S.Column(R.R3_VIOLATION_FRACTION, "R3 violations", K.SHARE))
    return S.Table(
        S.slug("routing-split", *split),
        "Routing by " + " x ".join(split),
        columns,
        rows,
        note="each group's tokens with routes (docs/metrics.md, Routing); groups without "
        "routes are left out",
        keys=len(split),
    )


def compare_routing(
    a: Mapping[str, RoutingResult], b: Mapping[str, RoutingResult]
) -> list[S.Section]:
    """Two sides' routing side by side (e.g. without and with replay): one row per side's run."""
    if not a and not b:
        return []
    rows = {f"A: {run}": r for run, r in a.items()} | {f"B: {run}": r for run, r in b.items()}
    return [summary_table(rows, "Routing (MoE), both sides")]


def summary_table(routing: Mapping[str, RoutingResult], title: str = "Routing (MoE)") -> S.Table:
    columns = [S.Column("run", "run", K.LABEL), S.Column("shape", "layers x top-k", K.LABEL)]
    columns += [S.Column(key, header, kind) for key, header, kind in SUMMARY]
    rows = [
        {"run": run, "shape": f"{r.partial.layers} x {r.partial.top_k}", **r.metrics}
        for run, r in routing.items()
    ]
    note = (
        "sets of expert ids compared per layer (order ignored); flipped / same: tokens whose "
        "producing position's routes differ on some layer / on none; R3 violations only for runs "
        "tagged routing_replay=r3 (docs/metrics.md, Routing)"
    )
    return S.Table("routing", title, columns, rows, note=note)


def layers_table(run: str, result: RoutingResult) -> S.Table:
    columns = [
        S.Column("layer", "layer", K.ID),
        S.Column(R.ROUTING_LAYER_AGREEMENT, "agreement", K.SHARE),
        S.Column(R.ROUTING_OVERLAP_MEAN, "overlap", K.SHARE),
        S.Column("first_flip_share", "first differing layer", K.SHARE),
    ]
    return S.Table(
        S.slug("routing-layers", run),
        f"Routing of {run} by MoE layer",
        columns,
        result.partial.by_layer(),
        note="first differing layer: the share of differing positions whose lowest differing "
        "layer it is",
    )


def bins_table(run: str, result: RoutingResult) -> S.Table:
    columns = [
        S.Column("bin", "p_infer", K.LABEL),
        S.Column("flipped_tokens", "flipped tokens", K.COUNT),
        S.Column(R.VLLM_KL_FLIPPED, "vllm_kl flipped", K.VALUE),
        S.Column("same_tokens", "same tokens", K.COUNT),
        S.Column(R.VLLM_KL_SAME, "vllm_kl same", K.VALUE),
    ]
    return S.Table(
        S.slug("routing-bins", run),
        f"Routing of {run}: K3 of flipped vs same tokens by inference probability",
        columns,
        [row for row in result.bins() if row["flipped_tokens"] or row["same_tokens"]],
        note="paired tokens only; bins without any are left out",
    )
