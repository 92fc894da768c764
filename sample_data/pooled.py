"""Runs pooled from a calibration corpus: a fault on some requests, and healthy runs many times
the corpus's size, each diagnosed alone and against a pooled healthy baseline.

A run is its requests: pooling the sequences of runs made with the same model and stack gives a
run whose requests differ only as those runs did. ``FAULT+H1+H2`` holds the fault run's requests
beside the healthy runs' (a setting, weights or a path that only some requests had: a per-request
temperature or top-p, a replica behind): a third of them (``some-*``, and ``some-*-deep``,
``some-*-wide``, ``some-*-mid`` on the other models, diagnosed alone), or a fifth for the loud faults
(``few-*``). ``H1+H2+...`` is a healthy run of their combined size.
Each step's rows are shuffled (a fixed seed per step), so that no dump order names the pooled
requests, and every sample id takes its run's name as a prefix (the same id in two runs is two
requests). The result is a Markdown table (docs/diagnose.md, "Faults on some requests").

    python sample_data/pooled.py --corpus DIR [--out DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's mismatchctl, as confusion.py

from mismatchctl import api  # noqa: E402

HEALTHY = ("h-c", "h-6x8")
"""The healthy runs pooled beside each fault (two of three requests healthy)."""

BASELINE = ("h-b", "h-a2", "h-16x2", "h-wave12", "h-one-turn-b", "h-many-turns-b")
"""The pooled healthy baseline (six runs: 80k model tokens, about six times one run)."""

POOLS: dict[str, tuple[str, ...]] = {
    "big-a": ("h-a", "h-c", "h-6x8", "h-12x4", "h-wave4", "h-one-turn", "h-many-turns"),
    "big-b": BASELINE,
    "big-deep-a": ("h-deep-a", "h-deep-one-turn", "h-deep-many-turns"),
    "big-deep-b": ("h-deep-b", "h-deep-one-turn-b", "h-deep-many-turns-b"),
    "big-wide-a": ("h-wide-a", "h-wide-many-turns"),
    "big-wide-b": ("h-wide-b", "h-wide-many-turns-b"),
    "big-mid-a": ("h-mid-a", "h-mid-one-turn", "h-mid-many-turns"),
    "big-mid-b": ("h-mid-b", "h-mid-one-turn-b", "h-mid-many-turns-b"),
}
"""Healthy runs of several times a corpus run's size, and what each pools."""

PAIRS = (
    ("big-a", "big-b"),
    ("big-deep-a", "big-deep-b"),
    ("big-wide-a", "big-wide-b"),
    ("big-mid-a", "big-mid-b"),
)

FAULTS = (
    "sem-temp-subtle", "sem-topp-subtle", "sem-topk-subtle", "sem-minp-subtle", "sem-rep-subtle",
    "sem-bias-subtle", "sem-raw-subtle", "pol-stale-iter", "pr-fp8kv", "cp-splitkv-subtle",
    "cp-prefix-subtle", "tpl-crlf", "stop-zero-last",
)  # fmt: skip
"""The faults pooled with ``HEALTHY`` (a third of the requests), where the corpus has them."""

FEW = ("sem-temp-loud", "sem-topp-loud", "pol-stale-ckpt", "cp-splitkv-loud", "tpl-crlf",
       "stop-zero-last")  # fmt: skip
"""Loud faults pooled with ``FEW_HEALTHY`` (a fifth of the requests)."""

FEW_HEALTHY = ("h-c", "h-6x8", "h-12x4", "h-wave4")

OTHER_MODELS = {
    "-deep": ("h-deep-a", "h-deep-b"),
    "-wide": ("h-wide-a", "h-wide-b"),
    "-mid": ("h-mid-a", "h-mid-b"),
}
"""The other models' faults (``FAULT-deep``, ``FAULT-wide``) pooled with two healthy runs of their
model, diagnosed alone (their pooled baselines hold those runs' requests)."""

OTHER_FAULTS = ("sem-topp-subtle", "sem-rep-subtle", "pol-stale-iter", "cp-splitkv-subtle",
                "tpl-crlf")  # fmt: skip


