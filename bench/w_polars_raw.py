"""Workload W (see wcommon.py) with Polars over the raw dumps, as a user without mismatchctl
runs it: the sequence-layout Parquet files scanned lazily, each sequence's lists exploded to one
row per position, the turn of each model token derived from the mask (a turn is a maximal run of
mask 1: a cumulative sum of turn starts within the sequence), the masked positions dropped; then
W's three queries, collected with the streaming engine.

    python bench/w_polars_raw.py DUMPS
"""

from __future__ import annotations

import polars as pl
from wcommon import default_edges, emit, parse_dumps_args


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
    r = pl.col("trainer_logprob") - pl.col("rollout_logprob")
    kind = pl.when(pl.col("turn") == 0).then(pl.lit("first")).otherwise(pl.lit("later"))
    p_infer = pl.col("rollout_logprob").exp()
    bin_ = pl.sum_horizontal([(p_infer >= e).cast(pl.Int32) for e in edges[1:-1]])
    gpu_step = (
        tok.select("gpu", "step", r.alias("r"))
        .group_by("gpu", "step")
        .agg(pl.len().alias("tokens"), (pl.col("r").exp() - 1 - pl.col("r")).mean().alias("k3"))
        .collect(engine="streaming")
    )
    bin_kind = (
        tok.select(bin_.alias("bin"), kind.alias("kind"), r.alias("r"))
        .group_by("bin", "kind")
        .agg(
            pl.len().alias("tokens"),
            pl.col("r").mean().alias("mean_r"),
            pl.col("r").abs().mean().alias("mean_abs_r"),
            (pl.col("r") ** 2).sum().alias("sum_r2"),
        )
        .collect(engine="streaming")
    )
    pearson = (
        tok.group_by("sid", kind.alias("kind"))
        .agg(
            (-pl.col("rollout_logprob").mean()).alias("rollout_log_ppl"),
            (-pl.col("trainer_logprob").mean()).alias("trainer_log_ppl"),
        )
        .group_by("kind")
        .agg(pl.corr("rollout_log_ppl", "trainer_log_ppl").alias("pearson"))
        .collect(engine="streaming")
    )
    emit(
        gpu_step.select("gpu", "step", "tokens", "k3").rows(),
        bin_kind.select("bin", "kind", "tokens", "mean_r", "mean_abs_r", "sum_r2").rows(),
        dict(pearson.rows()),
    )


if __name__ == "__main__":
    main()
