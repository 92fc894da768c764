"""The demo: the bundled sample data ingested, reported on, and written as HTML."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from mismatchctl.analysis.tokenizer import byte_text
from tests.helpers import Ran, cli
from tests.render.test_report_html import (
    DEMO_PAGE_BYTES,
    DEMO_PAGE_HEIGHT,
    FIGURE_BYTES,
    NEEDS_CHROMIUM,
    _chromium,
    check_drawn,
)

ROOT = Path(__file__).parents[2]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Ran, Path, Path]:
    """The demo run once for the module (a minute of CI): its output, store and page."""
    tmp = tmp_path_factory.mktemp("demo")
    store, page = tmp / "store", tmp / "demo.html"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NO_COLOR", "1")
        ran = cli("demo", "--store", str(store), "--html", str(page), "-q")
    assert ran.code == 0, ran.err
    return ran, store, page


@pytest.mark.slow
def test_demo_runs_on_the_bundled_sample_data(
    demo: tuple[Ran, Path, Path], tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    ran, store, page = demo
    manifest = json.loads((ROOT / "sample_data" / "manifest.json").read_text())
    for run in manifest["runs"]:
        assert run["name"] in ran.out
    assert "SYNTHETIC" in ran.err and "By hardware" in ran.out
    assert f"HTML report: {page.resolve()}" in ran.err
    # the demo's store is not the default one: it says how to point the other commands at it
    said = " ".join(ran.err.split())
    assert f"add --store {store} to each command, or `export MISMATCHCTL_STORE={store}`" in said
    text = page.read_text()
    for run in manifest["runs"]:  # each run's block, its diagnosis folded under it
        assert f'id="run-{run["name"]}"' in text and f'id="diagnosis-{run["name"]}"' in text
    # the synthetic run's (synthetic) training log is attached: its curves are joined to vllm_kl
    assert "Training curves: synthetic-gpus" in ran.out and "actor/grad_norm" in ran.out
    assert "3 step(s) in the training logs have no dumps: 9-11" in ran.out
    # last, bisect on ref-b's step 8 with the shipped checkpoint: the engine's path is named
    assert "Bisect: ref-b" in ran.out and "sequences re-scored" in ran.out
    # the engine's setting is named: it reproduces the rollout side on the CPU that sampled the
    # run, and is the closest on another (docs/bisect.md "Limits of this version")
    plain = " ".join(ran.out.split())
    assert (
        "bf16+incremental (bfloat16, one token at a time with a KV cache) reproduces" in plain
        or "nothing here reproduces the rollout logprobs: the closest, bf16+incremental," in plain
    )
    assert "actor/grad_norm" in text and "critic/score/mean" in text
    # the MoE runs are ingested with their routes (the manifest's `ingest` options): the report
    # has a Routing section with their rows, and their diagnosis names flips and a capture bug
    moe = [run["name"] for run in manifest["runs"] if "ingest" in run]
    assert moe and "Routing (MoE)" in ran.out and "Routing (MoE)" in text
    for name in moe:
        assert f"Routing of {name}" in ran.out and f"Routing of {name}" in text
    assert "routing flips carry" in text and "replay is on and" in text
    report = tmp_path / "report.json"
    assert cli("report", "synthetic-gpus", "--store", str(store), "--json", str(report)).code == 0
    curves = json.loads(report.read_text())["curves"]["synthetic-gpus"]
    assert curves["roles"]["grad_norm"] == "actor/grad_norm"
    assert curves["only_log_steps"] == [9, 10, 11]
    pearson = {c["metric"]: c["pearson"] for c in curves["correlations"]}
    assert pearson["actor/grad_norm"] > 0.5 and pearson["critic/score/mean"] < 0
    assert [d["step"] for d in curves["events"]["reward_drops"]] == [6]  # sample_data/README.md
    again = cli("demo", "--store", str(store), "--html", str(page), "-q")  # reuses the store
    assert again.code == 0
    # every sample run decodes with the sample tokenizer, remembered by the demo
    tokenizer = str((ROOT / "sample_data" / "tokenizer.json").resolve())
    for run in manifest["runs"]:
        listed = cli("tokens", run["name"], "--store", str(store), "--top", "1", "--json", "-")
        assert json.loads(listed.out)["tokens"]["tokenizers"] == {run["name"]: tokenizer}


@pytest.mark.slow
def test_demo_page_size(demo: tuple[Ran, Path, Path]) -> None:
    """Sixteen runs' report, 53 figures: one file of at most 8 MB (it was 26 MB with each
    figure's JSON in full), plotly.js in it once."""
    from plotly.offline import get_plotlyjs

    from mismatchctl.render.html import packed_figures

    text = demo[2].read_text()
    assert len(text.encode()) <= DEMO_PAGE_BYTES
    assert text.count(get_plotlyjs()) == 1 and "<script src" not in text
    figures = packed_figures(text)
    assert len(figures) > 48 and max(len(f) for f in figures) <= FIGURE_BYTES


