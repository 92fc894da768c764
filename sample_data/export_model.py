"""Write only the sample model's shipped checkpoint (gen/bisect_model.py), without the runs:

    python sample_data/export_model.py [--seed 0] [--out sample_data/model]

It trains the dense model as `generate.py --size full` does (same seed, threads and
deterministic algorithms) and writes the checkpoint `generate.py` writes with the run
`gen.bisect_model.BISECT_RUN`: the same bytes on one machine, in about 5 minutes instead of 12.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gen import bisect_model
from gen.model import ModelConfig
from generate import ADDED_RUNS, RUNS, SIZES, make_deterministic, train_model


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=bisect_model.MODEL_DIR)
    args = parser.parse_args(argv)
    make_deterministic(args.seed)
    cfg = ModelConfig()
    trained = train_model(cfg, SIZES["full"], args.seed, (*RUNS, *ADDED_RUNS))
    path = bisect_model.save(trained.checkpoints[bisect_model.BISECT_STEP], cfg, args.out)
    print(f"bisect checkpoint -> {path}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
