"""`mismatchctl watch DIR --run NAME`: ingest the dumps of a running job as they appear, one line
per new step, alerts as they fire."""

from __future__ import annotations

import datetime as dt
import signal
import sys
from collections.abc import Iterator
from contextlib import closing, contextmanager
from enum import StrEnum
from typing import Annotated, Any, TextIO

import typer

from mismatchctl import api
from mismatchctl.cli import reading as R
from mismatchctl.cli.common import JsonFlag, StoreOpt, handle_errors, say
from mismatchctl.cli.diagnose import EXIT_CHECK_FAILED
from mismatchctl.display import file_label, number, printable
from mismatchctl.errors import UsageError
from mismatchctl.render.json import dumps_line

HELP = """Follow a directory that a running training job writes per-step dumps into (any format `ingest` reads), ingest each file once it is complete, and print one line per new step: the step, its model tokens, its vllm_kl with its severity band, the change against the run's recent median (the 20 steps before), and an alert when a check fires.

Complete means: a Parquet file whose footer reads, a torch file whose zip directory (or pickle) is whole, a JSON lines file whose last line is terminated and that its writer marked done (prime-rl's STABLE in its step directory, or a later step written beside it) or left unchanged for --settle seconds. Temp names (`*.tmp`: any suffix ingest does not read) and dotfiles are ignored until they are renamed. Each file is ingested in a transaction of its own: a bad or unreadable file is reported (and alerted) and skipped while the watch goes on; Ctrl-C or SIGTERM stops the watch between or in the middle of an ingest and leaves the store whole (the interrupted file is ingested on the next start). Restart-safe: files the run already holds are a no-op by their content fingerprint; a file that grows after it was ingested (a writer appending lines) is ingested again as a whole, in place of what the run held of it; a file otherwise changed after it was ingested is reported, never ingested twice.

Each file is read as `ingest` reads it: the reading options (--format, --map, --skip-bad, --trust-pickle, --allow-padding, --attr, --routes-aligned, --routes-topk, --num-experts, --keep-routes, --no-keep-masked) are ingest's.

Alerts: `spike` (vllm_kl at 3x the recent median or more, after 3 steps), `band` (the step's band above the step before's; the first step is judged against `low`), `bad_file`, `changed_file`. Level `fail` when the step's vllm_kl is above 2e-2 (the medium band's top), else `warn`. With an alert on a step, `explain` of the step against the recent steps names the cell the excess lives in (--no-explain to skip it). --alerts FILE appends each alert as a JSON line; --exit-on warn|fail stops with exit code 3 at the first alert of that level.

File events come from the watchdog library (inotify on Linux); --poll SECONDS scans on a timer instead (network filesystems, where events do not arrive). --once scans once and stops (for scripts: what is complete now is ingested, what is not is listed); --max-files N and --idle-exit SECONDS stop after N files or SECONDS without a new file. A stop by Ctrl-C, SIGTERM or these options exits 0 (3 with --exit-on when an alert fired).

[bold]Examples[/]

  mismatchctl watch /shared/dumps/run7 --run run7 --tag gpu=H20

  mismatchctl watch dumps/ --run v2 --alerts alerts.jsonl --exit-on fail

  mismatchctl watch /nfs/dumps --run v2 --poll 10

  mismatchctl watch dumps/ --run v2 --json | jq -c 'select(.alerts != [])'

  mismatchctl watch dumps/ --run v2 --once -q
"""


NOTE_LABELS = {"bad": "Bad file", "grown": "Ingested again", "unlisted": "Not watched"}


class ExitOn(StrEnum):
    warn = "warn"
    fail = "fail"


