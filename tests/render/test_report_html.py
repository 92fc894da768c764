"""The HTML pages: structure, escaping, size, and real loads in headless Chromium.

The browser tests load each page (report, compare, diagnose, whatif, and the demo's report) in
Chromium and read back what the page measured of itself (a test-only script appended to a copy of
the page writes it on ``<html>``): as loaded at 1400x900, the page height, the summary visible
without scrolling and how many figures were drawn (a figure is drawn when it comes into view);
then, every block opened, whether the last figure is drawn once scrolled into view; then, after
``beforeprint`` (which draws every figure of the open blocks), no script error and every figure
drawn (an SVG holding a trace in each plot div).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from plotly.offline import get_plotlyjs

import mismatchctl
from mismatchctl.analysis.sections import Figure
from mismatchctl.render import html
from tests.helpers import EVIL, FIXTURES, cli, multi_gpu_dump
from tests.routing.moe_data import draw_logprobs, sequences, write

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
NEEDS_CHROMIUM = pytest.mark.skipif(
    CHROMIUM is None,
    reason="browser test: needs a headless Chromium, not found on PATH "
    "(install it with `apt-get install chromium`; .ci/run does)",
)
# The demo's report (sixteen runs, folded per run, and the MoE runs' Routing section) stays within
# this height at 1400x900, summary first (about 8,450 px measured); an open run adds its
# distributions and tables.
DEMO_PAGE_HEIGHT = 8500
# A figure's packed JSON (a density's is about 600 KB of JSON, 40 KB packed): the demo's sixteen
# runs' page stays within DEMO_PAGE_BYTES.
FIGURE_BYTES = 64_000
DEMO_PAGE_BYTES = 8_000_000
MEASURE = """
<script>
window.addEventListener('load', function () {
  setTimeout(function () {
    var plots = Array.prototype.slice.call(document.querySelectorAll('.figure'));
    function drawn(div) {
      return !!div.querySelector('svg.main-svg') &&
        div.querySelectorAll('g.trace, g.hm, image').length > 0;
    }
    function until(ok, tries, then) {  // polls every 50 ms (virtual time)
      if (ok() || tries === 0) { return then(); }
      setTimeout(function () { until(ok, tries - 1, then); }, 50);
    }
    var summary = document.getElementById('summary');
    var box = summary ? summary.getBoundingClientRect() : null;
    var out = {plots: plots.length, drawn_on_load: plots.filter(drawn).length,
               height: document.documentElement.scrollHeight,
               summary_bottom: box ? box.bottom : null};
    // as a reader would: every block opened, the last figure scrolled into view
    Array.prototype.forEach.call(document.querySelectorAll('details'), function (d) {
      d.open = true;
    });
    var last = plots[plots.length - 1];
    if (last) { last.scrollIntoView(); }
    // up to 25 s of virtual time: under a loaded CPU the headless renderer's frames, where
    // the observer reports what came into view, lag behind its virtual clock
    until(function () { return !last || drawn(last); }, 500, function () {
      out.last_drawn_in_view = !!last && drawn(last);
      window.dispatchEvent(new Event('beforeprint'));  // which draws every figure
      until(function () { return plots.every(drawn); }, 200, function () {
        out.drawn = plots.filter(drawn).length;
        out.empty = plots.filter(function (d) { return !drawn(d); }).map(function (d) {
          return d.id;
        });
        out.errors = window.__mismatchErrors || [];
        document.documentElement.setAttribute('data-measured', JSON.stringify(out));
      });
    });
  }, 1500);
});
</script>
"""


@pytest.fixture(scope="module")
def page_written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The report page of two runs (one with training curves), written once for the module's
    tests, which only read it and its store (``page``)."""
    tmp = tmp_path_factory.mktemp("page")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("MISMATCHCTL_STORE", str(tmp / "store"))
        env.setenv("NO_COLOR", "1")
        multi_gpu_dump(tmp / "dump.parquet")
        ran = cli("ingest", str(tmp / "dump.parquet"), "--run", "multi", "--tag", f"note={EVIL}")
        assert ran.code == 0
        assert cli("ingest", str(FIXTURES / "sequence.parquet"), "--run", "seq", "-q").code == 0
        log = tmp / "log.jsonl"  # training curves, one metric named with markup
        log.write_text(
            "".join(
                json.dumps({"step": s, "actor/grad_norm": 1 + s / 10, EVIL: s % 3}) + "\n"
                for s in range(14)
            )
        )
        assert cli("ingest-metrics", str(log), "--run", "multi").code == 0
        out = tmp / "report.html"
        ran = cli("report", "--by-gpu", "--diagnose", "--html", str(out), "-q")
        assert ran.code == 0, ran.err
    return out


