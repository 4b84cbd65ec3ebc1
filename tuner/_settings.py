"""The frameworks' settings that apply a recommended configuration.

:func:`framework_settings` maps one configuration (architecture name, servers
and their placement, workers, ranks per node, bucket cap) to the options of
the frameworks that implement it, each mapping citing that framework's
documentation; :func:`format_framework_settings` prints them as copyable text.
It reads plain fields only (a mapping such as ``Configuration.to_dict()`` or
any object with those attributes), so it does not depend on the tuner's classes.

Architectures → frameworks:

=================  ==================================================================
architecture       frameworks (keys of the result)
=================  ==================================================================
ring, tree,        ``pytorch_ddp`` (``DistributedDataParallel(bucket_cap_mb=...)``),
hierarchical       ``horovod`` (``HOROVOD_FUSION_THRESHOLD``, ``HOROVOD_CYCLE_TIME``,
                   ``HOROVOD_HIERARCHICAL_ALLREDUCE=1``); tree: ``NCCL_ALGO=Tree``
ps, ps_host,       ``tensorflow`` (``tf.distribute.experimental.ParameterServerStrategy``:
hybrid, p2p        ps tasks, their placement, ``FixedShardsPartitioner``; tf_cnn_benchmarks
                   ``--variable_update``, ``--local_parameter_device``)
zero1, zero2       ``deepspeed`` (``zero_optimization.stage``, ``reduce_bucket_size``,
                   ``allgather_bucket_size``); zero1 also ``pytorch_ddp`` with
                   ``ZeroRedundancyOptimizer`` (FSDP's ``SHARD_GRAD_OP`` is not zero2's
                   schedule: it gathers parameters in every forward)
fsdp, hsdp         ``pytorch_fsdp`` (``ShardingStrategy.FULL_SHARD`` / ``HYBRID_SHARD``,
                   ``BackwardPrefetch.BACKWARD_PRE``), ``deepspeed`` (stage 3; hsdp:
                   MiCS ``mics_shard_size``)
=================  ==================================================================

Precision and accumulation as predicted: DDP's compression hook and ``no_sync()``,
Horovod's ``Compression.fp16`` and ``backward_passes_per_step``, FSDP's
``MixedPrecision``, DeepSpeed's ``"bf16"``/``"fp16"``, ``communication_data_type``,
``gradient_accumulation_steps`` and ``train_micro_batch_size_per_gpu``.

Units: bytes (``bucket_bytes``), except where a framework wants another unit —
DDP's ``bucket_cap_mb`` is MiB (``int(bucket_cap_mb * 1024 * 1024)`` bytes in
``torch/nn/parallel/distributed.py``), DeepSpeed's bucket sizes are ELEMENTS
(``docs/_pages/config-json.md``: "Number of elements reduced/allreduced at a
time"), Horovod's cycle time is milliseconds.

References (documentation of each mapping):
    PyTorch ``torch.nn.parallel.DistributedDataParallel`` (``bucket_cap_mb``,
    ``gradient_as_bucket_view``; https://pytorch.org/docs/stable/generated/
    torch.nn.parallel.DistributedDataParallel.html) and its source
    ``torch/nn/parallel/distributed.py`` (``self.bucket_bytes_cap =
    int(bucket_cap_mb * 1024 * 1024)``; first bucket
    ``dist._DEFAULT_FIRST_BUCKET_BYTES`` = ``kDefaultFirstBucketBytes =
    int(1024 * 1024)`` in ``torch/csrc/distributed/c10d/reducer.hpp``, a
    compile-time constant the Python API cannot change: pytorch/pytorch#61353).
    ``torch.distributed.optim.ZeroRedundancyOptimizer``.
    PyTorch FSDP: ``torch.distributed.fsdp.FullyShardedDataParallel``,
    ``ShardingStrategy`` (FULL_SHARD, SHARD_GRAD_OP, HYBRID_SHARD),
    ``BackwardPrefetch.BACKWARD_PRE``, ``limit_all_gathers``
    (https://pytorch.org/docs/stable/fsdp.html).
    Horovod ``docs/tensor-fusion.rst`` (``HOROVOD_FUSION_THRESHOLD`` in bytes,
    0 disables fusion; ``HOROVOD_CYCLE_TIME`` in ms), ``docs/autotune.rst`` /
    ``horovodrun --help`` (``--fusion-threshold-mb``, ``--cycle-time-ms``,
    ``--hierarchical-allreduce``), release notes v0.21.0 (defaults: cycle time
    5 ms → 1 ms, fusion threshold 64 MB → 128 MB).
    NCCL environment variables (``NCCL_ALGO``:
    https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html).
    TensorFlow ``tf.distribute.experimental.ParameterServerStrategy``,
    ``tf.distribute.experimental.partitioners.FixedShardsPartitioner``,
    ``TF_CONFIG`` (https://www.tensorflow.org/tutorials/distribute/
    parameter_server_training); tensorflow/benchmarks
    ``scripts/tf_cnn_benchmarks/benchmark_cnn.py`` flags ``--variable_update``
    (parameter_server, distributed_replicated), ``--local_parameter_device``,
    ``--cross_replica_sync``, ``--ps_hosts``, ``--worker_hosts``.
    DeepSpeed ``docs/_pages/config-json.md`` (``zero_optimization``: ``stage``,
    ``reduce_bucket_size``, ``allgather_bucket_size``, ``overlap_comm``,
    ``reduce_scatter``, ``contiguous_gradients``) and the ZeRO-3 / MiCS docs
    (https://deepspeed.readthedocs.io/en/latest/zero3.html: ``mics_shard_size``,
    ``stage3_prefetch_bucket_size``).
"""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Mapping

