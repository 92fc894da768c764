"""Compiled loops of the K3 cube (numba): the per-token pass and the findings' bootstrap.

:func:`cube_accumulate` touches every token once: it adds the token to its sequence's sparse
buffer keyed by the combination of its token-dimension codes. At the end of the sequence, the
buffer is projected once per subset of token dimensions a table uses, and each projected cell
(the sequence's tokens ``x`` and K3 sum ``y`` in it) is added to every table with that subset,
at the sequence's codes of the table's sequence dimensions. So the per-token work is O(1) and
the combinatorics cost O(cells the sequence visits) per sequence. The sequences with the same
codes of every sequence dimension are taken one after the other and their projected cells
summed first (they land on the same cells of every table): each table's row gets a group's
sums once, where it got every sequence's.

:func:`region_accumulate` is the findings' bootstrap (``stats/cube_bootstrap.py``): per
sequence, its tokens and K3 per (region, stratum), added to every replicate with a Poisson(1)
weight drawn from a hash of (sequence key, replicate); :func:`region_accumulate_cells` does the
same from the sequences' cells that :func:`cube_accumulate` keeps, so that `explain` reads its
tokens once.

Compiled on first use and cached (``cache=True``); ``nogil`` lets worker threads run them in
parallel on separate states.
"""

from __future__ import annotations

import math

import numpy as np

from mismatchctl.stats.numba_load import kernel

N_FIELDS = 10
_N, _A, _YY, _XX, _XY, _G, _CYY, _CXY, _CYX, _CXX = range(N_FIELDS)


@kernel(nogil=True, error_model="numpy", inline="always")
def _row(
    state: np.ndarray, slot: np.ndarray, cells: np.ndarray, counts: np.ndarray, cell: int
) -> np.ndarray:
    """The row of ``state`` a cell adds to. Dense (``slot`` empty): the cell's own; sparse: the
    row ``slot`` gives it, the next free one (``counts[0]``, recorded in ``cells``) the first
    time."""
    if slot.shape[0] == 0:
        return state[cell]
    k = slot[cell]
    if k < 0:
        k = counts[0]
        slot[cell] = k
        cells[k] = cell
        counts[0] = k + 1
    return state[k]


@kernel(nogil=True, error_model="numpy", inline="always")
def _add_cell(
    state: np.ndarray,
    slot: np.ndarray,
    cells: np.ndarray,
    counts: np.ndarray,
    cell: int,
    x: float,
    y: float,
    tx: float,
    ty: float,
) -> None:
    """One sequence's tokens ``x`` and K3 ``y`` in a cell (its row: :func:`_row`);
    ``tx``/``ty``: its totals."""
    _add_moments(_row(state, slot, cells, counts, cell), x, y, tx, ty)


@kernel(nogil=True, error_model="numpy", inline="always")
def _seq_base(
    tb: int,
    row: int,
    seqc: np.ndarray,
    vmap: np.ndarray,
    toff: np.ndarray,
    tqdims: np.ndarray,
    tqmaps: np.ndarray,
    tqstride: np.ndarray,
) -> int:
    """The table's first cell for this sequence's codes of the table's sequence dimensions."""
    cell = toff[tb]
    for k in range(3):
        q = tqdims[tb, k]
        if q < 0:
            break
        cell += vmap[tqmaps[tb, k] + seqc[row, q]] * tqstride[tb, k]
    return cell


@kernel(nogil=True, error_model="numpy", inline="always")
def _buffer_sequence(
    lr: np.ndarray,
    lt: np.ndarray,
    tok: np.ndarray,
    start: int,
    stop: int,
    tmul: np.ndarray,
    cn: np.ndarray,
    ca: np.ndarray,
    ctouch: np.ndarray,
    cvals: np.ndarray,
    keep: np.ndarray,
    bit: int,
    k3: np.ndarray,
) -> int:
    """The sequence's tokens and K3 per combination of token codes (``cn``, ``ca``, the
    combinations touched in ``ctouch`` and their codes in ``cvals``: copied from the first
    token of each, where decoding a combination took a division per dimension); returns how
    many were touched. ``keep`` (empty: every token): only the tokens whose ``keep`` has
    ``bit`` set; ``k3`` (empty: computed here): each token's :func:`token_k3`."""
    m = 0
    masked = keep.shape[0] > 0
    given = k3.shape[0] > 0
    for i in range(start, stop):
        if masked and (keep[i] & bit) == 0:
            continue
        c = 0
        for k in range(tok.shape[1]):
            c += tok[i, k] * tmul[k]
        if cn[c] == 0.0:
            ctouch[m] = c
            for k in range(tok.shape[1]):
                cvals[m, k] = tok[i, k]
            m += 1
        cn[c] += 1.0
        if given:
            ca[c] += k3[i]
        else:
            r = lt[i] - lr[i]
            ca[c] += math.expm1(r) - r
    return m