@pytest.fixture
def page(page_written: Path, store: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``page_written``, its store the test's store."""
    monkeypatch.setenv("MISMATCHCTL_STORE", str(page_written.parent / "store"))
    return page_written


def test_structure_size_and_escaping(page: Path) -> None:
    text = page.read_text()
    assert text.count("* plotly.js v") == 1  # plotly.js inlined exactly once
    assert not re.search(r"""<script[^>]+src=|<link[^>]+href=["']https?:""", text)  # offline
    for run in ("multi", "seq"):  # every distribution drawn per run, in the run's own block
        for fig in ("fig-mismatch", "fig-probs", "fig-log-ppl"):
            assert f'id="{fig}-{run}"' in text
        assert f'id="run-{run}"' in text and f'<option value="run-{run}">' in text
    assert 'id="fig-steps-run"' in text and 'id="fig-steps-gpu"' in text
    assert 'id="fig-curves-multi"' in text and 'id="fig-lags-multi"' in text
    ids = re.findall(r'\bid="([^"]+)"', text)
    assert len(ids) == len(set(ids))  # anchors work: every id once
    assert text.index('id="summary"') < text.index('class="toc"') < text.index('id="run-multi"')
    assert "verdict-" in text and "top finding" in text  # the summary's verdict badges
    assert EVIL not in text  # every tag, gpu, run and metric string is escaped
    assert "&lt;script&gt;alert" in text or "\\u003cscript\\u003ealert" in text
    # plotly.js once, and each figure's JSON deflated: the heatmaps' empty cells cost nothing
    figures = html.packed_figures(text)
    assert len(figures) == len(html.page_json_blocks(text)) >= 8
    assert max(len(f) for f in figures) <= FIGURE_BYTES
    assert len(text.encode()) - len(get_plotlyjs()) < 1_000_000


def test_pooled_only_when_asked(page: Path, tmp_path: Path) -> None:
    pooled = tmp_path / "pooled.html"
    assert cli("report", "--pool", "--html", str(pooled), "-q").code == 0
    text = pooled.read_text()
    assert 'id="fig-mismatch-all_20runs"' in text and 'id="fig-mismatch-multi"' not in text


def test_page_size_does_not_grow_with_tokens(store: Path, tmp_path: Path) -> None:
    sizes = []
    for n, seed in ((1, 1), (4, 2)):
        run = f"r{n}"
        for k in range(n):
            multi_gpu_dump(tmp_path / f"{run}-{k}.parquet", seed=seed * 10 + k)
        mismatchctl.ingest(sorted(tmp_path.glob(f"{run}-*.parquet")), run=run, store=store)
        rep = mismatchctl.report([run], store=store, figures=True)
        sizes.append(len(html.page("t", "s", mismatchctl.sections(rep))))
    assert sizes[1] < 1.3 * sizes[0]


def test_log_ppl_axis_fits_the_data(store: Path, tmp_path: Path) -> None:
    """The log-ppl axes span the segments' log-ppls (not the density's whole 1e-4..100 grid)."""
    multi_gpu_dump(tmp_path / "d.parquet")
    mismatchctl.ingest([tmp_path / "d.parquet"], run="m", store=store)
    rep = mismatchctl.report(["m"], store=store, figures=True)
    (fig,) = [f for f in _figures(mismatchctl.sections(rep)) if f.kind == "log_ppl"]
    from mismatchctl.render.figures import build

    lo, hi = build(fig).layout.xaxis.range
    ppl = rep.figures["m"].sample.rollout_log_ppl
    assert 10**lo <= ppl.min() and 10**hi >= ppl.max()
    assert hi - lo < np.log10(ppl.max() / ppl.min()) + 1.0  # fitted: within a decade of slack


def _figures(sections: list) -> list[Figure]:
    out = []
    for s in sections:
        if isinstance(s, Figure):
            out.append(s)
        out += _figures(getattr(s, "sections", []))
    return out


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
        "--virtual-time-budget=60000",
        "--window-size=1400,900",
    ]
    return subprocess.run([CHROMIUM, *flags, *args], capture_output=True, text=True, timeout=180)


