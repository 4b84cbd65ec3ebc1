"""The common evaluation of every collective: α-β-γ terms → seconds.

A collective is described by the *terms* of its cost at a given size and rank
count — latency steps, bytes through the busiest rank's link, bytes through the
busiest node's shared resource, bytes reduced, and a congestion factor — and
:func:`evaluate` turns those terms into a time with a cluster's parameters:

    L_r = steps·α_r·c,   B_r = h(softmax₂,₃₂(link_bytes, node_bytes·ρ)·η − b)·β_r·w + reduce_bytes·γ·c
    (the node term only where the node carries more than one link's bytes)
    T_r = (1 − d)·(L_r + B_r) + d·softmax₂(L_r, B_r)
    T   = softmin_r T_r + o_call·c,      0 when no transfer is needed

where r runs over the protocol regimes (one regime: the plain α-β line), ρ the
node's cap as a share of one flow's link (β_node / β, 1 / NICs across nodes), η is a
congestion factor (fan-in, all-to-all), d the level's latency overlap (0: the
latency adds to the transfer, Hockney; 1: the larger of the two, as when the
latency of a pipelined transfer runs under its bytes), b the level's head start (bytes
a shaper's token bucket passes at once, ``ClusterParams.head_start_bytes``; h a smooth
max(0, ·), :func:`after_head_start`; none by default: h(x) = x), o_call the per-call overhead and
c = share(g) = softmax₂(1, g / slots) the slowdown of ranks that share a node's cores.
The cores drive the latency steps, the reductions, the call overhead and the
intra-node copies (shared memory, loopback): those slow by c; bytes on the
wire between nodes are the NIC's and do not (w = 1 across nodes, w = c inside
one). Measured on the emulated cluster (4 nodes × 2 ranks on 2 cores, 200 Mbit/s
NICs, 2026-12-03): a 16 MiB all_reduce took 1.40 s, the NIC's bytes at the rate
4 nodes × 1 measured; charging the wire c = 1.6 too predicted 2.01 s.
The level (intra- or inter-node α, β) is the inter-node one as soon as the
collective spans more than one node (``num_ranks > ranks_per_node``).

References:
    Hockney 1994 (α-β); Alexandrov et al., SPAA 1995 (LogGP: overhead and gap);
    Thakur, Rabenseifner & Gropp, IJHPCA 19(1) 2005 (per-collective
    costs, γ); NCCL protocols LL/LL128/Simple (NVIDIA NCCL docs, "NCCL_PROTO").
"""

from __future__ import annotations

from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Int

from .._names import COLLECTIVE_NAMES
from .._params import ClusterParams
from .._smooth import soft_max2, soft_min
from .._xp import is_jax, is_traced, xp_of

__all__ = [
    "Terms",
    "phases_in_sequence",
    "evaluate",
    "finish",
    "as_float",
    "check_static_ranks",
    "CONGESTION_EXPONENT",
    "NEGLIGIBLE_OVERLAP",
    "NODE_CAP_SHARPNESS",
    "NEGLIGIBLE_HEAD_START_BYTES",
    "NEGLIGIBLE_CACHE_EXCESS",
    "cache_is_none",
    "HEAD_START_SHARPNESS",
    "after_head_start",
    "capped_congestion",
    "CONGESTION_CAP_SHARPNESS",
    "CollectiveBatch",
    "collective_batch_time",
]


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


def phases_in_sequence(phases: tuple[Terms, ...], inter) -> Terms:
    """One :class:`Terms` of phases run one after another: steps and bytes added,
    the first phase's congestion, the level ``inter`` (the phase that crosses nodes).

    The one-call view of a collective of several phases (its ``terms``); its time is
    :meth:`AbstractCollective.time` over the phases, each at its own level.
    """
    return Terms(*(sum(col) for col in zip(*(p[:4] for p in phases), strict=True)),
                 phases[0].congestion, inter)  # fmt: skip


