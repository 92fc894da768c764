"""A part's slices folded into its passes' groups once, at the end of the part.

The engine reads a part a slice (about a quarter million tokens) at a time, and the compiled
kernel reduces each slice to turn runs and cells (a few hundred runs, a few thousand cells). The
groups of every pass were computed from each slice's runs and cells and merged slice after slice:
a dozen numpy calls a pass on a few hundred rows each, paid once a slice (13% of a 100M report's
worker time, docs/benchmarks.md "Round twelve"). Here a slice's runs and cells are kept, with each
run's group in every pass (its labels given an index of the part's), and the passes' partials are
computed once over the part's runs and cells: the same sums, over all the runs of the part in
their order instead of merged slice by slice (the last bits may move: #46's first decision).

Memory: the runs and cells of a part (tens of kilobytes); the tokens' r-histogram bins are
counted a slice at a time into each group's histogram (exact counts), not kept.
"""

from __future__ import annotations

import numpy as np

from mismatchctl.engines.keys import Label, PartKeys, decode, group_codes, key_labels
from mismatchctl.engines.plan import Binning, Pass
from mismatchctl.stats import Partial
from mismatchctl.stats.histogram import N_BINS
from mismatchctl.stats.kernel_choice import kernels_for
from mismatchctl.stats.turnruns import BinCells, TurnRuns, run_partials, token_partials

Groups = dict[tuple[Label, ...], Partial]
_NO_TOKENS = np.zeros(0, np.int32)  # the kept cells' per-token arrays: not kept


class PartFold:
    """The turn runs and cells of a part's slices, and each run's group in every pass; ``groups``
    gives every pass's groups of the part."""

    def __init__(self, passes: list[Pass], edges: np.ndarray, binning: Binning) -> None:
        self.passes = passes
        self.edges, self.binning = edges, binning
        self.ids: list[dict[tuple[Label, ...], int]] = [{} for _ in passes]  # labels -> index
        self.labels: list[list[tuple[Label, ...]]] = [[] for _ in passes]  # index -> labels
        self.run_ids: list[list[np.ndarray]] = [[] for _ in passes]
        self.cells: list[BinCells] = []
        # a token pass's r-histograms, added up a slice at a time (exact counts): row
        # ``index * n_tok + token code``
        self.hists: list[np.ndarray | None] = [None for _ in passes]

    def add(self, cells: BinCells, run_keys: PartKeys) -> None:
        """A slice's cells, its runs' keys (one row per run): each run's group in every pass;
        the tokens' r-histogram bins counted here (the cells are kept without them)."""
        self.cells.append(cells._replace(bucket=None, tok_cell=_NO_TOKENS))
        for i, p in enumerate(self.passes):
            along = p.keys[: -len(p.token)] if p.token else p.keys
            code, _, labels = group_codes(run_keys, along)
            present, at = np.unique(code, return_inverse=True)
            ids, index = self.ids[i], self.labels[i]
            for c in present.tolist():
                key = decode(c, labels)
                if key not in ids:
                    ids[key] = len(index)
                    index.append(key)
            part_id = np.array([ids[decode(c, labels)] for c in present.tolist()], np.int64)
            self.run_ids[i].append(part_id[at.reshape(-1)])
            if p.token and p.with_hist:
                self._count(i, cells, part_id[at.reshape(-1)], p.uses)

    def _count(self, i: int, cells: BinCells, run_id: np.ndarray, use: tuple[bool, ...]) -> None:
        """Pass ``i``'s r-histogram counts of the slice's tokens, added to the part's."""
        if cells.bucket is None:
            raise ValueError("these cells were made without histograms (with_hist=False)")
        tok, n_tok = cells.cell_codes(use)
        flat = run_id[cells.cell_run] * n_tok + tok
        present, at = np.unique(flat, return_inverse=True)
        counts = kernels_for(0).histogram_counts(
            cells.bucket, cells.tok_cell, at.reshape(-1).astype(np.int64), len(present)
        )
        rows = len(self.labels[i]) * n_tok
        hists = self.hists[i]
        if hists is None or len(hists) < rows:
            grown = np.zeros((rows, N_BINS), np.int64)
            if hists is not None:
                grown[: len(hists)] = hists
            hists = self.hists[i] = grown
        hists[present] += counts

    def groups(self) -> list[Groups]:
        """Every pass's groups of the part's tokens (empty groups left out)."""
        if not self.cells:
            return [{} for _ in self.passes]
        cells = _joined(self.cells)
        out = []
        for i, p in enumerate(self.passes):
            code, names = np.concatenate(self.run_ids[i]), self.labels[i]
            if p.token:
                partials = token_partials(cells, code, len(names), p.uses, False)
                tok_labels = [key_labels(k, self.edges, self.binning) for k in p.token]
                n_tok = len(partials) // max(1, len(names))
                hists = self.hists[i]
                if hists is not None:
                    hists.flags.writeable = False  # shared by the groups' partials, as expand's
                out.append({
                    names[j // n_tok] + decode(j % n_tok, tok_labels):
                        part if hists is None else Partial(part.state, hists[j])
                    for j, part in enumerate(partials) if part.tokens > 0
                })  # fmt: skip
            else:
                partials = run_partials(cells.runs, code, len(names))
                out.append({names[j]: part for j, part in enumerate(partials) if part.tokens > 0})
        return out


def _joined(parts: list[BinCells]) -> BinCells:
    """The cells of consecutive slices as one: runs, cells and tokens renumbered in order."""
    if len(parts) == 1:
        return parts[0]
    tokens = np.cumsum([0] + [int(c.runs.lengths.sum()) for c in parts[:-1]])
    runs = np.cumsum([0] + [len(c.runs.starts) for c in parts[:-1]])
    joined_runs = TurnRuns(
        np.concatenate([c.runs.starts + t for c, t in zip(parts, tokens, strict=True)]),
        np.concatenate([c.runs.lengths for c in parts]),
        np.concatenate([c.runs.seq for c in parts]),
        np.concatenate([c.runs.state for c in parts]),
        np.concatenate([c.runs.lr_sum for c in parts]),
        np.concatenate([c.runs.lt_sum for c in parts]),
    )
    return BinCells(
        joined_runs,
        np.concatenate([c.cell_run + r for c, r in zip(parts, runs, strict=True)]),
        np.concatenate([c.cell_code for c in parts]),
        np.concatenate([c.cell_state for c in parts]),
        np.concatenate([c.cell_lengths for c in parts]),
        None,
        _NO_TOKENS,
        parts[0].radix,
    )
