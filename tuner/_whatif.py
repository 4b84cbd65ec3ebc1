"""What-if analysis: recommendations under changed hardware, and the bandwidth a target needs.

:func:`what_if` scales physical parameters (:meth:`costmodel.ClusterParams.scaled`:
``beta_inter=0.5`` is a 2× faster network, ``alpha=0.5`` half the latency,
``flops=2`` a 2× faster device) and recommends under them. Scaling shifts the
log-stored leaves by constants, so the profile's covariance and intervals carry
over unchanged.

:func:`min_bandwidth_for_efficiency` answers the inverse question — the
smallest link bandwidth at which a configuration reaches a target scaling
efficiency — by a safeguarded Newton iteration on u = log(bandwidth) using
``jax.grad`` of the exact model's efficiency (bisection whenever a Newton step
leaves the bracket), not by a scan.

References:
    Press et al., "Numerical Recipes", 3rd ed., §9.4 (Newton–Raphson with
    bisection safeguard, ``rtsafe``).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._recommend import Recommendation, recommend
from ._search import TimeSpec, Variant, spec_efficiency
from ._sensitivity import _config_fields
from ._uncertainty import ScaledProfile, as_profile

__all__ = ["what_if", "min_bandwidth_for_efficiency", "BandwidthResult"]


@functools.partial(jax.jit, static_argnames=("spec", "level"))
def _efficiency_and_slope(params, u, *, spec: TimeSpec, level: int):
    """Scaling efficiency at link bandwidth e^u (bytes/s) of one level, and d eff / du.

    β and the level's per-node cap are both set so that their ratio is kept.
    """

    def eff(u):
        shift = -params.log_beta[level] - u  # log of the factor applied to β
        # the node's cap is a ratio to β (log_node_ratio): it moves with it
        p = eqx.tree_at(lambda q: q.log_beta, params, params.log_beta.at[level].add(shift))
        return spec_efficiency(p, spec)[0]

    return jax.value_and_grad(eff)(u)


def what_if(profile, workload, changes: Mapping[str, float], **recommend_kwargs) -> Recommendation:
    """Recommend under a profile whose parameters are scaled by ``changes``.

    Args:
        profile: a :class:`calibration.Profile` or :class:`costmodel.ClusterParams`.
        workload: a :class:`costmodel.Workload`.
        changes: factors per physical parameter, keys as
            :meth:`costmodel.ClusterParams.scaled` (``alpha``, ``alpha_inter``,
            ``beta_inter`` (inverse bandwidth: 0.5 = 2× bandwidth),
            ``node_beta_inter``, ``gamma``, ``flops``, ``memory``, …), each
            finite and > 0.
        **recommend_kwargs: as :func:`tuner.recommend` (``max_workers`` required).

    Returns:
        The :class:`Recommendation` under the scaled parameters (same
        covariance; the warnings say what was scaled).

    Raises:
        ValueError: an unknown key or a factor that is not finite and > 0
            (naming it), or any error of :func:`tuner.recommend`.
        TypeError: ``changes`` is not a mapping.

    Example:
        >>> from costmodel import preset, get_workload
        >>> p, w = preset("ethernet-10g", "v100"), get_workload("resnet50", 64)
        >>> base = recommend(p, w, max_workers=8, architectures=["ring"], refine=False)
        >>> fast = what_if(p, w, {"beta_inter": 0.5, "node_beta_inter": 0.5}, max_workers=8,
        ...                architectures=["ring"], refine=False)
        >>> fast.throughput_samples_per_s >= base.throughput_samples_per_s
        True
    """
    if not isinstance(changes, Mapping):
        raise TypeError(
            "changes must be a dict of factors such as {'beta_inter': 0.5}, got "
            f"{type(changes).__name__}"
        )
    prof = as_profile(profile)
    scaled = ScaledProfile(prof, dict(changes))
    rec = recommend(scaled, workload, **recommend_kwargs)
    note = "what-if: parameters scaled by " + ", ".join(
        f"{k} ×{float(v):g}" for k, v in changes.items()
    )
    return _with_warning(rec, note)


def _with_warning(rec: Recommendation, note: str) -> Recommendation:
    return dataclasses.replace(rec, warnings=(*rec.warnings, note))


@dataclass(frozen=True)
class BandwidthResult:
    """The answer of :func:`min_bandwidth_for_efficiency`.

    Attributes:
        status: ``"ok"`` (found), ``"unreachable"`` (even infinite bandwidth
            misses the target) or ``"below_range"`` (reached already at the
            lowest bandwidth considered, 10⁻⁶ × the current one).
        bandwidth_bytes_per_s: the smallest link bandwidth reaching the target
            (the link's, 1/β), bytes/s; NaN when unreachable.
        efficiency: scaling efficiency at that bandwidth.
        max_efficiency: efficiency at (practically) infinite bandwidth
            (10⁹ × the current one).
        current_bandwidth_bytes_per_s, current_efficiency: at the profile's values.
        target_efficiency: the target.
        level: ``"inter"`` or ``"intra"``.
        iterations: Newton/bisection steps taken.
        message: a human summary.
    """

    status: str
    bandwidth_bytes_per_s: float
    efficiency: float
    max_efficiency: float
    current_bandwidth_bytes_per_s: float
    current_efficiency: float
    target_efficiency: float
    level: str
    iterations: int
    message: str

    def to_dict(self) -> dict:
        """Plain JSON-ready values (NaN stays NaN; the CLI prints it as null)."""
        return dict(self.__dict__)


def min_bandwidth_for_efficiency(
    profile,
    workload,
    config,
    target_efficiency: float,
    *,
    level: str = "inter",
    rtol: float = 1e-4,
    max_iter: int = 60,
) -> BandwidthResult:
    """The smallest link bandwidth at which ``config`` reaches ``target_efficiency``.

    (Long for its documentation only: the body checks, brackets the target,
    then calls ``_newton_bisect``.)

    Scales the level's link inverse bandwidth β and its per-node cap (the NIC
    for ``inter``) by the same factor, keeping their ratio, and solves
    eff(u) = target for u = log(bandwidth) with Newton steps using
    ``jax.value_and_grad`` of the exact model's scaling efficiency, safeguarded
    by bisection on the bracket [10⁻⁶, 10⁹] × the current bandwidth
    (efficiency does not decrease with bandwidth).

    Args:
        profile: a :class:`calibration.Profile` or :class:`costmodel.ClusterParams`.
        workload: a :class:`costmodel.Workload`.
        config: a :class:`Recommendation`, :class:`Configuration` or dict with
            ``architecture`` and ``workers`` (see :func:`tuner.sensitivity`).
        target_efficiency: the scaling efficiency to reach, in (0, 1].
        level: ``"inter"`` (network) or ``"intra"`` (inside a node).
        rtol: relative tolerance on the bandwidth, > 0.
        max_iter: most iterations, ≥ 1.

    Returns:
        A :class:`BandwidthResult`.

    Raises:
        ValueError: a target outside (0, 1], an unknown level, or a bad config.

    Example:
        >>> from costmodel import preset, get_workload
        >>> r = min_bandwidth_for_efficiency(
        ...     preset("ethernet-10g", "v100"), get_workload("resnet50", 64),
        ...     {"architecture": "ring", "workers": 16}, 0.8)
        >>> r.status, r.efficiency >= 0.8 - 1e-3
        ('ok', True)
    """
    target = _check_bandwidth_args(target_efficiency, level, rtol, max_iter)
    params = as_profile(profile).params
    variant, spec, label = _bandwidth_spec(workload, config)
    li = 1 if level == "inter" else 0
    u0 = -float(np.asarray(params.log_beta)[li])
    dtype = jnp.result_type(float)

    def call(u):
        v, d = _efficiency_and_slope(params, jnp.asarray(u, dtype=dtype), spec=spec, level=li)
        return float(v), float(d)

    e_now, _ = call(u0)
    u_lo, u_hi = u0 - math.log(1e6), u0 + math.log(1e9)
    e_lo, _ = call(u_lo)
    e_hi, _ = call(u_hi)
    common = dict(
        max_efficiency=e_hi,
        current_bandwidth_bytes_per_s=math.exp(u0),
        current_efficiency=e_now,
        target_efficiency=target,
        level=level,
    )
    if e_hi < target:
        msg = (
            f"{label} cannot reach {target:.0%} scaling "
            f"efficiency at any {level}-node bandwidth: at infinite bandwidth it reaches "
            f"{e_hi:.1%} (latency, compute and update bound it)"
        )
        return BandwidthResult("unreachable", math.nan, e_hi, iterations=0, message=msg, **common)
    if e_lo >= target:
        msg = (
            f"{target:.0%} efficiency is reached even at {math.exp(u_lo):.3g} bytes/s "
            f"(10⁻⁶ × the current {level}-node bandwidth): bandwidth does not bound it"
        )
        return BandwidthResult(
            "below_range", math.exp(u_lo), e_lo, iterations=0, message=msg, **common
        )
    hi, e_at_hi, it = _newton_bisect(call, target, u0, u_lo, u_hi, e_hi, rtol, int(max_iter))
    bw, now = math.exp(hi), math.exp(u0)
    msg = (
        f"{label} reaches {target:.0%} scaling efficiency from "
        f"{bw * 8 / 1e9:.3g} Gb/s of {level}-node link bandwidth "
        f"({bw / now:.3g}× the current {now * 8 / 1e9:.3g} Gb/s)"
    )
    return BandwidthResult("ok", bw, e_at_hi, iterations=it, message=msg, **common)


def _check_bandwidth_args(target_efficiency, level, rtol, max_iter) -> float:
    try:
        target = float(target_efficiency)
    except (TypeError, ValueError):
        target = float("nan")
    if not 0.0 < target <= 1.0:
        raise ValueError(f"target_efficiency must be in (0, 1], got {target_efficiency!r}")
    if level not in ("inter", "intra"):
        raise ValueError(f"level must be 'inter' or 'intra', got {level!r}")
    if not (rtol > 0) or int(max_iter) < 1:
        raise ValueError("rtol must be > 0 and max_iter ≥ 1")
    return target


def _bandwidth_spec(workload, config):
    """The configuration as a differentiable one-row :class:`TimeSpec`, and its words."""
    f = _config_fields(config)
    variant = Variant(str(f["architecture"]), bool(f.get("colocated", False)))
    _ = variant.arch  # an unknown architecture fails here
    n = float(f["workers"])
    k = float(max(int(f.get("servers", 0) or 0), 1))
    b = float(f.get("bucket_bytes", 25 * 1024**2))
    g = int(f.get("ranks_per_node", 1))
    batch = float(f.get("batch_size") or workload.batch_size)
    base = float(f.get("base_batch_size") or batch)
    spec, _ = TimeSpec.build(workload, g, [(variant, n, k, b, batch, base)], differentiable=True)
    return variant, spec, f"{variant.label} with {int(n)} workers"


def _newton_bisect(call, target, u0, lo, hi, e_hi, rtol, max_iter):
    """Solve e(u) = target on a bracket e(lo) < target ≤ e(hi): Newton with bisection safeguard.

    Returns ``(hi, e(hi), iterations)``: the bracket's upper end (where the
    target is met) when it is narrower than ``rtol`` or the steps run out.
    """
    u = min(max(u0, lo), hi)
    it = 0
    e_at_hi = e_hi
    while it < max_iter:
        it += 1
        e, d = call(u)
        if e >= target:
            hi, e_at_hi = u, e
        else:
            lo = u
        if hi - lo <= rtol:
            break
        step_ok = d > 0 and math.isfinite(d)
        u_new = u - (e - target) / d if step_ok else 0.5 * (lo + hi)
        if not (lo < u_new < hi):
            u_new = 0.5 * (lo + hi)
        # guard against stalling at a kink: keep shrinking the bracket
        if abs(u_new - u) < 0.25 * rtol:
            u_new = u + (0.5 * rtol if e < target else -0.5 * rtol)
            u_new = min(max(u_new, lo + 1e-15), hi - 1e-15)
        u = u_new
    return hi, e_at_hi, it