from costmodel import format_bytes, format_seconds

__all__ = [
    "DDP_FIRST_BUCKET_BYTES",
    "FRAMEWORK_ARCHITECTURES",
    "HOROVOD_DEFAULT_CYCLE_TIME_MS",
    "ddp_bucket_cap_bytes",
    "framework_settings",
    "format_framework_settings",
]

#: PyTorch DDP's default first bucket, bytes: ``kDefaultFirstBucketBytes = int(1024 *
#: 1024)`` (torch/csrc/distributed/c10d/reducer.hpp), exposed as
#: ``torch.distributed._DEFAULT_FIRST_BUCKET_BYTES``. Since PyTorch 2.4 it applies only
#: when ``bucket_cap_mb`` is left at None (``DistributedDataParallel.__init__`` sets
#: ``bucket_bytes_cap_default``; an explicit cap sizes the first bucket too); before 2.4
#: the first bucket was always this size.
DDP_FIRST_BUCKET_BYTES = 1024 * 1024

#: Horovod's default ``HOROVOD_CYCLE_TIME`` since v0.21.0, ms (5 ms before).
HOROVOD_DEFAULT_CYCLE_TIME_MS = 1.0
#: The longest cycle we emit, ms: Horovod waits one cycle between fusion rounds
#: ("the larger the cycle time, the more batching, but the greater latency between
#: each allreduce", ``horovodrun --help`` for ``--cycle-time-ms``, default 1), so
#: a ready bucket waits up to a cycle; 1–10 ms is the range its docs and tuning use.
HOROVOD_MAX_CYCLE_TIME_MS = 10.0

_MIB = 1024 * 1024

_DOCS = {
    "pytorch_ddp": "https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html",
    "pytorch_fsdp": "https://pytorch.org/docs/stable/fsdp.html",
    "horovod": "https://horovod.readthedocs.io/en/stable/tensor-fusion_include.html",
    "tensorflow": "https://www.tensorflow.org/tutorials/distribute/parameter_server_training",
    "deepspeed": "https://www.deepspeed.ai/docs/config-json/#zero-optimizations-for-fp16-training",
}

#: Which frameworks each architecture name maps to (the result's keys, in order).
FRAMEWORK_ARCHITECTURES: dict[str, tuple[str, ...]] = {
    "ring": ("pytorch_ddp", "horovod"),
    "tree": ("pytorch_ddp", "horovod"),
    "hierarchical": ("pytorch_ddp", "horovod"),
    "ps": ("tensorflow",),
    "ps_host": ("tensorflow",),
    "hybrid": ("tensorflow",),
    "p2p": ("tensorflow",),
    "zero1": ("deepspeed", "pytorch_ddp"),
    "zero2": ("deepspeed",),
    "fsdp": ("pytorch_fsdp", "deepspeed"),
    "hsdp": ("pytorch_fsdp", "deepspeed"),
}


# -- reading plain fields -----------------------------------------------------------------


def _field(config, key, default=None):
    if isinstance(config, Mapping):
        return config.get(key, default)
    return getattr(config, key, default)


def _int(config, key, minimum, default=None) -> int:
    v = _field(config, key, default)
    if isinstance(v, bool) or not isinstance(v, numbers.Real) or v != int(v) or v < minimum:
        raise ValueError(
            f"framework_settings: config field {key!r} must be an integer >= {minimum}, got {v!r}"
        )
    return int(v)


def _backward_s(config) -> float | None:
    for source in (config, _field(config, "breakdown", None) or {}):
        v = _field(source, "backward_s", None)
        if isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v) and v > 0:
            return float(v)
    return None


