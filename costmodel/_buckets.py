"""What the timeline iterates over: gradient buckets, workload terms and the breakdown.

The building blocks of :mod:`costmodel._timeline` that the architectures need
too (the sharded ones build their own unit tables and breakdowns): DDP-style
bucketing of a workload's gradients in backward order (Li et al., VLDB 2020),
the per-workload terms of one iteration, and :class:`Breakdown`. They live
below both, so that neither imports the other.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import equinox as eqx
import jax
import numpy as np
from jaxtyping import Array, Float

from ._params import ClusterParams
from ._xp import to_jax, xp_of
from .workloads import gemm_groups, small_gemm_at

#: PyTorch DDP's default ``bucket_cap_mb`` = 25 MiB.
DEFAULT_BUCKET_BYTES = 25 * 1024**2


class Breakdown(eqx.Module):
    """One iteration's time and where it goes (all arrays of one shape; SI units).

    Attributes:
        forward_s: forward compute, s.
        backward_s: backward compute (without overlap interference), s.
        communication_s: all communication (every bucket, both phases), s.
        exposed_communication_s: the part of the iteration that is neither
            compute, update nor overhead: communication not hidden behind
            backward, plus the slowdown of backward by overlapping it, s.
        update_s: optimizer update on the critical path, s.
        overhead_s: fixed per-iteration overhead, s.
        iteration_s: the iteration time, s.
        throughput_samples_per_s: workers × batch / iteration time.
        scaling_efficiency: throughput / (workers × single-worker throughput),
            single-worker = one worker with no communication at all.
        num_buckets: buckets per iteration (fractional for the fluid model).
    """

    forward_s: Float[Array, "*b"]
    backward_s: Float[Array, "*b"]
    communication_s: Float[Array, "*b"]
    exposed_communication_s: Float[Array, "*b"]
    update_s: Float[Array, "*b"]
    overhead_s: Float[Array, "*b"]
    iteration_s: Float[Array, "*b"]
    throughput_samples_per_s: Float[Array, "*b"]
    scaling_efficiency: Float[Array, "*b"]
    num_buckets: Float[Array, "*b"]

    FIELDS = (
        "forward_s",
        "backward_s",
        "communication_s",
        "exposed_communication_s",
        "update_s",
        "overhead_s",
        "iteration_s",
        "throughput_samples_per_s",
        "scaling_efficiency",
        "num_buckets",
    )

    def to_dict(self) -> dict:
        """Plain Python floats (scalar breakdown) or lists (batched)."""
        out = {}
        for f in self.FIELDS:
            a = np.asarray(getattr(self, f), dtype=np.float64)
            out[f] = a.item() if a.ndim == 0 else a.tolist()
        return out

    def __getitem__(self, i) -> Breakdown:
        return jax.tree_util.tree_map(lambda x: x[i], self)


# ---------------------------------------------------------------------------
# Workload terms (what the timeline needs of a Workload, as arrays)
# ---------------------------------------------------------------------------
class WorkloadTerms(eqx.Module):
    """The totals and per-tensor curves of a workload the timeline uses.

    Attributes:
        fwd_flops, bwd_flops: per sample totals, FLOPs.
        total_bytes: gradient (= parameter) bytes, G.
        step_time_per_sample_s: measured single-worker step time / its batch
            size (s/sample); NaN when compute comes from FLOPs.
        fwd_share: forward fraction of compute time.
        conv_share: the share of the FLOPs in convolutions (1 for a CNN,
            ``Workload.kind == "cnn"``; else 0), run at
            ``ClusterParams.conv_efficiency`` × ``flops_per_s``.
        gemm_share, gemm_rows, gemm_width: (G,) the workload's GEMMs grouped by
            shape (:func:`costmodel.workloads.gemm_groups`): FLOP share, rows per
            sample, smaller other dimension; G = 0 when unknown.
        cum_bytes_rev, ready_frac_rev: (T,) cumulative gradient bytes and the
            fraction of backward done when each tensor's gradient is ready, in
            reverse (backward) order.
        measured: static, whether ``step_time_per_sample_s`` is used.
        accumulation_steps: static, K micro-batches per optimizer step
            (``Workload.accumulation_steps``).
        root_unit: static, whether the workload has parameters outside its
            numbered layer blocks (:func:`has_root_unit`): under a block wrap
            policy FSDP keeps them in its root unit.
    """

    fwd_flops: Float[Array, ""]
    bwd_flops: Float[Array, ""]
    total_bytes: Float[Array, ""]
    step_time_per_sample_s: Float[Array, ""]
    fwd_share: Float[Array, ""]
    conv_share: Float[Array, ""]
    gemm_share: Float[Array, " G"]
    gemm_rows: Float[Array, " G"]
    gemm_width: Float[Array, " G"]
    cum_bytes_rev: Float[Array, " T"]
    ready_frac_rev: Float[Array, " T"]
    measured: bool = eqx.field(static=True, default=False)
    accumulation_steps: int = eqx.field(static=True, default=1)
    root_unit: bool = eqx.field(static=True, default=False)

    @classmethod
    def from_workload(cls, workload, *, numpy: bool = False) -> WorkloadTerms:
        """Build from a :class:`costmodel.Workload`.

        Args:
            workload: the workload.
            numpy: float64 numpy leaves (for evaluation without XLA, see
                :mod:`costmodel._xp`) instead of jax arrays.

        Raises:
            ValueError: if the workload has no FLOPs and no measured step time.
        """
        if numpy:
            return _numpy_terms(workload)
        return jax.tree_util.tree_map(to_jax, _numpy_terms(workload))

    @classmethod
    def _build(cls, workload) -> WorkloadTerms:
        pb = np.asarray(workload.param_bytes, dtype=np.float64)[::-1]
        fwd = float(np.sum(workload.fwd_flops))
        bwd_t = np.asarray(workload.bwd_flops, dtype=np.float64)[::-1]
        bwd = float(bwd_t.sum())
        measured = workload.step_time_s is not None
        if not measured and (fwd <= 0 or bwd <= 0):
            raise ValueError(
                f"workload {workload.name!r} has no FLOP counts; give a measured single-worker "
                "step time (--step-time / Workload.with_step_time) or per-layer FLOPs"
            )
        weights = bwd_t if bwd > 0 else pb
        ready = np.cumsum(weights) / np.sum(weights)
        ready[-1] = 1.0
        step = float(workload.step_time_s) / workload.batch_size if measured else float("nan")
        share = fwd / (fwd + bwd) if fwd + bwd > 0 else 1.0 / 3.0
        f = functools.partial(np.asarray, dtype=np.float64)
        return cls(
            f(fwd),
            f(bwd),
            f(float(pb.sum())),
            f(step),
            f(share),
            f(1.0 if getattr(workload, "kind", "") == "cnn" else 0.0),
            *(f(x) for x in gemm_groups(workload)),
            f(np.cumsum(pb)),
            f(ready),
            measured,
            int(getattr(workload, "accumulation_steps", 1)),
            has_root_unit(workload.tensor_names),
        )


def block_key(name: str) -> str | None:
    """The numbered layer block a tensor belongs to, or None outside every block.

    A block is the tensor's name up to its first all-digit component
    (``model.layers.3``, ``transformer.h.11``, ``layer2.1``, ``features.0``): the
    repeated module a block wrap policy wraps (``ModuleWrapPolicy({LlamaDecoderLayer})``,
    ``transformer_auto_wrap_policy``).

    Example:
        >>> block_key("model.layers.3.self_attn.q_proj.weight"), block_key("lm_head.weight")
        ('model.layers.3', None)
    """
    parts = str(name).split(".")
    for i, p in enumerate(parts):
        if p.isdigit():
            return ".".join(parts[: i + 1])
    return None


def has_root_unit(tensor_names) -> bool:
    """Whether a block wrap policy leaves parameters in FSDP's root unit.

    True when some tensors are in numbered blocks (:func:`block_key`) and some
    are not (embeddings, the final norm, the head): those stay with the
    outermost ``FullyShardedDataParallel``. A model without numbered blocks
    has no such split (False).

    Example:
        >>> has_root_unit(["embed.weight", "layers.0.w", "head.weight"]), has_root_unit(["a", "b"])
        (True, False)
    """
    keys = [block_key(n) for n in tensor_names]
    return any(k is None for k in keys) and any(k is not None for k in keys)


@functools.lru_cache(maxsize=64)
def _numpy_terms(workload) -> WorkloadTerms:
    return WorkloadTerms._build(workload)


#: gemm_half_dim below which (concrete, numpy) a sweep skips the GEMM term: its factor
#: 1 + m½/m is then within 1e-9 of 1 (the presets without one: e^−30 ≈ 9e-14).
_NEGLIGIBLE_GEMM_HALF = 1e-9


def _small_gemm(params: ClusterParams, wt: WorkloadTerms, batch):
    """u (:func:`costmodel.workloads.small_gemm_at`) at micro-batch ``batch`` (*b).

    The numpy path skips what cannot matter: 0 when m½ is negligible, and one
    evaluation when a sweep has one batch size (every configuration's the same).
    """
    if wt.gemm_share.shape[-1] == 0:
        return 0.0
    q, r, w = wt.gemm_share, wt.gemm_rows, wt.gemm_width
    if xp_of(params, wt, batch) is np:
        m_half = params.gemm_half_dim
        if np.ndim(m_half) == 0 and m_half < _NEGLIGIBLE_GEMM_HALF:
            return 0.0
        b = np.asarray(batch)
        if b.size > 1 and b.min() == b.max():
            one = small_gemm_at(q, r, w, b.reshape(-1)[:1])
            return np.broadcast_to(one.reshape((1,) * b.ndim), b.shape)
    return small_gemm_at(q, r, w, batch)


def _compute_s(params: ClusterParams, wt: WorkloadTerms, batch, g):
    """(forward, backward) seconds at ``batch`` samples with g ranks sharing a node."""
    xp = xp_of(params, wt, batch, g)
    if wt.measured:
        share = params.core_share(g)
        total = wt.step_time_per_sample_s * batch
        # the measured step includes update and overhead: keep the compute part
        comp = total - wt.total_bytes * params.update_s_per_byte - params.step_overhead_s
        comp = xp.maximum(comp, 0.1 * total)
        return comp * wt.fwd_share * share, comp * (1.0 - wt.fwd_share) * share
    # compute_time is linear in the FLOPs (no dispatched calls inside a step):
    # one evaluation per sample, scaled by forward's and backward's FLOPs
    u = _small_gemm(params, wt, batch)
    fwd = params.compute_time(batch, g, conv=wt.conv_share, small_gemm=u)
    bwd = params.compute_time(batch, g, conv=wt.conv_share, backward=1.0, small_gemm=u)
    return fwd * wt.fwd_flops, bwd * wt.bwd_flops


# ---------------------------------------------------------------------------
# Bucketing (exact, numpy: depends only on the workload and the bucket cap)
# ---------------------------------------------------------------------------
def bucketize(workload, bucket_bytes: int, first_bucket_bytes: int | None = None):
    """Pack gradient tensors into buckets, in reverse (backward) order.

    Args:
        workload: a :class:`costmodel.Workload`.
        bucket_bytes: cap per bucket, bytes ≥ 0; 0 = one bucket per tensor.
        first_bucket_bytes: cap of the first bucket (DDP's 1 MiB default lets
            communication start early); ``None`` = same as ``bucket_bytes``.

    Returns:
        ``(sizes, ready_frac)``: float64 arrays of shape (K,), bytes of each
        bucket in the order they are communicated and the fraction of backward
        compute done when each is ready.

    Raises:
        ValueError: if ``bucket_bytes`` or ``first_bucket_bytes`` is negative
            or not finite.

    Example:
        >>> from costmodel import Workload
        >>> import numpy as np
        >>> w = Workload("toy", ("a", "b", "c"), np.array([1, 2, 3]), np.ones(3), np.ones(3), 1)
        >>> bucketize(w, 12)[0]   # reverse order: 12 B, then 8 B + 4 B
        array([12., 12.])
    """
    for name, v in (("bucket_bytes", bucket_bytes), ("first_bucket_bytes", first_bucket_bytes)):
        if v is not None and (not math.isfinite(float(v)) or float(v) < 0):
            raise ValueError(f"{name} must be a finite number of bytes ≥ 0, got {v!r}")
    wt_bytes = np.asarray(workload.param_bytes, dtype=np.float64)[::-1]
    bwd = np.asarray(workload.bwd_flops, dtype=np.float64)[::-1]
    weights = bwd if bwd.sum() > 0 else wt_bytes
    ready = np.cumsum(weights) / weights.sum()
    ready[-1] = 1.0
    sizes, readies = [], []
    cap = float(first_bucket_bytes if first_bucket_bytes is not None else bucket_bytes)
    fill, last_r = 0.0, 0.0
    for nbytes, r in zip(wt_bytes, ready, strict=True):
        if fill > 0 and (bucket_bytes == 0 or fill + nbytes > cap):
            sizes.append(fill)
            readies.append(last_r)
            fill = 0.0
            cap = float(bucket_bytes)
        fill += nbytes
        last_r = r
    sizes.append(fill)
    readies.append(last_r)
    return np.asarray(sizes), np.asarray(readies)


@dataclass(frozen=True)
class BucketTable:
    """Exact bucketings of one workload for several bucket caps, padded to one shape.

    Attributes:
        bucket_bytes: (U,) caps, bytes (sorted, unique; padded by repeating the last).
        sizes: (U, K) bytes per bucket, zero-padded (K = the most buckets of any cap).
        ready_frac: (U, K) fraction of backward done when each bucket is ready.
        counts: (U,) number of buckets.
    """

    bucket_bytes: np.ndarray
    sizes: np.ndarray
    ready_frac: np.ndarray
    counts: np.ndarray

    def index(self, bucket_bytes) -> np.ndarray:
        """Row of each cap in ``bucket_bytes`` (which must all be in the table)."""
        return np.searchsorted(self.bucket_bytes, np.asarray(bucket_bytes, dtype=np.float64))

    @functools.cached_property
    def end_points(self) -> tuple:
        """Each cap's buckets as points of the overlapped end of communication.

        Returns ``(offsets, points, count, nbytes)``: the rows
        ``points[offsets[u]:offsets[u + 1]]`` (float64, 3 columns) of cap u are
        (1, 0, 0), then (r_b, buckets from b to the last, bytes from b to the
        last) for each of its buckets with bytes > 0, so that with affine costs
        c_b = a + β·s_b the end of communication max(T_bwd', max_b r_b·T_bwd' +
        Σ_{j≥b} c_j) is the largest entry of ``points @ (T_bwd', a, β)``
        (:func:`costmodel._timeline._affine_sweep`); ``count``/``nbytes`` (U,)
        are each cap's buckets with bytes > 0 and its bytes. Computed once per table.
        """
        w = self.sizes > 0
        cnt = np.cumsum(w[:, ::-1], axis=1)[:, ::-1].astype(np.float64)
        byt = np.cumsum(self.sizes[:, ::-1], axis=1)[:, ::-1]
        blocks = []
        for u in range(self.sizes.shape[0]):
            real = w[u]
            pts = np.stack([self.ready_frac[u, real], cnt[u, real], byt[u, real]], axis=1)
            blocks.append(np.concatenate([[[1.0, 0.0, 0.0]], pts]))
        offsets = np.zeros(len(blocks) + 1, dtype=np.int64)
        offsets[1:] = np.cumsum([len(b) for b in blocks])
        return offsets, np.concatenate(blocks), cnt[:, 0].copy(), byt[:, 0].copy()

    @functools.cached_property
    def first_ready(self) -> np.ndarray:
        """(U,) each cap's first bucket's ready fraction r₁ (its window of overlap is 1 − r₁)."""
        return np.ascontiguousarray(self.ready_frac[:, 0])

    @functools.cached_property
    def distinct_sizes(self) -> list:
        """Per cap u: ``(sizes, inverse)``, its buckets' distinct sizes (ascending; one
        bucket of 0 bytes where it has none) and each bucket's position among them."""
        out = []
        for u in range(self.sizes.shape[0]):
            sizes, inverse = np.unique(
                self.sizes[u, : max(1, int(self.counts[u]))], return_inverse=True
            )
            out.append((sizes, inverse.ravel()))
        return out

    @functools.cached_property
    def point_blocks(self) -> list:
        """:attr:`end_points`' rows of each cap u, ``points[offsets[u]:offsets[u + 1]]``, as a list."""
        offsets, points, _, _ = self.end_points
        return [points[offsets[u] : offsets[u + 1]] for u in range(offsets.size - 1)]


def bucket_table(workload, bucket_bytes, first_bucket_bytes: int | None = None) -> BucketTable:
    """:func:`bucketize` for every distinct cap in ``bucket_bytes``.

    The row count and the bucket axis are padded to powers of two so that
    sweeps over different caps reuse one compiled function. Tables are cached
    per (workload, caps, first bucket): a sweep over architectures buckets once.
    """
    caps = np.unique(np.asarray(bucket_bytes, dtype=np.float64).ravel())
    return _bucket_table_cached(workload, tuple(caps.tolist()), first_bucket_bytes)


@functools.lru_cache(maxsize=64)
def _bucket_table_cached(workload, caps: tuple, first_bucket_bytes) -> BucketTable:
    caps = np.asarray(caps, dtype=np.float64)
    T = len(workload.param_counts)
    U = 1 << max(0, int(math.ceil(math.log2(len(caps)))))
    sizes = np.zeros((U, T))
    ready = np.ones((U, T))
    counts = np.zeros(U)
    for i, cap in enumerate(caps):
        s, r = bucketize(workload, cap, first_bucket_bytes)
        sizes[i, : len(s)] = s
        ready[i, : len(r)] = r
        counts[i] = len(s)
    # trim padding no bucketing uses, to a multiple of 16 (bounded recompilations)
    K = min(T, 16 * int(math.ceil(max(1, int(counts.max())) / 16)))
    sizes, ready = sizes[:, :K], ready[:, :K]
    padded = np.concatenate([caps, np.full(U - len(caps), caps[-1])])
    sizes[len(caps) :] = sizes[len(caps) - 1]
    ready[len(caps) :] = ready[len(caps) - 1]
    counts[len(caps) :] = counts[len(caps) - 1]
    return BucketTable(padded, sizes, ready, counts)


# ---------------------------------------------------------------------------
# The iteration model
# ---------------------------------------------------------------------------
