"""MoE routes against their read floor (issue #46, decision 3): for each encoding of the routes
the ingest supports, in alternating rounds of one run,

- the floor: pyarrow (its whole column chunks read at once, and ``pyarrow-stream``: streamed
  through a buffer of 8 MiB, as the ingest reads a file with routes), Polars and DuckDB each
  reading just the two routes columns of the dump into numpy arrays (the ids as one flat array
  per side; SGLang's base64 decoded), in a fresh process, timed from after the imports; the
  floor is the fastest of them;
- ``ingest`` of the same tokens without routes, and ``ingest`` of the dump with them (each a
  fresh process, wall and CPU from wait4), and with ``--before REV`` the latter with the code of
  REV too (its files extracted into the workdir);

and the ratio ingest with routes / (ingest without routes + floor) against the target 1.3:

    python bench/routes_floor.py [--tokens 1] [--layers 24] [--top-k 8] [--repeats 3]
        [--encodings fixed,lists,base64,bytes] [--readers pyarrow,pyarrow-stream,polars,duckdb] [--before REV]
        [--write docs/benchmarks.md] [--workdir DIR]
    python bench/routes_floor.py --workdir DIR --render [--write docs/benchmarks.md]

The dumps (``--tokens`` millions of response positions in sequences of 256-2048 tokens, 5% tool
tokens, a prompt of one token, the trainer's routes differing from the engine's on 2% of the
positions), reused when the workdir holds them (only those of ``--encodings`` are written: the
nested int64 lists of 4M positions take 12 GB to write):

    plain   no routes
    fixed   nested fixed-size lists of int16 (list<fixed_size_list<fixed_size_list<int16>>>)
    lists   nested lists of int64, as pyarrow types ``ndarray.tolist()``
    base64  SGLang's base64 of int32, one string per sequence (rows from position 0)
    bytes   prime-rl's ``{data, shape, dtype}`` structs of uint8 bytes (rows from position 0)
"""

from __future__ import annotations

import argparse
import base64
import itertools
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))
from routing import mctl, timed  # noqa: E402
from sections import replace_section  # noqa: E402

SECTION = "## MoE routes against their read floor"
ENCODINGS = ("fixed", "lists", "base64", "bytes")
READERS = ("pyarrow", "pyarrow-stream", "polars", "duckdb")
READER_LABELS = {
    "pyarrow": "pyarrow",
    "pyarrow-stream": "pyarrow, streamed",
    "polars": "Polars",
    "duckdb": "DuckDB",
}
# the ingest's read of a file with routes (mismatchctl/ingest/parquet_sequence.py,
# ROUTES_READ_BUFFER): column chunks streamed through a buffer, not read whole
STREAM_BUFFER = 8 << 20
COLUMNS = ("rollout_routed_experts", "trainer_routed_experts")
CHUNK = 20_000
TARGET = 1.3
LABELS = {
    "fixed": "fixed-size lists (int16)",
    "lists": "nested lists (int64)",
    "base64": "SGLang base64 (int32)",
    "bytes": "prime-rl bytes (uint8)",
}


