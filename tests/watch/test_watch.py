"""`mismatchctl watch`: files written in stages by a separate process (partial writes, temp names
and renames, a bad file in the middle, a restart, SIGINT and SIGTERM mid-ingest) are ingested
once each, only when complete; nothing is lost, nothing is ingested twice, and each step's line
holds the numbers of a numpy reference.

No test asserts on time: live watches stop by --max-files, scripted ones by --once, and a
timeout on a subprocess only guards against a hang.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import mismatchctl
from mismatchctl import api
from mismatchctl import schema as S
from mismatchctl.analysis.live import (
    BASELINE_STEPS,
    StepHistory,
    StepValue,
    quiet_steps,
    step_blocks,
)
from mismatchctl.engines.plan import StepRange
from tests.helpers import FIXTURES, cli, tree_digest
from tests.watch_writer import ROWS, act, step_arrays, write_step

ROOT = Path(__file__).parents[2]
HANG = 120  # seconds: only a guard against a hung subprocess, never an assertion


def _env(store: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "MISMATCHCTL_STORE": str(store),
            "NO_COLOR": "1"}  # fmt: skip


def writer(directory: Path, *actions: str) -> None:
    """The job's writer: a separate process performing ``actions`` (tests/watch_writer.py)."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.watch_writer", str(directory), *actions],
        cwd=ROOT, env=_env(directory), capture_output=True, text=True, timeout=HANG,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def written(directory: Path, *actions: str) -> None:
    """The writer's ``actions`` performed in this process: for the files a scripted watch
    (``--once``) reads only once they are all written, where no second process is watched
    (a new interpreter with numpy and pyarrow costs more than the writes)."""
    directory.mkdir(parents=True, exist_ok=True)
    for action in actions:
        act(directory, action)


def reference_kl(step: int, noise: float) -> float:
    rollout, trainer, mask = step_arrays(step, noise)
    r = (trainer - rollout)[mask == 1]
    return float(np.mean(np.expm1(r) - r))