def as_float(x: ArrayLike) -> Float[Array, "*b"]:
    """Sizes or counts as a floating array: a jax array of jax's default float dtype
    for jax input, else a float64 numpy array (numpy input, Python numbers)."""
    xp = xp_of(x)
    if xp is np:
        return np.asarray(x, dtype=np.float64)
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


def evaluate(
    params: ClusterParams,
    collective: str | Int[Array, "*b"],
    t: Terms,
    ranks_per_node: ArrayLike,
    contention: ArrayLike = 1.0,
) -> Float[Array, "*b"]:
    """Seconds of a collective with cost terms ``t`` under ``params``.

    Args:
        params: cluster parameters.
        collective: which row of the per-collective regime tables to use: a
            name in :data:`costmodel.COLLECTIVE_NAMES` (static), or an integer
            array of indices into it, shape of the terms (one row per call:
            many collectives evaluated in one gather, see :class:`CollectiveBatch`).
        t: the cost terms (see :class:`Terms`).
        ranks_per_node: g ≥ 1 ranks sharing the node's cores (already ≤ n),
            broadcastable to the terms: the latency, reduction and intra-node
            bytes slow by :meth:`costmodel.ClusterParams.core_share` (g), the
            inter-node wire does not.
        contention: c ≥ 1, broadcastable to the terms: how many times over the
            cores are shared beyond the node's own ranks (emulated nodes that
            share a machine's CPUs, ``calibration.compute_contention``); it
            multiplies the core share as g's does. Default 1.
            :meth:`costmodel.ClusterParams.with_core_contention` is the same
            factor for a whole evaluation.

    Returns:
        Time in seconds, shape of the broadcast terms, before the per-call
        overhead that :func:`finish` adds (and with which it zeroes calls of
        no steps: one rank). Zero bytes leave the latency.
    """
    xp = xp_of(params, *t)
    c = COLLECTIVE_NAMES.index(collective) if isinstance(collective, str) else collective
    # (…, R) regime tables for the level in use. Parameters index from the
    # right, so leaves with leading batch axes (parameter draws) broadcast.
    ra = _rows(params.regime_alpha_s, c, 2, xp)
    rb = _rows(params.regime_beta_s_per_byte, c, 2, xp)
    inter = xp.asarray(t.inter)
    # regimes along a new LEADING axis, (R, 1…, *rows): each regime's line is then one
    # contiguous array, and the envelope combines R of them elementwise rather than
    # reducing along a trailing axis of length R (3× faster in numpy)
    nd = max(np.ndim(ra) - 2, *(np.ndim(x) for x in t))
    if not is_traced(inter) and (bool(np.all(inter)) or not np.any(inter)):
        level = 1 if np.all(inter) else 0  # one level for every call: a view, not a select
        alpha, beta = (_regimes_first(r[..., level, :], nd, xp) for r in (ra, rb))
    else:
        alpha, beta = (
            xp.where(
                inter, _regimes_first(r[..., 1, :], nd, xp), _regimes_first(r[..., 0, :], nd, xp)
            )
            for r in (ra, rb)
        )
    # the node's cap: node bytes at the collective's own per-flow β (its regime) times
    # the node ratio β_node / β (1 / NICs across nodes), so a fit that finds this
    # collective's flows slower than the base link finds the node's NICs so too
    nr = params.node_ratio
    ratio = xp.where(inter, nr[..., 1], nr[..., 0])
    share = _contended(params.core_share(as_float(ranks_per_node)), contention)
    wire = xp.where(inter, 1.0, share)  # the NIC's bytes do not wait on the cores
    # soft_max2(link·β, node·ratio·β) = β·soft_max2(link, node·ratio) (β > 0; the
    # p-norm is homogeneous): the cap once per call, not once per regime. A lone
    # flow (the node carries no more than its one link: a ring crossing each node
    # once, one rank per node) has no node term: its NIC is the link β measures,
    # so the cap cannot bind, and at ρ = 1 (one NIC) the smooth max would add
    # 2^(1/32) and a derivative ½ in ρ that no measurement of it could move
    shared = t.node_bytes > t.link_bytes * (1.0 + _LONE_FLOW_RTOL)
    cap = soft_max2(t.link_bytes, xp.where(shared, t.node_bytes * ratio, 0.0),
                    p=NODE_CAP_SHARPNESS)  # fmt: skip
    hs = params.head_start_bytes
    if not is_traced(hs) and np.all(np.asarray(hs) <= NEGLIGIBLE_HEAD_START_BYTES):
        bw = beta * (cap * t.congestion * wire)  # concretely none: h(x) = x, exactly
    else:
        b = xp.where(inter, hs[..., 1], hs[..., 0])
        bw = beta * (after_head_start(cap * t.congestion, b) * wire)
    kx, cb = params.cache_excess, params.cache_bytes
    if is_traced(kx) or is_traced(cb) or not cache_is_none(kx, cb):
        # beyond C bytes each byte costs (1 + k)·β: the memory hierarchy under the link
        k = xp.where(inter, kx[..., 1], kx[..., 0])
        C = xp.where(inter, cb[..., 1], cb[..., 0])
        bw = bw + beta * (k * after_head_start(cap * t.congestion, C) * wire)
    lat = alpha * (t.steps * share)
    xfer = bw + t.reduce_bytes * params.gamma_s_per_byte * share
    lo = params.latency_overlap
    if not is_traced(lo) and np.all(np.asarray(lo) <= NEGLIGIBLE_OVERLAP):
        per_regime = lat + xfer  # concretely no latency overlap: d = 0, its term vanishes
    else:
        d = xp.where(inter, lo[..., 1], lo[..., 0])
        d = xp.where(d <= NEGLIGIBLE_OVERLAP, 0.0, d)  # the default: α + S·β exactly
        per_regime = lat + xfer - d * (lat + xfer - soft_max2(lat, xfer))
    if params.n_regimes == 1:
        time = per_regime[0]
    else:
        time = soft_min(per_regime, _rows(params.regime_sharpness, c, 0, xp), axis=0)
    return time


