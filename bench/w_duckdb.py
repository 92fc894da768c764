"""Workload W (see wcommon.py) in DuckDB SQL: one query per output over the store's token parts
read with hive partitioning (the way docs/store.md suggests), as many threads as cores.

    python bench/w_duckdb.py STORE [--run bench]
"""

from __future__ import annotations

import os

import duckdb
from wcommon import default_edges, emit, parse_args


def main() -> None:
    args = parse_args(__doc__)
    edges = default_edges()
    con = duckdb.connect()
    con.execute(f"SET threads = {os.cpu_count() or 1}")
    glob = str(args.store / "tokens" / "*" / "*.parquet").replace("'", "''")
    run = args.run.replace("'", "''")
    con.execute(
        f"CREATE VIEW tok AS SELECT * FROM read_parquet('{glob}', hive_partitioning = true) "
        f"WHERE run = '{run}'"
    )
    workload(con, edges, "seq")


def workload(con: duckdb.DuckDBPyConnection, edges: list[float], seq: str) -> None:
    """W's three queries over the view or table ``tok`` (one row per model token: gpu, step,
    turn, both logprobs, and ``seq``, the sequence's id), printed as the digest."""
    # bin k = [edges[k], edges[k+1]), 1 in the last bin: the number of interior edges <= p_infer
    p_infer = "exp(rollout_logprob)"
    bin_expr = " + ".join(f"({p_infer} >= {e!r})::INTEGER" for e in edges[1:-1])

    gpu_step = con.execute(
        """
        SELECT gpu, step, count(*) AS tokens, avg(exp(r) - 1 - r) AS k3
        FROM (SELECT gpu, step, trainer_logprob - rollout_logprob AS r FROM tok)
        GROUP BY gpu, step
        """
    ).fetchall()

    bin_kind = con.execute(
        f"""
        SELECT bin, kind, count(*) AS tokens, avg(r) AS mean_r, avg(abs(r)) AS mean_abs_r,
               sum(r * r) AS sum_r2
        FROM (
            SELECT {bin_expr} AS bin,
                   CASE WHEN turn = 0 THEN 'first' ELSE 'later' END AS kind,
                   trainer_logprob - rollout_logprob AS r
            FROM tok
        )
        GROUP BY bin, kind
        """
    ).fetchall()

    pearson = con.execute(
        f"""
        SELECT kind, corr(rollout_log_ppl, trainer_log_ppl)
        FROM (
            SELECT {seq}, CASE WHEN turn = 0 THEN 'first' ELSE 'later' END AS kind,
                   -avg(rollout_logprob) AS rollout_log_ppl,
                   -avg(trainer_logprob) AS trainer_log_ppl
            FROM tok
            GROUP BY {seq}, kind
        )
        GROUP BY kind
        """
    ).fetchall()

    emit(gpu_step, bin_kind, dict(pearson))


if __name__ == "__main__":
    main()