class _Plain:
    """The plain fields of one configuration, checked once."""

    def __init__(self, config, workload, dtype_bytes, param_dtype_bytes=None, grad_dtype=None,
                 device="gpu"):  # fmt: skip
        if device not in ("gpu", "cpu"):
            raise ValueError(f"framework_settings: device must be 'gpu' or 'cpu', got {device!r}")
        self.device = device
        arch = _field(config, "architecture")
        if arch not in FRAMEWORK_ARCHITECTURES:
            raise ValueError(
                f"framework_settings: unknown architecture {arch!r}; valid: "
                f"{', '.join(sorted(FRAMEWORK_ARCHITECTURES))}"
            )
        self.arch = arch
        self.workers = _int(config, "workers", 1)
        self.g = min(_int(config, "ranks_per_node", 1, 1), self.workers)
        self.nodes = math.ceil(self.workers / self.g)
        self.bucket = _int(config, "bucket_bytes", 0)
        self.servers = _int(config, "servers", 0, 0)
        self.colocated = bool(_field(config, "colocated", False))
        self.backward_s = _backward_s(config)
        self.grad_bytes = None if workload is None else int(workload.total_param_bytes)
        if dtype_bytes is None:
            dtype_bytes = 4 if workload is None else int(workload.dtype_bytes)
        if isinstance(dtype_bytes, bool) or not isinstance(dtype_bytes, numbers.Integral):
            raise ValueError(
                f"framework_settings: dtype_bytes must be an integer >= 1, got {dtype_bytes!r}"
            )
        if dtype_bytes < 1:
            raise ValueError(f"framework_settings: dtype_bytes must be >= 1, got {dtype_bytes}")
        self.dtype_bytes = int(dtype_bytes)
        p = self.dtype_bytes if param_dtype_bytes is None else param_dtype_bytes
        if isinstance(p, bool) or not isinstance(p, numbers.Integral) or p < 1:
            raise ValueError(
                f"framework_settings: param_dtype_bytes must be an integer >= 1, got {p!r}"
            )
        self.param_bytes = int(p)
        self.grad_dtype = grad_dtype
        k = _field(config, "accumulation_steps", None)
        if k is None:
            k = getattr(workload, "accumulation_steps", 1) if workload is not None else 1
        self.accumulation = _int({"accumulation_steps": k}, "accumulation_steps", 1)
        batch = _field(config, "batch_size", None)
        self.micro_batch = None
        if isinstance(batch, numbers.Real) and not isinstance(batch, bool) and batch > 0:
            micro = float(batch) / self.accumulation
            if micro == int(micro):
                self.micro_batch = int(micro)
        #: the wire dtype's name: fp32, or the 16-bit one (--grad-dtype; fp16 if unnamed)
        self.wire = {4: "fp32", 2: grad_dtype if grad_dtype in ("bf16", "fp16") else "fp16"}.get(
            self.dtype_bytes
        )
        self.wrap = str(_field(config, "wrap", "block"))
        self.root_bytes = None
        if workload is not None and self.arch in ("fsdp", "hsdp") and self.wrap == "block":
            from costmodel.architectures import get_architecture, unit_bytes

            if get_architecture(self.arch).keeps_root(workload):
                self.root_bytes = float(unit_bytes(workload)[0])

    @property
    def ds_bucket_elements(self) -> int:
        """DeepSpeed's bucket in elements: the cap, at most the whole model's gradients."""
        b = self.bucket if self.grad_bytes is None else min(self.bucket, self.grad_bytes)
        return b // self.dtype_bytes

    @property
    def torchrun(self) -> str:
        return f"torchrun --nnodes={self.nodes} --nproc-per-node={self.g} train.py"


# -- one builder per framework --------------------------------------------------------------


def _mb(nbytes: int) -> float:
    """MiB as DDP reads ``bucket_cap_mb``: exact, since a byte count / 2^20 is a dyadic fraction."""
    return nbytes / _MIB


#: DDP's built-in compression hooks by wire element size (torch.distributed.algorithms.
#: ddp_comm_hooks.default_hooks): each casts a bucket to the wire dtype before its all_reduce.
_DDP_HOOKS = {2: ("fp16_compress_hook", "bf16_compress_hook")}


def ddp_bucket_cap_bytes(wire_bucket_bytes: int, param_bytes: int, wire_bytes: int) -> int:
    """DDP's bucket cap (bytes) that gives buckets of ``wire_bucket_bytes`` on the wire.

    DDP sizes buckets by the parameters' gradient bytes, ``numel × element_size``
    in the parameters' dtype (``compute_bucket_assignment_by_size`` in
    ``torch/csrc/distributed/c10d/reducer.cpp``); a compression hook
    (``fp16_compress_hook``) casts each bucket after, so the wire bucket is
    ``param_bytes / wire_bytes`` times smaller than the cap.

    Args:
        wire_bucket_bytes: the modelled bucket on the wire, bytes ≥ 0.
        param_bytes: bytes per parameter (and local gradient) element, ≥ 1.
        wire_bytes: bytes per element on the wire, ≥ 1.

    Example:
        >>> ddp_bucket_cap_bytes(25 * 2**20, 4, 2) == 50 * 2**20  # fp32 params, fp16 wire
        True
    """
    return wire_bucket_bytes * param_bytes // wire_bytes


