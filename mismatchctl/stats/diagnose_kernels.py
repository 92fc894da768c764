"""Compiled per-token loops of `diagnose`'s extra (``analysis/diagnose/extra.py``): sentinel
runs, trailing padding, the hot sequences' cell sums, misaligned turns and the tokens whose id
came earlier in their response, each one walk over a slice of whole sequences (numba, cached on
disk) where numpy built a dozen whole-slice temporaries, masks and sorts.

Each gives what the numpy version it replaces gave: counts exactly, sums in the order numpy's
``bincount`` adds them (token order), bit for bit; only :func:`misaligned_turns` sums each turn
in token order where ``np.add.reduceat`` summed it pairwise (its results are counts of turns
over thresholds: the same unless a turn's mean sits within rounding of a threshold).
"""

from __future__ import annotations

import numpy as np

from mismatchctl.stats.numba_load import kernel


@kernel(nogil=True)
def sentinel_counts(
    lr: np.ndarray,
    lt: np.ndarray,
    seq: np.ndarray,
    turn: np.ndarray,
    low_max: float,
    run_min: int,
    other_max: float,
    bad: np.ndarray,
    counts: np.ndarray,
    diff: np.ndarray,
) -> None:
    """``counts``: tokens at or below ``low_max`` on the rollout side, on the trainer side,
    one-sided exact zeros on each side, the tokens of one-sided zero runs of one turn (at
    least ``run_min`` long, the other side at or below ``other_max`` somewhere in the run),
    those of them whose zeros are the rollout side's, the tokens where neither side is 0.0
    nor at or below ``low_max``, the turns (a turn's last token: the next token is another
    sequence's or turn's), the turns whose last token is a one-sided exact zero with the other
    side at or below ``other_max``, and the other tokens that are; ``diff[0]``: the sum of
    ``lr - lt`` over the tokens where neither side is 0.0 nor a sentinel.
    ``bad`` marks the tokens of the first and the fifth counts. The counts in one branch-free
    pass; the runs, rare, walked from each one-sided zero met."""
    n = lr.shape[0]
    low_r, low_t, zero_r, zero_t, both = 0, 0, 0, 0, 0
    total = 0.0
    for i in range(n):
        a, b = lr[i] <= low_max, lt[i] <= low_max
        low_r += a
        low_t += b
        zero_r += (lr[i] == 0.0) & (lt[i] != 0.0)
        zero_t += (lt[i] == 0.0) & (lr[i] != 0.0)
        bad[i] = a | b
        if lr[i] != 0.0 and lt[i] != 0.0 and not (a | b):
            both += 1
            total += lr[i] - lt[i]
        filled = (lr[i] == 0.0 and lt[i] != 0.0 and lt[i] <= other_max) or (
            lt[i] == 0.0 and lr[i] != 0.0 and lr[i] <= other_max
        )
        if i == n - 1 or seq[i + 1] != seq[i] or turn[i + 1] != turn[i]:
            counts[7] += 1
            counts[8] += filled
        else:
            counts[9] += filled
    counts[0] += low_r
    counts[1] += low_t
    counts[2] += zero_r
    counts[3] += zero_t
    counts[6] += both
    diff[0] += total
    i = 0
    while i < n:
        if (lr[i] == 0.0) == (lt[i] == 0.0):  # zero on neither side, or on both
            i += 1
            continue
        # a run of one side's zeros (the other side not zero) within one turn, from i
        rollout = lr[i] == 0.0
        a, b = (lr, lt) if rollout else (lt, lr)
        j = i + 1
        while j < n and a[j] == 0.0 and b[j] != 0.0 and seq[j] == seq[i] and turn[j] == turn[i]:
            j += 1
        if j - i >= run_min:
            lowest = b[i]
            for k in range(i + 1, j):  # np.minimum: a NaN, once met, is the minimum
                if b[k] < lowest or b[k] != b[k]:
                    lowest = b[k]
            if lowest <= other_max:
                counts[4] += j - i
                if rollout:
                    counts[5] += j - i
                for k in range(i, j):
                    bad[k] = True
        i = j


@kernel(nogil=True)
def trailing_flagged(lr: np.ndarray, lt: np.ndarray, starts: np.ndarray, out: np.ndarray) -> None:
    """Per sequence (first tokens ``starts``, ascending; the last ends at the end): how many of
    its last tokens are exactly 0.0 on both sides, in a row."""
    n = lr.shape[0]
    for s in range(starts.shape[0]):
        a = starts[s]
        b = starts[s + 1] if s + 1 < starts.shape[0] else n
        k = b
        while k > a and lr[k - 1] == 0.0 and lt[k - 1] == 0.0:
            k -= 1
        out[s] = b - k


