"""Compiled loops over routes (numba): one pass per side to validate its rows and find fills
(the second side's rows equal to the first's at the same position take their verdict), one over
the padded tails, one to compare both sides row by row; the passes over rows take a range of
them, so that ranges run on threads (they release the GIL: ``routing_threads``). No temporaries
the size of the routes: at 24 layers x top-8 a token's routes are 192 ids a side.

Every kernel takes a side's ids as a C-contiguous ``[rows, layers * top_k]`` array (a row's ids
one after the other, layer by layer), so that the per-row loops run over one flat stretch of
memory, which the compiler vectorizes (the min/max of a row); two rows of one type are compared
as the words of their bytes (:func:`row_words`: 24 words of 8 bytes for a row of 24 layers x
top-8 uint8 ids, not 192 ids), the usual case of a pair of rows being equal."""

from __future__ import annotations

import numpy as np
from numba.extending import intrinsic

from mismatchctl.stats.numba_load import kernel

OK, BAD_ID, PARTIAL, REPEATED = 0, 1, 2, 3
MARKS = 1 << 16  # ids below it are checked for repeats in one pass (above: pairwise)
BITS = 64  # ids below it are checked for repeats with one 64-bit mask per layer


@intrinsic
def _popcount(typingctx, x):  # pragma: no cover - compiled
    """The set bits of an unsigned integer: LLVM's ctpop (one instruction where the CPU has it)."""

    def codegen(context, builder, signature, args):
        return builder.ctpop(args[0])

    return x(x), codegen


