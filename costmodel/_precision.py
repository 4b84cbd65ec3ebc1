"""Gradient precision and gradient accumulation, as closed forms around the timeline.

Two things a training script decides that change what one optimizer step costs,
without any change to :func:`costmodel.iteration_time`:

* **gradient dtype on the wire** (:func:`with_grad_dtype`): fp16/bf16 gradients
  (AMP with DDP's ``fp16_compress_hook`` / ``bf16_compress_hook``, Horovod's
  ``Compression.fp16``) carry 2 bytes per element instead of fp32's 4, so every
  bucket, every collective's bandwidth term β·S and reduction term γ·S, and the
  bucketing itself see half the bytes. It is a transform of the workload
  (:attr:`Workload.dtype_bytes`); the latency terms α do not change.
* **gradient accumulation** (:func:`accumulated_workload`): K micro-batches per
  optimizer step, exchanged as each architecture's framework does (once, in
  the last micro-batch, for DDP ``no_sync()``/PS/ZeRO-1; in every micro-batch
  for ZeRO-2, FSDP and HSDP), costed by the timeline itself. With T_1 the
  ordinary iteration and T_fwd, T_bwd one micro-batch's compute, the
  once-per-step case is

      T_K = (K − 1)·(T_fwd + T_bwd) + T_1

  (:func:`accumulate`, the same closed form on a breakdown already computed);
  one step processes K micro-batches, so throughput = K·n·batch / T_K.

References:
    PyTorch ``DistributedDataParallel.no_sync`` ("gradients will be accumulated
    ... and synchronized in the first forward-backward pass exiting the
    context"), ``torch.distributed.algorithms.ddp_comm_hooks.default_hooks``
    (``fp16_compress_hook``, ``bf16_compress_hook``); Horovod
    ``hvd.DistributedOptimizer(compression=hvd.Compression.fp16,
    backward_passes_per_step=K)``; Micikevicius et al., "Mixed Precision
    Training", ICLR 2018.
"""

from __future__ import annotations

import numbers

import jax.numpy as jnp

from ._params import ClusterParams
from ._timeline import DEFAULT_BUCKET_BYTES, Breakdown, iteration_time

__all__ = [
    "GRAD_DTYPES",
    "accumulate",
    "accumulated_iteration_time",
    "accumulated_workload",
    "grad_dtype_bytes",
    "with_grad_dtype",
]

#: Bytes per gradient element on the wire, by dtype name.
GRAD_DTYPES = {"fp32": 4, "bf16": 2, "fp16": 2}


def grad_dtype_bytes(grad_dtype) -> int:
    """Bytes per gradient element of a dtype name (``fp32`` 4, ``bf16``/``fp16`` 2).

    Args:
        grad_dtype: a name of :data:`GRAD_DTYPES` (``float32``/``bfloat16``/
            ``float16`` are accepted too) or an integer number of bytes ≥ 1.

    Returns:
        The bytes per element, an int ≥ 1.

    Raises:
        ValueError: an unknown name (listing the valid ones) or bytes < 1.

    Example:
        >>> grad_dtype_bytes("bf16"), grad_dtype_bytes("fp32"), grad_dtype_bytes(1)
        (2, 4, 1)
    """
    if isinstance(grad_dtype, numbers.Integral) and not isinstance(grad_dtype, bool):
        if grad_dtype < 1:
            raise ValueError(f"grad_dtype: bytes per element must be >= 1, got {grad_dtype}")
        return int(grad_dtype)
    aliases = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "half": "fp16"}
    name = aliases.get(str(grad_dtype).lower(), str(grad_dtype).lower())
    if name not in GRAD_DTYPES:
        raise ValueError(
            f"grad_dtype: unknown gradient dtype {grad_dtype!r}; valid: {', '.join(GRAD_DTYPES)}"
        )
    return GRAD_DTYPES[name]


def with_grad_dtype(workload, grad_dtype):
    """The workload with its gradients exchanged in another dtype.

    Every tensor's gradient bytes become ``param_counts × bytes(grad_dtype)``:
    buckets, each collective's β·S and γ·S terms and the bucketing scale with
    them, the α terms do not. In this model the optimizer update and the
    memory estimates are also per gradient byte (``update_s_per_byte × G``),
    so they scale too; with fp32 master weights (AMP) the update is then
    under-estimated by ``update_s_per_byte × G × (1 − bytes/4)``.

    Args:
        workload: a :class:`costmodel.Workload`.
        grad_dtype: ``"fp32"``, ``"bf16"``, ``"fp16"`` or bytes per element ≥ 1.

    Returns:
        A new :class:`costmodel.Workload` (the input is unchanged).

    Raises:
        ValueError: an unknown dtype (see :func:`grad_dtype_bytes`).

    Example:
        >>> from costmodel import get_workload
        >>> w = get_workload("resnet50", 32)
        >>> with_grad_dtype(w, "fp16").total_param_bytes * 2 == w.total_param_bytes
        True
    """
    return workload.with_dtype_bytes(grad_dtype_bytes(grad_dtype))


