"""Hardware parameters of a cluster, as one ``equinox.Module``.

Every fitted quantity is stored unconstrained — the natural log of a positive
scale, the logit of a fraction — and exposed in SI units through properties.
The structure (number of protocol regimes) is static, so ``jax.vmap`` /
``jax.grad`` see only arrays, and calibration differentiates with respect to the
unconstrained leaves directly: ∂ log T / ∂ log θ, the elasticity, is the gradient
with respect to a log-stored leaf.

Topology levels: index 0 is *intra-node* (ranks on one node: NVLink, PCIe,
shared memory), index 1 is *inter-node* (the network).

References:
    Hockney, "The communication challenge for MPP", Parallel Computing 1994 (α-β model).
    Thakur, Rabenseifner & Gropp, "Optimization of Collective Communication
    Operations in MPICH", IJHPCA 2005 (α, β, γ per collective).
"""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
import weakref
from collections.abc import Mapping, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from ._names import COLLECTIVE_NAMES
from ._smooth import soft_max2
from ._xp import keep_freed_memory, to_jax, xp_of

__all__ = ["ClusterParams", "LEVELS", "PARAMETER_UNITS", "PARAMETER_NONE"]

LEVELS = ("intra", "inter")

#: SI unit of every physical quantity :meth:`ClusterParams.to_dict` writes.
PARAMETER_UNITS = {
    "alpha_s": "s",
    "beta_s_per_byte": "s/byte",
    "node_beta_s_per_byte": "s/byte",
    "gamma_s_per_byte": "s/byte",
    "regime_alpha_factor": "1",
    "regime_beta_factor": "1",
    "regime_sharpness": "1",
    "call_overhead_s": "s",
    "fanin_exponent": "1",
    "all_to_all_exponent": "1",
    "all_to_all_congestion_cap": "1",
    "node_compute_slots": "ranks",
    "flops_per_s": "FLOP/s",
    "step_overhead_s": "s",
    "update_s_per_byte": "s/byte",
    "overlap_interference": "1",
    "memory_bytes": "bytes",
    "step_comm_factor": "1",
    "backward_hide": "1",
    "conv_efficiency": "1",
    "conv_backward_efficiency": "1",
    "latency_overlap": "1",
    "gemm_half_dim": "elements",
    "head_start_bytes": "bytes",
    "cache_bytes": "bytes",
    "cache_excess": "1",
    "host_links": "links",
}

#: backward_hide's default: logit −30, a share of about 1e-13 (no hiding; exactly
#: representable in (0, 1), which a logit needs).
_NO_HIDE = 1.0 / (1.0 + math.exp(30.0))
#: gemm_half_dim's default: e^−30 ≈ 9e-14 elements, every GEMM at the full rate (a
#: preset's ``flops_per_s`` is already the rate of its model kind).
NO_GEMM_HALF = math.exp(-30.0)
#: head_start_bytes' default: e^−30 ≈ 9e-14 bytes, none (every byte at the link's rate).
NO_HEAD_START = math.exp(-30.0)
#: all_to_all_congestion_cap's default: e^30 ≈ 1.1e13, none (the congestion factor is
#: (n−1)ᵉ at any rank count the cost model sees).
NO_CONGESTION_CAP = math.exp(30.0)
#: cache_bytes' default: e^30 ≈ 1.1e13 bytes, none (every message fits).
NO_CACHE_BYTES = math.exp(30.0)
#: cache_excess' default: e^−30 ≈ 9e-14, none (a byte beyond the cache costs what one in it does).
NO_CACHE_EXCESS = math.exp(-30.0)
#: Parameters whose default stands for "no such effect", with that value: a profile
#: whose data never moved one shows it as "none" (``ddltune show``, the report), not as
#: 9.358e-14 or 1.069e+13.
PARAMETER_NONE = {
    "backward_hide": _NO_HIDE,
    "latency_overlap": _NO_HIDE,
    "gemm_half_dim": NO_GEMM_HALF,
    "head_start_bytes": NO_HEAD_START,
    "all_to_all_congestion_cap": NO_CONGESTION_CAP,
    "cache_bytes": NO_CACHE_BYTES,
    "cache_excess": NO_CACHE_EXCESS,
}
#: Keys :meth:`ClusterParams.from_dict` accepts missing (profiles written before them),
#: with the value that leaves every prediction as it was.
_OPTIONAL_KEYS = {
    **PARAMETER_NONE,
    "step_comm_factor": 1.0,
    "conv_efficiency": 1.0,
    "conv_backward_efficiency": 1.0,
    "host_links": 1,
}
#: The largest head start :meth:`ClusterParams.create` accepts, bytes (1 GiB: a
#: shaper's bucket is kilobytes; a file that says more is wrong, not a cluster).
MAX_HEAD_START_BYTES = float(2**30)
#: The most host links per node :meth:`ClusterParams.create` accepts.
MAX_HOST_LINKS = 64
#: The largest all_to_all congestion cap :meth:`ClusterParams.create` accepts (none,
#: the default, is e^30 ≈ 1.1e13; a file that says 1e308 is wrong, and its interval's
#: sigma points overflowed).
MAX_CONGESTION_CAP = 1e15
#: The largest cache size and cache excess :meth:`ClusterParams.create` accepts (none is
#: e^30 ≈ 1.1e13 bytes and e^−30; a byte beyond a cache costing over 1,000× one in it
#: is a wrong file, not a memory hierarchy).
MAX_CACHE_BYTES = 1e15
MAX_CACHE_EXCESS = 1e3


def _check_host_links(host_links) -> None:
    if (
        isinstance(host_links, bool)
        or not isinstance(host_links, numbers.Integral)
        or not 1 <= host_links <= MAX_HOST_LINKS
    ):
        raise ValueError(
            f"host_links must be an integer in [1, {MAX_HOST_LINKS}] "
            f"(host links per node), got {host_links!r}"
        )


def _integer(v):
    """A JSON number that is a whole number as an int (2.0 -> 2); anything else unchanged."""
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v


def _saturated_share(v):
    """A share (a fitted logit's sigmoid) as read from a profile: exactly 0 or 1 back inside (0, 1).

    A logit beyond ±37 (or −745) has a sigmoid of exactly 1.0 (0.0) in float64, so a
    fit that ran that far wrote a value :func:`_logit` refuses, and the profile
    could not be read back. 1 − 2⁻⁵³ and 1e-300 (logits 36.7 and −690.8) give shares
    within 3e-16 of the written ones; any other value, in range or not, is left to the
    check.
    """
    if isinstance(v, list | tuple):
        return [_saturated_share(x) for x in v]
    if isinstance(v, int | float) and not isinstance(v, bool):
        if v == 1.0:
            return 1.0 - 2.0**-53
        if v == 0.0:
            return 1e-300
    return v


def _logit(p, name: str) -> float:
    v = float(p)
    if not 0.0 < v < 1.0:
        raise ValueError(f"{name} must be in (0, 1), got {p!r}")
    return math.log(v) - math.log1p(-v)


def _pair(x, name: str, upper: float = math.inf) -> np.ndarray:
    try:
        arr = np.broadcast_to(np.asarray(x, dtype=np.float64), (2,)).copy()
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number or two (intra, inter), got {x!r}") from None
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0) or np.any(arr > upper):
        bound = "" if upper == math.inf else f" and ≤ {upper:.10g}"
        raise ValueError(
            f"{name} must be finite and > 0{bound} for both levels (intra, inter), got {x!r}"
        )
    return arr