@pytest.mark.browser
@NEEDS_CHROMIUM
@pytest.mark.slow
def test_demo_page_height_and_screenshot(demo: tuple[Ran, Path, Path], tmp_path: Path) -> None:
    _, _, page = demo
    got = check_drawn(page, tmp_path)
    assert got["drawn_on_load"] < got["plots"]  # the folded runs' figures wait to be opened
    assert got["height"] <= DEMO_PAGE_HEIGHT, got["height"]
    assert got["summary_bottom"] <= 900
    shot = tmp_path / "shot.png"
    _chromium(f"--screenshot={shot}", page.as_uri(), tmp=tmp_path)
    from PIL import Image

    with Image.open(shot) as image:
        pixels = np.asarray(image.convert("RGB"))
    assert pixels.shape[:2] == (900, 1400)
    assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 20  # a drawn page, not a blank one


def test_demo_without_sample_data(tmp_path: Path) -> None:
    ran = cli("demo", "--store", str(tmp_path / "s"), "--data", str(tmp_path), "-q")
    assert ran.code == 1
    assert ran.err.startswith(f"Error: no sample data manifest at {tmp_path / 'manifest.json'}")


def test_manifest_ingest_options(tmp_path: Path) -> None:
    """A run's `ingest` options become the ingest's route options; an unknown key is refused
    with the run and the keys it may hold."""
    from mismatchctl.errors import InputError
    from mismatchctl.sample_runs import load_manifest

    run = {"name": "m", "path": "runs/m", "format": "parquet-sequence"}
    manifest = tmp_path / "manifest.json"
    manifest.write_text(
        json.dumps({"runs": [run, {**run, "name": "n", "ingest": {"routes_topk": 2}}]})
    )
    plain, moe = load_manifest(tmp_path)
    assert (plain.routes.top_k, plain.routes.num_experts, plain.routes.aligned) == (
        0,
        None,
        "input",
    )
    assert moe.routes.top_k == 2
    manifest.write_text(json.dumps({"runs": [{**run, "ingest": {"topk": 2}}]}))
    with pytest.raises(
        InputError, match=r"run `m`: `ingest` holds \['topk'\], expected .*routes_topk"
    ):
        load_manifest(tmp_path)


def test_the_sample_runs_legend_lines_up() -> None:
    """Every run's kind starts in one column: names longer than the old fixed 16 characters
    (faulty-attn-subtle is 18) pushed theirs out of line."""
    from mismatchctl.cli.demo import legend
    from mismatchctl.sample_runs import load_manifest

    runs = load_manifest()
    longest = max(len(run.name) for run in runs)
    assert longest > 16
    lines = legend(runs)
    assert len(lines) == len(runs)
    for run, line in zip(runs, lines, strict=True):
        kind = "captured" if run.captured else "SYNTHETIC"
        assert line.index(kind) == 2 + longest + 2, line
        assert line.startswith(f"  {run.name} ") and line.endswith(f"  {run.shows}")


@pytest.fixture(scope="module")
def ref_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample run `ref` ingested as the demo ingests it, its tokenizer remembered."""
    from mismatchctl.sample_runs import ingest_demo, load_manifest, remember_tokenizers
    from mismatchctl.store import open_store

    store = open_store(tmp_path_factory.mktemp("ref") / "store")
    runs = [r for r in load_manifest() if r.name == "ref"]
    ingest_demo(store, runs)
    remember_tokenizers(store, runs)
    return store.root


def _first_model_text(sample_id: str) -> str:
    """Printable text the model wrote in `ref`'s sequence (from the dump, with pyarrow)."""
    import pyarrow.parquet as pq

    table = pq.read_table(ROOT / "sample_data" / "runs" / "ref" / "step_0001.parquet")
    row = table.to_pydict()["uid"].index(sample_id)
    ids = table.column("responses")[row].as_py()
    runs = re.findall(rb"[ -~]+", bytes(ids[:40]))  # printable ASCII
    return max(runs, key=len)[:12].decode()


def test_show_and_tokens_print_the_sample_runs_text(
    ref_store: Path, tmp_path: Path, monkeypatch
) -> None:
    """The demo remembers the sample runs' tokenizer: `show` and `tokens` print text, no flag."""
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "200")
    tokenizer = ROOT / "sample_data" / "tokenizer.json"
    expected = _first_model_text("step1-p00-r0")
    assert expected.isprintable() and not expected.replace(" ", "").isdigit()
    shown = cli("show", "ref", "step1-p00-r0", "--store", str(ref_store))
    assert shown.code == 0, shown.err
    assert expected in shown.out and f"tokenizer                {tokenizer}" in shown.out
    assert "Token ids are shown" not in shown.out
    page = tmp_path / "seq.html"
    html = cli("show", "ref", "step1-p00-r0", "--store", str(ref_store), "--html", str(page))
    assert html.code == 0 and "Token ids are shown" not in page.read_text()
    assert f"id {expected.encode()[0]}: " in page.read_text()  # the tooltip keeps the id
    tokens = cli("tokens", "ref", "--store", str(ref_store), "-q", "--top", "3")
    assert tokens.code == 0 and f"tokenizer            {tokenizer}" in tokens.out
    listed = cli("tokens", "ref", "--store", str(ref_store), "-q", "--top", "3", "--json", "-")
    doc = json.loads(listed.out)["tokens"]
    assert doc["tokenizers"] == {"ref": str(tokenizer)}
    for row in doc["tokens"]:  # each token as its byte, in brackets in its context
        assert row["token_text"] == byte_text([row["token_id"]])[0]
        assert f"[{row['token_text']}]" in row["context"] and row["context"] in tokens.out