def _regimes_first(x, nd: int, xp):
    """(*p, R) → (R, 1…, *p) with ``nd`` axes after R: the regime axis leading, the
    rest right-aligned so that it broadcasts against terms of ``nd`` dimensions
    (whose broadcast with the rest then has exactly the shape it had with R last)."""
    if x.ndim > 1:
        x = xp.transpose(x, (x.ndim - 1, *range(x.ndim - 1)))
    return xp.reshape(x, x.shape[:1] + (1,) * (nd - (x.ndim - 1)) + x.shape[1:])


def _rows(table, c, trailing: int, xp):
    """``table[..., c, <trailing axes>]``: one collective's row, or a row per call.

    A static index (a name) leaves any leading batch axes of the parameters
    as they are. An index array (N,) of a :class:`CollectiveBatch` takes the
    place of the configuration axis of batched parameters (``from_flat``'s
    (D, 1, …) leaves give (D, N, …), not (D, 1, N, …)), so that D parameter
    sets evaluate N calls as one (D, N) array.
    """
    if xp.ndim(c) == 0:
        return table[(Ellipsis, c) + (slice(None),) * trailing]
    lead = xp.ndim(table) - 1 - trailing
    out = xp.take(table, c, axis=lead)
    if lead and table.shape[lead - 1] == 1:  # the configuration axis of a batch
        out = xp.squeeze(out, axis=lead - 1)
    return out