def _congestion_cap(x) -> float:
    v = _pos(x, "all_to_all_congestion_cap")
    if v > MAX_CONGESTION_CAP:
        raise ValueError(
            f"all_to_all_congestion_cap must be ≤ {MAX_CONGESTION_CAP:.0e} (none is about "
            f"{NO_CONGESTION_CAP:.3g}; leave the key out for none), got {x!r}"
        )
    return v


def _check_json_numbers(value, name: str) -> None:
    """Refuse a JSON value that is not a number or a (nested) list of numbers: a hand
    edit's "5" or true converted silently (float("5"), float(True)), null read as
    Python's None.

    Raises:
        ValueError: naming ``name`` and the value as JSON spells it.
    """
    if isinstance(value, list):
        for v in value:
            _check_json_numbers(v, name)
        return
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real):
        shown = (
            "null"
            if value is None
            else json.dumps(value)
            if isinstance(value, bool | str)
            else repr(value)
        )
        hint = " (leave the key out for none)" if name in PARAMETER_NONE else ""
        raise ValueError(f"invalid parameters: {name} must be a number, got {shown}{hint}")


def _pos(x, name: str) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):  # a hand-edited "abc": name the key, not float()'s words
        raise ValueError(f"{name} must be a finite number > 0, got {x!r}") from None
    if not math.isfinite(v) or v <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {x!r}")
    return v


