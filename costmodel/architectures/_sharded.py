"""Sharded data parallelism: ZeRO stages 1 and 2, FSDP (ZeRO-3) and HSDP.

Every rank owns a 1/n shard of the optimizer state (ZeRO-1), also of the
gradients (ZeRO-2), also of the parameters (ZeRO-3 = FSDP ``FULL_SHARD``). The
exchange is the paper's P2P done with ring collectives: gradients
reduce-scattered, parameters all-gathered (Rajbhandari et al. 2020, §5, §7).

``zero1`` / ``zero2`` (DeepSpeed ZeRO stage 1 / 2), per gradient bucket, in
backward order and overlapped with the rest of backward as DDP does:

    phase 1:  ring all_reduce(s)                2(n−1)α + 2(n−1)/n·s(β) + (n−1)/n·sγ
    update:   each rank its shard, G/n bytes
    phase 2:  ring all_gather(s) of the updated parameters, (n−1)α + (n−1)/n·sβ

Both stages all-reduce each bucket, because that is what DeepSpeed runs with
its defaults: ``stage_1_and_2.py`` ``average_tensor`` groups a bucket's
per-rank slices under one ``("allreduce", group)`` key when
``use_multi_rank_bucket_allreduce`` (default True, DeepSpeed ≥ 0.12.4) and
calls ``dist.all_reduce`` on the whole bucket; each rank then keeps only the
slices of its partition (stage 2) — no setting makes it a reduce-scatter (with
``use_multi_rank_bucket_allreduce: false`` it is one ``dist.reduce`` per
destination rank). So per step a rank sends 3·(n−1)/n·G in both stages (the
ZeRO paper's §7.2.1 counts 2Ψ for a reduce-scatter that DeepSpeed does not
run); stage 2 differs in memory (gradient shards) and in accumulation (it
reduces in every micro-batch: :attr:`Zero2Architecture.exchanges_every_micro_step`).
The parameter all-gather is modelled as EXPOSED, after the step: DeepSpeed's
stage-1/2 optimizer ``step()`` ends with ``all_gather_dp_groups`` of the updated
partitions and returns only when they are complete (the next forward needs
every parameter), so nothing overlaps it. Its buckets are the gradient buckets
(with ``all_gather_into_tensor`` DeepSpeed gathers each parameter group in one
call: the model's per-bucket α terms over-count it by (buckets − 1)·(n − 1)·α).

``fsdp`` (PyTorch FSDP ``FULL_SHARD``), per *unit* (FSDP's wrapped module; by
default one per layer block of the workload, see :func:`layer_blocks`; with
``wrap="bucket"`` the gradient buckets, as ``size_based_auto_wrap_policy``):

    forward:  all_gather(P_u) before unit u's forward; the next unit's gather is
              issued when u's forward starts (one unit of prefetch, FSDP's
              rate-limited ``limit_all_gathers``);
    backward: all_gather(P_u) again (parameters are freed after forward,
              ``reshard_after_forward=True``); with ``backward_prefetch=BACKWARD_PRE``
              the gather of the next unit is issued when u's backward starts,
              before u's reduce_scatter(P_u), which is issued when u's backward ends;
    update:   each rank its shard, G/n bytes; nothing after it (the next
              forward gathers the updated shards).

Under a block wrap policy the parameters outside the blocks (embeddings, final
norm, head) are the ROOT unit: gathered first in forward, kept through backward
(the root is not resharded after forward), reduce-scattered when all its
gradients are ready — at the end of backward, exposed. So the root is gathered
once per step and every block twice.

All collectives of a rank run in issue order on one channel (FSDP's all-gather
and reduce-scatter streams share the same links: a single channel is the
conservative reading), except hsdp's inter-node all-reduce (below); compute
waits for its unit's gather. Traffic per step
3·(n−1)/n·G, 1.5× DDP's (ZeRO paper §7.2.2), less one gather of the root unit.

``hsdp`` (FSDP ``HYBRID_SHARD``): FSDP inside each node (shard group = the g
ranks of a node, intra-node collectives), and after each unit's
reduce-scatter an all-reduce of the 1/g gradient shard across the m = n/g
nodes (the replicate group: g concurrent inter-node rings sharing each NIC, the
middle phase of the hierarchical all-reduce). That all-reduce runs on a second
channel (its own stream, FSDP's ``_all_reduce_stream``, and the NIC instead of
the intra-node links): it starts when both its unit's reduce-scatter and the
previous all-reduce are done, and overlaps the next units' gathers and
reduce-scatters. Memory shards over g ranks only.

References:
    Rajbhandari, Rasley, Ruwase & He, "ZeRO: Memory Optimizations Toward
    Training Trillion Parameter Models", SC 2020 (§5 stages P_os, P_os+g,
    P_os+g+p; §7 communication volume 2Ψ and 3Ψ; Table 1 memory per device).
    Zhao et al., "PyTorch FSDP: Experiences on Scaling Fully Sharded Data
    Parallel", VLDB 2023 (§3 units and resharding, §3.3.2 HYBRID_SHARD, §4.2
    backward prefetch, §4.4 rate limiter). DeepSpeed ``stage_1_and_2.py``
    (bucketed reduction, all-gather after ``step``).
"""

