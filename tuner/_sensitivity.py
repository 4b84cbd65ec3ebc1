"""Which hardware knob matters for this job: elasticities of the iteration time.

The elasticity of the step time T with respect to a positive parameter θ is
ε = ∂log T / ∂log θ: a 1% larger θ makes the step ε% longer. Because
:class:`costmodel.ClusterParams` stores positive parameters as their logs, ε is
simply the gradient of log T with respect to the log-stored leaf, computed
by central differences of the exact model in numpy (every perturbed parameter
set in one call, nothing compiled; at a kink of the hard max over buckets, the
mean of the two one-sided derivatives). For a logit-stored fraction f (overlap interference)
the chain rule gives ε = ∂log T/∂logit f · 1/(1 − f).

The per-(collective, level, regime) factor tables add no new knob: α of
collective c, level l, regime r is exp(log_alpha[l] + regime_log_alpha[c, l, r]),
so the elasticity with respect to a level's α (``alpha_inter``) is the sum of
the table's entries for that level; ``detail=True`` also reports the split per
collective.

References:
    Sydsæter & Hammond, "Essential Mathematics for Economic Analysis" (elasticity);
    Hockney 1994 (α-β model).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from costmodel import COLLECTIVE_NAMES, ClusterParams

from ._recommend import Configuration, Recommendation
from ._search import TimeSpec, Variant, spec_times
from ._uncertainty import as_profile

__all__ = ["sensitivity", "SENSITIVITY_NAMES"]

#: Names :func:`sensitivity` returns (each a physical parameter; β terms are
#: inverse bandwidths: ε_bandwidth = −ε_β).
SENSITIVITY_NAMES = (
    "alpha_intra",
    "alpha_inter",
    "beta_intra",
    "beta_inter",
    "node_beta_intra",
    "node_beta_inter",
    "gamma",
    "call_overhead",
    "fanin_exponent",
    "all_to_all_exponent",
    "all_to_all_congestion_cap",
    "cache_bytes_intra",
    "cache_excess_intra",
    "node_compute_slots",
    "flops",
    "conv_efficiency",
    "conv_backward_efficiency",
    "gemm_half_dim",
    "step_overhead",
    "update",
    "overlap_interference",
)


#: Step of the central differences in the unconstrained leaves (log units): the
#: truncation error h²·f‴/6 and the rounding error ε/h are both about 1e-10.
_FD_STEP = 1e-5


def _grad_log_time(params: ClusterParams, spec: TimeSpec) -> ClusterParams:
    """∂ log T / ∂ leaves for the single configuration of ``spec``, by central differences.

    All 2P + 1 parameter sets (θ, θ ± h·e_i) are evaluated in one numpy call
    of the cost model (:func:`tuner._search.spec_times` with a batch of
    parameters): nothing is compiled. At a kink of the exact model (the hard
    max over buckets) this is the mean of the two one-sided derivatives.
    """
    theta = params.flat()
    P = theta.size
    step = _FD_STEP * np.eye(P)
    thetas = np.concatenate([theta[None], theta + step, theta - step])
    with np.errstate(all="ignore"):
        t = np.asarray(spec_times(params.from_flat(thetas), spec), dtype=np.float64)[:, 0]
    lt = np.log(t)
    grad = (lt[1 : 1 + P] - lt[1 + P :]) / (2.0 * _FD_STEP)
    return params.from_flat(np.where(np.isfinite(grad), grad, 0.0))


def _config_fields(config) -> dict:
    if isinstance(config, Recommendation):
        config = config.config
    if isinstance(config, Configuration):
        return {
            "architecture": config.architecture,
            "colocated": config.colocated,
            "workers": config.workers,
            "servers": config.servers,
            "ranks_per_node": config.ranks_per_node,
            "bucket_bytes": config.bucket_bytes,
            "batch_size": config.batch_size,
        }
    if isinstance(config, Mapping):
        if "architecture" not in config or "workers" not in config:
            raise ValueError(
                f"config must name at least 'architecture' and 'workers', got keys {sorted(config)}"
            )
        return dict(config)
    raise TypeError(
        "config must be a Recommendation, a Configuration or a dict with 'architecture' and "
        f"'workers', got {type(config).__name__}"
    )


def sensitivity(profile, workload, config, *, detail: bool = False) -> dict[str, float]:
    """Elasticity ∂log T / ∂log θ of the step time for every hardware parameter.

    Args:
        profile: a :class:`calibration.Profile` or :class:`costmodel.ClusterParams`.
        workload: a :class:`costmodel.Workload`.
        config: a :class:`Recommendation`, a :class:`Configuration`, or a dict
            with ``architecture`` and ``workers`` (and optionally ``servers``,
            ``colocated``, ``ranks_per_node``, ``bucket_bytes`` (default 25
            MiB), ``batch_size``, ``base_batch_size``).
        detail: also return ``alpha_inter[all_reduce]``-style entries: the
            split of each level's α and β elasticity over collectives.

    Returns:
        ``{name: elasticity}`` for :data:`SENSITIVITY_NAMES` (dimensionless;
        e.g. ``beta_inter`` = 0.4: 10% less inter-node bandwidth, i.e. 10%
        larger β, lengthens the step by about 4%).

    Raises:
        ValueError: an unknown architecture or invalid configuration values.
        TypeError: a profile or config of the wrong type.

    Example:
        >>> from costmodel import preset, get_workload
        >>> e = sensitivity(preset("ethernet-10g", "v100"), get_workload("resnet50", 64),
        ...                 {"architecture": "ring", "workers": 1})
        >>> abs(e["beta_inter"]) < 1e-12, e["flops"] < 0   # one worker: no network
        (True, True)
    """
    prof = as_profile(profile)
    f = _config_fields(config)
    variant = Variant(str(f["architecture"]), bool(f.get("colocated", False)))
    _ = variant.arch  # validates the name
    n = float(f["workers"])
    k = float(max(int(f.get("servers", 0) or 0), 1))
    b = float(f.get("bucket_bytes", 25 * 1024**2))
    g = int(f.get("ranks_per_node", 1))
    batch = float(f.get("batch_size") or workload.batch_size)
    base = float(f.get("base_batch_size") or batch)
    for name, v, lo in (("workers", n, 1), ("ranks_per_node", g, 1), ("bucket_bytes", b, 0)):
        if not np.isfinite(v) or v < lo:
            raise ValueError(f"config {name} must be ≥ {lo}, got {v!r}")

    spec, _ = TimeSpec.build(workload, g, [(variant, n, k, b, batch, base)])
    grads = _grad_log_time(prof.params, spec)
    a = lambda x: np.asarray(x, dtype=np.float64)  # noqa: E731
    frac = float(a(prof.params.overlap_interference))
    # the node cap's leaf is its log ratio to β: d/d log β moves both, so a link's
    # own elasticity (the node cap held) is the difference
    ga, gn = a(grads.log_alpha), a(grads.log_node_ratio)
    gb = a(grads.log_beta) - gn
    out = {
        "alpha_intra": ga[0],
        "alpha_inter": ga[1],
        "beta_intra": gb[0],
        "beta_inter": gb[1],
        "node_beta_intra": gn[0],
        "node_beta_inter": gn[1],
        "gamma": a(grads.log_gamma),
        "call_overhead": a(grads.log_call_overhead),
        "fanin_exponent": a(grads.log_fanin),
        "all_to_all_exponent": a(grads.log_all_to_all),
        "all_to_all_congestion_cap": a(grads.log_all_to_all_cap),
        # a node's cache (a CPU's loopback copies); a NIC's bytes have none to speak of
        "cache_bytes_intra": a(grads.log_cache_bytes)[0],
        "cache_excess_intra": a(grads.log_cache_excess)[0],
        "node_compute_slots": a(grads.log_node_slots),
        "flops": a(grads.log_flops),
        "conv_efficiency": a(grads.log_conv_efficiency),
        "conv_backward_efficiency": a(grads.log_conv_backward_efficiency),
        "gemm_half_dim": a(grads.log_gemm_half),
        "step_overhead": a(grads.log_step_overhead),
        "update": a(grads.log_update),
        "overlap_interference": a(grads.logit_interference) / (1.0 - frac),
    }
    out = {k2: float(v) for k2, v in out.items()}
    if detail:
        ra, rb = a(grads.regime_log_alpha), a(grads.regime_log_beta)
        for c, cname in enumerate(COLLECTIVE_NAMES):
            for lvl, lname in enumerate(("intra", "inter")):
                out[f"alpha_{lname}[{cname}]"] = float(ra[c, lvl].sum())
                out[f"beta_{lname}[{cname}]"] = float(rb[c, lvl].sum())
    return out