def after_head_start(nbytes, head_start):
    """Bytes left at the link's rate once a head start has crossed: smooth max(0, B − b).

    h(B) = B − B·b / softmax₂,ₚ(B, b) (B less a smooth min(B, b), p =
    :data:`HEAD_START_SHARPNESS`, :func:`costmodel._smooth.soft_max2`): within
    [max(0, B − b), B], 0 at B = 0, (1 − 2^(−1/p))·b at B = b (8% at p = 8), within
    b·(b/B)ᵖ/p of B − b above, and B less at most b (B, to 9e-14 bytes, at the default
    b of e^−30). Differentiable in B and b everywhere for b > 0. A token-bucket shaper
    (Linux ``tc tbf``, tc-tbf(8)) passes a full bucket's ``burst`` bytes at line rate,
    then paces at its ``rate``: a transfer of B bytes after an idle gap takes
    (B − burst) / rate.

    Args:
        nbytes: B ≥ 0, bytes through the link (any shape).
        head_start: b > 0, bytes, broadcastable to ``nbytes``.

    Returns:
        Bytes, ≥ 0, the broadcast shape.
    """
    # B·(s − b)/s rather than B − B·b/s: s ≥ max(B, b) ≥ b holds in floating point
    # (soft_max2 multiplies the larger by a root ≥ 1), so h ≥ 0 and ∂h/∂B is exactly 0,
    # not a rounding below it, at B = 0
    s = soft_max2(nbytes, head_start, p=HEAD_START_SHARPNESS)
    return nbytes * ((s - head_start) / s)


#: Sharpness p of :func:`capped_congestion`'s smooth min(η − 1, c): at η − 1 = c the
#: factor is 1 + 2^(−1/p)·c (1 + 0.917·c at p = 8), at η − 1 = 3c within 0.002% of 1 + c.
CONGESTION_CAP_SHARPNESS = 8


def capped_congestion(eta, cap):
    """A congestion factor η ≥ 1 held below its ceiling 1 + c: 1 + smooth min(η − 1, c).

    1 + (η − 1)·c / softmax₂,ₚ(η − 1, c) (p = :data:`CONGESTION_CAP_SHARPNESS`,
    :func:`costmodel._smooth.soft_max2`): exactly 1 at η = 1, within (η − 1)·((η − 1)
    / c)ᵖ / p of η while η − 1 ≪ c, 1 + c once η − 1 ≫ c; never above either.
    all_to_all's congestion (n−1)ᵉ under ``ClusterParams.all_to_all_congestion_cap``:
    on the emulated cluster (issue 22) its n − 1 flows per NIC cost 1.00× the wire
    time at 2 ranks and 1.34–1.40× at 3 to 6, a step then flat (a NIC's loss with
    several flows through it does not keep growing with more of them). Nothing is
    capped at the default c = e^30.

    Args:
        eta: η ≥ 1, the uncapped factor (any shape).
        cap: c > 0, broadcastable to ``eta``.

    Returns:
        The factor, in [1, min(η, 1 + c)], the broadcast shape.
    """
    xp = xp_of(eta, cap)
    m = xp.maximum(eta - 1.0, 0.0)
    return 1.0 + m * (cap / soft_max2(m, cap, p=CONGESTION_CAP_SHARPNESS))


def _contended(share, contention):
    """``share`` × ``contention``; ``share`` itself for the default 1 (the sweeps' hot
    path: no array is made)."""
    if isinstance(contention, float) and contention == 1.0:
        return share
    return share * contention


def finish(params: ClusterParams, time, steps, ranks_per_node, contention=1.0):
    """Add the per-call overhead (slowed by core sharing); zero when no steps.

    Args:
        params: cluster parameters.
        time: seconds from :func:`evaluate`, shape (*b).
        steps: the terms' latency steps (*b); 0 means no transfer (one rank).
        ranks_per_node: g ≥ 1 ranks sharing the node's cores (already ≤ n), (*b).
        contention: c ≥ 1, as :func:`evaluate`'s (default 1).

    Returns:
        time + o_call·share(g)·c where steps > 0, else 0; share:
        :meth:`costmodel.ClusterParams.core_share` (:func:`evaluate` applies
        it to the rest).
    """
    xp = xp_of(params, time, steps, ranks_per_node)
    share = _contended(params.core_share(as_float(ranks_per_node)), contention)
    active = steps > 0
    return xp.where(active, time + params.call_overhead_s * share, 0.0)