def lines(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def stored_steps(store: Path, run: str) -> list[int]:
    """Each stored sequence's step: a step ingested twice shows twice as many sequences."""
    seqs = api.open_store(store).scan(run, kind="sequences").collect()
    return sorted(seqs[S.STEP].to_list())


def test_partial_files_wait_until_complete_then_restart_is_a_no_op(
    store: Path, tmp_path: Path
) -> None:
    """Half a Parquet file, half a NeMo-RL JSON lines file (cut inside a line) and half a slime
    torch file are neither ingested nor reported bad; finished, they are ingested once; a
    second watch of the directory changes nothing in the store."""
    pytest.importorskip("torch")
    dumps = tmp_path / "dumps"
    src = tmp_path / "src"
    pq_file = write_step(src, 1, 0.02)
    jsonl, pt = FIXTURES / "train_data_step3.jsonl", FIXTURES / "slime_train_4.pt"
    names = {pq_file: "step_1.parquet", jsonl: "train_data_step3.jsonl", pt: "train_4.pt"}
    writer(dumps, *(f"partial:{s}:{n}:0.6" for s, n in names.items()))
    first = cli("watch", str(dumps), "--run", "w", "--once", "--settle", "0")
    assert first.code == 0, first.err
    assert "0 files ingested" in first.err and "3 not complete yet" in first.err
    assert "Bad file" not in first.err and first.out == ""
    for name in names.values():
        assert f"not complete yet: {dumps / name}" in first.err
    assert api.runs(store) == []

    writer(dumps, *(f"finish:{s}:{n}" for s, n in names.items()))
    second = cli("watch", str(dumps), "--run", "w", "--once", "--settle", "0", "--json")
    assert second.code == 0, second.err
    assert "3 files ingested" in second.err and "0 not complete yet" in second.err
    # one line per step: 1 (Parquet), 3 (NeMo-RL), 4 (slime)
    assert sorted(x["step"] for x in lines(second.out)) == [1, 3, 4]
    step1 = next(x for x in lines(second.out) if x["step"] == 1)
    assert step1["vllm_kl"] == pytest.approx(reference_kl(1, 0.02), rel=1e-12)
    before = tree_digest(store)
    steps = stored_steps(store, "w")

    third = cli("watch", str(dumps), "--run", "w", "--once", "--settle", "0")
    assert third.code == 0 and third.out == ""
    assert "0 files ingested" in third.err and "the run holds 3 steps from 3 files" in third.err
    assert tree_digest(store) == before and stored_steps(store, "w") == steps


@pytest.mark.slow
def test_temp_names_and_dotfiles_wait_for_their_rename(store: Path, tmp_path: Path) -> None:
    dumps = tmp_path / "dumps"
    src = write_step(tmp_path / "src", 2, 0.02)
    writer(dumps, f"tmp:{src}:step_2.parquet")
    (dumps / ".hidden").mkdir()
    shutil.copy(src, dumps / ".hidden" / "step_2.parquet")
    shutil.copy(src, dumps / "step_2.parquet.tmp")
    # one watcher, two scans: the half file waits, then is removed
    watcher = api.watch(dumps, "w", store=store, once=True)
    known = watcher._known_sources()
    writer(dumps, f"partial:{src}:step_9.parquet:0.5")
    assert list(watcher._scan(known)) == [] and list(watcher.pending) == [dumps / "step_9.parquet"]
    (dumps / "step_9.parquet").unlink()
    assert list(watcher._scan(known)) == []
    assert watcher.summary("once").pending == {}
    writer(dumps, "rename:step_2.parquet")
    ran = cli("watch", str(dumps), "--run", "w", "--once", "--json")
    assert [x["step"] for x in lines(ran.out)] == [2]
    assert stored_steps(store, "w") == [2] * ROWS


def test_live_watch_takes_every_file_once_and_goes_on_after_a_bad_one(
    store: Path, tmp_path: Path
) -> None:
    """A watch on file events while a separate process writes steps atomically, one file by
    halves, one through a temp name, and a bad file in the middle: every step once, the bad
    file reported (path as given) and alerted, the watch going on to the files after it."""
    dumps, src = tmp_path / "dumps", tmp_path / "src"
    dumps.mkdir()
    half = write_step(src, 3, 0.02)
    renamed = write_step(src, 5, 0.02)
    alerts = tmp_path / "alerts.jsonl"
    watch = subprocess.Popen(
        [sys.executable, "-m", "mismatchctl", "watch", str(dumps), "--run", "w", "--json",
         "--max-files", "6", "--alerts", str(alerts), "--no-explain"],
        cwd=ROOT, env=_env(store), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    writer(
        dumps, "step:1:0.02", "step:2:0.02", f"partial:{half}:step_3.parquet:0.5",
        "bad:bad.parquet", f"finish:{half}:step_3.parquet", "step:4:0.02",
        f"tmp:{renamed}:step_5.parquet", "rename:step_5.parquet",
    )  # fmt: skip
    out, err = watch.communicate(timeout=HANG)
    assert watch.returncode == 0, err
    assert sorted(x["step"] for x in lines(out)) == [1, 2, 3, 4, 5]
    assert stored_steps(store, "w") == [s for s in range(1, 6) for _ in range(ROWS)]
    assert f"Bad file: {dumps / 'bad.parquet'}" in err and "Hint:" in err
    recorded = lines(alerts.read_text())
    assert [(a["check"], a["file"]) for a in recorded] == [("bad_file", str(dumps / "bad.parquet"))]
    assert "5 files ingested, 5 steps, 1 bad" in err


@pytest.mark.parametrize(
    "sig", [signal.SIGINT, pytest.param(signal.SIGTERM, marks=pytest.mark.slow)]
)
def test_a_signal_mid_ingest_leaves_the_store_whole(
    store: Path, tmp_path: Path, sig: signal.Signals
) -> None:
    """The second file's ingest is held with its parts staged; the signal stops the watch
    there. The store holds the first file only (runs check passes); the next watch ingests the
    second and third files, and no step is stored twice."""
    dumps = tmp_path / "dumps"
    written(dumps, "step:1:0.02", "step:2:0.02", "step:3:0.02")
    marker = tmp_path / "held"
    watch = subprocess.Popen(
        [sys.executable, "-m", "tests.watch_driver", str(marker), "2", "watch", str(dumps),
         "--run", "w", "--once", "--json"],
        cwd=ROOT, env=_env(store), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + HANG
    while not marker.exists():
        assert watch.poll() is None, watch.communicate()
        assert time.monotonic() < deadline, "the watch never reached the second ingest"
        time.sleep(0.05)
    watch.send_signal(sig)
    out, err = watch.communicate(timeout=HANG)
    assert watch.returncode == 0, err
    assert "Stopped (interrupted): 1 files ingested" in err
    assert [x["step"] for x in lines(out)] == [1]
    assert stored_steps(store, "w") == [1] * ROWS
    assert cli("runs", "check").code == 0
    staging = store / ".staging"
    assert not staging.exists() or not any(staging.iterdir())

    again = cli("watch", str(dumps), "--run", "w", "--once", "--json")
    assert again.code == 0, again.err
    assert [x["step"] for x in lines(again.out)] == [2, 3]
    assert stored_steps(store, "w") == [s for s in (1, 2, 3) for _ in range(ROWS)]


def test_a_file_changed_after_ingest_is_reported_not_ingested_twice(
    store: Path, tmp_path: Path
) -> None:
    dumps = tmp_path / "dumps"
    written(dumps, "step:1:0.02")
    assert cli("watch", str(dumps), "--run", "w", "--once").code == 0
    first = dumps / "step_00000001.parquet"
    shutil.copy(first, tmp_path / "original.parquet")
    other = write_step(tmp_path / "src", 1, 0.05)
    shutil.copy(other, dumps / other.name)  # the same name, other content
    ran = cli("watch", str(dumps), "--run", "w", "--once")
    assert ran.code == 0
    assert f"{dumps / other.name} changed after it was ingested: not ingested again" in ran.err
    assert stored_steps(store, "w") == [1] * ROWS
    # the content ingested first, under another name, is a copy: not new data
    shutil.copy(tmp_path / "original.parquet", dumps / "copy.parquet")
    written(dumps, "step:2:0.02")
    ran = cli("watch", str(dumps), "--run", "w", "--once")
    assert f"Skipped: {dumps / 'copy.parquet'}: its content is already in run `w`" in ran.err
    assert "1 files ingested" in ran.err
    assert stored_steps(store, "w") == [1] * ROWS + [2] * ROWS


def test_step_lines_and_alerts_against_numpy(store: Path, tmp_path: Path) -> None:
    """Four quiet steps, then one 10x noisier: its line has the recent median and change of a
    numpy reference, and a spike and a band alert; --exit-on fail stops with exit code 3 on a
    step above 2e-2 and --exit-on warn on the first alert."""
    dumps = tmp_path / "dumps"
    noises = {1: 0.02, 2: 0.025, 3: 0.02, 4: 0.03, 5: 0.3}
    written(dumps, *(f"step:{s}:{n}" for s, n in noises.items()))
    alerts = tmp_path / "alerts.jsonl"
    ran = cli("watch", str(dumps), "--run", "w", "--once", "--json", "--alerts", str(alerts))
    assert ran.code == 0, ran.err
    got = {x["step"]: x for x in lines(ran.out)}
    ref = {s: reference_kl(s, n) for s, n in noises.items()}
    for s in noises:
        assert got[s]["vllm_kl"] == pytest.approx(ref[s], rel=1e-12)
        assert got[s]["tokens"] == int(step_arrays(s, noises[s])[2].sum())
    median = statistics.median([ref[s] for s in (1, 2, 3, 4)])
    assert got[5]["recent_median"] == pytest.approx(median, rel=1e-12)
    assert got[5]["change"] == pytest.approx(ref[5] / median, rel=1e-12)
    assert ref[5] > 2e-2 and ref[5] / median > 3  # the planted step: a spike into `high`
    assert [(a["check"], a["level"]) for a in got[5]["alerts"]] == [
        ("spike", "fail"),
        ("band", "fail"),
    ]
    assert all(not got[s]["alerts"] for s in (2, 3, 4))
    recorded = lines(alerts.read_text())
    assert {(a["step"], a["check"]) for a in recorded} >= {(5, "spike"), (5, "band")}

    dumps2 = tmp_path / "dumps2"
    written(dumps2, *(f"step:{s}:{n}" for s, n in noises.items()))
    stopped = cli("watch", str(dumps2), "--run", "w2", "--once", "--exit-on", "fail", "-q")
    assert stopped.code == 3 and "--exit-on" in stopped.err
    assert "step 5" in stopped.out and "ALERT fail spike" in stopped.out


def test_an_alert_names_the_cell_explain_localizes(store: Path, tmp_path: Path) -> None:
    """Step 5's excess sits on the second half of the positions (KV positions 32-63): the
    alert carries explain's top finding of the step against the steps before, whose rate ratio
    is that of a numpy reference (the mean K3 of the cell over the baseline's at the same
    positions, token probabilities aside, within the finding's 95% interval)."""
    dumps = tmp_path / "dumps"
    written(dumps, *(f"step:{s}:0.02" for s in (1, 2, 3, 4)), "step:5:0.02:0.4")
    ran = cli("watch", str(dumps), "--run", "w", "--once", "--json")
    assert ran.code == 0, ran.err
    alerts = lines(ran.out)[-1]["alerts"]
    assert alerts and all(a["localized"] == alerts[0]["localized"] for a in alerts)
    cell = alerts[0]["localized"]
    assert cell["where"]["kv_position"] == "32-63" and cell["against"] == "w@steps=1..4"
    hot = [_k3(s, 0.02, 0.4 if s == 5 else None)[:, 32:] for s in (1, 2, 3, 4, 5)]
    ratio = np.nanmean(hot[4]) / np.nanmean(np.concatenate(hot[:4]))
    assert 0.5 * ratio < cell["rate_ratio"] < 2 * ratio


FAULTY = ROOT / "sample_data" / "runs" / "faulty-attn"


@pytest.mark.slow
def test_a_spike_few_sequences_carry_is_localized_everywhere(store: Path, tmp_path: Path) -> None:
    """The captured run faulty-attn, watched as it is written: steps 3, 4 and 6 alert, each
    393x-1900x its quiet steps, all of it in the few sequences its split-KV bug hits. Each
    alert carries the cells that hold the excess (leads: the later turns' positions 16-63), in
    the terminal, in --json and in --alerts, compared with the quiet steps before it (a spiking
    step is never the baseline: step 6 against steps 1-2 and 5). Slow: an alert's localization
    is test_an_alert_names_the_cell_explain_localizes's, the few sequences' cells
    tests/analysis/test_explain.py's."""
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    for s in range(1, 7):
        shutil.copy(FAULTY / f"step_000{s}.parquet", dumps)
    alerts = tmp_path / "alerts.jsonl"
    ran = cli("watch", str(dumps), "--run", "fa", "--once", "--json", "--alerts", str(alerts))
    assert ran.code == 0, ran.err
    got = {x["step"]: x for x in lines(ran.out)}
    assert [s for s in sorted(got) if got[s]["alerts"]] == [3, 4, 6]
    against = {3: "fa@steps=1..2", 4: "fa@steps=1..2", 6: "fa@steps=1..2 + fa@steps=5"}
    for step, baseline in against.items():
        for alert in got[step]["alerts"]:
            where = alert["localized"]
            assert where["kind"] == "few_sequences" and where["against"] == baseline
            assert where["step_rate_ratio"] > 100 and where["cells"]
            assert where["where"] == where["cells"][0]["where"]
            assert where["where"]["turn_kind"] == "later"
            assert 3 <= where["effective_sequences"] < 10
    assert got[3]["alerts"][0]["localized"]["step_rate_ratio"] == pytest.approx(393.4, abs=0.1)
    recorded = lines(alerts.read_text())
    assert {(a["step"], a["check"]) for a in recorded} == {(3, "band"), (4, "spike"), (6, "spike"), (6, "band")}  # fmt: skip
    by_step = {a["step"]: a["localized"] for a in recorded}
    assert all(by_step[s] == got[s]["alerts"][0]["localized"] for s in (3, 4, 6))

    shown = cli("watch", str(dumps), "--run", "fa2", "--once")
    assert shown.code == 0, shown.err
    step3 = shown.out.split("step 3 ")[1].split("step 4 ")[0]
    assert (
        "\n    localized: turn_kind=later, turn_position=16-63 (1064x; 7.6 sequences' worth)"
        in step3
    )
    assert "\n    against: fa2@steps=1..2" in step3
    assert "against: fa2@steps=1..2 + fa2@steps=5" in shown.out.split("step 6 ")[1]


def test_the_baseline_of_a_localization_is_the_quiet_steps() -> None:
    """Steps within 3x of the lowest recent step, the last 8 of them, as ranges of adjacent
    steps: a spike never teaches the baseline its own fault."""
    values = {1: 1e-4, 2: 0.9e-4, 3: 0.04, 4: 0.015, 5: 1.2e-4, 7: 2.6e-4, 8: 2.8e-4}
    history = StepHistory("r", {s: StepValue(10, 1, v) for s, v in values.items()})
    assert quiet_steps(history, 9) == [1, 2, 5, 7]
    assert step_blocks([1, 2, 5, 7], sorted(history.values)) == [StepRange(1, 2), StepRange(5, 7)]
    assert quiet_steps(history, 1) == []  # the first step: localized within itself
    many = StepHistory("r", {s: StepValue(10, 1, 1e-4) for s in range(30)})
    assert quiet_steps(many, 30) == list(range(30 - BASELINE_STEPS, 30))


def _k3(step: int, noise: float, hot: float | None) -> np.ndarray:
    rollout, trainer, mask = step_arrays(step, noise, hot)
    r = trainer - rollout
    return np.where(mask == 1, np.expm1(r) - r, np.nan)


@pytest.mark.slow
def test_poll_mode_takes_files_written_while_it_runs(store: Path, tmp_path: Path) -> None:
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    watch = subprocess.Popen(
        [sys.executable, "-m", "mismatchctl", "watch", str(dumps), "--run", "w", "--json",
         "--poll", "0.1", "--max-files", "2"],
        cwd=ROOT, env=_env(store), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    writer(dumps, "step:1:0.02", "step:2:0.02")
    out, err = watch.communicate(timeout=HANG)
    assert watch.returncode == 0, err
    assert "polling every 0.1 s" in err
    assert [x["step"] for x in lines(out)] == [1, 2]


def test_watch_errors_name_what_to_fix(store: Path, tmp_path: Path) -> None:
    missing = cli("watch", str(tmp_path / "nope"), "--run", "w", "--once")
    assert missing.code == 1
    assert (
        f"Error: {tmp_path / 'nope'} is not a directory" in missing.err and "Hint:" in missing.err
    )
    bad_run = cli("watch", str(tmp_path), "--run", "../x", "--once")
    assert bad_run.code == 1 and "Error:" in bad_run.err and api.runs(store) == []
    no_alerts = cli(
        "watch", str(tmp_path), "--run", "w", "--once", "--alerts", str(tmp_path / "no" / "a")
    )
    assert no_alerts.code == 1 and "--alerts" in no_alerts.err and "Hint:" in no_alerts.err


@pytest.mark.slow
def test_idle_exit_exit_on_warn_and_a_removed_partial_file(store: Path, tmp_path: Path) -> None:
    """--idle-exit 0 stops after the first scan that brings nothing new; --exit-on warn stops at
    the first warning (a step crossing into `medium`); a half-written file that is removed is
    no longer listed as waiting."""
    dumps = tmp_path / "dumps"
    src = write_step(tmp_path / "src", 9, 0.02)
    writer(dumps, "step:1:0.02", "step:2:0.02", f"partial:{src}:step_9.parquet:0.5")
    ran = cli("watch", str(dumps), "--run", "w", "--idle-exit", "0", "--poll", "0.05")
    assert ran.code == 0, ran.err
    assert "Stopped (idle): 2 files ingested" in ran.err and "1 not complete yet" in ran.err
    (dumps / "step_9.parquet").unlink()
    writer(dumps, "step:3:0.12")  # ~7e-3: medium
    ran = cli("watch", str(dumps), "--run", "w", "--once", "--exit-on", "warn", "--no-explain")
    assert ran.code == 3, ran.err
    assert "ALERT warn band" in ran.out and "crossed into the medium band" in ran.out
    # one watcher, two scans: the half file waits, then is removed
    watcher = api.watch(dumps, "w", store=store, once=True)
    known = watcher._known_sources()
    writer(dumps, f"partial:{src}:step_9.parquet:0.5")
    assert list(watcher._scan(known)) == [] and list(watcher.pending) == [dumps / "step_9.parquet"]
    (dumps / "step_9.parquet").unlink()
    assert list(watcher._scan(known)) == []
    assert watcher.summary("once").pending == {}


def test_ranks_of_one_step_update_its_line_and_alert_once(store: Path, tmp_path: Path) -> None:
    """Two files of step 5 (ranks): the second prints the step again as an update with the
    numbers of both files (a numpy reference), and the alerts of the first are not repeated."""
    dumps = tmp_path / "dumps"
    written(dumps, *(f"step:{s}:0.02" for s in (1, 2, 3, 4)), "step:5:0.3")
    write_step(dumps, 5, 0.3, rank=1)
    ran = cli("watch", str(dumps), "--run", "w", "--once", "--json", "--no-explain")
    assert ran.code == 0, ran.err
    fives = [x for x in lines(ran.out) if x["step"] == 5]
    assert [x["update"] for x in fives] == [False, True]
    assert fives[0]["alerts"] and fives[1]["alerts"] == []
    assert fives[1]["tokens"] == 2 * fives[0]["tokens"]
    assert fives[1]["vllm_kl"] == pytest.approx(reference_kl(5, 0.3), rel=1e-12)


def test_a_json_lines_file_is_read_once_it_has_settled(store: Path, tmp_path: Path) -> None:
    """A JSON lines file has no end marker: whole lines written a moment ago may be followed by
    more, so it waits until it is --settle seconds old (its modification time set back here)."""
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    path = dumps / "train_data_step3.jsonl"
    shutil.copy(FIXTURES / "train_data_step3.jsonl", path)
    now = time.time()
    os.utime(path, (now, now))
    ran = cli("watch", str(dumps), "--run", "w", "--once", "--settle", "3600")
    assert "0 files ingested" in ran.err
    assert f"not complete yet: {path} (written less than --settle seconds ago)" in ran.err
    os.utime(path, (now - 7200, now - 7200))
    ran = cli("watch", str(dumps), "--run", "w", "--once", "--settle", "3600", "--json")
    assert [x["step"] for x in lines(ran.out)] == [3]


@pytest.mark.slow
def test_exit_on_stops_a_live_watch(store: Path, tmp_path: Path) -> None:
    """--exit-on warn ends a watch that runs on file events at the first alert (here a bad
    file): the process exits 3 with its observer stopped."""
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    watch = subprocess.Popen(
        [sys.executable, "-m", "mismatchctl", "watch", str(dumps), "--run", "w",
         "--exit-on", "warn"],
        cwd=ROOT, env=_env(store), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    writer(dumps, "bad:bad.parquet")
    _, err = watch.communicate(timeout=HANG)
    assert watch.returncode == 3, err
    assert "Bad file" in err and "(--exit-on)" in err


def test_without_file_events_it_polls_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    import watchdog.observers

    from mismatchctl.analysis.watch import FALLBACK_POLL, Waker

    class NoWatches(watchdog.observers.Observer):  # type: ignore[misc, valid-type]
        def schedule(self, *args: object, **kwargs: object) -> None:
            raise OSError(errno.ENOSPC, "inotify watch limit reached")

    monkeypatch.setattr(watchdog.observers, "Observer", NoWatches)
    waker = Waker(tmp_path, None)
    assert waker.poll == FALLBACK_POLL
    assert waker.mode.startswith(f"polling every {FALLBACK_POLL:g} s (file events unavailable: ")
    assert "inotify watch limit reached" in waker.mode
    waker.close()


def test_watch_reads_files_as_ingest_does(store: Path, tmp_path: Path) -> None:
    """The reading options of ``ingest`` are the watch's too: a right-padded dump without a mask
    is refused as by ``ingest`` (reported bad, the watch goes on), taken with --allow-padding,
    and a float column is kept as an attribute with --attr; the stored rows equal ingest's."""
    from tests.ingest.test_unmasked import _padded_file

    dumps = tmp_path / "dumps"
    dumps.mkdir()
    path, roll, train, _ = _padded_file(dumps / "step_3.parquet")
    table = pq.read_table(path)
    table = table.append_column("difficulty", pa.array(np.linspace(0.1, 0.6, table.num_rows)))
    pq.write_table(table, path)

    refused = cli("watch", str(dumps), "--run", "w", "--once", "--json")
    assert refused.code == 0, refused.err
    assert "Bad file" in refused.err and "--allow-padding" in refused.err
    assert "w" not in [r["run"] for r in json.loads(cli("runs", "--json").out)]

    ran = cli(
        "watch", str(dumps), "--run", "w", "--once", "--json",
        "--allow-padding", "--attr", "difficulty",
    )  # fmt: skip
    assert ran.code == 0, ran.err
    assert [line["step"] for line in lines(ran.out)] == [3]
    assert cli("ingest", str(path), "--run", "i", "-q", "--allow-padding",
               "--attr", "difficulty").code == 0  # fmt: skip
    s = api.open_store(store)
    for kind in ("tokens", "sequences"):
        watched = s.scan("w", kind=kind).collect().drop("run", strict=False)
        ingested = s.scan("i", kind=kind).collect().drop("run", strict=False)
        assert watched.equals(ingested), kind
    r = (train - roll).ravel()
    watched_kl = mismatchctl.report("w", store=store).whole()
    assert watched_kl is not None
    assert watched_kl.metrics["vllm_kl"] == pytest.approx(np.mean(np.expm1(r) - r), rel=1e-9)
    groups = mismatchctl.report("w", store=store, by=["attr:difficulty"]).to_dict()["groups"]
    assert len([g for g in groups if "attr:difficulty" in g["by"]]) == 6  # one per sequence


def test_a_new_step_reads_only_its_own_parts_and_its_baseline_s(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run of 40 step files: the line of step 39 and its localization check and read the
    parts of step 39 and of its quiet steps (at most ``BASELINE_STEPS``), not the run's other
    parts: a watch's per-step cost does not grow with the run."""
    from mismatchctl.analysis import live
    from mismatchctl.engines import sequences
    from mismatchctl.store import integrity

    dumps = tmp_path / "dumps"
    dumps.mkdir()
    for s in range(40):
        write_step(dumps, s, 0.02, 0.4 if s == 39 else None)
    mismatchctl.ingest([str(dumps)], run="w", store=store)
    opened = mismatchctl.open_store(store)
    step_of = {
        str(opened.part_path(p)): p.min_step
        for kind in ("tokens", "sequences")
        for p in opened.parts("w", kind)
    }
    touched: list[str] = []
    checked, read = integrity.part_problem, sequences.read_columns

    def check(store_: object, part: object, deep: bool = False) -> str | None:
        touched.append(str(opened.part_path(part)))  # type: ignore[arg-type]
        return checked(store_, part, deep)  # type: ignore[arg-type]

    def columns(path: object, *args: object, **kw: object) -> object:
        touched.append(str(path))
        return read(path, *args, **kw)  # type: ignore[arg-type]

    values = live.step_values(opened, "w")
    history = live.StepHistory("w", {s: v for s, v in values.items() if s < 39})
    monkeypatch.setattr(integrity, "part_problem", check)
    monkeypatch.setattr(sequences, "read_columns", columns)
    line = history.line(39, live.step_values(opened, "w", [39])[39], [])
    assert [a.check for a in line.alerts] == ["spike", "band"]
    where = live.localize(opened, history, 39)
    assert where is not None and where["baseline_steps"] == list(range(39 - BASELINE_STEPS, 39))
    steps = {step_of[p] for p in touched if p in step_of}
    assert steps and steps <= {39, *where["baseline_steps"]}


def test_earlier_spikes_are_left_out_of_the_recent_median() -> None:
    """A fault on half the steps (as faulty-attn's on steps 3, 4, 6 and 7) would raise the
    median of all recent steps to the fault's level and hide the next spikes (here 7 and 8);
    the median of the quiet ones keeps them spikes. A level that stays up is learned once fewer
    than three quiet steps remain in the window, and a history read back judges its steps as
    they came."""
    values = {1: 1e-4, 2: 1.1e-4, 3: 0.9e-4, 4: 1e-3, 5: 1.2e-3, 6: 1.1e-3, 7: 1e-3, 8: 1.05e-3}
    history = StepHistory("r")
    alerted = []
    for s, v in values.items():
        line = history.line(s, StepValue(10, 1, v), [])
        alerted += [s] if any(a.check == "spike" for a in line.alerts) else []
    assert alerted == [4, 5, 6, 7, 8]
    assert line.recent_median == statistics.median([1e-4, 1.1e-4, 0.9e-4])
    assert (line.recent_steps, line.spikes_left_out) == (3, 4)
    spike = next(a for a in line.alerts if a.check == "spike")
    assert "the 3 quiet steps before, 4 spike(s) left out" in spike.message
    for step in (7, 8):  # the median of every recent step hid them
        assert values[step] / statistics.median([values[s] for s in range(1, step)]) < 3
    read_back = StepHistory("r", {s: StepValue(10, 1, v) for s, v in values.items() if s < 8})
    assert read_back.spikes == {4, 5, 6, 7}
    assert read_back.recent(8) == (line.recent_median, 3, 4)
    steady = StepHistory("r")
    level = {s: 1e-4 if s < 4 else 1e-3 for s in range(1, 30)}
    fired = [
        s
        for s, v in level.items()
        if any(a.check == "spike" for a in steady.line(s, StepValue(10, 1, v), []).alerts)
    ]
    assert fired == list(range(4, 22))  # step 22's window (2-21) holds 2 quiet steps


def test_a_spike_too_early_to_alert_on_is_still_left_out_of_later_medians() -> None:
    """Step 3 of faulty-attn is 400x the two steps before it: too few to alert on as a spike,
    but not a quiet step for the medians after it."""
    history = StepHistory("r")
    for s, v in {1: 1.08e-4, 2: 0.97e-4, 3: 0.042, 4: 0.0155, 5: 1.19e-4}.items():
        line = history.line(s, StepValue(10, 1, v), [])
        if s == 3:
            assert not any(a.check == "spike" for a in line.alerts)
    assert history.spikes == {3, 4}
    assert history.recent(6) == (1.08e-4, 3, 2)


def test_a_warm_watch_leaves_the_views_nothing_to_read(
    store: Path,
    tmp_path: Path,
    fresh_part_cache: Path,
    part_reads: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``watch --warm``: after the scans that ingested files, the run is read for report,
    explain and diagnose (``analysis/warm.py``), each scan reading only the parts the cache
    does not hold (each new step's part is read once more for its line); the views then read
    no token part and say what a cold read says. With the cache off it says so once."""
    from mismatchctl.engines import part_cache

    dumps = tmp_path / "dumps"
    written(dumps, "step:1:0.02", "step:2:0.03")
    ran = cli("watch", str(dumps), "--run", "w", "--once", "--warm")
    assert ran.code == 0, ran.err
    assert "Part cache warmed for report, explain and diagnose of w" in ran.err
    first = set(part_reads)  # each read for its step's line, then once per view
    assert len(first) == 2 and len(part_reads) == 4 * len(first)
    written(dumps, "step:3:0.02")
    part_reads.clear()
    assert cli("watch", str(dumps), "--run", "w", "--once", "--warm", "-q").code == 0
    (new,) = set(part_reads)  # the cached parts are not read again
    assert new not in first and len(part_reads) == 4
    part_reads.clear()
    views = [("report", "w"), ("explain", "w"), ("diagnose", "w")]

    def view(*args: str) -> str:
        done = cli(*args, "--json", "-", "-q")
        assert done.code in (0, 3), done.err
        return done.out

    warm = {v: view(*v) for v in views}
    assert part_reads == []  # every view found every part's states
    monkeypatch.setenv(part_cache.MB_ENV, "0")
    for v in views:
        assert view(*v) == warm[v], v
    assert part_reads  # the cold reads did read the tokens
    written(dumps, "step:4:0.02")
    off = cli("watch", str(dumps), "--run", "w", "--once", "--warm")
    assert off.code == 0 and off.err.count("the part cache is off") == 1


def test_warms_are_spaced_by_their_own_cost_but_the_stop_warms_whatever(
    store: Path, tmp_path: Path, fresh_part_cache: Path
) -> None:
    """A warm waits ``WARM_SPACING`` times the last warm's duration after it, and for the files
    that wait to be complete; the stop warms what was ingested since, whatever the spacing;
    nothing is warmed twice for the same files."""
    from mismatchctl.analysis import watch as watch_module

    dumps = tmp_path / "dumps"
    written(dumps, "step:1:0.02")
    watcher = api.watch(dumps, "w", store=store, once=True, warm=True)
    events = list(watcher.events())
    assert sum(isinstance(e, api.Warmed) for e in events) == 1  # the stop's
    assert isinstance(events[-1], api.Stopped) and isinstance(events[-2], api.Warmed)
    assert watcher.next_warm > time.monotonic()  # spaced after the warm it made
    assert list(watcher._warm()) == []  # nothing ingested since
    watcher.counts["ingested"] += 1
    assert list(watcher._warm()) == []  # too soon
    watcher.next_warm = 0.0
    watcher.pending[dumps / "step_2.parquet"] = "being written"
    assert list(watcher._warm()) == []  # a file waits
    (warmed,) = list(watcher._warm(stopping=True))
    assert warmed.run == "w" and sorted(warmed.seconds) == ["diagnose", "explain", "report"]
    assert watch_module.WARM_SPACING == 10.0
