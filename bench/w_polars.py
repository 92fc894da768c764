"""Workload W (see wcommon.py) with Polars: a lazy scan of the store's token parts with hive
partitioning, one query per output, each collected with the streaming engine.

    python bench/w_polars.py STORE [--run bench]
"""

from __future__ import annotations

import polars as pl
from wcommon import default_edges, emit, parse_args


def main() -> None:
    args = parse_args(__doc__)
    edges = default_edges()
    tok = pl.scan_parquet(
        str(args.store / "tokens" / "*" / "*.parquet"), hive_partitioning=True
    ).filter(pl.col("run") == args.run)
    workload(tok, edges, "seq")


def workload(tok: pl.LazyFrame, edges: list[float], seq: str) -> None:
    """W's three queries over ``tok`` (one row per model token: gpu, step, turn, both logprobs,
    and ``seq``, the sequence's id), each collected with the streaming engine, printed as the
    digest."""
    r = pl.col("trainer_logprob") - pl.col("rollout_logprob")
    kind = pl.when(pl.col("turn") == 0).then(pl.lit("first")).otherwise(pl.lit("later"))
    # bin k = [edges[k], edges[k+1]), 1 in the last bin: the number of interior edges <= p_infer
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
        tok.group_by(seq, kind.alias("kind"))
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
