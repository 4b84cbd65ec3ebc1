"""The search space and its exhaustive evaluation, plus continuous bucket refinement.

The tuner evaluates every configuration of every architecture *variant* (an
architecture with its server placement: ``ps`` dedicated or colocated, ``ring``,
…) with :func:`costmodel.iteration_time` on concrete parameters, which
evaluates the exact bucketed timeline in numpy over flat arrays of (workers,
servers, bucket cap, batch): nothing is compiled.

The bucket cap is then refined continuously for the best configurations of the
architectures that overlap communication with backward compute (for the others
the time is a sum of per-bucket costs, Σ_b (α + s_b·β) = K·α + G·β, which the
largest cap on the grid already minimises): central-difference secant steps on log bucket size
through :func:`costmodel.fluid_iteration_time` (the smooth relaxation), then the
result is snapped to the exact bucketing and kept only if the exact model says
it is faster.

References:
    Li et al., "PyTorch Distributed", VLDB 2020 (DDP's 25 MiB ``bucket_cap_mb``);
    Sergeev & Del Balso, arXiv 1802.05799 (Horovod's 64 MiB fusion threshold);
    Dowell & Jarratt, BIT 11 (1971) (the refinement's Illinois secant steps).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
import numpy as np

from costmodel import (
    ARCHITECTURE_NAMES,
    DEFAULT_BUCKET_BYTES,
    Breakdown,
    ClusterParams,
    collective_time,
    fluid_iteration_time,
    format_choices,
    get_architecture,
    iteration_time,
    memory_per_rank,
)

__all__ = [
    "DEFAULT_BUCKET_GRID",
    "HOROVOD_FUSION_BYTES",
    "Variant",
    "Sweep",
    "resolve_variants",
    "worker_grid",
    "bucket_grid",
    "sweep",
    "evaluate",
    "refine_bucket",
    "central_differences",
]

#: Horovod's default tensor-fusion threshold, 64 MiB (``HOROVOD_FUSION_THRESHOLD``).
HOROVOD_FUSION_BYTES = 64 * 1024**2

#: The default bucket caps, bytes: 0 (one collective per tensor), powers of two
#: from 64 KiB to 1 GiB, and PyTorch DDP's default 25 MiB (so that the search
#: always contains the frameworks' defaults: DDP 25 MiB, Horovod 64 MiB).
DEFAULT_BUCKET_GRID: tuple[int, ...] = tuple(
    sorted({0, DEFAULT_BUCKET_BYTES, *(2**e for e in range(16, 31))})
)

#: Fixed shapes of the small evaluations (refinement snap, intervals, draws):
#: at most ``_SMALL_REAL`` real configurations per call, padded to
#: ``_SMALL_ROWS`` rows holding exactly ``_SMALL_CAPS`` distinct caps.
_SMALL_REAL = 32
_SMALL_ROWS = 64
_SMALL_CAPS = 32


@dataclass(frozen=True)
class Variant:
    """One architecture with its placement, as the search enumerates them.

    Attributes:
        name: a name in :data:`costmodel.ARCHITECTURE_NAMES`.
        colocated: for ``ps``: servers run on workers (else dedicated machines).
    """

    name: str
    colocated: bool = False

    @property
    def arch(self):
        """The :class:`costmodel.AbstractArchitecture`."""
        return get_architecture(self.name, colocated=self.colocated)

    @property
    def label(self) -> str:
        """Human-readable, unique label: ``ring``, ``ps (dedicated)``, ``ps (colocated)``."""
        return self.arch.label

    @property
    def uses_servers(self) -> bool:
        """Whether the server count ``k`` is a search dimension (``ps``, ``hybrid``)."""
        return bool(self.arch.uses_servers)

    @property
    def dedicated_servers(self) -> bool:
        """Whether servers are extra machines (billed with the server price)."""
        return self.name == "ps" and not self.colocated

    @property
    def overlaps(self) -> bool:
        """Whether communication overlaps backward compute (bucket size has an interior optimum)."""
        return bool(self.arch.overlaps)


#: Architectures that only exist with several ranks per node.
_MULTI_RANK = ("ps_host", "hybrid", "hierarchical", "hsdp")

#: Extra spellings accepted for the ps placements.
_ALIASES = {
    "ps_dedicated": Variant("ps", False),
    "ps-dedicated": Variant("ps", False),
    "ps (dedicated)": Variant("ps", False),
    "ps_colocated": Variant("ps", True),
    "ps-colocated": Variant("ps", True),
    "ps (colocated)": Variant("ps", True),
}


def resolve_variants(architectures: Sequence[str] | str | None, ranks_per_node: int) -> tuple:
    """The architecture variants to search.

    Args:
        architectures: names from :data:`costmodel.ARCHITECTURE_NAMES` (``ps``
            means both placements; ``ps_dedicated`` / ``ps_colocated`` one of
            them), a comma-separated string, or ``None`` for every applicable
            one: ps (both), p2p, ring, tree, zero1, zero2, fsdp, and ps_host,
            hybrid, hierarchical, hsdp when ``ranks_per_node`` > 1.
        ranks_per_node: g ≥ 1.

    Returns:
        A tuple of :class:`Variant`, without duplicates, in a fixed order.

    Raises:
        ValueError: an unknown name (listing the valid ones), an empty list, or
            ps_host / hybrid / hierarchical / hsdp asked for with ``ranks_per_node`` = 1.

    Example:
        >>> [v.label for v in resolve_variants(["ring", "ps"], 1)]
        ['ps (dedicated)', 'ps (colocated)', 'ring']
    """
    multi = ranks_per_node > 1
    if architectures is None:
        names = [n for n in ARCHITECTURE_NAMES if multi or n not in _MULTI_RANK]
        wanted = []
        for n in names:
            wanted += [Variant("ps", False), Variant("ps", True)] if n == "ps" else [Variant(n)]
    else:
        if isinstance(architectures, str):
            architectures = [a for a in architectures.split(",") if a.strip()]
        architectures = [str(a).strip() for a in architectures]
        if not architectures:
            raise ValueError("architectures: expected at least one architecture name, got none")
        wanted = []
        for a in architectures:
            key = a.lower()
            if key in _ALIASES:
                wanted.append(_ALIASES[key])
            elif key == "ps":
                wanted += [Variant("ps", False), Variant("ps", True)]
            elif key in ARCHITECTURE_NAMES:
                if key in _MULTI_RANK and not multi:
                    raise ValueError(
                        f"architecture {a!r} needs several workers per node "
                        f"(ranks_per_node > 1), got ranks_per_node={ranks_per_node}; "
                        "pass --ranks-per-node G or drop it from --arch"
                    )
                wanted.append(Variant(key))
            else:
                valid = format_choices([*ARCHITECTURE_NAMES, "ps_dedicated", "ps_colocated"], a)
                raise ValueError(f"unknown architecture {a!r}; valid: {valid}")
    order = {n: i for i, n in enumerate(ARCHITECTURE_NAMES)}
    unique = sorted(set(wanted), key=lambda v: (order[v.name], v.colocated))
    return tuple(unique)


#: Most worker counts one search sweeps (:func:`worker_grid`): each costs about 100 KB
#: and 0.6 ms of a sweep (ResNet-50 from presets, 2-core machine: 16,384 counts
#: 10 s and 1.6 GB; 100,000 ran past 100 s, 10⁹ asked for 112 GiB), so a grid beyond it is refused
#: with the way to a coarser one (``ranks_per_node``: 16,384 nodes of 8 are
#: 131,072 workers).
MAX_WORKER_COUNTS = 16384


def worker_grid(max_workers: int, ranks_per_node: int = 1) -> np.ndarray:
    """Worker counts to search: 1..max_workers, or multiples of g when g > 1.

    ``ranks_per_node`` g is a node's capacity: a job of fewer workers than g
    runs all its ranks on one node (as torchrun, Horovod and srun place it),
    so ``max_workers`` < g searches 1..max_workers on one node
    (:func:`tuner.node_capacity_note` says so) instead of refusing.

    Raises:
        ValueError: ``max_workers`` or ``ranks_per_node`` < 1, or not an integer;
            a grid of more than :data:`MAX_WORKER_COUNTS` counts.

    Example:
        >>> worker_grid(10, 4).tolist()
        [4, 8]
        >>> worker_grid(4, 8).tolist()  # a job smaller than one node
        [1, 2, 3, 4]
    """
    for name, v in (("max_workers", max_workers), ("ranks_per_node", ranks_per_node)):
        if isinstance(v, bool) or not isinstance(v, int | np.integer):
            raise ValueError(f"{name} must be an integer ≥ 1, got {v!r}")
        if v < 1:
            raise ValueError(f"{name} must be ≥ 1, got {v}")
    step = ranks_per_node if 1 < ranks_per_node <= max_workers else 1
    if max_workers // step > MAX_WORKER_COUNTS:
        raise ValueError(
            f"max_workers {max_workers} would search {max_workers // step:,} worker counts "
            f"(every {'count' if step == 1 else f'multiple of ranks_per_node {step}'} up to "
            f"it); at most {MAX_WORKER_COUNTS:,}: lower max_workers, or give ranks_per_node "
            f"(nodes of 8 reach {8 * MAX_WORKER_COUNTS:,} workers)"
        )
    return np.arange(step, max_workers + 1, step, dtype=np.int64)


def bucket_grid(bucket_bytes, total_bytes: float) -> np.ndarray:
    """Sorted distinct bucket caps, bytes, without caps that repeat a single-bucket result.

    Caps above the smallest cap ≥ the model's gradient bytes G all give one
    bucket (the same configuration), so they are dropped.

    Args:
        bucket_bytes: caps in bytes ≥ 0 (0 = one collective per tensor), or
            ``None`` for :data:`DEFAULT_BUCKET_GRID`.
        total_bytes: G, the model's gradient bytes.

    Raises:
        ValueError: an empty list, or a negative, fractional or non-finite cap.

    Example:
        >>> bucket_grid([0, 1024, 4096, 8192], 3000).tolist()
        [0, 1024, 4096]
    """
    caps = DEFAULT_BUCKET_GRID if bucket_bytes is None else bucket_bytes
    arr = np.asarray(caps, dtype=np.float64).ravel()
    if arr.size == 0:
        raise ValueError("bucket_bytes: expected at least one bucket size, got none")
    bad = ~np.isfinite(arr) | (arr < 0) | (arr != np.round(arr))
    if bad.any():
        raise ValueError(
            f"bucket_bytes must be whole numbers of bytes ≥ 0 (0 = one collective per tensor), "
            f"got {arr[bad][0]!r}"
        )
    arr = np.unique(arr)
    big = arr[arr >= total_bytes]
    if big.size:
        arr = arr[arr <= big[0]]
    return arr.astype(np.int64)


@dataclass(frozen=True)
class Sweep:
    """Exhaustive results of one architecture variant (flat arrays of length N).

    Attributes:
        variant: the :class:`Variant`.
        workers: (N,) worker counts n.
        servers: (N,) server counts k (0 for architectures without servers).
        bucket_bytes: (N,) bucket caps, bytes (0 = one collective per tensor).
        batch_size: (N,) per-worker batch, samples.
        breakdown: a :class:`costmodel.Breakdown` of numpy arrays (N,);
            ``throughput_samples_per_s`` and ``scaling_efficiency`` are exact
            for a fixed global batch (see :func:`sweep`).
        worker_bytes, server_bytes: (N,) memory each worker / server needs for
            parameters + gradients + optimizer state (+ staging buffers of the
            sharded architectures: :func:`costmodel.memory_per_rank`), bytes.
        feasible: (N,) bool, fits in memory.
    """

    variant: Variant
    workers: np.ndarray
    servers: np.ndarray
    bucket_bytes: np.ndarray
    batch_size: np.ndarray
    breakdown: Breakdown = field(repr=False)
    worker_bytes: np.ndarray = field(repr=False)
    server_bytes: np.ndarray = field(repr=False)
    feasible: np.ndarray = field(repr=False)

    @property
    def label(self) -> str:
        """The variant's label."""
        return self.variant.label

    @property
    def iteration_s(self) -> np.ndarray:
        """(N,) iteration time, s."""
        return np.asarray(self.breakdown.iteration_s)

    @property
    def throughput(self) -> np.ndarray:
        """(N,) samples/s over all workers."""
        return np.asarray(self.breakdown.throughput_samples_per_s)

    @property
    def efficiency(self) -> np.ndarray:
        """(N,) scaling efficiency, throughput / (n × single-worker throughput)."""
        return np.asarray(self.breakdown.scaling_efficiency)

    def __len__(self) -> int:
        return int(self.workers.size)

    def to_dict(self) -> dict:
        """Plain lists: workers, servers, bucket_bytes, iteration_s, throughput, efficiency, feasible."""
        return {
            "label": self.label,
            "architecture": self.variant.name,
            "colocated": self.variant.colocated,
            "workers": self.workers.tolist(),
            "servers": self.servers.tolist(),
            "bucket_bytes": self.bucket_bytes.tolist(),
            "iteration_s": self.iteration_s.tolist(),
            "throughput": self.throughput.tolist(),
            "efficiency": self.efficiency.tolist(),
            "feasible": self.feasible.tolist(),
        }