#: Sharpness p of the smooth max between a rank's link and its node's cap. Where
#: g flows share g NICs the two terms tie, and the p-norm overshoots by 2^(1/p):
#: 9% at p = 8, 2.2% at p = 32. A lone flow (one flow through its node, e.g. one
#: rank per node) has no node term at all (:data:`_LONE_FLOW_RTOL`).
NODE_CAP_SHARPNESS = 32
#: Node bytes within this relative margin of the link's are one flow (no node term).
_LONE_FLOW_RTOL = 1e-9

#: Head start (``ClusterParams.head_start_bytes``, bytes) at or below which it is taken
#: as none, so that the default (e^−30, about 9e-14 bytes) is α + S·β exactly and
#: every cost affine in its bytes. A thousandth of a byte moves no call of ≥ 1 byte
#: by more than 0.1%.
NEGLIGIBLE_HEAD_START_BYTES = 1e-3
#: Cache excess (``ClusterParams.cache_excess``) at or below which it is taken as none,
#: as is a cache of ``NO_CACHE_BYTES / 2`` bytes or more (no link carries 5e12 bytes in
#: a call), so that the defaults keep every cost affine in its bytes: a millionth more
#: per byte moves no call by more than 1e-6 of its bandwidth term.
NEGLIGIBLE_CACHE_EXCESS = 1e-6
_NEGLIGIBLE_CACHE_BYTES = 5e12


def cache_is_none(excess, cache_bytes) -> bool:
    """Whether concrete ``ClusterParams.cache_excess`` / ``cache_bytes`` values (per level,
    any leading batch axes) change no cost: on each level k ≤ :data:`NEGLIGIBLE_CACHE_EXCESS`
    or C ≥ 5e12 bytes (the defaults are e^−30 and e^30 ≈ 1.1e13)."""
    k, c = np.asarray(excess, np.float64), np.asarray(cache_bytes, np.float64)
    return bool(np.all((k <= NEGLIGIBLE_CACHE_EXCESS) | (c >= _NEGLIGIBLE_CACHE_BYTES)))


#: Sharpness p of :func:`after_head_start`'s smooth min(B, b): at B = b the bytes at
#: the link's rate are (1 − 2^(−1/p))·b (8% of b at p = 8), at B = 2b within 0.05% of b
#: of B − b.
HEAD_START_SHARPNESS = 8

#: Latency overlap (``ClusterParams.latency_overlap``) at or below which it is taken
#: as 0, so that the default (logit −30, about 1e-13) is α + S·β exactly and every
#: cost affine in its bytes (the iteration timeline's fast path).
NEGLIGIBLE_OVERLAP = 1e-12

#: Collectives whose congestion factor η is ``base ** exponent`` with a fitted
#: exponent, and the :class:`~costmodel.ClusterParams` property holding it
#: (all_to_all: (n−1)ᵉ; parameter-server fan-in/out: kᵉ). Their ``terms``
#: take the exponent as a fourth argument; with 1.0 they return the base.
CONGESTION_EXPONENT = {
    "all_to_all": "all_to_all_exponent",
    "ps_push": "fanin_exponent",
    "ps_pull": "fanin_exponent",
}
_EXPONENT_PROPERTIES = (
    "",
    "all_to_all_exponent",
    "fanin_exponent",
)  # index: CollectiveBatch.exponent