def _pytorch_ddp(c: _Plain) -> dict:
    cap = ddp_bucket_cap_bytes(c.bucket, c.param_bytes, c.dtype_bytes)
    kwargs = {"bucket_cap_mb": _mb(cap), "gradient_as_bucket_view": True}
    env = {"NCCL_ALGO": "Tree"} if c.arch == "tree" else {}
    notes = [
        f"bucket_cap_mb is MiB: DDP caps a bucket at int(bucket_cap_mb * 1024 * 1024) = "
        f"{cap} bytes ({format_bytes(cap)})",
        "first bucket: the cap too, as the prediction sizes it, on PyTorch ≥ 2.4 (an explicit "
        "bucket_cap_mb clears bucket_bytes_cap_default, torch/nn/parallel/distributed.py); "
        f"before 2.4 it was {format_bytes(DDP_FIRST_BUCKET_BYTES)} "
        "(torch.distributed._DEFAULT_FIRST_BUCKET_BYTES, pytorch/pytorch#61353)",
        "gradient_as_bucket_view=True: gradients are views into the buckets (no copy, "
        "one gradient's worth less memory)",
    ]
    hook = None
    if cap != c.bucket:
        hooks = _DDP_HOOKS.get(c.dtype_bytes)
        hook = None if not hooks else hooks[1] if c.grad_dtype == "bf16" else hooks[0]
        notes.append(
            f"DDP sizes buckets by the parameters' gradient bytes ({c.param_bytes} bytes per "
            f"element; reducer.cpp compute_bucket_assignment_by_size) and a compression hook "
            f"casts each bucket to {c.dtype_bytes} bytes per element after: bucket_cap_mb is "
            f"{c.param_bytes / c.dtype_bytes:g} × the modelled {format_bytes(c.bucket)} on the wire"
            + (
                f"; the snippet registers {hook}"
                if hook
                else "; register a comm hook that compresses to that size"
            )
        )
    if c.bucket == 0:
        notes.append("bucket_cap_mb=0: one all_reduce per tensor after the first 1 MiB bucket")
    if c.arch == "hierarchical":
        notes.append(
            "DDP has no hierarchical switch: NCCL builds its own intra-/inter-node rings and "
            "trees; Horovod's HOROVOD_HIERARCHICAL_ALLREDUCE=1 is the explicit three-phase form"
        )
    if c.arch == "tree":
        notes.append(
            "NCCL_ALGO=Tree selects NCCL's double binary tree (the model's tree: ⌈log2 n⌉ "
            "latency steps)"
        )
    out = {
        "constructor": "torch.nn.parallel.DistributedDataParallel",
        "kwargs": kwargs,
        "first_bucket_bytes": cap,
        "first_bucket_bytes_before_torch_2_4": DDP_FIRST_BUCKET_BYTES,
        "env": env,
        "launch": c.torchrun,
        "notes": notes,
        "docs": [_DOCS["pytorch_ddp"], "torch/nn/parallel/distributed.py"],
    }
    if c.arch == "zero1":
        out["optimizer"] = (
            "torch.distributed.optim.ZeroRedundancyOptimizer(model.parameters(), "
            "optimizer_class=torch.optim.AdamW, lr=learning_rate)"
        )
        out["notes"].append(
            "ZeRO stage 1 in PyTorch: DDP all-reduces the buckets, ZeroRedundancyOptimizer "
            "shards the optimizer state and broadcasts the updated shards"
        )
        out["docs"].append("https://pytorch.org/docs/stable/distributed.optim.html")
    kw = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
    lines = [f"# {c.torchrun}"]
    lines += [f"export {k}={v}" for k, v in env.items()]
    # device_ids names a GPU; a CPU module must leave it None (DDP raises otherwise,
    # torch/nn/parallel/distributed.py), and the process group is gloo's
    ids = "" if c.device == "cpu" else "device_ids=[local_rank], "
    if c.device == "cpu":
        lines.append('torch.distributed.init_process_group("gloo")')
    lines.append(f"model = DistributedDataParallel(model, {ids}{kw})")
    if hook is not None:
        lines.append(
            "from torch.distributed.algorithms.ddp_comm_hooks import default_hooks\n"
            f"model.register_comm_hook(None, default_hooks.{hook})"
        )
        out["comm_hook"] = f"torch.distributed.algorithms.ddp_comm_hooks.default_hooks.{hook}"
    if "optimizer" in out:
        lines.append(f"optimizer = {out['optimizer']}")
    K = c.accumulation
    if K > 1:
        out["accumulation"] = {"no_sync_micro_batches": K - 1, "micro_batches": K}
        notes.append(
            f"gradient accumulation, {K} micro-batches per step: the first {K - 1} backward "
            "passes run under model.no_sync() (no all_reduce; gradients accumulate in "
            "param.grad) and the last reduces them, one exchange per step as predicted"
        )
        lines += [
            "import contextlib",
            f"for i, micro_batch in enumerate(micro_batches):  # {K} per optimizer step",
            f"    with model.no_sync() if i < {K - 1} else contextlib.nullcontext():",
            "        loss_fn(model(micro_batch)).backward()",
            "optimizer.step(); optimizer.zero_grad()",
        ]
    out["snippet"] = "\n".join(lines)
    return out


