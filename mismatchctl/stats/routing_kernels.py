"""The compiled pass of the routing sums (``stats/routing.py``), in a module of its own so that
importing the library does not import numba (it is loaded on first use, as the other kernels)."""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def routing_sums(
    equal, compared, overlap, paired, before, k3, bins, layers, counts, k3s, by_layer, bin_n, bin_k3
):  # pragma: no cover
    """One pass over the tokens. ``counts``: compared, all equal, missing, unpaired, then the
    tokens of flipped, same, after, before; ``k3s``: their K3 sums; ``by_layer``: equal,
    overlap, first differing layer, per layer."""
    full = (
        np.uint64(0xFFFFFFFFFFFFFFFF)
        if layers >= 64
        else (np.uint64(1) << np.uint64(layers)) - np.uint64(1)
    )
    for t in range(len(equal)):
        x = k3[t]
        if compared[t]:
            counts[0] += 1
            e = equal[t]
            if e == full:
                counts[1] += 1
            first = True
            for layer in range(layers):
                bit = (e >> np.uint64(layer)) & np.uint64(1)
                if bit:
                    by_layer[0, layer] += 1
                elif first:
                    by_layer[2, layer] += 1
                    first = False
                by_layer[1, layer] += overlap[t, layer]
        else:
            counts[2] += 1
        p = paired[t]
        if p < 0:
            counts[3] += 1
        else:
            slot = 4 if p >= 1 else 5  # flipped: 1 + its lowest differing layer
            counts[slot] += 1
            k3s[slot - 4] += x
            col = 0 if p >= 1 else 1
            bin_n[bins[t], col] += 1
            bin_k3[bins[t], col] += x
        if before[t]:
            counts[6] += 1
            k3s[2] += x
        else:
            counts[7] += 1
            k3s[3] += x
