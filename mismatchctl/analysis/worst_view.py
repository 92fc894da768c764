"""The report page's "Worst sequences": a table of the sequences with the largest summed K3,
each linking to its heat view (collapsed below the table). HTML only."""

from __future__ import annotations

from mismatchctl.analysis import sections as X
from mismatchctl.analysis.show_view import HEAT_LEGEND, flip_mark, heat_items
from mismatchctl.analysis.worst import Worst
from mismatchctl.stats import registry as M

HOW = (
    "The sequences with the largest summed K3 of the selection (every model token), in one read "
    "with the report; each links to its tokens, coloured by |r| (tooltips: position, turn, id, "
    "both probabilities, r, K3). `mismatchctl tokens --sequences` lists more, in a cell; "
    "`mismatchctl show RUN SAMPLE_ID` shows one in the terminal."
)


def worst_block(w: Worst | None) -> list[X.Section]:
    if w is None or not w.rows:
        return []
    rows = []
    for n, r in enumerate(w.rows, 1):
        anchor = X.slug("worst", n, r["run"], r["seq"])
        rows.append({**r, "rank": n, "k3_share": r["k3_sum"] / w.k3_sum if w.k3_sum else None,
                     "anchor": anchor, "view": "tokens"})  # fmt: skip
    columns = [
        X.Column("rank", "#", X.Kind.ID),
        X.Column("run", "run", X.Kind.LABEL),
        X.Column("step", "step", X.Kind.ID),
        X.Column("sample_id", "sample", X.Kind.LABEL, link_key="anchor"),
        X.Column("tokens", "tokens", X.Kind.COUNT),
        X.Column("turns", "turns", X.Kind.COUNT),
        X.Column("k3_sum", "K3 sum"),
        X.Column("k3_share", "K3 share", X.Kind.SHARE),
        X.Column("log_ratio_sum", "sum r"),
        X.Column(M.ABS_LOG_RATIO_MAX, "max |r|"),
        X.Column("view", "view", X.Kind.LABEL, link_key="anchor"),
    ]
    table = X.Table("worst-table", "Worst sequences by summed K3", columns, rows, note=HOW)
    views: list[X.Section] = [
        X.Block(
            row["anchor"],
            f"#{row['rank']}: {view.run}, step {row['step']}, sample {view.sample_id}",
            [
                X.Heat(
                    f"{row['anchor']}-heat",
                    "Tokens",
                    heat_items(view),
                    HEAT_LEGEND,
                    mark=flip_mark(view.tokens),
                )
            ],
            collapsed=True,
            summary=f"K3 sum {row['k3_sum']:.4g} over {row['tokens']:,} tokens",
        )
        for row, view in zip(rows, w.views, strict=True)
    ]
    if w.notes:
        views.append(X.Lines("worst-notes", None, [X.Line(f"note: {n}", "note") for n in w.notes]))
    top = sum(r["k3_share"] or 0.0 for r in rows)
    summary = f"the {len(rows)} sequences with the largest summed K3: {top:.1%} of the K3"
    block = X.Block("worst-sequences", "Worst sequences", [table, *views], collapsed=True,
                    summary=summary, media="html")  # fmt: skip
    return [block]
