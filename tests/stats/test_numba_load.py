"""Cached kernels load without numba's context refresh (stats/numba_load.py), give the same bits
as with it, leave numba's own functions (a cached ufunc) as they were, and a numba whose method
differs is left alone."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from numba.core import caching

from mismatchctl.stats import numba_load

ROOT = Path(__file__).parents[2]
# Refreshing the context imports numba's math implementations; a cached kernel does not need them.
REFRESH_MODULE = "numba.cpython.mathimpl"

PROBE = """
import json, sys
import numpy as np
from mismatchctl.stats import kernels, numba_load, seqhash
from mismatchctl.stats.localize import math as localize_math
rng = np.random.default_rng(5)
x = rng.normal(size=1000)
seq = np.repeat(np.arange(50), 20).astype(np.int64)
turn = (np.arange(1000) % 7 == 0).cumsum().astype(np.int32)
starts = kernels.run_starts(seq, turn)
bits = x.view(np.uint64)
none = np.empty(0, np.uint64)
hashes = seqhash.content_hashes(np.array([0, 400, 1000]), bits, bits[::-1].copy(), none, none)
refreshed = "REFRESH_MODULE" in sys.modules
# numba's own cached ufunc after the kernels: it lowers its wrapper, which needs the refresh
div = localize_math.div(np.array([1.0, 1.0, 3.0]), np.array([2.0, 0.0, 4.0]), -1.0)
print(json.dumps({
    "installed": type(kernels.run_starts._cache) is numba_load.NoRefreshCache,
    "refreshed": refreshed,
    "div": div.tolist(),
    "starts": starts.tolist(),
    "hashes": [[int(v) for v in h] for h in hashes],
}))
""".replace("REFRESH_MODULE", REFRESH_MODULE)


def _probe(cache: Path, keep_refresh: bool) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NUMBA_CACHE_DIR": str(cache)}
    env.pop(numba_load.KEEP_REFRESH, None)
    if keep_refresh:
        env[numba_load.KEEP_REFRESH] = "1"
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=600
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # three processes, the first compiling the kernels into an empty cache
def test_a_cached_kernel_loads_without_the_refresh_and_gives_the_same_bits(
    tmp_path: Path,
) -> None:
    compiled = _probe(tmp_path, keep_refresh=False)  # an empty cache: compiled (and refreshed)
    assert compiled["installed"] and compiled["refreshed"]
    loaded = _probe(tmp_path, keep_refresh=False)  # from the cache: no refresh
    assert loaded["installed"] and not loaded["refreshed"]
    numba_own = _probe(tmp_path, keep_refresh=True)  # numba's own method, from the cache
    assert not numba_own["installed"] and numba_own["refreshed"]
    for other in (compiled, numba_own):
        assert loaded["starts"] == other["starts"] and loaded["hashes"] == other["hashes"]
        assert loaded["div"] == other["div"] == [0.5, -1.0, 0.75]
    assert loaded["starts"][:5] == [0, 7, 14, 20, 21]  # turns change every 7, sequences every 20


def test_a_numba_whose_method_differs_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    def other_load_overload(self: object, sig: object, target_context: object) -> None:
        target_context.refresh()  # type: ignore[attr-defined]
        return None

    assert numba_load.loads_without_refresh(caching.Cache.load_overload)
    assert not numba_load.loads_without_refresh(other_load_overload)
    monkeypatch.setattr(caching.Cache, "load_overload", other_load_overload)

    def twice(x: int) -> int:
        return 2 * x

    made = numba_load.kernel(nogil=True)(twice)
    assert type(made._cache) is caching.FunctionCache and made(21) == 42
    monkeypatch.undo()
    monkeypatch.setenv(numba_load.KEEP_REFRESH, "1")
    assert not numba_load.loads_without_refresh()


def _tiny(path: Path) -> object:
    """A module of one kernel, loaded from ``path`` (numba caches it beside the file)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_kernels_cache_is_cold_until_compiled_and_after_its_source_changes(
    tmp_path: Path,
) -> None:
    source = tmp_path / "tiny_kernels.py"
    source.write_text(
        "from mismatchctl.stats.numba_load import kernel\n\n\n"
        "@kernel(nogil=True)\ndef add(a, b):\n    return a + b\n"
    )
    tiny = _tiny(source)
    assert numba_load.is_cold(tiny.add) is True  # no index file yet
    assert tiny.add(2, 3) == 5  # compiled: numba writes the index and the machine code
    where = Path(numba_load.cache_path(tiny.add) or "")
    assert sorted(p.suffix for p in where.glob("tiny_kernels.add-*")) == [".nbc", ".nbi"]
    assert numba_load.is_cold(_tiny(source).add) is False  # a new process would load it
    source.write_text(source.read_text() + "# edited\n")  # another source: the index is stale
    assert numba_load.is_cold(_tiny(source).add) is True

    def plain(x: int) -> int:
        return x

    assert numba_load.is_cold(plain) is None and numba_load.cache_path(plain) is None


DEMO_COMPILE = """
import importlib.util
import json
import numpy as np
from mismatchctl.sample_runs import DEMO_KERNELS, demo_compile
from mismatchctl.stats import kernels
cold = demo_compile()
kernels.run_starts(np.zeros(3, np.int64), np.zeros(3, np.int32))
print(json.dumps({"cold": cold.__dict__, "then": demo_compile().kernels,
                  "listed": sum(len(v) for v in DEMO_KERNELS.values())}))
"""


def test_the_demos_kernels_with_an_empty_cache(tmp_path: Path) -> None:
    """Every kernel the demo names is a cached numba kernel: all cold in an empty
    NUMBA_CACHE_DIR, cached under it; one compiled, one fewer to compile."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NUMBA_CACHE_DIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", DEMO_COMPILE], capture_output=True, text=True, env=env, timeout=600
    )
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["cold"]["kernels"] == got["listed"] and got["then"] == got["listed"] - 1
    assert Path(got["cold"]["cached_in"]) == tmp_path  # NUMBA_CACHE_DIR/<dir>_<hash> for each
    assert got["cold"]["seconds"] > 0
