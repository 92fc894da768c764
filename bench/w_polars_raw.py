"""Workload W (see wcommon.py) with Polars over the raw dumps, as a user without mismatchctl
runs it: the sequence-layout Parquet files scanned lazily, each sequence's lists exploded to one
row per position, the turn of each model token derived from the mask (a turn is a maximal run of
mask 1: a cumulative sum of turn starts within the sequence), the masked positions dropped; then
W's three queries, collected with the streaming engine.

    python bench/w_polars_raw.py DUMPS
"""

from __future__ import annotations

import polars as pl
from w_polars import workload
from wcommon import default_edges, parse_dumps_args


def main() -> None:
    args = parse_dumps_args(__doc__)
    edges = default_edges()
    lists = ["response_mask", "rollout_log_probs", "old_log_probs"]
    pos = (
        pl.scan_parquet(str(args.dumps / "*.parquet"))
        .select("step", "gpu", *lists)
        .with_row_index("sid")
        .explode(lists)
        .rename(
            {
                "response_mask": "m",
                "rollout_log_probs": "rollout_logprob",
                "old_log_probs": "trainer_logprob",
            }
        )
    )
    # a model token starts a turn when the position before it in its sequence is masked (or
    # it is the sequence's first); exploded rows of a sequence are contiguous
    first = pl.col("sid") != pl.col("sid").shift(1)
    start = (pl.col("m") == 1) & (first.fill_null(True) | (pl.col("m").shift(1) != 1))
    tok = (
        pos.with_columns(start.cast(pl.Int32).alias("start"))
        .with_columns((pl.col("start").cum_sum().over("sid") - 1).alias("turn"))
        .filter(pl.col("m") == 1)
        .with_columns(pl.col("rollout_logprob", "trainer_logprob").cast(pl.Float64))
        .select("sid", "step", "gpu", "turn", "rollout_logprob", "trainer_logprob")
        .collect(engine="streaming")
        .lazy()
    )
    workload(tok, edges, "sid")


if __name__ == "__main__":
    main()