@kernel(nogil=True, error_model="numpy")
def token_k3(lr: np.ndarray, lt: np.ndarray, out: np.ndarray) -> None:
    """Each token's K3, ``expm1(r) - r``, as the cube's loop computes it (numba's ``expm1``,
    whose last bit differs from numpy's on some tokens): computed once for several cubes of a
    slice."""
    for i in range(lr.shape[0]):
        r = lt[i] - lr[i]
        out[i] = math.expm1(r) - r


@kernel(nogil=True, error_model="numpy", inline="always")
def _project(
    j: int,
    m: int,
    ctouch: np.ndarray,
    cvals: np.ndarray,
    cn: np.ndarray,
    ca: np.ndarray,
    vmap: np.ndarray,
    pdims: np.ndarray,
    pmaps: np.ndarray,
    pmul: np.ndarray,
    pn: np.ndarray,
    pa: np.ndarray,
    ptouch: np.ndarray,
    pcv: np.ndarray,
) -> int:
    """The sequence's buffer summed onto projection ``j`` (its token dimensions, each exact or
    in blocks): ``pn``/``pa`` per projected cell, the cells touched in ``ptouch`` with their
    codes in ``pcv``; returns how many were touched."""
    pm = 0
    for t in range(m):
        pc = 0
        for k in range(3):
            d = pdims[j, k]
            if d < 0:
                break
            pc += vmap[pmaps[j, k] + cvals[t, d]] * pmul[j, k]
        if pn[pc] == 0.0:
            ptouch[pm] = pc
            for k in range(3):
                d = pdims[j, k]
                pcv[pm, k] = 0 if d < 0 else vmap[pmaps[j, k] + cvals[t, d]]
            pm += 1
        c = ctouch[t]
        pn[pc] += cn[c]
        pa[pc] += ca[c]
    return pm


@kernel(nogil=True, error_model="numpy", inline="always")
def _add_sums(
    state: np.ndarray,
    slot: np.ndarray,
    cells: np.ndarray,
    counts: np.ndarray,
    cell: int,
    sums: np.ndarray,
) -> None:
    """A group of sequences' ten sums (``sums``, in ``Field`` order) added to a cell (its row:
    :func:`_row`)."""
    row = _row(state, slot, cells, counts, cell)
    for f in range(N_FIELDS):
        row[f] += sums[f]


@kernel(nogil=True, error_model="numpy", inline="always")
def _add_moments(sums: np.ndarray, x: float, y: float, tx: float, ty: float) -> None:
    """One sequence's tokens ``x`` and K3 ``y`` in a cell (its totals ``tx``/``ty``) added to
    ``sums``: a state row (:func:`_add_cell`) or a group's sums of that cell."""
    sums[_N] += x
    sums[_A] += y
    sums[_YY] += y * y
    sums[_XX] += x * x
    sums[_XY] += x * y
    sums[_G] += 1.0
    sums[_CYY] += ty * y
    sums[_CXY] += tx * y
    sums[_CYX] += ty * x
    sums[_CXX] += tx * x


@kernel(nogil=True, inline="always")
def _same_codes(seqc: np.ndarray, a: int, b: int) -> bool:
    """Whether rows ``a`` and ``b`` have the same codes of every sequence dimension."""
    same = True
    for q in range(seqc.shape[1]):
        same &= seqc[a, q] == seqc[b, q]
    return same


