"""One synchronous SGD iteration as a timeline: compute, bucketed communication, overlap.

Gradients become ready in reverse layer order during backward and are packed
into buckets of at most ``bucket_bytes`` (reverse order; a parameter tensor is
never split; a tensor larger than the cap forms its own bucket; an optional
smaller first bucket, as DDP's ``first_bucket_bytes``; ``bucket_bytes = 0``
means one collective per tensor). Bucket b is ready at r_b (the backward time
until its last tensor's gradient exists) and communicates for c_b:

    start_b = max(r_b, end_{b−1}),   end_b = start_b + c_b
    T_iter  = T_fwd + max(T_bwd, end_K) + T_update + Σ_b c2_b + T_overhead

(for architectures that do not overlap, max(T_bwd, end_K) becomes
T_bwd + Σ_b c_b). The recursion unrolls to end_K = max_b (r_b + c_b + … + c_K),
a max over suffix sums, which vectorises without a sequential loop. The hard
max gives the exact value; ``smooth=True`` uses a log-sum-exp max so gradients
reach every bucket (calibration on step times, bucket-size refinement).

References:
    Li et al., "PyTorch Distributed: Experiences on Accelerating Data Parallel
    Training", VLDB 2020 (buckets, reverse order, first bucket); Sergeev & Del
    Balso, arXiv 1802.05799 (tensor fusion); Zhang et al., "Poseidon", USENIX ATC
    2017 (wait-free backpropagation); Alqahtani & Demirbas, arXiv 1909.02061.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._buckets import (  # noqa: F401 - re-exported: the timeline's public names
    DEFAULT_BUCKET_BYTES,
    Breakdown,
    BucketTable,
    WorkloadTerms,
    _compute_s,
    bucket_table,
    bucketize,
)
from ._params import ClusterParams, numpy_params
from ._smooth import soft_max
from ._xp import cummax, is_traced, xp_of
from .architectures import AbstractArchitecture, get_architecture
from .collectives import NEGLIGIBLE_HEAD_START_BYTES, NEGLIGIBLE_OVERLAP, cache_is_none

__all__ = [
    "Breakdown",
    "BucketTable",
    "bucketize",
    "bucket_table",
    "iteration_time",
    "fluid_iteration_time",
    "WorkloadTerms",
    "DEFAULT_BUCKET_BYTES",
]


def _core(
    params: ClusterParams,
    arch: AbstractArchitecture,
    wt: WorkloadTerms,
    eval_bytes,
    weights,
    ready_frac,
    n,
    g,
    k,
    batch,
    base_batch,
    smooth: bool,
    suffix=None,
    costs=None,
) -> Breakdown:
    """The iteration for one configuration, or for a batch of them.

    ``eval_bytes``/``weights``/``ready_frac`` (K, *b) describe the buckets
    along the LEADING axis: bucket b costs phase(eval_bytes_b) × weights_b.
    ``suffix``, for exact bucketings, is ``(count_suffix, bytes_suffix)``
    (K, *b): buckets and bytes from b to the last. The configuration arrays
    ``n, g, k, batch, base_batch`` (and parameter leaves with leading batch
    axes) broadcast against the trailing axes ``*b``: under ``jax.vmap`` they
    are scalars and the buckets (K,); in numpy a whole sweep is one call.
    The namespace (numpy or jax.numpy) follows the operands (:mod:`costmodel._xp`).
    ``costs``, optional: ``(phase1, phase2)`` (K, *b), each bucket's phase
    times already evaluated (the numpy sweep evaluates each distinct bucket
    size once per distinct (n, g, k) and gathers them).

    Composed of the bucket-independent :func:`_step_parts`, the buckets'
    exchange below and :func:`_assemble`; :func:`_affine_sweep` composes the
    same three pieces over a whole sweep.
    """
    xp = xp_of(params, wt, eval_bytes, weights, ready_frac, n, g, k, batch, base_batch, suffix)
    if hasattr(arch, "iteration_breakdown"):  # exchanges in forward too (fsdp, hsdp)
        out = arch.iteration_breakdown(
            params, wt, eval_bytes, weights, ready_frac, n, g, k, batch, base_batch
        )
        return Breakdown(*xp.broadcast_arrays(*(getattr(out, f) for f in Breakdown.FIELDS)))
    parts = _step_parts(params, arch, wt, n, g, k, batch, base_batch)
    bwd = parts[1]
    if costs_are_affine(params) and suffix is not None and costs is None:
        a1, b1, a2, b2 = _affine_coeffs(params, arch, wt, n, g, k)
        count_suffix, bytes_suffix = suffix
        C1 = a1 * count_suffix[0] + b1 * bytes_suffix[0]
        C2 = a2 * count_suffix[0] + b2 * bytes_suffix[0]
        count = count_suffix[0]
        if arch.overlaps:
            bwd_eff = _overlapped_backward(params, bwd, C1, ready_frac[0])
            # Σ_{j≥b} c1_j of affine costs = a1·(buckets from b) + b1·(bytes from b)
            tail = a1 * count_suffix + b1 * bytes_suffix
            core = _overlapped_end(ready_frac * bwd_eff + tail, weights, bwd_eff, smooth)
        else:
            core = _after_backward(params, bwd, C1)
    else:
        if costs is None:
            costs = (
                arch.phase1_s(params, eval_bytes, n, g, k),
                arch.phase2_s(params, eval_bytes, n, g, k),
            )
        C1, C2, core, count = _bucket_exchange(
            params, arch, costs, weights, ready_frac, bwd, smooth
        )
    return _assemble(params, arch, wt, parts, C1, C2, core, count, n, batch, base_batch)


def _bucket_exchange(params, arch, costs, weights, ready_frac, bwd, smooth):
    """The buckets' exchange from each bucket's phase times: ``(C1, C2, core, count)``.

    ``costs`` = (phase 1, phase 2) seconds and ``weights``, ``ready_frac``
    (K, *b), buckets along the leading axis; ``bwd`` (*b) one micro-batch's
    backward. C1, C2: each phase's total; core: backward with phase 1,
    overlapped (:func:`_overlapped_end`) or after it; count: the buckets.
    """
    xp = xp_of(params, *costs, weights, ready_frac, bwd)
    c1, c2 = _in_step(params, costs[0]) * weights, _in_step(params, costs[1]) * weights
    C1, C2 = xp.sum(c1, axis=0), xp.sum(c2, axis=0)
    count = xp.sum(weights, axis=0)
    if not arch.overlaps:
        return C1, C2, _after_backward(params, bwd, C1), count
    bwd_eff = _overlapped_backward(params, bwd, C1, ready_frac[0])
    tail = xp.cumsum(c1[::-1], axis=0)[::-1]
    return C1, C2, _overlapped_end(ready_frac * bwd_eff + tail, weights, bwd_eff, smooth), count


def _overlapped_end(ends, weights, bwd_eff, smooth):
    """Backward and phase 1 overlapped: max(T_bwd', max_b end_b), seconds (*b).

    end_b = r_b·T_bwd' + Σ_{j≥b} c1_j (K, *b) is when bucket b's phase 1
    would end if every later bucket followed it without a gap: the recursion
    start_b = max(r_b, end_{b−1}) unrolled. Buckets of weight 0 do not count;
    ``smooth`` takes a log-sum-exp max (:func:`costmodel._smooth.soft_max`).
    """
    xp = xp_of(ends, weights, bwd_eff)
    ends = xp.where(weights > 0, ends, 0.0)
    if smooth:
        first = xp.broadcast_to(bwd_eff, ends.shape[1:])[None]
        return soft_max(xp.concatenate([first, ends]), axis=0)
    return xp.maximum(bwd_eff, xp.max(ends, axis=0))


def _step_parts(params, arch, wt, n, g, k, batch, base_batch):
    """What a step costs apart from its buckets: ``(fwd, bwd, update, baseline)``, seconds.

    Forward and backward of ONE micro-batch (``batch`` / accumulation steps)
    with g ranks sharing a node; the update on the critical path; the step of
    the single-worker baseline without communication (scaling efficiency's
    denominator per sample). They depend on the configuration, not on its
    buckets: a sweep evaluates them once per distinct (n, g, k, batch, base).
    """
    xp = xp_of(params, wt, n, g, k, batch, base_batch)
    K = wt.accumulation_steps
    # a job smaller than a node places its n ranks on one node: n share its cores, not g
    fwd, bwd = _compute_s(params, wt, batch / K, xp.minimum(g, n))
    update = arch.update_s(params, wt.total_bytes, n, k, g)
    f1, b1 = _compute_s(params, wt, base_batch / K, xp.ones_like(wt.total_bytes))
    base = K * (f1 + b1) + wt.total_bytes * params.update_s_per_byte + params.step_overhead_s
    return fwd, bwd, update, base


def _overlapped_backward(params, bwd, C1, first_ready):
    """Backward slowed by the phase-1 communication it overlaps, T_bwd' (seconds).

    T_bwd' = T_bwd · (1 + ι · min(C1 / T_bwd, 1 − r₁)), ι =
    ``params.overlap_interference`` (compute and communication share memory
    bandwidth and cores while they overlap) and r₁ = ``first_ready`` the
    fraction of backward done when the first bucket is ready: communication
    can overlap only the backward left after it, so one bucket ready at the
    end of backward overlaps nothing and slows nothing (with min(C1/T_bwd, 1)
    the exposed communication of one bucket exceeded the communication).
    """
    xp = xp_of(params, bwd, C1, first_ready)
    window = xp.maximum(1.0 - first_ready, 0.0)
    frac = xp.minimum(C1 / xp.maximum(bwd, 1e-30), window)
    return bwd * (1.0 + params.overlap_interference * frac)


def _after_backward(params, bwd, C1):
    """Backward then phase 1, less the share h of backward it hides behind (0 by default)."""
    xp = xp_of(params, bwd, C1)
    return bwd + xp.maximum(C1 - params.backward_hide * bwd, 0.0)


def _assemble(params, arch, wt, parts, C1, C2, core, count, n, batch, base_batch) -> Breakdown:
    """The Breakdown from a step's parts and its buckets' exchange.

    ``parts`` is :func:`_step_parts`'s; ``C1``, ``C2`` each phase's total over
    the buckets, ``core`` backward with phase 1 (overlapped or after it),
    ``count`` the buckets (all seconds but the count; arrays that broadcast).
    """
    xp = xp_of(params, wt, C1, C2, core, n, batch, base_batch)
    fwd, bwd, update, base = parts
    K = wt.accumulation_steps
    overhead = params.step_overhead_s

    def times(m, x):  # m·x for a static whole m (K = 1, no accumulation: x itself)
        return x if m == 1 else m * x

    every = arch.exchanges_every_micro_step
    if every:  # K exchanges of phase 1, the step's phase 2 once
        total = times(K, fwd + core) + update + C2 + overhead
        comm, count_k = times(K, C1) + C2, K
    else:  # K − 1 micro-batches without communication, then the exchange (DDP no_sync)
        first = fwd if K == 1 else (K - 1) * (fwd + bwd) + fwd
        total = first + core + update + C2 + overhead
        comm, count_k = C1 + C2, 1
    # what the step waits on communication: total − compute − update − overhead,
    # written without that cancellation (0 exactly where nothing is exposed)
    exposed = xp.maximum(times(K if every else 1, core - bwd) + C2, 0.0)
    thr = n * batch / total
    eff = thr / (n * base_batch / base)
    fields = (times(K, fwd), times(K, bwd), comm, exposed, update, overhead, total, thr, eff)
    return Breakdown(*xp.broadcast_arrays(*fields, times(count_k, count)))


def costs_are_affine(params) -> bool:
    """True when every collective's cost is exactly affine in its bytes: one protocol
    regime, no latency overlap (``ClusterParams.latency_overlap`` ≤
    :data:`costmodel.collectives.NEGLIGIBLE_OVERLAP`) and no head start
    (``ClusterParams.head_start_bytes`` ≤
    :data:`costmodel.collectives.NEGLIGIBLE_HEAD_START_BYTES`) and no cache
    (:func:`costmodel.collectives.cache_is_none`) on both levels, checked on
    concrete values; traced parameters count as not affine)."""
    if params.n_regimes != 1:
        return False
    lo, hs = params.latency_overlap, params.head_start_bytes
    kx, cb = params.cache_excess, params.cache_bytes
    if any(is_traced(x) for x in (lo, hs, kx, cb)):
        return False
    return bool(
        np.all(np.asarray(lo) <= NEGLIGIBLE_OVERLAP)
        and np.all(np.asarray(hs) <= NEGLIGIBLE_HEAD_START_BYTES)
        and cache_is_none(kx, cb)
    )


def _affine_coeffs(params, arch, wt, n, g, k):
    """``(a1, b1, a2, b2)``: each phase's per-bucket cost a + b·s (seconds, s/byte).

    With one protocol regime and no latency overlap (:func:`costs_are_affine`)
    every per-bucket cost is exactly affine in the
    bucket's bytes (α terms + β/γ terms × s; the node cap, congestion and core
    sharing scale both alike): c_b = a + b·s_b. Two evaluations per
    configuration then replace one per bucket, and suffix sums of the costs
    follow from suffix sums of counts and bytes. Broadcasts like ``n, g, k``.
    """
    xp = xp_of(params, wt, n, g, k)
    ref = wt.total_bytes
    # both sizes in one evaluation: (2, 1, …) against the configurations' trailing axes
    ndim = max(len(np.shape(params.log_gamma)), np.ndim(n), np.ndim(g), np.ndim(k))
    s = xp.stack([xp.zeros_like(ref), ref]).reshape((2,) + (1,) * ndim)

    def line(phase):
        at = _in_step(params, phase(params, s, n, g, k))
        return at[0], (at[1] - at[0]) / ref

    (a1, b1), (a2, b2) = line(arch.phase1_s), line(arch.phase2_s)
    return a1, b1, a2, b2


def _in_step(params: ClusterParams, seconds):
    """An exchange's time inside a training step: its collectives' time × ``step_comm_factor``.

    The bucketed timeline's one place for the factor (the sharded
    architectures' schedule multiplies its gathers and reductions by the same
    property). It is 1 unless training steps were fitted
    (:func:`calibration.fit_steps`).
    """
    return seconds * params.step_comm_factor


@eqx.filter_jit
def _sweep(
    params,
    arch,
    wt,
    sizes,
    ready,
    count_suffix,
    bytes_suffix,
    idx,
    n,
    g,
    k,
    batch,
    base_batch,
    smooth,
):
    def one(i, n, g, k, b, b0):
        s = sizes[i]
        w = (s > 0).astype(s.dtype)
        return _core(
            params,
            arch,
            wt,
            s,
            w,
            ready[i],
            n,
            g,
            k,
            b,
            b0,
            smooth,
            (count_suffix[i], bytes_suffix[i]),
        )

    return jax.vmap(one)(idx, n, g, k, batch, base_batch)


def _numpy_sweep(params, arch, workload, table, idx, n, g, k, batch, base, smooth) -> Breakdown:
    """:func:`_core` in numpy over flat configurations, vectorised.

    With one protocol regime (and a bucketed architecture, hard max) every
    bucket's cost is affine in its bytes: :func:`_affine_sweep` evaluates the
    whole sweep from each configuration's affine costs and each cap's bucket
    points. Otherwise configurations are grouped by cap: each group shares
    its exact bucketing (K real buckets, no padding), each distinct bucket
    size is costed once per distinct (n, g, k) (:func:`_phase_table`), and
    one call of :func:`_core` broadcasts (K, 1…) buckets against the
    (…, N_u) configurations. Parameters with leading batch axes (draws,
    :meth:`ClusterParams.from_flat` of (D, P)) give results of shape (D, N).
    Same formulas as the jitted path: the namespace follows the operands
    (:mod:`costmodel._xp`).
    """
    params = numpy_params(params)
    wt = WorkloadTerms.from_workload(workload, numpy=True)
    # reshape, not ravel: a broadcast scalar stays a view of stride 0 (constant columns)
    n, g, k, batch, base = (
        np.asarray(x, dtype=np.float64).reshape(-1) for x in (n, g, k, batch, base)
    )
    sweepable = not hasattr(arch, "iteration_breakdown")
    if sweepable and not smooth and costs_are_affine(params):
        with np.errstate(all="ignore"):  # untaken branches of where (n = 1)
            return _affine_sweep(params, arch, wt, table, idx, n, g, k, batch, base)
    pshape = np.shape(params.log_gamma)
    shape = np.broadcast_shapes(pshape, (idx.size,))
    sizes = np.asarray(table.sizes, dtype=np.float64)
    w = (sizes > 0).astype(np.float64)
    ready = np.asarray(table.ready_frac, dtype=np.float64)
    groups = _rows_by(idx)
    with np.errstate(all="ignore"):  # untaken branches of where (n = 1, empty buckets)
        if sweepable:  # the step's parts once per row, the buckets cap by cap
            parts, _ = _per_row(params, arch, wt, n, g, k, batch, base)
            exchange = [np.zeros(shape) for _ in range(4)]  # C1, C2, core, count
            phase = _phase_table(params, arch, table, idx, groups, n, g, k)
        else:
            out = {f: np.zeros(shape) for f in Breakdown.FIELDS}
        for i, rows in enumerate(groups):
            Kr = max(1, int(table.counts[idx[rows[0]]]))
            B = len(np.broadcast_shapes(pshape, rows.shape))

            def col(x, Kr=Kr, B=B, u=idx[rows[0]]):  # one cap: its buckets broadcast over rows
                return x[u, :Kr].reshape((Kr,) + (1,) * B)

            if sweepable:
                got = _bucket_exchange(
                    params,
                    arch,
                    phase(i),
                    col(w),
                    col(ready),
                    np.take(parts[1], rows, axis=-1),
                    bool(smooth),
                )
                for dst, x in zip(exchange, got, strict=True):
                    dst[..., rows] = x
                continue
            bd = _core(
                params,
                arch,
                wt,
                col(sizes),
                col(w),
                col(ready),
                n[rows],
                g[rows],
                k[rows],
                batch[rows],
                base[rows],
                bool(smooth),
            )
            for f in Breakdown.FIELDS:
                out[f][..., rows] = getattr(bd, f)
        if sweepable:
            return _assemble(params, arch, wt, parts, *exchange, n, batch, base)
    return Breakdown(*(out[f] for f in Breakdown.FIELDS))


def _per_row(params, arch, wt, n, g, k, batch, base, also=None):
    """:func:`_step_parts` (and ``also``) once per distinct configuration row, gathered.

    Rows are (n, g, k, batch, base), k only where the architecture has
    servers; ``also(params, arch, wt, n, g, k)`` (for instance
    :func:`_affine_coeffs`) is evaluated on the same rows. Returns the parts
    and ``also``'s tuple (or None), each (*pshape, N).
    """
    kk = k if arch.uses_servers else np.ones_like(k)
    rows, row_of = _unique_rows(n, g, kk, batch, base)
    rn, rg, rk, rb, r0 = (rows[:, i] for i in range(5))
    shape = np.broadcast_shapes(np.shape(params.log_gamma), rn.shape)

    per_row = _step_parts(params, arch, wt, rn, rg, rk, rb, r0)
    if also is not None:
        per_row += tuple(also(params, arch, wt, rn, rg, rk))
    # per distinct row → per configuration: one gather of all of them, (F, *pshape, N)
    rows_of_all = np.take(np.stack([np.broadcast_to(x, shape) for x in per_row]), row_of, axis=-1)
    parts, extra = tuple(rows_of_all[:4]), tuple(rows_of_all[4:])
    return parts, (extra if also is not None else None)


def _affine_sweep(params, arch, wt, table, idx, n, g, k, batch, base) -> Breakdown:
    """:func:`_core` of a whole numpy sweep with affine costs (:func:`costs_are_affine`).

    The same pieces as :func:`_core`: :func:`_step_parts` and
    :func:`_affine_coeffs` once per distinct (n, g, k, batch, base) (k only
    where the architecture has servers), gathered to the configurations;
    C1, C2 from each cap's bucket count and bytes; the overlapped end of
    communication max(T_bwd', max_b r_b·T_bwd' + a1·(buckets from b) +
    b1·(bytes from b)) as one small matrix product per cap over its real
    buckets (:attr:`BucketTable.end_points`), nothing padded; then
    :func:`_assemble`. ``n, g, k, batch, base`` (N,) float64, ``idx`` (N,)
    rows of ``table``; parameters may carry leading batch axes (results
    (*pshape, N)). Used where nothing needs a gradient and the max is hard.
    """
    (fwd, bwd, update, base_s), coeffs = _per_row(
        params, arch, wt, n, g, k, batch, base, _affine_coeffs
    )
    a1, b1, a2, b2 = coeffs
    offsets, points, count, nbytes = table.end_points
    cnt, byt = np.take(count, idx), np.take(nbytes, idx)  # np.take: 2× a fancy index
    C1, C2 = a1 * cnt + b1 * byt, a2 * cnt + b2 * byt
    if arch.overlaps:
        bwd_eff = _overlapped_backward(params, bwd, C1, np.take(table.first_ready, idx))
        # configurations sorted by cap (a stable radix sort of small integers), so
        # that each cap's are one contiguous block: (3, *pshape, N) → (3, L, N)
        order, spans = _cap_blocks(idx, offsets.size - 1)
        X = np.stack(np.broadcast_arrays(bwd_eff, a1, b1))
        lead = X.shape[1:-1]
        X = np.ascontiguousarray(
            np.take(X.reshape(3, -1, idx.size), order, axis=-1).transpose(0, 2, 1)
        )
        peak = np.empty(X.shape[1:])  # (N, L): a block of rows is one contiguous span
        blocks = table.point_blocks
        for u, lo, hi in spans:
            ends = blocks[u] @ X[:, lo:hi].reshape(3, -1)  # (H, M·L)
            np.max(ends, axis=0, out=peak[lo:hi].reshape(-1))
        core = np.empty_like(peak)
        core[order] = peak
        core = core.T.reshape(lead + (idx.size,))
    else:
        core = _after_backward(params, bwd, C1)
    return _assemble(
        params, arch, wt, (fwd, bwd, update, base_s), C1, C2, core, cnt, n, batch, base
    )


def _cap_blocks(idx, caps: int) -> tuple:
    """Configurations sorted by cap: ``(order, spans)``, ``spans`` = [(u, lo, hi), …]
    for every cap u that has configurations, ``order[lo:hi]`` being cap u's.

    A stable radix sort of small integers; remembered for the last few ``idx``
    arrays by identity (:func:`_cap_index`'s read-only results, which every
    architecture of a sweep shares).
    """
    for key, hit in _CAP_BLOCKS:
        if key is idx:
            return hit
    small = np.int16 if caps <= 1 << 15 else np.int64
    order = np.argsort(idx.astype(small), kind="stable")
    cuts = np.concatenate([[0], np.cumsum(np.bincount(idx, minlength=caps))]).tolist()
    spans = [(u, cuts[u], cuts[u + 1]) for u in range(caps) if cuts[u + 1] > cuts[u]]
    hit = (order, spans)
    if not idx.flags.writeable:  # only _cap_index's own arrays, which nobody changes
        _CAP_BLOCKS.insert(0, (idx, hit))
        del _CAP_BLOCKS[8:]
    return hit


_CAP_BLOCKS: list = []


def _rows_by(keys) -> list:
    """Indices of the equal values of a 1-D integer array, one array per value (ascending)."""
    if keys.size == 0:
        return []
    order = np.argsort(keys, kind="stable")
    cuts = np.flatnonzero(np.diff(keys[order])) + 1
    return np.split(order, cuts)


def _phase_table(params, arch, table, idx, groups, n, g, k):
    """Both phases' time of the buckets of each cap group, each distinct cost evaluated once.

    ``groups``: (M_u,) configuration indices sharing one cap (:func:`_rows_by`
    of ``idx``). A sweep's bucketings share most of their bucket sizes
    (ResNet-50 over the default 14 caps: 703 buckets, 84 distinct sizes) and
    its caps share their configurations (n, g, k as the architecture's
    phases see them: ``phase_key``). The phases are evaluated either on the table of
    every distinct size × every distinct triple, or, where that table would be
    larger, only on the pairs some cap uses (its distinct sizes × the distinct
    triples of its configurations), and gathered.

    Returns:
        A function of a group's position → ``(c1, c2)``, each (K_u, *pshape, M_u)
        seconds: the phases of that cap's K_u buckets under its configurations.
    """
    triples, triple_of = _unique_rows(*arch.phase_key(n, g, k))
    triple_of = np.asarray(triple_of).ravel()
    pshape = np.shape(params.log_gamma)  # () or (D, 1): parameter sets against triples
    per = []
    distinct = table.distinct_sizes
    seen = np.zeros(triples.shape[0], dtype=bool)  # the triples of one group: a dense rank
    rank = np.empty(triples.shape[0], dtype=np.int64)
    for rows in groups:
        sizes_u, size_of = distinct[idx[rows[0]]]
        t = np.take(triple_of, rows)
        seen[t] = True
        trip_u = np.flatnonzero(seen)
        rank[trip_u] = np.arange(trip_u.size)
        seen[trip_u] = False
        per.append((sizes_u, size_of, trip_u, rank[t]))
    every = np.unique(np.concatenate([p[0] for p in per]))
    tn, tg, tk = (triples[:, i] for i in range(3))
    if every.size * tn.size <= sum(p[0].size * p[2].size for p in per):
        s = every.reshape((every.size,) + (1,) * max(len(pshape), 1))
        full = np.zeros(np.broadcast_shapes(s.shape, pshape, tn.shape))
        c1 = arch.phase1_s(params, s, tn, tg, tk) + full  # (S, *pshape, T)
        c2 = arch.phase2_s(params, s, tn, tg, tk) + full

        def costs(i):
            sizes_u, size_of, trip_u, trip_of = per[i]
            si = np.searchsorted(every, sizes_u)[size_of]
            ti = trip_u[trip_of]
            return tuple(np.take(np.take(c, si, axis=0), ti, axis=-1) for c in (c1, c2))

        return costs
    # the pairs each cap uses, flat: cap i's block is its sizes × its triples
    start = np.cumsum([0] + [p[0].size * p[2].size for p in per])
    s = np.concatenate([np.repeat(p[0], p[2].size) for p in per])
    t = np.concatenate([np.tile(p[2], p[0].size) for p in per])
    full = np.zeros(np.broadcast_shapes(pshape, s.shape))
    c1 = arch.phase1_s(params, s, tn[t], tg[t], tk[t]) + full  # (*pshape', P)
    c2 = arch.phase2_s(params, s, tn[t], tg[t], tk[t]) + full

    def costs(i):
        sizes_u, size_of, trip_u, trip_of = per[i]
        pos = start[i] + size_of[:, None] * trip_u.size + trip_of[None, :]  # (K_u, M_u)
        lead = len(full.shape) - 1
        return tuple(
            np.moveaxis(np.take(c, pos, axis=-1), lead, 0).reshape(
                (pos.shape[0],) + np.broadcast_shapes(pshape, (pos.shape[1],))
            )
            for c in (c1, c2)
        )

    return costs


def _unique_rows(*cols):
    """The distinct rows of equal-length 1-D float columns and each row's index among them.

    Returns ``(uniq, inverse)``: (U, C) distinct rows in lexicographic order and
    (N,) int64 with ``uniq[inverse] == rows`` — what ``np.unique(rows, axis=0,
    return_inverse=True)`` returns, which sorts structured rows and takes about
    30 ms for 16,384 of them. Whole-number columns of small range (worker,
    rank and server counts) are ranked in a dense table instead, O(N + range);
    anything else is ranked by ``np.lexsort``.
    """
    n = cols[0].shape[0]
    if n == 0:
        return np.zeros((0, len(cols))), np.zeros(0, dtype=np.int64)
    # per column (a strided (N, C) reduction is slow); a broadcast scalar (stride 0) is constant
    const = [c.strides == (0,) for c in cols]
    lo = np.array([c[0] if k else c.min() for c, k in zip(cols, const, strict=True)])
    hi = np.array([c[0] if k else c.max() for c, k in zip(cols, const, strict=True)])
    span = hi - lo + 1.0
    if np.all(np.isfinite(span)) and float(np.prod(span)) <= 4 * n + (1 << 16):
        varied = [(c - m, int(w)) for c, m, w in zip(cols, lo, span, strict=True) if w > 1]
        if all(np.array_equal(c, np.floor(c)) for c, _ in varied):
            key = np.zeros(n, dtype=np.int64)
            for c, w in varied:  # mixed radix, first column first (constant ones add nothing)
                key = key * w + c.astype(np.int64)
            seen = np.zeros(int(np.prod(span)), dtype=bool)
            seen[key] = True
            present = np.flatnonzero(seen)
            rank = np.zeros(seen.size, dtype=np.int64)
            rank[present] = np.arange(present.size)
            inverse = np.take(rank, key)
            first = np.zeros(present.size, dtype=np.int64)
            first[inverse[::-1]] = np.arange(n)[::-1]  # a row of each key
            return np.stack([c[first] for c in cols], axis=1), inverse
    rows = np.stack(cols, axis=1)
    order = np.lexsort(rows.T[::-1])
    srt = rows[order]
    new = np.ones(n, dtype=bool)
    new[1:] = np.any(srt[1:] != srt[:-1], axis=1)
    ids = np.cumsum(new) - 1
    inverse = np.empty(n, dtype=np.int64)
    inverse[order] = ids
    return srt[new], inverse


def _cap_index(bucket_bytes) -> tuple:
    """``np.unique(bucket_bytes, return_inverse=True)`` of a 1-D float64 array, memoised.

    A sweep costs the same bucket caps under every architecture (the tuner,
    a report's figures): the sort is done once per distinct array content
    (kept for the last 8 of at most 2^20 configurations; read-only results).
    """
    if bucket_bytes.size > 1 << 20:
        caps, idx = np.unique(bucket_bytes, return_inverse=True)
        return caps, np.asarray(idx).ravel()
    key = bucket_bytes.tobytes()
    hit = _CAP_INDEX.get(key)
    if hit is None:
        caps, idx = np.unique(bucket_bytes, return_inverse=True)
        hit = (caps, np.asarray(idx).ravel())
        for a in hit:
            a.flags.writeable = False
        if len(_CAP_INDEX) >= 8:
            _CAP_INDEX.pop(next(iter(_CAP_INDEX)))
        _CAP_INDEX[key] = hit
    return hit


_CAP_INDEX: dict = {}


def _resolve_arch(architecture, colocated):
    if isinstance(architecture, AbstractArchitecture):
        return architecture
    return get_architecture(str(architecture), colocated=colocated)


def _check_positive(name, arr, minimum=1.0):
    a = np.asarray(arr, dtype=np.float64)
    # the extremes are enough (NaN makes both comparisons false): no temporaries
    if a.size and not (a.min() >= minimum and a.max() < np.inf):
        bad = a[~np.isfinite(a) | (a < minimum)].ravel()[0]
        raise ValueError(f"{name} must be finite and ≥ {minimum:g}, got {float(bad)!r}")
    return a


def iteration_time(
    params: ClusterParams,
    workload,
    architecture,
    workers,
    *,
    ranks_per_node=1,
    servers=1,
    bucket_bytes=DEFAULT_BUCKET_BYTES,
    first_bucket_bytes: int | None = None,
    batch_size=None,
    base_batch_size=None,
    colocated: bool = False,
    smooth: bool = False,
) -> Breakdown:
    """Predict one iteration's time and breakdown for one or many configurations.

    ``workers``, ``ranks_per_node``, ``servers``, ``bucket_bytes`` and
    ``batch_size`` broadcast against each other (scalars or 1-D arrays); the
    configurations are evaluated at once with ``jax.vmap`` (one compilation
    per architecture and array shape).

    Args:
        params: cluster parameters (fitted profile or preset).
        workload: a :class:`costmodel.Workload`.
        architecture: a name in :data:`costmodel.ARCHITECTURE_NAMES` or an
            :class:`~costmodel.architectures.AbstractArchitecture`.
        workers: n ≥ 1 training workers.
        ranks_per_node: g ≥ 1 workers per node.
        servers: k ≥ 1 parameter servers (``ps``, ``hybrid``; ignored otherwise).
        bucket_bytes: gradient bucket cap, bytes ≥ 0 (0 = one collective per
            tensor). Default 25 MiB (PyTorch DDP).
        first_bucket_bytes: cap of the first bucket; ``None`` = ``bucket_bytes``.
        batch_size: samples per worker per step, ≥ 1; default the workload's.
        base_batch_size: per-worker batch of the single-worker baseline for
            scaling efficiency; default ``batch_size`` (fixed batch per worker).
            For a fixed global batch B, pass ``batch_size = B / n`` and
            ``base_batch_size = B``.
        colocated: ``ps`` servers run on workers (with a name ``architecture``).
        smooth: use the smooth max over buckets (for gradients).

    Returns:
        A :class:`Breakdown` of arrays of the broadcast shape (0-d for scalars).

    Raises:
        ValueError: unknown architecture; workers, ranks_per_node, servers or
            batch size < 1; negative bucket bytes; a workload without FLOPs or
            step time.

    Example:
        >>> from costmodel import preset, get_workload
        >>> p, w = preset("ethernet-10g", "v100"), get_workload("resnet50", 64)
        >>> b = iteration_time(p, w, "ring", 1)
        >>> float(b.communication_s)
        0.0

    (Long for its documentation: the body is 46 lines.)
    """
    arch = _resolve_arch(architecture, colocated)
    b0 = workload.batch_size if batch_size is None else batch_size
    n, g, k, bb, batch = np.broadcast_arrays(
        _check_positive("workers", workers),
        _check_positive("ranks_per_node", ranks_per_node),
        _check_positive("servers", servers),
        _check_positive("bucket_bytes", bucket_bytes, 0.0),
        _check_positive("batch_size", b0),
    )
    base = (
        batch
        if base_batch_size is None
        else np.broadcast_to(_check_positive("base_batch_size", base_batch_size), batch.shape)
    )
    shape = n.shape
    if n.size == 0:  # no configurations: empty results (of the parameters' batch shape)
        empty = np.zeros(np.shape(params.log_gamma)[:-1] + shape)
        return Breakdown(*(empty for _ in Breakdown.FIELDS))
    caps, idx = _cap_index(bb.ravel())
    table = (
        arch.bucket_table(workload, caps)
        if hasattr(arch, "bucket_table")
        else bucket_table(workload, caps, first_bucket_bytes)
    )
    if not np.array_equal(table.bucket_bytes[: caps.size], caps):
        idx = table.index(bb.ravel())
    if not is_traced(params):
        out = _numpy_sweep(params, arch, workload, table, idx, n, g, k, batch, base, smooth)
        pshape = np.shape(out.iteration_s)[:-1]
        if np.shape(out.iteration_s) == pshape + shape:  # flat configurations: as they are
            return out
        return jax.tree_util.tree_map(lambda x: x.reshape(pshape + shape), out)
    N = idx.size
    M = 1 << max(0, int(math.ceil(math.log2(max(N, 1)))))  # pad: fewer recompilations

    def pad(x, fill):
        x = np.asarray(x, dtype=np.float64).ravel()
        return jnp.asarray(np.concatenate([x, np.full(M - N, fill)]))

    wt = WorkloadTerms.from_workload(workload)
    out = _sweep(
        params,
        arch,
        wt,
        jnp.asarray(table.sizes),
        jnp.asarray(table.ready_frac),
        jnp.asarray(np.cumsum((table.sizes > 0)[:, ::-1], axis=1)[:, ::-1].astype(np.float64)),
        jnp.asarray(np.cumsum(table.sizes[:, ::-1], axis=1)[:, ::-1]),
        jnp.asarray(np.concatenate([idx, np.zeros(M - N, dtype=idx.dtype)])),
        pad(n, 1.0),
        pad(g, 1.0),
        pad(k, 1.0),
        pad(batch, 1.0),
        pad(base, 1.0),
        bool(smooth),
    )
    return jax.tree_util.tree_map(lambda x: x[:N].reshape(shape), out)


def fluid_iteration_time(
    params: ClusterParams,
    workload,
    architecture,
    workers,
    log_bucket_bytes,
    *,
    num_slots: int,
    ranks_per_node=1.0,
    servers=1.0,
    batch_size=None,
    base_batch_size=None,
    colocated: bool = False,
) -> Breakdown:
    """A smooth relaxation of :func:`iteration_time` in the bucket size.

    Gradient bytes are treated as a fluid: bucket j holds bytes
    [j·b, (j+1)·b) of the reverse-order gradient stream, is ready when the
    backward pass has produced them (interpolated over tensors), and costs
    c(b)·(its bytes / b), so the number of buckets G/b and the time vary
    continuously with b. Used to refine the bucket size by gradient steps on
    ``log_bucket_bytes``; the result is then snapped to the exact bucketing.

    Args:
        log_bucket_bytes: natural log of the bucket size in bytes (traced).
        num_slots: static number of bucket slots J; must satisfy J·b ≥ G for
            every b considered (the last slot takes any remainder).
        Others: as :func:`iteration_time` (scalars; jit/grad-friendly).

    Returns:
        A scalar :class:`Breakdown` (smooth max over buckets).
    """
    arch = _resolve_arch(architecture, colocated)
    # concrete inputs: numpy (nothing compiled); traced (refinement by jax.grad): jax
    xp = jnp if is_traced((params, log_bucket_bytes)) else np
    if xp is np:
        params = numpy_params(params)
        log_bucket_bytes = np.asarray(log_bucket_bytes, dtype=np.float64)
    wt = WorkloadTerms.from_workload(workload, numpy=xp is np)
    u = xp.asarray(log_bucket_bytes)
    batch = xp.asarray(float(workload.batch_size if batch_size is None else batch_size))
    base = batch if base_batch_size is None else xp.asarray(float(base_batch_size))
    b = xp.exp(u)  # (*u): several bucket sizes at once broadcast along trailing axes
    G = wt.total_bytes
    j = xp.arange(num_slots, dtype=b.dtype).reshape((num_slots,) + (1,) * u.ndim)
    start = j * b
    s = xp.clip(G - start, 0.0, b)
    s = xp.where(j == num_slots - 1, xp.maximum(G - start, 0.0), s)  # the last takes the rest
    end_bytes = xp.minimum(start + s, G)
    ready = xp.interp(end_bytes.ravel(), wt.cum_bytes_rev, wt.ready_frac_rev).reshape(s.shape)
    over = s > b
    eval_bytes = xp.where(over, s, b)
    weights = xp.where(over, 1.0, s / b)
    f = lambda x: xp.asarray(x, dtype=b.dtype)  # noqa: E731
    return _core(
        params,
        arch,
        wt,
        eval_bytes,
        weights,
        ready,
        f(workers),
        f(ranks_per_node),
        f(servers),
        batch,
        base,
        True,
    )


# ---------------------------------------------------------------------------
# The bucket schedule (the same model, bucket by bucket, for drawing)
# ---------------------------------------------------------------------------
@dataclass(frozen=True)
class BucketSchedule:
    """One iteration of one configuration, bucket by bucket (float64 numpy; seconds).

    Times are from the iteration's start (the forward pass starts at 0). K is
    the number of buckets, in the order they are communicated.

    Attributes:
        breakdown: the configuration's scalar :class:`Breakdown` (the same
            evaluation as :func:`iteration_time`'s).
        overlaps: whether phase 1 overlaps the backward pass.
        forward_s: forward compute, s.
        backward_s: backward compute as slowed by overlapping communication,
            T_bwd·(1 + ι·min(C₁/T_bwd, 1)) (T_bwd when nothing overlaps), s.
        bucket_bytes: (K,) bytes per bucket.
        ready_s: (K,) when each bucket's last gradient exists (the end of
            backward for architectures that do not overlap), s.
        start_s, end_s: (K,) phase-1 communication of each bucket, s:
            start_b = max(ready_b, end_{b−1}), end_b = start_b + c1_b.
        phase1_s, phase2_s: (K,) each bucket's phase-1 / phase-2 time, s.
        update_start_s: when the optimizer update starts, s.
        update_s: the update on the critical path, s.
        phase2_start_s: (K,) start of each bucket's phase 2 (after the update), s.
        overhead_start_s: start of the fixed per-iteration overhead, s.
        overhead_s: the overhead, s.
        iteration_s: the iteration time (``breakdown.iteration_s``; equal to
            ``overhead_start_s + overhead_s`` to rounding), s.
        exposed_s: exposed communication (as :class:`Breakdown`), s.
    """

    breakdown: Breakdown
    overlaps: bool
    forward_s: float
    backward_s: float
    bucket_bytes: np.ndarray
    ready_s: np.ndarray
    start_s: np.ndarray
    end_s: np.ndarray
    phase1_s: np.ndarray
    phase2_s: np.ndarray
    update_start_s: float
    update_s: float
    phase2_start_s: np.ndarray
    overhead_start_s: float
    overhead_s: float
    iteration_s: float
    exposed_s: float


def _schedule(params, arch, wt, sizes, ready_frac, suffix, n, g, k, batch, base_batch):
    """The Breakdown and per-bucket (ready, end, c1, c2) of one padded bucketing.

    The Breakdown is :func:`_core`'s, as in :func:`iteration_time`; its end of
    communication is max_b (r_b·T_bwd' + Σ_{j≥b} c1_j), and the same suffix
    sums give every bucket's end, end_b = max_{b'≤b}(r_b'·T_bwd' +
    Σ_{j≥b'} c1_j) − Σ_{j>b} c1_j (the unrolled recursion, prefix by prefix).
    """
    xp = xp_of(params, sizes)
    w = (sizes > 0).astype(sizes.dtype)
    bd = _core(params, arch, wt, sizes, w, ready_frac, n, g, k, batch, base_batch, False, suffix)
    c1 = _in_step(params, arch.phase1_s(params, sizes, n, g, k)) * w
    c2 = _in_step(params, arch.phase2_s(params, sizes, n, g, k)) * w
    if arch.overlaps:
        bwd_eff = _overlapped_backward(params, bd.backward_s, xp.sum(c1), ready_frac[0])
        ready = ready_frac * bwd_eff
    else:  # starts the hidden share h of backward before its end (h = 0 by default)
        bwd_eff = bd.backward_s
        ready = xp.full_like(sizes, (1.0 - params.backward_hide) * bwd_eff)
    tail = xp.cumsum(c1[::-1])[::-1]
    after = xp.concatenate([tail[1:], xp.zeros_like(tail[:1])])
    ends = cummax(xp.where(w > 0, ready + tail, -xp.inf), xp) - after
    return bd, bwd_eff, ready, ends, c1, c2


def bucket_schedule(
    params: ClusterParams,
    workload,
    architecture,
    workers,
    *,
    ranks_per_node=1,
    servers=1,
    bucket_bytes=DEFAULT_BUCKET_BYTES,
    first_bucket_bytes: int | None = None,
    batch_size=None,
    base_batch_size=None,
    colocated: bool = False,
) -> BucketSchedule:
    """One configuration's iteration bucket by bucket: when each bucket is ready, starts, ends.

    (Long for its documentation only: the body checks the configuration, then
    calls ``_schedule`` and ``_assemble_schedule``.)

    The same model as :func:`iteration_time` (its ``_core``, on the exact
    bucketing of :func:`bucket_table`), with the bucket recursion
    start_b = max(r_b, end_{b−1}), end_b = start_b + c1_b kept per bucket
    instead of only its last end; then the update, each bucket's phase 2 and
    the overhead follow in sequence:

        T = T_fwd + max(T_bwd', end_K) + T_update + Σ_b c2_b + T_overhead

    (T_bwd' + Σ_b c1_b in place of the max for architectures that do not
    overlap). ``iteration_s`` equals :func:`iteration_time`'s to rounding
    (tests/test_timeline.py checks it for every architecture).

    Args:
        params: cluster parameters.
        workload: a :class:`costmodel.Workload`.
        architecture: a name in :data:`costmodel.ARCHITECTURE_NAMES` or an
            :class:`~costmodel.architectures.AbstractArchitecture`.
        workers: n ≥ 1 (a scalar).
        ranks_per_node: g ≥ 1 (a scalar).
        servers: k ≥ 1 (a scalar; ``ps``, ``hybrid``).
        bucket_bytes: the bucket cap, bytes ≥ 0 (0 = one collective per tensor).
        first_bucket_bytes: cap of the first bucket; ``None`` = ``bucket_bytes``.
        batch_size: samples per worker per step ≥ 1; default the workload's.
        base_batch_size: baseline batch for the scaling efficiency; default
            ``batch_size``.
        colocated: ``ps`` servers run on workers (with a name ``architecture``).

    Returns:
        A :class:`BucketSchedule`.

    Raises:
        ValueError: as :func:`iteration_time`, or a configuration that is not
            a scalar.

    References:
        Li et al., VLDB 2020 (buckets in reverse order); Zhang et al.,
        "Poseidon", USENIX ATC 2017 (wait-free backpropagation).

    Example:
        >>> from costmodel import preset, get_workload
        >>> p, w = preset("ethernet-10g", "v100"), get_workload("resnet50", 64)
        >>> s = bucket_schedule(p, w, "ring", 8)
        >>> t = float(iteration_time(p, w, "ring", 8).iteration_s)
        >>> bool(abs(s.iteration_s - t) <= 1e-5 * t), bool(s.end_s[-1] <= s.update_start_s)
        (True, True)
    """
    arch = _resolve_arch(architecture, colocated)
    if hasattr(arch, "schedule"):  # fsdp, hsdp: gathers in forward too, per unit
        raise ValueError(
            f"bucket_schedule covers bucketed exchanges after backward; {arch.name} gathers "
            "and reduces per unit in forward and backward: use its schedule() "
            "(tuner.iteration_timeline does)"
        )
    b0 = workload.batch_size if batch_size is None else batch_size
    config = {
        "workers": _check_positive("workers", workers),
        "ranks_per_node": _check_positive("ranks_per_node", ranks_per_node),
        "servers": _check_positive("servers", servers),
        "bucket_bytes": _check_positive("bucket_bytes", bucket_bytes, 0.0),
        "batch_size": _check_positive("batch_size", b0),
        "base_batch_size": _check_positive(
            "base_batch_size", b0 if base_batch_size is None else base_batch_size
        ),
    }
    for name, v in config.items():
        if v.ndim:
            raise ValueError(f"{name} must be a scalar for a bucket schedule, got shape {v.shape}")
    table = bucket_table(workload, [float(config["bucket_bytes"])], first_bucket_bytes)
    K = int(table.counts[0])
    if is_traced(params):
        raise ValueError("bucket_schedule takes concrete parameters (it lays out numbers to draw)")
    params = numpy_params(params)
    f = functools.partial(np.asarray, dtype=np.float64)
    sizes = table.sizes[0, :K]
    suffix = (np.cumsum((sizes > 0)[::-1])[::-1], np.cumsum(sizes[::-1])[::-1])
    with np.errstate(all="ignore"):
        bd, bwd_eff, ready, ends, c1, c2 = _schedule(
            params,
            arch,
            WorkloadTerms.from_workload(workload, numpy=True),
            f(sizes),
            f(table.ready_frac[0, :K]),
            tuple(f(x.astype(np.float64)) for x in suffix),
            *(f(float(config[key])) for key in ("workers", "ranks_per_node", "servers")),
            f(float(config["batch_size"])),
            f(float(config["base_batch_size"])),
        )
    return _assemble_schedule(arch, _to_np(bd), float(bwd_eff), sizes[:K], ready, ends, c1, c2)


def _to_np(bd: Breakdown) -> Breakdown:
    return jax.tree_util.tree_map(lambda x: np.asarray(x, dtype=np.float64), bd)


def _assemble_schedule(arch, bd, bwd_eff, sizes, ready, ends, c1, c2) -> BucketSchedule:
    """Lay the per-bucket arrays out on one clock (the forward pass starts at 0)."""
    K = sizes.size
    fwd, update, overhead = float(bd.forward_s), float(bd.update_s), float(bd.overhead_s)
    ready, ends = (fwd + np.asarray(x, dtype=np.float64)[:K] for x in (ready, ends))
    c1, c2 = (np.asarray(x, dtype=np.float64)[:K] for x in (c1, c2))
    update_start = max(fwd + bwd_eff, float(ends[-1])) if arch.overlaps else float(ends[-1])
    after_update = update_start + update
    return BucketSchedule(
        breakdown=bd,
        overlaps=bool(arch.overlaps),
        forward_s=fwd,
        backward_s=bwd_eff,
        bucket_bytes=np.asarray(sizes, dtype=np.float64),
        ready_s=ready,
        start_s=ends - c1,
        end_s=ends,
        phase1_s=c1,
        phase2_s=c2,
        update_start_s=update_start,
        update_s=update,
        phase2_start_s=after_update + np.concatenate([[0.0], np.cumsum(c2)[:-1]]),
        overhead_start_s=after_update + float(c2.sum()),
        overhead_s=overhead,
        iteration_s=float(bd.iteration_s),
        exposed_s=float(bd.exposed_communication_s),
    )


__all__ += ["BucketSchedule", "bucket_schedule"]
