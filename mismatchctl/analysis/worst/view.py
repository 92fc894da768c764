"""The report page's "Worst sequences": a table of the sequences with the largest summed K3,
each linking to its heat view (collapsed below the table). HTML only."""

from __future__ import annotations

from mismatchctl.analysis import sections as sec
from mismatchctl.analysis.show.view import HEAT_LEGEND, flip_mark, heat_items
from mismatchctl.analysis.worst.worst import Worst
from mismatchctl.stats import registry as M

HOW = (
    "The sequences with the largest summed K3 of the selection (every model token), in one read "
    "with the report; each links to its tokens, coloured by |r| (tooltips: position, turn, id, "
    "both probabilities, r, K3). `mismatchctl tokens --sequences` lists more, in a cell; "
    "`mismatchctl show RUN SAMPLE_ID` shows one in the terminal."
)


def worst_block(w: Worst | None) -> list[sec.Section]:
    if w is None or not w.rows:
        return []
    rows = []
    for n, r in enumerate(w.rows, 1):
        anchor = sec.slug("worst", n, r["run"], r["seq"])
        rows.append({**r, "rank": n, "k3_share": r["k3_sum"] / w.k3_sum if w.k3_sum else None,
                     "anchor": anchor, "view": "tokens"})  # fmt: skip
    columns = [
        sec.Column("rank", "#", sec.Kind.ID),
        sec.Column("run", "run", sec.Kind.LABEL),
        sec.Column("step", "step", sec.Kind.ID),
        sec.Column("sample_id", "sample", sec.Kind.LABEL, link_key="anchor"),
        sec.Column("tokens", "tokens", sec.Kind.COUNT),
        sec.Column("turns", "turns", sec.Kind.COUNT),
        sec.Column("k3_sum", "K3 sum"),
        sec.Column("k3_share", "K3 share", sec.Kind.SHARE),
        sec.Column("log_ratio_sum", "sum r"),
        sec.Column(M.ABS_LOG_RATIO_MAX, "max |r|"),
        sec.Column("view", "view", sec.Kind.LABEL, link_key="anchor"),
    ]
    table = sec.Table("worst-table", "Worst sequences by summed K3", columns, rows, note=HOW)
    views: list[sec.Section] = [
        sec.Block(
            row["anchor"],
            f"#{row['rank']}: {view.run}, step {row['step']}, sample {view.sample_id}",
            [
                sec.Heat(
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
        views.append(
            sec.Lines("worst-notes", None, [sec.Line(f"note: {n}", "note") for n in w.notes])
        )
    top = sum(r["k3_share"] or 0.0 for r in rows)
    summary = f"the {len(rows)} sequences with the largest summed K3: {top:.1%} of the K3"
    block = sec.Block("worst-sequences", "Worst sequences", [table, *views], collapsed=True,
                    summary=summary, media="html")  # fmt: skip
    return [block]
