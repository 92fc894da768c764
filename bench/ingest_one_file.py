"""Peak memory and wall of `mismatchctl ingest` on one big Parquet file against the same number
of positions in many files: a file's read must not hold the whole file.

    python bench/ingest_one_file.py --tokens 40e6 --files 20 --repeats 3

Writes the dumps with bench/gen_dumps.py (one file of ``--tokens`` response positions, and
``--files`` files of the same total), ingests each into a fresh store ``--repeats`` times and
prints the median wall seconds and peak RSS (wait4 on the child) of both, with their ratios.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from report_memory import GEN_DUMPS, measure


def ingest(dump: Path, store: Path, env: dict[str, str]) -> tuple[float, float]:
    cmd = [sys.executable, "-m", "mismatchctl", "ingest", str(dump), "--run", "x"]
    subprocess.run(["rm", "-rf", str(store)], check=True)
    return measure([*cmd, "--store", str(store), "-q"], env)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tokens", type=float, default=40e6, help="response positions")
    parser.add_argument("--files", type=int, default=20, help="files of the many-file layout")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    env = dict(os.environ, MISMATCHCTL_CACHE_MB="0")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        one, many = root / "one", root / "many"
        for out, steps in ((one, 1), (many, args.files)):  # in a child: a large parent's
            # pages would count in every forked child's peak RSS
            gen = [sys.executable, str(GEN_DUMPS), str(out), "--tokens", str(args.tokens)]
            subprocess.run([*gen, "--steps", str(steps)], check=True, stdout=subprocess.DEVNULL)
        found = {}
        for name, dump in (("one file", one), (f"{args.files} files", many)):
            runs = [ingest(dump, root / "store", env) for _ in range(args.repeats)]
            found[name] = (
                statistics.median(r[0] for r in runs),
                statistics.median(r[1] for r in runs),
            )
    print(f"{args.tokens / 1e6:.0f}M response positions, medians of {args.repeats} ingests")
    print("| layout | wall s | peak RSS MB |")
    print("| --- | --- | --- |")
    for name, (wall, peak) in found.items():
        print(f"| {name} | {wall:.2f} | {peak:.0f} |")
    (w1, p1), (w2, p2) = found.values()
    print(f"one file / many files: wall {w1 / w2:.2f}, peak {p1 / p2:.2f}")


if __name__ == "__main__":
    main()