def _horovod(c: _Plain) -> dict:
    env = {"HOROVOD_FUSION_THRESHOLD": str(c.bucket)}
    # horovodrun's --fusion-threshold-mb takes whole MiB; the variable takes any byte count.
    flags = [f"--fusion-threshold-mb {c.bucket // _MIB}"] if c.bucket % _MIB == 0 else []
    notes = [
        f"HOROVOD_FUSION_THRESHOLD is bytes: {c.bucket} = {format_bytes(c.bucket)}"
        + (" (0 disables tensor fusion)" if c.bucket == 0 else "")
    ]
    if c.arch == "hierarchical":
        env["HOROVOD_HIERARCHICAL_ALLREDUCE"] = "1"
        flags.append("--hierarchical-allreduce")
    if c.arch == "tree":
        env["NCCL_ALGO"] = "Tree"
    cycle = None
    if c.backward_s is not None and c.grad_bytes and c.bucket > 0:
        # Horovod fuses what is ready within one cycle: a cycle shorter than the backward
        # time that fills one bucket sends smaller messages than the threshold.
        fill_ms = 1e3 * c.backward_s * min(c.bucket, c.grad_bytes) / c.grad_bytes
        if fill_ms > HOROVOD_DEFAULT_CYCLE_TIME_MS:
            cycle = float(f"{min(fill_ms, HOROVOD_MAX_CYCLE_TIME_MS):.3g}")
            env["HOROVOD_CYCLE_TIME"] = f"{cycle:g}"
            flags.append(f"--cycle-time-ms {cycle:g}")
            note = (
                f"HOROVOD_CYCLE_TIME {cycle:g} ms: Horovod fuses what is ready in one cycle; "
                f"backward fills one {format_bytes(c.bucket)} bucket in "
                f"{format_seconds(fill_ms / 1e3)}"
            )
            if fill_ms > HOROVOD_MAX_CYCLE_TIME_MS:
                per_cycle = c.grad_bytes * HOROVOD_MAX_CYCLE_TIME_MS / (1e3 * c.backward_s)
                note += (
                    f". We set at most {HOROVOD_MAX_CYCLE_TIME_MS:g} ms, because a ready tensor "
                    f"waits up to one cycle. So Horovod will send messages of about "
                    f"{format_bytes(per_cycle)}, what backward produces in {cycle:g} ms, not "
                    f"the {format_bytes(c.bucket)} buckets predicted; expect more, smaller "
                    "all-reduces and a somewhat slower step than predicted "
                    f"(--cycle-time-ms {fill_ms:.3g} would fill the buckets, and each would "
                    "wait up to that long)"
                )
            else:
                note += (
                    f"; the cost, not in the prediction: a ready bucket waits up to {cycle:g} ms"
                )
            notes.append(note)
        else:
            notes.append(
                f"HOROVOD_CYCLE_TIME: the default {HOROVOD_DEFAULT_CYCLE_TIME_MS:g} ms is enough "
                f"(backward fills a bucket in {format_seconds(fill_ms / 1e3)})"
            )
    else:
        notes.append(
            "HOROVOD_CYCLE_TIME: left at the default (give the workload and the backward time "
            "to check it against the time backward takes to fill one bucket)"
        )
    hosts = ",".join(f"host{i + 1}:{c.g}" for i in range(min(c.nodes, 3)))
    if c.nodes > 3:
        hosts += ",..."
    prefix = " ".join(f"{k}={v}" for k, v in env.items())
    # hvd.DistributedOptimizer(optimizer, named_parameters, compression=Compression.none,
    # backward_passes_per_step=1, ...) (horovod/torch/optimizer.py)
    args = ["optimizer", "named_parameters=model.named_parameters()"]
    if c.dtype_bytes == 2 and c.param_bytes > 2:
        args.append("compression=hvd.Compression.fp16")
        notes.append(
            "compression=hvd.Compression.fp16 casts each gradient to 2 bytes for the "
            "allreduce, as the prediction's wire dtype"
            + (
                "; Horovod has no bf16 compressor (horovod/torch/compression.py: none, fp16), "
                "so the bytes are bf16's but the range is fp16's"
                if c.wire == "bf16"
                else ""
            )
        )
    if c.accumulation > 1:
        args.append(f"backward_passes_per_step={c.accumulation}")
        notes.append(
            f"backward_passes_per_step={c.accumulation}: Horovod accumulates locally and "
            "allreduces once per optimizer step, as predicted"
        )
    optimizer = f"hvd.DistributedOptimizer({', '.join(args)})"
    if c.bucket > 0:
        notes.append(
            f"memory: Horovod allocates a fusion buffer of the threshold, {format_bytes(c.bucket)} "
            "per GPU (horovod/common/fusion_buffer_manager.cc); the memory per rank is DDP's, "
            "whose buckets are views into the gradients: add it for Horovod"
        )
    return {
        "env": env,
        "horovodrun_flags": flags,
        "cycle_time_ms": cycle,
        "optimizer": optimizer,
        "fusion_buffer_bytes": c.bucket,
        "launch": f"horovodrun -np {c.workers} -H {hosts} python train.py",
        "notes": notes,
        "docs": [
            _DOCS["horovod"],
            "https://horovod.readthedocs.io/en/stable/autotune_include.html",
        ],
        "snippet": f"{prefix} horovodrun -np {c.workers} -H {hosts} python train.py\n"
        f"# in train.py:\noptimizer = {optimizer}",
    }


