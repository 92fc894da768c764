"""Workload W (see wcommon.py) in DuckDB SQL over the raw dumps, as a user without mismatchctl
runs it: the sequence-layout Parquet files (``response_mask``, ``rollout_log_probs``,
``old_log_probs`` lists per sequence, ``step`` and ``gpu`` per sequence) unnested, the turn of
each model token derived from the mask (a turn is a maximal run of mask 1: a window over each
sequence's positions), the masked positions dropped; then W's three queries.

    python bench/w_duckdb_raw.py DUMPS
"""

from __future__ import annotations

import os

import duckdb
from wcommon import default_edges, emit, parse_dumps_args


def main() -> None:
    args = parse_dumps_args(__doc__)
    edges = default_edges()
    con = duckdb.connect()
    con.execute(f"SET threads = {os.cpu_count() or 1}")
    con.execute("SET preserve_insertion_order = false")
    glob = str(args.dumps / "*.parquet").replace("'", "''")
    # one id per sequence (row), then one row per position with its mask and both logprobs
    con.execute(
        f"""
        CREATE TEMP TABLE pos AS
        SELECT sid, step, gpu, unnest(response_mask) AS m,
               unnest(rollout_log_probs)::DOUBLE AS rollout_logprob,
               unnest(old_log_probs)::DOUBLE AS trainer_logprob,
               unnest(generate_series(1, len(response_mask))) AS i
        FROM (SELECT row_number() OVER () AS sid, step, gpu, response_mask, rollout_log_probs,
                     old_log_probs FROM read_parquet('{glob}'))
        """
    )
    # a model token starts a turn when the position before it (in its sequence) is masked
    con.execute(
        """
        CREATE TEMP TABLE tok AS
        SELECT sid, step, gpu, rollout_logprob, trainer_logprob,
               sum(start) OVER (PARTITION BY sid ORDER BY i) - 1 AS turn
        FROM (
            SELECT *, (m = 1 AND coalesce(lag(m) OVER (PARTITION BY sid ORDER BY i), 0) = 0)::INTEGER
                      AS start
            FROM pos
        )
        QUALIFY m = 1
        """
    )
    con.execute("DROP TABLE pos")
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
        """
        SELECT kind, corr(rollout_log_ppl, trainer_log_ppl)
        FROM (
            SELECT sid, CASE WHEN turn = 0 THEN 'first' ELSE 'later' END AS kind,
                   -avg(rollout_logprob) AS rollout_log_ppl,
                   -avg(trainer_logprob) AS trainer_log_ppl
            FROM tok
            GROUP BY sid, kind
        )
        GROUP BY kind
        """
    ).fetchall()
    emit(gpu_step, bin_kind, dict(pearson))


if __name__ == "__main__":
    main()
