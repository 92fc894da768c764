"""What the workload-W scripts share: the store paths, the default bin edges, and the digest.

Workload W (issue #7), over the model tokens of one run, with ``r = trainer - rollout logprob``:

- per gpu x step: token count and mean K3 (``exp(r) - 1 - r``, the report's ``vllm_kl``);
- per probability bin x turn kind: token count, mean ``r``, mean ``|r|`` and the sum of ``r**2``,
  where the bin of a token is that of ``p_infer = exp(rollout logprob)`` among the default ``log``
  edges of ``mismatchctl/stats/bins.py`` (bin k = [edges[k], edges[k+1]), 1 in the last bin: the
  bin index is the number of interior edges <= p_infer), and the turn kind is ``first`` for turn 0,
  ``later`` for turns >= 1;
- per turn kind: the Pearson correlation, over segments (one sequence's tokens of that turn kind),
  of the segment's rollout log-ppl (minus the mean rollout logprob) and trainer log-ppl.

Every script prints the same JSON digest on stdout (``emit``), so the bench can check that they agree.
This module imports nothing heavy: the scripts pay only for what they use.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
from pathlib import Path
from typing import Any

# The columns W needs (the report reads the same ones).
COLUMNS = ["step", "gpu", "seq", "turn", "rollout_logprob", "trainer_logprob"]


def parse_args(doc: str | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=doc)
    parser.add_argument("store", type=Path, help="mismatchctl store directory")
    parser.add_argument("--run", default="bench", help="run to read (default: bench)")
    return parser.parse_args()


def parse_dumps_args(doc: str | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=doc)
    parser.add_argument("dumps", type=Path, help="directory of sequence-layout Parquet dumps")
    return parser.parse_args()


def run_dir(store: Path, run: str) -> Path:
    """The directory of a run's token parts (hive partition ``run=<name>``)."""
    return store / "tokens" / f"run={run}"


def token_parts(store: Path, run: str) -> list[str]:
    parts = sorted(str(p) for p in run_dir(store, run).glob("*.parquet"))
    if not parts:
        raise SystemExit(f"no token parts under {run_dir(store, run)}")
    return parts


def default_edges() -> list[float]:
    """The default ``log`` edges, read from mismatchctl/stats/bins.py itself. The module is loaded
    by path: importing the ``mismatchctl`` package would load all of it (about 0.7 s, 100 MB)."""
    spec = importlib.util.find_spec("mismatchctl")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("mismatchctl is not importable from this Python")
    path = Path(next(iter(spec.submodule_search_locations))) / "stats" / "bins.py"
    loader = importlib.util.spec_from_file_location("_mismatchctl_bins", path)
    assert loader is not None and loader.loader is not None
    module = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(module)
    return [float(e) for e in module.LOG_EDGES]


def _num(x: Any) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def emit(
    gpu_step: list[tuple[Any, Any, Any, Any]],
    bin_kind: list[tuple[Any, Any, Any, Any, Any, Any]],
    pearson: dict[str, Any],
) -> None:
    """Print the digest: ``gpu_step`` rows (gpu, step, tokens, mean K3), ``bin_kind`` rows (bin,
    kind, tokens, mean r, mean |r|, sum r^2), ``pearson`` {kind: r}; rows are sorted here."""
    gs = sorted(
        ([g if isinstance(g, str) else None, int(s), int(n), _num(k3)] for g, s, n, k3 in gpu_step),
        key=lambda row: (row[0] or "", row[1]),
    )
    bk = sorted(
        [int(b), str(k), int(n), _num(m), _num(a), _num(q)] for b, k, n, m, a, q in bin_kind
    )
    doc = {
        "tokens": sum(row[2] for row in gs),
        "k3_sum": sum(row[2] * row[3] for row in gs if row[3] is not None),
        "gpu_step": gs,
        "bin_kind": bk,
        "pearson": {str(k): _num(v) for k, v in sorted(pearson.items())},
    }
    json.dump(doc, sys.stdout)
    sys.stdout.write("\n")
