"""The paired comparison of `compare`: when the two sides hold the same responses (the same
token ids for the same step and sample id), each response is compared with itself.

Two runs that scored the same rollouts (one trainer against another, a fix re-scored on the
dumped responses) differ only in their logprobs; comparing them sequence by sequence removes
the variation between responses that the unpaired bootstrap has to carry.

**What pairs.** In the report's read of every part, each sequence of a side gets two 64-bit
content hashes of its model tokens' (position, token id) and a hash of its rollout logprobs' bits
(``stats/seqhash.py``, one compiled pass),
its token count and its K3 sum (``PairExtra``: the ``position`` and ``token_id`` columns beside
the report's). A sequence of A pairs with a sequence of B when both have the same step, sample id
and content hashes (and token count); among several such sequences of one side (verl's ``uid``
names a prompt group, and two responses of a group can be equal) the k-th of A, in run then
``seq`` order (dump order), pairs with the k-th of B. Responses are matched by content within
their (step, sample id), not by their place in the group, so a group dumped in another order
still pairs. Sequences without token ids never pair.

**What it says.** ``comparable``: how many sequences of A have a counterpart in B by step and
sample id (per (step, sample id), the fewer of the two sides' sequences with token ids);
``pairs``: how many of those are identical responses; ``identical_share = pairs / comparable``.
With at least ``MIN_PAIRS`` pairs: vllm_kl of both sides over the pairs, its difference B - A and
ratio B / A with 95% paired-bootstrap intervals (``stats.bootstrap.paired_draws``: pairs drawn
with replacement, ``--resamples`` times, seeded by ``--seed`` through ``paired_generator``), the
distribution of the per-sequence difference of the sequence's own vllm_kl (its K3 mean: the
pairs have the same tokens, so a K3 sum's difference is the mean's times the length) and the
sequences that differ most. Otherwise the reason it cannot pair.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pyarrow as pa

from mismatchctl import schema as S
from mismatchctl.analysis.json_form import JsonForm, Row
from mismatchctl.columns import first_seen_codes, numpy_of, valid_of
from mismatchctl.engines.keys import PartKeys
from mismatchctl.engines.plan import Selection
from mismatchctl.stats.bootstrap import paired_draws, paired_generator, percentile_interval
from mismatchctl.stats.per_token import k3 as token_k3
from mismatchctl.stats.state import Col
from mismatchctl.store.integrity import read_error
from mismatchctl.store.parts import read_columns

MIN_PAIRS = 10  # fewer identical responses: no paired numbers (an interval of a handful is noise)
TOP_DIFFERENCES = 10  # the pairs listed, largest |difference of their vllm_kl| first
FIELDS = ("seq", "step", "h1", "h2", "hr", "tokens", "k3", "complete")
_DTYPES = {"h1": np.uint64, "h2": np.uint64, "hr": np.uint64, "tokens": np.float64,
           "k3": np.float64, "complete": np.bool_}  # fmt: skip


@dataclass
class PairRows:
    """Per run of a side: chunks (one per slice read, in the order merged) of one entry per
    sequence of ``FIELDS``: seq, step, the content hashes ``h1``, ``h2`` of its (position, token
    id), ``hr`` of its rollout logprobs, tokens, K3 sum, and whether every token has an id
    (``complete``). Merging appends chunks (no copy); ``columns`` concatenates them once."""

    runs: dict[str, list[dict[str, np.ndarray]]] = field(default_factory=dict)

    def merge(self, other: PairRows) -> PairRows:
        out = {run: list(chunks) for run, chunks in self.runs.items()}
        for run, chunks in other.runs.items():
            out[run] = out.get(run, []) + chunks
        return PairRows(out)

    def columns(self, run: str) -> dict[str, np.ndarray] | None:
        """The run's entries, every chunk concatenated (None when it has none)."""
        chunks = self.runs.get(run)
        if not chunks:
            return None
        return {f: np.concatenate([c[f] for c in chunks]) for f in FIELDS}