def _tensorflow(c: _Plain) -> dict:
    if c.arch == "p2p":
        servers, colocated = c.workers, True  # every worker serves 1/n of the variables
        mode = "parameter_server"
    elif c.arch == "ps_host":
        servers, colocated = c.nodes, True  # one shard per node, on its host CPU
        mode = "parameter_server"
    elif c.arch == "hybrid":
        servers, colocated = max(1, c.servers), True  # ps tasks on the nodes
        mode = "distributed_replicated"
    else:
        servers, colocated = max(1, c.servers), c.colocated
        mode = "parameter_server"
    # where the variables live: ps_host's on the host CPU; a CPU cluster's on its CPU
    device = "cpu" if c.arch == "ps_host" or c.device == "cpu" else "gpu"
    placement = "colocated on the worker hosts" if colocated else "on dedicated hosts"
    cluster = {"worker": c.workers, "ps": servers}
    notes = [
        f"{servers} ps task{'s' if servers != 1 else ''} {placement}; variables split over "
        f"them with FixedShardsPartitioner(num_shards={servers})",
        "synchronous updates as the model assumes: tf_cnn_benchmarks --cross_replica_sync=True "
        "(TF1 SyncReplicasOptimizer); TF2's ParameterServerStrategy with a ClusterCoordinator "
        "schedules steps asynchronously",
        "TensorFlow sends each variable's gradient on its own: no bucket option "
        f"(the prediction's buckets: {format_bytes(c.bucket)})",
    ]
    if colocated:
        notes.append("colocated: TF_CONFIG lists each worker host again under 'ps' (another port)")
    if c.arch == "p2p":
        notes.append("P2P: every worker is also the parameter server of 1/n of the variables")
    if c.arch == "hybrid":
        notes.append("hybrid: all-reduce inside each node, parameter servers across nodes")
    if c.device == "cpu":
        notes.append(
            "CPU cluster: --device=cpu computes on the CPU and --data_format=NHWC is the "
            "layout it runs (NCHW needs cuDNN, benchmark_cnn.py's flag help)"
        )
    flags = [
        f"--variable_update={mode}",
        *(["--device=cpu", "--data_format=NHWC"] if c.device == "cpu" else []),
        f"--local_parameter_device={device}",
        "--cross_replica_sync=True",
        "--ps_hosts=" + ("<the worker hosts>" if colocated else f"<{servers} ps hosts>"),
        # on CPU each rank is a worker task of its own with one device (/cpu:0);
        # on GPUs one task per host drives its g GPUs
        f"--worker_hosts=<{c.workers} worker tasks>"
        if c.device == "cpu"
        else f"--worker_hosts=<{c.nodes} worker hosts>",
        f"--num_gpus={1 if c.device == 'cpu' else c.g}",
    ]
    snippet = "\n".join(
        [
            f'# TF_CONFIG cluster: {{"worker": [{c.workers} hosts], "ps": [{servers} hosts, {placement}]}}',
            "strategy = tf.distribute.experimental.ParameterServerStrategy(",
            "    tf.distribute.cluster_resolver.TFConfigClusterResolver(),",
            "    variable_partitioner=tf.distribute.experimental.partitioners."
            f"FixedShardsPartitioner(num_shards={servers}))",
            "# tf_cnn_benchmarks: " + " ".join(flags),
        ]
    )
    return {
        "strategy": "tf.distribute.experimental.ParameterServerStrategy",
        "cluster": cluster,
        "ps_tasks": servers,
        "ps_colocated": colocated,
        "variable_partitioner": f"tf.distribute.experimental.partitioners.FixedShardsPartitioner(num_shards={servers})",
        "tf_cnn_benchmarks_flags": flags,
        "notes": notes,
        "docs": [
            _DOCS["tensorflow"],
            "tensorflow/benchmarks scripts/tf_cnn_benchmarks/benchmark_cnn.py",
        ],
        "snippet": snippet,
    }


def _deepspeed(c: _Plain) -> dict:
    stage = {"zero1": 1, "zero2": 2, "fsdp": 3, "hsdp": 3}[c.arch]
    elements = c.ds_bucket_elements
    zero = {"stage": stage}
    notes = []
    if stage < 3:
        zero.update(
            reduce_bucket_size=elements,
            allgather_bucket_size=elements,
            overlap_comm=True,
            reduce_scatter=True,
            contiguous_gradients=True,
        )
        notes.append(
            f"bucket sizes are ELEMENTS: {format_bytes(elements * c.dtype_bytes)} / "
            f"{c.dtype_bytes} bytes per gradient element = {elements}"
        )
    elif c.wrap == "bucket":
        zero.update(reduce_bucket_size=elements, overlap_comm=True, contiguous_gradients=True)
        notes.append(
            f"reduce_bucket_size is ELEMENTS: {format_bytes(elements * c.dtype_bytes)} / "
            f"{c.dtype_bytes} bytes per gradient element = {elements}"
        )
    else:
        zero.update(overlap_comm=True, contiguous_gradients=True)
    if c.arch == "hsdp":
        zero["mics_shard_size"] = c.g
        zero["mics_hierarchical_params_gather"] = False
    notes.append(
        "overlap_comm=True: gradient reduction overlaps backward, as the prediction assumes "
        "(the default is false for stages 1 and 2)"
    )
    config = {}
    if c.micro_batch is not None:
        config["train_micro_batch_size_per_gpu"] = c.micro_batch
    config["gradient_accumulation_steps"] = c.accumulation
    if c.micro_batch is not None:
        notes.append(
            f"train_batch_size = {c.micro_batch} × {c.accumulation} × {c.workers} ranks = "
            f"{c.micro_batch * c.accumulation * c.workers} (DeepSpeed infers it from the two "
            "given; runtime/config.py asserts train_batch = micro × accumulation × world size)"
        )
    if c.wire in ("bf16", "fp16"):
        config[c.wire] = {"enabled": True}
        config["communication_data_type"] = c.wire
        notes.append(
            f'"{c.wire}": enabled with communication_data_type "{c.wire}": gradients are '
            f"exchanged in {c.dtype_bytes} bytes per element, as predicted"
        )
    config["zero_optimization"] = zero
    if stage < 3:
        buffers = 2 * elements * c.dtype_bytes
        notes.append(
            "each gradient bucket is all-reduced, as the prediction assumes: stage_1_and_2.py "
            "average_tensor with use_multi_rank_bucket_allreduce (default true since DeepSpeed "
            "0.12.4) runs one all_reduce per bucket and keeps this rank's slices"
        )
        notes.append(
            "the updated parameters are all-gathered after step() (exposed, as the prediction "
            "assumes); all_gather_into_tensor gathers each parameter group in one call "
            "(allgather_bucket_size applies only where that call is missing)"
        )
        notes.append(
            "memory: contiguous_gradients with overlap_comm allocates two reduce_bucket_size "
            f"buffers (stage_1_and_2.py ipg_buffer), {format_bytes(buffers)}, counted in the "
            "memory per rank"
        )
        if stage == 2:
            notes.append(
                "under gradient accumulation stage 2 reduces in every micro-batch (engine.py: "
                "'ZeRO stage >= 2 communicates during non gradient accumulation boundaries'), "
                "as predicted; stage 1 only at the boundary. PyTorch FSDP's SHARD_GRAD_OP is "
                "not this schedule (it gathers the parameters before every forward and "
                "reduce-scatters the gradients): the prediction is DeepSpeed's"
            )
    else:
        notes.append(
            "stage 3 gathers parameters per module and reduces gradients in buckets of "
            "reduce_bucket_size (defaults kept); the prediction is FSDP's schedule of one unit "
            "per layer block, which DeepSpeed approximates"
            if c.wrap == "block"
            else "stage 3 gathers parameters per module (stage3_prefetch_bucket_size left at "
            "its default); the prediction's units are the gradient buckets"
        )
    if c.arch == "hsdp":
        notes.append(
            f"MiCS: parameters sharded within groups of mics_shard_size = {c.g} ranks (a node), "
            "replicated across nodes: HSDP's layout"
        )
    return {
        "config": config,
        "element_bytes": c.dtype_bytes,
        "launch": f"deepspeed --num_nodes={c.nodes} --num_gpus={c.g} train.py --deepspeed_config ds_config.json",
        "notes": notes,
        "docs": [_DOCS["deepspeed"], "https://deepspeed.readthedocs.io/en/latest/zero3.html"],
        "snippet": json.dumps(config, indent=4),
    }