def test_remembering_keeps_a_readable_tokenizer(ref_store: Path, tmp_path: Path) -> None:
    """A tokenizer the user chose for a sample run stays; one that is gone is replaced."""
    from mismatchctl.sample_runs import load_manifest, remember_tokenizers
    from mismatchctl.store import open_store
    from mismatchctl.store.run_settings import TOKENIZER, run_setting, set_run_setting

    store = open_store(ref_store)
    runs = [r for r in load_manifest() if r.name == "ref"]
    assert runs[0].tokenizer == (ROOT / "sample_data" / "tokenizer.json").resolve()
    set_run_setting(store, "ref", TOKENIZER, "bytes")
    remember_tokenizers(store, runs)
    assert run_setting(store, "ref", TOKENIZER) == "bytes"
    set_run_setting(store, "ref", TOKENIZER, str(tmp_path / "gone" / "tokenizer.json"))
    remember_tokenizers(store, runs)
    assert run_setting(store, "ref", TOKENIZER) == str(runs[0].tokenizer)


def test_a_manifest_tokenizer_that_is_not_there(tmp_path: Path) -> None:
    from mismatchctl.errors import InputError
    from mismatchctl.sample_runs import load_manifest

    run = {"name": "m", "path": "runs/m", "format": "parquet-sequence"}
    (tmp_path / "manifest.json").write_text(json.dumps({"runs": [run], "tokenizer": "tok.json"}))
    with pytest.raises(InputError, match=r"`tokenizer` is 'tok.json', expected the name of a"):
        load_manifest(tmp_path)
    (tmp_path / "tok.json").write_text("{}")
    assert load_manifest(tmp_path)[0].tokenizer == (tmp_path / "tok.json").resolve()


@pytest.fixture
def small_data(tmp_path: Path) -> Path:
    """A sample-data directory of two sample runs (60,841 tokens: the kernels stay unloaded)."""
    manifest = json.loads((ROOT / "sample_data" / "manifest.json").read_text())
    runs = [r for r in manifest["runs"] if r["name"] in ("ref", "ref-b")]
    for run in runs:
        run["path"] = str(ROOT / "sample_data" / run["path"])
    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(ROOT / "sample_data" / "tokenizer.json", data)
    (data / "manifest.json").write_text(json.dumps({"runs": runs, "tokenizer": "tokenizer.json"}))
    return data


PHASES = [
    "loading the compiled kernels",
    "ingesting 2 sample runs",
    "reading 60,841 tokens of 2 runs",  # ref 30,548, ref-b 30,293
    "diagnosing 2 runs",
    "writing the HTML report",
]


def _demo(data: Path, tmp_path: Path, *flags: str) -> Ran:
    store, page = tmp_path / "store", tmp_path / "demo.html"
    ran = cli("demo", "--store", str(store), "--data", str(data), "--html", str(page), *flags)
    assert ran.code == 0, ran.err
    return ran


def test_the_demo_says_each_phase_on_a_pipe(
    small_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """stderr is not a terminal: one line per phase, in order, before the output; a cold
    kernel cache is announced first; -q (and every kernel cached) prints neither; stdout is the
    same."""
    from mismatchctl import sample_runs

    monkeypatch.setenv("NO_COLOR", "1")
    cold = sample_runs.Compile(kernels=13, seconds=60, cached_in=str(tmp_path / "nb"))
    monkeypatch.setattr(sample_runs, "demo_compile", lambda: cold)
    ran = _demo(small_data, tmp_path)
    lines = ran.err.splitlines()
    note = (
        f"compiling 13 kernels once, about 60 s on a first run (measured on 2 CPU cores); "
        f"cached under {tmp_path / 'nb'}"
    )
    assert lines[: len(PHASES) + 1] == [PHASES[0], note, *PHASES[1:]]
    # no checkpoint in this data directory: bisect is not a phase, its skip is said with the
    # output (-q too)
    skipped = f"bisect: skipped, the sample data has no model checkpoint ({small_data / 'model'} is empty)"
    assert lines[len(PHASES) + 1 : len(PHASES) + 3] == [skipped, "Sample runs:"]
    monkeypatch.setattr(sample_runs, "demo_compile", lambda: None)  # every kernel cached
    quiet = _demo(small_data, tmp_path, "-q")  # the runs are in the store now
    assert quiet.err.splitlines()[:2] == [skipped, "Sample runs:"] and quiet.out == ran.out
