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
  stated per device; calibrate to replace it.
* Optimizer update: SGD with momentum reads and writes ~5 bytes of memory per
  parameter byte: update_s_per_byte = 5 / memory bandwidth.
* Reduction γ: 3 bytes of memory traffic per reduced byte (2 reads, 1 write):
  γ = 3 / memory bandwidth.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

from ._errors import format_choices
from ._params import ClusterParams

__all__ = [
    "NETWORK_PRESETS",
    "INTRA_PRESETS",
    "DEVICE_PRESETS",
    "preset",
    "DEFAULT_NICS_PER_NODE",
    "NetworkPreset",
    "DevicePreset",
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
        "shared memory between CPU processes (gloo over loopback TCP): ~5 GB/s, 20 µs; a rough prior, calibrate",
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
    ),
    "p100": DevicePreset(
        0.40 * 10.6e12,
        16 * GiB,
        732 * GB,
        "Tesla P100 SXM2 datasheet: 10.6 TFLOP/s fp32, 16 GB HBM2, 732 GB/s; 40% training efficiency (tf_cnn_benchmarks ResNet-50 ~219 img/s)",
    ),
    "v100": DevicePreset(
        0.55 * 15.7e12,
        16 * GiB,
        900 * GB,
        "Tesla V100 SXM2 datasheet: 15.7 TFLOP/s fp32, 16 GB HBM2, 900 GB/s; 55% training efficiency (fp32 ResNet-50 ~350 img/s)",
    ),
    "a100": DevicePreset(
        0.50 * 156e12 * 0.25,
        40 * GiB,
        1555 * GB,
        "A100 SXM4 40GB datasheet: 156 TFLOP/s TF32 tensor, 1555 GB/s; 12.5% of TF32 peak in fp32/TF32 CNN training (ResNet-50 TF32 ~ 1000 img/s => ~25 TFLOP/s; stated as 0.5 x 0.25 x peak)",
    ),
    "h100": DevicePreset(
        0.12 * 495e12,
        80 * GiB,
        3350 * GB,
        "H100 SXM5 datasheet: 495 TFLOP/s dense TF32, 80 GB HBM3, 3.35 TB/s; 12% of TF32 peak in CNN training (ResNet-50 TF32 ~ 2400 img/s)",
    ),
    "cpu": DevicePreset(
        50e9,
        16 * GiB,
        20 * GB,
        "a generic 2-core x86-64 CPU: ~50 GFLOP/s fp32 (AVX2 FMA, 2 cores), 20 GB/s memory; a rough prior, calibrate",
        node_compute_slots=2.0,
        call_overhead_s=50e-6,
    ),
}

_DEFAULT_INTRA = {"cpu": "shm"}


def preset(
    network: str = "ethernet-10g",
    device: str = "v100",
    *,
    intra: str | None = None,
    n_regimes: int = 1,
    nics_per_node: int | None = None,
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

    Returns:
        :class:`ClusterParams` in SI units.

    Raises:
        ValueError: on an unknown network, intra-node link or device name,
            listing the valid names; on ``nics_per_node`` that is not an integer >= 1.

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
            f"unknown network preset {inter_name!r}; valid: {format_choices(NETWORK_PRESETS)}"
        )
    if device not in DEVICE_PRESETS:
        raise ValueError(
            f"unknown device preset {device!r}; valid: {format_choices(DEVICE_PRESETS)}"
        )
    intra = intra or _DEFAULT_INTRA.get(device, "pcie3-x16")
    if intra not in INTRA_PRESETS:
        raise ValueError(
            f"unknown intra-node preset {intra!r}; valid: {format_choices(INTRA_PRESETS)}"
        )
    net, link, dev = NETWORK_PRESETS[inter_name], INTRA_PRESETS[intra], DEVICE_PRESETS[device]
    nics = _nics(nics_per_node, link)
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
        flops_per_s=dev.flops_per_s,
        step_overhead_s=1e-3,
        update_s_per_byte=5.0 / dev.memory_bandwidth_bytes_per_s,
        overlap_interference=0.05,
        memory_bytes=dev.memory_bytes,
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