def _batches(workers, batch_size: int, global_batch: int | None):
    """Per-worker batch (the slowest worker's: ⌈B/n⌉) and the baseline batch."""
    n = np.asarray(workers, dtype=np.float64)
    if global_batch is None:
        b = np.full_like(n, float(batch_size))
        return b, b
    return np.ceil(global_batch / n), np.full_like(n, float(global_batch))


def _fix_global(out: Breakdown, n, batch, global_batch) -> Breakdown:
    """Exact throughput and efficiency when a global batch B is split as ⌈B/n⌉ per worker."""
    if global_batch is None:
        return out
    t = np.asarray(out.iteration_s, dtype=np.float64)
    thr = global_batch / t
    eff = np.asarray(out.scaling_efficiency, dtype=np.float64) * (global_batch / n) / batch
    return Breakdown(
        *(np.asarray(getattr(out, f), dtype=np.float64) for f in Breakdown.FIELDS[:7]),
        thr,
        eff,
        np.asarray(out.num_buckets, dtype=np.float64),
    )


def _to_numpy(b: Breakdown) -> Breakdown:
    return jax.tree_util.tree_map(lambda x: np.asarray(x, dtype=np.float64), b)


def sweep(
    params: ClusterParams,
    workload,
    variant: Variant,
    workers: np.ndarray,
    bucket_caps: np.ndarray,
    *,
    ranks_per_node: int = 1,
    servers: Sequence[int] | None = None,
    global_batch: int | None = None,
    memory_bytes: float = math.inf,
    optimizer_state_factor: float = 1.0,
) -> Sweep:
    """Evaluate every (workers, servers, bucket cap) of one variant exactly.

    Server counts k (for ``ps`` and ``hybrid``) are ``servers`` or the powers of
    two, restricted to k ≤ n (``hybrid``: k ≤ the node count n/g). With a
    global batch B, each worker computes ⌈B/n⌉ samples (the slowest worker sets
    the step), throughput is B / T and efficiency T₁ / (n·T); worker counts
    with n > B are skipped.

    Args:
        params: cluster parameters.
        workload: a :class:`costmodel.Workload`.
        variant: the architecture variant.
        workers: (W,) worker counts ≥ 1.
        bucket_caps: (U,) caps, bytes ≥ 0.
        ranks_per_node: g ≥ 1.
        servers: server counts to try, or ``None`` for powers of two.
        global_batch: fixed global batch B, or ``None`` for the workload's
            batch per worker.
        memory_bytes: device memory per worker and per server, bytes.
        optimizer_state_factor: optimizer state in units of the model bytes.

    Returns:
        A :class:`Sweep`, configurations ordered by (n, k, cap).
    """
    workers = np.asarray(workers, dtype=np.int64)
    if global_batch is not None:
        workers = workers[workers <= global_batch]
    caps = np.asarray(bucket_caps, dtype=np.int64)
    if not getattr(variant.arch, "uses_bucket_bytes", True):
        caps = caps[-1:]  # fsdp/hsdp wrapped per layer block: the cap changes nothing
    g = ranks_per_node
    if variant.uses_servers:
        cand = (
            np.asarray(servers, dtype=np.int64)
            if servers is not None
            else 2 ** np.arange(0, max(1, int(workers.max()).bit_length()))
        )
        limit = workers if variant.name == "ps" else np.ceil(workers / g).astype(np.int64)
        nn, kk = np.meshgrid(workers, cand, indexing="ij")
        keep = kk <= limit[:, None]
        # a worker count without any allowed server count keeps k = 1
        none = ~keep.any(axis=1)
        keep[none, 0] = True
        kk[none, 0] = 1
        n_pairs, k_pairs = nn[keep], kk[keep]
    else:
        n_pairs, k_pairs = workers, np.zeros_like(workers)
    n = np.repeat(n_pairs, caps.size)
    k = np.repeat(k_pairs, caps.size)
    b = np.tile(caps, n_pairs.size)
    batch, base = _batches(n, workload.batch_size, global_batch)
    out = _evaluate_numpy(params, workload, variant, n, k, b, g, batch, base)
    out = _fix_global(out, n, batch, global_batch)
    wb, sb = memory_need(
        workload, variant, n, k, optimizer_state_factor, ranks_per_node=g, bucket_bytes=b,
        batch_size=batch,
    )  # fmt: skip
    feasible = (wb <= memory_bytes) & (sb <= memory_bytes)
    return Sweep(variant, n, k, b, batch, out, wb, sb, feasible)


