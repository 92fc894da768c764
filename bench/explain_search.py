"""Time and memory of explain's search (``stats/localize/explain.py``) on cubes of realistic size.

    python bench/explain_search.py --tokens 2e7 --steps 100

Two cubes (target and baseline) of the dimensions of ``bench/cube_throughput.py`` are filled
with ``--tokens`` synthetic tokens each, in chunks (the target with a planted fault: K3 x5 at
KV positions >= 1024 in two steps), then ``explain`` runs without and with the baseline.
Prints the seconds of each, the candidate cells tested, the findings, and the peak RSS of the
process before and after the searches (the cubes' states are the bulk of what they hold).
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np
from cube_throughput import slices, spec_for, tokens

from mismatchctl.stats.cube.cube import Cube
from mismatchctl.stats.cube.spec import CubeSpec
from mismatchctl.stats.localize.explain import explain

CHUNK = 2_000_000


def filled(spec: CubeSpec, n: int, steps: int, seed: int, fault: bool) -> Cube:
    cube = Cube(spec)
    done = k = 0
    while done < n:
        t = tokens(min(CHUNK, n - done), steps, seed=seed * 1000 + k)
        if fault:
            hot = (t["tok"][:, 3] >= 10) & np.isin(t["seqc"][t["seq"], 0], [steps // 3, steps // 2])
            r = t["lt"] - t["lr"]
            t["lt"] = np.where(hot, t["lr"] + r * np.sqrt(5.0), t["lt"])
        for s in slices(len(t["lr"]), t["seq"]):
            cube.add(t["lr"][s], t["lt"][s], t["seq"][s], t["tok"][s], t["seqc"])
        done += len(t["lr"])
        k += 1
    return cube


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tokens", type=float, default=2e7)
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()
    spec = spec_for(args.steps)
    target = filled(spec, int(args.tokens), args.steps, seed=1, fault=True)
    base = filled(spec, int(args.tokens), args.steps, seed=2, fault=False)
    before = rss_mb()
    print(f"cubes: {spec.n_cells} cells, {target.nbytes / 1e6:.1f} MB each")
    print("| mode | seconds | tested | findings |\n| --- | ---: | ---: | --- |")
    for name, cubes in (("internal", (target,)), ("baseline", (target, base))):
        begin = time.perf_counter()
        ex = explain(*cubes)
        secs = time.perf_counter() - begin
        found = "; ".join(f.sentence for f in ex.findings) or "none"
        print(f"| {name} | {secs:.2f} | {ex.tested} | {found} |")
    print(f"\npeak RSS: {before:.0f} MB with the two cubes, {rss_mb():.0f} MB after the searches")


if __name__ == "__main__":
    main()