def pool(runs: Path, names: tuple[str, ...], out: Path) -> Path:
    """The runs' step files pooled step by step into ``out`` (rows shuffled, ids prefixed)."""
    out.mkdir(parents=True, exist_ok=True)
    for step in sorted(p.name for p in (runs / names[0]).glob("step_*.parquet")):
        parts = []
        for name in names:
            table = pq.read_table(runs / name / step)
            prefix = pa.array([name] * table.num_rows)
            uid = pc.binary_join_element_wise(prefix, table.column("uid"), ":")
            parts.append(table.set_column(table.schema.get_field_index("uid"), "uid", uid))
        table = pa.concat_tables(parts)
        seed = int("".join(c for c in step if c.isdigit()) or 0)
        order = np.random.default_rng(seed).permutation(table.num_rows)
        pq.write_table(table.take(pa.array(order)), out / step)
    return out


def named(store: Path, run: str, baseline: str | None) -> dict[str, Any]:
    """The verdict, the cause and its part, the second causes."""
    found = api.diagnose(run, baseline=baseline, store=store).section_dict()
    cause = found["cause"]
    alarm = found["verdict"] in ("warn", "fail")
    return {
        "verdict": found["verdict"],
        "cause": cause.get("key") if alarm else "none",
        "where": cause.get("where") if alarm else None,
        "also": [a["key"] for a in cause.get("also", [])],
    }


def build(corpus: Path, out: Path) -> list[tuple[str, str, str | None]]:
    """Every pooled run ingested into ``out/store``; the (run, what it pools, baseline) rows."""
    runs, store = corpus / "runs", out / "store"
    have = {p.name for p in runs.iterdir()}
    rows: list[tuple[str, str, str | None]] = []
    for name, names in POOLS.items():
        if set(names) <= have:
            _ingest(pool(runs, names, out / "runs" / name), name, store)
    for a, b in PAIRS:
        if {a, b} <= set(POOLS) and set(POOLS[a]) | set(POOLS[b]) <= have:
            rows += [(a, "+".join(POOLS[a]), None), (a, "+".join(POOLS[a]), b)]
            rows += [(b, "+".join(POOLS[b]), None), (b, "+".join(POOLS[b]), a)]
    pooled = [(f"some-{f}", (f, *HEALTHY)) for f in FAULTS]
    pooled += [(f"few-{f}", (f, *FEW_HEALTHY)) for f in FEW]
    for name, names in pooled:
        if set(names) <= have and set(BASELINE) <= have:
            _ingest(pool(runs, names, out / "runs" / name), name, store)
            rows += [(name, "+".join(names), None), (name, "+".join(names), "big-b")]
    for suffix, healthy in OTHER_MODELS.items():
        for fault in OTHER_FAULTS:
            names = (f"{fault}{suffix}", *healthy)
            if set(names) <= have:
                name = f"some-{names[0]}"
                _ingest(pool(runs, names, out / "runs" / name), name, store)
                rows.append((name, "+".join(names), None))
    return rows


def _ingest(path: Path, run: str, store: Path) -> None:
    if run not in {r.name for r in api.runs(store=store)}:
        api.ingest([path], run, store=store)


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| run | pools | baseline | named | where |", "| --- | --- | --- | --- | --- |"]
    for r in rows:
        also = "".join(f" + {a}" for a in r["also"])
        lines.append(
            f"| {r['run']} | {r['pools']} | {r['baseline'] or '-'} | {r['verdict']} "
            f"{r['cause']}{also} | {r['where'] or '-'} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, required=True, help="calibrate.py's --out")
    parser.add_argument("--out", type=Path, help="where the pooled runs go (default CORPUS/pooled)")
    parser.add_argument("--json", action="store_true", help="the rows as JSON, not Markdown")
    opts = parser.parse_args()
    out = opts.out or opts.corpus / "pooled"
    found = []
    for run, pools, baseline in build(opts.corpus, out):
        row = {"run": run, "pools": pools, "baseline": baseline}
        found.append({**row, **named(out / "store", run, baseline)})
        print(f"{run} @ {baseline}: {found[-1]['verdict']} {found[-1]['cause']}", file=sys.stderr)
    print(json.dumps(found, indent=1) if opts.json else table(found))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