_TORCH_DTYPES = {"bf16": "torch.bfloat16", "fp16": "torch.float16"}


def _pytorch_fsdp(c: _Plain) -> dict:
    strategy = {
        "fsdp": "ShardingStrategy.FULL_SHARD",
        "hsdp": "ShardingStrategy.HYBRID_SHARD",
    }[c.arch]
    kwargs = {
        "sharding_strategy": strategy,
        "backward_prefetch": "BackwardPrefetch.BACKWARD_PRE",
        "limit_all_gathers": True,
        "auto_wrap_policy": "ModuleWrapPolicy({<your transformer block class>})",
    }
    notes = []
    if c.wrap == "block":
        notes.append(
            "one FSDP unit per layer block (auto_wrap_policy), as the prediction's units; the "
            "parameters outside the blocks (embeddings, final norm, head) stay in the root unit, "
            "gathered once in forward and kept until the step ends, as predicted"
            + (f" ({format_bytes(c.root_bytes)})" if c.root_bytes else "")
        )
    else:
        kwargs["auto_wrap_policy"] = (
            f"functools.partial(size_based_auto_wrap_policy, min_num_params={c.bucket // c.param_bytes})"
        )
        notes.append(
            "units of about the bucket cap (size_based_auto_wrap_policy), as the prediction's"
        )
    notes.append(
        "BACKWARD_PRE: the next unit's all_gather is issued before this unit's reduce_scatter"
    )
    if c.wire in _TORCH_DTYPES:
        t = _TORCH_DTYPES[c.wire]
        kwargs["mixed_precision"] = (
            f"MixedPrecision(param_dtype={t}, reduce_dtype={t}, buffer_dtype={t})"
        )
        notes.append(
            f"MixedPrecision: parameters gathered and gradients reduce-scattered in {c.wire} "
            f"({c.dtype_bytes} bytes per element), as predicted"
        )
    if c.arch == "hsdp":
        kwargs["device_mesh"] = f'init_device_mesh("cuda", ({c.nodes}, {c.g}))'
        notes.append(
            f"HYBRID_SHARD: shard within each node ({c.g} ranks), replicate across the "
            f"{c.nodes} nodes (device_mesh rows = replicas, columns = shards); the inter-node "
            "all_reduce of each gradient shard runs on its own stream after the unit's "
            "reduce_scatter (_runtime_utils.py _all_reduce_stream)"
        )
    lines = [f"# {c.torchrun}", "model = FullyShardedDataParallel(", "    model,"]
    lines += [f"    {k}={v}," for k, v in kwargs.items()]
    lines.append(")")
    K = c.accumulation
    if K > 1:
        notes.append(
            f"gradient accumulation, {K} micro-batches per step: call backward on each WITHOUT "
            "no_sync(), as predicted (every micro-batch gathers and reduce-scatters each unit); "
            "no_sync() would keep full unsharded gradients"
            + (f" ({format_bytes(c.grad_bytes)})" if c.grad_bytes else "")
            + ", not in the memory per rank"
        )
        lines += [
            f"for micro_batch in micro_batches:  # {K} per optimizer step, no no_sync()",
            "    loss_fn(model(micro_batch)).backward()",
            "optimizer.step(); optimizer.zero_grad()",
        ]
    return {
        "constructor": "torch.distributed.fsdp.FullyShardedDataParallel",
        "kwargs": kwargs,
        "launch": c.torchrun,
        "notes": notes,
        "docs": [_DOCS["pytorch_fsdp"]],
        "snippet": "\n".join(lines),
    }