@kernel(nogil=True)
def hot_cell_sums(
    starts: np.ndarray,
    later: np.ndarray,
    bins: np.ndarray,
    n_bins: int,
    lr: np.ndarray,
    r: np.ndarray,
    x: np.ndarray,
    k3: np.ndarray,
    tail: float,
    sums: np.ndarray,
) -> None:
    """Per (sequence, turn kind, bin) cell, ``sums`` (cells x 14, zeroed): tokens, tokens with
    ``r != 0``, sum of ``x``, of ``x^2``, of ``k3``, tokens with ``r > 0``, tokens with ``r > 0``
    and ``x > tail``, the sum of those tokens' ``k3``; then over the tokens with finite ``lr``
    and ``r``, their count and the sums of ``lr``, ``lr^2``, ``r``, ``r^2`` and ``lr r`` (the
    line of the trainer's logprobs on the rollout's in any set of cells). The cell of a token of
    sequence ``s`` is ``s * 2 * n_bins + later * n_bins + bin``; added in token order. ``x`` of
    a token with ``r == 0`` is not read (it adds 0.0: the caller need not zero it)."""
    n = r.shape[0]
    width = 2 * n_bins
    for s in range(starts.shape[0]):
        a = starts[s]
        b = starts[s + 1] if s + 1 < starts.shape[0] else n
        for i in range(a, b):
            c = s * width + (n_bins if later[i] > 0 else 0) + bins[i]
            moved = r[i] != 0
            xi = x[i] if moved else 0.0
            sums[c, 0] += 1.0
            sums[c, 1] += 1.0 if moved else 0.0
            sums[c, 2] += xi
            sums[c, 3] += xi * xi
            sums[c, 4] += k3[i]
            sums[c, 5] += 1.0 if r[i] > 0 else 0.0
            above = r[i] > 0 and xi > tail
            sums[c, 6] += 1.0 if above else 0.0
            sums[c, 7] += k3[i] if above else 0.0
            u, v = lr[i], r[i]
            if np.isfinite(u) and np.isfinite(v):
                sums[c, 8] += 1.0
                sums[c, 9] += u
                sums[c, 10] += u * u
                sums[c, 11] += v
                sums[c, 12] += v * v
                sums[c, 13] += u * v


@kernel(nogil=True)
def sequence_sums(
    starts: np.ndarray,
    bins: np.ndarray,
    k3: np.ndarray,
    lr: np.ndarray,
    r: np.ndarray,
    counts: np.ndarray,
    k3_bins: np.ndarray,
    sums: np.ndarray,
) -> int:
    """Per sequence (first tokens ``starts``, ascending; the last ends at the end): its tokens
    and their K3 per probability bin (``counts``, ``k3_bins``: sequences x bins, zeroed; the
    sums ``bincount`` gave over each token's (sequence, bin) cell, in its order), and ``sums``
    (sequences x 5, zeroed): over its tokens with finite ``lr`` and ``r``, their count and the
    sums of ``lr``, ``lr^2``, ``r`` and ``lr r``; added in token order. Returns the first token
    whose bin is not below the bins' count (or negative), whose sums stop there; -1 when none."""
    n = r.shape[0]
    n_bins = counts.shape[1]
    for s in range(starts.shape[0]):
        a = starts[s]
        b = starts[s + 1] if s + 1 < starts.shape[0] else n
        for i in range(a, b):
            if bins[i] < 0 or bins[i] >= n_bins:
                return i
            counts[s, bins[i]] += 1.0
            k3_bins[s, bins[i]] += k3[i]
            x, y = lr[i], r[i]
            if np.isfinite(x) and np.isfinite(y):
                sums[s, 0] += 1.0
                sums[s, 1] += x
                sums[s, 2] += x * x
                sums[s, 3] += y
                sums[s, 4] += x * y
    return -1


@kernel(nogil=True, error_model="numpy")
def misaligned_turns(
    seq: np.ndarray,
    turn: np.ndarray,
    ids: np.ndarray,
    k0: np.ndarray,
    plus: np.ndarray,
    minus: np.ndarray,
    min_pairs: int,
    min_k3: float,
    factor: float,
    max_match: float,
    counts: np.ndarray,
    first: np.ndarray,
    lag: np.ndarray,
) -> int:
    """The turn runs (consecutive tokens of one sequence and turn) whose pairs shifted by one
    position match far better than their own, and match (a mean K3 of ``max_match`` at most:
    ``stats/misalign.py``), from each token's K3
    ``k0`` and those of the pairs (``lr_t``, ``lt_t+1``) in ``plus[t]`` and (``lr_t+1``,
    ``lt_t``) in ``minus[t]``, over the adjacent pairs of two different tokens (``ids``: each
    token's id, -1 where unknown; a token repeated matches itself at every lag and tells no
    shift): ``counts`` gets the turns tested, misaligned, their tokens,
    those matching one position later and earlier; the first ``len(first)`` misaligned turns'
    first tokens in ``first`` and their lag (1 later, -1 earlier) in ``lag``; returns how many
    were recorded."""
    n = k0.shape[0]
    kept = 0
    i = 0
    while i < n:
        j = i + 1
        while j < n and seq[j] == seq[i] and turn[j] == turn[i]:
            j += 1
        informative = 0
        base_plus, base_minus, sum_plus, sum_minus = 0.0, 0.0, 0.0, 0.0
        for k in range(i, j - 1):  # the pair (k, k + 1): the turn's last has no next one
            if ids[k] >= 0 and ids[k] == ids[k + 1]:
                continue  # the same token twice: every lag pairs it with itself
            informative += 1
            base_plus += k0[k]
            sum_plus += plus[k]
            base_minus += k0[k + 1]  # the first token has no previous one
            sum_minus += minus[k]
        pairs = max(informative, 1)
        base_plus /= pairs
        base_minus /= pairs
        sum_plus /= pairs
        sum_minus /= pairs
        if informative >= min_pairs:
            counts[0] += 1
            later = base_plus >= min_k3 and sum_plus * factor <= base_plus and sum_plus <= max_match
            earlier = (
                not later
                and base_minus >= min_k3
                and sum_minus * factor <= base_minus
                and sum_minus <= max_match
            )
            if later or earlier:
                counts[1] += 1
                counts[2] += j - i
                counts[3 if later else 4] += 1
                if kept < first.shape[0]:
                    first[kept] = i
                    lag[kept] = 1 if later else -1
                    kept += 1
        i = j
    return kept