def memory_need(
    workload,
    variant: Variant,
    workers,
    servers,
    optimizer_state_factor=1.0,
    *,
    ranks_per_node: int = 1,
    bucket_bytes=None,
    batch_size=None,
):
    """(worker bytes, server bytes) each rank needs, as numpy: :func:`costmodel.memory_per_rank`.

    Model states by the ZeRO paper's accounting for every architecture
    (parameters and gradients in the workload's dtype, ``optimizer_state_factor``
    fp32 words of optimizer state per parameter plus an fp32 master copy in
    mixed precision; sharded as each architecture shards them) plus its
    buffers (a gradient bucket; FSDP's gathered units). Evaluated once per
    distinct (workers, servers, bucket cap).

    Args:
        workload, variant: the model and the architecture variant.
        workers, servers: arrays of n ≥ 1 and k (0 means none).
        optimizer_state_factor: fp32 state words per parameter (SGD 0, momentum 1, Adam 2).
        ranks_per_node: g ≥ 1.
        bucket_bytes: caps, bytes (broadcast with ``workers``); ``None`` = 25 MiB.
        batch_size: samples per worker per step (broadcast), for a transformer's
            activations (:func:`costmodel.activation_bytes`); ``None`` = the workload's.
    """
    n = np.asarray(workers, dtype=np.float64)
    k = np.maximum(np.asarray(servers, dtype=np.float64), 1.0)
    b = np.asarray(DEFAULT_BUCKET_BYTES if bucket_bytes is None else bucket_bytes, np.float64)
    bs = np.asarray(workload.batch_size if batch_size is None else batch_size, np.float64)
    n, k, b, bs = np.broadcast_arrays(n, k, b, bs)
    triples, inverse = np.unique(
        np.stack([n.ravel(), k.ravel(), b.ravel(), bs.ravel()], axis=1),
        axis=0,
        return_inverse=True,
    )
    m = memory_per_rank(
        workload,
        variant.arch,
        triples[:, 0],
        ranks_per_node=float(ranks_per_node),
        servers=triples[:, 1],
        optimizer=float(optimizer_state_factor),
        bucket_bytes=triples[:, 2],
        batch_size=triples[:, 3],
    )
    inverse = np.asarray(inverse).ravel()
    return m.total_bytes[inverse].reshape(n.shape), m.server_bytes[inverse].reshape(n.shape)


