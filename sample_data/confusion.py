"""The confusion matrix of `diagnose` over the calibration corpus: planted class x named cause.

    python sample_data/calibrate.py --out DIR           # the corpus (sample_data/README.md)
    python sample_data/confusion.py --corpus DIR        # diagnose every run, alone and against
                                                        # its healthy baseline; print the matrix
    python sample_data/confusion.py --corpus DIR --write docs/diagnose.md   # and keep it there
    python sample_data/confusion.py --corpus COPY --write docs/diagnose.md --block committed
                                    # COPY: a copy of tests/data/calibration (the committed runs)

Each run of ``DIR/corpus.json`` is ingested into ``DIR/store`` (once) with no tag, as a user whose
dumps say nothing of their stack would, and diagnosed twice: alone, and with ``--baseline`` its
healthy baseline run (another healthy run of the same model and stack). A diagnosis is kept as
JSON in ``DIR/diagnoses/`` (``NAME.json``, ``NAME@baseline.json``) and reused unless ``--fresh``.
The matrix counts, per planted class (``healthy``, ``improvement``, a fault's class, or a
combination ``a+b``), the cause each diagnosis names: ``none`` when it raises no alarm. A healthy
or improved run named anything but ``none`` is a false alarm; the acceptance figure of the
calibration is a diagonal matrix with no false alarm. The matrix counts the first cause only, so
the named set is weighed against the planted set too: a **spurious second cause** is one named
beside the first whose class is not planted (it costs trust as a false alarm does), and a
combination is **named in full** when every planted cause is among the named ones.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mismatchctl import api  # noqa: E402
from mismatchctl.errors import MismatchError  # noqa: E402

QUIET = ("healthy", "improvement")


@dataclass(frozen=True)
class Named:
    """What one diagnosis concluded: the verdict, the cause (and the second cause, if any)."""

    run: str
    planted: str
    size: str | None
    baseline: str | None  # the --baseline run, None alone
    verdict: str
    cause: str
    also: tuple[str, ...]
    ratio: float | None  # the run's vllm_kl over its baseline's (corpus.json)

    @property
    def false_alarm(self) -> bool:
        return self.planted in QUIET and self.verdict in ("warn", "fail")

    @property
    def right(self) -> bool:
        """The planted cause named: every cause of a combination among the named ones, each
        named by its key or by another cause of its class (``tool_turns`` and ``sequences``
        are code paths, ``stop`` a template fault); in the MoE class the key itself (flips and
        a capture bug take opposite remedies)."""
        if self.planted in QUIET:
            return not self.false_alarm
        named = {self.cause, *self.also}
        return all(any(_same(p, n) for n in named) for p in self.planted.split("+"))

    @property
    def spurious(self) -> tuple[str, ...]:
        """The second causes whose class is not planted (on a healthy run: every one)."""
        planted = [] if self.planted in QUIET else self.planted.split("+")
        return tuple(a for a in self.also if not any(_same(p, a) for p in planted))


def _same(planted: str, named: str) -> bool:
    from mismatchctl.analysis.diagnose.causes.catalogue import by_key

    if planted == named:
        return True
    try:
        a, b = by_key(planted).CLASS, by_key(named).CLASS
    except StopIteration:
        return False
    return a == b and a != "MoE"


def load_corpus(corpus: Path) -> list[dict[str, Any]]:
    found = json.loads((corpus / "corpus.json").read_text())
    runs = found["runs"] if isinstance(found, dict) else found
    return [r for r in runs if (corpus / "runs" / r["name"]).exists()]


def ingest_all(corpus: Path, runs: list[dict[str, Any]], store: Path) -> None:
    have = {r.name for r in api.runs(store)} if store.exists() else set()
    for run in runs:
        if run["name"] in have:
            continue
        options = run.get("ingest") or {}
        routes = None
        if options:
            routes = api.RouteOptions(
                top_k=options.get("routes_topk") or 0, num_experts=options.get("num_experts")
            )
        api.ingest([corpus / "runs" / run["name"]], run["name"], store=store, routes=routes)


def diagnosis(store: Path, out: Path, run: str, baseline: str | None, fresh: bool) -> dict:
    path = out / (f"{run}@{baseline}.json" if baseline else f"{run}.json")
    if path.exists() and not fresh:
        return json.loads(path.read_text())
    found = api.diagnose(run, baseline=baseline, store=store).section_dict()
    path.write_text(json.dumps(found, default=str))
    return found


def named(run: dict[str, Any], found: dict, baseline: str | None) -> Named:
    cause = found.get("cause") or {}
    if not cause:  # a diagnosis of before the weighing: its cause check's evidence
        check = next((c for c in found["checks"] if c["name"] == "cause"), None)
        cause = {"key": check["evidence"]["cause"]} if check else {}
    key = cause.get("key", "none") if found["verdict"] in ("warn", "fail") else "none"
    return Named(
        run["name"], run["cause"] if run["kind"] in ("fault", "combo") else run["kind"],
        run.get("size"), baseline, found["verdict"], key,
        tuple(a["key"] for a in cause.get("also", [])), run.get("ratio_to_baseline"),
    )  # fmt: skip


def matrix(rows: list[Named]) -> str:
    """Planted class (rows) x named cause (columns), counts over every diagnosis."""
    causes = [*sorted({r.cause for r in rows} - {"none"}), "none"]
    by = defaultdict(Counter)
    for r in rows:
        by[r.planted][r.cause] += 1
    planted = sorted(by, key=lambda p: (p not in QUIET, "+" in p, p))
    head = "| planted \\ named | " + " | ".join(causes) + " | right | spurious second |"
    lines = [head, "|" + " --- |" * (len(causes) + 3)]
    for p in planted:
        right = sum(r.right for r in rows if r.planted == p)
        total = sum(by[p].values())
        cells = [str(by[p][c]) if by[p][c] else "." for c in causes]
        spurious = _spurious_text([r for r in rows if r.planted == p]) or "."
        lines.append(f"| {p} | " + " | ".join(cells) + f" | {right}/{total} | {spurious} |")
    return "\n".join(lines)


def _spurious_text(rows: list[Named]) -> str:
    """The spurious second causes of these diagnoses by key, most frequent first: "precision 3"."""
    found = Counter(a for r in rows for a in r.spurious)
    return ", ".join(
        f"{key} {n}" for key, n in sorted(found.items(), key=lambda kv: (-kv[1], kv[0]))
    )


def details(rows: list[Named]) -> str:
    lines = [
        "| run | planted | size | x baseline | alone | with its baseline |",
        "|" + " --- |" * 6,
    ]
    pairs: dict[str, list[Named]] = defaultdict(list)
    for r in rows:
        pairs[r.run].append(r)
    for run, found in pairs.items():
        alone = next((r for r in found if r.baseline is None), None)
        based = next((r for r in found if r.baseline is not None), None)
        first = found[0]
        ratio = f"{first.ratio:.3g}" if first.ratio else "-"

        def cell(r: Named | None) -> str:
            if r is None:
                return "-"
            text = f"{r.verdict} {r.cause}" + "".join(f" + {a}" for a in r.also)
            return text if r.right else f"**{text}**"

        lines.append(
            f"| {run} | {first.planted} | {first.size or '-'} | {ratio} | {cell(alone)} | "
            f"{cell(based)} |"
        )
    return "\n".join(lines)


def summary(rows: list[Named]) -> str:
    quiet = [r for r in rows if r.planted in QUIET]
    faults = [r for r in rows if r.planted not in QUIET]
    false = sum(r.false_alarm for r in quiet)
    right = sum(r.right for r in faults)
    silent = [r for r in faults if r.cause == "none"]
    unmeasured = sum(r.size is None for r in silent)
    alone = sum(r.size is not None and r.planted == "precision" and r.baseline is None
                for r in silent)  # fmt: skip
    return (
        f"{len(rows)} diagnoses of {len({r.run for r in rows})} runs: false alarms {false} of "
        f"{len(quiet)} healthy or improved; faults named right {right} of {len(faults)}, "
        f"misnamed {len(faults) - right - len(silent)}, not seen {len(silent)} ({alone} a "
        f"precision loss without a baseline, {unmeasured} a fault of no measurable size). "
        + seconds(faults)
    )


def seconds(faults: list[Named]) -> str:
    """The second causes against the planted set: how many are spurious, and how many planted
    combinations are named in full."""
    named = sum(len(r.also) for r in faults)
    spurious = [r for r in faults if r.spurious]
    combos = [r for r in faults if "+" in r.planted]
    which = _spurious_text(faults)
    count = sum(len(r.spurious) for r in spurious)
    wrong = f"{count} in {len(spurious)} diagnoses ({which})" if spurious else "none"
    return (
        f"Second causes named {named}, spurious (a class not planted) {wrong}; combinations "
        f"named in full {sum(r.right for r in combos)} of {len(combos)}."
    )


def markers(block: str) -> tuple[str, str]:
    """The comments that hold a block of a Markdown file (``confusion``: the matrix)."""
    return f"<!-- {block}:begin -->", f"<!-- {block}:end -->"


def write_into(doc: Path, text: str, block: str = "confusion") -> None:
    """The matrix between the markers of ``block`` in ``doc``; a new file holds the block
    alone."""
    begin, end = markers(block)
    body = doc.read_text() if doc.exists() else f"{begin}\n{end}\n"
    if begin not in body or end not in body:
        raise SystemExit(f"{doc} has no {begin} ... {end} block to write the matrix into")
    head, rest = body.split(begin, 1)
    _, tail = rest.split(end, 1)
    doc.write_text(f"{head}{begin}\n{text}\n{end}{tail}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, required=True, help="calibrate.py's --out")
    parser.add_argument("--only", default="", help="comma-separated run names")
    parser.add_argument("--fresh", action="store_true", help="diagnose again, ignore saved JSON")
    parser.add_argument("--write", type=Path, help="a Markdown file to keep the matrix in")
    parser.add_argument(
        "--block",
        default="confusion",
        help="the block of --write to keep it in (<!-- BLOCK:begin --> ... <!-- BLOCK:end -->); "
        "`committed` is the committed runs' (tests/data/calibration)",
    )
    opts = parser.parse_args()
    corpus: Path = opts.corpus
    runs = load_corpus(corpus)
    if opts.only:
        wanted = set(opts.only.split(","))
        runs = [r for r in runs if r["name"] in wanted]
    store, out = corpus / "store", corpus / "diagnoses"
    out.mkdir(exist_ok=True)
    ingest_all(corpus, [*runs, *(r for r in load_corpus(corpus) if r["name"] in
                                 {x.get("baseline") for x in runs})], store)  # fmt: skip
    rows: list[Named] = []
    for run in runs:
        start = time.perf_counter()
        for base in (None, run.get("baseline")):
            if base is None and rows and rows[-1].run == run["name"]:
                continue
            try:
                found = diagnosis(store, out, run["name"], base, opts.fresh)
            except MismatchError as exc:
                print(f"{run['name']} (baseline {base}): {exc}", file=sys.stderr)
                continue
            rows.append(named(run, found, base))
        took = time.perf_counter() - start
        shown = [f"{r.verdict} {r.cause}" for r in rows if r.run == run["name"]]
        print(f"{run['name']:<26} {took:5.1f} s  {' | '.join(shown)}", file=sys.stderr)
    text = "\n\n".join([summary(rows), matrix(rows), details(rows)])
    print(text)
    if opts.write:
        write_into(opts.write, text, opts.block)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
