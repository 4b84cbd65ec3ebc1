"""Device memory per rank of every architecture, from the ZeRO paper's accounting.

A model of Ψ parameters trained with a working copy of d bytes per element
(the workload's ``dtype_bytes``: 2 for fp16/bf16 mixed precision, 4 for fp32)
holds, per replica (Rajbhandari et al. 2020, §3.1 and Table 1):

    parameters  d·Ψ      gradients  d·Ψ      optimizer state  K·Ψ

with K = 4·w bytes of fp32 optimizer state, w words per parameter (SGD 0,
momentum 1, Adam 2: m and v), plus an fp32 master copy of 4 bytes when the
working copy is narrower than fp32 (mixed precision). Mixed-precision Adam is
the paper's K = 12 (2Ψ + 2Ψ + 12Ψ = 16Ψ); fp32 Adam is K = 8 (4Ψ + 4Ψ + 8Ψ,
also 16Ψ).

What each architecture shards (s = shard ranks) and the buffers it adds:

==============  ============================  ===================================
architecture    per worker rank               buffers
==============  ============================  ===================================
ring, tree,     dΨ + dΨ + KΨ                  none
hierarchical    (DDP, Horovod: replicated)
p2p             dΨ + dΨ + KΨ/n                none
ps (dedicated)  dΨ + dΨ; each server          none
                (2d + K)Ψ/k
ps (colocated)  dΨ + dΨ + (2d + K)Ψ/k on the  none
                k ranks hosting a server
ps_host         dΨ + dΨ (state in host RAM)   none
hybrid          dΨ + dΨ + (2d + K)Ψ/k on the  none
                node ranks hosting a server
zero1           dΨ + dΨ + KΨ/n                two buckets (ZeRO P_os; DeepSpeed's
                                              ``ipg_buffer``: with
                                              ``contiguous_gradients`` and
                                              ``overlap_comm``, as emitted, two
                                              of ``reduce_bucket_size``)
zero2           dΨ + dΨ/n + KΨ/n              two buckets, as zero1 (P_os+g)
fsdp            (2d + K)Ψ/n                   the root unit (kept gathered all
                                              step) + 2 gathered units (current
                                              + prefetched, at most the rest of
                                              dΨ) + 1 unit of unsharded
                                              gradients (P_os+g+p)
hsdp            (2d + K)Ψ/g                   as fsdp
==============  ============================  ===================================

Buffers are the unsharded staging a rank needs beyond its sharded states (DDP
stages buckets inside the full gradients, ``gradient_as_bucket_view``; DeepSpeed
stages 1 and 2 copy gradients into their own buckets: ``stage_1_and_2.py``
allocates ``ipg_buffer`` of ``reduce_bucket_size`` elements, one, or two with
``overlap_comm``; Horovod's fusion buffer is not counted — the ring's memory is
DDP's — and ``framework_settings`` says its size; other temporary buffers are
the paper's "residual memory", §6, not counted). A bucket is min(cap, dΨ)
bytes (a cap of 0, one collective per tensor, stages one tensor: counted as
none); a unit is the largest FSDP unit, :func:`costmodel.architectures.unit_bytes`.
Activations: for a transformer workload (``Workload.transformer``),
:func:`activation_bytes` (Korthikanti et al., arXiv:2205.05198, §4:
s·b·h·(34 + 5·a·s/h) bytes per GPT layer in 16-bit; flash attention and
selective recomputation drop the s² term, full recomputation keeps each
layer's input); for other models none are counted unless ``activation_bytes``
is given.

References:
    Rajbhandari, Rasley, Ruwase & He, "ZeRO", SC 2020: §3.1 (16Ψ for
    mixed-precision Adam, K = 12), §5 and Table 1 (memory per device of P_os,
    P_os+g, P_os+g+p: 4Ψ + KΨ/N_d, 2Ψ + (2 + K)Ψ/N_d, (4 + K)Ψ/N_d).
    Zhao et al., "PyTorch FSDP", VLDB 2023, §3.2 (one unit unsharded at a time,
    plus the prefetched one).
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from ._errors import format_choices

__all__ = [
    "MemoryBreakdown",
    "memory_per_rank",
    "optimizer_bytes_per_param",
    "OPTIMIZER_WORDS",
    "activation_bytes",
    "with_activation_checkpointing",
]

#: fp32 optimizer-state words per parameter (Kingma & Ba 2015 for Adam's m, v).
OPTIMIZER_WORDS = {"sgd": 0.0, "momentum": 1.0, "adam": 2.0}


def optimizer_bytes_per_param(optimizer, dtype_bytes: int) -> float:
    """K, bytes of optimizer state per parameter (ZeRO §3.1).

    Args:
        optimizer: ``"sgd"``, ``"momentum"``, ``"adam"``, or a number w ≥ 0 of
            fp32 state words per parameter (the tuner's optimizer state factor).
        dtype_bytes: bytes of the working copy of parameters and gradients, ≥ 1;
            below 4 (mixed precision) an fp32 master copy is added.

    Returns:
        K = 4·w + (4 if dtype_bytes < 4 else 0), bytes.

    Raises:
        ValueError: an unknown optimizer name or a negative / non-finite w.

    Example:
        >>> optimizer_bytes_per_param("adam", 2), optimizer_bytes_per_param("adam", 4)
        (12.0, 8.0)
    """
    if isinstance(optimizer, str):
        key = optimizer.lower()
        if key not in OPTIMIZER_WORDS:
            raise ValueError(
                f"unknown optimizer {optimizer!r}; valid: {format_choices(OPTIMIZER_WORDS, optimizer)}"
            )
        words = OPTIMIZER_WORDS[key]
    elif isinstance(optimizer, numbers.Real) and not isinstance(optimizer, bool):
        words = float(optimizer)
        if not math.isfinite(words) or words < 0:
            raise ValueError(f"optimizer state words must be finite and ≥ 0, got {optimizer!r}")
    else:
        raise ValueError(f"optimizer must be a name or a number ≥ 0, got {optimizer!r}")
    return 4.0 * words + (4.0 if dtype_bytes < 4 else 0.0)


def _layer_coefficients(t) -> tuple[float, float]:
    """(c_h, c_s): one layer keeps s·b·h·c_h + a·s²·b·c_s bytes (16-bit; Korthikanti §4.1).

    Attention block 11·sbh (QKV input 2, Q and K 4, V 2, output-projection input
    2, dropout mask 1) + 5·as²b (softmax output 2, its dropout mask 1 and
    output 2); two layer norms' inputs 4·sbh; MLP: input 2·sbh, then 2·sbf for
    each tensor kept (GeLU: its input and the second linear's input, 4·sbf;
    SwiGLU: gate, up and their product, 6·sbf) and a dropout mask sbh. With
    f = 4h and dropout: 11 + 4 + 19 = 34 and 5, the paper's s·b·h·(34 + 5as/h).
    Without dropout (Llama) the masks go and the s² part is the softmax output, 2.
    """
    drop = 1.0 if t.dropout else 0.0
    attn = 10.0 + drop
    mlp = 2.0 + (6.0 if t.gated else 4.0) * t.ffn / t.hidden + drop
    return attn + 4.0 + mlp, (5.0 if t.dropout else 2.0)


def activation_bytes(workload, batch_size=None, *, flash_attention: bool = True):
    """Activation bytes one rank keeps for backward, for a transformer workload.

    Per micro-batch of b = ``batch_size`` / ``workload.accumulation_steps``
    sequences of s tokens, L layers of width h and a heads (Korthikanti et al.,
    "Reducing Activation Recomputation in Large Transformer Models",
    arXiv:2205.05198, §4.1 without tensor or sequence parallelism; 16-bit
    activations, 1-byte dropout masks):

        per layer  s·b·h·c_h + a·s²·b·c_s    (c_h = 34, c_s = 5 for GPT; see _layer_coefficients)
        flash attention or selective recomputation:  the a·s²·b term is not kept
        full recomputation:  2·s·b·h per layer (its input) + one layer's full set
        output:  4·s·b·v (fp32 logits for the loss, v the vocabulary) + 4·s·b·h
                 (the embedding output and the final norm's input)

    scaled by the compute dtype's bytes / 2 when the workload's gradients are
    fp32 (``dtype_bytes`` 4: activations in fp32 too).

    Args:
        workload: a :class:`costmodel.Workload`; without ``transformer`` the
            result is 0 (activations unknown).
        batch_size: samples per worker per optimizer step, ≥ 1 (default the
            workload's); arrays broadcast.
        flash_attention: the attention kernel keeps no s×s matrices (PyTorch
            SDPA's flash / memory-efficient kernels, Dao et al. 2022).

    Returns:
        float64 array (the shape of ``batch_size``), bytes ≥ 0.

    Example:
        >>> from costmodel import get_workload
        >>> w = get_workload("gpt2", 8, dtype_bytes=2)     # 12 layers, h 768, s 1024
        >>> round(float(activation_bytes(w, flash_attention=False)) / 2**30, 2)
        9.57
    """
    t = workload.transformer
    b = np.asarray(workload.batch_size if batch_size is None else batch_size, dtype=np.float64)
    if t is None:
        return np.zeros_like(b)
    micro = b / workload.accumulation_steps
    s, h, a, L = float(t.seq_len), float(t.hidden), float(t.heads), float(t.layers)
    c_h, c_s = _layer_coefficients(t)
    mode = workload.activation_checkpointing
    square = 0.0 if (flash_attention or mode == "selective") else c_s * a * s * s
    layer = s * h * c_h + square  # per sequence
    layers = L * 2.0 * s * h + layer if mode == "full" else L * layer
    out = 4.0 * s * t.vocab + 4.0 * s * h
    scale = 2.0 if workload.dtype_bytes >= 4 else 1.0
    return micro * (layers + out) * scale


_activations = activation_bytes  # memory_per_rank's argument of the same name hides it


def with_activation_checkpointing(workload, mode: str):
    """The workload under activation checkpointing: its memory mode and recompute FLOPs.

    * ``"full"``: every layer's forward runs again in backward (Chen et al. 2016;
      Korthikanti §5: about 33% more compute): ``bwd_flops`` += ``fwd_flops``.
    * ``"selective"``: the attention core (QKᵀ, softmax, attention·V) runs again:
      4·s²·h FLOPs per layer per sequence (Korthikanti §5, their Eq. for the
      recompute), added to backward in proportion to each tensor's share.
    * ``"none"``: unchanged.

    Args:
        workload: a :class:`costmodel.Workload`; ``selective`` needs its
            ``transformer`` shape.
        mode: one of ``"none"``, ``"selective"``, ``"full"``.

    Returns:
        A new :class:`costmodel.Workload` with ``activation_checkpointing`` = mode.

    Raises:
        ValueError: an unknown mode, or ``selective`` for a workload without a
            transformer shape.
    """
    import dataclasses

    from .workloads import CHECKPOINTING

    if mode not in CHECKPOINTING:
        raise ValueError(
            f"unknown activation checkpointing {mode!r}; valid: {', '.join(CHECKPOINTING)}"
        )
    bwd = np.asarray(workload.bwd_flops, dtype=np.float64)
    if mode == "full":
        bwd = bwd + np.asarray(workload.fwd_flops, dtype=np.float64)
    elif mode == "selective":
        t = workload.transformer
        if t is None:
            raise ValueError(
                f"selective activation checkpointing recomputes attention: workload "
                f"{workload.name!r} is not a transformer (use 'full')"
            )
        extra = t.layers * 4.0 * float(t.seq_len) ** 2 * t.hidden
        total = float(bwd.sum())
        bwd = bwd * (1.0 + extra / total) if total > 0 else bwd
    return dataclasses.replace(workload, bwd_flops=bwd, activation_checkpointing=mode)


class MemoryBreakdown:
    """Bytes one rank holds, by kind (numpy arrays of one broadcast shape).

    Attributes:
        parameters_bytes, gradients_bytes, optimizer_bytes: model states on a
            worker rank, bytes (including a colocated server's shard).
        buffer_bytes: communication buffers (buckets, gathered FSDP units), bytes.
        activation_bytes: activations as given by the caller, bytes.
        total_bytes: the sum of the above: what a worker rank needs.
        server_bytes: what a dedicated parameter server needs (0 otherwise).
    """

    FIELDS = (
        "parameters_bytes",
        "gradients_bytes",
        "optimizer_bytes",
        "buffer_bytes",
        "activation_bytes",
        "total_bytes",
        "server_bytes",
    )

    def __init__(self, parameters, gradients, optimizer, buffers, activations, server):
        arrays = np.broadcast_arrays(
            *(
                np.asarray(x, dtype=np.float64)
                for x in (parameters, gradients, optimizer, buffers, activations, server)
            )
        )
        (
            self.parameters_bytes,
            self.gradients_bytes,
            self.optimizer_bytes,
            self.buffer_bytes,
            self.activation_bytes,
            self.server_bytes,
        ) = arrays
        self.total_bytes = (
            self.parameters_bytes
            + self.gradients_bytes
            + self.optimizer_bytes
            + self.buffer_bytes
            + self.activation_bytes
        )

    def to_dict(self) -> dict:
        """Plain floats (scalars) or lists."""
        out = {}
        for f in self.FIELDS:
            a = getattr(self, f)
            out[f] = a.item() if a.ndim == 0 else a.tolist()
        return out

    def __repr__(self) -> str:
        return (
            "MemoryBreakdown(" + ", ".join(f"{f}={getattr(self, f)!r}" for f in self.FIELDS) + ")"
        )


def _check(name, v, minimum):
    a = np.asarray(v, dtype=np.float64)
    if not np.all(np.isfinite(a)) or np.any(a < minimum):
        bad = a[~np.isfinite(a) | (a < minimum)].ravel()[0]
        raise ValueError(f"{name} must be finite and ≥ {minimum:g}, got {float(bad)!r}")
    return a


def memory_per_rank(
    workload,
    architecture,
    workers,
    *,
    ranks_per_node=1,
    servers=1,
    optimizer="adam",
    bucket_bytes=None,
    activation_bytes=None,
    batch_size=None,
    colocated: bool = False,
) -> MemoryBreakdown:
    """Device memory one rank needs, by kind (module docstring: the accounting).

    ``workers``, ``ranks_per_node``, ``servers``, ``bucket_bytes`` and
    ``activation_bytes`` broadcast against each other (numpy; not traced).

    Args:
        workload: a :class:`costmodel.Workload` (Ψ = ``total_params``,
            d = ``dtype_bytes``).
        architecture: a name in :data:`costmodel.ARCHITECTURE_NAMES` or an
            architecture instance (``ps`` placement and FSDP wrap from it).
        workers: n ≥ 1.
        ranks_per_node: g ≥ 1 (hsdp shards over min(g, n); hybrid's servers sit
            on the ⌈n/g⌉ nodes).
        servers: k ≥ 1 parameter servers (ps, hybrid).
        optimizer: see :func:`optimizer_bytes_per_param` (default mixed/fp32 Adam).
        bucket_bytes: gradient bucket cap, bytes ≥ 0, for zero1/zero2's two
            staging buckets (0: per tensor, none); ``None`` = DDP's 25 MiB. For fsdp/hsdp with
            ``wrap="bucket"`` it is the unit cap.
        activation_bytes: activations per rank, bytes ≥ 0; ``None``: the
            transformer formula (:func:`activation_bytes`, flash attention) at
            ``batch_size``, 0 for other models (not counted).
        batch_size: samples per worker per step for the activations (default
            the workload's; broadcasts).
        colocated: ``ps`` servers on workers (with a name ``architecture``).

    Returns:
        A :class:`MemoryBreakdown` of arrays of the broadcast shape.

    Raises:
        ValueError: unknown architecture or optimizer, workers / ranks /
            servers < 1, negative bytes.

    Example:
        >>> from costmodel import get_workload
        >>> w = get_workload("llama2_7b", 1, dtype_bytes=2)   # 6.74 B parameters
        >>> round(float(memory_per_rank(w, "ring", 8, activation_bytes=0).total_bytes) / 1e9)
        108
        >>> round(float(memory_per_rank(w, "ring", 8).activation_bytes) / 1e9)  # 1 × 4,096 tokens
        18
        >>> round(float(memory_per_rank(w, "fsdp", 8, activation_bytes=0).total_bytes) / 1e9, 1)
        15.3

    (Long for its documentation: the body is 62 lines.)
    """
    from ._buckets import has_root_unit
    from .architectures import AbstractArchitecture, get_architecture, unit_bytes

    arch = (
        architecture
        if isinstance(architecture, AbstractArchitecture)
        else get_architecture(str(architecture), colocated=colocated)
    )
    from ._timeline import DEFAULT_BUCKET_BYTES

    cap = DEFAULT_BUCKET_BYTES if bucket_bytes is None else bucket_bytes
    if activation_bytes is None:
        batch = workload.batch_size if batch_size is None else batch_size
        activation_bytes = _activations(workload, _check("batch_size", batch, 1.0))
    n, g, k, cap, act = np.broadcast_arrays(
        _check("workers", workers, 1.0),
        _check("ranks_per_node", ranks_per_node, 1.0),
        _check("servers", servers, 1.0),
        _check("bucket_bytes", cap, 0.0),
        _check("activation_bytes", activation_bytes, 0.0),
    )
    psi = float(workload.total_params)
    d = float(workload.dtype_bytes)
    K = optimizer_bytes_per_param(optimizer, workload.dtype_bytes)
    model = d * psi  # one copy of the parameters (or gradients), bytes
    state = (2.0 * d + K) * psi  # everything a replica holds
    bucket = np.minimum(cap, model)
    zero = np.zeros_like(n)
    name = arch.name
    g = np.minimum(g, n)
    if name in ("ring", "tree", "hierarchical"):
        return MemoryBreakdown(model, model, K * psi, zero, act, zero)
    if name == "p2p":
        return MemoryBreakdown(model, model, K * psi / n, zero, act, zero)
    if name == "zero1":
        return MemoryBreakdown(model, model, K * psi / n, 2.0 * bucket, act, zero)
    if name == "zero2":
        return MemoryBreakdown(model, model / n, K * psi / n, 2.0 * bucket, act, zero)
    if name in ("fsdp", "hsdp"):
        s = n if name == "fsdp" else g
        root = 0.0
        if getattr(arch, "wrap", "block") == "block":
            units = unit_bytes(workload, "block")
            if has_root_unit(workload.tensor_names):
                root, units = float(units[0]), units[1:]
            unit = float(np.max(units))
            grads = max(unit, root)
        else:
            caps = np.unique(cap)
            largest = {c: float(np.max(unit_bytes(workload, "bucket", c))) for c in caps}
            unit = grads = np.vectorize(largest.__getitem__, otypes=[np.float64])(cap)
        # gathered: the root unit (kept all step), the current and the prefetched
        # unit's parameters (at most the rest of the model) and one unit's
        # unsharded gradients; nothing on one rank
        gathered = np.where(s > 1, root + np.minimum(2.0 * unit, model - root) + grads, 0.0)
        return MemoryBreakdown(model / s, model / s, K * psi / s, gathered, act, zero)
    if name == "ps_host":
        return MemoryBreakdown(model, model, zero, zero, act, zero)
    if name == "ps":
        kk = np.minimum(k, n) if arch.colocated else k
        shard = state / kk
        if arch.colocated:
            # a rank hosting a server also holds its shard (its parameters,
            # summed gradients and optimizer state)
            own = d * psi / kk
            return MemoryBreakdown(model + own, model + own, K * psi / kk, zero, act, zero)
        return MemoryBreakdown(model, model, zero, zero, act, shard)
    if name == "hybrid":
        m = np.ceil(n / g)
        kk = np.clip(k, 1.0, m)
        return MemoryBreakdown(
            model + d * psi / kk, model + d * psi / kk, K * psi / kk, zero, act, zero
        )
    raise ValueError(f"memory_per_rank: no accounting for architecture {name!r}")