def _evaluate_numpy(params, workload, variant, n, k, b, g, batch, base) -> Breakdown:
    """iteration_time over flat arrays, in numpy (one vectorised call per bucket cap).

    Concrete parameters make :func:`costmodel.iteration_time` evaluate its
    closed forms in numpy: no compilation, and every configuration of one
    cap in one broadcast over its exact bucketing.
    """
    out = iteration_time(
        params.to_numpy(),
        workload,
        variant.arch,
        n,
        ranks_per_node=g,
        servers=np.maximum(k, 1),
        bucket_bytes=b,
        batch_size=batch,
        base_batch_size=base,
    )
    return _to_numpy(out)


@functools.cache
def padding_grad_ok() -> bool:
    """Whether derivatives stay finite through an empty (zero-byte) bucket slot.

    Bucket tables pad short bucketings with zero-byte slots (weight 0). A
    one-off probe: the derivative of a zero-byte all_reduce's time with
    respect to the parameters. While costmodel's smooth max has a NaN
    derivative at (0, 0), this is False and differentiable evaluations are
    split by cap (no padding).
    """
    g = jax.grad(lambda p: collective_time(p, "all_reduce", 0.0, 4))(ClusterParams.create())
    leaves = jax.tree_util.tree_leaves(g)
    return bool(all(np.all(np.isfinite(np.asarray(x))) for x in leaves))