class ClusterParams(eqx.Module):
    """Fitted (or preset) hardware parameters of one cluster.

    Build one with :meth:`create` (physical units) or a preset
    (:func:`costmodel.preset`); read values through the properties, all SI.

    Leaves (unconstrained; shapes with C = len(COLLECTIVE_NAMES), L = 2 levels,
    R = ``n_regimes``):

    * ``log_alpha`` (L,): log α, per-step latency of a collective algorithm, s.
    * ``log_beta`` (L,): log β, a rank's link inverse bandwidth, s/byte.
    * ``log_node_ratio`` (L,): log of β_node / β, the inverse bandwidth of what
      all ranks of one node share (intra: memory / PCIe switch / cores of the
      node; inter: its NICs) over one rank's link: −log(NICs per node) across
      nodes. Relative, so that a fit that moves a link's β carries the node's
      cap with it (a 200 Mbit/s emulated NIC fitted from a 10 GbE prior kept
      a 4.5 GB/s node cap when the cap was a leaf of its own, and the two
      flows of a hierarchical all-reduce through one NIC were predicted at
      half their measured time).
    * ``log_gamma`` (): γ, reduction cost per byte, s/byte.
    * ``regime_log_alpha``, ``regime_log_beta`` (C, L, R): per-collective,
      per-regime log factors on α and β (0 = the base value). The collective time
      is the smooth lower envelope over regimes (NCCL's LL/LL128/Simple
      protocols; MPI's eager/rendezvous).
    * ``log_sharpness`` (C,): log of the envelope's sharpness k.
    * ``log_call_overhead`` (): per-collective-call software overhead, s.
    * ``log_fanin`` (): exponent e of the fan-in congestion factor (k senders)^e.
    * ``log_all_to_all`` (): exponent of all_to_all's congestion factor (n−1)^e.
    * ``log_all_to_all_cap`` (): log c, the most that congestion adds to
      all_to_all's bandwidth term, as a share of it: the factor is
      1 + softmin_p((n−1)^e − 1, c) (:func:`costmodel.collectives.capped_congestion`),
      (n−1)^e while that is well below 1 + c and 1 + c beyond. Measured on the
      emulated cluster (issue 22; one rank per node, 100 Mbit/s, 16 MiB): 1.00×
      the wire time at 2 ranks and 1.34–1.40× at 3, 4, 5 and 6, a step, then flat,
      which no one exponent follows ((n−1)^e fitted 1.14, 1.23, 1.29, 1.35×).
      Default c = e^30: none.
    * ``log_node_slots`` (): how many ranks of a node run at full speed at once;
      beyond it, compute and CPU-driven communication slow by g/slots (CPU runs
      with more processes than cores).
    * ``log_flops`` (): effective compute throughput of one device, FLOP/s.
    * ``log_step_overhead`` (): fixed per-iteration overhead, s.
    * ``log_update`` (): optimizer update time per parameter byte, s/byte.
    * ``logit_interference`` (): fraction by which backward compute slows while
      communication overlaps it.
    * ``log_memory`` (): device memory, bytes (not fitted; used by the tuner).
    * ``log_step_comm`` (): communication inside a training step over the same
      collectives' isolated (microbenchmark) time; 1 = the same. Multiplies every
      architecture's exchange in :func:`costmodel.iteration_time`, never a
      collective's own time, so microbenchmarks leave it at its prior and only
      training steps fit it (issue 7 measured about 2× for an all-reduce in a step).
    * ``logit_backward_hide`` (): the share h of backward that the exchange of an
      architecture which does not overlap bucket by bucket (ps, ps_host, hybrid,
      p2p) can still hide behind, as TensorFlow's dataflow sends each gradient
      when it exists: that exchange costs max(0, C − h·T_bwd) after backward
      instead of C. Default h ≈ 1e-13 (logit −30): today's serial exchange.
    * ``log_conv_efficiency`` (): a convolution's FLOP rate over ``flops_per_s``
      (the rate of matrix products and dense layers) beyond what its GEMM's
      size explains (``log_gemm_half``); 1 = the same. On the CPU of the
      emulated cluster 3×3 convolutions of 32–96 channels run at 32–41 GFLOP/s
      against a 1024³ matmul's 51, and with m½ fitted they come out at 0.98
      (issue 22: their GEMMs are small); cuDNN's convolutions reach about the
      rate of its GEMMs. Presets set it to 1: their ``flops_per_s`` is already the
      rate of the model's kind (:func:`costmodel.device_flops_per_s`).
    * ``log_conv_backward_efficiency`` (): a convolution's backward FLOP rate (the
      gradients of its input and of its filter, 2× the forward FLOPs) over its
      forward rate; 1 = the same. XLA:CPU runs a 3×3 convolution's backward at
      about 0.5–0.65 of its forward rate (issue 22: forward 604 MFLOP 12.1 ms,
      backward 1.21 GFLOP 41.3 ms, one core of the emulated cluster), while a dense
      layer's backward runs at its forward rate; presets set it to 1.
    * ``logit_latency_overlap`` (L,): per level, the share d of a collective's
      latency term that runs under its bandwidth term: T = (1 − d)·(L + B) +
      d·softmax₂(L, B) (:func:`costmodel.collectives.evaluate`); d = 0 is
      Hockney's α + S·β, d = 1 the larger of the two (LogGP's overhead hidden
      behind the gap of a pipelined transfer). Default d ≈ 1e-13 (logit −30):
      α + S·β. Measured on the emulated cluster (issue 22): 1 and 4 KiB take the
      same 0.4–1.3 ms, and 16 KiB its wire time alone.
    * ``log_gemm_half`` (): log m½, the half-performance dimension of a matrix
      product (Hockney's n½ for compute): a GEMM whose smallest dimension is m
      runs at ``flops_per_s``·m / (m + m½), so its time is F·(1 + m½/m) /
      ``flops_per_s`` (:meth:`compute_time`'s ``small_gemm``). Measured on the
      emulated cluster's CPU (XLA:CPU, issue 22): 128³ … 1024³ matmuls, batch-64
      dense layers and 32–96-channel convolutions fit m½ ≈ 15 with
      ``conv_efficiency`` ≈ 1 (one rate: median error 2.3%, against 8.4% for one
      rate without m½). Default e^−30 ≈ 9e-14 (every GEMM at the full rate).
    * ``log_head_start`` (L,): per level, log b, the bytes of a call that cross
      before the link's rate applies: the bandwidth term is β·max(0, B − b) for
      B bytes through the busiest link (smoothly,
      :func:`costmodel.collectives.evaluate`). A token-bucket shaper (Linux
      ``tc tbf``, the emulated cluster's NICs) passes its bucket's ``burst``
      at once after an idle gap, then paces at its rate (tc-tbf(8)); measured
      on the emulated cluster at 100 Mbit/s (issue 22): a 2 KiB sendrecv took
      0.094 ms against 0.164 ms of wire time, 4 KiB 0.26 ms against 0.33, and
      one line through 1 … 16 MiB fitted every size's held-out time within
      1–9% with b ≈ 2 kB against up to 76% without. Default e^−30 ≈ 9e-14
      bytes: none (Hockney's α + S·β).
    * ``log_cache_bytes``, ``log_cache_excess`` (L,): per level, log C and log k
      of a memory hierarchy under the link: beyond C of the B bytes through the
      busiest link, each byte costs (1 + k) times what one within C does, so the
      bandwidth term is β·(B + k·max(0, B − C)) (smoothly, as the head start's
      max; convex in B, which the regimes' soft minimum, concave, cannot be).
      Within a node a CPU's collectives copy through its caches (gloo over
      loopback: user buffer, socket buffer, user buffer): measured with the
      main job's 2 processes on 2 cores of 512 KiB L2 each (issue 22), the
      marginal cost of a byte doubled between 512 KiB and 2 MiB in every
      series (all_gather 0.20 → 0.40–0.45 ms/MiB), and a line through 1–16 MiB
      put every held-out 512 KiB point 16% (median of 7 series) above its
      measurement. Defaults C = e^30 ≈ 1.1e13 bytes and k = e^−30: none.

    Static (not fitted, not in θ): ``n_regimes`` (R) and ``host_links``, the
    independent links over which a node's devices reach host memory (one per
    PCIe switch uplink; ``ps_host`` puts ⌈g / host_links⌉ devices on each).

    Example:
        >>> p = ClusterParams.create(alpha_s=(5e-6, 20e-6), beta_s_per_byte=(1e-11, 1e-9))
        >>> round(float(p.alpha_s[1]) * 1e6, 3)   # µs
        20.0
    """

    log_alpha: Float[Array, "2"]
    log_beta: Float[Array, "2"]
    log_node_ratio: Float[Array, "2"]
    log_gamma: Float[Array, ""]
    regime_log_alpha: Float[Array, "C 2 R"]
    regime_log_beta: Float[Array, "C 2 R"]
    log_sharpness: Float[Array, " C"]
    log_call_overhead: Float[Array, ""]
    log_fanin: Float[Array, ""]
    log_all_to_all: Float[Array, ""]
    log_node_slots: Float[Array, ""]
    log_flops: Float[Array, ""]
    log_step_overhead: Float[Array, ""]
    log_update: Float[Array, ""]
    logit_interference: Float[Array, ""]
    log_memory: Float[Array, ""]
    log_step_comm: Float[Array, ""]
    logit_backward_hide: Float[Array, ""]
    log_conv_efficiency: Float[Array, ""]
    log_conv_backward_efficiency: Float[Array, ""]
    logit_latency_overlap: Float[Array, "2"]
    log_gemm_half: Float[Array, ""]
    log_head_start: Float[Array, "2"]
    log_all_to_all_cap: Float[Array, ""]
    log_cache_bytes: Float[Array, "2"]
    log_cache_excess: Float[Array, "2"]
    n_regimes: int = eqx.field(static=True, default=1)
    host_links: int = eqx.field(static=True, default=1)

    @classmethod
    def create(
        cls,
        *,
        alpha_s: float | Sequence[float] = (5e-6, 20e-6),
        beta_s_per_byte: float | Sequence[float] = (1 / 100e9, 1 / 12.5e9),
        node_beta_s_per_byte: float | Sequence[float] | None = None,
        gamma_s_per_byte: float = 1 / 300e9,
        n_regimes: int = 1,
        regime_alpha_factor=None,
        regime_beta_factor=None,
        regime_sharpness: float = 4.0,
        call_overhead_s: float = 10e-6,
        fanin_exponent: float = 0.05,
        all_to_all_exponent: float = 0.05,
        node_compute_slots: float = 1e6,
        flops_per_s: float = 10e12,
        step_overhead_s: float = 1e-3,
        update_s_per_byte: float = 5 / 900e9,
        overlap_interference: float = 0.05,
        memory_bytes: float = 16 * 1024**3,
        step_comm_factor: float = 1.0,
        backward_hide: float = _NO_HIDE,
        conv_efficiency: float = 1.0,
        conv_backward_efficiency: float = 1.0,
        latency_overlap: float | Sequence[float] = _NO_HIDE,
        gemm_half_dim: float = NO_GEMM_HALF,
        head_start_bytes: float | Sequence[float] = NO_HEAD_START,
        all_to_all_congestion_cap: float = NO_CONGESTION_CAP,
        cache_bytes: float | Sequence[float] = NO_CACHE_BYTES,
        cache_excess: float | Sequence[float] = NO_CACHE_EXCESS,
        host_links: int = 1,
    ) -> ClusterParams:
        """Build parameters from physical values (SI units).

        Args:
            alpha_s: α per level (intra, inter), s, > 0; a scalar sets both.
            beta_s_per_byte: β per level, s/byte, > 0 (1 / link bandwidth).
            node_beta_s_per_byte: per-node shared inverse bandwidth per level,
                s/byte, > 0. Default: 1/16 of β, a cap that binds only for more
                than 16 concurrent flows per node.
            gamma_s_per_byte: γ, reduction cost, s/byte, > 0.
            n_regimes: R ≥ 1 protocol regimes per collective (static).
            regime_alpha_factor, regime_beta_factor: factors on α and β per
                regime, shape (R,) or (C, 2, R); default: 1 for R = 1, else
                regimes spread from low-latency/low-bandwidth to
                high-latency/high-bandwidth (α ×0.25 … ×4, β ×4 … ×1: the
                largest messages at the base β, the link's rate).
            regime_sharpness: k > 0 of the regimes' soft lower envelope.
            call_overhead_s: per collective call, s, > 0.
            fanin_exponent: e > 0 in the fan-in congestion factor kᵉ.
            all_to_all_exponent: e > 0 in all_to_all's congestion (n−1)ᵉ.
            all_to_all_congestion_cap: c > 0, the most congestion adds to
                all_to_all's bandwidth term (factor ≤ 1 + c; default e^30 ≈
                1.1e13: none).
            node_compute_slots: ranks per node that run at full speed, > 0.
            flops_per_s: effective device throughput, FLOP/s, > 0.
            step_overhead_s: per-iteration fixed time, s, > 0.
            update_s_per_byte: optimizer update time per parameter byte, > 0.
            overlap_interference: fraction in (0, 1).
            memory_bytes: device memory, bytes, > 0.
            step_comm_factor: communication in a training step over its
                microbenchmark time, > 0 (1: the same).
            backward_hide: share of backward a non-overlapping exchange hides
                behind, in (0, 1) (default about 1e-13: none).
            conv_efficiency: a convolution's FLOP rate over ``flops_per_s``,
                > 0 (1: the same).
            conv_backward_efficiency: a convolution's backward FLOP rate over
                its forward rate, > 0 (1: the same).
            latency_overlap: per level (intra, inter), the share of a
                collective's latency hidden under its bandwidth term, in
                (0, 1); a scalar sets both (default about 1e-13: α + S·β).
            gemm_half_dim: m½ > 0, the smallest GEMM dimension (elements) at
                which a matrix product runs at half of ``flops_per_s`` (default
                about 9e-14: every GEMM at the full rate).
            head_start_bytes: per level (intra, inter), the bytes of a call
                that cross before the link's rate applies (a token bucket's
                burst), in (0, :data:`MAX_HEAD_START_BYTES`]; a scalar sets both
                (default about 9e-14: none).
            cache_bytes: per level (intra, inter), the bytes through a link
                beyond which each byte costs (1 + ``cache_excess``) times one
                within them, in (0, :data:`MAX_CACHE_BYTES`]; a scalar sets both
                (default about 1.1e13: none).
            cache_excess: per level, k in (0, :data:`MAX_CACHE_EXCESS`] (default
                about 9e-14: none).
            host_links: the independent links over which a node's devices
                reach host memory (one per PCIe switch uplink), an integer in
                [1, :data:`MAX_HOST_LINKS`] (static, not fitted). ``ps_host``
                spreads a node's g devices evenly over them: ⌈g / links⌉ share
                one link. Default 1 (every device of a node through one link);
                NVIDIA DGX-1: 4 (four PCIe switches, two GPUs each).

        Raises:
            ValueError: on any non-finite, non-positive or out-of-range value,
                naming the argument.

        (Long for its documentation: the body is 72 lines.)
        """
        if not isinstance(n_regimes, int) or n_regimes < 1 or n_regimes > 8:
            raise ValueError(f"n_regimes must be an integer in [1, 8], got {n_regimes!r}")
        _check_host_links(host_links)
        alpha = _pair(alpha_s, "alpha_s")
        beta = _pair(beta_s_per_byte, "beta_s_per_byte")
        node_beta = (
            beta / 16.0
            if node_beta_s_per_byte is None
            else _pair(node_beta_s_per_byte, "node_beta_s_per_byte")
        )
        C, R = len(COLLECTIVE_NAMES), n_regimes
        if regime_alpha_factor is None:
            regime_alpha_factor = np.ones(1) if R == 1 else np.geomspace(0.25, 4.0, R)
        if regime_beta_factor is None:
            # the last (large-message) regime at the base β: a preset's datasheet link rate
            # is what its largest messages reach, never twice it (×0.5 had a profile
            # fitted on one node predict 2× the inter-node link: a new user's trial)
            regime_beta_factor = np.ones(1) if R == 1 else np.geomspace(4.0, 1.0, R)
        ra = np.broadcast_to(np.asarray(regime_alpha_factor, dtype=np.float64), (C, 2, R)).copy()
        rb = np.broadcast_to(np.asarray(regime_beta_factor, dtype=np.float64), (C, 2, R)).copy()
        for name, arr in (("regime_alpha_factor", ra), ("regime_beta_factor", rb)):
            if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
                raise ValueError(f"{name} must be finite and > 0")
        interference = float(overlap_interference)
        if not 0.0 < interference < 1.0:
            raise ValueError(
                f"overlap_interference must be in (0, 1), got {overlap_interference!r}"
            )
        f = to_jax  # device_put: no XLA program per leaf shape
        return cls(
            log_alpha=f(np.log(alpha)),
            log_beta=f(np.log(beta)),
            log_node_ratio=f(np.log(node_beta) - np.log(beta)),
            log_gamma=f(math.log(_pos(gamma_s_per_byte, "gamma_s_per_byte"))),
            regime_log_alpha=f(np.log(ra)),
            regime_log_beta=f(np.log(rb)),
            log_sharpness=f(np.full(C, math.log(_pos(regime_sharpness, "regime_sharpness")))),
            log_call_overhead=f(math.log(_pos(call_overhead_s, "call_overhead_s"))),
            log_fanin=f(math.log(_pos(fanin_exponent, "fanin_exponent"))),
            log_all_to_all=f(math.log(_pos(all_to_all_exponent, "all_to_all_exponent"))),
            log_node_slots=f(math.log(_pos(node_compute_slots, "node_compute_slots"))),
            log_flops=f(math.log(_pos(flops_per_s, "flops_per_s"))),
            log_step_overhead=f(math.log(_pos(step_overhead_s, "step_overhead_s"))),
            log_update=f(math.log(_pos(update_s_per_byte, "update_s_per_byte"))),
            logit_interference=f(math.log(interference / (1.0 - interference))),
            log_memory=f(math.log(_pos(memory_bytes, "memory_bytes"))),
            log_step_comm=f(math.log(_pos(step_comm_factor, "step_comm_factor"))),
            logit_backward_hide=f(_logit(backward_hide, "backward_hide")),
            log_conv_efficiency=f(math.log(_pos(conv_efficiency, "conv_efficiency"))),
            log_conv_backward_efficiency=f(
                math.log(_pos(conv_backward_efficiency, "conv_backward_efficiency"))
            ),
            logit_latency_overlap=f(
                np.array(
                    [
                        _logit(v, "latency_overlap")
                        for v in np.broadcast_to(np.asarray(latency_overlap, np.float64), (2,))
                    ]
                )
            ),
            log_gemm_half=f(math.log(_pos(gemm_half_dim, "gemm_half_dim"))),
            log_head_start=f(
                np.log(_pair(head_start_bytes, "head_start_bytes", MAX_HEAD_START_BYTES))
            ),
            log_all_to_all_cap=f(math.log(_congestion_cap(all_to_all_congestion_cap))),
            log_cache_bytes=f(np.log(_pair(cache_bytes, "cache_bytes", MAX_CACHE_BYTES))),
            log_cache_excess=f(np.log(_pair(cache_excess, "cache_excess", MAX_CACHE_EXCESS))),
            n_regimes=R,
            host_links=int(host_links),
        )

    # ---- array namespace ------------------------------------------------------
    @property
    def _xp(self):
        return xp_of(self.log_alpha)

    def to_numpy(self, batch_ndim: int = 0) -> ClusterParams:
        """The same parameters with float64 numpy leaves (evaluated without XLA).

        Every formula of the cost model runs in the namespace of its operands
        (:mod:`costmodel._xp`): with numpy parameters and numpy workloads it runs
        in numpy, which is what the exhaustive sweep, predictions and reports
        want (no compilation); calibration keeps jax leaves for gradients.

        Args:
            batch_ndim: leading axes of every leaf that index a batch of
                parameter sets (e.g. draws from a covariance, stacked by
                ``jax.vmap(unravel)``), 0 or 1. With 1, a singleton axis is
                inserted after the batch axis, so that a batch of D parameter
                sets broadcasts against N configurations to (D, N).

        Returns:
            A :class:`ClusterParams` of numpy leaves.

        Raises:
            ValueError: on a ``batch_ndim`` other than 0 or 1.
        """
        if batch_ndim not in (0, 1):
            raise ValueError(f"batch_ndim must be 0 or 1, got {batch_ndim!r}")

        def conv(x):
            a = np.asarray(x, dtype=np.float64)
            return a[:, None, ...] if batch_ndim else a

        return jax.tree_util.tree_map(conv, self)

    def flat(self) -> np.ndarray:
        """θ: every unconstrained leaf raveled in field order, float64 numpy (P,).

        The order of ``jax.flatten_util.ravel_pytree(params)`` (the leaves of
        the Module in declaration order, each in C order), which covariances of
        profiles are indexed by.
        """
        return np.concatenate(
            [
                np.ravel(np.asarray(leaf, dtype=np.float64))
                for leaf in jax.tree_util.tree_leaves(self)
            ]
        )

    def from_flat(self, theta) -> ClusterParams:
        """Parameters of this structure from θ (P,) or a batch of them (D, P), numpy leaves.

        Args:
            theta: (P,) or (D, P) unconstrained values in :meth:`flat` order.

        Returns:
            :class:`ClusterParams` with float64 numpy leaves: of the leaves' own
            shapes for (P,), of shape (D, 1, *leaf) for (D, P), the batched form
            of :meth:`to_numpy` (D parameter sets broadcast against N
            configurations to (D, N)).

        Raises:
            ValueError: when θ's last axis is not P or θ has more than 2 axes.
        """
        theta = np.asarray(theta, dtype=np.float64)
        leaves, treedef = jax.tree_util.tree_flatten(self)
        sizes = [int(np.size(leaf)) for leaf in leaves]
        if theta.ndim not in (1, 2) or theta.shape[-1] != sum(sizes):
            raise ValueError(
                f"theta must be ({sum(sizes)},) or (D, {sum(sizes)}), got {theta.shape}"
            )
        lead = () if theta.ndim == 1 else (theta.shape[0], 1)
        out, start = [], 0
        for leaf, size in zip(leaves, sizes, strict=True):
            out.append(theta[..., start : start + size].reshape(lead + np.shape(leaf)))
            start += size
        return jax.tree_util.tree_unflatten(treedef, out)

    # ---- physical values (SI) -------------------------------------------------
    @property
    def alpha_s(self) -> Float[Array, "2"]:
        """α per level (intra, inter), s."""
        return self._xp.exp(self.log_alpha)

    @property
    def beta_s_per_byte(self) -> Float[Array, "2"]:
        """β per level (intra, inter), s/byte; 1/β is the link bandwidth in bytes/s."""
        return self._xp.exp(self.log_beta)

    @property
    def node_beta_s_per_byte(self) -> Float[Array, "2"]:
        """Per-node shared inverse bandwidth per level, s/byte."""
        return self._xp.exp(self.log_beta + self.log_node_ratio)

    @property
    def node_ratio(self) -> Float[Array, "2"]:
        """β_node / β per level (intra, inter): the node's cap in units of one flow's link.

        A collective's node term is its node bytes × its own regime β × this
        ratio (``costmodel.collectives._base.evaluate``): the node's NICs carry
        1 / ratio flows of that collective at once (1 / ratio = NICs per node
        across nodes), at whatever rate its protocol achieves on one.
        """
        return self._xp.exp(self.log_node_ratio)

    @property
    def nics_per_node(self) -> Float[Array, ""]:
        """NICs' worth (rails) a node's network carries at once: β_inter / β_node,inter.

        The node's network cap over one rank's link bandwidth; a preset sets it
        to its NIC count (:func:`costmodel.preset`), a fit to what the data say
        (any real > 0, not rounded).
        """
        return self._xp.exp(-self.log_node_ratio[..., 1])

    @property
    def gamma_s_per_byte(self) -> Float[Array, ""]:
        """γ, reduction cost, s/byte."""
        return self._xp.exp(self.log_gamma)

    @property
    def regime_alpha_s(self) -> Float[Array, "C 2 R"]:
        """α of every (collective, level, regime), s."""
        return self._xp.exp(self.log_alpha[..., None, :, None] + self.regime_log_alpha)

    @property
    def regime_beta_s_per_byte(self) -> Float[Array, "C 2 R"]:
        """β of every (collective, level, regime), s/byte."""
        return self._xp.exp(self.log_beta[..., None, :, None] + self.regime_log_beta)

    @property
    def regime_sharpness(self) -> Float[Array, " C"]:
        """Sharpness k of each collective's soft lower envelope over regimes."""
        return self._xp.exp(self.log_sharpness)

    @property
    def call_overhead_s(self) -> Float[Array, ""]:
        """Software overhead per collective call, s."""
        return self._xp.exp(self.log_call_overhead)

    @property
    def fanin_exponent(self) -> Float[Array, ""]:
        """Exponent e of the fan-in congestion factor kᵉ (k concurrent senders to one link)."""
        return self._xp.exp(self.log_fanin)

    @property
    def all_to_all_exponent(self) -> Float[Array, ""]:
        """Exponent e of all_to_all's congestion factor (n−1)ᵉ."""
        return self._xp.exp(self.log_all_to_all)

    @property
    def all_to_all_congestion_cap(self) -> Float[Array, ""]:
        """c, the most congestion adds to all_to_all's bandwidth term: its factor ≤ 1 + c."""
        return self._xp.exp(self.log_all_to_all_cap)

    @property
    def node_compute_slots(self) -> Float[Array, ""]:
        """Ranks of one node that run at full speed at once (cores for CPU runs)."""
        return self._xp.exp(self.log_node_slots)

    @property
    def flops_per_s(self) -> Float[Array, ""]:
        """Effective compute throughput of one device, FLOP/s."""
        return self._xp.exp(self.log_flops)

    @property
    def step_overhead_s(self) -> Float[Array, ""]:
        """Fixed per-iteration overhead, s."""
        return self._xp.exp(self.log_step_overhead)

    @property
    def update_s_per_byte(self) -> Float[Array, ""]:
        """Optimizer update time per parameter byte, s/byte."""
        return self._xp.exp(self.log_update)

    @property
    def overlap_interference(self) -> Float[Array, ""]:
        """Fraction by which backward slows while communication overlaps it, in (0, 1)."""
        return 1.0 / (1.0 + self._xp.exp(-self.logit_interference))

    @property
    def memory_bytes(self) -> Float[Array, ""]:
        """Device memory, bytes."""
        return self._xp.exp(self.log_memory)

    @property
    def backward_hide(self) -> Float[Array, ""]:
        """Share of backward a non-overlapping exchange (ps, ps_host, hybrid, p2p) hides behind."""
        return 1.0 / (1.0 + self._xp.exp(-self.logit_backward_hide))

    @property
    def step_comm_factor(self) -> Float[Array, ""]:
        """Communication in a training step over its microbenchmark time (1: the same)."""
        return self._xp.exp(self.log_step_comm)

    @property
    def conv_efficiency(self) -> Float[Array, ""]:
        """A convolution's FLOP rate over ``flops_per_s`` (1: the same)."""
        return self._xp.exp(self.log_conv_efficiency)

    @property
    def conv_backward_efficiency(self) -> Float[Array, ""]:
        """A convolution's backward FLOP rate over its forward rate (1: the same)."""
        return self._xp.exp(self.log_conv_backward_efficiency)

    @property
    def gemm_half_dim(self) -> Float[Array, ""]:
        """m½, the smallest GEMM dimension at which a matrix product runs at half the rate, elements."""
        return self._xp.exp(self.log_gemm_half)

    @property
    def head_start_bytes(self) -> Float[Array, "2"]:
        """Per level (intra, inter), the bytes of a call that cross before the link's rate applies."""
        return self._xp.exp(self.log_head_start)

    @property
    def cache_bytes(self) -> Float[Array, "2"]:
        """Per level (intra, inter), the bytes through a link beyond which each byte costs more."""
        return self._xp.exp(self.log_cache_bytes)

    @property
    def cache_excess(self) -> Float[Array, "2"]:
        """Per level, k: a byte beyond ``cache_bytes`` costs (1 + k) times one within them."""
        return self._xp.exp(self.log_cache_excess)

    @property
    def latency_overlap(self) -> Float[Array, "2"]:
        """Per level (intra, inter), the share of a collective's latency under its bandwidth term."""
        return 1.0 / (1.0 + self._xp.exp(-self.logit_latency_overlap))

    # ---- derived functions of the parameters ------------------------------------
    def core_share(self, ranks_per_node: Float[Array, "*b"]) -> Float[Array, "*b"]:
        """Slowdown of g ranks sharing one node's cores: softmax₂(1, g / s), ≥ 1.

        ≈ 1 while g ≤ s, ≈ g / s beyond (p-norm smoothing,
        :func:`costmodel._smooth.soft_max2`, p = 8), with s = softmax₂(1,
        ``node_compute_slots``): a node runs at least one rank at full speed,
        so slots below 1 act as one (a lone rank: at most the smoothing's
        2^(1/8) at the knee). Without that floor a fit on one rank per node
        traded every speed of the model against slots < 1, one global scale,
        and identified none of them. Multiplies compute and the cores'
        part of communication: latency steps, reductions, call overhead and
        intra-node copies (``costmodel.collectives._base.evaluate``), not the
        bytes on the wire between nodes.

        Args:
            ranks_per_node: g ≥ 1 concurrent ranks on the node, float array (*b).

        Returns:
            Dimensionless factor, shape (*b).

        Example:
            >>> p = ClusterParams.create(node_compute_slots=2.0)
            >>> round(float(p.core_share(jnp.asarray(4.0))), 4)   # (1 + (4/s)⁸)^(1/8), s = (1 + 2⁸)^(1/8)
            2.0
        """
        xp = xp_of(self, ranks_per_node)
        g = xp.asarray(ranks_per_node)
        slots = self.node_compute_slots
        if xp is np and g.size > 1 and g.min() == g.max():  # one g across a sweep: once
            one_g = _core_share(slots, g.reshape(-1)[:1].reshape((1,) * g.ndim))
            return np.broadcast_to(one_g, np.broadcast_shapes(one_g.shape, g.shape))
        # (a numpy sweep's many whole counts: NumpyParams.core_share's table of 1 … 4096)
        return _core_share(slots, g)

    def compute_time(
        self,
        flops: Float[Array, "*b"],
        ranks_per_node: Float[Array, "*b"],
        calls=0.0,
        conv=0.0,
        backward=0.0,
        small_gemm=0.0,
    ) -> Float[Array, "*b"]:
        """Seconds of ``flops`` on one device while g ranks share its node.

        (c·o + F·(1 + m½·u)·(1 − v + v·(1 − w + w/b)/e) / flops_per_s) · share(g),
        with o = ``call_overhead_s``, m½ ``gemm_half_dim``, u the FLOP-weighted
        mean of 1/m over the GEMMs (m the smallest dimension of each), v the share
        of the FLOPs in convolutions, w the share of those in a backward pass, e
        ``conv_efficiency``, b ``conv_backward_efficiency`` and ``share``
        :meth:`core_share` (a roofline-free throughput model: each kind of layer
        at its own sustained rate, a GEMM of smallest dimension m at the
        fraction m / (m + m½) of it: Hockney & Jesshope, *Parallel Computers 2*,
        1988, §1.3.3, r∞ and n½). The compute model of the iteration
        timeline (forward and backward FLOPs inside one step: c = 0, the step's
        dispatch is ``step_overhead_s``) and of calibration's compute records
        (each one timed call of a compiled program: c = 1, the same dispatch a
        collective record pays).

        Args:
            flops: F ≥ 0 floating-point operations, (*b).
            ranks_per_node: g ≥ 1 ranks computing at once on the node, (*b).
            calls: c ≥ 0 dispatched calls of a compiled program (default 0).
            conv: v in [0, 1], the share of ``flops`` in convolutions (default
                0: matrix products and dense layers only), (*b) or scalar.
            backward: w in [0, 1], the share of the convolutions' FLOPs in
                backward passes (default 0: forward), (*b) or scalar.
            small_gemm: u ≥ 0, 1/elements: Σ F_l/m_l / Σ F_l over the layers
                (m_l the smallest dimension of layer l's matrix product, a
                convolution's as its implicit GEMM); 0 (default): no GEMM
                dimension known, the full rate.

        Returns:
            Seconds, broadcast shape.

        Example:
            >>> p = ClusterParams.create(flops_per_s=1e12)
            >>> round(float(p.compute_time(jnp.asarray(2e12), jnp.asarray(1.0))), 4)
            2.0
        """
        conv_factor = (1.0 - backward + backward / self.conv_backward_efficiency) / (
            self.conv_efficiency
        )
        rate_factor = (1.0 - conv + conv * conv_factor) * (1.0 + self.gemm_half_dim * small_gemm)
        return (
            calls * self.call_overhead_s + flops * rate_factor / self.flops_per_s
        ) * self.core_share(ranks_per_node)

    # ---- (de)serialisation ----------------------------------------------------
    def to_dict(self) -> dict:
        """Physical values as plain JSON-ready Python (SI units, see :data:`PARAMETER_UNITS`).

        Regime tables are nested lists indexed [collective][level][regime] in
        the order of :data:`costmodel.COLLECTIVE_NAMES` and :data:`LEVELS`.
        """

        def tolist(x):
            return np.asarray(x, dtype=np.float64).tolist()

        return {
            "n_regimes": self.n_regimes,
            "host_links": self.host_links,
            "collectives": list(COLLECTIVE_NAMES),
            "levels": list(LEVELS),
            "alpha_s": tolist(self.alpha_s),
            "beta_s_per_byte": tolist(self.beta_s_per_byte),
            "node_beta_s_per_byte": tolist(self.node_beta_s_per_byte),
            "gamma_s_per_byte": tolist(self.gamma_s_per_byte),
            "regime_alpha_factor": tolist(jnp.exp(self.regime_log_alpha)),
            "regime_beta_factor": tolist(jnp.exp(self.regime_log_beta)),
            "regime_sharpness": tolist(self.regime_sharpness),
            "call_overhead_s": tolist(self.call_overhead_s),
            "fanin_exponent": tolist(self.fanin_exponent),
            "all_to_all_exponent": tolist(self.all_to_all_exponent),
            "all_to_all_congestion_cap": tolist(self.all_to_all_congestion_cap),
            "node_compute_slots": tolist(self.node_compute_slots),
            "flops_per_s": tolist(self.flops_per_s),
            "step_overhead_s": tolist(self.step_overhead_s),
            "update_s_per_byte": tolist(self.update_s_per_byte),
            "overlap_interference": tolist(self.overlap_interference),
            "memory_bytes": tolist(self.memory_bytes),
            "step_comm_factor": tolist(self.step_comm_factor),
            "backward_hide": tolist(self.backward_hide),
            "conv_efficiency": tolist(self.conv_efficiency),
            "conv_backward_efficiency": tolist(self.conv_backward_efficiency),
            "latency_overlap": tolist(self.latency_overlap),
            "gemm_half_dim": tolist(self.gemm_half_dim),
            "head_start_bytes": tolist(self.head_start_bytes),
            "cache_bytes": tolist(self.cache_bytes),
            "cache_excess": tolist(self.cache_excess),
        }

    @classmethod
    def from_dict(cls, d: Mapping) -> ClusterParams:
        """Inverse of :meth:`to_dict`.

        Raises:
            ValueError: naming the first missing or invalid key, or when the
                file's collective list differs from this version's.
        """
        if not isinstance(d, Mapping):
            raise ValueError(f"parameters must be a JSON object, got {type(d).__name__}")
        need = [k for k in PARAMETER_UNITS if k not in d and k not in _OPTIONAL_KEYS] + (
            ["n_regimes"] if "n_regimes" not in d else []
        )
        if need:
            raise ValueError(f"parameters lack {', '.join(need)}")
        for key in PARAMETER_UNITS:
            if key in d:
                _check_json_numbers(d[key], key)
        if list(d.get("collectives", COLLECTIVE_NAMES)) != list(COLLECTIVE_NAMES):
            raise ValueError(
                f"parameters list collectives {d.get('collectives')}; this ddltune expects {list(COLLECTIVE_NAMES)}"
            )
        try:
            return cls.create(
                alpha_s=d["alpha_s"],
                beta_s_per_byte=d["beta_s_per_byte"],
                node_beta_s_per_byte=d["node_beta_s_per_byte"],
                gamma_s_per_byte=d["gamma_s_per_byte"],
                n_regimes=int(d["n_regimes"]),
                regime_alpha_factor=d["regime_alpha_factor"],
                regime_beta_factor=d["regime_beta_factor"],
                regime_sharpness=1.0,
                call_overhead_s=d["call_overhead_s"],
                fanin_exponent=d["fanin_exponent"],
                all_to_all_exponent=d["all_to_all_exponent"],
                node_compute_slots=d["node_compute_slots"],
                flops_per_s=d["flops_per_s"],
                step_overhead_s=d["step_overhead_s"],
                update_s_per_byte=d["update_s_per_byte"],
                overlap_interference=_saturated_share(d["overlap_interference"]),
                memory_bytes=d["memory_bytes"],
                step_comm_factor=d.get("step_comm_factor", 1.0),
                backward_hide=_saturated_share(d.get("backward_hide", _NO_HIDE)),
                conv_efficiency=d.get("conv_efficiency", 1.0),
                conv_backward_efficiency=d.get("conv_backward_efficiency", 1.0),
                latency_overlap=_saturated_share(d.get("latency_overlap", _NO_HIDE)),
                gemm_half_dim=d.get("gemm_half_dim", NO_GEMM_HALF),
                head_start_bytes=d.get("head_start_bytes", NO_HEAD_START),
                all_to_all_congestion_cap=d.get("all_to_all_congestion_cap", NO_CONGESTION_CAP),
                cache_bytes=d.get("cache_bytes", NO_CACHE_BYTES),
                cache_excess=d.get("cache_excess", NO_CACHE_EXCESS),
                host_links=_integer(d.get("host_links", 1)),
            ).replace_sharpness(d["regime_sharpness"])
        except (TypeError, ValueError) as e:
            raise ValueError(f"invalid parameters: {e}") from None

    def with_host_links(self, host_links: int) -> ClusterParams:
        """A copy with ``host_links`` links from a node's devices to host memory.

        Raises:
            ValueError: as :meth:`create` for a value outside [1, :data:`MAX_HOST_LINKS`].
        """
        _check_host_links(host_links)
        return dataclasses.replace(self, host_links=int(host_links))

    def replace_sharpness(self, k) -> ClusterParams:
        """A copy with the regimes' envelope sharpness set to ``k`` (scalar or (C,))."""
        k = np.broadcast_to(np.asarray(k, dtype=np.float64), (len(COLLECTIVE_NAMES),))
        if not np.all(np.isfinite(k)) or np.any(k <= 0):
            raise ValueError("regime_sharpness must be finite and > 0")
        new = np.log(k) if not isinstance(self.log_sharpness, jax.Array) else to_jax(np.log(k))
        return eqx.tree_at(lambda p: p.log_sharpness, self, new)

    def with_core_contention(self, contention: float) -> ClusterParams:
        """This cluster with every rank's cores shared ``contention``-fold more.

        The cores' part of communication slows by c, the wire between nodes
        does not: α (both levels), γ, the per-call overhead and the intra-node
        bytes (β and the node's cap inside a node) are multiplied by c, and
        ``flops_per_s`` divided by it (:meth:`compute_time` is c times as long).
        The same factor as :func:`costmodel.collectives.evaluate`'s
        ``contention`` for a whole evaluation (its per-call form, which
        calibration uses per record): emulated nodes that share a machine's
        CPUs (``calibration.compute_contention``), whose steps wait on the
        busiest CPU. A workload's measured step time is scaled on its own
        (``calibration.contended``).

        Args:
            contention: c ≥ 1, finite.

        Returns:
            A copy (itself at c = 1); batched leaves stay batched.

        Raises:
            ValueError: c not finite or below 1.
        """
        c = float(contention)
        if not (math.isfinite(c) and c >= 1.0):
            raise ValueError(f"contention must be a finite number ≥ 1, got {contention!r}")
        if c == 1.0:
            return self
        return self.scaled(
            alpha=c, gamma=c, call_overhead=c, beta_intra=c, node_beta_intra=c, flops=1.0 / c
        )

    def scaled(self, **factors: float) -> ClusterParams:
        """A copy with physical parameters multiplied by factors (what-if analysis).

        Keys: ``alpha`` / ``alpha_intra`` / ``alpha_inter``, ``beta`` /
        ``beta_intra`` / ``beta_inter`` (inverse bandwidth: a 2× faster network is
        ``beta_inter=0.5``; the node's cap ``node_beta`` keeps its value: scale both
        for faster NICs), ``node_beta``, ``gamma``, ``call_overhead``,
        ``flops``, ``conv_efficiency``, ``conv_backward_efficiency``, ``gemm_half_dim``,
        ``step_overhead``, ``update``, ``memory``,
        ``step_comm``.

        Raises:
            ValueError: on an unknown key or a factor that is not finite and > 0.

        Example:
            >>> p = ClusterParams.create(beta_s_per_byte=(1e-11, 1e-9))
            >>> round(float(p.scaled(beta_inter=0.5).beta_s_per_byte[1]) * 1e10, 3)
            5.0
        """
        table = {
            "alpha": ("log_alpha", None),
            "alpha_intra": ("log_alpha", 0),
            "alpha_inter": ("log_alpha", 1),
            "beta": ("log_beta", None),
            "beta_intra": ("log_beta", 0),
            "beta_inter": ("log_beta", 1),
            "node_beta": ("log_node_ratio", None),
            "node_beta_intra": ("log_node_ratio", 0),
            "node_beta_inter": ("log_node_ratio", 1),
            "gamma": ("log_gamma", None),
            "call_overhead": ("log_call_overhead", None),
            "flops": ("log_flops", None),
            "conv_efficiency": ("log_conv_efficiency", None),
            "conv_backward_efficiency": ("log_conv_backward_efficiency", None),
            "gemm_half_dim": ("log_gemm_half", None),
            "step_overhead": ("log_step_overhead", None),
            "update": ("log_update", None),
            "memory": ("log_memory", None),
            "step_comm": ("log_step_comm", None),
        }
        out = self
        for key, factor in factors.items():
            if key not in table:
                raise ValueError(
                    f"unknown parameter {key!r} to scale; valid: {', '.join(sorted(table))}"
                )
            f = float(factor)
            if not math.isfinite(f) or f <= 0:
                raise ValueError(f"factor for {key!r} must be finite and > 0, got {factor!r}")
            attr, idx = table[key]
            leaf = getattr(out, attr)
            if idx is None:
                new = leaf + math.log(f)
            else:  # the level axis is the last: works for batched leaves too
                shift = np.zeros(2, dtype=leaf.dtype)
                shift[idx] = math.log(f)
                new = leaf + shift
            out = eqx.tree_at(lambda p, a=attr: getattr(p, a), out, new)
            if attr == "log_beta":  # the node's cap stays where it was (its own key)
                ratio = out.log_node_ratio - (new - leaf)
                out = eqx.tree_at(lambda p: p.log_node_ratio, out, ratio)
        return out


