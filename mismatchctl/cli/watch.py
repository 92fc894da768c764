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
from mismatchctl.api import IngestOptions
from mismatchctl.cli.common import OUTPUT_PANEL, JsonFlag, StoreOpt, handle_errors, say
from mismatchctl.cli.diagnose import EXIT_CHECK_FAILED
from mismatchctl.cli.reading import RunOpt, reading_options
from mismatchctl.display import file_label, number, printable
from mismatchctl.errors import UsageError
from mismatchctl.render.json import dumps_line

HELP = """Follow a directory that a running job writes per-step dumps into, ingest each file once it is complete (any format `ingest` reads, with its reading options), and print one line per new step: its model tokens, its vllm_kl and band, the change against the run's recent median, and alerts (spike, band, bad_file, changed_file).

Each file is its own transaction: a bad file is reported and skipped, Ctrl-C or SIGTERM leaves the store whole, and a restart skips what the run holds. --exit-on warn|fail stops with exit code 3 at the first alert of that level; any other stop exits 0. A JSON lines file that grows after its ingest (a writer appending lines) is ingested again as a whole, in place of what the run held of it.

What complete means, the alerts and their thresholds, every option: docs/live.md.

[bold]Examples[/]

  mismatchctl watch /shared/dumps/run7 --run run7 --tag gpu=H20

  mismatchctl watch dumps/ --run v2 --alerts alerts.jsonl --exit-on fail

  mismatchctl watch /nfs/dumps --run v2 --poll 10

  mismatchctl watch dumps/ --run v2 --json | jq -c 'select(.alerts != [])'

  mismatchctl watch dumps/ --run v2 --once -q
"""


ALERTS = "Alerts"
SCANNING = "Scanning and stopping"
NOTE_LABELS = {"bad": "Bad file", "grown": "Ingested again", "unlisted": "Not watched"}


class ExitOn(StrEnum):
    warn = "warn"
    fail = "fail"


@handle_errors
@reading_options
def watch(
    directory: Annotated[str, typer.Argument(help="The directory the job writes dumps into.")],
    run: RunOpt,
    *,
    alerts: Annotated[
        str | None,
        typer.Option(
            "--alerts", help="Append each alert to FILE as a JSON line.", rich_help_panel=ALERTS
        ),
    ] = None,
    exit_on: Annotated[
        ExitOn | None,
        typer.Option(
            "--exit-on",
            help="Stop with exit code 3 at the first alert of this level.",
            rich_help_panel=ALERTS,
        ),
    ] = None,
    explain: Annotated[
        bool,
        typer.Option(
            "--explain/--no-explain",
            help="Localize the steps that alert (explain against the recent steps).",
            rich_help_panel=ALERTS,
        ),
    ] = True,
    poll: Annotated[
        float | None,
        typer.Option(
            "--poll",
            min=0.05,
            help="Scan every SECONDS instead of using file events (network filesystems).",
            rich_help_panel=SCANNING,
        ),
    ] = None,
    settle: Annotated[
        float,
        typer.Option(
            "--settle",
            min=0.0,
            help="Seconds a JSON lines file must be unchanged to be read.",
            rich_help_panel=SCANNING,
        ),
    ] = api.DEFAULT_SETTLE,
    once: Annotated[
        bool,
        typer.Option(
            "--once", help="Scan once, ingest what is complete, and stop.", rich_help_panel=SCANNING
        ),
    ] = False,
    max_files: Annotated[
        int | None,
        typer.Option(
            "--max-files",
            min=1,
            help="Stop after N files (ingested or bad).",
            rich_help_panel=SCANNING,
        ),
    ] = None,
    idle_exit: Annotated[
        float | None,
        typer.Option(
            "--idle-exit",
            min=0.0,
            help="Stop after SECONDS without a new file.",
            rich_help_panel=SCANNING,
        ),
    ] = None,
    warm: Annotated[
        bool,
        typer.Option(
            "--warm",
            help="Fill the part cache for report, explain, diagnose as steps come.",
            rich_help_panel=SCANNING,
        ),
    ] = False,
    reading: IngestOptions,
    store: StoreOpt = None,
    json: JsonFlag = False,
    quiet: Annotated[
        bool,
        typer.Option(
            "--quiet",
            "-q",
            help="No start and stop messages on stderr.",
            rich_help_panel=OUTPUT_PANEL,
        ),
    ] = False,
) -> None:
    watcher = api.watch(
        directory, run, options=reading, store=store, poll=poll, settle=settle, once=once,
        max_files=max_files, idle_exit=idle_exit, explain=explain, warm=warm,
    )  # fmt: skip
    gate = {ExitOn.warn: ("warn", "fail"), ExitOn.fail: ("fail",), None: ()}[exit_on]
    with _alert_file(alerts) as sink, _sigterm_interrupts(), closing(watcher.events()) as events:
        said_off = False
        try:
            for event in events:
                if isinstance(event, api.Warmed):
                    said_off = _warmed(event, quiet, said_off)
                    continue
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
    quiet = " quiet" if line.spikes_left_out else ""
    recent = f" ({line.recent_steps}{quiet} steps)" if line.recent_median is not None else ""
    text = (
        f"step {line.step}{' (update)' if line.update else ''}  tokens {line.tokens:,}  "
        f"vllm_kl {number(line.vllm_kl)} {line.band or '-'}{change}{median}{recent}"
    )
    for a in line.alerts:
        text += f"\n  ALERT {a.level} {a.check}: {a.message}"
    where = next((a.localized for a in line.alerts if a.localized is not None), None)
    if where is not None:  # the step's, the same for each of its alerts
        text += _localized_text(where)
    return printable(text)


SHOWN_CELLS = 3  # of an alert's localized cells on the terminal (--json and --alerts: all)


def _localized_text(loc: dict[str, Any]) -> str:
    """The cells an alert's excess lives in, one line each, and what they were compared with;
    an excess no cell holds is said so (uniform, or in no cell)."""
    against = f"\n    against: {loc['against']}"
    if not loc["cells"]:
        what = "uniform over every dimension tested" if loc["kind"] == "uniform" else "no cell"
        return f"\n    localized: {what} ({_ratio(loc['rate_ratio'])}x the whole step){against}"
    out = ""
    for cell in loc["cells"][:SHOWN_CELLS]:
        where = ", ".join(f"{k}={v}" for k, v in cell["where"].items())
        few = loc["kind"] == "few_sequences" and cell["effective_sequences"] is not None
        worth = f"; {cell['effective_sequences']:.1f} sequences' worth" if few else ""
        out += f"\n    localized: {where} ({_ratio(cell['rate_ratio'])}x{worth})"
    more = len(loc["cells"]) - SHOWN_CELLS
    return out + (f"\n    (and {more} more cells: --json)" if more > 0 else "") + against


def _ratio(x: float | None) -> str:
    """A rate ratio as explain writes it: ``1064``, ``363``, ``2.51``."""
    if x is None:
        return "-"
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.3g}"


def _warmed(event: api.Warmed, quiet: bool, said_off: bool) -> bool:
    """Say what a warm did (``quiet``: nothing), and, the first time (``said_off`` False), that
    the part cache is off and nothing is read; whether that was said."""
    if event.directory is None:
        if not said_off:
            say(
                "Warning: --warm: the part cache is off ($MISMATCHCTL_CACHE_MB is 0, or no cache "
                "directory could be used): nothing is read",
                "yellow",
            )
        return True
    if not quiet:
        took = sum(event.seconds.values())
        say(f"Part cache warmed for report, explain and diagnose of {event.run} in {took:.1f} s")
    return said_off


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