@kernel(nogil=True, error_model="numpy", inline="always")
def _flush_group(
    state: np.ndarray,
    slot: np.ndarray,
    cells: np.ndarray,
    counts: np.ndarray,
    row: int,
    seqc: np.ndarray,
    layout: tuple,
    gq: np.ndarray,
    gsum: np.ndarray,
    gcv: np.ndarray,
    gtouch: np.ndarray,
    gcount: np.ndarray,
    poff: np.ndarray,
) -> None:
    """A group's sums (its sequences share ``row``'s codes of every sequence dimension, so every
    table's cells of theirs are the same) added to the tables once, then cleared."""
    (_, _, _, vmap, pdims, _, _, _,
     ptab_ptr, ptab_idx, qonly, toff, tpstride, tqdims, tqmaps, tqstride, _) = layout  # fmt: skip
    if gq[_G] == 0.0:
        return
    for qi in range(qonly.shape[0]):  # tables of sequence dimensions only
        cell = _seq_base(qonly[qi], row, seqc, vmap, toff, tqdims, tqmaps, tqstride)
        _add_sums(state, slot, cells, counts, cell, gq)
    for f in range(N_FIELDS):
        gq[f] = 0.0
    for j in range(pdims.shape[0]):
        o, pm = poff[j], gcount[j]
        for ti in range(ptab_ptr[j], ptab_ptr[j + 1]):
            tb = ptab_idx[ti]
            base = _seq_base(tb, row, seqc, vmap, toff, tqdims, tqmaps, tqstride)
            s0, s1, s2 = tpstride[tb, 0], tpstride[tb, 1], tpstride[tb, 2]
            for u in range(pm):
                g = gtouch[o + u]
                cell = base + gcv[g, 0] * s0 + gcv[g, 1] * s1 + gcv[g, 2] * s2
                _add_sums(state, slot, cells, counts, cell, gsum[g])
        for u in range(pm):
            g = gtouch[o + u]
            for f in range(N_FIELDS):
                gsum[g, f] = 0.0
        gcount[j] = 0


@kernel(nogil=True, error_model="numpy", inline="always")
def _group_pending(gcount: np.ndarray, ptab_ptr: np.ndarray, qonly: np.ndarray) -> int:
    """The most state rows a group's sums can still take (a row per table cell they hold)."""
    out = qonly.shape[0]
    for j in range(gcount.shape[0]):
        out += (ptab_ptr[j + 1] - ptab_ptr[j]) * gcount[j]
    return out