class PairExtra:
    """The engine's ``PartExtra``: ``PairRows`` of every slice (a sequence never spans two)."""

    columns: tuple[str, ...] = (S.POSITION, S.TOKEN_ID)

    def compute(self, table: pa.Table, keys: PartKeys) -> PairRows:
        from mismatchctl.stats.kernel_choice import hashes_for

        seq = keys.column(S.SEQ)
        n = len(seq)
        if n == 0:
            return PairRows()
        starts = np.flatnonzero(np.r_[True, seq[1:] != seq[:-1]])
        ids = table.column(S.TOKEN_ID)
        missing = ~valid_of(ids)
        values = np.ascontiguousarray(numpy_of(ids, fill=0), dtype=np.int64)
        rollout = np.ascontiguousarray(keys.column(S.ROLLOUT), dtype=np.float64)
        hashes, complete = hashes_for(n).sequence_hashes(
            values.view(np.uint64), missing, keys.column(S.POSITION), rollout.view(np.uint64),
            starts,
        )  # fmt: skip
        tokens, k3 = _sums(keys, starts, n)
        cols = {
            "seq": seq[starts].astype(np.int64),
            "step": keys.column(S.STEP)[starts].astype(np.int64),
            "h1": hashes[:, 0],
            "h2": hashes[:, 1],
            "hr": hashes[:, 2],
            "tokens": tokens,
            "k3": k3,
            "complete": complete,
        }
        return PairRows({keys.run: [cols]})

    def merge(self, a: PairRows, b: PairRows) -> PairRows:
        return a.merge(b)