from __future__ import annotations

import functools
import math
from typing import ClassVar

import equinox as eqx
import numpy as np

from .._buckets import (
    Breakdown,
    BucketTable,
    _compute_s,
    block_key,
    bucket_table,
    bucketize,
    has_root_unit,
)
from .._params import ClusterParams
from .._xp import scan, xp_of
from ..collectives import (
    HierarchicalAllReduce,
    RingAllGather,
    RingAllReduce,
    RingReduceScatter,
    evaluate,
    finish,
)
from ._base import AbstractArchitecture

__all__ = [
    "Zero1Architecture",
    "Zero2Architecture",
    "FSDPArchitecture",
    "HSDPArchitecture",
    "layer_blocks",
    "unit_bytes",
    "WRAP_POLICIES",
]

#: FSDP wrap granularities: ``block`` = one unit per layer block of the workload
#: (``transformer_auto_wrap_policy``); ``bucket`` = units packed to the bucket
#: cap like the gradient buckets (``size_based_auto_wrap_policy``).
WRAP_POLICIES = ("block", "bucket")


# ---------------------------------------------------------------------------
# Units (numpy: they depend only on the workload)
# ---------------------------------------------------------------------------
def layer_blocks(tensor_names) -> np.ndarray:
    """Unit index of each tensor when FSDP wraps one unit per layer block.

    A tensor's block is its name up to the first all-digit component
    (:func:`costmodel._buckets.block_key`: ``model.layers.3``,
    ``transformer.h.11``, ``layer2.1``, ``features.0``); consecutive tensors of
    one block form one unit. Tensors outside every numbered block (embeddings,
    final norm, head: ``model.embed_tokens``, ``model.norm``, ``lm_head``) are
    FSDP's ROOT unit, index 0: under ``ModuleWrapPolicy({DecoderLayer})`` they
    belong to the outermost ``FullyShardedDataParallel``, which gathers them
    first in forward and does not free them until the step ends
    (``_runtime_utils._post_forward_reshard``: ``free_unsharded_flat_param =
    not state._is_root and ...``). A model without numbered blocks (names
    such as ``Mixed_5b``) is split by its first name component instead, with
    no root unit.

    Args:
        tensor_names: the T tensor names in forward order (T ≥ 1).

    Returns:
        int64 array (T,): 0 for the root unit (when there is one), then the
        blocks 1, 2, … in forward order (0, 1, … without a root unit).

    Example:
        >>> layer_blocks(["embed.weight", "layers.0.q.weight", "layers.0.k.weight",
        ...               "layers.1.q.weight", "norm.weight"]).tolist()
        [0, 1, 1, 2, 0]
    """
    names = [str(n) for n in tensor_names]
    keys = [block_key(n) for n in names]
    root = has_root_unit(names)
    if not any(k is not None for k in keys):
        keys = [n.split(".")[0] for n in names]
    ids = np.zeros(len(keys), dtype=np.int64)
    unit, prev = (0 if root else -1), object()
    for i, key in enumerate(keys):
        if root and key is None:
            continue  # the root unit, 0
        if key != prev:
            unit += 1
        ids[i], prev = unit, key
    return ids


