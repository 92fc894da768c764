"""`watch`: follow a directory a running job writes dumps into, ingest each file once it is
complete, and say what each new step brings.

Each complete file (``ingest/ready.py``) is ingested on its own (one transaction: a bad file
leaves the store as it was and the watch goes on). Files are found by scanning the directory,
woken by file events (the ``watchdog`` library: inotify, FSEvents, ReadDirectoryChangesW) or,
with ``poll``, every ``poll`` seconds. A file is known by its path and its content fingerprint:
on a restart, the files the run already holds are a no-op, and a file changed after it was
ingested is reported, never ingested twice.

The watcher yields events (:class:`Started`, :class:`~mismatchctl.analysis.live.StepLine`,
:class:`FileNote`, :class:`Stopped`); it prints nothing. An interrupt (``KeyboardInterrupt``)
raised in the middle of an ingest rolls that ingest back; ``summary()`` then says what was done.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from mismatchctl.analysis.live import Alert, StepHistory, StepLine, localize, step_values
from mismatchctl.display import file_label
from mismatchctl.errors import EngineError, InputError, MismatchError, StoreError
from mismatchctl.ingest.ready import candidates, incomplete
from mismatchctl.ingest.run_ingest import Options, checked_fingerprint, ingest_files
from mismatchctl.options import DEFAULT_SETTLE
from mismatchctl.store import Store

SAFETY_WAKE = 5.0  # with file events, a scan at least this often (an event can be missed)
PENDING_WAKE = 1.0  # ... and this often while a file waits to be complete or settled
FALLBACK_POLL = 2.0  # when file events cannot be had, poll this often


@dataclass
class WatchOptions:
    """``settle``: seconds a JSON lines file (which has no end marker) must be left unchanged
    before it is read. ``once``: one scan, then stop. ``max_files``: stop once this many files
    were ingested or reported bad. ``idle_exit``: stop after this many seconds without a new
    file. ``explain``: localize the steps that raise an alert."""

    directory: str
    ingest: Options
    poll: float | None = None
    settle: float = DEFAULT_SETTLE
    once: bool = False
    max_files: int | None = None
    idle_exit: float | None = None
    explain: bool = True


@dataclass
class Started:
    directory: str
    run: str
    mode: str  # "file events" | "polling every N s" (and why)
    known_steps: int
    known_files: int


@dataclass
class FileNote:
    """A file not ingested: ``bad`` (ingest refused it: message and hint), ``copy`` (its content
    is already in the run under another name), ``changed`` (changed after it was ingested)."""

    file: str
    kind: str
    message: str
    hint: str | None = None
    alert: Alert | None = None


@dataclass
class Stopped:
    reason: str  # "once" | "max-files" | "idle" | "interrupted"
    ingested: int
    steps: int
    bad: int
    skipped: int
    pending: dict[str, str] = field(default_factory=dict)  # file -> why it is not complete


Event = Started | StepLine | FileNote | Stopped


class Waker:
    """Wakes the watch loop on file events under ``root``, or on a timer (``poll``)."""

    def __init__(self, root: Path, poll: float | None) -> None:
        self._event = threading.Event()
        self._observer = None
        self.poll = poll
        if poll is None:
            self._start_observer(root)
        else:
            self.mode = f"polling every {poll:g} s"

    def _start_observer(self, root: Path) -> None:
        from watchdog.events import FileSystemEventHandler
        from watchdog.observers import Observer

        waker = self._event

        class _Handler(FileSystemEventHandler):
            def on_any_event(self, event: object) -> None:
                waker.set()

        try:
            observer = Observer()
            observer.schedule(_Handler(), str(root), recursive=True)
            observer.start()
        except OSError as exc:  # e.g. inotify watches exhausted
            self.poll = FALLBACK_POLL
            self.mode = f"polling every {FALLBACK_POLL:g} s (file events unavailable: {exc})"
            return
        self._observer = observer
        self.mode = "file events"

    def wait(self, pending: bool, scanned_at: float) -> None:
        """Until a file event, or the next scan's time: ``poll`` seconds after the last scan
        began (a long ingest does not add the whole period to the lag)."""
        if self.poll is not None:
            timeout = max(0.0, scanned_at + self.poll - time.monotonic())
        else:
            timeout = PENDING_WAKE if pending else SAFETY_WAKE
        self._event.wait(timeout)
        self._event.clear()

    def close(self) -> None:
        if self._observer is not None:
            self._observer.stop()
            self._observer.join()


@dataclass
class _Seen:
    signature: tuple[int, int]  # size, mtime_ns
    status: str  # "ingested" | "bad" | "copy" | "changed"


class Watcher:
    def __init__(self, store: Store, opts: WatchOptions) -> None:
        self.store = store
        self.opts = opts
        self.root = Path(opts.directory)
        if not self.root.is_dir():
            raise InputError(
                f"{file_label(opts.directory)} is not a directory",
                "watch the directory the training job writes its dumps into (it must exist).",
            )
        self.run = opts.ingest.run
        self.seen: dict[Path, _Seen] = {}
        self.pending: dict[Path, str] = {}
        self.counts = {"ingested": 0, "bad": 0, "skipped": 0}
        self.steps: set[int] = set()
        self.history = StepHistory(self.run)

    def events(self) -> Iterator[Event]:
        known = self._known_sources()
        if known:
            self.history = StepHistory(self.run, step_values(self.store, self.run))
        waker = None if self.opts.once else Waker(self.root, self.opts.poll)
        mode = "one scan" if waker is None else waker.mode
        yield Started(self.opts.directory, self.run, mode, len(self.history.values), len(known))
        last = time.monotonic()
        try:
            while True:
                scanned_at = time.monotonic()
                for event in self._scan(known):
                    last = time.monotonic()
                    yield event
                reason = self._stop_reason(last)
                if reason is not None or waker is None:
                    yield self.summary(reason or "once")
                    return
                waker.wait(bool(self.pending), scanned_at)
        finally:
            if waker is not None:
                waker.close()

    def summary(self, reason: str) -> Stopped:
        pending = {file_label(p): why for p, why in sorted(self.pending.items())}
        c = self.counts
        return Stopped(reason, c["ingested"], len(self.steps), c["bad"], c["skipped"], pending)

    def _stop_reason(self, last: float) -> str | None:
        done = self.counts["ingested"] + self.counts["bad"]
        if self.opts.max_files is not None and done >= self.opts.max_files:
            return "max-files"
        if self.opts.idle_exit is not None and time.monotonic() - last >= self.opts.idle_exit:
            return "idle"
        return None

    def _known_sources(self) -> dict[str, str]:
        """Resolved path -> fingerprint of every source the run already holds."""
        if self.run not in self.store.run_names():
            return {}
        return {s.path: s.fingerprint for s in self.store.run(self.run).sources}

    def _scan(self, known: dict[str, str]) -> Iterator[Event]:
        found = candidates(self.root)
        for gone in set(self.pending) - set(found):  # removed (or renamed) while incomplete
            del self.pending[gone]
        for path in found:
            if self._reached_max():
                return
            sig = _signature(path)
            seen = self.seen.get(path)
            if sig is None or (seen is not None and seen.signature == sig):
                continue
            why = incomplete(path) or self._unsettled(path, sig)
            if why is not None:
                self.pending[path] = why
                continue
            self.pending.pop(path, None)
            yield from self._take(path, sig, seen, known)

    def _reached_max(self) -> bool:
        done = self.counts["ingested"] + self.counts["bad"]
        return self.opts.max_files is not None and done >= self.opts.max_files

    def _unsettled(self, path: Path, sig: tuple[int, int]) -> str | None:
        if path.suffix.lower() != ".jsonl":
            return None
        age = time.time() - sig[1] / 1e9
        return None if age >= self.opts.settle else "written less than --settle seconds ago"

    def _take(
        self, path: Path, sig: tuple[int, int], seen: _Seen | None, known: dict[str, str]
    ) -> Iterator[Event]:
        before = known.get(str(path.resolve()))
        if before is not None or (seen is not None and seen.status in ("ingested", "changed")):
            yield from self._known_file(path, sig, before)
            return
        yield from self._ingest(path, sig)

    def _known_file(self, path: Path, sig: tuple[int, int], before: str | None) -> Iterator[Event]:
        """A path ingested before (this session or an earlier one): the same content is a
        no-op; changed content is reported and left out (ingesting it would store its first
        part twice)."""
        if before is not None and checked_fingerprint(path) == before:
            self.seen[path] = _Seen(sig, "ingested")
            return
        self.seen[path] = _Seen(sig, "changed")
        self.counts["skipped"] += 1
        message = f"{file_label(path)} changed after it was ingested: not ingested again"
        hint = (
            "a dump file must not change once written (write a new file per step); to replace "
            f"the run's data, `mismatchctl runs rm {self.run}` and watch again."
        )
        alert = Alert("changed_file", "warn", message)
        yield FileNote(file_label(path), "changed", message, hint, alert)

    def _ingest(self, path: Path, sig: tuple[int, int]) -> Iterator[Event]:
        label = file_label(path)
        try:
            result = ingest_files(self.store, [str(path)], self.opts.ingest)
        except (StoreError, EngineError):
            raise
        except MismatchError as exc:
            self.seen[path] = _Seen(sig, "bad")
            self.counts["bad"] += 1
            alert = Alert("bad_file", "warn", f"{label} was not ingested: {exc.message}")
            yield FileNote(label, "bad", exc.message, exc.hint, alert)
            return
        done = result.files[0]
        if done.status != "ingested" or done.record is None:
            self.seen[path] = _Seen(sig, "copy")
            self.counts["skipped"] += 1
            message = f"{label}: its content is already in run `{self.run}` ({done.same_as})"
            yield FileNote(label, "copy", message)
            return
        self.seen[path] = _Seen(sig, "ingested")
        self.counts["ingested"] += 1
        yield from self._lines(done.record.steps, label)

    def _lines(self, steps: list[int], label: str) -> Iterator[StepLine]:
        values = step_values(self.store, self.run, steps) if steps else {}
        for step in sorted(values):
            line = self.history.line(step, values[step], [label])
            if line.alerts and self.opts.explain:
                where = localize(self.store, self.history, step)
                for alert in line.alerts:
                    alert.localized = where
            self.steps.add(step)
            yield line


def _signature(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns
