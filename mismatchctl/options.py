"""The values of options the library and the command line share: the names an option accepts
(dump formats, split keys) and the defaults the command line shows in its help.

They live here, in a module that imports nothing, so that the command line's ``--help`` (and
importing ``mismatchctl.api``) loads none of the layers that compute; the modules that use them
(``ingest.source``, ``engines.plan``, ``stats.tails``, ``stats.bootstrap``, ``analysis.watch``,
``store.location``) import them from here. ``IngestOptions`` is the one object of the options
that say how dump files are read, which ``ingest`` and ``watch`` (the commands and the api calls)
share.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

# dump formats (``--format``): one reader each in ``ingest/``
FORMAT_SEQUENCE = "parquet-sequence"
FORMAT_TOKEN = "parquet-token"
FORMAT_SLIME = "slime-pt"
FORMAT_NEMO = "nemo-jsonl"
FORMAT_VERL = "verl-dataproto"
FORMAT_PRIME = "prime-jsonl"
FORMATS = (FORMAT_SEQUENCE, FORMAT_TOKEN, FORMAT_SLIME, FORMAT_NEMO, FORMAT_VERL, FORMAT_PRIME)

# the split keys (``--by``, ``--where``), as the help and the errors name them (engines.plan)
KEYS_HELP = (
    "run, gpu, step, turn_kind, turn, bin, trainer_prob, entropy, kv_position, turn_position, "
    "length, order, batch_size, tag:<name> or attr:<name>"
)

# `report --by layer`: the MoE routing per layer, a table of its own (not a key of the groups)
ROUTING_LAYER = "layer"

DEFAULT_CLAMP = 10.0  # vllm_kl_clamped: |r| clamped to 10 (slime/miles)
DEFAULT_TAU = 2.0  # extreme_frac_tau2 (AReaL)
DEFAULT_RESAMPLES = 1000  # bootstrap resamples of `compare`
DEFAULT_SEED = 0  # the bootstrap's seed
DEFAULT_SETTLE = 2.0  # `watch`: seconds a JSON lines file must stay unchanged
DEMO_STORE = Path("mismatchctl-demo") / "store"  # where `mismatchctl demo` puts its runs
# `--tokenizer bytes`: token ids are bytes (analysis.tokenizer, sample_runs)
TOKENIZER_BYTES = "bytes"

# `--routes-aligned`: row t of a side's routes holds the experts chosen while token t was the
# input (verl, vLLM, SGLang), or those that produced token t (ingest.routing_rows)
ROUTES_INPUT = "input"
ROUTES_OUTPUT = "output"


@dataclass(frozen=True)
class IngestOptions:
    """How ``ingest`` and ``watch`` read dump files (README.md, "mismatchctl ingest"): the
    options both commands declare once (``cli/reading.py``) and both api calls take.

    ``tags`` and ``mapping`` are ``KEY=VALUE`` strings or a mapping; ``attrs`` the columns kept
    as attributes whatever their values; the ``routes_*``, ``num_experts`` and ``keep_routes``
    how the MoE routes are paired, checked and kept."""

    tags: Iterable[str] | Mapping[str, str] = ()
    fmt: str | None = None
    mapping: Iterable[str] | Mapping[str, str] = ()
    skip_bad: bool = False
    trust_pickle: bool = False
    allow_padding: bool = False
    attrs: Iterable[str] = ()
    routes_aligned: str = ROUTES_INPUT
    routes_topk: int = 0  # of route encodings that do not carry it (SGLang's base64)
    num_experts: int | None = None  # every routed expert id must be below it, when given
    keep_routes: bool = False
    keep_masked: bool = True
