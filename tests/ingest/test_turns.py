"""Turn derivation from mask runs and the per-sequence position counts."""

from __future__ import annotations

import itertools

import numpy as np

from mismatchctl.ingest.batch import RaggedBatch, offsets_from_lengths
from mismatchctl.ingest.canonical import Context, canonicalize, derive_turns


def _turns(*masks: str) -> list[list[int]]:
    flat = np.array([c == "1" for m in masks for c in m], dtype=bool)
    offsets = offsets_from_lengths(np.array([len(m) for m in masks]))
    turns = derive_turns(flat, offsets)
    return [turns[a:b][flat[a:b]].tolist() for a, b in itertools.pairwise(offsets)]


def test_two_turns() -> None:
    assert _turns("1110011100") == [[0, 0, 0, 1, 1, 1]]


def test_leading_prompt_trailing_padding_and_empty() -> None:
    assert _turns("0011011000", "000", "1", "1010101") == [
        [0, 0, 1, 1],
        [],
        [0],
        [0, 1, 2, 3],
    ]


def test_sequences_do_not_leak_into_each_other() -> None:
    # a sequence ending in 1 followed by one starting with 1: the second starts at turn 0
    assert _turns("11", "11", "0110") == [[0, 0], [0, 0], [0, 0]]


def test_counts_prompt_tool_padding() -> None:
    masks = ["0011011000", "000", "1"]
    flat = np.array([c == "1" for m in masks for c in m])
    batch = RaggedBatch(
        steps=np.zeros(3, dtype=np.int64),
        sample_ids=["a", "b", "c"],
        offsets=offsets_from_lengths(np.array([len(m) for m in masks])),
        rollout=np.full(len(flat), -0.5),
        trainer=np.full(len(flat), -0.5),
        mask=flat,
    )
    tokens, seqs, tally = canonicalize(batch, Context("x", None, False, 10))
    assert seqs.column("model_tokens").to_pylist() == [4, 0, 1]
    assert seqs.column("prompt_tokens").to_pylist() == [2, 0, 0]
    assert seqs.column("tool_tokens").to_pylist() == [1, 0, 0]
    assert seqs.column("pad_tokens").to_pylist() == [3, 3, 0]
    assert seqs.column("turns").to_pylist() == [2, 0, 1]
    assert seqs.column("seq").to_pylist() == [10, 11, 12]
    assert tokens.column("seq").to_pylist() == [10] * 4 + [12]
    assert tally.empty_sequences == 1 and tally.model_tokens == 5
