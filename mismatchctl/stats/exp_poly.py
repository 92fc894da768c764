"""``exp`` and ``expm1`` of float64 arrays by one branch-free polynomial, in numpy.

Every model token of a report needs ``exp`` of both logprobs and ``expm1`` of their difference.
numpy's float64 ``exp`` and ``expm1`` are scalar loops on a processor without AVX-512 (8.8 and
12.3 ns a value on the 2-core bench machine: 31 ns a token, more than the compiled per-token
loop itself). The same functions written as straight-line arithmetic, which a compiler turns
into vector instructions (``kernels.token_exps``, 3 ns a value there), are defined here once;
this module is their numpy twin (``kernels_numpy.token_exps``), operation for operation, so
that both give the same bits.

The method (Cody and Waite's): ``x = n ln2 + r`` with ``n = round(x / ln2)`` (the shifter's
trick: ``x log2(e) + 1.5 * 2**52`` rounds to an integer held in the low bits) and
``|r| <= ln2 / 2`` (``ln2`` in two parts, ``n * LN2_HI`` exact); ``expm1(r) = r + r**2 h(r)``
with ``h`` the Taylor polynomial of ``(expm1(r) - r) / r**2`` to degree 12 (truncation under
1e-17 of the result), evaluated by Estrin's scheme (a dependency chain of 8 operations where
Horner's has 26: the vector loop waits on it); then ``exp(x) = 2**n (1 + expm1(r))`` and
``expm1(x) = 2**n expm1(r) + (2**n - 1)``, ``2**n`` built from its exponent bits. Near 0
(``n = 0``, ``r = x``) ``expm1`` is ``x`` plus a small correction: its relative accuracy holds.

Accuracy, measured against the C library on 2M random values of each range (logprobs,
log-ratios, uniform over [-750, 712], magnitudes 1e-300 to 700 of both signs, [-0.36, 0.36]):
at most 1 ulp for ``exp`` and 2 ulp (2.7e-16 relative) for ``expm1``; 0.1-10% of the results
differ from the C library's in the last bit (1% of log-ratios' ``expm1``; the issue #46's first
decision allows it: every metric stays within 1e-12 of the float64 reference). Outside
``[FAST_LO, FAST_HI]`` (and for NaN) the C library's functions are used as they are: there ``2**n``
would leave the normal exponents, results are subnormal, zero or beyond float64 (``inf``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

LOG2E = 1.4426950408889634  # log2(e)
SHIFTER = 6755399441055744.0  # 1.5 * 2**52: x + SHIFTER rounds x to an integer
SHIFTER_BITS = int(np.array([SHIFTER]).view(np.int64)[0])
LN2_HI = 6.93147180369123816490e-01  # ln 2 in two parts (fdlibm's): n * LN2_HI is exact
LN2_LO = 1.90821492927058770002e-10
FAST_LO, FAST_HI = -708.0, 709.0  # 2**n stays a normal double within them
# h(r) = (expm1(r) - r) / r**2 = sum H[k] r**k, H[k] = 1 / (k + 2)!, k = 0..12
H = tuple(1.0 / math.factorial(k + 2) for k in range(13))


def _parts(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``expm1(r)`` and ``2**n`` of every value, ``x = n ln2 + r`` (clamped to the fast range)."""
    xc = np.minimum(np.maximum(x, FAST_LO), FAST_HI)
    t = xc * LOG2E + SHIFTER
    n = t - SHIFTER
    r = (xc - n * LN2_HI) - n * LN2_LO
    c = H
    r2 = r * r  # Estrin's scheme (the compiled code's dependency chain is 8 operations deep)
    r4 = r2 * r2
    h = ((c[0] + c[1] * r) + (c[2] + c[3] * r) * r2) + (
        (c[4] + c[5] * r) + (c[6] + c[7] * r) * r2
    ) * r4
    h += (((c[8] + c[9] * r) + (c[10] + c[11] * r) * r2) + c[12] * r4) * (r4 * r4)
    scale = ((t.view(np.int64) - SHIFTER_BITS + 1023) << 52).view(np.float64)
    return r + r2 * h, scale


def _outside(x: np.ndarray) -> np.ndarray:
    """Where the C library's function is used: outside the fast range, and NaN."""
    return ~((x >= FAST_LO) & (x <= FAST_HI))


def _libm_at(f: Callable[[float], float], x: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``out`` with the C library's ``f`` where :func:`_outside` (``inf`` where it overflows)."""
    far = np.flatnonzero(_outside(x))
    for i in far.tolist():
        try:
            out[i] = f(float(x[i]))
        except OverflowError:
            out[i] = math.inf
    return out


def exp(x: np.ndarray) -> np.ndarray:
    """``exp`` of every value of a float64 array (the compiled ``kernels.exps``' twin)."""
    x = np.ascontiguousarray(x, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        em, scale = _parts(x)
        out = scale * (1.0 + em)
    return _libm_at(math.exp, x, out)


def expm1(x: np.ndarray) -> np.ndarray:
    """``expm1`` of every value of a float64 array."""
    x = np.ascontiguousarray(x, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        em, scale = _parts(x)
        out = scale * em + (scale - 1.0)
    return _libm_at(math.expm1, x, out)