_BUILDERS = {
    "pytorch_ddp": _pytorch_ddp,
    "horovod": _horovod,
    "tensorflow": _tensorflow,
    "deepspeed": _deepspeed,
    "pytorch_fsdp": _pytorch_fsdp,
}

_TITLES = {
    "pytorch_ddp": "PyTorch DDP",
    "horovod": "Horovod",
    "tensorflow": "TensorFlow parameter servers",
    "deepspeed": "DeepSpeed ZeRO (ds_config.json)",
    "pytorch_fsdp": "PyTorch FSDP",
}


def framework_settings(
    config,
    workload=None,
    *,
    dtype_bytes: int | None = None,
    param_dtype_bytes: int | None = None,
    grad_dtype: str | None = None,
    device: str = "gpu",
) -> dict:
    """The settings that apply one configuration in each framework that implements it.

    Args:
        config: a mapping (e.g. ``Configuration.to_dict()``) or an object with the
            fields ``architecture`` (see :data:`FRAMEWORK_ARCHITECTURES`),
            ``workers`` (n >= 1), ``bucket_bytes`` (>= 0, bytes; 0 = one collective
            per tensor), and optionally ``ranks_per_node`` (g >= 1, default 1),
            ``servers`` (k >= 0), ``colocated`` (bool, ps servers on the workers),
            ``backward_s`` or ``breakdown["backward_s"]`` (single-step backward
            time, s > 0; used for Horovod's cycle time), ``batch_size``
            (samples per worker per optimizer step: DeepSpeed's
            ``train_micro_batch_size_per_gpu`` = batch_size / accumulation
            steps when whole), ``accumulation_steps`` (K ≥ 1, default the
            workload's), ``wrap`` (fsdp/hsdp units: ``"block"``, default, or
            ``"bucket"``).
        workload: the :class:`costmodel.Workload`, optional: its gradient bytes
            (Horovod's cycle time, DeepSpeed's buckets at most the model), element
            size (DeepSpeed's element counts), accumulation steps and FSDP root unit.
        dtype_bytes: bytes per gradient element on the wire, for DeepSpeed's
            element counts (default: the workload's, else 4).
        param_dtype_bytes: bytes per parameter element, when the gradients are
            exchanged in a smaller dtype (``--grad-dtype fp16`` of fp32
            parameters: 4); DDP's ``bucket_cap_mb`` is then
            :func:`ddp_bucket_cap_bytes` (DDP buckets by parameter bytes, its
            compression hook halves them after) and the snippet registers the
            hook. Default: ``dtype_bytes`` (no compression).
        grad_dtype: the wire dtype's name (``"fp16"``, ``"bf16"``), choosing
            DDP's hook (``fp16_compress_hook``, ``bf16_compress_hook``); default fp16.
        device: ``"gpu"`` (default) or ``"cpu"``: what the ranks compute on (a
            profile measured on CPU: its provenance's ``backend``). On CPU,
            TensorFlow's flags say ``--device=cpu``, ``--data_format=NHWC`` and
            ``--local_parameter_device=cpu`` (tf_cnn_benchmarks' benchmark_cnn.py).

    Returns:
        ``{framework: settings}`` with the frameworks of the architecture in
        order; each settings dict holds the options with the framework's own
        names and units, ``notes`` (what each setting does and where the model
        and the framework differ), ``docs`` (the documentation cited) and
        ``snippet`` (copyable text). Keys: ``pytorch_ddp``, ``horovod``,
        ``tensorflow``, ``deepspeed``, ``pytorch_fsdp``.

    Raises:
        ValueError: on an unknown architecture (listing the valid ones), a
            field that is missing or out of range (naming it), or another device.

    Example:
        >>> s = framework_settings({"architecture": "ring", "workers": 16,
        ...                         "ranks_per_node": 8, "bucket_bytes": 34 * 2**20})
        >>> s["pytorch_ddp"]["kwargs"]["bucket_cap_mb"], s["horovod"]["env"]
        (34.0, {'HOROVOD_FUSION_THRESHOLD': '35651584'})
    """
    c = _Plain(config, workload, dtype_bytes, param_dtype_bytes, grad_dtype, device)
    return {name: _BUILDERS[name](c) for name in FRAMEWORK_ARCHITECTURES[c.arch]}


def format_framework_settings(settings: Mapping) -> str:
    """Copyable text of :func:`framework_settings`' result: one titled snippet per framework.

    Args:
        settings: the dict :func:`framework_settings` returned.

    Returns:
        Text: per framework a ``# title`` line, its snippet, its notes as
        comments and the documentation cited, frameworks separated by blank lines.

    Example:
        >>> s = framework_settings({"architecture": "hierarchical", "workers": 16,
        ...                         "ranks_per_node": 8, "bucket_bytes": 2**26})
        >>> print(format_framework_settings(s).splitlines()[0])
        # PyTorch DDP
    """
    blocks = []
    for name, entry in settings.items():
        lines = [f"# {_TITLES.get(name, name)}", entry["snippet"]]
        lines += [f"#   {n}" for n in entry.get("notes", ())]
        lines.append("#   docs: " + "; ".join(entry.get("docs", ())))
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)
