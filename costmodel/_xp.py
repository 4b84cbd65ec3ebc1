"""The array namespace a formula runs in: numpy for concrete sweeps, jax.numpy under tracing.

The cost model's closed forms are written once, against a namespace ``xp``
chosen from their operands: :mod:`numpy` when every operand is a numpy array
or a Python number (the exhaustive sweep, predictions, the report's curves:
no XLA compilation, no per-op dispatch), :mod:`jax.numpy` as soon as one is a
``jax.Array`` (which includes every tracer: ``jax.jit``, ``jax.grad``,
``jax.vmap`` of calibration, sensitivities and refinement). The functions
used (``where``, ``maximum``, ``exp``, ``cumsum``, …) mean the same in both.

:func:`scan` is the one sequential loop of the model (FSDP's per-unit
recursion): ``jax.lax.scan`` under jax, a Python loop over the leading axis
under numpy (vectorised over every trailing configuration axis).
"""

from __future__ import annotations

import ctypes
import functools

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "xp_of",
    "scan",
    "stop_gradient",
    "is_jax",
    "is_traced",
    "cummax",
    "to_jax",
    "keep_freed_memory",
]

#: glibc ``mallopt`` parameters (``<malloc.h>``): M_TRIM_THRESHOLD, M_MMAP_THRESHOLD.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
#: Blocks below this come from the heap and are reused after ``free`` (glibc's own
#: ceiling for its dynamic threshold, DEFAULT_MMAP_THRESHOLD_MAX on 64-bit).
HEAP_BLOCK_BYTES = 32 << 20


def _leaf(x):
    # a ClusterParams / WorkloadTerms / Terms: judge by its first array leaf
    if hasattr(x, "log_alpha"):
        return x.log_alpha
    if hasattr(x, "cum_bytes_rev"):
        return x.cum_bytes_rev
    return x


def is_jax(x) -> bool:
    """Whether ``x`` (an array, or a parameter / workload-terms object) is a jax array or tracer."""
    return isinstance(_leaf(x), jax.Array)


def xp_of(*xs):
    """:mod:`jax.numpy` if any operand is a jax array (or tracer), else :mod:`numpy`.

    Args:
        xs: arrays, Python numbers, or objects with array leaves
            (:class:`costmodel.ClusterParams`, ``WorkloadTerms``); tuples are
            searched one level deep.

    Example:
        >>> import numpy as np
        >>> xp_of(np.ones(2), 3.0) is np
        True
    """
    for x in xs:
        if isinstance(x, _NUMPY_TYPES):  # the numpy sweep's operands: no attribute probing
            continue
        if isinstance(x, tuple):
            if any(is_jax(y) for y in x):
                return jnp
        elif is_jax(x):
            return jnp
    return np


#: Operands that are never jax arrays (checked first: most of a numpy sweep's).
_NUMPY_TYPES = (np.ndarray, np.generic, float, int, bool, type(None))


def stop_gradient(x):
    """``jax.lax.stop_gradient`` for jax arrays; numpy arrays pass through."""
    return jax.lax.stop_gradient(x) if isinstance(x, jax.Array) else x


def scan(f, init, xs, xp):
    """``jax.lax.scan(f, init, xs)`` under jax; the same loop in Python under numpy.

    Args:
        f: ``(carry, x) -> (carry, y)``; x and y are tuples of arrays.
        init: the initial carry (a tuple of arrays).
        xs: a tuple of arrays scanned along their leading axis (length L).
        xp: the namespace (:func:`xp_of`).

    Returns:
        ``(carry, ys)`` with each y stacked along a new leading axis.
    """
    if xp is jnp:
        return jax.lax.scan(f, init, xs)
    length = xs[0].shape[0]
    carry, ys = init, []
    for i in range(length):
        carry, y = f(carry, tuple(x[i] for x in xs))
        ys.append(y)
    stacked = tuple(np.stack(np.broadcast_arrays(*col)) for col in zip(*ys, strict=True))
    return carry, stacked


def is_traced(x) -> bool:
    """Whether any array leaf of ``x`` is a jax tracer (inside jit, grad or vmap)."""
    return any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree_util.tree_leaves(x))


def cummax(x, xp, axis: int = 0):
    """Running maximum along ``axis``: ``jax.lax.cummax`` or ``numpy.maximum.accumulate``."""
    if xp is jnp:
        return jax.lax.cummax(x, axis=axis)
    return np.maximum.accumulate(x, axis=axis)


def to_jax(x):
    """A numpy array (or number) as a jax array of jax's default dtype for its kind.

    ``jax.device_put`` of a numpy array of the right dtype: unlike
    ``jnp.asarray``, which compiles a small XLA program per new shape (jax
    0.10), it compiles nothing. Floats become ``jnp.result_type(float)``
    (float32 unless x64 is enabled), integers ``jnp.result_type(int)``,
    booleans stay booleans.
    """
    a = np.asarray(x)
    if a.dtype.kind == "f":
        a = a.astype(jnp.result_type(float), copy=False)
    elif a.dtype.kind in "iu":
        a = a.astype(jnp.result_type(int), copy=False)
    return jax.device_put(a)


@functools.cache
def keep_freed_memory() -> bool:
    """Let freed numpy buffers of up to 32 MiB be reused instead of returned to the OS.

    A numpy sweep allocates and frees arrays of 128 KiB – a few MiB by the
    hundred (16,384 float64 configurations are exactly glibc's initial 128 KiB
    mmap threshold). glibc serves each with a fresh ``mmap`` and unmaps it on
    ``free``, so every array costs its pages' faults anew: measured here,
    768 minor faults and 43% of a 16,384-configuration ring sweep (4.2 → 2.4
    ms), 22% of a 3-regime one. glibc raises these thresholds by itself once a
    program frees a large mmapped block (``mallopt(3)``, "dynamic mmap
    threshold"), so whether a sweep paid them depended on what ran before it.
    This sets them once per process to that dynamic ceiling: ``M_MMAP_THRESHOLD``
    32 MiB and ``M_TRIM_THRESHOLD`` 64 MiB (at most that much freed memory
    stays with the process). Called by every numpy evaluation of the model
    (:class:`costmodel.NumpyParams`); a C library without ``mallopt`` (macOS,
    Windows) is left alone.

    Returns:
        True where glibc took the settings (repeated calls return the first answer).
    """
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError, TypeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    took = mallopt(_M_MMAP_THRESHOLD, HEAP_BLOCK_BYTES)
    return bool(took and mallopt(_M_TRIM_THRESHOLD, 2 * HEAP_BLOCK_BYTES))