def generate(
    workdir: Path, tokens: int, layers: int, top_k: int, encodings: list[str], seed: int = 0
) -> None:
    """The plain dump and those of ``encodings`` not in the workdir yet, of the same tokens
    (see the module's docstring; the same seed: the same tokens whichever are written)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    lengths: list[int] = []
    while sum(lengths) < tokens:
        lengths.append(int(rng.integers(256, 2049)))
    lengths[-1] -= sum(lengths) - tokens
    n = int(sum(lengths))
    offsets = np.zeros(len(lengths) + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    roll = -rng.exponential(0.3, n)
    train = np.minimum(roll + rng.normal(0, 0.02, n), 0)
    mask = (rng.random(n) > 0.05).astype(np.int8)
    ranked = np.concatenate(  # distinct experts per layer, a chunk of positions at a time
        [  # each chunk int16 at once: int64 ranks of 4M positions would take 7 GB
            np.argsort(rng.random((min(CHUNK, n - a), layers, 64)), axis=2)[
                :, :, : top_k + 1
            ].astype(np.int16)
            for a in range(0, n, CHUNK)
        ]
    )
    engine = np.ascontiguousarray(ranked[:, :, :top_k])
    trainer = engine.copy()
    flip = rng.random(n) < 0.02
    trainer[flip, 0, 0] = ranked[flip, 0, top_k]  # the next expert: one id differs on layer 0

    def lists(values: pa.Array) -> pa.Array:
        return pa.ListArray.from_arrays(pa.array(offsets), values)

    def fixed(ids: np.ndarray) -> pa.Array:
        inner = pa.FixedSizeListArray.from_arrays(pa.array(ids.reshape(-1)), top_k)
        return lists(pa.FixedSizeListArray.from_arrays(inner, layers))

    def nested(ids: np.ndarray) -> pa.Array:
        inner = pa.ListArray.from_arrays(
            pa.array(np.arange(0, n * layers + 1, dtype=np.int32) * top_k),
            pa.array(ids.reshape(-1).astype(np.int64)),
        )
        middle = pa.ListArray.from_arrays(
            pa.array(np.arange(0, n + 1, dtype=np.int32) * layers), inner
        )
        return lists(middle)

    def b64(ids: np.ndarray) -> pa.Array:
        i32 = ids.astype("<i4")
        pairs = itertools.pairwise(offsets)
        return pa.array([base64.b64encode(i32[a:b].tobytes()).decode() for a, b in pairs])

    def blobs(ids: np.ndarray) -> pa.Array:
        u8 = ids.astype(np.uint8)
        return pa.array(
            [
                {"data": u8[a:b].tobytes(), "shape": [b - a, layers, top_k], "dtype": "uint8"}
                for a, b in itertools.pairwise(offsets)
            ]
        )

    base = {
        "rollout_log_probs": lists(pa.array(roll)),
        "old_log_probs": lists(pa.array(train)),
        "response_mask": lists(pa.array(mask)),
        "prompt_length": pa.array(np.ones(len(lengths), np.int64)),
    }
    (workdir / "model-tokens").write_text(str(int(mask.sum())))
    pq.write_table(pa.table(base), workdir / "plain.parquet")
    for name, encode in (("fixed", fixed), ("lists", nested), ("base64", b64), ("bytes", blobs)):
        if name not in encodings or (workdir / f"{name}.parquet").exists():
            continue
        routes = dict(zip(COLUMNS, (encode(engine), encode(trainer)), strict=True))
        pq.write_table(pa.table({**base, **routes}), workdir / f"{name}.parquet")


def _flat(col: Any) -> Any:
    """One side's ids as a flat numpy array: a list column's values through every level (no
    copy), a binary column's data buffer viewed as ``dtype``'s items."""
    import numpy as np
    import pyarrow as pa

    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    while (
        pa.types.is_list(col.type)
        or pa.types.is_large_list(col.type)
        or (pa.types.is_fixed_size_list(col.type))
    ):
        col = col.flatten()
    if pa.types.is_integer(col.type):
        return col.to_numpy(zero_copy_only=True)
    if pa.types.is_binary_view(col.type) or pa.types.is_string_view(col.type):
        col = col.cast(pa.large_binary())
    wide = pa.types.is_large_binary(col.type) or pa.types.is_large_string(col.type)
    _, offsets, data = col.buffers()
    bounds = np.frombuffer(offsets, np.int64 if wide else np.int32)
    lo, hi = int(bounds[col.offset]), int(bounds[col.offset + len(col)])
    return np.frombuffer(data, np.uint8, hi - lo, lo)


def _ids(col: Any, encoding: str) -> Any:
    """The flat ids; SGLang's decoded bytes viewed as their int32 (no copy)."""
    flat = _flat(col)
    return flat.view("<i4") if encoding == "base64" else flat


def _b64_rows(col: Any) -> Any:
    """SGLang's strings decoded one sequence at a time (pyarrow has no base64 kernel)."""
    import numpy as np

    rows = [base64.b64decode(s) for s in col.to_pylist()]
    return np.frombuffer(b"".join(rows), "<i4")


