"""`mismatchctl demo`: ingest the bundled sample data into a store, report on it, write the HTML."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer

from mismatchctl import api
from mismatchctl.cli.common import QuietFlag, handle_errors, say, show
from mismatchctl.cli.report import SUBTITLE

HELP = """Ingest the bundled sample data (sample_data/) into a store, print `report --by-gpu` for all its runs and write the HTML report (with a diagnosis of each run).

The demo's store is not the default store of the other commands: point them at it with --store mismatchctl-demo/store, or export MISMATCHCTL_STORE=$PWD/mismatchctl-demo/store. The sample runs' tokenizer (sample_data/tokenizer.json, byte-level) is remembered for them, so `show` and `tokens` print their text.

Which runs are captured from a real model's two numeric paths and which are synthetic is said in the output and in sample_data/README.md. Running it again reuses the runs already ingested.

Last, `bisect` on the sample run whose trainer checkpoint ships with the sample data (ref-b, step 8): 32 of its sequences re-scored with the sample model under each setting, which names the engine's path (bf16, one token at a time through a KV cache). It needs torch and safetensors (pip install 'mismatchctl[torch,bisect]'); without them the demo says it skipped it, and why.

Each phase (ingest, reading the tokens, the diagnoses, the HTML page, bisect) is a progress bar on a terminal and a line on stderr otherwise (-q: none); a first run says so before it compiles its kernels (numba, cached on disk).

[bold]Examples[/]

  mismatchctl demo

  mismatchctl demo --store /tmp/demo-store --html /tmp/demo.html
"""


@handle_errors
def demo(
    store: Annotated[str, typer.Option("--store", help="Store directory for the demo runs.")] = str(
        api.DEMO_STORE
    ),
    html_out: Annotated[
        str | None,
        typer.Option("--html", help="HTML report path (default: report.html beside the store)."),
    ] = None,
    data: Annotated[
        str | None, typer.Option("--data", help="Sample data directory (holds manifest.json).")
    ] = None,
    quiet: QuietFlag = False,
) -> None:
    from mismatchctl.cli.progress import Phases  # rich.progress: 25 ms

    target = Path(html_out) if html_out else Path(store).parent / "report.html"
    runs = api.demo_runs(data)  # a missing or bad manifest is said before anything else
    with Phases(enabled=not quiet) as phases:
        phases.start("loading the compiled kernels")
        compiling = api.demo_compile()
        if compiling is not None:
            phases.note(compile_note(compiling))
        on_run = phases.steps("ingesting {total} sample runs")
        api.demo_ingest(store, runs, on_run=on_run)
        names = {r.name for r in runs}
        tokens = sum(r.model_tokens for r in api.runs(store) if r.name in names)
        phases.start(f"reading {tokens:,} tokens of {len(runs)} runs", tokens, "tokens")
        rep = api.demo_report(
            runs,
            store,
            on_part=phases.advance,
            on_diagnosis=phases.steps("diagnosing {total} runs"),
        )
        sections = api.sections(rep)
        phases.start("writing the HTML report")
        from mismatchctl.render.html import write

        write(target, "mismatchctl demo: the bundled sample runs", SUBTITLE, sections)
        bisected = _bisect(phases, store, data)
    show(sections)
    if isinstance(bisected, str):
        say(f"bisect: skipped, {bisected}")
    else:
        show(api.sections(bisected))
    say("Sample runs:", "bold")
    for line in legend(runs):
        say(line)
    say(f"Store: {Path(store).resolve()}")
    say(f"HTML report: {target.resolve()}")
    say(
        f"The other commands read another store unless told: {api.point_at(store)} "
        f"(e.g. `mismatchctl runs --store {store}`)."
    )


def _bisect(phases: Any, store: str, data: str | None) -> Any:
    """The last phase: ``bisect`` on the sample run whose checkpoint ships (a small sample), or
    why it is skipped (said with the output, not as a phase)."""
    why = api.demo_bisect_skipped(data)
    if why is not None:
        return why
    phases.start(f"bisect: re-scoring {api.DEMO_BISECT_SAMPLE} sequences of the sample model")

    def step(name: str, done: int, total: int) -> None:
        if done <= 1:
            phases.start("bisect: re-scoring", total, "passes")
        phases.step(name, done, total)

    return api.demo_bisect(store, data, on_plan=phases.note, on_pass=step)


def legend(runs: Sequence[Any]) -> list[str]:
    """The "Sample runs:" lines: the names padded to the longest, so that every run's kind and
    what it shows start in one column whatever the names' lengths."""
    width = max((len(run.name) for run in runs), default=0)
    return [
        f"  {run.name:<{width}}  {'captured' if run.captured else 'SYNTHETIC':<9}  {run.shows}"
        for run in runs
    ]


def compile_note(compiling: api.Compile) -> str:
    return (
        f"compiling {compiling.kernels} kernels once, about {compiling.seconds} s on a first "
        f"run (measured on 2 CPU cores); cached under {compiling.cached_in}"
    )


demo.__doc__ = HELP