def _filler_caps(real: np.ndarray, count: int) -> np.ndarray:
    """``count`` caps not in ``real``: 0 first (it fixes the table width), then powers of two."""
    have = set(real.tolist())
    out = []
    for c in [0.0, *(float(2**e) for e in range(10, 63))]:
        if len(out) == count:
            break
        if c not in have:
            out.append(c)
    return np.asarray(out, dtype=np.float64)


def evaluate(
    params: ClusterParams,
    workload,
    variant: Variant,
    workers,
    servers,
    bucket_bytes,
    *,
    ranks_per_node: int = 1,
    batch_size=None,
    base_batch_size=None,
    differentiable: bool = False,
    split_by_cap: bool | None = None,
    stable_shapes: bool = True,
) -> Breakdown:
    """:func:`costmodel.iteration_time` for a few configurations, with stable shapes.

    (Long for its documentation only: the body groups the rows, calls the
    model per group, and ``_join``s the parts.)

    By default every call is padded to the same array and bucket-table shapes
    (filler rows and caps, including cap 0, which fixes the table's width to
    the tensor count), so calls with different configurations reuse one
    compiled function per variant; ``params`` may be traced by ``jax.vmap``.

    With ``differentiable=True`` (for ``jax.grad`` / ``jax.jvp`` with respect
    to ``params``) each distinct cap is evaluated in its own call, so that no
    bucket table holds empty padding slots: costmodel's ``soft_max2`` has a NaN
    derivative at (0, 0), which an empty slot reaches (multiplied by a zero
    weight, NaN stays NaN). One compilation per distinct bucket count.

    Args:
        params: cluster parameters (concrete or traced).
        workload: a :class:`costmodel.Workload`.
        variant: the architecture variant.
        workers, servers, bucket_bytes: (N,) arrays (servers 0 means none).
        ranks_per_node: g ≥ 1.
        batch_size, base_batch_size: (N,) per-worker and baseline batches;
            default the workload's batch.
        differentiable: see above.
        split_by_cap: force (True) or forbid (False) one call per cap;
            default: split when ``differentiable`` and :func:`padding_grad_ok`
            is False.
        stable_shapes: pad to the fixed shapes (for eager calls); False makes
            one call for all rows (inside ``jax.jit``, where the program is
            compiled once for its own shapes anyway).

    Returns:
        A :class:`costmodel.Breakdown` of jax arrays of shape (N,).
    """
    n = np.atleast_1d(np.asarray(workers, dtype=np.float64))
    k = np.maximum(np.atleast_1d(np.asarray(servers, dtype=np.float64)), 1.0)
    b = np.atleast_1d(np.asarray(bucket_bytes, dtype=np.float64))
    n, k, b = np.broadcast_arrays(n, k, b)
    batch = np.broadcast_to(
        float(workload.batch_size) if batch_size is None else np.asarray(batch_size, float),
        n.shape,
    )
    base = batch if base_batch_size is None else np.broadcast_to(base_batch_size, n.shape)
    if not any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(params)):
        # concrete parameters (possibly a numpy batch of draws): numpy, one call,
        # no padding (nothing is compiled, so shapes need not be stable)
        return iteration_time(
            params if not _is_jax_params(params) else params.to_numpy(),
            workload,
            variant.arch,
            n,
            ranks_per_node=ranks_per_node,
            servers=k,
            bucket_bytes=b,
            batch_size=batch,
            base_batch_size=base,
        )

    def call(idx, caps, extra=0, filler_caps=()):
        def cat(x, filler):
            return np.concatenate([x[idx], np.full(extra, filler)])

        return iteration_time(
            params,
            workload,
            variant.arch,
            cat(n, 1.0),
            ranks_per_node=ranks_per_node,
            servers=cat(k, 1.0),
            bucket_bytes=np.concatenate([caps, filler_caps]),
            batch_size=cat(batch, 1.0),
            base_batch_size=cat(base, 1.0),
        )

    if split_by_cap is None:
        split_by_cap = differentiable and not padding_grad_ok()
    if split_by_cap or not stable_shapes:
        groups = [np.flatnonzero(b == cap) for cap in np.unique(b)] if split_by_cap else None
        order = groups or [np.arange(n.size)]
        parts = [call(idx, b[idx]) for idx in order]
    else:
        order = [
            np.arange(start, min(start + _SMALL_REAL, n.size))
            for start in range(0, n.size, _SMALL_REAL)
        ]
        parts = [_padded_call(call, idx, b[idx]) for idx in order]
    return _join(parts, order)