def row_words(ids: np.ndarray) -> np.ndarray:
    """The rows of ``ids`` (C-contiguous ``[rows, width]``) as unsigned words of the widest
    size of 8, 4, 2 or 1 bytes that divides a row's bytes: two rows of one type are equal when
    their words are (a view, no copy; the words of a buffer at an odd offset are read
    unaligned, as the CPU allows)."""
    size = ids.shape[1] * ids.itemsize
    word = next(w for w in (8, 4, 2, 1) if size % w == 0)
    return ids.view(np.dtype(f"u{word}")).reshape(len(ids), size // word)


NO_WORDS = np.zeros((0, 0), dtype=np.uint8)  # two sides of different types: compared by ids


@kernel(nogil=True, inline="always")
def _same_words(x, y):  # pragma: no cover - compiled
    """Whether two rows' words are equal: branch-free, so that the compiler vectorizes it."""
    diff = x[0] ^ y[0]
    for i in range(1, len(x)):
        diff |= x[i] ^ y[i]
    return diff == 0


def scan_side(
    ids: np.ndarray, layers: int, k: int, high: int, dead: np.ndarray
) -> tuple[int, int, int]:
    """Validate every row of ``ids`` (``[rows, layers * k]``): ids in [0, high) or -1; -1 on all
    slots or none; distinct ids within a layer; and mark ``dead`` the rows filled with one id
    (top-k > 1). Returns (code, row, max id) of the first bad row (code OK: none). One call of
    :func:`scan_rows` over every row (from Python: the signature the ranges use)."""
    none, no = np.empty(0, dtype=np.int64), np.empty(0, dtype=np.bool_)
    return scan_rows(
        ids, none, NO_WORDS, NO_WORDS, dead, layers, k, high, dead, no, 0, ids.shape[0]
    )


@kernel(nogil=True)
def scan_rows(
    ids, twin, words, other_words, other_dead, layers, k, high, dead, same, start, stop
):  # pragma: no cover - compiled
    """:func:`scan_side` of the rows ``[start, stop)``. ``twin`` (empty: none) names per row a
    row of another side, already validated and of the same type, at the same frame row (-1:
    none); ``words`` and ``other_words`` are both sides' :func:`row_words`. A row equal to its
    twin has its verdict (valid, a fill or not), so only the rows that differ from the other
    side's are checked, and marked ``same`` (the comparison of the two sides then reads
    neither row). Returns (code, first bad row, max id of the rows checked)."""
    width = ids.shape[1]
    top = -1
    seen = np.full(MARKS, -1, dtype=np.int64)
    stamp = 0
    paired = len(twin) > 0
    for r in range(start, stop):
        row = ids[r]
        if paired and twin[r] >= 0 and _same_words(words[r], other_words[twin[r]]):
            dead[r] = other_dead[twin[r]]
            same[r] = True
            continue
        lo = row[0]
        hi = row[0]
        for i in range(1, width):  # vectorized: the row's min and max
            v = row[i]
            lo = min(lo, v)
            hi = max(hi, v)
        if lo < -1 or hi >= high:
            return BAD_ID, r, top
        if hi > top:
            top = hi
        if lo == -1:
            if hi != -1:  # some slots -1, others not
                return PARTIAL, r, top
            continue
        if k > 1 and lo == hi:  # one id on every slot: a fill, not a route
            dead[r] = True
            continue
        if hi < BITS:  # the usual case: k distinct ids set k bits of a layer's mask
            bits = np.uint64(0)  # at most k a layer: layers * k when every layer's are distinct
            for layer in range(layers):
                mask = np.uint64(0)
                base = layer * k
                for j in range(k):  # (indexed from the layer's start: twice as fast as a range)
                    mask |= np.uint64(1) << np.uint64(row[base + j])
                bits += _popcount(mask)
            if bits != np.uint64(width):
                return REPEATED, r, top
            continue
        for layer in range(layers):
            stamp += 1
            for i in range(layer * k, layer * k + k):
                v = row[i]
                if v < MARKS:  # a repeated id within the layer has this layer's stamp
                    if seen[v] == stamp:
                        return REPEATED, r, top
                    seen[v] = stamp
                else:
                    for j in range(layer * k, i):
                        if row[j] == v:
                            return REPEATED, r, top
    return OK, -1, top


@kernel(nogil=True)
def place_rows(offsets, first, frame, of):  # pragma: no cover - compiled
    """``of[f]``: the side's row at frame row ``f``: sequence ``i``'s row ``j`` is response index
    ``first[i] + j``, at frame row ``frame[i] + 1 + first[i] + j`` when that index is -1 or
    later (the prompt's earlier rows are not placed). One walk (it was five numpy passes over
    arrays of a row's int64 each)."""
    for i in range(len(offsets) - 1):
        lo = offsets[i]
        for r in range(lo, offsets[i + 1]):
            response = first[i] + r - lo
            if response >= -1:
                of[frame[i] + 1 + response] = r


@kernel(nogil=True)
def narrow_range(ids, out, start, stop):  # pragma: no cover - compiled
    """``out[start:stop] = ids[start:stop]`` in ``out``'s narrower type (the bits it keeps),
    returning the least and greatest id of the range, so that the caller knows whether the
    narrow copy holds them all: one pass that reads the wide ids once (a min/max pass and then
    a conversion read them twice), branch-free so that the compiler vectorizes it."""
    lo = ids[start]
    hi = ids[start]
    for i in range(start, stop):
        v = ids[i]
        lo = min(lo, v)
        hi = max(hi, v)
        out[i] = v
    return lo, hi


@kernel(nogil=True)
def tail_repeats(ids, of, dead, tail):  # pragma: no cover - compiled
    """Mark ``dead`` the rows at padded-tail frame rows equal to the last real row before them;
    returns how many."""
    width = ids.shape[1]
    count = 0
    last = -1
    for f in range(len(of)):
        r = of[f]
        if not tail[f]:
            last = r
            continue
        if r < 0 or last < 0 or dead[r] or dead[last] or ids[r, 0] < 0 or ids[last, 0] < 0:
            continue
        equal = True
        for i in range(width):
            if ids[r, i] != ids[last, i]:
                equal = False
                break
        if equal:
            dead[r] = True
            count += 1
    return count


def compare_frames(
    a: np.ndarray,
    a_of: np.ndarray,
    a_dead: np.ndarray,
    b: np.ndarray,
    b_of: np.ndarray,
    b_dead: np.ndarray,
    layers: int,
    k: int,
    equal: np.ndarray,
    overlap: np.ndarray,
    compared: np.ndarray,
) -> None:
    """Per frame row recorded on both sides: the bitmask of layers with equal top-k sets, the
    per-layer overlap |A ∩ B| (ids distinct within a layer: checked by ``scan_side``). One call
    of :func:`compare_range` over every row."""
    words, no = compare_words(a, b), np.empty(0, dtype=np.bool_)
    compare_range(
        a, a_of, a_dead, b, b_of, b_dead, no, *words, layers, k, equal, overlap, compared, 0,
        len(a_of),
    )  # fmt: skip


def compare_words(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Both sides' :func:`row_words` for :func:`compare_range` when their ids are of one type;
    :data:`NO_WORDS` twice when not (their rows compared id by id)."""
    if a.dtype != b.dtype:
        return NO_WORDS, NO_WORDS
    return row_words(a), row_words(b)


# fmt: off
@kernel(nogil=True)
def compare_range(
    a, a_of, a_dead, b, b_of, b_dead, b_same, a_words, b_words, layers, k, equal, overlap,
    compared, start, stop,
):  # pragma: no cover - compiled
    # fmt: on
    """:func:`compare_frames` of the frame rows ``[start, stop)``; ``b_same`` (empty: none):
    the rows of ``b`` found equal to ``a``'s at their frame row by :func:`scan_rows`, not read
    again; ``a_words`` and ``b_words``: :func:`compare_words`."""
    width = layers * k
    by_words = a_words.shape[1] > 0
    known = len(b_same) > 0
    full = np.uint64(0)
    for layer in range(layers):
        full |= np.uint64(1) << np.uint64(layer)
    for f in range(start, stop):
        ra, rb = a_of[f], b_of[f]
        if ra < 0 or rb < 0 or a_dead[ra] or b_dead[rb] or a[ra, 0] < 0:
            continue
        twins = known and b_same[rb]  # equal rows: b's first id is a's, not -1
        if not twins and b[rb, 0] < 0:
            continue
        compared[f] = True
        row_a, row_b = a[ra], b[rb]
        if twins:
            same = True
        elif by_words:  # the usual case: the same ids in the same order
            same = _same_words(a_words[ra], b_words[rb])
        else:
            diff = 0
            for i in range(width):  # vectorized
                diff += row_a[i] != row_b[i]
            same = diff == 0
        if same:
            for layer in range(layers):
                overlap[f, layer] = k
            equal[f] = full
            continue
        bits = np.uint64(0)
        for layer in range(layers):
            lo = layer * k
            same = True
            for i in range(lo, lo + k):
                if row_a[i] != row_b[i]:
                    same = False
                    break
            if same:
                common = k
            else:
                common = 0
                for i in range(lo, lo + k):
                    x = row_a[i]
                    for j in range(lo, lo + k):
                        if row_b[j] == x:
                            common += 1
                            break
            overlap[f, layer] = common
            if common == k:
                bits |= np.uint64(1) << np.uint64(layer)
        equal[f] = bits


@kernel(nogil=True)
def token_columns(
    equal, overlap, compared, frame, own, shift, layers, eq_out, overlap_out, valid, paired, before
):  # pragma: no cover - compiled
    """The compact routing columns of the model tokens, one walk (it was a dozen numpy passes
    and gathers): token ``i`` at frame row ``own[i]`` takes that row's ``equal`` and
    ``overlap`` (``valid``: compared), ``paired`` of the row that produced its logprob
    (``own[i] - shift``: -1 not compared, 0 equal, 1 + its lowest differing layer), and
    ``before``: whether a compared row before its own in its sequence differs."""
    full = np.uint64(0)
    for layer in range(layers):
        full |= np.uint64(1) << np.uint64(layer)
    differs_before = np.empty(len(compared), dtype=np.bool_)
    for s in range(len(frame) - 1):
        seen = False
        for f in range(frame[s], frame[s + 1]):
            differs_before[f] = seen
            seen = seen or (compared[f] and equal[f] != full)
    for i in range(len(own)):
        o = own[i]
        eq_out[i] = equal[o]
        valid[i] = compared[o]
        for layer in range(layers):
            overlap_out[i, layer] = overlap[o, layer]
        before[i] = differs_before[o]
        p = o - shift
        if not compared[p]:
            paired[i] = -1
        elif equal[p] == full:
            paired[i] = 0
        else:
            low = 0
            while (equal[p] >> np.uint64(low)) & np.uint64(1):
                low += 1
            paired[i] = 1 + low


@kernel(nogil=True, inline="always")
def _same_set(a, lo_a, b, lo_b, k):  # pragma: no cover - compiled
    """Whether ``a[lo_a:lo_a + k]`` and ``b[lo_b:lo_b + k]`` hold the same ids (distinct within
    a layer, ``scan_side``); unrelated sets usually part at the first id, looked for without a
    branch (the compiler vectorizes it)."""
    x = a[lo_a]
    hit = False
    for j in range(lo_b, lo_b + k):
        hit |= b[j] == x
    if not hit:
        return False
    for i in range(lo_a + 1, lo_a + k):
        x = a[i]
        found = False
        for j in range(lo_b, lo_b + k):
            if b[j] == x:
                found = True
                break
        if not found:
            return False
    return True


@kernel(nogil=True)
def shifted_agreement(
    a, a_of, a_dead, b, b_of, b_dead, frame, layers, k, every, out
):  # pragma: no cover - compiled
    """Per frame row of every ``every``-th (each sequence's response index 0, then each
    ``every``-th after it), how many layers' top-k sets agree when the second side's row (the
    trainer's) is set against the first side's (the rollout's) misaligned: ``out[f, 0]``
    against the first side's row one position before in the sequence, ``out[f, 1]`` one after,
    ``out[f, 2]`` each layer ``l >= 1`` against the first side's layer ``l - 1`` of the same
    row, ``out[f, 3]`` each layer ``l < layers - 1`` against its layer ``l + 1``; left as they
    are (``out`` comes filled with ``stats/routing_sums.NOT_SHIFTED``) where the rows or layers are
    not there, and on the rows between. Routes a position or a layer off agree at one of these
    as the aligned rows of the same weights do; the aligned rows of far-apart weights agree far
    more than these (``checks/route_capture.py``)."""
    for s in range(len(frame) - 1):
        for f in range(frame[s] + 1, frame[s + 1], every):
            rb = b_of[f]
            if rb < 0 or b_dead[rb] or b[rb, 0] < 0:
                continue
            row_b = b[rb]
            for c in range(2):
                g = f - 1 if c == 0 else f + 1
                if g < frame[s] or g >= frame[s + 1]:
                    continue
                ra = a_of[g]
                if ra < 0 or a_dead[ra] or a[ra, 0] < 0:
                    continue
                row_a = a[ra]
                same = 0
                for layer in range(layers):
                    same += _same_set(row_a, layer * k, row_b, layer * k, k)
                out[f, c] = same
            ra = a_of[f]
            if layers < 2 or ra < 0 or a_dead[ra] or a[ra, 0] < 0:
                continue
            row_a = a[ra]
            below = 0
            above = 0
            for layer in range(1, layers):
                below += _same_set(row_a, (layer - 1) * k, row_b, layer * k, k)
                above += _same_set(row_a, layer * k, row_b, (layer - 1) * k, k)
            out[f, 2] = below
            out[f, 3] = above
