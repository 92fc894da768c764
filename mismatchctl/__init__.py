"""mismatchctl: forensics for the training-inference logprob mismatch of LLM RL.

Python API::

    import mismatchctl
    store = mismatchctl.open_store()          # or open_store("path/to/store")
    store.runs()                              # [RunInfo(name=..., tags=..., steps=...), ...]
    store.scan("v1-a100").collect()           # canonical token rows as a Polars frame
    mismatchctl.ingest(["dumps/"], run="v1-a100", tags={"gpu": "A100"})
    rep = mismatchctl.report(["v1-a100"], by_gpu=True)   # rep.whole().metrics["vllm_kl"]
    mismatchctl.sections(rep)                 # what the terminal and the HTML page show
    cmp = mismatchctl.compare("v0-ref", "gpu=A100")      # cmp.headline, cmp.bins, cmp.gap ...
    dia = mismatchctl.diagnose("v1-a100")                # checks with verdicts, evidence, next steps
    wif = mismatchctl.whatif("v1-a100", methods=["seq-mis:2"])
    with mismatchctl.DumpWriter("dumps/") as w:       # in the trainer: one Parquet file per step
        w.add(step, rollout_logprobs, trainer_logprobs, response_mask)
    mon = mismatchctl.Monitor("r7", tags={"gpu": "H100"})  # or: per-step metrics, no dump
    mon.update(step, rollout_logprobs, trainer_logprobs, response_mask)  # on the tensors' device
    wandb.log(mon.step_summary(prefix="mismatch/"))
    alerts = mon.flush()                                  # the step into the store
"""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING, Any

from mismatchctl import lazy
from mismatchctl.errors import (
    EngineError,
    InputError,
    MismatchError,
    MissingDependencyError,
    StoreError,
    UsageError,
)

if TYPE_CHECKING:
    from mismatchctl.api import (
        compare,
        diagnose,
        ingest,
        remove_run,
        report,
        run_info,
        runs,
        sections,
        whatif,
    )
    from mismatchctl.dump import DumpWriter
    from mismatchctl.monitor import Monitor
    from mismatchctl.store import RunInfo, Store, open_store

# Loaded on first use (PEP 562): importing the package, the command line's `--help` or
# `mismatchctl.dump` in a trainer does not load the engines, numpy's kernels or pyarrow.
_LAZY = {
    "compare": "mismatchctl.api",
    "diagnose": "mismatchctl.api",
    "ingest": "mismatchctl.api",
    "remove_run": "mismatchctl.api",
    "report": "mismatchctl.api",
    "run_info": "mismatchctl.api",
    "runs": "mismatchctl.api",
    "sections": "mismatchctl.api",
    "whatif": "mismatchctl.api",
    "DumpWriter": "mismatchctl.dump",
    "Monitor": "mismatchctl.monitor",
    "RunInfo": "mismatchctl.store",
    "Store": "mismatchctl.store",
    "open_store": "mismatchctl.store",
}


def __getattr__(name: str) -> Any:
    if name == "__version__":  # read from the installed metadata on first use (version.py)
        from mismatchctl.version import __version__

        globals()[name] = __version__
        return __version__
    return lazy.load(__name__, globals(), _LAZY, name)


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY, "__version__"})


class _Package(types.ModuleType):
    """The package, whose verb ``ingest`` shares its name with the subpackage of the readers:
    importing ``mismatchctl.ingest`` (which binds the subpackage on its parent) leaves
    ``mismatchctl.ingest`` the verb, as when the package imported the api eagerly."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _LAZY and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


__all__ = [
    "DumpWriter",
    "EngineError",
    "InputError",
    "MismatchError",
    "MissingDependencyError",
    "Monitor",
    "RunInfo",
    "Store",
    "StoreError",
    "UsageError",
    "__version__",
    "compare",
    "diagnose",
    "ingest",
    "open_store",
    "remove_run",
    "report",
    "run_info",
    "runs",
    "sections",
    "whatif",
]