@kernel(nogil=True, error_model="numpy")
def cube_accumulate(
    state: np.ndarray,
    lr: np.ndarray,
    lt: np.ndarray,
    starts: np.ndarray,
    rows: np.ndarray,
    order: np.ndarray,
    first: int,
    tok: np.ndarray,
    seqc: np.ndarray,
    keep_tokens: np.ndarray,
    bit: int,
    k3_tokens: np.ndarray,
    layout: tuple,
    max_touch: int,
    cell_count: np.ndarray,
    cell_combo: np.ndarray,
    cell_tokens: np.ndarray,
    cell_k3: np.ndarray,
    slot: np.ndarray,
    cells: np.ndarray,
    counts: np.ndarray,
) -> int:
    """Add whole sequences to ``state`` (cells x 10: tokens, K3 sum, the per-sequence moments
    y^2, x^2, x y, their count, and the cross moments with the sequence's totals X, Y:
    Y y, X y, Y x, X x). ``starts``: first token of each sequence plus the end;
    ``rows``: each sequence's row of ``seqc``; ``order``: the sequences in the order they are
    taken, from its ``first`` position (``cube.group_order``: the sequences with the same codes
    of every sequence dimension one after the other); ``tok``: tokens x token-dimension codes;
    ``layout``: :func:`mismatchctl.stats.cube.kernel_layout`; ``max_touch``: the most
    token-code combinations one sequence can visit (its length, at most ``combo_size``).
    ``keep_tokens`` (empty: every token): only the tokens whose entry has ``bit`` set are
    added; a sequence with none is no cluster (as if its tokens were not given).
    ``k3_tokens`` (empty: computed here): each token's :func:`token_k3`.

    The sequences of a group touch the same cells of every table: their projected cells are
    summed into the group's own sums, which are added to the tables once, when the group
    ends (a table row's ten additions per group instead of per sequence).

    With ``cell_count`` of one entry per sequence (else empty), each sequence's buffer is also
    kept (``stats/cube_cells.py``): its combinations in the order first visited, in
    ``cell_combo``/``cell_tokens``/``cell_k3`` from the sequence's first token's index (room
    for a cell per token), their count in ``cell_count``.

    Sparse (``slot`` of one entry per cube cell, -1 where the cell has no row yet): ``state``
    holds only the cells the sequences touch, a row each in the order first touched, ``cells``
    each row's cell, ``counts[0]`` the rows used. A sequence is added only when the rows left
    can take every cell its group's sums may touch; returns the position in ``order`` of the
    first sequence of the first group not added (all: their count), so that the caller grows
    the rows and goes on from there (a group is added whole, as into a dense state)."""
    (tmul, _, combo_size, vmap, pdims, pmaps, pmul, psize_max,
     ptab_ptr, _, qonly, _, _, _, _, _, psizes) = layout  # fmt: skip
    n_dt = tok.shape[1]
    cn = np.zeros(combo_size, np.float64)
    ca = np.zeros(combo_size, np.float64)
    ctouch = np.empty(max_touch, np.int64)
    cvals = np.empty((max_touch, max(n_dt, 1)), np.int64)
    pn = np.zeros(psize_max, np.float64)
    pa = np.zeros(psize_max, np.float64)
    ptouch = np.empty(min(psize_max, max_touch), np.int64)
    pcv = np.zeros((min(psize_max, max_touch), 3), np.int64)
    n_proj = pdims.shape[0]
    poff = np.zeros(n_proj + 1, np.int64)
    for j in range(n_proj):
        poff[j + 1] = poff[j] + psizes[j]
    gsum = np.zeros((poff[n_proj], N_FIELDS), np.float64)  # the group's sums per projected cell
    gcv = np.zeros((poff[n_proj], 3), np.int64)  # each projected cell's codes
    gtouch = np.empty(poff[n_proj], np.int64)  # the cells touched, from poff[j] for projection j
    gcount = np.zeros(n_proj, np.int64)
    gq = np.zeros(N_FIELDS, np.float64)  # the group's sums of the sequence-only tables
    keep = cell_count.shape[0] > 0
    sparse = slot.shape[0] > 0
    group = -1  # the row of seqc of the group's sequences (-1: none yet)
    group_start = first  # the group's first position in ``order``
    n_seq = starts.shape[0] - 1
    for p in range(first, n_seq):
        si = order[p]
        row = rows[si]
        if group >= 0 and not _same_codes(seqc, row, group):
            _flush_group(state, slot, cells, counts, group, seqc, layout, gq, gsum, gcv, gtouch,
                         gcount, poff)  # fmt: skip
            group_start = p
        group = row
        most = _most_cells(starts[si + 1] - starts[si], combo_size, qonly, ptab_ptr, psizes)
        if sparse:
            pending = _group_pending(gcount, ptab_ptr, qonly)
            if min(counts[0] + pending + most, slot.shape[0]) > state.shape[0]:
                return group_start  # the group again, whole, into more rows: the same sums
        m = _buffer_sequence(
            lr,
            lt,
            tok,
            starts[si],
            starts[si + 1],
            tmul,
            cn,
            ca,
            ctouch,
            cvals,
            keep_tokens,
            bit,
            k3_tokens,
        )
        if keep:
            cell_count[si] = m
            at = starts[si]
            for t in range(m):
                c = ctouch[t]
                cell_combo[at + t] = c
                cell_tokens[at + t] = int(cn[c])
                cell_k3[at + t] = ca[c]
        tot_n = 0.0
        tot_a = 0.0
        for t in range(m):
            c = ctouch[t]
            tot_n += cn[c]
            tot_a += ca[c]
        if m == 0:  # every token masked out: no cluster
            continue
        _add_moments(gq, tot_n, tot_a, tot_n, tot_a)
        for j in range(n_proj):
            pm = _project(
                j, m, ctouch, cvals, cn, ca, vmap, pdims, pmaps, pmul, pn, pa, ptouch, pcv
            )
            o = poff[j]
            for u in range(pm):
                pc = ptouch[u]
                g = o + pc
                if gsum[g, _G] == 0.0:
                    gtouch[o + gcount[j]] = g
                    gcount[j] += 1
                    gcv[g, 0], gcv[g, 1], gcv[g, 2] = pcv[u, 0], pcv[u, 1], pcv[u, 2]
                _add_moments(gsum[g], pn[pc], pa[pc], tot_n, tot_a)
                pn[pc] = 0.0
                pa[pc] = 0.0
        for t in range(m):
            cn[ctouch[t]] = 0.0
            ca[ctouch[t]] = 0.0
    if group >= 0:
        _flush_group(state, slot, cells, counts, group, seqc, layout, gq, gsum, gcv, gtouch,
                     gcount, poff)  # fmt: skip
    return n_seq


