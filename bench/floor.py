"""The floor under any implementation of W: read and decode W's columns of every token part of the
run with pyarrow, the way the report does (one part at a time per worker, ``pq.read_table`` of the
needed columns, the gpu column as a dictionary, 2 workers), keeping nothing.

    python bench/floor.py STORE [--run bench]

Prints {"rows": N}.
"""

from __future__ import annotations

import json
import sys
from concurrent.futures import ThreadPoolExecutor

import pyarrow.parquet as pq
from wcommon import COLUMNS, parse_args, token_parts

WORKERS = 2  # mismatchctl.engines.local.DEFAULT_WORKERS


def rows(path: str) -> int:
    return pq.read_table(path, columns=COLUMNS, read_dictionary=["gpu"]).num_rows


def main() -> None:
    args = parse_args(__doc__)
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        total = sum(pool.map(rows, token_parts(args.store, args.run)))
    json.dump({"rows": total}, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
