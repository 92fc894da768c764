"""The HTML report: structure, escaping, size, and a real load in headless Chromium."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import mismatchctl
from mismatchctl.render.report_html import report_html
from tests.helpers import EVIL, FIXTURES, cli, multi_gpu_dump

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
NEEDS_CHROMIUM = pytest.mark.skipif(
    CHROMIUM is None,
    reason="browser test: needs a headless Chromium, not found on PATH "
    "(install it with `apt-get install chromium`; .ci/run does)",
)
FIGURES = ("fig-mismatch", "fig-probs", "fig-log-ppl")


@pytest.fixture
def page(store: Path, tmp_path: Path) -> Path:
    multi_gpu_dump(tmp_path / "dump.parquet")
    assert (
        cli(
            "ingest",
            str(tmp_path / "dump.parquet"),
            "--run",
            "multi",
            "--tag",
            f"note={EVIL}",
            "-q",
        ).code
        == 0
    )
    assert cli("ingest", str(FIXTURES / "sequence.parquet"), "--run", "seq", "-q").code == 0
    log = tmp_path / "log.jsonl"  # training curves, one metric named with markup
    log.write_text(
        "".join(
            json.dumps({"step": s, "actor/grad_norm": 1 + s / 10, EVIL: s % 3}) + "\n"
            for s in range(14)
        )
    )
    assert cli("ingest-metrics", str(log), "--run", "multi").code == 0
    out = tmp_path / "report.html"
    ran = cli("report", "--by-gpu", "--html", str(out), "-q")
    assert ran.code == 0, ran.err
    return out


def test_structure_size_and_escaping(page: Path) -> None:
    text = page.read_text()
    assert text.count("* plotly.js v") == 1  # plotly.js inlined exactly once
    assert not re.search(r"""<script[^>]+src=|<link[^>]+href=["']https?:""", text)  # offline
    for fig in FIGURES:
        assert f'id="{fig}"' in text
    assert "fig-steps-run" in text and "fig-steps-gpu" in text
    assert 'id="curves"' in text and "fig-curves-0" in text and "fig-lags-0" in text
    assert EVIL not in text  # every tag, gpu and run string is escaped
    assert "&lt;script&gt;alert" in text or "\\u003cscript\\u003ealert" in text
    assert len(text.encode()) < 10_000_000


def test_page_size_does_not_grow_with_tokens(store: Path, tmp_path: Path) -> None:
    sizes = []
    for n, seed in ((1, 1), (4, 2)):
        run = f"r{n}"
        for k in range(n):
            multi_gpu_dump(tmp_path / f"{run}-{k}.parquet", seed=seed * 10 + k)
        mismatchctl.ingest(sorted(tmp_path.glob(f"{run}-*.parquet")), run=run, store=store)
        rep = mismatchctl.report([run], store=store, figures=True)
        sizes.append(len(report_html(rep)))
    assert sizes[1] < 1.3 * sizes[0]


def _png_pixels(path: Path) -> np.ndarray:
    """The screenshot as an RGB array."""
    from PIL import Image

    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"))


def _chromium(*args: str, tmp: Path) -> subprocess.CompletedProcess:
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp / 'chromium-profile'}",
        "--virtual-time-budget=10000",
    ]
    return subprocess.run([CHROMIUM, *flags, *args], capture_output=True, text=True, timeout=120)


@pytest.mark.browser
@NEEDS_CHROMIUM
def test_loads_in_chromium_without_errors(page: Path, tmp_path: Path) -> None:
    dom = _chromium("--dump-dom", page.as_uri(), tmp=tmp_path).stdout
    assert not re.search(r"<html[^>]*data-js-errors", dom), dom[:500]  # no script error
    assert not re.search(r'class="[^"]*fig-error', dom)  # every figure drew
    # plotly drew every figure: each gets its own <svg class="main-svg">
    drawn = dom.count('class="main-svg"')
    assert drawn >= 2 * (len(FIGURES) + 2), drawn


@pytest.mark.browser
@NEEDS_CHROMIUM
def test_screenshot_is_not_blank(page: Path, tmp_path: Path) -> None:
    shot = tmp_path / "shot.png"
    _chromium(f"--screenshot={shot}", "--window-size=1400,2200", page.as_uri(), tmp=tmp_path)
    pixels = _png_pixels(shot)
    plots = pixels[600:1400]  # below the header: the first figures
    assert (
        plots < 200
    ).mean() > 0.01  # coloured/dark pixels of heatmaps and axes, not a white page
    assert len(np.unique(plots)) > 50
