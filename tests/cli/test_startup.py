"""Start-up: importing the package, the api or the command line, and `--help`, load none of the
libraries that compute (numba, numpy, pyarrow, polars, plotly, ray, torch); `show` reads one
sequence (and writes its page) without numba, pandas, polars, plotly, ray or torch; neither the
views nor an ingest of each text and Parquet format load pandas. What is checked is the set of
modules a fresh process ends with, not a time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import mismatchctl
from mismatchctl import api
from tests.helpers import FIXTURES
from tests.routing.moe_data import draw_logprobs
from tests.routing.moe_data import sequences as moe_sequences
from tests.routing.moe_data import write as write_moe

ROOT = Path(__file__).parents[2]
COMPUTING = {"numba", "numpy", "pyarrow", "pandas", "polars", "plotly", "ray", "torch",
             "transformers"}  # fmt: skip
# `show` reads Parquet (pyarrow, with numpy) by paths of pyarrow that do not load pandas, nor
# pyarrow's compute functions (0.1 s to import), nor the routing metrics and the engines
NOT_FOR_SHOW = {"numba", "pandas", "polars", "plotly", "ray", "torch"}
NOT_FOR_SHOW_MODULES = {
    "pyarrow.compute",
    "mismatchctl.analysis.routing.routing",
    "mismatchctl.engines.plan",
}


def _loaded(code: str, whole: bool = False) -> set[str]:
    """The top-level packages (every module with ``whole``) a fresh interpreter has imported
    after running ``code``."""
    names = "sys.modules" if whole else "{m.split('.')[0] for m in sys.modules}"
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted({names})))"
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def _cli(*args: str) -> str:
    """The command line run as `python -m mismatchctl ARGS`, its output discarded; its exit
    raises SystemExit instead of ending the process (``cli/process.py``), so that the probe
    can list the modules (and run several commands in one process)."""
    return (
        "import contextlib, io, runpy, sys\n"
        "import mismatchctl.cli.process as process\n"
        "process.exit_now = sys.exit\n"
        f"sys.argv = ['mismatchctl', *{list(args)!r}]\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n"
        "        runpy.run_module('mismatchctl', run_name='__main__')\n"
        "    except SystemExit as exc:\n"
        "        assert exc.code in (0, None), exc.code\n"
    )


START_UPS = {
    "package": "import mismatchctl",
    "api": "import mismatchctl.api",
    "cli": "import mismatchctl.cli.main",
    "--help": _cli("--help"),
    "report --help": _cli("report", "--help"),
    "check --help": _cli("check", "--help"),  # its help lists the metrics a gate can judge
    "ingest --help": _cli("ingest", "--help"),  # ... and the dump formats
    "bisect --help": _cli("bisect", "--help"),  # torch and transformers only when it runs
    "--version": _cli("--version"),
}


def _none_loaded(names: set[str], label: str) -> str:
    """Code asserting that no top-level package of ``names`` is loaded yet, naming ``label``."""
    return (
        f"found = {{m.split('.')[0] for m in sys.modules}} & {names!r}\n"
        f"assert not found, ({label!r}, sorted(found))\n"
    )


def test_start_up_loads_no_computing_library() -> None:
    """Each start-up runs in turn in one fresh process, which is checked after each: no module
    is unloaded, so the first start-up to load a computing library is named (one interpreter
    instead of one each)."""
    steps = [
        f"{code}\nimport sys\n{_none_loaded(COMPUTING, label)}" for label, code in START_UPS.items()
    ]
    assert _loaded("".join(steps)) & COMPUTING == set()


def test_show_loads_no_kernel_nor_plotting_library(tmp_path: Path) -> None:
    store = tmp_path / "store"
    api.ingest([FIXTURES / "sequence.parquet"], "a", store=store)
    worst = api.tokens("a", sequences=True, top=1, store=store).rows[0]
    code = _cli(
        "show", "a", worst["sample_id"], "--step", str(worst["step"]), "--index", "0",
        "--store", str(store), "--json", os.devnull, "--html", str(tmp_path / "s.html"),
    )  # fmt: skip
    loaded = _loaded(code, whole=True)
    assert {m.split(".")[0] for m in loaded} & NOT_FOR_SHOW == set()
    assert loaded & NOT_FOR_SHOW_MODULES == set()


def test_a_small_view_loads_neither_numba_nor_arrow_compute(tmp_path: Path) -> None:
    """A report (by gpu: every key of a plain one and the gpu's) or a comparison of a few
    thousand tokens runs the numpy twins of the compiled kernels (``stats/kernel_choice.py``):
    numba's load (0.6-1.1 s) is more than the whole view. Neither uses Arrow's compute
    functions (0.1 s to load): the keys of the turn runs and the gpu codes come from numpy
    views, the pairing's sample ids are sorted in numpy. The two runs hold the same samples on
    two gpus, their sides swapped: the comparison matches their sequences by sample id (the
    pairing reads the ids). Both views run in turn in one fresh process, checked after each."""
    store = tmp_path / "store"
    dump = FIXTURES / "sequence.parquet"
    api.ingest([dump], "a", tags={"gpu": "H20"}, store=store)
    swapped = {"rollout": "old_log_probs", "trainer": "rollout_log_probs"}
    api.ingest([dump], "b", tags={"gpu": "L20"}, mapping=swapped, store=store)
    steps = []
    for view in (("report", "a", "--by-gpu"), ("compare", "a", "b")):
        code = _cli(*view, "--store", str(store), "--json", os.devnull, "-q")
        steps.append(
            f"{code}{_none_loaded({'numba'}, view[0])}"
            f"assert 'pyarrow.compute' not in sys.modules, {view[0]!r}\n"
        )
    loaded = _loaded("".join(steps), whole=True)
    assert "numba" not in {m.split(".")[0] for m in loaded}
    assert "pyarrow.compute" not in loaded


def test_the_lazy_names_are_the_public_surface() -> None:
    """Every name of the package's, the api's and the stats package's ``__all__`` resolves (on
    first use), and `dir()` lists it."""
    import mismatchctl.stats as stats

    for module in (mismatchctl, api, stats):
        for name in module.__all__:
            assert getattr(module, name) is not None, (module.__name__, name)
            assert name in dir(module), (module.__name__, name)
    with pytest.raises(AttributeError):
        _ = mismatchctl.no_such_name
    with pytest.raises(AttributeError):
        _ = api.no_such_name


def test_the_ingest_verb_is_not_the_subpackage() -> None:
    """`mismatchctl.ingest` is the api's verb even after the readers' subpackage of the same
    name is imported (which binds it on its parent)."""
    code = (
        "import mismatchctl\n"
        "from mismatchctl.ingest import source\n"
        "import mismatchctl.ingest.detect\n"
        "from mismatchctl import api\n"
        "assert mismatchctl.ingest is api.ingest, mismatchctl.ingest\n"
        "assert source.__name__ == 'mismatchctl.ingest.source'\n"
    )
    _loaded(code)


VIEWS = (
    ("report", "a"),
    ("explain", "a"),
    ("diagnose", "a"),
    ("tokens", "a", "--top", "3"),
    ("certify", "a"),
    ("whatif", "a"),
    ("compare", "a", "b"),
)


def test_views_do_not_load_pandas(tmp_path: Path) -> None:
    """pyarrow's conversions import pandas (0.4-0.9 s, 37 MB); the views read by buffers. The
    views run one after another in one fresh process, which is checked after each: the first
    view to load pandas is named."""
    store = tmp_path / "store"
    api.ingest([FIXTURES / "sequence.parquet"], "a", store=store)
    api.ingest([FIXTURES / "golden.parquet"], "b", store=store)
    steps = []
    for args in VIEWS:
        view = _cli(*args, "--store", str(store), "--json", os.devnull, "-q")
        view = view.replace("assert exc.code in (0, None)", "assert exc.code in (0, 3, None)")
        steps.append(view + f"assert 'pandas' not in sys.modules, 'pandas loaded by {args[0]}'\n")
    assert "pandas" not in _loaded("".join(steps))


def test_ingest_does_not_load_pandas(tmp_path: Path) -> None:
    """pyarrow's conversions import pandas (0.16-0.4 s of CPU a process); the readers and the
    canonical tables read and make columns by their buffers. Each format's dump is ingested in
    one fresh process, which is checked after each: the first ingest to load pandas is named.
    The routes file is read, compared and kept (``--keep-routes``) by every route path."""
    seqs = moe_sequences(0, 6, 3)
    draw_logprobs(seqs, 0)
    routes = write_moe(tmp_path / "moe.parquet", seqs)
    dumps = {
        "sequence": [FIXTURES / "sequence.parquet"],
        "token": [FIXTURES / "token.parquet"],
        "verl": [FIXTURES / "verl_tools_step_5.parquet"],  # attention mask, prompt lengths
        "nemo": [FIXTURES / "train_data_step3.jsonl", FIXTURES / "train_data_step4.jsonl"],
        "prime": [FIXTURES / "token_exports"],
        "routes": [routes, "--keep-routes"],
    }
    steps = []
    for run, args in dumps.items():
        ingest = _cli("ingest", *map(str, args), "--run", run, "--store", str(tmp_path / "s"), "-q")
        steps.append(ingest + f"assert 'pandas' not in sys.modules, 'pandas loaded by {run}'\n")
    assert "pandas" not in _loaded("".join(steps))
    runs = {p.name.removeprefix("run=") for p in (tmp_path / "s" / "tokens").iterdir()}
    assert runs == set(dumps)
    assert (tmp_path / "s" / "routing" / "run=routes").is_dir()