def _check_steps(accumulation_steps) -> int:
    k = accumulation_steps
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1:
        raise ValueError(f"accumulation_steps must be an integer >= 1, got {k!r}")
    return int(k)


def accumulate(
    breakdown: Breakdown,
    params: ClusterParams,
    workload,
    accumulation_steps: int,
    *,
    batch_size=None,
    base_batch_size=None,
) -> Breakdown:
    """One optimizer step of K micro-batches exchanged once (DDP ``no_sync``), from T_1.

    For the architectures that exchange once per step (all but zero2, fsdp and
    hsdp) this equals :func:`costmodel.iteration_time` of
    :func:`accumulated_workload` (tested); for those three use that instead.

    With T_1 = ``breakdown.iteration_s`` and f, b = ``breakdown.forward_s``,
    ``breakdown.backward_s`` (one micro-batch, no interference):

        T_K = (K − 1)·(f + b) + T_1

    (DDP ``no_sync``: K − 1 micro-batches without communication, then one whose
    backward overlaps the exchange of the accumulated gradients). Communication,
    exposed communication, update, overhead and the number of collectives stay
    those of one exchange; forward and backward become K·f and K·b;
    throughput = K·n·batch / T_K. The single-worker baseline of the scaling
    efficiency accumulates alike: base_K = base_1 + (K − 1)·(f_1 + b_1), where
    base_1 = f_1 + b_1 + G·u + o is the one-worker step without communication
    (u = ``update_s_per_byte``, o = ``step_overhead_s``, G the gradient bytes) —
    recovered from the breakdown's efficiency, so no second evaluation.

    Args:
        breakdown: :func:`costmodel.iteration_time` of the same configuration
            (any batch shape).
        params: the cluster parameters it was computed with.
        workload: the workload it was computed with.
        accumulation_steps: K ≥ 1 micro-batches per optimizer step (1 returns
            the breakdown unchanged).
        batch_size, base_batch_size: as given to ``iteration_time`` (default
            the workload's batch size; baseline batch default ``batch_size``).

    Returns:
        A :class:`costmodel.Breakdown` of the same shape, per optimizer step.

    Raises:
        ValueError: when ``accumulation_steps`` is not an integer ≥ 1.

    References:
        PyTorch ``DistributedDataParallel.no_sync``; Horovod
        ``backward_passes_per_step``.

    Example:
        >>> from costmodel import get_workload, iteration_time, preset
        >>> p, w = preset("ethernet-10g", "v100"), get_workload("resnet50", 32)
        >>> b1 = iteration_time(p, w, "ring", 8)
        >>> b4 = accumulate(b1, p, w, 4)
        >>> bool(abs(b4.iteration_s - (3 * (b1.forward_s + b1.backward_s) + b1.iteration_s)) < 1e-9)
        True

    (Long for its documentation: the body is 27 lines.)
    """
    k = _check_steps(accumulation_steps)
    if k == 1:
        return breakdown
    bd = breakdown
    batch = jnp.asarray(float(workload.batch_size) if batch_size is None else batch_size)
    base_b = batch if base_batch_size is None else jnp.asarray(base_batch_size)
    compute = bd.forward_s + bd.backward_s
    total = (k - 1) * compute + bd.iteration_s
    n = bd.throughput_samples_per_s * bd.iteration_s / batch  # workers
    thr = k * n * batch / total
    # eff_1 = (n·batch/T_1) / (n·base_b/base_1)  ⇒  base_1 = eff_1·T_1·base_b/batch
    base_1 = bd.scaling_efficiency * bd.iteration_s * base_b / batch
    fixed = workload.total_param_bytes * params.update_s_per_byte + params.step_overhead_s
    base_k = base_1 + (k - 1) * (base_1 - fixed)
    eff = batch * base_k / (total * base_b)
    return Breakdown(
        k * bd.forward_s,
        k * bd.backward_s,
        bd.communication_s,
        bd.exposed_communication_s,
        bd.update_s,
        bd.overhead_s,
        total,
        thr,
        eff,
        bd.num_buckets,
    )


