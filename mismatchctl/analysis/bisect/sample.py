"""A seeded sample of a run's sequences, each rebuilt whole from the store: its token ids from
the token rows (model tokens) and the masked rows (prompt and tool responses).

The sample is stratified by the hot cells (``cells.py``): a stratum per cell (the sequences
with a model token in it, and in no earlier cell's), and the control stratum (the rest: the
sequences with no token in any hot cell). CONTROL_SHARE of the sample goes to the control
stratum, the rest in equal parts to the cells; a stratum with fewer sequences than its part
gives the others what it cannot use. Each sequence weighs its stratum's size over the
sequences drawn from it (the numbers estimate the run's, not the sample's). Without hot cells:
one stratum, a uniform sample."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from mismatchctl import schema as S
from mismatchctl.analysis.selectors import StepRange
from mismatchctl.analysis.show.show import read_masked, read_tokens
from mismatchctl.errors import InputError, StoreError
from mismatchctl.store import Store
from mismatchctl.store.parts import SEQUENCES

NO_PROMPT_HINT = (
    "bisect re-scores prompt + response: the dump must hold the token ids of the responses and "
    "of the prompts (DumpWriter's `prompts`, a prompt-ids list column, or the prompt inside the "
    "arrays, masked), ingested with the masked side table (not --no-keep-masked)."
)


@dataclass
class Sampled:
    """Token ids of the whole sequences, the positions of their model tokens, and their two
    sides' logprobs and turns (flat over the sample, sequence by sequence)."""

    steps: list[int] = field(default_factory=list)
    seqs: list[int] = field(default_factory=list)
    sample_ids: list[str] = field(default_factory=list)
    ids: list[np.ndarray] = field(default_factory=list)
    prompts: list[int] = field(default_factory=list)
    targets: list[np.ndarray] = field(default_factory=list)
    rollout: list[np.ndarray] = field(default_factory=list)
    trainer: list[np.ndarray] = field(default_factory=list)
    turns: list[np.ndarray] = field(default_factory=list)
    positions: list[np.ndarray] = field(default_factory=list)  # the model tokens' positions
    strata: list[int] = field(default_factory=list)  # each sequence's stratum
    without_prompt: int = 0  # sampled sequences left out: no prompt ids in the store
    candidates: int = 0  # sequences of the run (in the steps) with a model token
    sizes: list[int] = field(default_factory=list)  # sequences of each stratum in the run
    note: str | None = None  # why the sample is uniform (no hot cell)

    def weights(self) -> np.ndarray:
        """Each sequence's weight: its stratum's size over the sequences kept of it."""
        strata = np.asarray(self.strata, dtype=np.int64)
        kept = np.bincount(strata, minlength=len(self.sizes))
        return np.asarray(self.sizes, dtype=np.float64)[strata] / kept[strata]

    def drawn(self) -> list[int]:
        """Sequences kept of each stratum."""
        return np.bincount(np.asarray(self.strata, dtype=np.int64),
                           minlength=len(self.sizes)).tolist()  # fmt: skip


def sequence_rows(store: Store, run: str, steps: StepRange | None) -> pa.Table:
    """(step, seq, sample_id, model tokens, prompt length) of the run's sequences with a model token, in the steps."""
    cols = [S.STEP, S.SEQ, S.SAMPLE_ID, S.MODEL_TOKENS, S.PROMPT_LENGTH]
    tables = [_read(store.part_path(p), cols) for p in store.parts(run, SEQUENCES)]
    if not tables:
        raise StoreError(f"run `{run}` has no sequences", "ingest the run's dumps first.")
    table = pa.concat_tables(tables)
    step = table.column(S.STEP).to_numpy()
    keep = table.column(S.MODEL_TOKENS).to_numpy() > 0
    if steps is not None:
        keep &= (step >= (steps.lo if steps.lo is not None else step.min())) & (
            step <= (steps.hi if steps.hi is not None else step.max())
        )
    return table.filter(pa.array(keep))


def _read(path: object, cols: list[str]) -> pa.Table:
    """The columns of a sequence part; a part written before prompt lengths has them null."""
    pf = pq.ParquetFile(str(path))
    have = [c for c in cols if c in pf.schema_arrow.names]
    table = pf.read(columns=have)
    if S.PROMPT_LENGTH not in have:
        table = table.append_column(S.PROMPT_LENGTH, pa.nulls(table.num_rows, pa.int64()))
    return table


CONTROL_SHARE = 0.25  # of the sample, for the control stratum when there are hot cells


