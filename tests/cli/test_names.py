"""Hostile names: run names that are paths or hold control characters are refused before anything
is written; tags are escaped in HTML; error messages never carry raw control codes; JSON output is
valid whatever the names in the data."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import mismatchctl
from tests.helpers import EVIL, FIXTURES, cli, multi_gpu_dump, tree_digest

GOOD = FIXTURES / "sequence.parquet"

BAD_RUN_NAMES = [
    "../x",
    "/etc/passwd",
    "..",
    ".hidden",
    "",
    "a" * 129,
    "x\n",  # `$` of a regex search would accept this one
    "red\x1b[31m",
    "nul\x00byte",
    "rtl\u202eexe.txt",
    "a/b",
    "run=x",
    "a b",
    "émile",
]


@pytest.fixture
def seeded(store: Path) -> Path:
    assert cli("ingest", str(GOOD), "--run", "base", "-q").code == 0
    return store


@pytest.mark.parametrize("name", BAD_RUN_NAMES)
def test_bad_run_names_are_refused_before_any_write(
    seeded: Path, tmp_path: Path, name: str
) -> None:
    before = tree_digest(seeded)
    ran = cli("ingest", str(GOOD), "--run", name, "-q")
    assert ran.code == 1
    assert ran.err.startswith("Error: run name `")
    assert "is not allowed" in ran.err and "Hint: use letters, digits" in ran.err
    assert "\x1b" not in ran.err and "\x00" not in ran.err and "\u202e" not in ran.err
    assert tree_digest(seeded) == before
    assert not (tmp_path / "x").exists() and not (seeded.parent / "x").exists()


def test_error_messages_escape_control_characters(seeded: Path) -> None:
    ran = cli("ingest", str(GOOD), "--run", "red\x1b[31m", "-q")
    assert "run name `red\\x1b[31m` is not allowed" in ran.err
    shown = cli("runs", "show", "evil\x1b]0;pwned\x07")
    assert shown.code == 1
    assert shown.err.startswith("Error: no run `evil\\x1b]0;pwned\\x07` in the store")


def test_long_names_are_cut_in_messages(seeded: Path) -> None:
    ran = cli("ingest", str(GOOD), "--run", "a" * 10_000, "-q")
    assert ran.code == 1 and "(10000 characters)" in ran.err and len(ran.err) < 600


def test_longest_allowed_run_name(seeded: Path) -> None:
    name = "v1.0+cu121_A-100" + "x" * 112
    assert len(name) == 128
    assert cli("ingest", str(GOOD), "--run", name, "-q").code == 0
    assert (seeded / "tokens" / f"run={name}").is_dir()


@pytest.mark.parametrize("value", ["a\x1b[2Jb", "x\ny", "t\x00", "x" * 257])
def test_tag_values_with_control_characters_are_refused(seeded: Path, value: str) -> None:
    before = tree_digest(seeded)
    ran = cli("ingest", str(GOOD), "--run", "t", "--tag", f"engine={value}", "-q")
    assert ran.code == 1 and ran.err.startswith("Error: --tag `engine=")
    assert "Hint: use printable text of at most 256 characters" in ran.err
    assert "\x1b" not in ran.err and "\x00" not in ran.err
    assert tree_digest(seeded) == before


def test_gpu_and_sample_id_with_control_characters(store: Path, tmp_path: Path) -> None:
    path = tmp_path / "d.parquet"
    table = pa.table(
        {
            "uid": ["ok", "bad\x1b[31m"],
            "gpu": ["H20", "H20"],
            "rollout_log_probs": [[-0.1], [-0.2]],
            "old_log_probs": [[-0.1], [-0.2]],
        }
    )
    pq.write_table(table, path)
    ran = cli("ingest", str(path), "--run", "r", "-q")
    assert ran.code == 1
    assert "sample `bad\\x1b[31m` (row 1): sample_id " in ran.err
    assert "holds control characters (expected printable text)" in ran.err
    kept = cli("ingest", str(path), "--run", "r", "--skip-bad", "-q", "--json")
    assert json.loads(kept.out)["totals"]["dropped"] == {"sample_id with control characters": 1}


def test_tag_with_script_is_escaped_in_html(store: Path, tmp_path: Path) -> None:
    assert cli("ingest", str(GOOD), "--run", "r", "--tag", f"engine={EVIL}", "-q").code == 0
    for command in (["report", "r", "--by", "tag:engine"], ["diagnose", "r"]):
        html = tmp_path / f"{command[0]}.html"
        ran = cli(*command, "--html", str(html), "--quiet")
        assert ran.code in (0, 3), ran.err
        page = html.read_text(encoding="utf-8")
        assert EVIL not in page
        if command[0] == "report":  # the diagnosis page does not show tags
            assert "engine=&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page


TAG_VALUES = ['"', "\\", "🙂 ü 中", "null", "NaN", "</script><b>"]
NASTY = ['"', "\\", "\u2028\u2029", "🙂 ü 中", "null", "NaN", "</script><b>", "x" * 5000, "\ufeff"]


def test_json_output_is_valid_for_any_names(store: Path, tmp_path: Path) -> None:
    path = tmp_path / "nasty.parquet"
    n = len(NASTY)
    pq.write_table(
        pa.table(
            {
                "uid": NASTY,
                "gpu": NASTY,
                "step": list(range(n)),
                "rollout_log_probs": [[-0.1, -2.0]] * n,
                "old_log_probs": [[-0.2, -1.9]] * n,
            }
        ),
        path,
    )
    tags = [arg for i, t in enumerate(TAG_VALUES) for arg in ("--tag", f"k{i}={t}")]
    assert cli("ingest", str(path), "--run", "n", *tags, "-q").code == 0
    outputs = [
        cli("runs", "--json").out,
        cli("runs", "show", "n", "--json").out,
        cli("report", "n", "--by-gpu", "--json", "-", "--quiet").out,
        cli("diagnose", "n", "--json", "-", "--quiet").out,
        cli("whatif", "n", "--json", "-", "--quiet").out,
    ]
    for text in outputs:
        json.loads(text)  # raises on invalid JSON
    report = json.loads(outputs[2])
    gpus = {g["by"]["gpu"] for g in report["groups"] if set(g["by"]) == {"gpu"}}
    assert gpus == set(NASTY)  # stored and reported exactly, not mangled
    info = mismatchctl.open_store(store).run("n")
    assert set(info.tags.values()) == set(TAG_VALUES)


# What a hostile file name, tag or metric name could carry: ESC sequences (CSI: clear screen,
# OSC: set the window title, ended by BEL), a bare BEL, C1 CSI, DEL, and bidirectional overrides.
HOSTILE = "\x1b[2J\x1b]0;pwned\x07\x07\x9b31m\x7f\u202egnp.\u2066x\u2069"
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def test_no_raw_control_character_reaches_the_terminal(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Data strings reach stdout and stderr of every command with their control characters
    escaped: a file name (shown by runs show, ingest), a metric name from a training log (report,
    compare, diagnose, ingest-metrics), a tag value (refused at ingest, quoted in the message)."""
    monkeypatch.setenv("COLUMNS", "200")
    dump = tmp_path / f"dump{HOSTILE}.parquet"
    multi_gpu_dump(dump)
    refused = tmp_path / f"log{HOSTILE}.jsonl"  # a metric name with C0 controls: refused
    refused.write_text(json.dumps({"step": 0, f"grad_norm{HOSTILE}": 1.0}) + "\n")
    bidi = "\u202egnp.\u2066x\u2069"  # bidirectional controls only: a name ingest keeps
    log = tmp_path / f"log{HOSTILE}-2.jsonl"
    log.write_text(
        "".join(
            json.dumps({"step": s, f"grad_norm{bidi}": 1.0 + s % 3, f"reward{bidi}": 1 - s / 20})
            + "\n"
            for s in range(12)
        )
    )
    runs = [
        ["ingest", str(dump), "--run", "evil"],
        ["ingest", str(dump), "--run", "evil"],  # "already there": names the file again
        ["ingest", str(GOOD), "--run", "base"],
        ["ingest", str(GOOD), "--run", "t", "--tag", f"engine={HOSTILE}"],  # refused, quoted
        ["ingest-metrics", str(refused), "--run", "evil"],
        ["ingest-metrics", str(log), "--run", "evil"],
        ["ingest-metrics", str(log), "--run", "evil"],
        ["runs"],
        ["runs", "show", "evil"],
        ["runs", "show", f"x{HOSTILE}"],  # an error quoting the name
        ["runs", "check"],
        ["report", "--by-gpu"],
        ["report", "evil", "--diagnose"],
        ["compare", "evil", "base", "--resamples", "20"],
        ["diagnose", "evil"],
        ["whatif", "evil"],
        ["runs", "--json"],
        ["runs", "show", "evil", "--json"],
        ["report", "evil", "--json", "-"],
        ["compare", "evil", "base", "--resamples", "20", "--json", "-"],
    ]
    shown = []
    for args in runs:
        ran = cli(*args)
        assert ran.code in (0, 1, 3), (args, ran.err)
        for stream in (ran.out, ran.err):
            raw = RAW.search(stream)
            assert raw is None, (args, repr(raw.group()), stream[max(0, raw.start() - 80) :][:200])
        shown.append(ran.out + ran.err)
    everything = "".join(shown)
    assert (
        "dump\\x1b[2J\\x1b]0;pwned\\x07\\x07\\x9b31m\\x7f\\u202egnp.\\u2066x\\u2069" in everything
    )
    assert "grad_norm\\x1b[2J" in everything  # the refused name, quoted in the error
    for name in ("grad_norm", "reward"):  # the kept names, in report, compare and diagnose
        assert everything.count(f"{name}\\u202egnp.\\u2066x\\u2069") >= 3, name
    assert "--tag `engine=\\x1b[2J" in everything