@kernel(nogil=True, error_model="numpy", inline="always")
def _most_cells(
    length: int, combo_size: int, qonly: np.ndarray, ptab_ptr: np.ndarray, psizes: np.ndarray
) -> int:
    """The most cells a sequence of ``length`` tokens can add to: one in each table of
    sequence dimensions only, and in each table of a projection at most as many as the
    projection has cells or the sequence visits combinations."""
    m = min(length, combo_size)
    out = qonly.shape[0]
    for j in range(psizes.shape[0]):
        out += (ptab_ptr[j + 1] - ptab_ptr[j]) * min(psizes[j], m)
    return out


@kernel(nogil=True)
def token_checks(
    lr: np.ndarray,
    lt: np.ndarray,
    seq: np.ndarray,
    tok: np.ndarray,
    keep: np.ndarray,
    bit: int,
    lo: np.ndarray,
    hi: np.ndarray,
) -> tuple[bool, int, int]:
    """In one pass over the tokens (at least one): whether both logprobs are finite at every
    token (every one whose ``keep`` has ``bit`` set, when ``keep`` is not empty), the smallest
    and largest ``seq``, and each column's smallest and largest code in ``lo``/``hi``."""
    masked = keep.shape[0] > 0
    finite = True
    seq_lo, seq_hi = seq[0], seq[0]
    w = tok.shape[1]
    for k in range(w):
        lo[k] = tok[0, k]
        hi[k] = tok[0, k]
    for i in range(lr.shape[0]):
        if not (masked and (keep[i] & bit) == 0):
            finite &= math.isfinite(lr[i]) and math.isfinite(lt[i])
        seq_lo = min(seq_lo, seq[i])
        seq_hi = max(seq_hi, seq[i])
        for k in range(w):
            v = tok[i, k]
            lo[k] = min(lo[k], v)
            hi[k] = max(hi[k], v)
    return finite, seq_lo, seq_hi


