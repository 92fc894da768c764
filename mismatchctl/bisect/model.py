"""The model ``bisect`` re-scores with: a local Hugging Face checkpoint directory (loaded with
transformers from disk only, never downloaded) or ``module:function``, a factory returning a torch
module that maps input ids ``[batch, length]`` to logits (or to an output with ``.logits``).

A factory's module may also offer the engine's path, for the incremental and KV-cache settings:
``prefill(ids, kv, valid) -> (logits, cache)`` with ``ids`` ``[batch, width]`` (each prompt
left-padded to the batch's longest), ``valid`` ``[batch, width]`` (True where a row holds a token,
not padding) and the logits of each row's last position ``[batch, vocab]``, and
``decode(tokens, cache, kv) -> (logits, cache)`` with ``tokens`` ``[batch]`` (one next token per
row). ``kv`` is None or a callable ``kv(layer, keys, values) -> (keys, values)``: what the cache
stores (and the step attends to) of the states just computed; bisect passes one that rounds them
to the setting's cache precision."""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mismatchctl.errors import MissingDependencyError, UsageError

FACTORY = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
FILE_FACTORY = re.compile(r"^(?P<file>.+\.py):(?P<func>[A-Za-z_]\w*)$")
SPEC_HINT = (
    "give a local checkpoint directory (config.json and the weights, e.g. from "
    "`save_pretrained`) or a factory `package.module:function` (or `path/to/file.py:function`) "
    "returning a torch module; "
    "a hub id is never downloaded: download it first (`huggingface-cli download ID --local-dir "
    "DIR`) and pass DIR."
)


@dataclass
class Loaded:
    """The model in float32 on its device; ``hf``: a transformers model (its KV cache, attention
    mask and modules are reachable), else a factory's module: full forwards, and incremental
    decoding when ``stepwise`` (it offers ``prefill`` and ``decode``)."""

    module: Any
    name: str
    hf: bool
    device: str
    stepwise: bool = False


def torch_module() -> Any:
    try:
        import torch
    except ImportError:
        raise MissingDependencyError(
            "bisect re-scores tokens with torch, which is not installed",
            "pip install 'mismatchctl[torch,bisect]'",
        ) from None
    return torch


# Under this many parameters a model's ops on CPU are too small to share among threads: on the
# sample model (0.9M) one thread re-scored 15-25x faster than torch's default (one per core) on
# 2 cores shared with other work, where threads that wait for each other are descheduled.
SMALL_MODEL = 50_000_000


@contextmanager
def cpu_threads(loaded: Loaded) -> Iterator[int]:
    """One torch thread while a small model re-scores on CPU, unless OMP_NUM_THREADS says how
    many (then torch's own setting is kept); yields the thread count in use."""
    torch = torch_module()
    before = torch.get_num_threads()
    small = sum(p.numel() for p in loaded.module.parameters()) < SMALL_MODEL
    if loaded.device != "cpu" or "OMP_NUM_THREADS" in os.environ or not small:
        yield before
        return
    torch.set_num_threads(1)
    try:
        yield 1
    finally:
        torch.set_num_threads(before)


def check_device(device: str) -> None:
    torch = torch_module()
    if device not in ("cpu", "cuda"):
        raise UsageError(f"--device {device}: expected cpu or cuda", "pass --device cpu or cuda.")
    if device == "cuda" and not torch.cuda.is_available():
        raise UsageError(
            "--device cuda: torch sees no CUDA device here",
            "run on a machine with a GPU and a CUDA build of torch, or pass --device cpu.",
        )


def load(spec: str, device: str = "cpu") -> Loaded:
    """The model ``spec`` names, in float32, in eval mode, on ``device``."""
    check_device(device)
    path = Path(spec).expanduser()
    if path.is_dir():
        module, hf = _checkpoint(path), True
    elif FACTORY.match(spec) or FILE_FACTORY.match(spec):
        module, hf = _factory(spec), False
    elif path.exists():
        raise UsageError(f"--model {spec}: a file, not a checkpoint directory", SPEC_HINT)
    else:
        raise UsageError(
            f"--model {spec}: no such directory, and not a factory `module:function`", SPEC_HINT
        )
    torch = torch_module()
    module = module.to(device=device, dtype=torch.float32).eval()
    stepwise = hf or all(callable(getattr(module, f, None)) for f in ("prefill", "decode"))
    return Loaded(module, spec, hf, device, stepwise)


def _checkpoint(path: Path) -> Any:
    if not (path / "config.json").is_file():
        raise UsageError(f"--model {path}: the directory has no config.json", SPEC_HINT)
    torch_module()
    try:
        import transformers
    except ImportError:
        raise MissingDependencyError(
            "a checkpoint directory is loaded with transformers, which is not installed",
            "pip install 'mismatchctl[torch,bisect]', or pass a factory module:function.",
        ) from None
    transformers.utils.logging.disable_progress_bar()  # our progress is on stderr already
    try:
        return transformers.AutoModelForCausalLM.from_pretrained(
            str(path), local_files_only=True, dtype="float32"
        )
    except (OSError, ValueError, KeyError) as exc:
        raise UsageError(
            f"--model {path}: transformers cannot load it as a causal LM ({exc})", SPEC_HINT
        ) from None


def _factory(spec: str) -> Any:
    name, _, func = spec.rpartition(":")
    try:
        made = getattr(_import(name), func)()
    except (ImportError, AttributeError, OSError) as exc:
        raise UsageError(f"--model {spec}: cannot import it ({exc})", SPEC_HINT) from None
    torch = torch_module()
    if not isinstance(made, torch.nn.Module):
        raise UsageError(
            f"--model {spec}: the factory returned {type(made).__name__}, expected a "
            "torch.nn.Module",
            "return a module called as model(input_ids) -> logits [batch, length, vocab].",
        )
    return made


def _import(name: str) -> Any:
    """A module by its dotted name, or a Python file by its path (``file.py``)."""
    if not name.endswith(".py"):
        return importlib.import_module(name)
    path = Path(name).expanduser().resolve()
    if not path.is_file():
        raise ImportError(f"no such file {name}")
    module_name = f"mismatchctl_factory_{path.stem}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{name} is not a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses and pickling look their module up there
    spec.loader.exec_module(module)
    return module
