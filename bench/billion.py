"""A billion response positions: the report on the local engine and on a local Ray of two
workers, against the report of 100M positions, in one run.

    python bench/billion.py --copies 10 --write docs/benchmarks.md [--workdir DIR]

The dumps of bench/gen_dumps.py at 100M positions (generated unless the workdir holds them) are
written ``--copies`` times with their steps and uids renumbered (copy k: step + 20 k, uid
prefixed ``k-``): the same tokens ten times over, in 200 step files (about 7 GB for 1B
positions). Both sets are ingested as run ``bench``, each into its own store (timed, peak RSS).
Then, each command in a fresh process (bytecode cached, as installed): ``report bench --json``
of the 100M store, and of the 1B store with the local engine and with ``--engine ray --workers
2`` (a local Ray started by the command). The two 1B reports must agree: every number of their
JSON to 1e-9 relative. Writes the section "## A billion positions" of --write and the raw
numbers to the workdir's billion.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from run import STEPS, BenchError, ensure_dumps, log, mctl, measure, model_tokens
from sections import replace_section

SECTION = "## A billion positions"
RUN = "bench"


def write_copies(src: Path, out: Path, copies: int, per_copy: int) -> int:
    """The step files of ``src`` (``per_copy`` positions) written ``copies`` times, steps and
    uids renumbered; returns the positions written (reused when ``out`` holds them)."""
    marker = out / "bench-size.json"
    want = {"source": str(src), "copies": copies}
    if marker.exists():
        got = json.loads(marker.read_text())
        if {k: got.get(k) for k in want} == want:
            log(f"reusing {out} ({got['written']:,} positions)")
            return int(got["written"])
    out.mkdir(parents=True, exist_ok=True)
    files = sorted(src.glob("step_*.parquet"))
    for k in range(copies):
        log(f"copy {k + 1} of {copies}")
        for path in files:
            table = pq.read_table(path)
            step = pc.add(table.column("step"), pa.scalar(STEPS * k, pa.int64()))
            uid = pc.binary_join_element_wise(pa.scalar(f"{k}"), table.column("uid"), "-")
            table = table.set_column(0, "step", step)
            table = table.set_column(table.schema.get_field_index("uid"), "uid", uid)
            step_no = int(path.stem.split("_")[1]) + STEPS * k
            pq.write_table(table, out / f"step_{step_no:04d}.parquet")
    written = per_copy * copies
    marker.write_text(json.dumps({**want, "written": written}) + "\n")
    return written


def ingest(dumps: Path, store: Path, logs: Path, timeout: float) -> dict[str, Any]:
    if store.exists():
        raise BenchError(f"{store} exists: give a fresh --workdir or remove it")
    got = measure(mctl("ingest", str(dumps), "--run", RUN, "--store", str(store), "-q"),
                  f"ingest-{store.name}", logs, timeout)  # fmt: skip
    got["model_tokens"] = model_tokens(store, RUN, timeout)
    return got


def report(store: Path, name: str, logs: Path, timeout: float, *extra: str) -> dict[str, Any]:
    out = logs / f"{name}.json"
    cmd = mctl("report", RUN, "--store", str(store), "--json", str(out), "-q", *extra)
    got = measure(cmd, name, logs, timeout)
    got["json"] = str(out)
    return got


def differences(a: Any, b: Any, where: str = "") -> list[str]:
    """Where two JSON documents differ (numbers compared to 1e-9 relative)."""
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return [f"{where}: keys {sorted(a.keys() ^ b.keys())}"]
        return [d for k in a for d in differences(a[k], b[k], f"{where}.{k}")]
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{where}: length {len(a)} != {len(b)}"]
        return [
            d
            for i, (x, y) in enumerate(zip(a, b, strict=True))
            for d in differences(x, y, f"{where}[{i}]")
        ]
    numbers = (float, int)
    if isinstance(a, numbers) and isinstance(b, numbers) and float in (type(a), type(b)):
        return (
            [] if math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-300) else [f"{where}: {a!r} != {b!r}"]
        )
    return [] if a == b else [f"{where}: {a!r} != {b!r}"]


def section(res: dict[str, Any]) -> str:
    small, big = res["report 100M"], res["report 1B"]
    ray = res["report 1B --engine ray --workers 2"]
    ratio = big["wall"] / small["wall"]
    rows = [
        ("ingest 100M", res["ingest 100M"]), ("ingest 1B", res["ingest 1B"]),
        ("report 100M", small), ("report 1B", big), ("report 1B --engine ray --workers 2", ray),
    ]  # fmt: skip
    lines = [
        f"`python bench/billion.py --copies {res['copies']}`: the 100M-position dumps of "
        f"bench/gen_dumps.py ({res['positions_100M']:,} response positions) written "
        f"{res['copies']} times with their steps and uids renumbered ({res['positions_1B']:,} "
        f"positions, {res['model_tokens_1B']:,} model tokens, {res['copies'] * STEPS} steps), each "
        "set ingested into its own store; every command in a fresh process, once; 2 cores "
        f"(load average when it ran: {res['load']}).",
        "",
        "| command | wall s | CPU s | peak RSS MB |",
        "| --- | ---: | ---: | ---: |",
        *(f"| `{n}` | {r['wall']:.1f} | {r['cpu']:.1f} | {r['rss_mb']:.0f} |" for n, r in rows),
        "",
        f"- report 1B / report 100M: **{ratio:.2f}x** the time (target <= 11x), peak RSS "
        f"{big['rss_mb']:.0f} MB local, {ray['rss_mb']:.0f} MB for the command with Ray (its "
        "workers are processes of their own, not counted in the command's peak).",
        f"- the local and the Ray reports of 1B agree: {res['agree']}.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--copies", type=int, default=10)
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--write", type=Path, help="replace this Markdown file's section")
    parser.add_argument("--timeout", type=float, default=3600)
    args = parser.parse_args()
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)  # as installed: bytecode cached
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="mismatchctl-billion-"))
    logs = workdir / "logs"
    small = workdir / "dumps_100M"
    marker, _ = ensure_dumps(small, 100_000_000, args.timeout)
    big = workdir / f"dumps_{args.copies}x100M"
    res: dict[str, Any] = {"copies": args.copies, "positions_100M": marker["written"]}
    res["positions_1B"] = write_copies(small, big, args.copies, int(marker["written"]))
    res["load"] = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    res["ingest 100M"] = ingest(small, workdir / "store-100M", logs, args.timeout)
    res["ingest 1B"] = ingest(big, workdir / "store-1B", logs, args.timeout)
    res["model_tokens_1B"] = res["ingest 1B"]["model_tokens"]
    res["report 100M"] = report(workdir / "store-100M", "report-100M", logs, args.timeout)
    res["report 1B"] = report(workdir / "store-1B", "report-1B", logs, args.timeout)
    ray = report(workdir / "store-1B", "report-1B-ray", logs, args.timeout,
                 "--engine", "ray", "--workers", "2")  # fmt: skip
    res["report 1B --engine ray --workers 2"] = ray
    local = json.loads(Path(res["report 1B"]["json"]).read_text())
    bad = differences(local, json.loads(Path(ray["json"]).read_text()))
    res["agree"] = "yes, every number" if not bad else f"NO: {len(bad)} differences, e.g. {bad[:3]}"
    (workdir / "billion.json").write_text(json.dumps(res, indent=1) + "\n")
    text = section(res)
    print(text)
    if args.write:
        replace_section(args.write, SECTION, text)
        log(f"wrote the section to {args.write}")


if __name__ == "__main__":
    main()
