"""bisect on the sample model against one report of the same run (issue 44's target: a
200-sequence bisect over the default settings on CPU in under 2 minutes):

    python bench/bisect_sample.py [--sample 200] [--repeats 1] --write docs/benchmarks.md [--workdir DIR]

The run: the sample data's run whose trainer checkpoint ships (sample_data/model/, ref-b step 8:
48 sequences). To reach 200 sequences of the same model, the step's file is written five times
under steps 8-12 (240 sequences, the same tokens), ingested as run ``bench`` into a store of
its own. Then, each in a fresh process measured with wait4 (wall, CPU, peak RSS), after an
untimed warm-up (a report), ``--repeats`` alternating rounds of:

    report        report bench --json /dev/null -q
    bisect, N sequences   bisect bench --model sample_data/gen/bisect_model.py:load
                  --steps 8..12 --sample N --json FILE -q (torch's threads as bisect sets them)
    bisect, 16 sequences  the same on 16 sequences
    bisect, 16 sequences, OMP_NUM_THREADS=2   with the threads the user set: torch's own
                  default on this machine (one per core)

Writes the section "## bisect on the sample model" of --write (the rest of the file kept), with
the machine's load average, and the raw numbers to the workdir's bisect.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from run import BenchError, log, measure, run_quiet
from sections import replace_section
from views import mctl

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
SECTION = "## bisect on the sample model"
RUN = "bench"
COPIES = 5  # the shipped step's file under this many step numbers
THREADS_SAMPLE = 16  # bisect with torch's default threads: slow on a shared machine
FACTORY = "sample_data/gen/bisect_model.py:load"


def target() -> tuple[str, int]:
    meta = next((ROOT / "sample_data" / "model").glob("*.json"))
    doc = json.loads(meta.read_text())
    return str(doc["run"]), int(doc["step"])


def dumps(workdir: Path) -> tuple[Path, range]:
    """The shipped step's file written under COPIES step numbers (its `step` column rewritten)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    run, step = target()
    table = pq.read_table(ROOT / "sample_data" / "runs" / run / f"step_{step:04d}.parquet")
    out = workdir / "dumps"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    steps = range(step, step + COPIES)
    for s in steps:
        column = pa.array([s] * table.num_rows, table.schema.field("step").type)
        copy = table.set_column(table.schema.get_field_index("step"), "step", column)
        pq.write_table(copy.replace_schema_metadata(table.schema.metadata),
                       out / f"step_{s:04d}.parquet")  # fmt: skip
    return out, steps


def commands(store: Path, steps: range, sample: int, out: Path) -> dict[str, list[str]]:
    s = ["--store", str(store), "-q"]
    span = f"{steps.start}..{steps.stop - 1}"

    def bisect(n: int, json_out: str) -> list[str]:
        return mctl(ROOT, "bisect", RUN, "--model", FACTORY, "--steps", span,
                    "--sample", str(n), "--json", json_out, *s)  # fmt: skip

    small = bisect(THREADS_SAMPLE, os.devnull)
    return {
        "report": mctl(ROOT, "report", RUN, "--json", os.devnull, *s),
        f"bisect, {sample} sequences": bisect(sample, str(out)),
        f"bisect, {THREADS_SAMPLE} sequences": small,
        f"bisect, {THREADS_SAMPLE} sequences, OMP_NUM_THREADS=2":
            ["env", "OMP_NUM_THREADS=2", *small],
    }  # fmt: skip


def rounds(cmds: dict[str, list[str]], repeats: int, logs: Path, timeout: float) -> dict:
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in cmds}
    log("warm-up: report (numba's cache, the page cache)")
    measure(cmds["report"], "warm-report", logs, timeout)
    for r in range(repeats):
        for name, cmd in cmds.items():
            m = measure(cmd, f"{_slug(name)}-{r}", logs, timeout)
            m["load"] = os.getloadavg()[0]
            log(f"{name}: {m['wall']:.1f} s (load {m['load']:.1f})")
            runs[name].append(m)
    return runs


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in name)