def _padded_call(call, idx: np.ndarray, real: np.ndarray) -> Breakdown:
    """``call`` on ≤ ``_SMALL_REAL`` rows padded to the fixed shapes; the real rows' results."""
    fill = _filler_caps(np.unique(real), max(0, _SMALL_CAPS - np.unique(real).size))
    pad = _SMALL_ROWS - idx.size - fill.size
    out = call(idx, real, _SMALL_ROWS - idx.size, np.concatenate([fill, np.full(pad, real[-1])]))
    return jax.tree_util.tree_map(lambda x, m=idx.size: x[:m], out)


def _join(parts: list, order: list) -> Breakdown:
    """Concatenate per-group Breakdowns and put the rows back in their original order."""
    traced = any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(parts))
    xp = jnp if traced else np  # numpy for concrete values: no op-by-op dispatch
    joined = jax.tree_util.tree_map(lambda *xs: xp.concatenate(xs), *parts)
    inverse = np.argsort(np.concatenate(order), kind="stable")
    if np.array_equal(inverse, np.arange(inverse.size)):
        return joined
    return jax.tree_util.tree_map(lambda x: x[inverse], joined)


# ---------------------------------------------------------------------------
# Continuous refinement of the bucket size
# ---------------------------------------------------------------------------
#: Step in u = log bucket bytes of the refinement's central differences.
_FD_STEP = 1e-4


def refine_bucket(
    params: ClusterParams,
    workload,
    variant: Variant,
    workers: float,
    servers: float,
    start_bytes: float,
    *,
    ranks_per_node: int = 1,
    batch_size: float | None = None,
    base_batch_size: float | None = None,
    low_bytes: float,
    high_bytes: float,
    max_steps: int = 40,
    xtol: float = 1e-3,
) -> float:
    """Minimise the smooth (fluid) step time over u = log bucket size with gradient steps.

    The derivative d log T_fluid / du is a central difference, (log T(u + h)
    − log T(u − h)) / 2h with h = 10⁻⁴, of :func:`costmodel.fluid_iteration_time`
    evaluated in numpy at u − h, u, u + h in one call (the fluid model is smooth
    in u: soft max over buckets, interpolated readiness). Within a bracket around
    ``start_bytes`` (inside [``low_bytes``, ``high_bytes``]), the
    stationary point is found by secant steps on the derivative (regula falsi
    with the Illinois modification), which converges superlinearly and never
    leaves the bracket; the best u seen is returned.

    The bracket is grown from the start point against the derivative's sign
    (factors of 2) until the sign flips, so it holds the local minimum nearest
    to the grid's best, not a farther one across the fluid model's kinks.

    Args:
        params: cluster parameters.
        workload: a :class:`costmodel.Workload`.
        variant: the architecture variant.
        workers, servers: the configuration (servers ≥ 1 where used).
        start_bytes: the grid's best bucket cap, bytes > 0.
        ranks_per_node: g ≥ 1.
        batch_size, base_batch_size: per-worker and baseline batch (``None`` =
            the workload's).
        low_bytes, high_bytes: bounds of the bucket size, 0 < low < high.
        max_steps: most derivative evaluations.
        xtol: stop when the bracket is narrower than this in log bytes.

    Returns:
        The refined bucket size, bytes (a float; snap it with the exact model).

    References:
        Dowell & Jarratt, BIT 11 (1971) (the Illinois method).
    """
    G = float(workload.total_param_bytes)
    slots = int(math.ceil(G / low_bytes)) + 1
    lo, hi = math.log(low_bytes), math.log(high_bytes)
    p_np = params.to_numpy() if _is_jax_params(params) else params
    arch = variant.arch

    def value_and_slope(u: float) -> tuple[float, float]:
        us = np.asarray([u - _FD_STEP, u, u + _FD_STEP])
        with np.errstate(all="ignore"):
            t = fluid_iteration_time(
                p_np,
                workload,
                arch,
                float(workers),
                us,
                num_slots=slots,
                ranks_per_node=float(ranks_per_node),
                servers=float(max(servers, 1)),
                batch_size=None if batch_size is None else float(batch_size),
                base_batch_size=None if base_batch_size is None else float(base_batch_size),
            ).iteration_s
        lt = np.log(np.asarray(t, dtype=np.float64))
        return float(lt[1]), float((lt[2] - lt[0]) / (2.0 * _FD_STEP))

    dfdu = _BestSeen(value_and_slope)
    u0 = min(max(math.log(max(start_bytes, 1.0)), lo), hi)
    a, da, b, db = _bracket_minimum(dfdu, u0, lo, hi, max_steps)
    if da < 0 < db:
        _illinois(dfdu, a, da, b, db, xtol, max_steps)
    return math.exp(dfdu.best_u)