def accumulated_iteration_time(
    params: ClusterParams,
    workload,
    architecture,
    workers,
    *,
    accumulation_steps: int = 1,
    grad_dtype=None,
    ranks_per_node=1,
    servers=1,
    bucket_bytes=DEFAULT_BUCKET_BYTES,
    batch_size=None,
    base_batch_size=None,
    colocated: bool = False,
    smooth: bool = False,
) -> Breakdown:
    """:func:`costmodel.iteration_time` with a gradient dtype and K-step accumulation.

    ``with_grad_dtype(workload, grad_dtype)`` (when given), then
    :func:`accumulated_workload` with K = ``accumulation_steps``, then
    :func:`costmodel.iteration_time` (every architecture's own accumulation). ``workers`` … ``smooth`` broadcast as in
    ``iteration_time``; the result is per optimizer step (K micro-batches).

    Args:
        accumulation_steps: K ≥ 1 micro-batches per optimizer step.
        grad_dtype: ``None`` (the workload's), ``"fp32"``, ``"bf16"``, ``"fp16"``
            or bytes per element.
        Others: as :func:`costmodel.iteration_time`.

    Returns:
        A :class:`costmodel.Breakdown` per optimizer step.

    Raises:
        ValueError: as ``iteration_time``, :func:`grad_dtype_bytes` and
            :func:`accumulate`.
    """
    k = _check_steps(accumulation_steps)
    if grad_dtype is not None:
        workload = with_grad_dtype(workload, grad_dtype)
    if batch_size is not None:
        batch_size = k * batch_size  # samples per optimizer step
    if base_batch_size is not None:
        base_batch_size = k * base_batch_size
    return iteration_time(
        params,
        accumulated_workload(workload, k),
        architecture,
        workers,
        ranks_per_node=ranks_per_node,
        servers=servers,
        bucket_bytes=bucket_bytes,
        batch_size=batch_size,
        base_batch_size=base_batch_size,
        colocated=colocated,
        smooth=smooth,
    )


def accumulated_workload(workload, accumulation_steps: int):
    """K-step gradient accumulation: the workload of one optimizer step of K micro-batches.

    The result has ``batch_size`` = K·b samples per worker per step and
    ``accumulation_steps`` = K; the timeline (:func:`costmodel.iteration_time`)
    then runs K forward/backward passes of b samples and exchanges as each
    architecture does under accumulation (T_fwd, T_bwd: one micro-batch;
    T_1: the ordinary iteration of b samples; U the update, O the overhead):

    =====================  ======================================================
    ring, tree,            T_K = (K − 1)·(T_fwd + T_bwd) + T_1: K − 1 micro-batches
    hierarchical, ps,      under DDP ``no_sync()`` / Horovod ``backward_passes_per_step``
    ps_host, hybrid, p2p,  / DeepSpeed stage 1 (engine ``allreduce_gradients`` reduces
    zero1                  "only at gradient accumulation boundaries"), then one
                           exchange overlapped with the last backward
    zero2                  T_K = K·(T_fwd + core) + U + C2 + O: DeepSpeed "ZeRO stage
                           >= 2 communicates during non gradient accumulation
                           boundaries as well" — every micro-batch's backward reduces
                           its buckets; the parameter all-gather C2 once, after the step
    fsdp, hsdp             T_K = K·(T_fwd + T_bwd + E) + U + O: every micro-batch
                           gathers each unit in forward and backward and
                           reduce-scatters it (FULL_SHARD/HYBRID_SHARD free the
                           parameters after forward and backward, under ``no_sync``
                           too; without it the gradients stay sharded)
    =====================  ======================================================

    With a measured step time (``step_time_s``, which includes update and
    overhead once per micro-batch) the step time scales by K.

    Args:
        workload: a :class:`costmodel.Workload` at the micro-batch size b
            (``accumulation_steps`` 1).
        accumulation_steps: K ≥ 1 (1 returns the workload unchanged).

    Returns:
        A new :class:`costmodel.Workload` at batch K·b (name suffixed ``×K``).

    Raises:
        ValueError: when ``accumulation_steps`` is not an integer ≥ 1, or the
            workload is already accumulated.

    References:
        PyTorch ``DistributedDataParallel.no_sync``; Horovod
        ``DistributedOptimizer(backward_passes_per_step=K)``; DeepSpeed
        ``runtime/engine.py`` ``allreduce_gradients`` and
        ``runtime/zero/stage_1_and_2.py`` ``reduce_ready_partitions_and_remove_grads``;
        PyTorch ``torch/distributed/fsdp/_runtime_utils.py`` (``_should_free_in_backward``)
        and ``FullyShardedDataParallel.no_sync``.
    """
    import dataclasses

    k = _check_steps(accumulation_steps)
    if k == 1:
        return workload
    if workload.accumulation_steps != 1:
        raise ValueError(
            f"workload {workload.name!r} is already accumulated "
            f"({workload.accumulation_steps} micro-batches per step)"
        )
    step = None if workload.step_time_s is None else workload.step_time_s * k
    return dataclasses.replace(
        workload,
        name=f"{workload.name}×{k}",
        batch_size=workload.batch_size * k,
        step_time_s=step,
        accumulation_steps=k,
    )