def read_pyarrow(path: Path, encoding: str, rows: int, buffer: int = 0) -> Iterator[Any]:
    """``buffer``: bytes of a column chunk read at a time (0: each column chunk read whole)."""
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(path, buffer_size=buffer, pre_buffer=False)
    for batch in pf.iter_batches(batch_size=rows, columns=list(COLUMNS)):
        for c in COLUMNS:
            col = batch.column(c)
            if encoding == "base64":
                yield _b64_rows(col)
            else:
                yield _flat(col.field("data") if encoding == "bytes" else col)


def read_pyarrow_stream(path: Path, encoding: str, rows: int) -> Iterator[Any]:
    """pyarrow as the ingest reads a file with routes: its column chunks streamed through a
    buffer (the whole chunks of a side's routes are hundreds of MB)."""
    return read_pyarrow(path, encoding, rows, STREAM_BUFFER)


def read_polars(path: Path, encoding: str, rows: int) -> Iterator[Any]:
    import polars as pl

    frame = pl.scan_parquet(path).select(COLUMNS)
    if encoding == "base64":
        frame = frame.select(pl.col(c).str.decode("base64") for c in COLUMNS)
    elif encoding == "bytes":
        frame = frame.select(pl.col(c).struct.field("data").alias(c) for c in COLUMNS)
    for batch in frame.collect_batches(chunk_size=rows):
        table = batch.to_arrow(compat_level=pl.CompatLevel.oldest())
        yield from (_ids(table.column(c), encoding) for c in COLUMNS)


def read_duckdb(path: Path, encoding: str, rows: int) -> Iterator[Any]:
    import duckdb

    con = duckdb.connect()
    pick = {
        "base64": "from_base64({c}) as {c}",
        "bytes": "{c}.data as {c}",
    }.get(encoding, "{c}")
    cols = ", ".join(pick.format(c=c) for c in COLUMNS)
    reader = con.sql(f"select {cols} from read_parquet('{path}')").to_arrow_reader(rows)
    for batch in reader:
        yield from (_ids(batch.column(c), encoding) for c in COLUMNS)


def read(reader: str, path: Path, encoding: str, rows: int) -> None:
    """One reader's read of the two routes columns in batches of ``rows`` sequences (each
    batch's ids made numpy arrays, then dropped: memory stays bounded, as the ingest's),
    timed from after its imports; prints its wall and CPU seconds and the ids it read (JSON)."""
    import numpy as np

    modules = {"pyarrow": "pyarrow.parquet", "pyarrow-stream": "pyarrow.parquet"}
    __import__(modules.get(reader, reader))
    start, cpu = time.perf_counter(), time.process_time()
    ids = sum(
        int(np.asarray(a).size)
        for a in globals()[f"read_{reader.replace('-', '_')}"](path, encoding, rows)
    )
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    print(json.dumps({"wall": wall, "cpu": cpu, "ids": ids}))


