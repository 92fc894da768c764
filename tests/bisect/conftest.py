from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if importlib.util.find_spec("transformers") is None:  # found, not imported: a model's classes
    # take seconds to import, and only the tests that run a model import them (tests/bisect/data.py)
    pytest.skip("could not import 'transformers'", allow_module_level=True)

from mismatchctl.bisect import settings as G  # noqa: E402
from tests.bisect import data  # noqa: E402

ENGINE = next(s for s in G.grid() if s.name == "bf16+incremental")


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    """The tiny model's ops are too small to share among threads (and the tests run beside
    others): one thread is many times faster here."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return data.tiny_model(tmp_path_factory.mktemp("ckpt") / "tiny")


@pytest.fixture(scope="session")
def runs(ckpt: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Runs of one store: `temp` (the engine sampled at temperature 0.8), `engine` (bf16 with a
    KV cache, one token at a time), `noise` (a path outside the grid: noise on later tokens),
    `split` (the engine's path, and from KV position 16 on noise besides: a hot cell; five
    steps of the same sequences, enough for explain to find the cell), `bf16` (a bfloat16
    trainer, the engine's bf16 path: a start of bf16),
    `noprompt` (no prompt ids in the dump)."""
    root = tmp_path_factory.mktemp("runs")
    store = root / "store"
    torch.set_num_threads(1)
    model = data.load(ckpt)
    engine = data.engine_sides(ckpt, ENGINE)

    def trainer(ids: np.ndarray, prompt: int) -> np.ndarray:
        return data.full_logprobs(model, ids)

    def hot(ids: np.ndarray, prompt: int) -> np.ndarray:
        return data.full_logprobs(model, ids, temperature=0.8)

    def bf16_engine(ids: np.ndarray, prompt: int) -> np.ndarray:
        out = trainer(ids, prompt)
        out[prompt:] = engine[ids.tobytes()]
        return out

    def split(ids: np.ndarray, prompt: int) -> np.ndarray:
        out = bf16_engine(ids, prompt)
        late = np.arange(len(ids)) >= 16
        out[late] += np.random.default_rng(len(ids)).normal(0, 0.05, late.sum())
        return np.minimum(out, 0.0)

    def noisy(ids: np.ndarray, prompt: int) -> np.ndarray:
        out = trainer(ids, prompt)
        later = np.arange(len(ids)) > 20
        out[later] += np.random.default_rng(len(ids)).normal(0, 0.05, later.sum())
        return np.minimum(out, 0.0)

    data.make_run(store, "temp", root, trainer, hot, tags={"temperature": 0.8})
    data.make_run(store, "engine", root, trainer, bf16_engine)
    data.make_run(store, "noise", root, trainer, noisy)
    data.make_run(store, "split", root, trainer, split, steps=5)
    bf16 = data.load(ckpt).to(torch.bfloat16)
    data.make_run(store, "bf16", root, lambda ids, _p: data.full_logprobs(bf16, ids),
                  bf16_engine)  # fmt: skip
    data.make_run(store, "noprompt", root, trainer, hot, prompts=False)
    return store
