"""The flat view of :class:`costmodel.ClusterParams` that calibration works on.

Calibration optimises, differentiates and propagates uncertainty with respect
to one vector θ: every unconstrained leaf of a ``ClusterParams`` (log of a
scale, logit of a fraction), raveled in field order and C order. This module
names every element of θ, maps θ ↔ ``ClusterParams``, defines the Gaussian
prior on θ around a preset, and lists the physical quantities a user reads
(``alpha_s[intra]``, ``regime_beta_s_per_byte[all_reduce,intra,1]``, …) as
linear functions of θ followed by ``exp`` (or the logistic function), so that a
covariance of θ gives each quantity's interval exactly (log-normal).
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from costmodel import COLLECTIVE_NAMES, LEVELS, PARAMETER_UNITS, ClusterParams

__all__ = ["ParamLayout", "Quantity", "PRIOR_SD", "STEPS_ONLY_LEAVES", "STEPS_ONLY_PARAMETERS"]

#: Prior standard deviation (natural-log units, i.e. of the unconstrained leaf)
#: per leaf, around the prior preset. A datasheet link bandwidth is rarely off
#: by more than ×3, a latency or overhead by ×4; a regime factor of a
#: one-regime model (a collective's deviation from the shared link line) by
#: ×1.5; the factors of a several-regime envelope are free (×10).
PRIOR_SD = {
    "log_alpha": math.log(4.0),
    "log_beta": math.log(3.0),
    "log_node_ratio": math.log(4.0),  # NICs per node (or a node cap) within ×4
    "log_gamma": math.log(4.0),
    "regime_log_alpha": (math.log(1.5), math.log(10.0)),  # (one regime, several)
    "regime_log_beta": (math.log(1.5), math.log(10.0)),
    "log_sharpness": 1.0,
    "log_call_overhead": math.log(4.0),
    "log_fanin": 1.5,
    "log_all_to_all": 1.5,
    "log_node_slots": math.log(2.0),
    "log_flops": math.log(4.0),
    "log_step_overhead": math.log(4.0),
    "log_update": math.log(4.0),
    "logit_interference": 1.5,
    "log_memory": 0.1,
    # communication in a step over its microbenchmark: issue 7 measured ~2× for an
    # all-reduce inside a step; ×3 either way covers contention and hidden transfers
    "log_step_comm": math.log(3.0),
    # centred at logit −30 (no hiding, what every architecture without bucket overlap
    # costs); wide enough (sd 15) that rows with communication move it to any share
    "logit_backward_hide": 15.0,
    # a convolution's rate over a matmul's of the same GEMM size: 0.98 on the emulated
    # cluster's CPU once gemm_half_dim is fitted (issue 22), about 1 for cuDNN on
    # tensor cores; ×4 either way
    "log_conv_efficiency": math.log(4.0),
    # a convolution's backward rate over its forward: 0.5–0.65 on XLA:CPU (issue 22),
    # about 1 for a dense layer; ×2 either way
    "log_conv_backward_efficiency": math.log(2.0),
    # centred at logit −30 (α + S·β, Hockney); wide (sd 15) so that a measured
    # curve whose small sizes take the same time moves it anywhere in (0, 1)
    "logit_latency_overlap": 15.0,
    # a GEMM's half-performance dimension m½: centred at the preset's (about 15 on
    # the emulated cluster's CPU, e^−30, none, on the GPU presets whose rate is
    # already their model kind's); wide (sd 15) so that matmuls of several sizes
    # move it anywhere
    "log_gemm_half": 15.0,
    # centred at e^−30 bytes (none: α + S·β); wide (sd 15) so that a curve whose
    # first kilobytes cross at once (a token bucket's burst, issue 22: about 2 kB on
    # the emulated cluster) moves it to any size
    "log_head_start": 15.0,
    # centred at e^30 (no ceiling: (n−1)^e at every n); wide (sd 15) so that
    # all_to_all curves at several rank counts whose congestion steps and then stays
    # (issue 22: 1.00× at 2 ranks, 1.34–1.40× at 3–6 on the emulated cluster) move it
    # to any share
    "log_all_to_all_cap": 15.0,
    # centred at e^30 bytes and e^−30 (none: each byte costs β at any size); wide (sd
    # 15) so that intra-node curves whose cost per byte rises past a cache (issue 22:
    # doubling between 512 KiB and 2 MiB on 2 CPU cores) move them anywhere
    "log_cache_bytes": 15.0,
    "log_cache_excess": 15.0,
}
_DEFAULT_SD = math.log(4.0)

# Physical name and index labels of each leaf (to_dict's key for the quantity).
_PHYSICAL = {
    "log_alpha": "alpha_s",
    "log_beta": "beta_s_per_byte",
    "log_node_ratio": "node_ratio",
    "log_gamma": "gamma_s_per_byte",
    "log_sharpness": "regime_sharpness",
    "log_call_overhead": "call_overhead_s",
    "log_fanin": "fanin_exponent",
    "log_all_to_all": "all_to_all_exponent",
    "log_node_slots": "node_compute_slots",
    "log_flops": "flops_per_s",
    "log_step_overhead": "step_overhead_s",
    "log_update": "update_s_per_byte",
    "logit_interference": "overlap_interference",
    "log_memory": "memory_bytes",
    "log_step_comm": "step_comm_factor",
    "logit_backward_hide": "backward_hide",
    "log_conv_efficiency": "conv_efficiency",
    "log_conv_backward_efficiency": "conv_backward_efficiency",
    "log_gemm_half": "gemm_half_dim",
    "logit_latency_overlap": "latency_overlap",
    "log_head_start": "head_start_bytes",
    "log_all_to_all_cap": "all_to_all_congestion_cap",
    "log_cache_bytes": "cache_bytes",
    "log_cache_excess": "cache_excess",
}

#: Leaves that only training steps inform (the step terms less the compute rate, which
#: compute probes measure): no microbenchmark depends on them, so without steps their
#: posterior is their prior. ``STEPS_ONLY_PARAMETERS``: their physical names.
STEPS_ONLY_LEAVES = (
    "log_step_overhead",
    "logit_interference",
    "log_step_comm",
    "logit_backward_hide",
)
STEPS_ONLY_PARAMETERS = tuple(_PHYSICAL[leaf] for leaf in STEPS_ONLY_LEAVES)


class Quantity(NamedTuple):
    """A physical quantity as a function of θ: ``transform(coef · θ)``.

    Attributes:
        name: e.g. ``"alpha_s[intra]"`` or ``"regime_beta_s_per_byte[all_reduce,intra,0]"``.
        unit: SI unit.
        coef: (P,) coefficients on θ.
        transform: ``"exp"`` or ``"logistic"``.
    """

    name: str
    unit: str
    coef: np.ndarray
    transform: str


def _leaf_fields() -> tuple[str, ...]:
    return tuple(
        f.name for f in dataclasses.fields(ClusterParams) if not f.metadata.get("static", False)
    )


def _labels(field: str, shape: tuple[int, ...]) -> list[str]:
    if not shape:
        return [""]
    axes: list[list[str]] = []
    if field in ("regime_log_alpha", "regime_log_beta"):
        axes = [list(COLLECTIVE_NAMES), list(LEVELS), [str(r) for r in range(shape[2])]]
    elif field == "log_sharpness":
        axes = [list(COLLECTIVE_NAMES)]
    elif shape == (len(LEVELS),):
        axes = [list(LEVELS)]
    else:
        axes = [[str(i) for i in range(s)] for s in shape]
    out = [""]
    for ax in axes:
        out = [f"{a},{b}" if a else b for a in out for b in ax]
    return [f"[{o}]" for o in out]


class ParamLayout:
    """θ ↔ :class:`costmodel.ClusterParams` for a given number of regimes.

    Args:
        n_regimes: R ≥ 1, the static regime count of the parameters.

    Attributes:
        fields: leaf field names in order.
        shapes: each leaf's shape.
        names: (P,) element names, e.g. ``"log_beta[inter]"``.
        size: P.

    Example:
        >>> lay = ParamLayout(1)
        >>> p = ClusterParams.create()
        >>> th = lay.flatten(p)
        >>> th.shape == (lay.size,) and lay.names[0]
        'log_alpha[intra]'
        >>> float(lay.unflatten(th).alpha_s[1]) == float(p.alpha_s[1])
        True
    """

    def __init__(self, n_regimes: int):
        if not isinstance(n_regimes, int) or n_regimes < 1:
            raise ValueError(f"n_regimes must be an integer ≥ 1, got {n_regimes!r}")
        self.n_regimes = n_regimes
        template = ClusterParams.create(n_regimes=n_regimes)
        self.fields = _leaf_fields()
        self.shapes = {f: tuple(np.shape(getattr(template, f))) for f in self.fields}
        self.slices: dict[str, slice] = {}
        names: list[str] = []
        start = 0
        for f in self.fields:
            size = int(np.prod(self.shapes[f], dtype=int))
            self.slices[f] = slice(start, start + size)
            names += [f + lab for lab in _labels(f, self.shapes[f])]
            start += size
        self.names = names
        self.size = start

    # ---- θ <-> params ----------------------------------------------------------
    def flatten(self, params: ClusterParams):
        """θ of ``params`` (a jax array, (P,)); raises ValueError on a regime mismatch."""
        if params.n_regimes != self.n_regimes:
            raise ValueError(
                f"parameters have {params.n_regimes} regimes; this layout has {self.n_regimes}"
            )
        return jnp.concatenate([jnp.ravel(getattr(params, f)) for f in self.fields])

    def unflatten(self, theta, *, host_links: int = 1) -> ClusterParams:
        """``ClusterParams`` whose leaves are the slices of θ (traceable; numpy θ gives
        numpy leaves, which the cost model evaluates in numpy); ``host_links`` is
        the static topology value (not in θ) the parameters carry."""
        xp = jnp if isinstance(theta, jax.Array) else np
        leaves = {f: xp.reshape(theta[self.slices[f]], self.shapes[f]) for f in self.fields}
        return ClusterParams(**leaves, n_regimes=self.n_regimes, host_links=host_links)

    # ---- prior -----------------------------------------------------------------
    def prior_sd(self) -> np.ndarray:
        """(P,) prior standard deviations of θ (see :data:`PRIOR_SD`)."""
        out = np.empty(self.size)
        for f in self.fields:
            sd = PRIOR_SD.get(f, _DEFAULT_SD)
            if isinstance(sd, tuple):
                sd = sd[0] if self.n_regimes == 1 else sd[1]
            out[self.slices[f]] = sd
        return out

    def prior_sd_table(self, sd: np.ndarray | None = None) -> dict[str, float]:
        """Standard deviation per leaf field (the first element's), as a profile records it.

        ``sd``: (P,) standard deviations of θ; default :meth:`prior_sd`.
        """
        sd = self.prior_sd() if sd is None else sd
        return {f: float(sd[self.slices[f]][0]) for f in self.fields}

    # ---- physical quantities ---------------------------------------------------
    def quantities(self) -> list[Quantity]:
        """Every physical parameter as a function of θ, in :meth:`ClusterParams.to_dict` order.

        Regime α and β are the products (base × factor) a collective actually
        uses — what data identify — not the factors alone.
        """
        out: list[Quantity] = []
        for f in self.fields:
            if f in ("regime_log_alpha", "regime_log_beta"):
                continue
            phys = _PHYSICAL.get(f, f)
            unit = PARAMETER_UNITS.get(phys, "1")
            sl = self.slices[f]
            for i, lab in enumerate(_labels(f, self.shapes[f])):
                coef = np.zeros(self.size)
                coef[sl.start + i] = 1.0
                transform = "logistic" if f.startswith("logit_") else "exp"
                out.append(Quantity(phys + lab, unit, coef, transform))
        R = self.n_regimes
        for f, base, phys, unit in (
            ("regime_log_alpha", "log_alpha", "regime_alpha_s", "s"),
            ("regime_log_beta", "log_beta", "regime_beta_s_per_byte", "s/byte"),
        ):
            sl, bl = self.slices[f], self.slices[base]
            for c, cname in enumerate(COLLECTIVE_NAMES):
                for lev, lname in enumerate(LEVELS):
                    for r in range(R):
                        coef = np.zeros(self.size)
                        coef[sl.start + (c * len(LEVELS) + lev) * R + r] = 1.0
                        coef[bl.start + lev] = 1.0
                        out.append(Quantity(f"{phys}[{cname},{lname},{r}]", unit, coef, "exp"))
        return out


def apply_transform(transform: str, x):
    """``exp`` or the logistic function, elementwise (numpy)."""
    x = np.asarray(x, dtype=np.float64)
    if transform == "exp":
        return np.exp(x)
    return 1.0 / (1.0 + np.exp(-x))
