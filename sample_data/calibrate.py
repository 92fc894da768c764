"""Generate the calibration corpus for `mismatchctl diagnose`: healthy runs and faults simulated
through the sample model's real numeric paths.

    python sample_data/calibrate.py --out DIR [--only NAME,NAME] [--size small|tiny] [--list]

Every run is rolled out by the bf16 KV-cache engine and scored by the fp32 trainer
(gen/engine.py); a fault run changes one knob where the fault happens in a real stack (the
sampler, the weights served, a kernel or cache, a device's replica, the trainer's rendering, the
writer); see gen/catalog*.py. Runs go to DIR/runs/NAME/step_*.parquet, tagged only
`source=calibration`; DIR/corpus.json lists each run's class, expected cause, physical fault,
size, baseline and measured vllm_kl ratio to that baseline. Trained checkpoints are cached in
DIR/cache/ (keyed by model config, training config and seed); runs present in DIR are skipped
unless --force.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

# OpenMP threads that spin while they wait for work slow small kernels down a hundredfold on a
# CPU shared with other processes; sleeping waiters cost nothing alone and change no result
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gen.calib_build import Builder
from gen.calib_measure import corpus_entry, run_fields
from gen.calib_spec import CALIB_SIZES, CalibRun, CalibSize
from gen.calib_weights import GROWTH_KINDS
from gen.catalog import CATALOG, check_catalog
from gen.corpus import prompt_line_sources, prompt_lines
from gen.moe import MoEConfig

THREADS = 2  # fixed: CPU reductions depend on the thread count


def size_runs(size: CalibSize) -> list[CalibRun]:
    """The catalogue's runs of a size, in generation order."""
    return [r for r in CATALOG if not size.runs or r.name in size.runs]


def selected(arg: str | None, size: CalibSize) -> list[CalibRun]:
    runs = size_runs(size)
    if arg is None:
        return runs
    names = [n.strip() for n in arg.split(",") if n.strip()]
    known = {r.name for r in runs}
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise SystemExit(
            f"Error: --only: unknown run(s) {', '.join(unknown) or '(none given)'} for this size\n"
            "Hint: --list shows the runs"
        )
    return [r for r in runs if r.name in names]


def print_list(runs: list[CalibRun]) -> None:
    for r in runs:
        print(f"{r.name:24} {r.kind:11} {r.cause or '-':18} {r.size or '-':6} {r.fault}")


def entry(run: CalibRun, size: CalibSize, out: Path, seconds: float | None) -> dict[str, object]:
    """The run's corpus.json entry, measured on its files."""
    spec = size.models[run.model]
    item = corpus_entry(
        out,
        {
            **run_fields(run),
            "model": spec.label,
            "steps": size.long_steps if run.long else size.steps,
        },
        seconds,
    )
    if run.schedule in GROWTH_KINDS:
        item["growth"] = GROWTH_KINDS[run.schedule]
    if isinstance(spec.cfg, MoEConfig):
        item["ingest"] = {"routes_topk": spec.cfg.top_k, "num_experts": spec.cfg.n_experts}
    return item


def measured(item: dict[str, object]) -> str:
    """The progress line's measurement: vllm_kl and its ratio to the baseline."""
    ratio_text = (
        f"{item['ratio_to_baseline']}x {item['baseline']}"
        if item["ratio_to_baseline"] is not None
        else f"baseline {item['baseline']} not generated yet"
    )
    return (
        f"vllm_kl {item['vllm_kl'] if item['vllm_kl'] is not None else 'not finite'}, {ratio_text}"
    )


def generate(run: CalibRun, builder: Builder, out: Path) -> float:
    """Write the run's dumps (into a scratch directory renamed at the end); its seconds."""
    t0 = time.perf_counter()
    final = out / "runs" / run.name
    scratch = out / "runs" / f".{run.name}.partial"
    if scratch.exists():
        shutil.rmtree(scratch)
    scratch.mkdir(parents=True)
    builder.write(run, scratch)
    if final.exists():
        shutil.rmtree(final)
    scratch.rename(final)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="the corpus directory")
    parser.add_argument("--only", default=None, help="comma-separated run names")
    parser.add_argument("--size", choices=sorted(CALIB_SIZES), default="small")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--force", action="store_true", help="regenerate runs already present")
    parser.add_argument("--list", action="store_true", help="list the runs and exit")
    args = parser.parse_args(argv)
    check_catalog()
    size = CALIB_SIZES[args.size]
    runs = selected(args.only, size)
    if args.list:
        print_list(runs)
        return 0
    torch.manual_seed(args.seed)
    torch.set_num_threads(THREADS)
    torch.use_deterministic_algorithms(True)
    out: Path = args.out
    timings_path = out / "timings.json"
    timings = json.loads(timings_path.read_text()) if timings_path.is_file() else {}
    builder = Builder(size, args.seed, prompt_lines(), prompt_line_sources(), out / "cache")
    t0 = time.perf_counter()
    for run in runs:
        if (out / "runs" / run.name).is_dir() and not args.force:
            print(f"run {run.name}: present, skipped (--force regenerates it)", flush=True)
            continue
        timings[run.name] = round(generate(run, builder, out), 1)
        timings_path.write_text(json.dumps(timings, indent=2, sort_keys=True) + "\n")
        line = measured(entry(run, size, out, None))
        print(f"run {run.name}: {timings[run.name]:.0f}s, {line}", flush=True)
    present = [r for r in size_runs(size) if (out / "runs" / r.name).is_dir()]
    corpus = {
        "size": args.size,
        "seed": args.seed,
        "runs": [entry(r, size, out, timings.get(r.name)) for r in present],
    }
    (out / "corpus.json").write_text(json.dumps(corpus, indent=2) + "\n")
    print(f"done in {time.perf_counter() - t0:.0f}s: {len(present)} runs -> {out}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