def _block_units(workload):
    """(sizes, ready_frac, root) of the layer-block units in BACKWARD order.

    The blocks in backward order, then the root unit (when there is one,
    ``root`` True): its gradients are reduced once all of them are ready, at
    the end of backward (ready fraction 1). A block is ready when backward
    has passed its first tensor; the fraction counts every tensor's backward
    FLOPs in backward order (bytes when there are none), the root's included.
    """
    ids = layer_blocks(workload.tensor_names)[::-1]
    root = has_root_unit(workload.tensor_names)
    pb = np.asarray(workload.param_bytes, dtype=np.float64)[::-1]
    bwd = np.asarray(workload.bwd_flops, dtype=np.float64)[::-1]
    weights = bwd if bwd.sum() > 0 else pb
    ready = np.cumsum(weights) / weights.sum()
    ready[-1] = 1.0
    blocks = np.flatnonzero(ids > 0) if root else np.arange(len(ids))
    bid = ids[blocks]
    last = blocks[np.flatnonzero(np.append(bid[1:] != bid[:-1], True))]
    first = np.concatenate([[0], np.searchsorted(blocks, last[:-1]) + 1])
    sizes = np.add.reduceat(pb[blocks], first) if len(blocks) else np.zeros(0)
    r = ready[last]
    if root:
        sizes = np.append(sizes, pb[ids == 0].sum())
        r = np.append(r, 1.0)
    return sizes, r, root


def unit_bytes(workload, wrap: str = "block", bucket_bytes=None) -> np.ndarray:
    """Parameter bytes of each FSDP unit, in FORWARD order.

    Args:
        workload: a :class:`costmodel.Workload`.
        wrap: ``"block"`` (one unit per layer block, :func:`layer_blocks`) or
            ``"bucket"`` (units packed to ``bucket_bytes`` in backward order, as
            :func:`costmodel.bucketize`).
        bucket_bytes: the cap, bytes ≥ 0, for ``wrap="bucket"``.

    Returns:
        float64 array (U,) of bytes, summing to the workload's parameter bytes.

    Raises:
        ValueError: an unknown ``wrap``, or ``wrap="bucket"`` without a cap.
    """
    if wrap == "block":
        return _block_units(workload)[0][::-1].copy()
    if wrap == "bucket":
        if bucket_bytes is None:
            raise ValueError("unit_bytes: wrap='bucket' needs bucket_bytes (the unit cap)")

        return bucketize(workload, bucket_bytes)[0][::-1].copy()
    raise ValueError(f"unknown wrap {wrap!r}; valid: {', '.join(WRAP_POLICIES)}")


@functools.lru_cache(maxsize=64)
def _block_table(workload, caps: tuple):

    sizes, ready, _ = _block_units(workload)
    U = 1 << max(0, int(math.ceil(math.log2(len(caps)))))
    K = 16 * int(math.ceil(len(sizes) / 16))
    row_s = np.zeros(K)
    row_r = np.ones(K)
    row_s[: len(sizes)] = sizes
    row_r[: len(sizes)] = ready
    padded = np.concatenate([caps, np.full(U - len(caps), caps[-1])])
    return BucketTable(
        padded, np.tile(row_s, (U, 1)), np.tile(row_r, (U, 1)), np.full(U, float(len(sizes)))
    )