def draw(
    store: Store,
    run: str,
    size: int,
    steps: StepRange | None,
    seed: int,
    cells: dict[int, int] | None = None,
    n_cells: int = 0,
) -> Sampled:
    """``size`` sequences drawn (seeded) from the run's, stratified by ``cells`` (sequence ->
    a bit per hot cell it has a token in; ``n_cells`` of them), rebuilt; those without prompt
    ids are left out and counted, and none with prompt ids is an error."""
    rows = sequence_rows(store, run, steps)
    out = Sampled(candidates=rows.num_rows)
    if not rows.num_rows:
        raise StoreError(f"run `{run}` has no sequence with a model token in these steps",
                         "widen --steps, or check the run with `mismatchctl runs`.")  # fmt: skip
    names = (S.STEP, S.SEQ, S.SAMPLE_ID, S.PROMPT_LENGTH)
    step, seq, sid, prompt = (rows.column(c).to_pylist() for c in names)
    stratum = strata_of(seq, cells or {}, n_cells)
    out.sizes = np.bincount(stratum, minlength=n_cells + 1).tolist()
    pick = _pick(stratum, out.sizes, size, seed)
    for i in pick.tolist():
        if not _add(out, store, run, seq[i], prompt[i]):
            out.without_prompt += 1
            continue
        out.steps.append(step[i])
        out.seqs.append(seq[i])
        out.sample_ids.append(sid[i])
        out.strata.append(int(stratum[i]))
    if not out.ids:
        raise InputError(
            f"run `{run}`: none of the {len(pick):,} sampled sequences has the token ids of its "
            "prompt and responses in the store",
            NO_PROMPT_HINT,
        )
    return out


def strata_of(seqs: list[int], cells: dict[int, int], n_cells: int) -> np.ndarray:
    """Each sequence's stratum: its first hot cell, or ``n_cells`` (the control) for none."""
    out = np.full(len(seqs), n_cells, dtype=np.int64)
    for i, s in enumerate(seqs):
        bits = cells.get(s, 0)
        if bits:
            out[i] = (bits & -bits).bit_length() - 1  # the lowest bit set
    return out


def _pick(stratum: np.ndarray, sizes: list[int], size: int, seed: int) -> np.ndarray:
    """The rows drawn: each stratum's part of ``size`` (``allot``), uniformly in it (seeded).
    One stratum: the uniform sample ``bisect`` drew before it stratified (the same rows)."""
    rng = np.random.default_rng(seed)
    if len(sizes) == 1:
        return np.sort(rng.choice(len(stratum), min(size, len(stratum)), replace=False))
    parts = allot(sizes, size)
    picked = [np.flatnonzero(stratum == k)[rng.choice(n, parts[k], replace=False)]
              for k, n in enumerate(sizes) if parts[k]]  # fmt: skip
    return np.sort(np.concatenate(picked)) if picked else np.zeros(0, dtype=np.int64)


def allot(sizes: list[int], size: int) -> list[int]:
    """How many of ``size`` each stratum gets (the last: the control): CONTROL_SHARE to the
    control, equal parts to the cells, at most a stratum's size, the rest to those with room."""
    cells = len(sizes) - 1
    control = max(1, round(size * CONTROL_SHARE)) if sizes[-1] else 0
    want = [(size - control) // cells + (k < (size - control) % cells) for k in range(cells)]
    parts = [min(w, n) for w, n in zip([*want, control], sizes, strict=True)]
    left = min(size, sum(sizes)) - sum(parts)
    while left > 0:
        room = [k for k, n in enumerate(sizes) if parts[k] < n]
        for k in room[:left]:
            parts[k] += 1
        left = min(size, sum(sizes)) - sum(parts)
    return parts


def _add(out: Sampled, store: Store, run: str, seq: int, prompt_length: int | None) -> bool:
    """The sequence rebuilt and added; False when the store cannot give its whole prompt (with
    a known prompt length, the ids from ``-prompt_length`` on)."""
    tokens, masked = read_tokens(store, run, seq), read_masked(store, run, seq)
    model_pos = np.asarray(tokens.column(S.POSITION).to_pylist(), dtype=np.int64)
    model_ids = tokens.column(S.TOKEN_ID).to_pylist()
    if any(i is None for i in model_ids):
        return False
    pos = np.concatenate([model_pos, masked.column(S.POSITION).to_numpy().astype(np.int64)])
    ids = np.concatenate([np.asarray(model_ids, dtype=np.int64),
                          masked.column(S.TOKEN_ID).to_numpy().astype(np.int64)])  # fmt: skip
    order = np.argsort(pos, kind="stable")
    pos, ids = pos[order], ids[order]
    # whole: positions without a gap, and a prompt before the first model token
    if pos[0] >= model_pos[0] or np.any(np.diff(pos) != 1):
        return False
    if prompt_length and pos[0] > -prompt_length:  # the prompt outside the arrays is missing
        return False
    out.ids.append(ids)
    out.targets.append(model_pos - pos[0])
    out.positions.append(model_pos)
    out.prompts.append(int(model_pos[0] - pos[0]))
    out.rollout.append(tokens.column(S.ROLLOUT).to_numpy())
    out.trainer.append(tokens.column(S.TRAINER).to_numpy())
    out.turns.append(tokens.column(S.TURN).to_numpy())
    return True
