"""`watch`: follow a directory a running job writes dumps into, ingest each file once it is
complete, and say what each new step brings.

Each complete file (``ingest/ready.py``) is ingested on its own (one transaction: a bad file
leaves the store as it was and the watch goes on). Files are found by scanning the directory,
woken by file events (the ``watchdog`` library: inotify, FSEvents, ReadDirectoryChangesW) or,
with ``poll``, every ``poll`` seconds. A file is known by its path and its content fingerprint:
on a restart, the files the run already holds are a no-op; a file that grew after it was
ingested (JSON lines writers append) is ingested again as a whole, replacing what the run held
of it in one commit; a file otherwise changed after it was ingested is reported, never
ingested twice.

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
from mismatchctl.analysis.warm import Warmed, warm
from mismatchctl.display import file_label
from mismatchctl.errors import EngineError, InputError, MismatchError, StoreError
from mismatchctl.ingest.detect import RemovedWhileRead
from mismatchctl.ingest.ready import Unreadable, candidates, incomplete, writer_signal
from mismatchctl.ingest.run_ingest import (
    ChangedWhileRead,
    Options,
    content_of,
    ingest_files,
    prefix_fingerprint,
)
from mismatchctl.options import DEFAULT_SETTLE
from mismatchctl.store import Store
from mismatchctl.store.catalog import SourceRecord

SAFETY_WAKE = 5.0  # with file events, a scan at least this often (an event can be missed)
PENDING_WAKE = 1.0  # ... and this often while a file waits to be complete or settled
FALLBACK_POLL = 2.0  # when file events cannot be had, poll this often
READS = ("opened", "closed_no_write")  # events a reader makes (the watch's own): no wake
WARM_SPACING = 10.0  # --warm: the next warm starts this many times the last one's duration later


@dataclass
class WatchOptions:
    """``settle``: seconds a JSON lines file (which has no end marker) must be left unchanged
    before it is read. ``once``: one scan, then stop. ``max_files``: stop once this many files
    were ingested or reported bad. ``idle_exit``: stop after this many seconds without a new
    file. ``explain``: localize the steps that raise an alert. ``warm``: after a scan that
    ingested files, once no file waits to be complete, read the run for ``report``, ``explain``
    and ``diagnose`` as ``ingest --warm`` does (``analysis/warm.py``), so that the views a user
    opens while the job runs read the part cache's states, not tokens."""

    directory: str
    ingest: Options
    poll: float | None = None
    settle: float = DEFAULT_SETTLE
    once: bool = False
    max_files: int | None = None
    idle_exit: float | None = None
    explain: bool = True
    warm: bool = False


@dataclass
class Started:
    directory: str
    run: str
    mode: str  # "file events" | "polling every N s" (and why)
    known_steps: int
    known_files: int


@dataclass
class FileNote:
    """A file not ingested as it is: ``bad`` (ingest refused it, or it cannot be read: message
    and hint), ``copy`` (its content is already in the run under another name), ``changed``
    (changed after it was ingested), ``removed`` (removed while it was read), ``unlisted`` (a
    directory that cannot be listed), ``grown`` (grew after it was ingested: ingested again as
    a whole)."""

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