@handle_errors
def watch(
    directory: Annotated[str, typer.Argument(help="The directory the job writes dumps into.")],
    run: Annotated[str, typer.Option("--run", "-r", help="Name of the run to add the data to.")],
    tag: Annotated[
        list[str] | None,
        typer.Option("--tag", "-t", help="KEY=VALUE tag for the run (repeatable), e.g. gpu=H20."),
    ] = None,
    alerts: Annotated[
        str | None, typer.Option("--alerts", help="Append each alert to FILE as a JSON line.")
    ] = None,
    exit_on: Annotated[
        ExitOn | None,
        typer.Option("--exit-on", help="Stop with exit code 3 at the first alert of this level."),
    ] = None,
    poll: Annotated[
        float | None,
        typer.Option("--poll", min=0.05, help="Scan every SECONDS instead of using file events."),
    ] = None,
    settle: Annotated[
        float,
        typer.Option(
            "--settle", min=0.0, help="Seconds a JSON lines file must be unchanged to be read."
        ),
    ] = api.DEFAULT_SETTLE,
    once: Annotated[bool, typer.Option("--once", help="Scan once, ingest, and stop.")] = False,
    max_files: Annotated[
        int | None,
        typer.Option("--max-files", min=1, help="Stop after N files (ingested or bad)."),
    ] = None,
    idle_exit: Annotated[
        float | None,
        typer.Option("--idle-exit", min=0.0, help="Stop after SECONDS without a new file."),
    ] = None,
    explain: Annotated[
        bool, typer.Option("--explain/--no-explain", help="Localize the steps that alert.")
    ] = True,
    fmt: R.FormatOpt = None,
    map_: R.MapOpt = None,
    skip_bad: R.SkipBadFlag = False,
    trust_pickle: R.TrustPickleFlag = False,
    allow_padding: R.AllowPaddingFlag = False,
    attr: R.AttrOpt = None,
    routes_aligned: R.RoutesAlignedOpt = "input",
    routes_topk: R.RoutesTopkOpt = 0,
    num_experts: R.NumExpertsOpt = None,
    keep_routes: R.KeepRoutesFlag = False,
    keep_masked: R.KeepMaskedFlag = True,
    store: StoreOpt = None,
    json: JsonFlag = False,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="No start and stop messages on stderr.")
    ] = False,
) -> None:
    watcher = api.watch(
        directory, run, tags=tag or [], fmt=fmt, mapping=map_ or [], skip_bad=skip_bad,
        trust_pickle=trust_pickle, allow_padding=allow_padding, attrs=attr or [],
        routes=api.RouteOptions(routes_aligned, num_experts, keep_routes, routes_topk),
        keep_masked=keep_masked, store=store, poll=poll, settle=settle, once=once,
        max_files=max_files, idle_exit=idle_exit, explain=explain,
    )  # fmt: skip
    gate = {ExitOn.warn: ("warn", "fail"), ExitOn.fail: ("fail",), None: ()}[exit_on]
    with _alert_file(alerts) as sink, _sigterm_interrupts(), closing(watcher.events()) as events:
        try:
            for event in events:
                fired = _show(event, json, quiet, sink, run)
                if any(level in gate for level in fired):
                    say(f"Stopped: an alert of level {exit_on} fired (--exit-on).", "red")
                    raise typer.Exit(EXIT_CHECK_FAILED)
        except KeyboardInterrupt:
            _show(watcher.summary("interrupted"), json, quiet, sink, run)


def _show(event: Any, json: bool, quiet: bool, sink: TextIO | None, run: str) -> list[str]:
    """Print one event; append its alerts to the sink; the levels of the alerts."""
    if isinstance(event, api.StepLine):
        _write(dumps_line(event.to_dict()) if json else _step_text(event))
        alerts = [(a, event.alert_context()) for a in event.alerts]
    elif isinstance(event, api.FileNote):
        say(f"{NOTE_LABELS.get(event.kind, 'Skipped')}: {event.message}", "yellow")
        if event.hint:
            say(f"Hint: {event.hint}")
        alerts = [(event.alert, {"file": event.file})] if event.alert else []
    else:
        if not quiet:
            say(_status_text(event))
        return []
    for alert, where in alerts:
        if sink is not None:
            record = {"time": _now(), "run": run, **where, **alert.to_dict()}
            sink.write(dumps_line(record) + "\n")
            sink.flush()
    return [a.level for a, _ in alerts]


def _step_text(line: api.StepLine) -> str:
    change = "" if line.change is None else f"  {line.change:.2f}x of median"
    median = "" if line.recent_median is None else f" {number(line.recent_median)}"
    recent = f" ({line.recent_steps} steps)" if line.recent_median is not None else ""
    text = (
        f"step {line.step}{' (update)' if line.update else ''}  tokens {line.tokens:,}  "
        f"vllm_kl {number(line.vllm_kl)} {line.band or '-'}{change}{median}{recent}"
    )
    for a in line.alerts:
        text += f"\n  ALERT {a.level} {a.check}: {a.message}"
        if a.localized is not None:
            where = ", ".join(f"{k}={v}" for k, v in a.localized["where"].items())
            text += f"\n    localized: {where} ({number(a.localized['rate_ratio'], 3)}x)"
    return printable(text)


def _status_text(event: Any) -> str:
    if isinstance(event, api.Started):
        known = (
            f"; the run holds {event.known_steps} steps from {event.known_files} files"
            if event.known_files
            else ""
        )
        return f"Watching {event.directory} for run `{event.run}` ({event.mode}{known})."
    pending = "".join(f"\n  not complete yet: {f} ({why})" for f, why in event.pending.items())
    return (
        f"Stopped ({event.reason}): {event.ingested} files ingested, {event.steps} steps, "
        f"{event.bad} bad, {event.skipped} skipped, {len(event.pending)} not complete yet."
        + pending
    )


def _write(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


@contextmanager
def _alert_file(path: str | None) -> Iterator[TextIO | None]:
    if path is None:
        yield None
        return
    try:
        fh = open(path, "a", encoding="utf-8")  # noqa: SIM115 (closed below)
    except OSError as exc:
        raise UsageError(
            f"--alerts {file_label(path)}: cannot open it for appending: {exc.strerror}",
            "name a file in a directory that exists and that you can write to.",
        ) from None
    with fh:
        yield fh


@contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """SIGTERM stops the watch like Ctrl-C: the ingest in flight rolls back."""

    def _raise(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, _raise)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


watch.__doc__ = HELP
