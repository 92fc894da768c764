"""``Monitor``: the mismatch of each training step from the tensors the trainer holds.

``update`` reduces a batch (a micro-batch: several calls may make one step) to the report's
mergeable state on the tensors' device, in float64, and keeps a device copy of its per-token
inputs; only the aggregates (about 50 KB) cross to the host. ``step_summary`` gives the step's
numbers under the framework's names. ``flush`` (or the first ``update`` of another step) ends
the step: its line and alerts are judged from the aggregates, as ``watch`` judges a new step
(``analysis.live``, against the store's earlier steps), then the step's rows are copied to the
host once and stored as ``ingest`` stores the file ``DumpWriter`` would write (one transaction:
the step is in the store whole, or not at all), so every command reads it.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from mismatchctl.analysis.live import Alert, StepHistory, StepLine, StepValue, localize, step_values
from mismatchctl.dump import layout as C
from mismatchctl.dump.arrays import Layout, layout_of, to_numpy
from mismatchctl.dump.metadata import checked_tags, file_metadata
from mismatchctl.dump.table import call_table, other_columns, row_columns, step_table, token_columns
from mismatchctl.dump.writer import checked_step, rank_of
from mismatchctl.errors import UsageError
from mismatchctl.ingest.in_memory import ingest_table
from mismatchctl.ingest.run_ingest import IngestResult, Options
from mismatchctl.monitor import inputs
from mismatchctl.monitor.device import BatchState, reduce_batch
from mismatchctl.monitor.framework_names import OWN, check_style, summary
from mismatchctl.monitor.host import reduce_numpy
from mismatchctl.stats import registry as M
from mismatchctl.stats.bins import parse_bins
from mismatchctl.stats.partial import Partial
from mismatchctl.stats.state import merge_states
from mismatchctl.stats.tails import DEFAULT_TAILS
from mismatchctl.store import Store, open_store
from mismatchctl.store.store import check_run_name

LOG = logging.getLogger("mismatchctl.monitor")


@dataclass
class StepState:
    """The aggregates of the step so far: the whole step's partial and one partial per
    probability bin (token metrics), each with its r-histogram."""

    step: int
    whole: Partial
    bins: list[Partial]
    updates: int = 0

    def merged(self, batch: BatchState) -> StepState:
        bins = [
            p.merge(Partial(state, hist))
            for p, state, hist in zip(self.bins, batch.bins, batch.hists, strict=True)
        ]
        assert self.whole.hist is not None
        whole_hist = self.whole.hist + batch.hists.sum(axis=0)  # the bins' histograms add up
        whole = Partial(merge_states(self.whole.state, batch.state), whole_hist)
        return StepState(self.step, whole, bins, self.updates + 1)


class Monitor:
    """The mismatch of each step of a training run, from its tensors (docs/monitor.md).

    ::

        mon = Monitor("r7", store="mismatch-store", tags={"gpu": "H100"}, style="verl")
        for step in ...:
            for micro in batches:                      # several updates may make one step
                mon.update(step, rollout_lp, trainer_lp, response_mask)
            wandb.log(mon.step_summary(prefix="mismatch/"), step=step)
            alerts = mon.flush()                       # the step into the store; its alerts
        mon.close()
    """

    def __init__(
        self,
        run: str,
        store: str | os.PathLike[str] | Store | None = None,
        *,
        tags: Mapping[str, str | int | float] | None = None,
        rank: int | None = None,
        style: str = OWN,
        explain: bool = True,
        bins: str = "log",
    ) -> None:
        self.run = check_run_name(run)
        self.store = store if isinstance(store, Store) else open_store(store)
        self.tags = checked_tags(tags)
        self.rank = rank_of(rank)
        self.style = check_style(style)
        self.explain = explain
        self.edges = _edges(bins)
        self.written: list[IngestResult] = []
        self.lines: list[StepLine] = []
        self._state: StepState | None = None
        self._calls: list[inputs.Padded] = []
        self._flushes: dict[int, int] = {}  # step -> flushes so far (the part number of a name)
        self._history: StepHistory | None = None
        self._closed = False

    def update(
        self,
        step: int,
        rollout_logprobs: Any,
        trainer_logprobs: Any,
        mask: Any,
        *,
        token_ids: Any = None,
        sample_ids: Any = None,
        entropy: Any = None,
        batch_ids: Any = None,
        gpu: Any = None,
        lengths: Any = None,
        prompts: Any = None,
        prompt_lengths: Any = None,
        rewards: Any = None,
        weight_version: Any = None,
        attrs: Mapping[str, Any] | None = None,
    ) -> list[Alert]:
        """Add one batch of ``step`` (torch tensors on any device, or numpy arrays: padded
        ``[rows, width]`` with ``mask`` 1 on model tokens, or lists of 1-D rows; the arguments
        of ``DumpWriter.add``, and ``batch_ids``: each row's batch, stored as the sequence
        rows' ``batch_id``, with each batch's size counted from the step: ``--by batch_size``). Returns the alerts of the step it ends (a call with another step ends
        the one before: ``flush``), else an empty list."""
        self._check_open()
        step = checked_step(step)
        alerts = self.flush() if self._state is not None and self._state.step != step else []
        given = {
            "rollout_logprobs": rollout_logprobs, "trainer_logprobs": trainer_logprobs,
            "mask": mask, "token_ids": token_ids, "entropy": entropy,
        }  # fmt: skip
        batch = inputs.padded(given, lengths)
        inputs.check_values(batch, step)
        extra = dict(attrs or {})
        if batch_ids is not None:
            extra["batch_id"] = batch_ids
        per_row = {
            C.SAMPLE_ID: sample_ids, C.REWARD: rewards, C.WEIGHT_VERSION: weight_version,
            C.GPU: gpu, C.PROMPT_LENGTH: prompt_lengths, C.PROMPTS: prompts,
        }  # fmt: skip
        batch.per_row = row_columns(batch.rows, per_row, extra)
        self._same_columns(step, batch)
        reduced = self._reduce(batch)
        same = self._state is not None and self._state.step == step
        state = self._state if same and self._state is not None else self._empty(step)
        self._state = state.merged(reduced)
        self._calls.append(batch)
        return alerts

    def _reduce(self, batch: inputs.Padded) -> BatchState:
        """On the tensors' device; on the CPU by the report's own numpy code, over views of the
        tensors (numpy's run reductions are several times faster than torch's on a CPU)."""
        lr, lt = batch.values["rollout_logprobs"], batch.values["trainer_logprobs"]
        keep = batch.keep
        if batch.tensor and keep.device.type != "cpu":
            return reduce_batch(lr, lt, keep, self.edges, DEFAULT_TAILS)
        if batch.tensor:  # views, except of floats below 32 bits (widened exactly)
            lr, lt, keep = to_numpy(lr), to_numpy(lt), keep.numpy()
        return reduce_numpy(lr, lt, keep, self.edges, DEFAULT_TAILS)

    def _empty(self, step: int) -> StepState:
        whole = Partial.empty(with_hist=True)
        bins = [Partial.empty(with_hist=True) for _ in range(len(self.edges) - 1)]
        return StepState(step, whole, bins)

    def _same_columns(self, step: int, batch: inputs.Padded) -> None:
        """Every call of a step gives the same optional inputs (one table per step)."""
        if not self._calls:
            return
        first = self._calls[0]
        before = [*first.values, *first.per_row]
        now = [*batch.values, *batch.per_row]
        if sorted(before) != sorted(now):
            raise other_columns(step, before, now)

    @property
    def step(self) -> int | None:
        """The step being added to, or the step last flushed."""
        return None if self._state is None else self._state.step

    def partial(self) -> Partial | None:
        """The step's mergeable state (the report's), with its r-histogram."""
        return None if self._state is None else self._state.whole

    def bin_partials(self) -> list[Partial]:
        """The step's state per probability bin (``bins=``; token metrics and quantiles)."""
        return [] if self._state is None else list(self._state.bins)

    def metrics(self) -> dict[str, Any]:
        """The step's numbers under mismatchctl's names (the report's ``--by step`` row)."""
        if self._state is None:
            return {}
        return self._state.whole.finalize(DEFAULT_TAILS)

    def step_summary(self, prefix: str = "", style: str | None = None) -> dict[str, float]:
        """The step's numbers for a metrics logger (W&B, TensorBoard): mismatchctl's names, and
        the framework's (``style``, default the monitor's) where it logs the same number;
        ``prefix`` before every name (e.g. ``"mismatch/"``). Undefined numbers are left out."""
        if self._state is None:
            return {}
        chosen = check_style(style or self.style)
        return summary(self._state.whole, self.metrics(), chosen, prefix)

    def flush(self) -> list[Alert]:
        """End the step: its line and alerts (from the device aggregates, against the store's
        earlier steps), then its rows into the store. Returns the alerts (also logged, as
        warnings of the ``mismatchctl.monitor`` logger); an empty list when nothing is pending.
        The step's aggregates stay, and later updates of the same step add to them."""
        if not self._calls or self._state is None:
            return []
        state = self._state
        name = self._name(state.step)
        line = self._history_now().line(state.step, _value(state.whole), [name])
        result = ingest_table(self.store, self._table(state.step), name, self._options())
        self._calls = []
        self._flushes[state.step] = self._flushes.get(state.step, 0) + 1
        self.written.append(result)
        if line.alerts and self.explain:
            where = localize(self.store, self._history_now(), state.step)
            for alert in line.alerts:
                alert.localized = where
        for alert in line.alerts:
            LOG.warning("run %s step %d: %s (%s)", self.run, state.step, alert.message, alert.check)
        self.lines.append(line)
        return line.alerts

    def _history_now(self) -> StepHistory:
        """The run's per-step vllm_kl: the store's steps, read once, then the monitor's own."""
        if self._history is None:
            known = self.run in self.store.run_names()
            values = step_values(self.store, self.run) if known else {}
            self._history = StepHistory(self.run, values)
        return self._history

    def _name(self, step: int) -> str:
        rank = "" if self.rank is None else f".rank_{self.rank}"
        part = self._flushes.get(step, 0)
        return f"monitor/step_{step:08d}{rank}" + (f".part_{part}" if part else "") + ".parquet"

    def _table(self, step: int) -> pa.Table:
        """The step's calls as the table ``DumpWriter`` writes: the one copy to the host."""
        tables = []
        for batch in self._calls:
            host = inputs.host_inputs(batch)
            layout, mask_values = layout_of(host["mask"], inputs.host_lengths(batch))
            if layout.rows == 0:
                continue
            tables.append(
                call_table(step, layout, {**_tokens(layout, mask_values, host), **batch.per_row})
            )
        return step_table(step, tables, file_metadata(step, self.tags))

    def _options(self) -> Options:
        return Options(run=self.run, tags={}, fmt=None, mapping={}, skip_bad=False)

    def close(self) -> None:
        """Flush what is pending; later updates are an error. Closing twice is fine."""
        if not self._closed:
            self.flush()
            self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise UsageError(
                f"update() on a closed Monitor (run `{self.run}`)",
                "make a new Monitor, or update everything before close().",
            )

    def __enter__(self) -> Monitor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Monitor(run={self.run!r}, store={str(self.store)!r}, steps written: {len(self.lines)})"


def _tokens(
    layout: Layout, mask_values: np.ndarray, host: dict[str, np.ndarray]
) -> dict[str, pa.Array]:
    given = {
        C.ROLLOUT: host["rollout_logprobs"], C.TRAINER: host["trainer_logprobs"],
        C.TOKENS: host.get("token_ids"), C.ENTROPY: host.get("entropy"),
    }  # fmt: skip
    return token_columns(layout, mask_values, given)


def _value(part: Partial) -> StepValue:
    kl = part.finalize(DEFAULT_TAILS).get(M.VLLM_KL)
    kl = None if kl is None or not math.isfinite(kl) else float(kl)  # as watch's step_values
    return StepValue(part.tokens, part.sequences, kl)


def _edges(bins: str) -> np.ndarray:
    try:
        return parse_bins(bins)
    except ValueError as exc:
        raise UsageError(
            str(exc), "pass bins as `log`, `linear:N` or edges such as 0,0.5,1."
        ) from None