Event = Started | StepLine | FileNote | Warmed | Stopped


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
                if getattr(event, "event_type", None) not in READS:  # the watch's own reads
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
    signature: tuple[int, int, int]  # size, mtime_ns, ctime_ns (a chmod changes it)
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
        # a file's end marker as last read, by signature: not read again until it changes
        self.markers: dict[Path, tuple[tuple[int, int, int], str | None]] = {}
        self.unlisted: set[Path] = set()  # directories that could not be listed
        self.counts = {"ingested": 0, "bad": 0, "skipped": 0}
        self.steps: set[int] = set()
        self.history = StepHistory(self.run)
        self.warmed_at = 0  # the files ingested when the run was last warmed
        self.next_warm = 0.0  # the monotonic time before which no warm starts (but the stop's)

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
                yield from self._warm(stopping=reason is not None or waker is None)
                if reason is not None or waker is None:
                    yield self.summary(reason or "once")
                    return
                waker.wait(bool(self.pending), scanned_at)
        finally:
            if waker is not None:
                waker.close()

    def _warm(self, stopping: bool = False) -> Iterator[Warmed]:
        """The run read for the views (``WatchOptions.warm``) once files were ingested since
        the last warm and none waits to be complete, at most once per ``WARM_SPACING`` times
        the last warm's duration; at the stop whatever the spacing. The parts read before are
        found in the cache, but their states are loaded again: a warm's cost grows with the
        run (about 2 s for 500 steps kept), which the spacing keeps to a tenth of the watch."""
        if not self.opts.warm or self.counts["ingested"] == self.warmed_at:
            return
        if not stopping and (self.pending or time.monotonic() < self.next_warm):
            return
        self.warmed_at = self.counts["ingested"]
        start = time.monotonic()
        yield warm(self.store, self.run)
        self.next_warm = time.monotonic() + WARM_SPACING * (time.monotonic() - start)

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
        unlisted: list[Path] = []
        found = candidates(self.root, unlisted)
        yield from self._unlisted(unlisted)
        for gone in set(self.pending) - set(found):  # removed (or renamed) while incomplete
            del self.pending[gone]
        for path in found:
            if self._reached_max():
                return
            sig = _signature(path)
            seen = self.seen.get(path)
            if sig is None or (seen is not None and seen.signature == sig):
                continue
            try:
                why = self._waiting(path, sig)
            except Unreadable as exc:
                yield from self._bad(path, sig, exc)
                continue
            if why is not None:
                self.pending[path] = why
                continue
            self.pending.pop(path, None)
            yield from self._take(path, sig, seen, known)

    def _waiting(self, path: Path, sig: tuple[int, int, int]) -> str | None:
        """Why ``path`` is not to be read yet, or None. Its end marker is read once per state
        of the file (a reread wakes the watch on its own file events); a file that changed
        while it was looked at is still being written."""
        marker = self.markers.get(path)
        if marker is None or marker[0] != sig:
            marker = (sig, incomplete(path))
            self.markers[path] = marker
        why = marker[1] or self._unsettled(path, sig)
        if why is None and _signature(path) != sig:
            return "being written (it changed while it was looked at)"
        return why

    def _unlisted(self, found: list[Path]) -> Iterator[Event]:
        """A directory that cannot be listed, said once (again if it recovers and fails)."""
        for directory in sorted(set(found) - self.unlisted):
            label = file_label(directory)
            message = f"cannot list the directory {label}: the files in it are not watched"
            hint = "check its permissions (it is listed again at every scan)."
            self.counts["skipped"] += 1
            alert = Alert("bad_file", "warn", message)
            yield FileNote(label, "unlisted", message, hint, alert)
        self.unlisted = set(found)

    def _reached_max(self) -> bool:
        done = self.counts["ingested"] + self.counts["bad"]
        return self.opts.max_files is not None and done >= self.opts.max_files

    def _unsettled(self, path: Path, sig: tuple[int, int, int]) -> str | None:
        """A JSON lines file: its writer's word when it gives one (``ready.writer_signal``),
        else whether it has been left unchanged for --settle seconds."""
        if path.suffix.lower() != ".jsonl":
            return None
        signal = writer_signal(path)
        if signal is not None:
            return None if signal.complete else signal.why
        age = time.time() - sig[1] / 1e9
        return None if age >= self.opts.settle else "written less than --settle seconds ago"

    def _take(
        self, path: Path, sig: tuple[int, int, int], seen: _Seen | None, known: dict[str, str]
    ) -> Iterator[Event]:
        before = known.get(str(path.resolve()))
        if before is not None or (seen is not None and seen.status != "copy"):
            yield from self._known_file(path, sig, before)
            return
        yield from self._ingest(path, sig)

    def _known_file(
        self, path: Path, sig: tuple[int, int, int], before: str | None
    ) -> Iterator[Event]:
        """A path seen before (this session or an earlier one): one the run does not hold is
        ingested; the same content is a no-op; content that grew by appending (the run's content of it is a prefix of the
        file) is ingested again as a whole, replacing it; other changed content is reported
        and left out (ingesting it would store its first part twice)."""
        record = self._source(path)
        if record is None and before is None:  # not in the run (a bad file, rewritten)
            yield from self._ingest(path, sig)
            return
        try:
            now = content_of(path)
        except InputError as exc:  # removed, unreadable, or changed while it was hashed
            yield from self._not_read(path, sig, exc)
            return
        if now.fingerprint in (before, record.fingerprint if record else None):
            self.seen[path] = _Seen(sig, "ingested")
            return
        if record is not None and _grew(path, now.size, record):
            yield from self._ingest(path, sig, record)
            return
        self.seen[path] = _Seen(sig, "changed")
        self.counts["skipped"] += 1
        message = f"{file_label(path)} changed after it was ingested: not ingested again"
        hint = (
            "a dump file must not change once written (write a new file per step, or only "
            "append to it); to replace the run's data, "
            f"`mismatchctl runs rm {self.run}` and watch again."
        )
        alert = Alert("changed_file", "warn", message)
        yield FileNote(file_label(path), "changed", message, hint, alert)

    def _source(self, path: Path) -> SourceRecord | None:
        """The run's source read from ``path`` (the latest, if it was ingested again)."""
        if self.run not in self.store.run_names():
            return None
        resolved = str(path.resolve())
        found = [s for s in self.store.run(self.run).sources if s.path == resolved]
        return found[-1] if found else None

    def _ingest(
        self, path: Path, sig: tuple[int, int, int], replacing: SourceRecord | None = None
    ) -> Iterator[Event]:
        label = file_label(path)
        old = None if replacing is None else replacing.id
        try:
            result = ingest_files(self.store, [str(path)], self.opts.ingest, replacing=old)
        except (StoreError, EngineError):
            raise
        except MismatchError as exc:
            yield from self._not_read(path, sig, exc)
            return
        done = result.files[0]
        if done.status != "ingested" or done.record is None:
            self.seen[path] = _Seen(sig, "copy")
            self.counts["skipped"] += 1
            message = f"{label}: its content is already in run `{self.run}` ({done.same_as})"
            yield FileNote(label, "copy", message)
            return
        self.seen[path] = _Seen(sig, "ingested")
        if replacing is None:
            self.counts["ingested"] += 1
        else:
            yield FileNote(label, "grown", _grown(label, replacing, done.record))
        yield from self._lines(done.record.steps, label)

    def _not_read(
        self, path: Path, sig: tuple[int, int, int], exc: MismatchError
    ) -> Iterator[Event]:
        """A file ingest did not take: removed meanwhile (said so), changed while it was read
        (its writer is still at it: looked at again), else bad."""
        now = _signature(path)
        if isinstance(exc, RemovedWhileRead) or now is None:
            self.pending.pop(path, None)
            self.counts["skipped"] += 1
            message = f"{file_label(path)} was removed while it was being read: not ingested"
            yield FileNote(file_label(path), "removed", message)
        elif isinstance(exc, ChangedWhileRead) or now != sig:
            self.pending[path] = "changed while it was read (its writer is still at it)"
        else:
            yield from self._bad(path, sig, exc)

    def _bad(self, path: Path, sig: tuple[int, int, int], exc: MismatchError) -> Iterator[Event]:
        label = file_label(path)
        self.pending.pop(path, None)
        self.seen[path] = _Seen(sig, "bad")
        self.counts["bad"] += 1
        alert = Alert("bad_file", "warn", f"{label} was not ingested: {exc.message}")
        yield FileNote(label, "bad", exc.message, exc.hint, alert)

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


def _signature(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _grew(path: Path, size: int, record: SourceRecord) -> bool:
    """Whether ``path`` is the content the run holds of it with more appended."""
    try:
        return size > record.size and prefix_fingerprint(path, record.size) == record.fingerprint
    except OSError:
        return False


def _grown(label: str, before: SourceRecord, after: SourceRecord) -> str:
    return (
        f"{label} grew after it was ingested ({before.size:,} bytes, now {after.size:,}): "
        f"ingested again as a whole, in place of what the run held of it ({before.sequences:,} "
        f"sequences, now {after.sequences:,})"
    )