@kernel(nogil=True)
def column_ranges(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Minimum and maximum of every column, one pass over the rows per column (numpy's axis-0
    reductions of a narrow int16 matrix cost ~40 ns a row; a single pass updating every
    column's pair in memory took 2.4 times as long as these register-held pairs, measured on
    262k rows of three int32 columns)."""
    w = codes.shape[1]
    lo = np.empty(w, np.int64)
    hi = np.empty(w, np.int64)
    for k in range(w):
        a = codes[0, k]
        b = a
        for i in range(1, codes.shape[0]):
            v = codes[i, k]
            a = min(a, v)
            b = max(b, v)
        lo[k] = a
        hi[k] = b
    return lo, hi


# --- the region bootstrap -------------------------------------------------------------------

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31, _S11 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(11)


@kernel(nogil=True, inline="always")
def splitmix64(x: np.uint64) -> np.uint64:
    """SplitMix64's finaliser (Steele, Lea & Flood 2014): a bijective 64-bit mix."""
    z = x + _GOLDEN
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


@kernel(nogil=True, inline="always")
def poisson_weight(key: np.uint64, replicate: int, cdf: np.ndarray) -> int:
    """Poisson(1) draw of (sequence key, replicate): the uniform from the hash's top 53 bits,
    inverted through ``cdf`` (the Poisson(1) CDF): the count of CDF values below it."""
    h = splitmix64(key ^ (np.uint64(replicate + 1) * _GOLDEN))
    u = float(h >> _S11) * (1.0 / 9007199254740992.0)
    k = 0
    while k < cdf.shape[0] and cdf[k] < u:
        k += 1
    return k


@kernel(nogil=True, inline="always")
def _in_region(codes: np.ndarray, allowed: np.ndarray, offsets: np.ndarray) -> bool:
    """Whether every constrained code lies in the region (``offsets < 0``: unconstrained)."""
    for d in range(offsets.shape[0]):
        o = offsets[d]
        if o >= 0 and not allowed[o + codes[d]]:
            return False
    return True


@kernel(nogil=True, error_model="numpy", inline="always")
def _touch(seen: np.ndarray, touched: np.ndarray, m: int, r: int, s: int) -> int:
    """Cell ``(r, s)`` (region, stratum) of a sequence's buffer marked touched, the ``m``-th,
    unless it is already; the count of touched cells after it."""
    if seen[r, s]:
        return m
    seen[r, s] = True
    touched[m, 0] = r
    touched[m, 1] = s
    return m + 1


@kernel(nogil=True, error_model="numpy", inline="always")
def _add_replicates(
    acc: np.ndarray,
    buf: np.ndarray,
    seen: np.ndarray,
    touched: np.ndarray,
    m: int,
    key: np.uint64,
    cdf: np.ndarray,
) -> None:
    """One sequence's buffered sums (its ``m`` touched cells) added to every replicate weighted
    by the sequence's Poisson weight (of its ``key``), then its cells cleared for the next."""
    for b in range(acc.shape[0] if m else 0):
        w = poisson_weight(key, b, cdf)
        for t in range(m if w else 0):
            r, s2 = touched[t, 0], touched[t, 1]
            acc[b, r, s2, 0] += w * buf[r, s2, 0]
            acc[b, r, s2, 1] += w * buf[r, s2, 1]
    for t in range(m):
        r, s2 = touched[t, 0], touched[t, 1]
        buf[r, s2, 0] = 0.0
        buf[r, s2, 1] = 0.0
        seen[r, s2] = False


@kernel(nogil=True, error_model="numpy")
def region_accumulate(
    acc: np.ndarray,
    lr: np.ndarray,
    lt: np.ndarray,
    starts: np.ndarray,
    rows: np.ndarray,
    keys: np.ndarray,
    tok: np.ndarray,
    seqc: np.ndarray,
    allowed: np.ndarray,
    roff: np.ndarray,
    stratum: int,
    cdf: np.ndarray,
) -> None:
    """Add whole sequences to ``acc`` (replicates x regions x strata x 2: weighted tokens and
    K3). ``allowed[roff[r, d] + code]`` says whether code of dimension ``d`` (token dimensions
    first, then sequence dimensions) lies in region ``r``; ``roff[r, d] < 0``: unconstrained.
    ``stratum``: the stratum dimension in that order (-1: one stratum)."""
    n_reg, n_str = acc.shape[1], acc.shape[2]
    n_dt = tok.shape[1]
    buf = np.zeros((n_reg, n_str, 2), np.float64)
    seen = np.zeros((n_reg, n_str), np.bool_)
    touched = np.empty((n_reg * n_str, 2), np.int64)
    seq_ok = np.empty(n_reg, np.bool_)
    for si in range(starts.shape[0] - 1):
        row = rows[si]
        for r in range(n_reg):
            seq_ok[r] = _in_region(seqc[row], allowed, roff[r, n_dt:])
        s = seqc[row, stratum - n_dt] if stratum >= n_dt else 0
        m = 0
        for i in range(starts[si], starts[si + 1]):
            x = lt[i] - lr[i]
            k3 = math.expm1(x) - x
            if 0 <= stratum < n_dt:
                s = tok[i, stratum]
            for r in range(n_reg):
                if not seq_ok[r] or not _in_region(tok[i], allowed, roff[r, :n_dt]):
                    continue
                m = _touch(seen, touched, m, r, s)
                buf[r, s, 0] += 1.0
                buf[r, s, 1] += k3
        _add_replicates(acc, buf, seen, touched, m, keys[row], cdf)


@kernel(nogil=True, error_model="numpy")
def region_accumulate_cells(
    acc: np.ndarray,
    ptr: np.ndarray,
    keys: np.ndarray,
    combo: np.ndarray,
    ntok: np.ndarray,
    k3: np.ndarray,
    tmul: np.ndarray,
    tcard: np.ndarray,
    seqc: np.ndarray,
    allowed: np.ndarray,
    roff: np.ndarray,
    stratum: int,
    cdf: np.ndarray,
) -> None:
    """:func:`region_accumulate` from the sequences' cells (``stats/cube_cells.py``) instead of
    their tokens: a cell's token codes are its combination's digits ``(combo // tmul[k]) %
    tcard[k]``; sequence ``si``'s cells are ``ptr[si]:ptr[si + 1]``, its key ``keys[si]`` and
    its codes ``seqc[si]``. The weights, regions and order of the sums per replicate are
    those of :func:`region_accumulate`; a sequence's K3 in a region is the sum of its cells'."""
    n_reg, n_str = acc.shape[1], acc.shape[2]
    n_dt = tmul.shape[0]
    buf = np.zeros((n_reg, n_str, 2), np.float64)
    seen = np.zeros((n_reg, n_str), np.bool_)
    touched = np.empty((n_reg * n_str, 2), np.int64)
    seq_ok = np.empty(n_reg, np.bool_)
    codes = np.empty(max(n_dt, 1), np.int64)
    for si in range(ptr.shape[0] - 1):
        for r in range(n_reg):
            seq_ok[r] = _in_region(seqc[si], allowed, roff[r, n_dt:])
        s = seqc[si, stratum - n_dt] if stratum >= n_dt else 0
        m = 0
        for i in range(ptr[si], ptr[si + 1]):
            c = combo[i]
            for k in range(n_dt):
                codes[k] = (c // tmul[k]) % tcard[k]
            if 0 <= stratum < n_dt:
                s = codes[stratum]
            for r in range(n_reg):
                if not seq_ok[r] or not _in_region(codes, allowed, roff[r, :n_dt]):
                    continue
                m = _touch(seen, touched, m, r, s)
                buf[r, s, 0] += ntok[i]
                buf[r, s, 1] += k3[i]
        _add_replicates(acc, buf, seen, touched, m, keys[si], cdf)


# --- the cube's token codes -----------------------------------------------------------------


@kernel(nogil=True, inline="always")
def _count_le(edges: np.ndarray, value: float) -> int:
    """How many of the (increasing) ``edges`` are <= ``value``: every edge compared, without a
    branch (half the time of a search that stops early, whose branches mispredict)."""
    k = 0
    for j in range(edges.shape[0]):
        k += edges[j] <= value
    return k


@kernel(nogil=True)
def token_codes(
    turn: np.ndarray,
    position: np.ndarray,
    starts: np.ndarray,
    prompt: np.ndarray,
    pr: np.ndarray,
    bin_edges: np.ndarray,
    kv_edges: np.ndarray,
    tp_edges: np.ndarray,
    last_turn: int,
    out: np.ndarray,
) -> int:
    """Every token's codes of the cube's token dimensions, in one pass: ``out[i]`` = (turn index
    0, 1, ..., ``last_turn`` for that turn and later ones; turn kind first/later; probability
    bin; KV position bin; position-in-turn bin: its index in its run of one turn). ``starts``: each sequence's first token (sequences contiguous); ``prompt``: each
    sequence's prompt length (0 where unknown); ``pr``: exp(rollout logprob); the edges are the
    interior ones (a bin is the count of edges <= the value: ``stats.bins.assign_bins`` and
    ``stats.positions.assign_positions``). Returns the first token with a negative turn, or -1."""
    n = turn.shape[0]
    for si in range(starts.shape[0]):
        a = starts[si]
        b = starts[si + 1] if si + 1 < starts.shape[0] else n
        run_start = a
        p = prompt[si]
        for i in range(a, b):
            t = turn[i]
            if t < 0:
                return i
            if i > a and t != turn[i - 1]:
                run_start = i
            out[i, 0] = min(t, last_turn)
            out[i, 1] = 1 if t >= 1 else 0
            out[i, 2] = _count_le(bin_edges, pr[i])
            out[i, 3] = _count_le(kv_edges, position[i] + p)
            out[i, 4] = _count_le(tp_edges, i - run_start)
    return -1
