"""Hardware presets from datasheets: a starting point and a prior, not a fit.

A preset combines a *network* (inter-node link, optionally an intra-node link)
and a *device*. Every figure names its source and the efficiency assumed; a
fitted profile replaces all of them.

Assumptions stated once:
* Link bandwidth: the datasheet line rate × the stated efficiency (protocol
  headers, TCP/RDMA overhead). Ethernet (TCP): 90%; InfiniBand (RDMA): 92%;
  PCIe 3.0 x16: 12 GB/s of 15.75 GB/s (76%); NVLink: NCCL's measured bus
  bandwidth on that system (nccl-tests, see below).
* Latency α: per algorithm step; TCP over Ethernet ~25 µs, RDMA ~5 µs (both
  including NCCL/gloo per-step overhead), NVLink/PCIe ~5 µs.
* Device throughput: datasheet fp32 peak (tensor-core TF32 where the device has
  it and frameworks use it by default) × a training efficiency for CNN training,
  stated per device; calibrate to replace it. With a compute dtype or a model
  kind (:func:`device_flops_per_s`): the datasheet's dense peak in that dtype ×
  the published utilisation of that kind of model (transformers: MFU 0.45;
  CNNs in mixed precision: 0.22).
* Optimizer update: SGD with momentum reads and writes ~5 bytes of memory per
  parameter byte: update_s_per_byte = 5 / memory bandwidth.
* Reduction γ: 3 bytes of memory traffic per reduced byte (2 reads, 1 write):
  γ = 3 / memory bandwidth.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

from ._errors import format_choices
from ._params import NO_GEMM_HALF, ClusterParams

__all__ = [
    "NETWORK_PRESETS",
    "INTRA_PRESETS",
    "DEVICE_PRESETS",
    "preset",
    "DEFAULT_NICS_PER_NODE",
    "NetworkPreset",
    "DevicePreset",
    "COMPUTE_DTYPES",
    "MODEL_KINDS",
    "TRANSFORMER_MFU",
    "MIXED_PRECISION_CNN_UTILISATION",
    "FP32_UTILISATION",
    "device_flops_per_s",
]


@dataclass(frozen=True)
class NetworkPreset:
    """A link: latency α (s), bandwidth (bytes/s) after efficiency, and its source.

    ``nics_per_node`` (intra-node presets that name a system only): the
    system's NICs for compute traffic (rails), from its datasheet; ``None``
    leaves :data:`DEFAULT_NICS_PER_NODE`.
    """

    alpha_s: float
    bandwidth_bytes_per_s: float
    source: str
    nics_per_node: int | None = None


@dataclass(frozen=True)
class DevicePreset:
    """A device: effective FLOP/s, memory (bytes), memory bandwidth (bytes/s), source."""

    flops_per_s: float
    memory_bytes: float
    memory_bandwidth_bytes_per_s: float
    source: str
    node_compute_slots: float = 1e6  # GPUs: ranks do not share compute
    call_overhead_s: float = 20e-6
    #: Dense peak FLOP/s per compute dtype (datasheet, without sparsity); a
    #: dtype the device has no fast path for is absent.
    peak_flops_per_s: tuple[tuple[str, float], ...] = ()
    #: The dtype frameworks run an "fp32" model in on this device (cuDNN's
    #: default TF32 convolutions on Ampere and later), which ``flops_per_s``
    #: is measured against.
    default_dtype: str = "fp32"
    #: m½, the smallest GEMM dimension at which a matrix product runs at half of
    #: ``flops_per_s`` (``ClusterParams.gemm_half_dim``); the GPU presets' rate is
    #: already their model kind's, so none.
    gemm_half_dim: float = NO_GEMM_HALF


GB = 1e9
GiB = 1024**3

#: NICs per node when the intra-node preset names no system: 4, the node cap
#: these presets have always assumed ("a node's NICs carry 4 links' worth").
DEFAULT_NICS_PER_NODE = 4

NETWORK_PRESETS: dict[str, NetworkPreset] = {
    "ethernet-10g": NetworkPreset(
        25e-6, 0.90 * 10e9 / 8, "IEEE 802.3ae 10 Gb/s line rate; 90% TCP efficiency"
    ),
    "ethernet-25g": NetworkPreset(
        20e-6, 0.90 * 25e9 / 8, "IEEE 802.3by 25 Gb/s line rate; 90% TCP efficiency"
    ),
    "ethernet-100g": NetworkPreset(
        15e-6, 0.90 * 100e9 / 8, "IEEE 802.3bj 100 Gb/s line rate; 90% TCP efficiency"
    ),
    "ib-edr-100g": NetworkPreset(
        5e-6,
        0.92 * 100e9 / 8,
        "InfiniBand EDR 4x 100 Gb/s (Mellanox ConnectX-4 datasheet); 92% RDMA efficiency",
    ),
    "ib-hdr-200g": NetworkPreset(
        5e-6,
        0.92 * 200e9 / 8,
        "InfiniBand HDR 4x 200 Gb/s (Mellanox ConnectX-6 datasheet); 92% RDMA efficiency",
    ),
    "ib-ndr-400g": NetworkPreset(
        5e-6,
        0.92 * 400e9 / 8,
        "InfiniBand NDR 4x 400 Gb/s (NVIDIA ConnectX-7 datasheet); 92% RDMA efficiency",
    ),
}

INTRA_PRESETS: dict[str, NetworkPreset] = {
    "pcie3-x16": NetworkPreset(
        5e-6,
        12e9,
        "PCIe 3.0 x16: 15.75 GB/s per direction (PCI-SIG); ~12 GB/s achieved by cudaMemcpy peer copies",
    ),
    "pcie4-x16": NetworkPreset(
        5e-6, 24e9, "PCIe 4.0 x16: 31.5 GB/s per direction (PCI-SIG); ~24 GB/s achieved"
    ),
    "nvlink-v100": NetworkPreset(
        5e-6,
        130e9,
        "DGX-1V NVLink 2.0 (6 links x 25 GB/s per direction, NVIDIA V100 datasheet); NCCL all_reduce busbw ~130 GB/s; "
        "4 NICs: NVIDIA DGX-1 datasheet, 4x InfiniBand EDR 100 Gb/s",
        nics_per_node=4,
    ),
    "nvlink-a100": NetworkPreset(
        5e-6,
        230e9,
        "DGX A100 NVLink 3.0 / NVSwitch (300 GB/s per direction, NVIDIA A100 datasheet); NCCL all_reduce busbw ~230 GB/s; "
        "8 NICs: NVIDIA DGX A100 datasheet, 8x single-port ConnectX-6 200 Gb/s HDR InfiniBand for compute (storage NICs apart)",
        nics_per_node=8,
    ),
    "nvlink-h100": NetworkPreset(
        5e-6,
        450e9,
        "HGX H100 NVLink 4.0 / NVSwitch (450 GB/s per direction, NVIDIA H100 datasheet); NCCL busbw ~450 GB/s; "
        "8 NICs: NVIDIA DGX H100 datasheet, 8x single-port ConnectX-7 400 Gb/s InfiniBand/Ethernet for compute",
        nics_per_node=8,
    ),
    "shm": NetworkPreset(
        20e-6,
        5e9,
        "shared memory between CPU processes (gloo over loopback TCP): ~5 GB/s, 20 µs; a rough prior, calibrate; "
        "1 NIC: a CPU node's ranks share its one network interface (gloo binds one, GLOO_SOCKET_IFNAME)",
        nics_per_node=1,
    ),
}

DEVICE_PRESETS: dict[str, DevicePreset] = {
    # Training efficiencies: ResNet-50 images/s from tf_cnn_benchmarks (TensorFlow docs, 2017)
    # and NVIDIA's published DeepLearningExamples, × 3 × 2 × 4.1 GMACs / datasheet peak.
    "k80": DevicePreset(
        0.30 * 4.37e12,
        12 * GiB,
        240 * GB,
        "Tesla K80 datasheet: 8.73 TFLOP/s fp32 boost per board = 4.37 per GPU, 12 GB, 240 GB/s per GPU; 30% training efficiency (tf_cnn_benchmarks ResNet-50 ~52 img/s)",
        peak_flops_per_s=(("fp32", 4.37e12),),
    ),
    "p100": DevicePreset(
        0.40 * 10.6e12,
        16 * GiB,
        732 * GB,
        "Tesla P100 SXM2 datasheet: 10.6 TFLOP/s fp32, 21.2 fp16, 16 GB HBM2, 732 GB/s; 40% training efficiency (tf_cnn_benchmarks ResNet-50 ~219 img/s)",
        peak_flops_per_s=(("fp32", 10.6e12), ("fp16", 21.2e12)),
    ),
    "v100": DevicePreset(
        0.55 * 15.7e12,
        16 * GiB,
        900 * GB,
        "Tesla V100 SXM2 datasheet: 15.7 TFLOP/s fp32, 125 fp16 tensor, 16 GB HBM2, 900 GB/s; 55% training efficiency (fp32 ResNet-50 ~350 img/s)",
        peak_flops_per_s=(("fp32", 15.7e12), ("fp16", 125e12)),
    ),
    "a100": DevicePreset(
        0.50 * 156e12 * 0.25,
        40 * GiB,
        1555 * GB,
        "A100 SXM4 40GB datasheet: 19.5 TFLOP/s fp32, 156 TF32 tensor, 312 bf16/fp16 tensor (dense), 1555 GB/s; 12.5% of TF32 peak in fp32/TF32 CNN training (ResNet-50 TF32 ~ 1000 img/s => ~25 TFLOP/s; stated as 0.5 x 0.25 x peak)",
        peak_flops_per_s=(("fp32", 19.5e12), ("tf32", 156e12), ("bf16", 312e12), ("fp16", 312e12)),
        default_dtype="tf32",
    ),
    "h100": DevicePreset(
        0.12 * 495e12,
        80 * GiB,
        3350 * GB,
        "H100 SXM5 datasheet: 67 TFLOP/s fp32, 495 dense TF32, 989 dense bf16/fp16, 1979 dense fp8, 80 GB HBM3, 3.35 TB/s; 12% of TF32 peak in CNN training (ResNet-50 TF32 ~ 2400 img/s)",
        peak_flops_per_s=(
            ("fp32", 67e12),
            ("tf32", 495e12),
            ("bf16", 989e12),
            ("fp16", 989e12),
            ("fp8", 1979e12),
        ),  # fmt: skip
        default_dtype="tf32",
    ),
    "cpu": DevicePreset(
        50e9,
        16 * GiB,
        20 * GB,
        "a generic 2-core x86-64 CPU: ~50 GFLOP/s fp32 (AVX2 FMA, 2 cores), 20 GB/s memory; a rough prior, calibrate",
        node_compute_slots=2.0,
        call_overhead_s=50e-6,
        peak_flops_per_s=(("fp32", 50e9),),
        # XLA:CPU on the emulated cluster's cores (issue 22): 128³ … 1024³ matmuls,
        # batch-64 dense layers and 32–96-channel convolutions fit m½ ≈ 15
        gemm_half_dim=16.0,
    ),
}

_DEFAULT_INTRA = {"cpu": "shm"}

#: Compute dtypes a device preset may have a peak for.
COMPUTE_DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8")
#: Model kinds whose utilisation is known (``Workload.kind``; "" = unknown).
MODEL_KINDS = ("cnn", "transformer", "mlp")

#: Model FLOPs utilisation of dense transformer training on tensor cores, the
#: fraction of the dtype's dense peak that the model's FLOPs (6 × parameters ×
#: tokens plus attention) run at: Narayanan et al., "Efficient Large-Scale
#: Language Model Training on GPU Clusters Using Megatron-LM", SC 2021, Table 1
#: (44–52% of the A100's 312 TFLOP/s); Chowdhery et al., "PaLM", 2022, Table 3
#: (46.2% MFU).
TRANSFORMER_MFU = 0.45

#: ResNet-50 in mixed precision on tensor cores: ~2,600 images/s on an A100
#: (NVIDIA DeepLearningExamples, PyTorch ResNet-50 v1.5, AMP, batch 256) ×
#: 3 × 8.2 GFLOP per image ≈ 64 TFLOP/s, 0.21 of 312; V100 ~1,350 img/s of 125
#: TFLOP/s gives 0.27. Taken as 0.22 of the fp16/bf16 peak.
MIXED_PRECISION_CNN_UTILISATION = 0.22

#: fp32 on CUDA cores where the default path is TF32 (A100, H100 with TF32
#: off): the V100's fp32 ResNet-50 efficiency (0.55 of 15.7 TFLOP/s, above).
FP32_UTILISATION = 0.55


def device_flops_per_s(device: str, compute_dtype: str | None = None, model_kind: str = ""):
    """A device's effective training throughput for a compute dtype and kind of model.

    dtype ``None`` is the device's default path (TF32 on A100/H100, else fp32).

    * fp32 (CUDA cores, CPUs): the preset's fp32 efficiency for every model
      (on A100/H100, where fp32 is not the default, :data:`FP32_UTILISATION`).
    * A tensor-core dtype (tf32, bf16, fp16, fp8) and a transformer or MLP:
      the dtype's dense peak × :data:`TRANSFORMER_MFU`.
    * A CNN or unknown model on its device's default path: the preset's
      ``flops_per_s`` (its stated CNN efficiency — the figure without a
      dtype or kind); in another 16- or 8-bit dtype the peak ×
      :data:`MIXED_PRECISION_CNN_UTILISATION`.

    Args:
        device: a name of :data:`DEVICE_PRESETS`.
        compute_dtype: ``None`` or one of :data:`COMPUTE_DTYPES` the device has
            a datasheet peak for.
        model_kind: ``""`` (unknown) or one of :data:`MODEL_KINDS` ("mlp" is
            costed as a transformer: both are dense matrix products).

    Returns:
        ``(flops_per_s, description)``: FLOP/s > 0, and one line saying where
        the figure comes from (dtype, peak, utilisation).

    Raises:
        ValueError: an unknown device, dtype or kind, or a dtype the device has
            no fast path for (listing the ones it has).

    Example:
        >>> round(device_flops_per_s("a100", "bf16", "transformer")[0] / 1e12, 1)
        140.4
        >>> device_flops_per_s("v100")[0] == DEVICE_PRESETS["v100"].flops_per_s
        True
    """
    if device not in DEVICE_PRESETS:
        raise ValueError(
            f"unknown device preset {device!r}; valid: {format_choices(DEVICE_PRESETS, device)}"
        )
    if model_kind not in ("", *MODEL_KINDS):
        raise ValueError(f"unknown model kind {model_kind!r}; valid: {', '.join(MODEL_KINDS)}")
    dev = DEVICE_PRESETS[device]
    peaks = dict(dev.peak_flops_per_s)
    dtype = dev.default_dtype if compute_dtype is None else str(compute_dtype).lower()
    if dtype not in COMPUTE_DTYPES:
        raise ValueError(
            f"unknown compute dtype {compute_dtype!r}; valid: {', '.join(COMPUTE_DTYPES)}"
        )
    if dtype not in peaks:
        raise ValueError(
            f"compute dtype {dtype}: device {device!r} has no {dtype} peak on its datasheet; "
            "it has: " + ", ".join(peaks)
        )
    peak = peaks[dtype]
    if dtype == "fp32":  # CUDA cores (or a CPU): the preset's fp32 efficiency, any model
        util = dev.flops_per_s / peaks["fp32"] if dev.default_dtype == "fp32" else FP32_UTILISATION
        why = "fp32 training efficiency"
    elif model_kind in ("transformer", "mlp"):
        util, why = TRANSFORMER_MFU, "transformer MFU (Megatron-LM SC21, PaLM)"
    elif dtype == dev.default_dtype:
        util, why = dev.flops_per_s / peak, "the preset's CNN training efficiency"
    else:
        util, why = MIXED_PRECISION_CNN_UTILISATION, "mixed-precision CNN (ResNet-50, NVIDIA)"
    rate = peak * util
    small = (
        f"; a GEMM of smallest dimension m at m / (m + {dev.gemm_half_dim:g}) of it"
        if dev.gemm_half_dim >= 1.0
        else ""
    )
    return rate, (
        f"{device} {dtype}: {peak / 1e12:g} TFLOP/s dense peak × {util:.3g} {why} = "
        f"{rate / 1e12:.3g} TFLOP/s{small}"
    )


def preset(
    network: str = "ethernet-10g",
    device: str = "v100",
    *,
    intra: str | None = None,
    n_regimes: int = 1,
    nics_per_node: int | None = None,
    compute_dtype: str | None = None,
    model_kind: str = "",
    host_links: int = 1,
) -> ClusterParams:
    """Cluster parameters from datasheet presets.

    Args:
        network: inter-node network, or ``"INTER,INTRA"`` (e.g.
            ``"ib-hdr-200g,nvlink-a100"``); see :data:`NETWORK_PRESETS` and
            :data:`INTRA_PRESETS`.
        device: see :data:`DEVICE_PRESETS`.
        intra: intra-node link; default from ``network`` or ``pcie3-x16``
            (``shm`` for the cpu device).
        n_regimes: protocol regimes (1 = the plain α-β line).
        nics_per_node: NICs (rails) per node, an integer >= 1, each at the
            network's link bandwidth B: the node's network cap is
            ``nics_per_node × B`` (``node_beta_s_per_byte[1] = β_inter /
            nics_per_node``). It binds when several ranks of a node cross the
            network at once (all_to_all, parameter-server fan-in, the g rings of
            a hierarchical all_reduce: min(g, nics)·B), not for one flat ring.
            Default: the datasheet count of the DGX-class intra-node presets
            (nvlink-v100: DGX-1, 4 x EDR; nvlink-a100: DGX A100, 8 x HDR;
            nvlink-h100: DGX H100, 8 x NDR), else :data:`DEFAULT_NICS_PER_NODE` (4).
        compute_dtype, model_kind: the device's throughput for that dtype and
            kind of model (:func:`device_flops_per_s`); the defaults give the
            preset's CNN figure.
        host_links: independent links from a node's devices to host memory
            (PCIe switch uplinks), an integer ≥ 1; ``ps_host`` puts ⌈g /
            host_links⌉ devices on each (:class:`ClusterParams`). Default 1;
            NVIDIA DGX-1: 4 (two GPUs per PCIe switch, WP-08437-001 §2).

    Returns:
        :class:`ClusterParams` in SI units.

    Raises:
        ValueError: on an unknown network, intra-node link or device name,
            listing the valid names; on ``nics_per_node`` that is not an integer >= 1
            or ``host_links`` outside [1, 64];
            as :func:`device_flops_per_s` for the dtype and kind.

    Example:
        >>> p = preset("ethernet-10g", "v100")
        >>> round(1 / float(p.beta_s_per_byte[1]) / 1e9, 3)   # GB/s
        1.125

    (Long for its documentation: the body is 45 lines.)
    """
    parts = [s.strip() for s in str(network).split(",")]
    if len(parts) > 2 or not parts[0]:
        raise ValueError(f"network preset must be 'INTER' or 'INTER,INTRA', got {network!r}")
    inter_name = parts[0]
    if len(parts) == 2:
        if intra is not None and intra != parts[1]:
            raise ValueError(f"intra-node link given twice: {parts[1]!r} and {intra!r}")
        intra = parts[1]
    if inter_name not in NETWORK_PRESETS:
        raise ValueError(
            f"unknown network preset {inter_name!r}; valid: {format_choices(NETWORK_PRESETS, inter_name)}"
        )
    if device not in DEVICE_PRESETS:
        raise ValueError(
            f"unknown device preset {device!r}; valid: {format_choices(DEVICE_PRESETS, device)}"
        )
    intra = intra or _DEFAULT_INTRA.get(device, "pcie3-x16")
    if intra not in INTRA_PRESETS:
        raise ValueError(
            f"unknown intra-node preset {intra!r}; valid: {format_choices(INTRA_PRESETS, intra)}"
        )
    net, link, dev = NETWORK_PRESETS[inter_name], INTRA_PRESETS[intra], DEVICE_PRESETS[device]
    nics = _nics(nics_per_node, link)
    flops = device_flops_per_s(device, compute_dtype, model_kind)[0]
    beta = (1.0 / link.bandwidth_bytes_per_s, 1.0 / net.bandwidth_bytes_per_s)
    # Node caps: a node's NICs (rails) carry nics links' worth at once (binds for
    # all_to_all and fan-in with several ranks per node, not for a ring that
    # crosses each node once); inside a node the switch/memory carries 16 links'
    # worth, for CPUs the memory bandwidth shared by all processes. A fit replaces both.
    node_intra = 1.0 / dev.memory_bandwidth_bytes_per_s if device == "cpu" else beta[0] / 16.0
    return ClusterParams.create(
        alpha_s=(link.alpha_s, net.alpha_s),
        beta_s_per_byte=beta,
        node_beta_s_per_byte=(node_intra, beta[1] / nics),
        gamma_s_per_byte=3.0 / dev.memory_bandwidth_bytes_per_s,
        n_regimes=n_regimes,
        call_overhead_s=dev.call_overhead_s,
        fanin_exponent=0.1,
        all_to_all_exponent=0.1,
        node_compute_slots=dev.node_compute_slots,
        flops_per_s=flops,
        step_overhead_s=1e-3,
        update_s_per_byte=5.0 / dev.memory_bandwidth_bytes_per_s,
        overlap_interference=0.05,
        memory_bytes=dev.memory_bytes,
        gemm_half_dim=dev.gemm_half_dim,
        host_links=host_links,
    )


def _nics(nics_per_node, link: NetworkPreset) -> int:
    if nics_per_node is None:
        return link.nics_per_node or DEFAULT_NICS_PER_NODE
    if isinstance(nics_per_node, bool) or not isinstance(nics_per_node, numbers.Integral):
        raise ValueError(
            f"nics_per_node must be an integer >= 1 (NICs per node), got {nics_per_node!r}"
        )
    if nics_per_node < 1:
        raise ValueError(f"nics_per_node must be >= 1, got {nics_per_node}")
    return int(nics_per_node)


def describe_preset(network: str, device: str) -> list[str]:
    """Source lines of a preset combination, for reports and ``--help``."""
    parts = [s.strip() for s in str(network).split(",")]
    out = [f"{parts[0]}: {NETWORK_PRESETS[parts[0]].source}"] if parts[0] in NETWORK_PRESETS else []
    intra = parts[1] if len(parts) > 1 else _DEFAULT_INTRA.get(device, "pcie3-x16")
    if intra in INTRA_PRESETS:
        out.append(f"{intra}: {INTRA_PRESETS[intra].source}")
    if device in DEVICE_PRESETS:
        out.append(f"{device}: {DEVICE_PRESETS[device].source}")
    return out