# ---------------------------------------------------------------------------
# ZeRO stages 1 and 2
# ---------------------------------------------------------------------------
class _ZeroArchitecture(AbstractArchitecture):
    """Bucketed gradient exchange overlapped with backward, shard update, exposed all-gather."""

    overlaps = True
    #: Which model states are sharded over the data-parallel ranks.
    shards: ClassVar[tuple[str, ...]] = ("optimizer",)

    def phase2_s(self, params: ClusterParams, s, n, g, k):
        """Ring all_gather of the bucket's updated parameters (exposed, after the step)."""
        return RingAllGather().time(params, s, n, g)

    def update_s(self, params: ClusterParams, total_bytes, n, k, g=None):
        """Each rank updates its 1/n shard: G/n bytes."""
        return total_bytes / n * params.update_s_per_byte


class Zero1Architecture(_ZeroArchitecture):
    """ZeRO-1 (optimizer state sharded): all_reduce per bucket, shard update, all_gather.

    Example:
        >>> from costmodel import get_architecture
        >>> get_architecture("zero1").overlaps
        True
    """

    name = "zero1"
    shards = ("optimizer",)

    def phase1_s(self, params: ClusterParams, s, n, g, k):
        """Ring all_reduce of the bucket (every rank keeps the full gradient)."""
        return RingAllReduce().time(params, s, n, g)


class Zero2Architecture(_ZeroArchitecture):
    """ZeRO-2 (optimizer state and gradients sharded): all_reduce per bucket, all_gather."""

    name = "zero2"
    shards = ("optimizer", "gradients")
    #: DeepSpeed ``engine.allreduce_gradients``: "ZeRO stage >= 2 communicates
    #: during non gradient accumulation boundaries as well" (stage_1_and_2.py
    #: reduces every bucket in every micro-batch's backward; ``no_sync`` is refused).
    exchanges_every_micro_step = True

    def phase1_s(self, params: ClusterParams, s, n, g, k):
        """Ring all_reduce of the bucket; each rank keeps its 1/n (DeepSpeed ``average_tensor``)."""
        return RingAllReduce().time(params, s, n, g)


