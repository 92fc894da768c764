"""Workload W (see wcommon.py) the way a pandas user would write it: read the needed columns of
the run's token parts into one DataFrame, add the per-token columns, then three groupbys.

    python bench/w_pandas.py STORE [--run bench]
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from wcommon import COLUMNS, default_edges, emit, parse_args, run_dir


def main() -> None:
    args = parse_args(__doc__)
    edges = np.array(default_edges())
    df = pd.read_parquet(run_dir(args.store, args.run), columns=COLUMNS)

    df["r"] = df["trainer_logprob"] - df["rollout_logprob"]
    df["k3"] = np.exp(df["r"]) - 1 - df["r"]
    df["later"] = df["turn"] > 0
    p_infer = np.exp(df["rollout_logprob"].to_numpy())
    df["bin"] = np.clip(np.searchsorted(edges, p_infer, side="right") - 1, 0, len(edges) - 2)
    df["abs_r"] = df["r"].abs()
    df["r2"] = df["r"] ** 2

    # per gpu x step: count and mean K3
    gs = df.groupby(["gpu", "step"], dropna=False).agg(tokens=("k3", "size"), k3=("k3", "mean"))

    # per probability bin x turn kind
    bk = df.groupby(["bin", "later"]).agg(
        tokens=("r", "size"),
        mean_r=("r", "mean"),
        mean_abs_r=("abs_r", "mean"),
        sum_r2=("r2", "sum"),
    )

    # per-sequence log-ppl per turn kind, then Pearson over the segments of each kind
    seg = df.groupby(["seq", "later"]).agg(
        rollout_log_ppl=("rollout_logprob", "mean"), trainer_log_ppl=("trainer_logprob", "mean")
    )
    seg = -seg
    pearson = {
        ("later" if later else "first"): g["rollout_log_ppl"].corr(g["trainer_log_ppl"])
        for later, g in seg.groupby(level="later")
    }

    kind = {False: "first", True: "later"}
    emit(
        [(g, s, row.tokens, row.k3) for (g, s), row in gs.iterrows()],
        [
            (b, kind[bool(later)], row.tokens, row.mean_r, row.mean_abs_r, row.sum_r2)
            for (b, later), row in bk.iterrows()
        ],
        pearson,
    )


if __name__ == "__main__":
    main()