def measure(page: Path, tmp: Path) -> dict:
    """What the page says of itself once drawn in Chromium at 1400x900."""
    probe = tmp / f"measured-{page.name}"
    probe.write_text(page.read_text().replace("</body>", MEASURE + "</body>"))
    dom = _chromium("--dump-dom", probe.as_uri(), tmp=tmp).stdout
    assert not re.search(r"<html[^>]*data-js-errors", dom), dom[:500]  # no script error
    found = re.search(r"data-measured=\"([^\"]*)\"", dom)
    assert found, dom[:500]
    return json.loads(found.group(1).replace("&quot;", '"'))


def check_drawn(page: Path, tmp: Path) -> dict:
    got = measure(page, tmp)
    assert got["errors"] == []
    assert got["plots"] > 0 and got["drawn"] == got["plots"], got["empty"]
    return got


@pytest.mark.browser
@NEEDS_CHROMIUM
def test_report_page_draws_every_figure_summary_first(page: Path, tmp_path: Path) -> None:
    got = check_drawn(page, tmp_path)
    assert got["summary_bottom"] is not None and got["summary_bottom"] <= 900
    # the folded runs' figures are not drawn on load; opened and in view, they are
    assert got["drawn_on_load"] < got["plots"] and got["last_drawn_in_view"]


@pytest.mark.browser
@NEEDS_CHROMIUM
@pytest.mark.slow
def test_routing_page_draws_the_first_flip_histogram(store: Path, tmp_path: Path) -> None:
    """A run with MoE routes: the Routing section's first-flip layer histogram is drawn."""
    seqs = sequences(7, 24, layers=4)
    draw_logprobs(seqs, 7)
    assert cli("ingest", str(write(tmp_path / "moe.parquet", seqs)), "--run", "moe", "-q").code == 0
    out = tmp_path / "moe.html"
    assert cli("report", "moe", "--by", "step", "--html", str(out), "-q").code == 0
    assert 'id="routing-first-flip-plot"' in out.read_text()
    got = check_drawn(out, tmp_path)
    assert "routing-first-flip-plot" not in got["empty"]


@pytest.mark.browser
@NEEDS_CHROMIUM
@pytest.mark.slow
def test_compare_diagnose_whatif_pages_draw(page: Path, tmp_path: Path) -> None:
    for name, args in (
        ("cmp.html", ("compare", "multi", "seq")),
        ("dia.html", ("diagnose", "multi")),
        ("wif.html", ("whatif", "multi", "--method", "seq-mis", "--sweep", "1.5,2,3")),
    ):
        out = tmp_path / name
        assert cli(*args, "--html", str(out), "-q").code in (0, 3)
        if name == "dia.html":  # a diagnosis has no figure: it loads without an error
            assert measure(out, tmp_path)["errors"] == []
        else:
            check_drawn(out, tmp_path)