def section(result: dict[str, Any]) -> str:
    runs, plan = result["runs"], result["bisect"]
    report = statistics.median(m["wall"] for m in runs["report"])
    lines = [
        f"Measured {result['date']} on {result['cpus']} CPU cores shared with other work (load "
        f"average {result['load_before']:.1f} before, {result['load_after']:.1f} after; "
        f"{result['python']}, torch {result['torch']}). `python bench/bisect_sample.py --sample "
        f"{result['sample']} --repeats {result['repeats']}`: the sample run whose trainer "
        f"checkpoint ships ({result['run']}, step {result['step']}: 48 sequences), its step "
        f"written {COPIES} times as steps {result['steps']}, ingested as one run; bisect through "
        "the sample model's factory (sample_data/gen/bisect_model.py), every default setting "
        "the factory runs (the padded batches, the float32 lm_head, another attention "
        "implementation and the chunked prefill need a transformers model), after explain's "
        f"localization of the run for the hot cells ({result['bisect']['cells']}).",
        "",
        f"The work: {plan['sequences']} sequences, {plan['tokens']:,} model tokens, "
        f"{plan['settings']} settings ({', '.join(plan['names'])}). The verdict: "
        f"{plan['verdict']}",
        "",
        "| command | wall (median) | CPU | peak RSS | vs report |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, ms in runs.items():
        wall = statistics.median(m["wall"] for m in ms)
        cpu = statistics.median(m["cpu"] for m in ms)
        rss = max(m["rss_mb"] for m in ms)
        lines.append(f"| {name} | {wall:.1f} s | {cpu:.1f} s | {rss:.0f} MB | "
                     f"{wall / report:.0f}x |")  # fmt: skip
    return "\n".join([*lines, "", COST])


# Where the time went before the factory's engine path was batched and the threads set (measured
# once, 2026-11-29, 10 sequences of ref-b, 1,200 tokens after their prompts, load average 5-7):
COST = """Where the time goes: the incremental settings, one forward per token after the prompt.
Decoded one sequence at a time (the first version of the factory's engine path), 10 sequences
took 5.5 s (incremental) and 12.5 s (bf16+incremental) on one torch thread, 137 s and 176 s on
torch's default two: about 4.6 ms per token on one thread, Python and op dispatch more than
arithmetic at this size, so 200 sequences over the four incremental settings would have taken
about 10 minutes. Two changes: the factory's engine path decodes 16 sequences together (an
engine's batch: one step's dispatch serves 16 rows), and bisect runs a small model (under 50M
parameters) on one torch thread unless OMP_NUM_THREADS is set (the last two rows above)."""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sample", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--write", type=Path, default=None)
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--timeout", type=float, default=1800)
    args = ap.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bisect-bench-"))
    load_before = os.getloadavg()[0]
    files, steps = dumps(workdir)
    store = workdir / "store"
    shutil.rmtree(store, ignore_errors=True)
    run_quiet(mctl(ROOT, "ingest", str(files), "--run", RUN, "--store", str(store), "-q"), 600)
    out = workdir / "bisect-out.json"
    runs = rounds(commands(store, steps, args.sample, out), args.repeats, workdir / "logs",
                  args.timeout)  # fmt: skip
    got = json.loads(out.read_text())["bisect"]
    if got["trainer_check"]["k3"] > got["trainer_check"]["threshold"]:
        raise BenchError("the trainer check failed: the shipped checkpoint is not the run's")
    import torch

    run, step = target()
    result = {
        "date": __import__("datetime").date.today().isoformat(),
        "cpus": os.cpu_count(), "python": f"Python {platform.python_version()}",
        "torch": torch.__version__, "load_before": load_before,
        "load_after": os.getloadavg()[0], "sample": args.sample, "repeats": args.repeats,
        "run": run, "step": step, "steps": f"{steps.start}-{steps.stop - 1}",
        "bisect": {"sequences": got["sequences"], "tokens": got["tokens"],
                   "settings": len(got["settings"]),
                   "names": [s["setting"] for s in got["settings"]],
                   "verdict": got["verdict"][0],
                   "cells": "; ".join(c["cell"] for c in got["cells"])
                   or got["uniform_because"]},
        "runs": runs,
    }  # fmt: skip
    (workdir / "bisect.json").write_text(json.dumps(result, indent=2) + "\n")
    print(section(result))
    if args.write:
        replace_section(args.write, SECTION, section(result))
        log(f"wrote {SECTION!r} to {args.write}")


if __name__ == "__main__":
    sys.exit(main())
