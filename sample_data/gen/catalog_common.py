"""Constructors shared by the catalogue's modules: a fault run and the engines it changes."""

from __future__ import annotations

from typing import Any

from gen.calib_spec import TEMPERATURE, CalibRun
from gen.engine import EngineConfig
from gen.faults import NumericPath
from gen.model import AttentionKernel
from gen.sampling import Processors


def fault(cause: str | None, size: str | None, name: str, what: str, **knobs: Any) -> CalibRun:
    """A fault run; its baseline is h-b unless `baseline=` says otherwise."""
    return CalibRun(name, "fault", cause, what, size, knobs.pop("baseline", "h-b"), **knobs)


def proc(**kw: Any) -> EngineConfig:
    """An engine with logit processors (gen/sampling.py)."""
    return EngineConfig(temperature=TEMPERATURE, processors=Processors(**kw))


def path(**kw: Any) -> EngineConfig:
    """An engine whose numeric path departs (gen/faults.py)."""
    return EngineConfig(temperature=TEMPERATURE, path=NumericPath(**kw))


def kernel(**kw: Any) -> EngineConfig:
    """An engine with flash-decoding style split-KV decode attention (gen/model.py)."""
    return EngineConfig(temperature=TEMPERATURE, kernel=AttentionKernel(split_kv=True, **kw))


# split-KV decode (splits of 64) in small decode batches: the combine forgets the row sums (taken
# by rows with KV >= 192 in batches under 16), or merges with an off-by-one LSE (batches under 10)
SPLIT_ROWSUM = kernel(min_active_for_single_pass=16, min_kv_for_split=192, merge_drops_rowsum=True)
SPLIT_OFF_BY_ONE = kernel(min_active_for_single_pass=10, merge_bug=True)
FP8_KV = path(kv_cache="e4m3")

# a step's requests decoded in waves of 12 (three quarters of them) and of 4 (a quarter): two
# micro-batch sizes, each response's wave in its dump (the batch_shape check's calibration)
WAVES = (12, 4)