def commands(
    workdir: Path,
    encodings: list[str],
    top_k: int,
    tokens: int,
    before: Path | None,
    readers: tuple[str, ...] = READERS,
) -> dict[str, list[str]]:
    """Every timed command; ``before``: a checkout whose ingest with routes is timed too. The
    readers read as many sequences at a time as the ingest does (its batches of about 1M
    tokens, 16x fewer for routes)."""
    import pyarrow.parquet as pq

    store = str(workdir / "store")
    sequences = pq.ParquetFile(workdir / "plain.parquet").metadata.num_rows
    avg = max(1, tokens // max(1, sequences))
    rows = max(1, min(65536, 1_000_000 // avg) // 16)
    out = {"ingest plain": mctl(ROOT, "ingest", str(workdir / "plain.parquet"), "--run", "plain",
                                "--store", store + "-plain", "-q")}  # fmt: skip
    for enc in encodings:
        path = str(workdir / f"{enc}.parquet")
        out[f"ingest {enc}"] = mctl(
            ROOT, "ingest", path, "--run", enc, "--store", f"{store}-{enc}", "-q",
            "--routes-topk", str(top_k),
        )  # fmt: skip
        if before is not None:
            out[f"ingest {enc} @before"] = mctl(
                before, "ingest", path, "--run", enc, "--store", f"{store}-before-{enc}", "-q",
                "--routes-topk", str(top_k),
            )  # fmt: skip
        for reader in readers:
            read = ["--read", reader, path, enc, str(rows)]
            out[f"{reader} {enc}"] = [sys.executable, __file__, *read]
    return out


def rounds(cmds: dict[str, list[str]], repeats: int, ids: int) -> dict[str, list[dict[str, float]]]:
    """``ids``: what each reader must have read (both sides), checked on every read."""
    names = list(cmds)
    for name in names:  # warm-up: numba's cache, the page cache
        timed([*cmds[name], "--warm"] if name.split()[0] in READERS else cmds[name])
    got: dict[str, list[dict[str, float]]] = {n: [] for n in names}
    for r in range(repeats):
        # a seeded shuffle per round: a rotation keeps each command after the same one, and
        # the second of two commands reading one file finds it in the page cache
        order = random.Random(r).sample(names, len(names))
        for name in order:
            cmd = cmds[name]
            got[name].append(timed([*cmd, "--warm"] if name.split()[0] in READERS else cmd))
            m = got[name][-1]
            if m.get("ids", ids) != ids:
                raise SystemExit(f"{name} read {m['ids']:,} ids, expected {ids:,}")
            print(
                f"round {r + 1}: {name}: {m['wall']:.2f} s, {m['cpu']:.2f} s CPU", file=sys.stderr
            )
    return got


def _med(runs: list[dict[str, float]], key: str) -> float:
    return statistics.median(m[key] for m in runs)


def section(result: dict[str, Any]) -> str:
    got, model = result["runs"], result["model_tokens"]
    head = (
        f"`python bench/routes_floor.py --tokens {result['tokens'] / 1e6:g} --layers "
        f"{result['layers']} --top-k {result['top_k']} --repeats {result['repeats']}"
        f"{' --before ' + result['before'] if result.get('before') else ''}` at "
        f"{result['commit']}: {result['tokens']:,} response positions ({model:,} model tokens, "
        "sequences of 256-2048 tokens, the trainer's routes differing on 2% of the positions), "
        "both sides' routes. Each command in a fresh process, "
        f"{result['repeats']} rounds in a shuffled order after a warm-up round, medians; a reader's read "
        "is timed from after its imports, in the ingest's batches of sequences (pyarrow's "
        "`ParquetFile.iter_batches`, Polars' `scan_parquet(...).collect_batches`, DuckDB's "
        "`read_parquet` to an Arrow reader), each batch's ids made numpy arrays; SGLang's "
        "base64 decoded by Polars' `str.decode`, DuckDB's "
        "`from_base64`, Python's `base64` with pyarrow). The floor is the fastest reader; the "
        f"target: ingest with routes <= {TARGET}x (ingest without routes + the floor). "
        f"{os.cpu_count()} cores shared with other jobs (load average {result['load_before']} "
        f"before, {result['load_after']} after)."
    )
    plain = _med(got["ingest plain"], "wall")
    plain_cpu = _med(got["ingest plain"], "cpu")
    readers = result.get("readers", READERS)
    names = " | ".join(READER_LABELS[r] for r in readers)
    rows = [
        f"| encoding | {names} | floor | ingest without routes | ingest with routes | ratio to "
        "(without + floor): wall / CPU |",
        "| --- |" + " ---: |" * (len(readers) + 4),
    ]
    before = result.get("before")
    if before:
        rows[0] = rows[0].replace("| ratio", f"| ingest with routes at {before} | ratio")
        rows[1] += " ---: |"
    for enc in result["encodings"]:
        reads = {
            r: (_med(got[f"{r} {enc}"], "wall"), _med(got[f"{r} {enc}"], "cpu")) for r in readers
        }
        best = min(reads, key=lambda r: reads[r][0])
        wall, cpu = _med(got[f"ingest {enc}"], "wall"), _med(got[f"ingest {enc}"], "cpu")
        ratio = wall / (plain + reads[best][0])
        ratio_cpu = cpu / (plain_cpu + min(c for _, c in reads.values()))
        cells = " | ".join(f"{reads[r][0]:.2f} / {reads[r][1]:.2f}" for r in readers)
        met = "met" if ratio <= TARGET else "not met"
        then = ""
        if before:
            runs = got[f"ingest {enc} @before"]
            then = f"{_med(runs, 'wall'):.2f} / {_med(runs, 'cpu'):.2f} | "
        rows.append(
            f"| {LABELS[enc]} | {cells} | {reads[best][0]:.2f} ({best}) | {plain:.2f} / "
            f"{plain_cpu:.2f} | {wall:.2f} / {cpu:.2f} | {then}**{ratio:.2f}** / "
            f"{ratio_cpu:.2f} ({met}) |"
        )
    note = (
        "Seconds are wall / CPU (user + system). The CPU ratio divides by the least CPU of "
        "the readers."
    )
    return "\n\n".join([head, "\n".join(rows), note])


def output(result: dict[str, Any], write: Path | None) -> None:
    text = section(result)
    print(text)
    if write:
        replace_section(write, SECTION, text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=float, default=1.0, help="millions of response positions")
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--top-k", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--encodings", default=",".join(ENCODINGS), help=f"of {', '.join(ENCODINGS)}")
    ap.add_argument("--readers", default=",".join(READERS), help="the readers timed")
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--write", type=Path, help="replace this Markdown file's section")
    ap.add_argument("--render", action="store_true", help="the section from the workdir's JSON")
    ap.add_argument("--before", help="a git revision whose ingest with routes is timed too")
    ap.add_argument("--read", nargs=4, help="READER PATH ENCODING ROWS: one read (internal)")
    ap.add_argument("--warm", action="store_true", help=argparse.SUPPRESS)
    opts = ap.parse_args()
    # as installed: bytecode cached (the warm-up round writes it for both checkouts; without
    # it every ingest compiles its modules again, the checkout of --before all of them)
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    if opts.read:
        read(opts.read[0], Path(opts.read[1]), opts.read[2], int(opts.read[3]))
        return
    if opts.render:
        output(json.loads((opts.workdir / "routes_floor.json").read_text()), opts.write)
        return
    workdir = opts.workdir or Path(tempfile.mkdtemp(prefix="routes-floor-"))
    workdir.mkdir(parents=True, exist_ok=True)
    want = {"tokens": int(opts.tokens * 1e6), "layers": opts.layers, "top_k": opts.top_k}
    encodings = [e for e in ENCODINGS if e in opts.encodings.split(",")]
    readers = tuple(r for r in READERS if r in opts.readers.split(","))
    marker = workdir / "routes-floor-dumps.json"
    if not marker.exists() or json.loads(marker.read_text()) != want:
        for old in workdir.glob("*.parquet"):  # dumps of other sizes
            old.unlink()
    if not all((workdir / f"{e}.parquet").exists() for e in ["plain", *encodings]):
        generate(workdir, want["tokens"], opts.layers, opts.top_k, encodings)
        marker.write_text(json.dumps(want))
    load_before = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    ids = 2 * want["tokens"] * opts.layers * opts.top_k
    before = None
    if opts.before:  # the revision's files, not a git worktree: nothing to clean up in git
        before = subprocess.run(
            ["git", "rev-parse", "--short", opts.before], cwd=ROOT, check=True,
            capture_output=True, text=True,
        ).stdout.strip()  # fmt: skip
        tree = workdir / f"tree-{before}"
        if not tree.exists():
            tree.mkdir()
            archive = subprocess.run(["git", "archive", before], cwd=ROOT, check=True,
                                     capture_output=True).stdout  # fmt: skip
            subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    tree_before = workdir / f"tree-{before}" if before else None
    cmds = commands(workdir, encodings, opts.top_k, want["tokens"], tree_before, readers)
    runs = rounds(cmds, opts.repeats, ids)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    result = {
        **want, "repeats": opts.repeats, "encodings": encodings, "readers": readers,
        "runs": runs, "commit": commit,
        "before": before,
        "model_tokens": int((workdir / "model-tokens").read_text()),
        "load_before": load_before, "load_after": " / ".join(f"{x:.1f}" for x in os.getloadavg()),
    }  # fmt: skip
    (workdir / "routes_floor.json").write_text(json.dumps(result, indent=1) + "\n")
    output(result, opts.write)


if __name__ == "__main__":
    main()
