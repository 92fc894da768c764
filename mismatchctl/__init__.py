"""mismatchctl: forensics for the training-inference logprob mismatch of LLM RL.

Python API::

    import mismatchctl
    store = mismatchctl.open_store()          # or open_store("path/to/store")
    store.runs()                              # [RunInfo(name=..., tags=..., steps=...), ...]
    store.scan("v1-a100").collect()           # canonical token rows as a Polars frame
    mismatchctl.ingest(["dumps/"], run="v1-a100", tags={"gpu": "A100"})
    rep = mismatchctl.report(["v1-a100"], by_gpu=True)   # rep.whole().metrics["vllm_kl"]
    cmp = mismatchctl.compare("v0-ref", "gpu=A100")      # cmp.headline, cmp.bins, cmp.gap ...
    dia = mismatchctl.diagnose("v1-a100")                # checks with verdicts, evidence, next steps
    wif = mismatchctl.whatif("v1-a100", methods=["seq-mis:2"])
    with mismatchctl.DumpWriter("dumps/") as w:       # in the trainer: one Parquet file per step
        w.add(step, rollout_logprobs, trainer_logprobs, response_mask)
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:  # first: the modules below name the version in what they write
    __version__ = version("mismatchctl")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+unknown"

from mismatchctl.api import compare, diagnose, ingest, remove_run, report, run_info, runs, whatif
from mismatchctl.dump import DumpWriter
from mismatchctl.errors import (
    EngineError,
    InputError,
    MismatchError,
    MissingDependencyError,
    StoreError,
    UsageError,
)
from mismatchctl.store import RunInfo, Store, open_store

__all__ = [
    "DumpWriter",
    "EngineError",
    "InputError",
    "MismatchError",
    "MissingDependencyError",
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
    "whatif",
]