def _sums(keys: PartKeys, starts: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Tokens and K3 sum per sequence: from the slice's turn runs when the engine made them
    (their sums, in order), else from the tokens."""
    runs = keys.runs
    if runs is not None and len(runs.seq):
        first = np.flatnonzero(np.r_[True, runs.seq[1:] != runs.seq[:-1]])
        state = runs.state
        return (
            np.add.reduceat(state[:, Col.TOKENS], first),
            np.add.reduceat(state[:, Col.K3_SUM], first),
        )
    r = keys.column(S.TRAINER) - keys.column(S.ROLLOUT)
    return np.diff(np.r_[starts, n]).astype(np.float64), np.add.reduceat(token_k3(r), starts)


def readable(a: Selection, b: Selection) -> str | None:
    """Why the sides cannot pair, known from the catalog before reading (None: read them):
    a side none of whose sources has token ids, or no step in common."""
    has_ids = [any(S.ROLE_TOKENS in src.columns for src in _sources(sel)) for sel in (a, b)]
    if not any(has_ids):
        return "token ids not stored: neither side's dumps have a token-id column"
    for side, sel, ok in (("A", a, has_ids[0]), ("B", b, has_ids[1])):
        if not ok:
            return f"token ids not stored: side {side} (`{sel.label}`) has no token-id column"
    if not _steps(a) & _steps(b):
        return "the two sides share no step"
    return None


def _sources(sel: Selection) -> list[Any]:
    return [
        src
        for run in sel.runs
        for src in run.sources
        if all(src.tags.get(k) == v for k, v in sel.tags.items())
    ]


def _steps(sel: Selection) -> set[int]:
    steps = {s for src in _sources(sel) for s in src.steps}
    rng = sel.steps
    if rng is None:
        return steps
    return {s for s in steps if (rng.lo is None or s >= rng.lo) and (rng.hi is None or s <= rng.hi)}


@dataclass
class Side:
    """One side's sequences in run then seq order, with their sample ids."""

    sample_id: np.ndarray  # object (str)
    cols: dict[str, np.ndarray]

    @classmethod
    def of(cls, sel: Selection, rows: PairRows | None) -> Side:
        parts: list[dict[str, np.ndarray]] = []
        samples: list[np.ndarray] = []
        for run in sel.names:
            cols = rows.columns(run) if rows is not None else None
            if cols is None or not len(cols["seq"]):
                continue
            order = np.argsort(cols["seq"], kind="stable")
            cols = {f: v[order] for f, v in cols.items()}
            parts.append(cols)
            samples.append(_sample_ids(run, sel.sequence_paths.get(run, []), cols["seq"]))
        if not parts:
            empty = {f: np.zeros(0, _DTYPES.get(f, np.int64)) for f in FIELDS}
            return cls(np.zeros(0, object), empty)
        merged = {f: np.concatenate([p[f] for p in parts]) for f in FIELDS}
        return cls(np.concatenate(samples), merged)

    def __len__(self) -> int:
        return len(self.sample_id)


def _sample_ids(run: str, paths: list[str], seqs: np.ndarray) -> np.ndarray:
    """The sample id of each sequence (``seqs`` ascending), from the run's sequence rows."""
    tables = []
    for path in paths:
        try:
            tables.append(read_columns(path, [S.SEQ, S.SAMPLE_ID]))
        except (OSError, pa.ArrowException) as exc:
            raise read_error(run, path, exc) from None
    table = pa.concat_tables(tables)
    seq = numpy_of(table.column(S.SEQ))
    order = np.argsort(seq, kind="stable")  # numpy's sort: Arrow's loads its compute module
    known = seq[order]
    at = np.clip(np.searchsorted(known, seqs), 0, max(len(known) - 1, 0))
    ids = np.asarray(table.column(S.SAMPLE_ID).to_pylist(), dtype=object)[order]
    return ids[at]


@dataclass(frozen=True)
class Pairing(JsonForm):
    """The paired comparison (``paired``) or why there is none (``reason``); its JSON is its
    fields."""

    paired: bool
    reason: str | None = None
    sequences_a: int = 0
    sequences_b: int = 0
    without_ids_a: int = 0
    without_ids_b: int = 0
    comparable: int = 0
    pairs: int = 0
    identical_share: float | None = None
    same_rollout: int = 0  # pairs whose rollout logprobs are bitwise equal too
    vllm_kl_a: float | None = None
    vllm_kl_b: float | None = None
    difference: float | None = None
    difference_ci: tuple[float | None, float | None] = (None, None)
    ratio: float | None = None
    ratio_ci: tuple[float | None, float | None] = (None, None)
    significant: bool | None = None
    resamples: int = 0
    seed: int = 0
    per_sequence: dict[str, float | None] = field(default_factory=dict)
    top: list[Row] = field(default_factory=list)


def not_paired(reason: str) -> Pairing:
    return Pairing(False, reason)


def pair_sides(a: Side, b: Side, resamples: int, seed: int) -> Pairing:
    """Match the sides' sequences and, with enough identical responses, the paired numbers."""
    ca, cb = a.cols["complete"], b.cols["complete"]
    ia, ib = np.flatnonzero(ca), np.flatnonzero(cb)
    sample = first_seen_codes(np.concatenate([a.sample_id[ia], b.sample_id[ib]]).astype(str))
    sa, sb = sample[: len(ia)], sample[len(ia) :]
    comparable = _comparable(a.cols["step"][ia], sa, b.cols["step"][ib], sb)
    pa_idx, pb_idx = _matches(_content_keys(a.cols, ia, sa), _content_keys(b.cols, ib, sb))
    counted = Pairing(
        False,
        sequences_a=len(a),
        sequences_b=len(b),
        without_ids_a=int((~ca).sum()),
        without_ids_b=int((~cb).sum()),
        comparable=comparable,
        pairs=len(pa_idx),
        identical_share=len(pa_idx) / comparable if comparable else None,
        seed=seed,
    )
    reason = _reason(counted)
    if reason is not None:
        return replace(counted, reason=reason)
    return _paired_numbers(counted, a, b, ia[pa_idx], ib[pb_idx], resamples, seed)


def _comparable(step_a: np.ndarray, sa: np.ndarray, step_b: np.ndarray, sb: np.ndarray) -> int:
    """Per (step, sample id), the fewer of the two sides' sequences, summed."""
    step, sample = np.r_[step_a, step_b], np.r_[sa, sb]
    if not len(step):
        return 0
    order = np.lexsort((sample, step))
    s, k = step[order], sample[order]
    first = np.flatnonzero(np.r_[True, (s[1:] != s[:-1]) | (k[1:] != k[:-1])])
    group = np.repeat(np.arange(len(first)), np.diff(np.r_[first, len(s)]))
    from_a = order < len(step_a)
    na = np.bincount(group[from_a], minlength=len(first))
    nb = np.bincount(group[~from_a], minlength=len(first))
    return int(np.minimum(na, nb).sum())


def _content_keys(cols: dict[str, np.ndarray], rows: np.ndarray, sample: np.ndarray) -> np.ndarray:
    """Per sequence (rows of the side, in its order): step, sample code, tokens, both content
    hashes and its occurrence among the side's sequences with the same five (0, 1, ...)."""
    keys = np.column_stack([
        cols["step"][rows].astype(np.uint64), sample.astype(np.uint64),
        cols["tokens"][rows].astype(np.int64).astype(np.uint64), cols["h1"][rows],
        cols["h2"][rows], np.zeros(len(rows), np.uint64),
    ])  # fmt: skip
    if not len(rows):
        return keys
    order = np.lexsort(keys[:, 4::-1].T)  # stable: ties keep the side's order
    s = keys[order, :5]
    new = np.r_[True, np.any(s[1:] != s[:-1], axis=1)]
    first = np.flatnonzero(new)
    occ = np.arange(len(s)) - np.repeat(first, np.diff(np.r_[first, len(s)]))
    keys[order, 5] = occ.astype(np.uint64)
    return keys


def _matches(ka: np.ndarray, kb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Indices into ``ka`` and ``kb`` of equal keys (unique within a side), in A's order."""
    if not len(ka) or not len(kb):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    both = np.concatenate([ka, kb])
    side = np.r_[np.zeros(len(ka), np.int64), np.ones(len(kb), np.int64)]
    index = np.r_[np.arange(len(ka)), np.arange(len(kb))]
    order = np.lexsort((side, *both[:, ::-1].T))
    k = both[order]
    same = np.all(k[1:] == k[:-1], axis=1)  # a key appears at most once per side
    hit = np.flatnonzero(same)
    ia, ib = index[order][hit], index[order][hit + 1]
    keep = np.argsort(ia, kind="stable")
    return ia[keep], ib[keep]


def _reason(p: Pairing) -> str | None:
    if p.sequences_a == p.without_ids_a or p.sequences_b == p.without_ids_b:
        side = "A" if p.sequences_a == p.without_ids_a else "B"
        return f"token ids not stored: no sequence of side {side} has token ids"
    if p.comparable == 0:
        return (
            f"no sequence of A ({p.sequences_a - p.without_ids_a:,} with token ids) has one in "
            "B with the same step and sample id"
        )
    if p.pairs < MIN_PAIRS:
        need = f" (a paired comparison needs at least {MIN_PAIRS})" if p.pairs else ""
        return (
            f"{p.pairs:,} of {p.comparable:,} sequences with the same step and sample id on "
            f"both sides have the same token ids{need}"
        )
    return None


def _paired_numbers(
    counted: Pairing, a: Side, b: Side, ra: np.ndarray, rb: np.ndarray, resamples: int, seed: int
) -> Pairing:
    """The pairing with its paired numbers: both sides' vllm_kl over the pairs, their
    difference and ratio with bootstrap intervals, the per-sequence differences, the top."""
    tokens = a.cols["tokens"][ra].astype(np.float64)
    k3a, k3b = a.cols["k3"][ra], b.cols["k3"][rb]
    total = float(tokens.sum())
    kl_a, kl_b = float(k3a.sum()) / total, float(k3b.sum()) / total
    finite = bool(np.isfinite(kl_a) and np.isfinite(kl_b))
    # after both sides are read: the cores are free to draw the next chunk while one is summed
    draws = paired_draws(tokens, k3a, k3b, resamples, paired_generator(seed), ahead=True)
    difference_ci: tuple[float | None, float | None] = (None, None)
    ratio_ci: tuple[float | None, float | None] = (None, None)
    significant = None
    if finite:
        low, high, _ = percentile_interval(draws.difference)
        difference_ci = (low, high)
        ratio_ci = percentile_interval(draws.ratio)[:2]
        significant = None if low is None or high is None else not low <= 0.0 <= high
    with np.errstate(invalid="ignore", over="ignore"):
        d = k3b / tokens - k3a / tokens
    return replace(
        counted,
        paired=True,
        same_rollout=int((a.cols["hr"][ra] == b.cols["hr"][rb]).sum()),
        vllm_kl_a=kl_a,
        vllm_kl_b=kl_b,
        difference=kl_b - kl_a if finite else None,
        difference_ci=difference_ci,
        ratio=kl_b / kl_a if finite and kl_a > 0 else None,
        ratio_ci=ratio_ci,
        significant=significant,
        resamples=resamples,
        per_sequence=_distribution(d),
        top=_top(a, b, ra, rb, tokens, d),
    )


def _distribution(d: np.ndarray) -> dict[str, float | None]:
    """The per-sequence differences: mean, quantiles, the shares higher in B and equal."""
    ok = d[np.isfinite(d)]
    if not len(ok):
        return {"finite": 0}
    q = np.quantile(ok, [0.05, 0.5, 0.95])
    return {
        "finite": len(ok),
        "mean": float(ok.mean()),
        "p05": float(q[0]),
        "median": float(q[1]),
        "p95": float(q[2]),
        "b_higher_share": float((ok > 0).mean()),
        "equal_share": float((ok == 0).mean()),
    }


def _top(
    a: Side, b: Side, ra: np.ndarray, rb: np.ndarray, tokens: np.ndarray, d: np.ndarray
) -> list[Row]:
    """The pairs whose vllm_kl differs most (|difference| descending, ties: A's order; a
    difference beyond float64 first)."""
    size = np.where(np.isnan(d), -1.0, np.abs(d))
    order = np.lexsort((np.arange(len(d)), -size))[:TOP_DIFFERENCES]
    rows = []
    for j in order.tolist():
        i, k = int(ra[j]), int(rb[j])
        rows.append({
            "step": int(a.cols["step"][i]), "sample_id": str(a.sample_id[i]),
            "seq_a": int(a.cols["seq"][i]), "seq_b": int(b.cols["seq"][k]),
            "tokens": int(tokens[j]),
            "vllm_kl_a": float(a.cols["k3"][i] / tokens[j]),
            "vllm_kl_b": float(b.cols["k3"][k] / tokens[j]),
            "difference": float(d[j]),
        })  # fmt: skip
    return rows


__all__ = ["MIN_PAIRS", "PairExtra", "PairRows", "Pairing", "Side", "not_paired", "pair_sides"]