# ---------------------------------------------------------------------------
# FSDP and HSDP
# ---------------------------------------------------------------------------
class FSDPArchitecture(AbstractArchitecture):
    """PyTorch FSDP ``FULL_SHARD`` (ZeRO-3): per-unit gathers in forward and backward.

    Attributes:
        wrap: unit granularity, one of :data:`WRAP_POLICIES` (static):
            ``"block"`` (default) one unit per layer block — the bucket cap is
            then not used; ``"bucket"`` units are the gradient buckets of the
            cap (size-based wrapping), so the cap is the wrap size.

    Example:
        >>> from costmodel import get_workload
        >>> FSDPArchitecture().num_units(get_workload("llama2_7b"))  # root (embed, norm, head), 32 layers
        33
    """

    name = "fsdp"
    overlaps = True
    shards: ClassVar[tuple[str, ...]] = ("optimizer", "gradients", "parameters")
    wrap: str = eqx.field(static=True, default="block")

    def __check_init__(self):
        if self.wrap not in WRAP_POLICIES:
            raise ValueError(f"wrap must be one of {', '.join(WRAP_POLICIES)}, got {self.wrap!r}")

    @property
    def uses_bucket_bytes(self) -> bool:
        """Whether the bucket cap changes anything (only with ``wrap="bucket"``)."""
        return self.wrap == "bucket"

    def shard_ranks(self, n, g):
        """Ranks a parameter is sharded over: all n."""
        return n

    def gather_s(self, params: ClusterParams, s, n, g, k):
        """Ring all_gather of a unit's s parameter bytes over the shard group."""
        return RingAllGather().time(params, s, n, g)

    def phase1_s(self, params: ClusterParams, s, n, g, k):
        """A unit's gradient reduction after its backward: the sum of :meth:`reduce_phases`."""
        intra, inter = self.reduce_phases(params, s, n, g, k)
        return intra + inter

    def reduce_phases(self, params: ClusterParams, s, n, g, k):
        """(reduce-scatter, second stream) of a unit's s gradient bytes, s each.

        fsdp: the ring reduce_scatter over all n ranks, and nothing on a
        second stream.
        """
        rs = RingReduceScatter().time(params, s, n, g)
        return rs, xp_of(rs).zeros_like(rs)

    def update_s(self, params: ClusterParams, total_bytes, n, k, g=None):
        """Each rank updates its shard: G / (shard ranks) bytes."""
        gg = n if g is None else xp_of(n, g).minimum(g, n)
        return total_bytes / self.shard_ranks(n, gg) * params.update_s_per_byte

    def keeps_root(self, workload) -> bool:
        """Whether this wrap leaves a root unit in ``workload`` (block wrap, :func:`layer_blocks`)."""
        return self.wrap == "block" and has_root_unit(workload.tensor_names)

    def num_units(self, workload, bucket_bytes=None) -> int:
        """Number of units this wrap policy makes of ``workload``."""
        return len(unit_bytes(workload, self.wrap, bucket_bytes))

    def bucket_table(self, workload, bucket_bytes):
        """The units as a :class:`costmodel.BucketTable` (what the timeline iterates over).

        ``wrap="bucket"``: :func:`costmodel.bucket_table`; ``wrap="block"``: the
        layer-block units, one identical row per cap.
        """

        if self.wrap == "bucket":
            return bucket_table(workload, bucket_bytes)
        caps = np.unique(np.asarray(bucket_bytes, dtype=np.float64).ravel())
        return _block_table(workload, tuple(caps.tolist()))

    def sharded_timeline(self, params: ClusterParams, fwd, bwd, s, w, r, n, g, k, root=False):
        """(communication, exposed) of one iteration: the per-unit recursion (module doc).

        Args:
            fwd, bwd: forward and backward compute, s (scalars).
            s, w, r: (K,) units in BACKWARD order: bytes, weights (1 real,
                0 padding, fractional in the fluid relaxation) and the
                fraction of backward done when each unit's gradients are ready.
            n, g, k: workers, ranks per node, servers (unused).
            root: static; the last real unit is FSDP's root unit (parameters
                outside the wrapped blocks, :func:`layer_blocks`): gathered
                first in forward and kept, so not gathered again in backward.

        Returns:
            ``(C, E)``: all communication and its exposed part, s: the time
            compute waits for gathers, the last reductions after backward,
            and the slowdown of compute by overlapping (interference), so that
            forward + backward + E is the span from the start of forward to
            the end of the last reduction. Forward and backward compute of a
            unit are in the ratio of the totals (the zoo's ``bwd = 2 × fwd``
            per tensor makes that exact).
        """
        out = self.schedule(params, fwd, bwd, s, w, r, n, g, k, root)
        return out["communication_s"], out["exposed_s"]

    def schedule(self, params: ClusterParams, fwd, bwd, s, w, r, n, g, k, root=False) -> dict:
        """Every unit's times in the recursion of :meth:`sharded_timeline` (same arguments).

        Returns:
            A dict of arrays (s from the start of forward): ``communication_s``,
            ``exposed_s`` (as :meth:`sharded_timeline`); ``forward_end_s``;
            per unit in FORWARD order ``gather_start_s``, ``gather_end_s``
            (forward gathers), and in BACKWARD order ``backward_end_s`` (its
            gradients are ready), ``regather_end_s``, ``reduce_start_s``,
            ``reduce_end_s``; ``span_s`` (end of the last reduction or of
            backward). Without overlap, the per-unit entries are those of the
            serial order (every collective after the compute it follows).
        """
        xp = xp_of(params, fwd, bwd, s, w, r, n, g, k)
        # inside a training step: × step_comm_factor, as the bucketed timeline does
        f = params.step_comm_factor
        ag = self.gather_s(params, s, n, g, k) * f * w
        intra, inter = self.reduce_phases(params, s, n, g, k)
        gs, gx = intra * f * w, inter * f * w
        # units along the leading axis; every trailing axis is a configuration
        ag, gs, gx = xp.broadcast_arrays(ag, gs, gx)
        # the backward gathers: every unit again, except the root (kept from forward);
        # the root is the last real unit: the one whose successor has no weight
        if root:
            w_next = xp.concatenate([w[1:], xp.zeros_like(w[:1])])
            rg = ag * xp.broadcast_to(xp.minimum(w_next, 1.0), ag.shape)
        else:
            rg = ag
        frac = xp.maximum(xp.diff(r, axis=0, prepend=xp.zeros_like(r[:1])), 0.0)
        ag_total, rg_total = xp.sum(ag, axis=0), xp.sum(rg, axis=0)
        gs_total = xp.sum(gs, axis=0) + xp.sum(gx, axis=0)
        comm = ag_total + rg_total + gs_total
        if self.overlaps:
            iota = params.overlap_interference
            slow_f = iota * xp.minimum(ag_total / xp.maximum(fwd, 1e-30), 1.0)
            slow_b = iota * xp.minimum((rg_total + gs_total) / xp.maximum(bwd, 1e-30), 1.0)
        else:
            slow_f = slow_b = xp.zeros_like(fwd)
        fwd_eff, bwd_eff = fwd * (1.0 + slow_f), bwd * (1.0 + slow_b)
        zero = xp.zeros_like(ag[0] + fwd_eff + bwd_eff)
        serial = not self.overlaps

        def forward(carry, x):
            ag_end, f_start, f_end, wait = carry
            a, f = x
            # issued when the previous unit starts (serial: after it ends)
            start = xp.maximum(ag_end, f_end if serial else f_start)
            ag_end = start + a
            f_start = xp.maximum(f_end, ag_end)
            return (ag_end, f_start, f_start + f, wait + (f_start - f_end)), (start, ag_end)

        fwd_units = xp.broadcast_to(fwd_eff * frac, ag.shape)[::-1]
        (_, _, t_fwd, wait_f), (ag_start_f, ag_end_f) = scan(
            forward, (zero, zero, zero, zero), (ag[::-1], fwd_units), xp
        )
        ag_next = xp.concatenate([rg[1:], xp.zeros_like(rg[:1])])

        def backward(carry, x):
            comm_end, inter_end, b_end, gathered, wait = carry
            b, a_next, red, red_x = x
            b_start = xp.maximum(b_end, gathered)
            wait = wait + (b_start - b_end)
            b_end = b_start + b
            if serial:  # reduce, then gather the next unit, after this unit's backward
                red_start = xp.maximum(comm_end, b_end)
                inter_end = red_start + red + red_x
                next_end = inter_end + a_next
                comm_end = next_end
            else:
                next_end = xp.maximum(comm_end, b_start) + a_next  # BACKWARD_PRE prefetch
                red_start = xp.maximum(next_end, b_end)  # reduce-scatter after backward
                comm_end = red_start + red
                # hsdp: the inter-node all_reduce of the shard, on its own stream and
                # link, once the reduce-scatter is done (fsdp: red_x = 0)
                inter_end = xp.maximum(inter_end, comm_end) + red_x
            return (comm_end, inter_end, b_end, next_end, wait), (
                b_end,
                gathered,
                red_start,
                inter_end,
            )

        first = t_fwd + rg[0]  # the last forward unit is gathered again
        bwd_units = xp.broadcast_to(bwd_eff * frac, ag.shape)
        (comm_end, inter_end, b_end, _, wait_b), (b_ends, regathered, red_start, red_end) = scan(
            backward, (first, first, t_fwd, first, zero), (bwd_units, ag_next, gs, gx), xp
        )
        comm_end = xp.maximum(comm_end, inter_end)
        tail = xp.maximum(comm_end - b_end, 0.0)
        exposed = (fwd * slow_f + bwd * slow_b) + wait_f + wait_b + tail
        return {
            "communication_s": comm,
            "exposed_s": comm if serial else exposed,
            "forward_end_s": t_fwd,
            "gather_start_s": ag_start_f,
            "gather_end_s": ag_end_f,
            "backward_end_s": b_ends,
            "regather_end_s": regathered,
            "reduce_start_s": red_start,
            "reduce_end_s": red_end,
            "span_s": xp.maximum(b_end, comm_end),
        }

    def iteration_breakdown(
        self, params, wt, eval_bytes, weights, ready_frac, n, g, k, batch, base
    ):
        """The :class:`costmodel.Breakdown` of one configuration (called by the timeline)."""

        xp = xp_of(params, wt, eval_bytes, n, g, k, batch, base)
        K = wt.accumulation_steps
        fwd, bwd = _compute_s(params, wt, batch / K, xp.minimum(g, n))  # one micro-batch
        root = bool(wt.root_unit) and self.wrap == "block"
        comm, exposed = self.sharded_timeline(
            params, fwd, bwd, eval_bytes, weights, ready_frac, n, g, k, root
        )
        # K micro-batches each gather and reduce-scatter every unit (FULL_SHARD and
        # HYBRID_SHARD free parameters after forward and backward, so even under
        # no_sync every micro-batch gathers again: torch/distributed/fsdp
        # _runtime_utils._should_free_in_backward); the update once per step.
        update = self.update_s(params, wt.total_bytes, n, k, g)
        overhead = params.step_overhead_s
        total = K * (fwd + bwd + exposed) + update + overhead
        thr = n * batch / total
        f1, b1 = _compute_s(params, wt, base / K, xp.ones_like(g))
        t1 = K * (f1 + b1) + wt.total_bytes * params.update_s_per_byte + overhead
        eff = thr / (n * base / t1)
        return Breakdown(
            K * fwd,
            K * bwd,
            K * comm,
            K * exposed,
            update,
            overhead,
            total,
            thr,
            eff,
            K * xp.sum(weights, axis=0),
        )


