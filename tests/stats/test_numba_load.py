"""Cached kernels load without numba's context refresh (stats/numba_load.py), give the same bits
as with it, leave numba's own functions (a cached ufunc) as they were, and a numba whose method
differs is left alone."""

from __future__ import annotations

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
from mismatchctl.stats import kernels, localize_math, numba_load, seqhash
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
