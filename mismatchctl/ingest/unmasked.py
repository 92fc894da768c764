"""What a dump without a response mask can hide among the positions it lists, found from the
values and refused (values never define a mask; they can make ingest refuse a file).

- No mask at all: trailing *padding*. A right-padded file whose mask column is missing would
  store the padding as model tokens (0.0 on both sides, diluting every mean). A sequence ending
  in ``PAD_RUN_MIN`` or more positions at exact 0.0 on both sides, or (with token ids) holding
  its last token id with a 0.0 logprob on a side, is padded: refused unless ``--allow-padding``
  keeps those positions as model tokens (then counted and reported).
- A mask that does not mark tool responses (the response part of ``attention_mask``): *tool
  responses*. verl writes 0.0 as the rollout logprob of tokens the engine did not generate;
  runs of one-sided exact 0.0 among the kept positions (``stats.sentinels.fill_run_tokens``)
  are tool responses counted as model tokens: refused, with the hint to dump ``response_mask``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mismatchctl.errors import InputError
from mismatchctl.ingest.batch import RaggedBatch, sequence_index
from mismatchctl.stats.sentinels import PAD_RUN_MIN, fill_run_tokens, trailing_runs

ALLOW_FLAG = "--allow-padding"


@dataclass
class Padding:
    sequences: int  # sequences that end in padding
    positions: int  # positions in those trailing runs


def padding_runs(batch: RaggedBatch) -> np.ndarray:
    """Per sequence: the length of its trailing run that looks like padding."""
    starts = batch.offsets[:-1]
    both_zero = (batch.rollout == 0.0) & (batch.trainer == 0.0)
    runs = trailing_runs(both_zero, starts)
    if batch.token_ids is not None and len(batch.token_ids) == len(batch.rollout):
        lengths = batch.lengths()
        last = np.repeat(batch.token_ids[np.maximum(batch.offsets[1:] - 1, 0)], lengths)
        one_zero = (batch.rollout == 0.0) | (batch.trainer == 0.0)
        runs = np.maximum(runs, trailing_runs((batch.token_ids == last) & one_zero, starts))
    return runs


def check_padding(batch: RaggedBatch, source: str, allow: bool) -> Padding:
    """Trailing padding in a batch without a mask: an error naming the longest run, or (with
    ``allow``) what is kept as model tokens."""
    runs = padding_runs(batch)
    padded = runs >= PAD_RUN_MIN
    found = Padding(int(padded.sum()), int(runs[padded].sum()))
    if found.sequences and not allow:
        i = int(np.argmax(runs))
        ids = " (or holding the sequence's last token id, with 0.0 on a side)"
        raise InputError(
            f"{source}: no mask, and {found.sequences} of the {batch.n} samples of this batch "
            f"end in padding: {PAD_RUN_MIN} or more positions at exact 0.0 on both sides"
            f"{ids if batch.token_ids is not None else ''}; the longest, {int(runs[i])} "
            f"positions, ends sample `{batch.sample_ids[i]}` ({batch.location(i)}). Stored as "
            "model tokens, padding dilutes every metric",
            "name the response mask with --map mask=<column> (1 = model token), or pass "
            f"{ALLOW_FLAG} to keep these positions as model tokens (they are counted and "
            "reported).",
        )
    return found


def check_tool_fills(batch: RaggedBatch, source: str, column: str) -> None:
    """Runs of one-sided exact 0.0 among the positions a mask that does not mark tool
    responses (``column``) keeps: refused."""
    assert batch.mask is not None
    kept = np.flatnonzero(batch.mask)
    owner = sequence_index(batch.offsets)[kept]
    fills = fill_run_tokens(batch.rollout[kept], batch.trainer[kept], owner)
    if not fills.any():
        return
    first = int(kept[np.flatnonzero(fills)[0]])
    i = int(owner[np.flatnonzero(fills)[0]])
    raise InputError(
        f"{source}: the mask is the response part of `{column}`, which covers tool responses: "
        f"{int(fills.sum())} of the positions it keeps are in runs of one-sided exact 0.0 "
        f"logprobs (the first at position {first - int(batch.offsets[i])} of sample "
        f"`{batch.sample_ids[i]}` ({batch.location(i)})), the mark of tool-response tokens "
        "that the engine never scored",
        "dump verl's `response_mask` (1 on LLM-generated tokens only) with the batch and ingest "
        "that, or name such a mask with --map mask=<column>.",
    )
