"""The common evaluation of every collective: α-β-γ terms → seconds.

A collective is described by the *terms* of its cost at a given size and rank
count — latency steps, bytes through the busiest rank's link, bytes through the
busiest node's shared resource, bytes reduced, and a congestion factor — and
:func:`evaluate` turns those terms into a time with a cluster's parameters:

    T_r = steps·α_r + softmax₂(link_bytes·β_r, node_bytes·β_node)·η + reduce_bytes·γ
    T   = (softmin_r T_r + o_call) · share(g),      0 when no transfer is needed

where r runs over the protocol regimes (one regime: the plain α-β line), η is a
congestion factor (fan-in, all-to-all), o_call the per-call overhead and
share(g) = softmax₂(1, g / slots) the slowdown of ranks that share a node's cores.
The level (intra- or inter-node α, β) is the inter-node one as soon as the
collective spans more than one node (``num_ranks > ranks_per_node``).

References:
    Hockney 1994 (α-β); Thakur, Rabenseifner & Gropp, IJHPCA 19(1) 2005 (per-collective
    costs, γ); NCCL protocols LL/LL128/Simple (NVIDIA NCCL docs, "NCCL_PROTO").
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from .._names import COLLECTIVE_NAMES
from .._params import ClusterParams
from .._smooth import soft_max2, soft_min

__all__ = ["Terms", "evaluate", "as_float", "check_static_ranks"]


class Terms(NamedTuple):
    """Cost terms of one collective call (arrays broadcastable to one shape).

    Attributes:
        steps: number of sequential latency (α) steps, ≥ 0.
        link_bytes: bytes through the busiest rank's link, in sequence, ≥ 0.
        node_bytes: bytes through the busiest node's shared resource, ≥ 0.
        reduce_bytes: bytes the busiest rank reduces (sums), ≥ 0.
        congestion: multiplicative factor ≥ 1 on the bandwidth term.
        inter: bool, the collective crosses nodes (use inter-node α, β).
    """

    steps: Float[Array, "*b"]
    link_bytes: Float[Array, "*b"]
    node_bytes: Float[Array, "*b"]
    reduce_bytes: Float[Array, "*b"]
    congestion: Float[Array, "*b"]
    inter: Array


def as_float(x: ArrayLike) -> Float[Array, "*b"]:
    """Convert sizes or counts to a floating array of jax's default float dtype."""
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        x = x.astype(jnp.result_type(float))
    return x


def check_static_ranks(message_bytes, num_ranks, ranks_per_node) -> None:
    """Static (trace-time) checks of concrete inputs: bytes ≥ 0, ranks ≥ 1.

    Traced values are not checked here (they cannot be without a runtime check);
    the public entry points check concrete inputs.

    Raises:
        ValueError: naming the argument, when a concrete value is out of range.
    """
    import numpy as np
    from jax.core import Tracer

    for name, v, lo in (
        ("message_bytes", message_bytes, 0),
        ("num_ranks", num_ranks, 1),
        ("ranks_per_node", ranks_per_node, 1),
    ):
        if isinstance(v, Tracer):
            continue
        a = np.asarray(v, dtype=np.float64)
        if a.size and (not np.all(np.isfinite(a)) or np.any(a < lo)):
            bad = a[~np.isfinite(a) | (a < lo)].ravel()[0]
            raise ValueError(f"{name} must be finite and ≥ {lo}, got {float(bad)!r}")


def evaluate(params: ClusterParams, collective: str, t: Terms) -> Float[Array, "*b"]:
    """Seconds of a collective with cost terms ``t`` under ``params``.

    Args:
        params: cluster parameters.
        collective: which row of the per-collective regime tables to use (a
            name in :data:`costmodel.COLLECTIVE_NAMES`; static).
        t: the cost terms (see :class:`Terms`).

    Returns:
        Time in seconds, shape of the broadcast terms, before the per-call
        overhead and core sharing that :func:`finish` adds (and with which it
        zeroes calls of no steps: one rank). Zero bytes leave the latency.
    """
    c = COLLECTIVE_NAMES.index(collective)
    level = jnp.where(t.inter, 1, 0)
    # (…, R) regime tables for the level in use.
    alpha = jnp.where(t.inter[..., None], params.regime_alpha_s[c, 1], params.regime_alpha_s[c, 0])
    beta = jnp.where(
        t.inter[..., None], params.regime_beta_s_per_byte[c, 1], params.regime_beta_s_per_byte[c, 0]
    )
    node_beta = params.node_beta_s_per_byte[level]
    bw_node = t.node_bytes * node_beta
    bw_link = t.link_bytes[..., None] * beta
    bw = soft_max2(bw_link, bw_node[..., None]) * t.congestion[..., None]
    per_regime = (
        t.steps[..., None] * alpha + bw + (t.reduce_bytes * params.gamma_s_per_byte)[..., None]
    )
    if params.n_regimes == 1:
        time = per_regime[..., 0]
    else:
        time = soft_min(per_regime, params.regime_sharpness[c])
    return time


def finish(params: ClusterParams, time, steps, ranks_per_node):
    """Add the per-call overhead and the core-sharing slowdown; zero when no steps."""
    g = as_float(ranks_per_node)
    share = soft_max2(jnp.ones_like(g), g / params.node_compute_slots)
    active = steps > 0
    return jnp.where(active, (time + params.call_overhead_s) * share, 0.0)
