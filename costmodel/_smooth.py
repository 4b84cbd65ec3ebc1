"""Smooth, scale-free max and min of positive quantities (times).

The cost model combines times with max/min (overlap, lower envelopes of
protocol regimes, bandwidth caps). A hard max has a zero gradient on its
inactive branch; calibration needs gradients to reach every parameter the data
can inform, so the fitted model uses p-norm smoothings of positive values,
which are scale-free (a time in ns or in s is smoothed alike) and exact in the
limit p → ∞. Reports use the hard versions.
"""

from __future__ import annotations

import jax.numpy as jnp  # noqa: F401 - doctests
from jaxtyping import Array, Float

from ._xp import stop_gradient, xp_of

__all__ = ["soft_max2", "soft_min", "soft_max"]

_TINY = 1e-300


def soft_max2(a: Float[Array, "*b"], b: Float[Array, "*b"], p: int = 8) -> Float[Array, "*b"]:
    """p-norm smooth maximum of two non-negative arrays: (aᵖ + bᵖ)^(1/p).

    Lies in [max(a, b), 2^(1/p)·max(a, b)]; equals max(a, b) exactly when one
    of them is 0. Computed in log space, so it neither overflows nor underflows.

    Args:
        a, b: non-negative values of equal (broadcastable) shape.
        p: sharpness, a static power of two ≥ 1 (the root is taken by square roots).

    Example:
        >>> float(soft_max2(jnp.asarray(3.0), jnp.asarray(0.0)))
        3.0
    """
    xp = xp_of(a, b)
    a = xp.maximum(a, 0.0)
    b = xp.maximum(b, 0.0)
    m = xp.maximum(a, b)
    safe_m = xp.where(m > 0, m, 1.0)  # not max(m, tiny): 1/tiny² overflows in the gradient
    # m·((a/m)ᵖ + (b/m)ᵖ)^(1/p) = m·(1 + rᵖ)^(1/p), r = min/max: the larger ratio
    # is exactly 1 (x/x), so this is the same number with half the arithmetic; at
    # a = b = 0, r = 0 and the root stays at 1, away from sqrt'(0) = ∞ (NaN in
    # gradients through untaken branches)
    r = xp.minimum(a, b) / safe_m
    q = 1
    while q < p:  # integer powers by squaring: multiplications, no exp/log (numpy's
        r = r * r  # x**8 on float arrays calls pow() per element)
        q *= 2
    s = 1.0 + r
    q = p
    while q > 1:
        s = xp.sqrt(s)
        q //= 2
    return m * s


def soft_min(x: Float[Array, "*b r"], k: Float[Array, "*b"] | float, axis: int = -1):
    """Smooth lower envelope of positive values along ``axis``: (Σ xᵣ^(−k))^(−1/k).

    With a single entry it returns that entry exactly. It lies in
    [min·R^(−1/k), min] for R entries; k → ∞ gives the hard minimum. Used for the
    lower envelope of a collective's protocol regimes (NCCL's LL / LL128 / Simple).

    Args:
        x: positive values (seconds), regimes along ``axis``.
        k: sharpness > 0 (array broadcastable to ``x`` without ``axis``).
        axis: the regime axis.

    Example:
        >>> float(soft_min(jnp.asarray([2.0]), 4.0))
        2.0
    """
    xp = xp_of(x, k)
    x = xp.maximum(x, _TINY)
    k = xp.expand_dims(xp.asarray(k), axis) if xp.ndim(k) else k
    logx = xp.log(x)
    m = xp.min(logx, axis=axis, keepdims=True)
    s = xp.sum(xp.exp(-k * (logx - m)), axis=axis, keepdims=True)
    out = m - xp.log(s) / k
    return xp.exp(xp.squeeze(out, axis=axis))


def soft_max(x: Float[Array, "*b k"], rel_tau: float = 1e-3, axis: int = -1):
    """Log-sum-exp smooth maximum with a temperature relative to the values' scale.

    ``max ≤ soft_max ≤ max + rel_tau·scale·log(K)`` where scale is the largest
    |x| (held constant for the gradient). Used for the max over buckets in the
    iteration timeline when a gradient must flow through it.

    Example:
        >>> round(float(soft_max(jnp.asarray([1.0, 2.0, 0.5]))), 3)
        2.0
    """
    xp = xp_of(x)
    scale = xp.maximum(xp.max(xp.abs(x), axis=axis, keepdims=True), _TINY)
    tau = rel_tau * stop_gradient(scale)
    m = xp.max(x, axis=axis, keepdims=True)
    out = m + tau * xp.log(xp.sum(xp.exp((x - m) / tau), axis=axis, keepdims=True))
    return xp.squeeze(out, axis=axis)