@kernel(nogil=True)
def seen_before(ids: np.ndarray, starts: np.ndarray, last: np.ndarray, out: np.ndarray) -> None:
    """Whether each token's id (>= 0, below ``len(last)``) occurred earlier in its sequence
    (first tokens ``starts``): ``last[id]`` holds the latest sequence (+1) that had it, so a
    slice needs no sort and no clearing between sequences (``last`` zeroed once)."""
    n = ids.shape[0]
    for s in range(starts.shape[0]):
        a = starts[s]
        b = starts[s + 1] if s + 1 < starts.shape[0] else n
        for i in range(a, b):
            t = ids[i]
            out[i] = last[t] == s + 1
            last[t] = s + 1


@kernel(nogil=True)
def signed_cell_sums(
    seq: np.ndarray,
    turn: np.ndarray,
    kv: np.ndarray,
    bins: np.ndarray,
    r: np.ndarray,
    q: np.ndarray,
    k3: np.ndarray,
    kv_inner: np.ndarray,
    position_inner: np.ndarray,
    levels: np.ndarray,
    hash_mul: np.uint64,
    group_shift: np.uint64,
    sums: np.ndarray,
    reached: np.ndarray,
) -> int:
    """``stats/signed_parts``' sums (``sums``: groups x cells rows, 4 columns, zeroed): per
    token its group (the top bits of ``seq * hash_mul``), its turn (capped at ``levels[0] -
    1``), the bins of its KV position and of its index in its turn run (the edges after the
    first that are <= it), its probability bin; then tokens, tokens with ``r < 0``, ``q`` and
    ``k3`` added to that row in token order. A token whose ``r`` or ``k3`` is not finite adds
    nothing but still counts in its turn run's positions. Each row is listed in ``reached``
    (room for one entry per token or per row, whichever is fewer) the first time a token
    reaches it; returns how many are listed (in the order reached). Its token count is the
    flag: 0 until then (a pass over the table to find them cost ~1.5 ms a slice, measured)."""
    n = r.shape[0]
    n_turns, n_kv, n_pos, n_bins = levels[0], levels[1], levels[2], levels[3]
    at = 0
    m = 0
    for i in range(n):
        if i > 0 and seq[i] == seq[i - 1] and turn[i] == turn[i - 1]:
            at += 1
        else:
            at = 0
        if not (np.isfinite(r[i]) and np.isfinite(k3[i])):
            continue
        group = np.int64((np.uint64(seq[i]) * hash_mul) >> group_shift)
        t = min(np.int64(turn[i]), n_turns - 1)
        kb = 0
        while kb < kv_inner.shape[0] and kv_inner[kb] <= kv[i]:
            kb += 1
        pb = 0
        while pb < position_inner.shape[0] and position_inner[pb] <= at:
            pb += 1
        row = ((group * n_turns + t) * n_kv + kb) * n_pos + pb
        row = row * n_bins + bins[i]
        if sums[row, 0] == 0.0:
            reached[m] = row
            m += 1
        sums[row, 0] += 1.0
        sums[row, 1] += 1.0 if r[i] < 0 else 0.0
        sums[row, 2] += q[i]
        sums[row, 3] += k3[i]
    return m


@kernel(nogil=True)
def step_id_sums(
    ids: np.ndarray, r: np.ndarray, starts: np.ndarray, code: np.ndarray, out: np.ndarray
) -> None:
    """Per (step code, id bucket): the tokens with an id (>= 0), their sum of ``r`` and of
    ``r^2`` into ``out`` ([codes, 3, buckets], zeroed; ``buckets`` a power of two, an id's
    bucket its low bits), in token order (``np.bincount``'s); ``code`` is each sequence's step
    code (sequences from ``starts``)."""
    n = ids.shape[0]
    low = out.shape[2] - 1
    for s in range(starts.shape[0]):
        a = starts[s]
        b = starts[s + 1] if s + 1 < starts.shape[0] else n
        c = code[s]
        for i in range(a, b):
            t = ids[i]
            if t < 0:
                continue
            k = t & low
            x = r[i]
            out[c, 0, k] += 1.0
            out[c, 1, k] += x
            out[c, 2, k] += x * x