class _BestSeen:
    """A derivative d log T/du that counts its calls and keeps the u of the lowest T seen."""

    def __init__(self, value_and_slope):
        self._f = value_and_slope
        self.calls = 0
        self.best_value, self.best_u = math.inf, None

    def __call__(self, u: float) -> float:
        v, d = self._f(u)
        self.calls += 1
        if v < self.best_value:
            self.best_value, self.best_u = v, u
        return d


def _bracket_minimum(dfdu: _BestSeen, u0: float, lo: float, hi: float, max_steps: int):
    """``(a, f'(a), b, f'(b))`` around the minimum nearest to u0.

    Steps away from u0 by factors of 2 against the derivative's sign until
    the sign flips (or a bound, or the step budget, is hit).
    """
    d0 = dfdu(u0)
    step = math.log(2.0)
    a, da, b, db = u0, d0, u0, d0
    if d0 > 0:
        while da > 0 and a > lo and dfdu.calls < max_steps:
            b, db = a, da
            a = max(lo, a - step)
            da = dfdu(a)
    elif d0 < 0:
        while db < 0 and b < hi and dfdu.calls < max_steps:
            a, da = b, db
            b = min(hi, b + step)
            db = dfdu(b)
    return a, da, b, db


def _illinois(dfdu: _BestSeen, a, da, b, db, xtol: float, max_steps: int) -> None:
    """Regula falsi with the Illinois modification on f' over a bracket f'(a) < 0 < f'(b)."""
    side = 0
    while b - a > xtol and dfdu.calls < max_steps:
        c = (a * db - b * da) / (db - da)
        if not a < c < b:
            c = 0.5 * (a + b)
        dc = dfdu(c)
        if dc == 0:
            break
        if dc < 0:
            a, da = c, dc
            if side == -1:
                db *= 0.5
            side = -1
        else:
            b, db = c, dc
            if side == 1:
                da *= 0.5
            side = 1


# ---------------------------------------------------------------------------
# Jitted evaluation of a fixed set of configurations (for derivatives and draws)
# ---------------------------------------------------------------------------
@dataclass(frozen=True)
class TimeSpec:
    """A fixed, hashable set of configurations whose step times are a function of the parameters.

    Used as a static argument of jitted functions, so that derivatives
    (``jax.jvp`` in a profile's interval, ``jax.grad`` for elasticities) and
    parameter draws (``jax.vmap``) compile one program for the whole set —
    cached, so a repeated query does not compile again.

    Attributes:
        workload: the :class:`costmodel.Workload`.
        ranks_per_node: g.
        groups: ``((variant, workers, servers, bucket_bytes, batch, base_batch), …)``
            with tuples of floats per group.
        split_by_cap: evaluate each cap in its own call, so that derivatives
            do not meet padding's NaN (see :func:`evaluate`).
    """

    workload: object
    ranks_per_node: int
    groups: tuple
    split_by_cap: bool = False

    @classmethod
    def build(cls, workload, ranks_per_node, rows, differentiable=False):
        """A spec from rows ``[(variant, n, k, b, batch, base_batch), …]``.

        Args:
            workload, ranks_per_node: as the attributes.
            rows: the configurations.
            differentiable: the times will be differentiated (splits by cap
                while :func:`padding_grad_ok` is False).

        Returns:
            ``(spec, order)``: output position i of :func:`spec_times` holds
            row ``order[i]`` (rows are grouped by variant).
        """
        groups: dict = {}
        index: dict = {}
        for i, (v, n, k, b, batch, base) in enumerate(rows):
            groups.setdefault(v, []).append(
                (float(n), float(k), float(b), float(batch), float(base))
            )
            index.setdefault(v, []).append(i)
        split = bool(differentiable and not padding_grad_ok())
        spec = cls(
            workload,
            int(ranks_per_node),
            tuple((v, tuple(map(tuple, zip(*g, strict=True)))) for v, g in groups.items()),
            split,
        )
        order = np.asarray([i for v in groups for i in index[v]], dtype=np.int64)
        return spec, order

    def size(self) -> int:
        """Number of configurations."""
        return sum(len(cols[0]) for _, cols in self.groups)


