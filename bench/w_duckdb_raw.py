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
from w_duckdb import workload
from wcommon import default_edges, parse_dumps_args


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
    workload(con, edges, "sid")


if __name__ == "__main__":
    main()
