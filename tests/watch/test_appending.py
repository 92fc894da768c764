"""`watch` and the JSON lines writers that append: prime-rl's token export (one line per sequence
per micro-step, then ``STABLE`` in the step's directory once every rank has flushed it) and
NeMo-RL's ``train_data_step{N}.jsonl``. Every line a writer appends is stored, across pauses
longer than --settle: a file is read when its writer says it is done, and a file that grows
after its ingest is ingested again as a whole, in place of what the run held of it. A file
still being written never raises ``changed_file``; a watch waiting on a file does not spin.

Most tests drive one watcher scan by scan (``Watcher._scan``), the writer's pauses played by
setting the file's modification time back: deterministic and fast. One live watch on file
events, with a writer that pauses, is marked slow.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from mismatchctl import api
from mismatchctl import schema as S
from mismatchctl.analysis.live import StepLine
from mismatchctl.analysis.watch import READS, FileNote, Watcher
from tests.helpers import FIXTURES, cli

ROOT = Path(__file__).parents[2]
PRIME = json.loads(
    (FIXTURES / "token_exports" / "step_3" / "rank_0.jsonl").read_text().split("\n")[0]
)
NEMO = [json.loads(x) for x in (FIXTURES / "train_data_step3.jsonl").read_text().splitlines()]


def prime_lines(step: int, first: int, count: int) -> str:
    """Lines ``first .. first + count - 1`` of a prime-rl export of ``step`` (rank 0)."""
    return "".join(
        json.dumps({**PRIME, "step": step, "export_sequence_idx": i, "micro_sequence_idx": i},
                   separators=(",", ":")) + "\n"
        for i in range(first, first + count)
    )  # fmt: skip


def nemo_lines(first: int, count: int) -> str:
    return "".join(
        json.dumps({**NEMO[i % len(NEMO)], "idx": i}) + "\n" for i in range(first, first + count)
    )


def append(path: Path, text: str, age: float | None = None) -> None:
    """Append ``text``; ``age``: then set the file's time that many seconds back (the writer
    paused that long)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as fh:
        fh.write(text)
    if age is not None:
        then = time.time() - age
        os.utime(path, (then, then))


def per_step(store: Path, run: str) -> dict[int, int]:
    """The stored sequences of each step."""
    seqs = api.open_store(store).scan(run, kind="sequences").collect()
    return dict(Counter(seqs[S.STEP].to_list()))


def scan(watcher: Watcher) -> list:
    return list(watcher._scan(watcher._known_sources()))


def notes(events: list, kind: str | None = None) -> list[FileNote]:
    return [e for e in events if isinstance(e, FileNote) and kind in (None, e.kind)]


def watcher(directory: Path, store: Path, settle: float = 2.0) -> Watcher:
    return api.watch(directory, "w", store=store, once=True, settle=settle, explain=False)


def test_prime_rl_lines_appended_after_the_ingest_are_all_stored(
    store: Path, tmp_path: Path
) -> None:
    """A writer without STABLE markers pauses past --settle after 4 lines, then after 8: the
    file is ingested at each pause and again, whole, when it has grown; the run ends with the
    12 lines once (one source for the file), never a changed_file."""
    dumps = tmp_path / "out" / "token_exports"
    path = dumps / "step_3" / "rank_0.jsonl"
    append(path, prime_lines(3, 0, 4), age=10)
    w = watcher(dumps, store)
    first = scan(w)
    assert [e.step for e in first if isinstance(e, StepLine)] == [3]
    assert per_step(store, "w") == {3: 4}

    append(path, prime_lines(3, 4, 4))  # written just now: waits for --settle
    assert scan(w) == [] and w.pending == {path: "written less than --settle seconds ago"}
    os.utime(path, (time.time() - 10, time.time() - 10))
    grown = scan(w)
    again = notes(grown, "grown")
    assert len(again) == 1 and "ingested again as a whole" in again[0].message
    assert "4 sequences, now 8" in again[0].message
    update = [e for e in grown if isinstance(e, StepLine)]
    assert [(e.step, e.update) for e in update] == [(3, True)]
    assert per_step(store, "w") == {3: 8}

    append(path, prime_lines(3, 8, 4), age=10)
    events = scan(w)
    assert per_step(store, "w") == {3: 12}
    assert [e for e in first + grown + events if getattr(e, "kind", None) == "changed"] == []
    sources = api.open_store(store).run("w").sources
    assert [(s.path, s.sequences) for s in sources] == [(str(path.resolve()), 12)]
    assert w.summary("once").ingested == 1
    assert cli("runs", "check", "w").code == 0