class CollectiveBatch(eqx.Module):
    """Cost terms of N collective calls of any mix of collectives, ready for any parameters.

    Build one with :func:`costmodel.collective_batch` (the terms of each call
    come from its collective's own :meth:`~costmodel.AbstractCollective.terms`,
    which depend only on S, n, g); :func:`collective_batch_time` evaluates all N
    calls under a :class:`~costmodel.ClusterParams` with one gather per regime
    table, so a jitted function of the parameters (a calibration objective)
    traces one graph, not one per collective.

    Attributes:
        terms: :class:`Terms`, each field shape (N,); ``congestion`` holds the
            *base* of the congestion factor for the collectives of
            :data:`CONGESTION_EXPONENT` (the factor at exponent 1), else the factor.
        collective: (N,) int, index into :data:`costmodel.COLLECTIVE_NAMES`.
        exponent: (N,) int, which fitted exponent applies to ``congestion``:
            0 none, 1 ``all_to_all_exponent``, 2 ``fanin_exponent``.
        ranks_per_node: (N,) float, min(g, n): the ranks sharing a node's cores.
        combine: ``None`` when every call is one row (the rows are the calls);
            else (M, N) 0/1, row → call: a call of several phases (the
            hierarchical all-reduce: :meth:`~costmodel.AbstractCollective.phases`)
            has a row per phase, ``terms``, ``collective``, ``exponent`` and
            ``ranks_per_node`` are then per row (M,), the calls' first
            phases rows 0 … N−1, the further phases after them.
        call: (M,) int, the call of each row (``arange(N)`` without ``combine``).
        contention: ``None`` (1 everywhere) or (M,) float ≥ 1 per row:
            :func:`evaluate`'s ``contention`` (emulated nodes sharing a machine's
            CPUs).
    """

    terms: Terms
    collective: Int[Array, " M"]
    exponent: Int[Array, " M"]
    ranks_per_node: Float[Array, " M"]
    combine: Float[Array, "M N"] | None = None
    call: Int[Array, " M"] | None = None
    contention: Float[Array, " M"] | None = None

    def congestion(self, params: ClusterParams) -> Float[Array, " N"]:
        """η of every call under ``params``: base ** exponent, or the fixed factor.

        all_to_all's (n−1)ᵉ is held under its ceiling (:func:`capped_congestion`).
        """
        base = self.terms.congestion
        xp = xp_of(params, base)
        eta = base
        for code, prop in enumerate(_EXPONENT_PROPERTIES):
            if code:
                factor = base ** getattr(params, prop)
                if prop == "all_to_all_exponent":
                    factor = capped_congestion(factor, params.all_to_all_congestion_cap)
                eta = xp.where(self.exponent == code, factor, eta)
        return eta


def collective_batch_time(params: ClusterParams, batch: CollectiveBatch) -> Float[Array, " N"]:
    """Seconds of every call of ``batch`` under ``params``: :func:`evaluate` then :func:`finish`.

    The same formula as :meth:`costmodel.AbstractCollective.__call__` (see the
    module docstring), vectorised over collectives; jit-, vmap- and grad-friendly
    in ``params``.

    Args:
        params: cluster parameters.
        batch: from :func:`costmodel.collective_batch`.

    Returns:
        (N,) seconds; 0 for calls of one rank. A call of several phases is the
        sum of its phases that have steps, finished once, as
        :meth:`costmodel.AbstractCollective.time` of that collective.
        With numpy parameters (:meth:`~costmodel.ClusterParams.to_numpy`) it
        runs in numpy (no XLA compilation: the report's fit figures took 4 s
        of op-by-op compiles on jax terms), with jax ones in jax.
    """
    if not is_jax(params) and is_jax(batch.terms.steps) and not is_traced(batch):
        batch = jax.tree_util.tree_map(np.asarray, batch)
    t = batch.terms._replace(congestion=batch.congestion(params))
    g = batch.ranks_per_node
    c = 1.0 if batch.contention is None else batch.contention
    e = evaluate(params, batch.collective, t, g, c)
    if batch.combine is None:
        return finish(params, e, t.steps, g, c)
    xp = xp_of(params, e)
    C = batch.combine
    N = C.shape[-1]
    e = xp.where(t.steps > 0, e, 0.0)
    # the rows 0 … N−1 are the calls' first phases: their g is the call's
    return finish(params, e @ C, t.steps @ C, g[..., :N], c if np.ndim(c) == 0 else c[..., :N])