def _core_share(slots, g):
    """softmax₂(1, g / softmax₂(1, slots)): :meth:`ClusterParams.core_share`'s formula."""
    one = xp_of(slots, g).ones_like(g)
    return soft_max2(one, g / soft_max2(one, slots))


#: Whole rank counts per node whose core share :class:`NumpyParams` keeps in a table.
_SHARE_TABLE_SIZE = 4096

#: The physical values :class:`NumpyParams` evaluates once.
_PHYSICAL_PROPERTIES = (
    "alpha_s",
    "beta_s_per_byte",
    "node_beta_s_per_byte",
    "node_ratio",
    "nics_per_node",
    "gamma_s_per_byte",
    "regime_alpha_s",
    "regime_beta_s_per_byte",
    "regime_sharpness",
    "call_overhead_s",
    "fanin_exponent",
    "all_to_all_exponent",
    "all_to_all_congestion_cap",
    "node_compute_slots",
    "flops_per_s",
    "step_overhead_s",
    "update_s_per_byte",
    "overlap_interference",
    "memory_bytes",
    "step_comm_factor",
    "backward_hide",
    "conv_efficiency",
    "conv_backward_efficiency",
    "latency_overlap",
    "gemm_half_dim",
    "head_start_bytes",
    "cache_bytes",
    "cache_excess",
)