def test_a_grown_file_that_failed_once_is_still_read_whole_once(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A grown file whose second read fails (it could not be opened for a moment) is reported;
    the run keeps what it held of the file, and the next growth replaces that whole (never
    storing the first lines a second time beside it)."""
    dumps = tmp_path / "token_exports"
    path = dumps / "step_3" / "rank_0.jsonl"
    append(path, prime_lines(3, 0, 4), age=10)
    w = watcher(dumps, store)
    scan(w)
    append(path, prime_lines(3, 4, 2), age=10)
    real = Path.open

    def denied(self: Path, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        if self == path:
            raise PermissionError(13, "Permission denied", str(self))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", denied)
    assert [n.kind for n in notes(scan(w))] == ["bad"]
    monkeypatch.setattr(Path, "open", real)
    assert per_step(store, "w") == {3: 4}
    append(path, prime_lines(3, 6, 2), age=10)
    assert [n.kind for n in notes(scan(w))] == ["grown"]
    assert per_step(store, "w") == {3: 8}
    assert len(api.open_store(store).run("w").sources) == 1


def test_prime_rl_step_waits_for_its_stable_marker(store: Path, tmp_path: Path) -> None:
    """Where the writer marks finished steps (step_2/STABLE), step 3 is read only once its own
    STABLE is there, whatever its age: ingested once, with every line, no second ingest."""
    dumps = tmp_path / "token_exports"
    append(dumps / "step_2" / "rank_0.jsonl", prime_lines(2, 0, 3), age=100)
    (dumps / "step_2" / "STABLE").touch()
    path = dumps / "step_3" / "rank_0.jsonl"
    append(path, prime_lines(3, 0, 5), age=100)  # paused long past --settle
    w = watcher(dumps, store)
    scan(w)
    assert per_step(store, "w") == {2: 3}
    assert w.pending == {path: "waiting for the writer's STABLE marker in its step directory"}
    append(path, prime_lines(3, 5, 7), age=100)
    assert scan(w) == []
    (dumps / "step_3" / "STABLE").touch()
    events = scan(w)
    assert [e.step for e in events if isinstance(e, StepLine)] == [3]
    assert notes(events) == [] and w.pending == {}
    assert per_step(store, "w") == {2: 3, 3: 12}


def test_a_later_step_completes_a_nemo_file_and_a_pause_loses_nothing(
    store: Path, tmp_path: Path
) -> None:
    """NeMo-RL writes train_data_step{N}.jsonl: a file of a later step beside it says step N is
    done (no --settle wait); a file that paused past --settle after 2 lines and then got 3 more
    holds 5 in the run, not 2."""
    dumps = tmp_path / "dumps"
    step3, step4 = dumps / "train_data_step3.jsonl", dumps / "train_data_step4.jsonl"
    append(step3, nemo_lines(0, 3))  # written just now, --settle one hour
    w = watcher(dumps, store, settle=3600)
    assert scan(w) == [] and step3 in w.pending
    append(step4, nemo_lines(0, 2), age=7200)  # the writer moved on to step 4
    scan(w)
    assert per_step(store, "w") == {3: 3, 4: 2}

    w = watcher(dumps, store)
    append(step4, nemo_lines(2, 3), age=10)  # the pause was 4 s: 2 lines were ingested
    events = scan(w)
    assert len(notes(events, "grown")) == 1
    assert per_step(store, "w") == {3: 3, 4: 5}


def test_a_file_written_while_it_is_looked_at_stays_pending(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer appends while the watch checks the file's end: the file is pending ("being
    written"), not ingested at its old size nor reported changed; once still, it is read whole."""
    from mismatchctl.analysis import watch as watch_module

    dumps = tmp_path / "dumps"
    path = dumps / "train_data_step3.jsonl"
    append(path, nemo_lines(0, 2), age=10)
    real = watch_module.incomplete

    def writer_meanwhile(p: Path) -> str | None:
        append(p, nemo_lines(2, 1), age=10)  # a new size and ctime while it is checked
        return real(p)

    w = watcher(dumps, store)
    monkeypatch.setattr(watch_module, "incomplete", writer_meanwhile)
    assert scan(w) == [] and w.pending == {
        path: "being written (it changed while it was looked at)"
    }
    monkeypatch.setattr(watch_module, "incomplete", real)
    events = scan(w)
    assert notes(events) == [] and per_step(store, "w") == {3: 3}


def test_a_pending_file_is_read_once_per_state_and_reads_do_not_wake(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a half-written Parquet file waits, each scan looks at its size and time only (its
    footer is read again when it changes), and the file events a read makes (opened, closed
    without a write) are not taken for a change: the watch does not spin."""
    from mismatchctl.analysis import watch as watch_module
    from tests.watch_writer import write_step

    dumps = tmp_path / "dumps"
    dumps.mkdir()
    data = write_step(tmp_path / "src", 1, 0.02).read_bytes()
    (dumps / "step_1.parquet").write_bytes(data[: len(data) // 2])
    reads: list[Path] = []
    real = watch_module.incomplete
    monkeypatch.setattr(watch_module, "incomplete", lambda p: reads.append(p) or real(p))
    w = watcher(dumps, store)
    for _ in range(5):
        assert scan(w) == []
    assert len(reads) == 1
    assert set(READS) == {"opened", "closed_no_write"}


def test_a_waiting_watch_on_file_events_takes_little_cpu(store: Path, tmp_path: Path) -> None:
    """A live watch (file events) with one pending file, left for 1 s: well under a tenth of a
    CPU second per second (it spun at 0.87 when its own reads woke it)."""
    from tests.watch_writer import write_step

    dumps = tmp_path / "dumps"
    dumps.mkdir()
    data = write_step(tmp_path / "src", 1, 0.02).read_bytes()
    (dumps / "step_1.parquet").write_bytes(data[: len(data) // 2])
    w = api.watch(dumps, "w", store=store, idle_exit=1.0, explain=False)
    started, cpu = time.monotonic(), time.process_time()
    events = list(w.events())
    wall, used = time.monotonic() - started, time.process_time() - cpu
    assert events[-1].reason == "idle" and events[-1].pending
    assert used < 0.1 * wall, (used, wall)


@pytest.mark.slow
def test_a_live_watch_keeps_every_line_of_a_pausing_writer(store: Path, tmp_path: Path) -> None:
    """A separate process appends a prime-rl step in three bursts with pauses longer than
    --settle, then a second step with STABLE markers; a watch on file events stores all."""
    dumps = tmp_path / "token_exports"
    dumps.mkdir()
    script = (
        "import sys, time; from pathlib import Path; sys.path.insert(0, '.');"
        "from tests.watch.test_appending import append, prime_lines;"
        f"d = Path({str(dumps)!r});"
        "[(append(d / 'step_3' / 'rank_0.jsonl', prime_lines(3, a, 4)), time.sleep(0.8))"
        " for a in (0, 4, 8)];"
        "append(d / 'step_4' / 'rank_0.jsonl', prime_lines(4, 0, 6));"
        "(d / 'step_4' / 'STABLE').touch()"
    )
    watch = subprocess.Popen(
        [sys.executable, "-m", "mismatchctl", "watch", str(dumps), "--run", "w", "--json",
         "--settle", "0.3", "--idle-exit", "3", "--no-explain"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    subprocess.run([sys.executable, "-c", script], cwd=ROOT, check=True, timeout=60)
    out, err = watch.communicate(timeout=120)
    assert watch.returncode == 0, err
    assert per_step(store, "w") == {3: 12, 4: 6}
    assert "changed after it was ingested" not in err
    assert {json.loads(x)["step"] for x in out.splitlines()} == {3, 4}
