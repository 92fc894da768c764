"""``DumpWriter``: per-step Parquet dumps of both logprob sides, written atomically."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from mismatchctl.dump import arrays as ar
from mismatchctl.dump import layout as C
from mismatchctl.dump.metadata import checked_tags, file_metadata
from mismatchctl.dump.table import (
    call_table,
    other_columns,
    row_columns,
    step_table,
    token_columns,
)
from mismatchctl.errors import UsageError

RANK_ENV = "RANK"  # set by torchrun, accelerate and DeepSpeed in every training process


class DumpWriter:
    """Writes what ``add`` is given, one Parquet file per step, in the sequence layout that
    ``mismatchctl ingest`` reads.

    Rows given to ``add`` for one step are buffered; the step's file is written when ``add`` is
    called with another step, on ``flush()``, and on ``close()`` (also when a ``with`` block ends
    with an exception: the rows given are real data). A file is written to ``.<name>.tmp`` in the
    same directory, synced to disk, then renamed: a reader never sees a partial file.

    File names: ``step_<step:08d>[.rank_<rank>][.part_<k>].parquet``. ``rank`` defaults to the
    ``RANK`` environment variable when it is set (one file per process and step, so data-parallel
    ranks sharing a directory never collide). A step written again (after a ``flush()``, or by an
    earlier run in the same directory) gets the next free ``part_<k>``: nothing is overwritten.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        tags: Mapping[str, str | int | float] | None = None,
        rank: int | None = None,
        compression: str = "zstd",
    ) -> None:
        self.directory = Path(directory)
        self.tags = checked_tags(tags)
        self.rank = rank_of(rank)
        self.compression = compression
        self.written: list[Path] = []
        self._step: int | None = None
        self._tables: list[pa.Table] = []
        self._closed = False
        self.directory.mkdir(parents=True, exist_ok=True)

    def add(
        self,
        step: int,
        rollout_logprobs: Any,
        trainer_logprobs: Any,
        mask: Any,
        *,
        token_ids: Any = None,
        sample_ids: Any = None,
        prompt_lengths: Any = None,
        prompts: Any = None,
        lengths: Any = None,
        rewards: Any = None,
        weight_version: Any = None,
        entropy: Any = None,
        gpu: Any = None,
        attrs: Mapping[str, Any] | None = None,
    ) -> int:
        """Buffer one batch of responses of ``step``; returns the number of rows added.

        Per-token inputs (``rollout_logprobs``, ``trainer_logprobs``, ``mask``, ``token_ids``,
        ``entropy``): padded 2-D arrays or tensors of one shape, or lists of 1-D rows of equal
        lengths per row. ``mask``: 1 on model-generated tokens, 0 on prompt, tool-response and
        padding positions. Padded rows are cut after their last model token, or at ``lengths``.
        Per-response inputs: ``sample_ids``, ``rewards``, ``prompt_lengths`` (tokens before the
        row's first position), ``prompts`` (token ids, ragged), ``weight_version`` and ``gpu``
        (one value or one per row), ``attrs`` (extra columns: name -> one value or one per row).
        """
        self._check_open()
        step = checked_step(step)
        layout, mask_values = ar.layout_of(mask, lengths)
        if layout.rows == 0:
            return 0
        tokens = token_columns(
            layout,
            mask_values,
            {
                C.ROLLOUT: rollout_logprobs,
                C.TRAINER: trainer_logprobs,
                C.TOKENS: token_ids,
                C.ENTROPY: entropy,
            },
        )
        given = {
            C.SAMPLE_ID: sample_ids,
            C.REWARD: rewards,
            C.WEIGHT_VERSION: weight_version,
            C.GPU: gpu,
            C.PROMPT_LENGTH: prompt_lengths,
            C.PROMPTS: prompts,
        }
        seqs = row_columns(layout.rows, given, attrs)
        self._buffer(step, call_table(step, layout, {**tokens, **seqs}))
        return layout.rows

    def _buffer(self, step: int, table: pa.Table) -> None:
        if self._step is not None and step != self._step:
            self.flush()
        if self._tables and self._tables[0].column_names != table.column_names:
            raise other_columns(step, self._tables[0].column_names, table.column_names)
        self._step = step
        self._tables.append(table)

    def flush(self) -> Path | None:
        """Write the buffered step now (None when nothing is buffered). If the write fails, the
        rows stay buffered and the error is raised."""
        if not self._tables:
            return None
        assert self._step is not None
        table = step_table(self._step, self._tables, file_metadata(self._step, self.tags))
        path = self._write(table)
        self.written.append(path)
        self._tables, self._step = [], None
        return path

    def _write(self, table: pa.Table) -> Path:
        assert self._step is not None
        final = self._free_name(self._step)
        tmp = final.with_name(f".{final.name}.tmp")
        try:
            pq.write_table(
                table,
                tmp,
                compression=self.compression,
                use_dictionary=[f.name for f in table.schema if pa.types.is_string(f.type)],
            )
            _fsync(tmp)
            os.replace(tmp, final)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
        _fsync_dir(self.directory)
        return final

    def _free_name(self, step: int) -> Path:
        base = f"step_{step:08d}" + ("" if self.rank is None else f".rank_{self.rank}")
        path = self.directory / f"{base}.parquet"
        part = 0
        while path.exists():
            part += 1
            path = self.directory / f"{base}.part_{part}.parquet"
        return path

    def close(self) -> None:
        """Write what is buffered; further ``add`` calls are an error. Closing twice is fine."""
        if self._closed:
            return
        self.flush()
        self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise UsageError(
                f"add() on a closed DumpWriter ({self.directory})",
                "make a new DumpWriter, or add everything before close().",
            )

    def __enter__(self) -> DumpWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        rank = "" if self.rank is None else f", rank={self.rank}"
        return f"DumpWriter({str(self.directory)!r}{rank}, files written: {len(self.written)})"


def rank_of(rank: int | None) -> int | None:
    if rank is None:
        env = os.environ.get(RANK_ENV, "").strip()
        return int(env) if env.isdigit() else None
    return _non_negative_int(
        rank,
        "rank",
        "pass the data-parallel rank of this process, e.g. torch.distributed.get_rank().",
    )


def checked_step(step: Any) -> int:
    if isinstance(step, np.generic) or (ar.is_tensor(step) and step.numel() == 1):
        step = step.item()
    return _non_negative_int(
        step,
        "step",
        "pass the training step, e.g. verl's self.global_steps or TRL's state.global_step.",
    )


def _non_negative_int(value: Any, name: str, hint: str) -> int:
    """``value`` when it is a non-negative ``int`` (a bool is not one), else a UsageError."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise UsageError(f"{name} {value!r} (expected a non-negative integer)", hint)
    return value


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(directory: Path) -> None:
    """Make the rename durable (where the platform can sync a directory)."""
    with contextlib.suppress(OSError):
        _fsync(directory)
