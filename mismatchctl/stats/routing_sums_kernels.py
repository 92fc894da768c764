"""The compiled pass of the routing sums (``stats/routing_sums.py``), in a module of its own so that
importing the library does not import numba (it is loaded on first use, as the other kernels)."""

from __future__ import annotations

import numpy as np

from mismatchctl.stats.numba_load import kernel


@kernel(nogil=True)
def routing_sums(
    equal,
    compared,
    overlap,
    paired,
    before,
    k3,
    bins,
    layers,
    top_k,
    counts,
    k3s,
    by_layer,
    bin_n,
    bin_k3,
    groups,
    g_counts,
    g_k3,
):  # pragma: no cover
    """One pass over the tokens. ``counts``: compared, all equal, missing, unpaired, then the
    tokens of flipped, same, after, before; ``k3s``: their K3 sums; ``by_layer``: equal,
    overlap, first differing layer, per layer. ``groups`` [splits, tokens]: each token's group
    in every split (one flat index space); per group, ``g_counts``: compared, all equal, equal
    layers, overlap, missing, unpaired, flipped, same, after, before, and ``g_k3`` the K3 sums
    of the last four. A row equal on every layer overlaps in ``top_k`` experts on each: its
    per-layer sums are added once for all such rows, at the end."""
    full = (
        np.uint64(0xFFFFFFFFFFFFFFFF)
        if layers >= 64
        else (np.uint64(1) << np.uint64(layers)) - np.uint64(1)
    )
    n_splits = groups.shape[0]
    n_full = 0
    for t in range(len(equal)):
        x = k3[t]
        c = 0
        all_eq = 0
        layer_eq = 0
        over = 0
        e = equal[t]
        if not compared[t]:
            counts[2] += 1
        elif e == full:
            c = 1
            counts[0] += 1
            counts[1] += 1
            all_eq = 1
            layer_eq = layers
            over = layers * top_k
            n_full += 1
        else:
            c = 1
            counts[0] += 1
            first = True
            for layer in range(layers):
                bit = (e >> np.uint64(layer)) & np.uint64(1)
                if bit:
                    by_layer[0, layer] += 1
                    layer_eq += 1
                elif first:
                    by_layer[2, layer] += 1
                    first = False
                o = overlap[t, layer]
                by_layer[1, layer] += o
                over += o
        p = paired[t]
        kind = -1  # 0 flipped, 1 same
        if p < 0:
            counts[3] += 1
        else:
            kind = 0 if p >= 1 else 1
            counts[4 + kind] += 1
            k3s[kind] += x
            bin_n[bins[t], kind] += 1
            bin_k3[bins[t], kind] += x
        late = 0 if before[t] else 1  # 0 after a flip, 1 before any
        counts[6 + late] += 1
        k3s[2 + late] += x
        for s in range(n_splits):
            g = groups[s, t]
            g_counts[g, 0] += c
            g_counts[g, 1] += all_eq
            g_counts[g, 2] += layer_eq
            g_counts[g, 3] += over
            g_counts[g, 4] += 1 - c
            if kind < 0:
                g_counts[g, 5] += 1
            else:
                g_counts[g, 6 + kind] += 1
                g_k3[g, kind] += x
            g_counts[g, 8 + late] += 1
            g_k3[g, 2 + late] += x
    for layer in range(layers):
        by_layer[0, layer] += n_full
        by_layer[1, layer] += n_full * top_k