def _is_jax_params(params) -> bool:
    return isinstance(params.log_alpha, jax.Array)


def spec_times(params, spec: TimeSpec, field: str = "iteration_s"):
    """(N,) step times (or another Breakdown field) of ``spec``'s configurations.

    Traceable (jax parameters, under ``jax.jit`` / ``jax.grad``); with numpy
    parameters it runs in numpy, and a batch of D parameter sets
    (:meth:`costmodel.ClusterParams.from_flat` of (D, P)) gives (D, N).
    """
    parts = []
    for v, (n, k, b, batch, base) in spec.groups:
        out = evaluate(
            params,
            spec.workload,
            v,
            np.asarray(n),
            np.asarray(k),
            np.asarray(b),
            ranks_per_node=spec.ranks_per_node,
            batch_size=np.asarray(batch),
            base_batch_size=np.asarray(base),
            split_by_cap=spec.split_by_cap,
            stable_shapes=False,
        )
        parts.append(getattr(out, field))
    if any(isinstance(x, jax.Array) for x in parts):
        return jnp.concatenate(parts)
    return np.concatenate(parts, axis=-1)


def spec_efficiency(params, spec: TimeSpec):
    """(N,) scaling efficiencies of ``spec``'s configurations (traceable)."""
    return spec_times(params, spec, "scaling_efficiency")


#: :func:`spec_times`, jitted with the spec static.
spec_times_jit = jax.jit(spec_times, static_argnames=("spec",))


def central_differences(primal):
    """``primal`` (params → array) whose directional derivatives are central differences.

    For a tangent v of the parameter leaves, the derivative is
    (f(θ + h·v) − f(θ − h·v)) / 2h with h = ε / max|v| (ε = 10⁻⁴ in float64,
    10⁻² in float32): the unconstrained parameters move by a factor e^{±ε}
    at most; a zero tangent has a zero derivative. A profile's interval
    (``Profile.interval``: its tangents, ``jax.jvp`` vmapped) then needs only
    the primal program, which compiles several times faster than the
    forward-mode-differentiated one, does not meet the NaN derivative that
    padding causes (see :func:`evaluate`), and averages over the model's
    kinks (hard max over buckets) instead of picking one side.

    Args:
        primal: a traceable function of one PyTree of parameters
            (:class:`costmodel.ClusterParams`) returning an array.

    Returns:
        A ``jax.custom_jvp`` function with ``primal``'s signature and values.

    Example:
        >>> f = central_differences(lambda x: x**3)
        >>> y, dy = jax.jvp(f, (jnp.asarray(2.0),), (jnp.asarray(1.0),))
        >>> round(float(dy), 2)
        12.0
    """

    @jax.custom_jvp
    def f(params):
        return primal(params)

    @f.defjvp
    def _jvp(primals, tangents):
        (p,), (v,) = primals, tangents
        y = primal(p)
        leaves = [jnp.max(jnp.abs(x)) for x in jax.tree_util.tree_leaves(v)]
        scale = functools.reduce(jnp.maximum, leaves) if leaves else jnp.zeros((), y.dtype)
        eps = 1e-4 if y.dtype == jnp.float64 else 1e-2
        h = eps / jnp.maximum(scale, 1e-30)
        plus = jax.tree_util.tree_map(lambda a, b: a + h * b, p, v)
        minus = jax.tree_util.tree_map(lambda a, b: a - h * b, p, v)
        dy = (primal(plus) - primal(minus)) / (2.0 * h)
        return y, jnp.where(scale > 0, dy, jnp.zeros_like(dy))

    return f


@functools.lru_cache(maxsize=256)
def _spec_times_fd(spec: TimeSpec):
    return central_differences(functools.partial(spec_times_jit, spec=spec))


def spec_times_fd(params, spec: TimeSpec):
    """:func:`spec_times` (jitted) whose directional derivatives are central differences.

    See :func:`central_differences`; one such function is kept per spec.
    """
    return _spec_times_fd(spec)(params)


def spec_times_draws(draws, spec: TimeSpec):
    """(D, N) step times under D stacked parameter sets, in numpy (one call per variant).

    Args:
        draws: :class:`costmodel.ClusterParams` whose leaves have a leading
            axis D: numpy leaves of :meth:`~costmodel.ClusterParams.from_flat`'s
            batched form (D, 1, *leaf), or jax leaves of shape (D, *leaf)
            (stacked by ``jax.vmap``), which are converted.
        spec: the configurations.
    """
    if _is_jax_params(draws):
        draws = draws.to_numpy(batch_ndim=1)
    return spec_times(draws, spec)