class HSDPArchitecture(FSDPArchitecture):
    """PyTorch FSDP ``HYBRID_SHARD``: FSDP inside a node, all_reduce of shards across nodes."""

    name = "hsdp"

    def shard_ranks(self, n, g):
        """Ranks a parameter is sharded over: the g ranks of a node."""
        return xp_of(g, n).minimum(g, n)

    def gather_s(self, params: ClusterParams, s, n, g, k):
        """Intra-node ring all_gather of a unit over the node's g ranks."""
        g = xp_of(g, n).minimum(g, n)
        return RingAllGather().time(params, s, g, g)

    def reduce_phases(self, params: ClusterParams, s, n, g, k):
        """(intra-node reduce_scatter, inter-node all_reduce of each 1/g shard), s each.

        They run on different links and streams: FSDP issues the all_reduce over
        the replicate group on ``_all_reduce_stream`` once the unit's
        reduce_scatter is done (``torch/distributed/fsdp/_runtime_utils.py``,
        PyTorch 2.11), so a unit's all_reduce overlaps the next unit's
        reduce_scatter and gathers (the schedule's second channel).
        """
        xp = xp_of(params, s, n, g)
        g = xp.minimum(g, n)
        rs = RingReduceScatter().time(params, s, g, g)
        _, ar, _ = HierarchicalAllReduce().phases(s, n, g)
        inter = finish(
            params, xp.where(ar.steps > 0, evaluate(params, "all_reduce", ar, g), 0.0), ar.steps, g
        )
        return rs, inter