class NumpyParams:
    """A :class:`ClusterParams` evaluated once into float64 numpy values, for the numpy path.

    The cost model's formulas read parameters only through the physical
    properties (``alpha_s``, ``regime_beta_s_per_byte``, …) and the methods
    :meth:`ClusterParams.core_share` / :meth:`ClusterParams.compute_time`;
    this object holds those values as plain attributes (computed by the
    properties themselves, once), so that a sweep neither recomputes an
    ``exp`` per call nor pays a Module's attribute lookup. Leaves with
    leading batch axes (draws) stay batched.

    Args:
        params: a :class:`ClusterParams` (jax or numpy leaves; converted with
            :meth:`ClusterParams.to_numpy` when jax), or a ``NumpyParams``.
    """

    compute_time = ClusterParams.compute_time

    def core_share(self, ranks_per_node):
        """:meth:`ClusterParams.core_share`; the last array asked for is remembered
        (a collective's evaluation and its per-call overhead, forward and backward
        compute, ask for the same rank counts in turn)."""
        key, share = self._share  # one read: another thread may replace it
        if ranks_per_node is key:
            return share
        g = ranks_per_node
        share = None
        if isinstance(g, np.ndarray) and g.size and np.ndim(self.node_compute_slots) == 0:
            # whole counts 1 … 4096 (every sweep's): read from the formula's table of them
            lo, hi = g.min(), g.max()
            if 1.0 <= lo and hi <= _SHARE_TABLE_SIZE:
                table = self._share_table()
                if lo == hi and lo == int(lo):
                    share = np.broadcast_to(table[int(lo) - 1], g.shape)
                else:
                    whole = g.astype(np.int64)
                    if np.array_equal(whole, g):
                        share = table[whole - 1]
        if share is None:
            share = ClusterParams.core_share(self, g)
        if isinstance(g, np.ndarray):
            self._share = (g, share)
        return share

    def _share_table(self) -> np.ndarray:
        """core_share of g = 1 … :data:`_SHARE_TABLE_SIZE` (the formula on each, once)."""
        if self._table is None:
            g = np.arange(1.0, _SHARE_TABLE_SIZE + 1.0)
            self._table = _core_share(self.node_compute_slots, g)
        return self._table

    def __init__(self, params):
        keep_freed_memory()  # numpy evaluations reuse their freed buffers (see there)
        if isinstance(params, NumpyParams):
            params = params.source
        if isinstance(params.log_alpha, jax.Array):
            params = params.to_numpy()
        self.source = params
        self._share = (None, None)  # core_share's last (rank counts, share)
        self._table = None  # core_share of 1 … 4096 ranks, made when first asked
        self.n_regimes = params.n_regimes
        self.host_links = params.host_links
        self.log_alpha = params.log_alpha
        self.log_gamma = params.log_gamma
        for name in _PHYSICAL_PROPERTIES:
            setattr(self, name, getattr(params, name))

    def to_numpy(self) -> NumpyParams:
        """Itself (already numpy)."""
        return self

    def with_core_contention(self, contention: float) -> NumpyParams:
        """:meth:`ClusterParams.with_core_contention`, as numpy values."""
        if contention == 1.0:
            return self
        return NumpyParams(self.source.with_core_contention(contention))


def numpy_params(params) -> NumpyParams:
    """:class:`NumpyParams` of ``params`` (itself when it already is one).

    The last few conversions are remembered by the identity of ``params``
    (a frozen Module: the same object holds the same values), so that a sweep
    calling the model once per architecture with one :class:`ClusterParams`
    converts it once (about 70 µs a conversion).
    """
    if isinstance(params, NumpyParams):
        return params
    for ref, converted in _NUMPY_PARAMS:
        if ref() is params:
            return converted
    converted = NumpyParams(params)
    try:
        ref = weakref.ref(params)
    except TypeError:  # not weakly referable: not remembered
        return converted
    _NUMPY_PARAMS.insert(0, (ref, converted))
    del _NUMPY_PARAMS[4:]
    return converted


#: (weak reference to a ClusterParams, its NumpyParams), the most recent first.
_NUMPY_PARAMS: list = []
