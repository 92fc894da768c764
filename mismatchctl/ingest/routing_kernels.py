"""Compiled loops over routes (numba): one pass per side to validate its rows and find fills,
one over the padded tails, one to compare both sides row by row. No temporaries the size of the
routes: at 24 layers x top-8 a token's routes are 192 ids a side."""

from __future__ import annotations

import numba
import numpy as np

OK, BAD_ID, PARTIAL, REPEATED = 0, 1, 2, 3
MARKS = 1 << 16  # ids below it are checked for repeats in one pass (above: pairwise)


@numba.njit(cache=True, nogil=True)
def scan_side(ids, high, dead):  # pragma: no cover - compiled
    """Validate every row (ids in [0, high) or -1; -1 on all slots or none; distinct ids within a
    layer) and mark ``dead`` the rows filled with one id (top-k > 1). Returns (code, row, max id)
    of the first bad row (code OK: none)."""
    n, layers, k = ids.shape
    top = -1
    seen = np.full(MARKS, -1, dtype=np.int64)
    stamp = 0
    for r in range(n):
        neg = 0
        first = ids[r, 0, 0]
        same = True
        for layer in range(layers):
            for i in range(k):
                v = ids[r, layer, i]
                if v == -1:
                    neg += 1
                elif v < -1 or v >= high:
                    return BAD_ID, r, top
                if v != first:
                    same = False
                if v > top:
                    top = v
        if neg:
            if neg != layers * k:
                return PARTIAL, r, top
            continue
        if k > 1 and same:
            dead[r] = True
            continue
        for layer in range(layers):
            stamp += 1
            for i in range(k):
                v = ids[r, layer, i]
                if v < MARKS:  # a repeated id within the layer has this layer's stamp
                    if seen[v] == stamp:
                        return REPEATED, r, top
                    seen[v] = stamp
                else:
                    for j in range(i):
                        if ids[r, layer, j] == v:
                            return REPEATED, r, top
    return OK, -1, top


@numba.njit(cache=True, nogil=True)
def tail_repeats(ids, of, dead, tail):  # pragma: no cover - compiled
    """Mark ``dead`` the rows at padded-tail frame rows equal to the last real row before them;
    returns how many."""
    n_frame = len(of)
    layers, k = ids.shape[1], ids.shape[2]
    count = 0
    last = -1
    for f in range(n_frame):
        r = of[f]
        if not tail[f]:
            last = r
            continue
        if r < 0 or last < 0 or dead[r] or dead[last] or ids[r, 0, 0] < 0 or ids[last, 0, 0] < 0:
            continue
        equal = True
        for layer in range(layers):
            for i in range(k):
                if ids[r, layer, i] != ids[last, layer, i]:
                    equal = False
        if equal:
            dead[r] = True
            count += 1
    return count


@numba.njit(cache=True, nogil=True)
def compare_frames(a, a_of, a_dead, b, b_of, b_dead, equal, overlap, compared):  # pragma: no cover
    """Per frame row recorded on both sides: the bitmask of layers with equal top-k sets, the
    per-layer overlap |A ∩ B| (ids distinct within a layer: checked by ``scan_side``)."""
    layers, k = a.shape[1], a.shape[2]
    for f in range(len(a_of)):
        ra, rb = a_of[f], b_of[f]
        if ra < 0 or rb < 0 or a_dead[ra] or b_dead[rb] or a[ra, 0, 0] < 0 or b[rb, 0, 0] < 0:
            continue
        compared[f] = True
        bits = np.uint64(0)
        for layer in range(layers):
            same = True  # the usual case: the same ids in the same order
            for i in range(k):
                if a[ra, layer, i] != b[rb, layer, i]:
                    same = False
                    break
            if same:
                common = k
            else:
                common = 0
                for i in range(k):
                    x = a[ra, layer, i]
                    for j in range(k):
                        if b[rb, layer, j] == x:
                            common += 1
                            break
            overlap[f, layer] = common
            if common == k:
                bits |= np.uint64(1) << np.uint64(layer)
        equal[f] = bits
