"""The calibration profile: fitted parameters with their uncertainty, as one JSON file.

A :class:`Profile` is what :func:`calibration.calibrate` returns and what the
tuner reads: the fitted :class:`costmodel.ClusterParams`, the covariance of
their unconstrained leaves, fit and held-out statistics, the ranges that were
measured (so the tuner can flag extrapolation), the prior, and provenance.
:meth:`Profile.interval` turns all of it into a prediction interval for any
function of the parameters.

File format (JSON, ``"schema": 1``, ``"kind": "ddltune-profile"``):

* ``params``: :meth:`costmodel.ClusterParams.to_dict` (SI units);
* ``covariance``: ``{"leaves": [names of θ's elements], "matrix": P × P}`` —
  covariance of the unconstrained leaves (log / logit), in that order;
* ``identified`` (parameter name → bool) and ``parameters`` (the table of
  :meth:`Profile.parameter_table`): for people; recomputed on load;
* ``reliable`` (bool), ``heldout_p90`` (fraction or null);
* ``measured_ranges``: ``message_bytes``, ``num_ranks``, ``ranks_per_node``
  ([min, max] or []), ``collectives`` (list), plus compute ranges;
* ``prior``: the preset (``"NETWORK[,INTRA]:DEVICE"``), why it was chosen,
  and the prior standard deviation per leaf;
* ``fit``, ``validation``: statistics (see :func:`calibration.calibrate`);
* ``warnings``, ``notes``; ``provenance``: input files with sha256, library
  versions, creation time.

Written atomically (temporary file + rename); never pickled.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from statistics import NormalDist

import jax
import jax.numpy as jnp
import numpy as np

from costmodel import ClusterParams, InputFileError, preset

from ._layout import STEPS_ONLY_LEAVES, ParamLayout, apply_transform
from ._records import (
    RECOMMENDATION_WORDS,
    atomic_write_text,
    is_recommendation,
    package_versions,
    utc_timestamp,
)
from ._validation import RELIABLE_P90_LIMIT

__all__ = ["Profile", "PROFILE_SCHEMA_VERSION", "PROFILE_KIND", "PRESET_FLOPS_SD", "preset_sd"]

PROFILE_SCHEMA_VERSION = 1
PROFILE_KIND = "ddltune-profile"
_REQUIRED = ("params", "covariance", "reliable", "measured_ranges", "prior", "provenance")
_RANGE_KEYS = ("message_bytes", "num_ranks", "ranks_per_node")
#: A parameter is *identified* when the data shrank its posterior standard
#: deviation (in log units) below this and to under half its prior's.
IDENTIFIED_SD = 0.1


def _z(level: float) -> float:
    # the standard library's normal quantile (Wichura's AS241, the algorithm of
    # scipy.stats.norm.ppf): importing scipy.stats costs about a second
    return NormalDist().inv_cdf(0.5 + 0.5 * level)


def _spread(r: np.ndarray, level: float, scale: float) -> float:
    """q × scale / z(level), q the split-conformal ``level`` quantile of |r|; 0 without residuals.

    q is the ⌈(m + 1)·level⌉-th smallest of the m values |r| (the largest when
    that rank exceeds m): a new error exchangeable with these lies within it
    with probability ≥ ``level`` (Vovk et al. 2005; Lei et al., JASA 2018, §2.2),
    where the plain empirical quantile falls short for a few residuals (a dozen
    fitted training steps); for hundreds it is the same.
    """
    m = r.size
    if m == 0:
        return 0.0
    k = min(m, math.ceil((m + 1) * level - 1e-9))
    return float(np.sort(np.abs(r))[k - 1]) * scale / _z(level)


def sigma_point_interval(y, plus, minus, slope, s_res: float, z: float, exact=None):
    """``(low, high)`` of a prediction from its tangent and its values at sigma points.

    With Σ = R Rᵀ (R's k columns r_i), the prediction y = f(θ̂), its directional
    derivatives J·r_i (``slope``) and f at θ̂ ± z·r_i (``plus``, ``minus``), each
    direction widens each side by the tangent's log-change or by what f does
    on that side at the sigma points, whichever is less:

        t_i = z·|J·r_i| / y
        up_i = min(t_i, max(log(f(θ̂ + z·r_i) / y), log(f(θ̂ − z·r_i) / y), 0))
        down_i = min(t_i, max(−log(f(θ̂ + z·r_i) / y), −log(f(θ̂ − z·r_i) / y), 0))
        high = y·exp(+sqrt(Σ up_i² + (z·s_res)²))
        low = y·exp(−sqrt(Σ down_i² + (z·s_res)²))

    For a prediction log-linear in θ both are the same and this is the delta
    method's log-normal interval, log y ± z·sqrt(J Σ Jᵀ / y² + s_res²) (Seber &
    Wild, *Nonlinear Regression*, 1989, §5.1). Where f levels off within z·σ,
    the sigma point sees it and the tangent does not (unscented transform:
    Julier & Uhlmann, Proc. IEEE 2004): a step whose unmeasured communication
    factor is ×6 uncertain (a prior) cannot fall below its compute, where the
    tangent's bound did (issue 22: 6.4 s for a 24.3-s step whose compute alone
    took 19.5 s). Where f turns away only far from θ̂ the tangent bounds it:
    the Laplace approximation's Gaussian does not see the data that exclude
    such points (a regime of a softmin left at its prior undercutting
    measured sizes; parameters the data confound, a node cap against γ, moved
    together along a line that is flat only near θ̂: an NVLink all-reduce of
    1 GiB fitted on nccl-tests read ×5.3–5.6 wide at the sigma points, ×1.3
    at most as the data pin it). So an interval is never wider than the delta
    method's, and where the step turns up beyond z·σ (an exchange hidden at θ̂,
    exposed at a larger factor) it is as narrow as the delta method's, except
    along the directions marked ``exact``: a leaf whose posterior is its
    prior because nothing that could be measured was (the step terms of a
    profile fitted without training steps) has an exactly Gaussian
    distribution at any distance, and its sigma points are its quantiles:
    both sides take them, up_i = max(log(f(θ̂ ± z·r_i) / y), 0) and down_i
    likewise. A direction whose sigma point is not a positive finite time
    keeps its tangent.

    Args:
        y: predictions, any shape; where y ≤ 0 or not finite the interval is y itself.
        plus, minus: (k, *y.shape) f at θ̂ + z·r_i and θ̂ − z·r_i.
        slope: (k, *y.shape) the directional derivatives J·r_i, units of y.
        s_res: residual log-spread (:meth:`Profile.residual_sd`), ≥ 0.
        z: the normal quantile of the level.
        exact: (k,) bool, the directions whose Gaussian is exact (see above);
            default none.

    Returns:
        float64 numpy arrays of y's shape.
    """
    y = np.asarray(y, dtype=np.float64)
    pos = (y > 0) & np.isfinite(y)
    safe = np.where(pos, y, 1.0)
    up, down = _sigma_sides(safe, plus, minus, slope, z, exact)
    res = (z * s_res) ** 2
    hi = np.sqrt(np.sum(up**2, axis=0) + res)
    lo = np.sqrt(np.sum(down**2, axis=0) + res)
    return np.where(pos, safe * np.exp(-lo), y), np.where(pos, safe * np.exp(hi), y)


def _sigma_sides(safe, plus, minus, slope, z: float, exact=None):
    """(up, down), each (k, *y.shape): every direction's log-widening of each side
    (:func:`sigma_point_interval`'s up_i, down_i) for predictions ``safe`` > 0."""
    plus, minus = np.asarray(plus, np.float64), np.asarray(minus, np.float64)
    lin = np.nan_to_num(z * np.abs(np.asarray(slope, np.float64)) / safe)
    with np.errstate(divide="ignore", invalid="ignore"):
        good = (plus > 0) & np.isfinite(plus) & (minus > 0) & np.isfinite(minus)
        u = np.where(good, np.log(np.where(good, plus, 1.0) / safe), 0.0)
        w = np.where(good, np.log(np.where(good, minus, 1.0) / safe), 0.0)
    rise = np.maximum(np.maximum(u, w), 0.0)
    fall = np.maximum(np.maximum(-u, -w), 0.0)
    cap = lin  # the tangent bounds each side, but along exact directions
    if exact is not None and np.any(exact):
        ex = np.reshape(np.asarray(exact, bool), (-1,) + (1,) * (np.ndim(lin) - 1))
        cap = np.where(ex, np.inf, lin)
    up = np.where(good, np.minimum(cap, rise), lin)
    down = np.where(good, np.minimum(cap, fall), lin)
    return up, down


def _check_level(level) -> float:
    try:
        v = float(level)
    except (TypeError, ValueError):
        raise ValueError(f"level must be a probability in (0, 1), got {level!r}") from None
    if not 0.0 < v < 1.0:
        raise ValueError(f"level must be a probability in (0, 1), got {level!r}")
    return v


def jsonable(obj):
    """Plain JSON values, recursively: NaN/±inf → ``None``, numpy and JAX arrays or scalars → Python.

    Mappings become dicts with ``str`` keys, tuples become lists. The one
    implementation: profiles, recommendations and the CLI's ``--json`` use it.

    Example:
        >>> import numpy as np
        >>> jsonable({"t": np.array([1.0, np.nan]), 2: (np.float32(0.5), float("inf"))})
        {'t': [1.0, None], '2': [0.5, None]}
    """
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [jsonable(v) for v in obj]
    if hasattr(obj, "tolist") and not isinstance(obj, str):
        return jsonable(obj.tolist())
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


class Profile:
    """A calibrated (or preset) cluster profile.

    Build one with :func:`calibration.calibrate`, :meth:`load` or
    :meth:`from_preset`. Attributes are read-only by convention.

    Attributes:
        params: the fitted :class:`costmodel.ClusterParams`.
        covariance: (P, P) numpy array, covariance of the unconstrained leaves
            θ (log / logit units), in the order of :attr:`leaf_names`.
        leaf_names: (P,) names of θ's elements.
        reliable: False when the held-out p90 error exceeded 15%.
        heldout_p90: held-out p90 absolute percentage error as a fraction;
            NaN when nothing was held out (or for a preset).
        measured_ranges: ``message_bytes``, ``num_ranks``, ``ranks_per_node``
            as [min, max] (empty for a preset), ``collectives`` measured.
        identified: parameter name → whether the data pinned it down.
        prior, fit, validation, provenance: dicts, see the module docstring.
        warnings, notes: lists of strings.

    Example:
        >>> from costmodel import collective_time
        >>> prof = Profile.from_preset("ethernet-10g", "v100")
        >>> lo, hi = prof.interval(lambda p: collective_time(p, "all_reduce", 2.0**24, 8, 1))
        >>> t = float(collective_time(prof.params, "all_reduce", 2.0**24, 8, 1))
        >>> bool(lo < t < hi), prof.reliable
        (True, True)
    """

    def __init__(
        self,
        *,
        params: ClusterParams,
        covariance,
        leaf_names,
        prior: dict,
        fit: dict | None = None,
        validation: dict | None = None,
        measured_ranges: dict | None = None,
        reliable: bool = True,
        heldout_p90: float = math.nan,
        provenance: dict | None = None,
        warnings=(),
        notes=(),
    ):
        self.params = params
        self._layout = ParamLayout(params.n_regimes)
        cov = np.asarray(covariance, dtype=np.float64)
        if cov.shape != (self._layout.size, self._layout.size):
            raise ValueError(
                f"covariance must be {self._layout.size}×{self._layout.size} for "
                f"{params.n_regimes} regime(s), got shape {cov.shape}"
            )
        if list(leaf_names) != self._layout.names:
            raise ValueError("covariance leaf names do not match this ddltune's parameter layout")
        self.covariance = 0.5 * (cov + cov.T)
        self.leaf_names = list(leaf_names)
        self.prior = dict(prior)
        self.fit = dict(fit or {})
        self.validation = dict(validation or {})
        self.measured_ranges = dict(
            measured_ranges
            or {"message_bytes": [], "num_ranks": [], "ranks_per_node": [], "collectives": []}
        )
        self.reliable = bool(reliable)
        self.heldout_p90 = float(heldout_p90) if heldout_p90 is not None else math.nan
        self.provenance = dict(provenance or {})
        self.warnings = list(warnings)
        self.notes = list(notes)
        self._prior_sd = self._prior_sd_vector()
        self._identified = None

    # ---- construction ----------------------------------------------------------
    @classmethod
    def from_preset(
        cls,
        network: str,
        device: str,
        *,
        n_regimes: int = 1,
        nics_per_node: int | None = None,
        compute_dtype: str | None = None,
        model_kind: str = "",
        host_links: int = 1,
    ) -> Profile:
        """A profile from datasheet presets, with the prior as its only uncertainty.

        ``reliable`` is True (nothing was measured to contradict it),
        ``heldout_p90`` NaN and ``measured_ranges`` empty: every prediction is
        an extrapolation, and intervals are the prior's (wide).

        Args:
            network, device, n_regimes, nics_per_node: see :func:`costmodel.preset`
                (``nics_per_node`` None: the preset's own rail count).
            compute_dtype, model_kind: the device's throughput for that dtype and
                kind of model (:func:`costmodel.device_flops_per_s`).
            host_links: links from a node's devices to host memory (see
                :func:`costmodel.preset`).

        Raises:
            ValueError: on an unknown preset name (listing the valid ones), a
                ``nics_per_node`` that is not an integer >= 1, or ``host_links``
                outside [1, 64].
        """
        params = preset(
            network,
            device,
            n_regimes=n_regimes,
            nics_per_node=nics_per_node,
            compute_dtype=compute_dtype,
            model_kind=model_kind,
            host_links=host_links,
        )
        layout = ParamLayout(n_regimes)
        sd = preset_sd(layout)
        return cls(
            params=params,
            covariance=np.diag(sd**2),
            leaf_names=layout.names,
            prior={
                "preset": f"{network}:{device}",
                "network": network,
                "device": device,
                "compute_dtype": compute_dtype,
                "model_kind": model_kind,
                "reason": "preset profile (nothing measured)",
                "sd": layout.prior_sd_table(sd),
            },
            provenance={"inputs": [], "versions": package_versions(), "created": utc_timestamp()},
        )

    # ---- derived ---------------------------------------------------------------
    def _prior_sd_vector(self) -> np.ndarray:
        sd = self._layout.prior_sd()
        table = self.prior.get("sd") or {}
        for f, v in table.items():
            if f in self._layout.slices and isinstance(v, int | float) and v > 0:
                sd[self._layout.slices[f]] = float(v)
        return sd

    @property
    def theta(self):
        """θ, the unconstrained leaves of :attr:`params` as one (P,) array."""
        return self._layout.flatten(self.params)

    @property
    def identified(self) -> dict:
        """Parameter name → True when the data pinned it down.

        A parameter is identified when its posterior standard deviation (log
        units) is below 0.1 and below half its prior's; parameters held at the
        prior (nothing measured depends on them) never are.
        """
        if self._identified is None:
            self._identified = {row["name"]: row["identified"] for row in self.parameter_table()}
        return dict(self._identified)

    def parameter_table(self, level: float = 0.9) -> list[dict]:
        """Every physical parameter with its ``level`` interval.

        Returns:
            A list of dicts: ``name`` (e.g. ``alpha_s[intra]``,
            ``regime_beta_s_per_byte[all_reduce,intra,0]`` — α and β of a
            regime are base × factor, what a collective uses), ``value``,
            ``unit``, ``low``, ``high`` (the central ``level`` interval of the
            log-normal posterior), ``identified``, and ``at_prior``: True where no
            measurement depends on it (the fit held all its leaves at the prior, or
            nothing was measured: a preset), so its value is the prior preset's
            datasheet value; ``None`` where the profile does not say (written
            before ``fit.free_leaves``).

        Raises:
            ValueError: if ``level`` is not in (0, 1).
        """
        level = _check_level(level)
        z = _z(level)
        th = self.params.flat()
        free = self.fit.get("free_leaves")
        if isinstance(free, list):
            names = set(map(str, free))
            free_mask = np.array([n in names for n in self.leaf_names])
        elif not self.measured_ranges.get("message_bytes") and not self.fit:
            free_mask = np.zeros(len(self.leaf_names), dtype=bool)  # a preset: all prior
        else:
            free_mask = None
        out = []
        for q in self._layout.quantities():
            m = float(q.coef @ th)
            var = float(q.coef @ self.covariance @ q.coef)
            var0 = float(q.coef**2 @ self._prior_sd**2)
            sd = math.sqrt(max(var, 0.0))
            lo, hi = apply_transform(q.transform, [m - z * sd, m + z * sd])
            out.append(
                {
                    "name": q.name,
                    "value": float(apply_transform(q.transform, m)),
                    "unit": q.unit,
                    "low": float(lo),
                    "high": float(hi),
                    "identified": bool(sd < IDENTIFIED_SD and sd < 0.5 * math.sqrt(var0)),
                    "at_prior": (
                        None
                        if free_mask is None
                        else not bool(np.any(free_mask & (np.asarray(q.coef) != 0)))
                    ),
                }
            )
        return out

    @property
    def steps_set_spread(self) -> bool:
        """Whether fitted training steps set the spread of step predictions.

        True where steps at two or more worker counts of ≥ 2 workers were
        fitted with at least one degree of freedom left (see
        :meth:`residual_sd`); else the microbenchmarks' spread applies.
        """
        v = self.validation
        r = np.asarray(v.get("step_log_residuals") or [], dtype=np.float64)
        p = float(v.get("step_effective_parameters") or 0.0)
        counts = [c for c in v.get("step_worker_counts") or [] if c >= 2]
        return len(counts) >= 2 and int(np.isfinite(r).sum()) - p >= 1.0

    def residual_sd(self, level: float = 0.9, of: str = "steps") -> float:
        """Log-space spread of prediction errors the parameters do not explain.

        The split-conformal ``level`` quantile of |log(t̂/t)| (:func:`_spread`)
        divided by the normal quantile z, so that with no parameter uncertainty
        a ``level`` interval covers at least a ``level`` share of errors like
        those. Whose errors:

        * ``of="steps"`` (a training step's time): where training steps at two
          or more worker counts of ≥ 2 workers were fitted
          (:func:`calibration.fit_steps`) with at least one degree of freedom
          left, the residuals of that fit, inflated by sqrt(n / (n − p_eff))
          for the p_eff terms fitted on them. A step's error is what the step
          model leaves; the microbenchmarks' own misses (small messages,
          compute kernels on loaded cores) reach a step only through the
          parameters, whose covariance the interval carries. Steps at one
          worker count cannot show how the model's miss changes with the count
          (measured on the emulated 4x2 cluster: a fit on 4 workers' steps
          left 1–2% and missed 8 workers' by 7–11%); there, and without steps,
          as ``"microbenchmarks"``.
        * ``of="microbenchmarks"`` (a collective's or kernel's time): the
          held-out residuals of the calibration; the training residuals,
          inflated by sqrt(n / (n − p_eff)) for the p_eff parameters fitted on
          them, when nothing was held out; 0 for a preset.

        Raises:
            ValueError: ``level`` not in (0, 1), or ``of`` another word.
        """
        level = _check_level(level)
        if of not in ("steps", "microbenchmarks"):
            raise ValueError(f"of must be 'steps' or 'microbenchmarks', got {of!r}")
        v = self.validation
        if of == "steps" and self.steps_set_spread:
            r = np.asarray(v["step_log_residuals"], dtype=np.float64)
            r = r[np.isfinite(r)]
            p = float(v.get("step_effective_parameters") or 0.0)
            return _spread(r, level, math.sqrt(r.size / (r.size - p)))
        r = np.asarray(v.get("heldout_log_residuals") or [], dtype=np.float64)
        scale = 1.0
        if r.size == 0:
            r = np.asarray(v.get("train_log_residuals") or [], dtype=np.float64)
            p = float(self.fit.get("effective_parameters") or 0.0)
            if r.size:
                scale = math.sqrt(r.size / max(r.size - p, 1.0))
        return _spread(r[np.isfinite(r)], level, scale)

    def interval(self, fn, level: float = 0.9, *, batched: bool = False, of: str = "steps"):
        """A ``level`` prediction interval of ``fn(params)``.

        Combines the parameter covariance with the residual spread of what
        ``fn`` predicts (:meth:`residual_sd` ``of`` it) in log space: along
        each column r_i of the covariance's symmetric square root, ``fn``'s
        tangent and its values at the sigma points θ̂ ± z·r_i widen each side
        by the lesser of the two (:func:`sigma_point_interval`). For a
        prediction log-linear in θ that is the delta method's log-normal
        interval,

            log t ± z · sqrt(J Σ Jᵀ / t² + s_res²),   z = Φ⁻¹(½ + level/2);

        where ``fn`` levels off (a step's compute under its exchange) the
        bound stops there. A step term that no training steps informed (its
        posterior is its prior) takes its sigma points on both sides: its
        Gaussian is exact, and an exchange hidden at θ̂ that its prior's high
        end exposes widens the high side.

        Args:
            fn: ``ClusterParams → times`` (an array of seconds, any shape,
                > 0 where it matters; outputs ≤ 0, e.g. a one-rank
                collective, get a zero-width interval). Without ``batched``
                it is JAX-traceable: its sigma points are one ``jax.vmap``
                and its directional derivatives (the fallback where a sigma
                point is not a positive finite time) ``jax.jvp``.
            level: coverage probability in (0, 1).
            batched: ``fn`` takes parameters with float64 numpy leaves of a
                leading batch axis D (the form of
                :meth:`costmodel.ClusterParams.from_flat` for (D, P)) and
                returns (D, *out); the directional derivatives are then
                central differences (f(θ + h·v) − f(θ − h·v)) / 2h, h = 10⁻⁴ /
                max|v|, and all 4k + 1 parameter sets go in ONE call of ``fn``
                (the cost model in numpy: no compilation).
            of: ``"steps"`` (default) when ``fn`` gives training steps'
                times, ``"microbenchmarks"`` for a collective's or kernel's.

        Returns:
            ``(low, high)`` of ``fn``'s output shape: jax arrays of its dtype,
            or float64 numpy arrays with ``batched``.

        Raises:
            ValueError: if ``level`` is not in (0, 1) or ``of`` another word.

        References:
            Seber & Wild, *Nonlinear Regression*, 1989, §5.1 (delta method);
            Julier & Uhlmann, Proc. IEEE 92(3), 2004 (sigma points).
        """
        level = _check_level(level)
        z = _z(level)
        s_res = self.residual_sd(level, of)
        y, plus, minus, slope, cols = self._sigma_points(fn, z, batched)
        exact = self._exact_columns(cols)
        low, high = sigma_point_interval(y, plus, minus, slope, s_res, z, exact)
        if batched:
            return low, high
        return jnp.asarray(low, dtype=y.dtype), jnp.asarray(high, dtype=y.dtype)

    def interval_drivers(
        self, fn, level: float = 0.9, *, batched: bool = False, of: str = "steps"
    ) -> list[tuple[str, float]]:
        """What sets the high side of :meth:`interval`'s bound for a scalar prediction.

        Each column of the covariance's symmetric square root belongs to one
        leaf (it moves that leaf by its sd, and its correlated leaves with it);
        its share is up_i² over the high side's log-variance Σ up_j² + (z·s_res)²
        (:func:`sigma_point_interval`), named by the physical parameter of
        :meth:`parameter_table` that the leaf is the last term of (a regime's
        factor: the regime's α or β). The residual spread of the held-out
        microbenchmarks (or steps) is ``"held-out residual"``.

        Args:
            fn, level, batched, of: as :meth:`interval`; ``fn`` returns one
                value (shape () or (1,); (D,) or (D, 1) with ``batched``).

        Returns:
            ``[(name, share), …]``, shares in [0, 1] summing to 1 (empty when
            the interval has no width), largest first.

        Raises:
            ValueError: ``level`` or ``of`` as :meth:`interval`, or ``fn``
                returns more than one value.
        """
        level = _check_level(level)
        z = _z(level)
        s_res = self.residual_sd(level, of)
        y, plus, minus, slope, cols = self._sigma_points(fn, z, batched)
        if np.size(y) != 1:
            raise ValueError(f"interval_drivers: fn must return one value, got shape {np.shape(y)}")
        y = float(np.ravel(y)[0])
        if not (y > 0 and math.isfinite(y)):
            return []
        k = len(cols)
        exact = self._exact_columns(cols)
        up, _ = _sigma_sides(y, np.reshape(plus, (k,)), np.reshape(minus, (k,)),
                             np.reshape(slope, (k,)), z, exact)  # fmt: skip
        total = float(np.sum(up**2)) + (z * s_res) ** 2
        if total <= 0:
            return []
        names = self._leaf_quantity_names()
        shares: dict[str, float] = {}
        for i, u in zip(cols, up, strict=True):
            shares[names[i]] = shares.get(names[i], 0.0) + float(u) ** 2 / total
        if s_res > 0:
            shares["held-out residual"] = (z * s_res) ** 2 / total
        return sorted(shares.items(), key=lambda kv: -kv[1])

    def _exact_columns(self, cols) -> np.ndarray:
        """(k,) bool: the root's columns ``cols`` whose leaf only training steps inform
        (:data:`~calibration._layout.STEPS_ONLY_LEAVES`) and whose posterior is its
        prior, uncorrelated: no steps were fitted, so the Gaussian is the prior itself
        (exact at any distance)."""
        cov = self.covariance
        d = np.diag(cov)
        sd2 = self._prior_sd**2
        big = float(np.max(d)) if d.size else 0.0
        out = np.zeros(len(cols), dtype=bool)
        for j, i in enumerate(cols):
            if self.leaf_names[i] not in STEPS_ONLY_LEAVES:
                continue
            row = np.abs(np.delete(cov[i], i))
            out[j] = abs(d[i] - sd2[i]) <= 1e-6 * sd2[i] and bool(
                np.all(row <= 1e-9 * math.sqrt(max(d[i], 0.0) * big))
            )
        return out

    def _leaf_quantity_names(self) -> list[str]:
        """Leaf index → the :meth:`parameter_table` name whose last term it is."""
        names = list(self.leaf_names)
        for q in self._layout.quantities():
            nz = np.flatnonzero(q.coef)
            if nz.size:
                names[int(nz.max())] = q.name
        return names

    def _sigma_points(self, fn, z: float, batched: bool):
        """``(y, plus, minus, slope, cols)`` of :func:`sigma_point_interval` for ``fn``,
        numpy arrays; ``cols`` the leaf index of each direction."""
        root, cols = self._covariance_root()
        k = root.shape[1]
        if batched:
            theta = self.params.flat()
            tangents = root.T  # (k, P)
            scale = np.max(np.abs(tangents), axis=1) if k else np.zeros(0)
            h = 1e-4 / np.maximum(scale, 1e-30)
            step = h[:, None] * tangents
            thetas = np.concatenate(
                [
                    theta[None],
                    theta + step,
                    theta - step,
                    theta + z * tangents,
                    theta - z * tangents,
                ]
            )
            out = np.asarray(fn(self.params.from_flat(thetas)), dtype=np.float64)
            y = out[0]
            shape = (k,) + (1,) * y.ndim
            slope = (out[1 : 1 + k] - out[1 + k : 1 + 2 * k]) / (2.0 * h.reshape(shape))
            slope = np.where(scale.reshape(shape) > 0, slope, 0.0)
            return y, out[1 + 2 * k : 1 + 3 * k], out[1 + 3 * k :], slope, cols
        theta = self.theta
        layout = self._layout
        links = self.params.host_links

        def g(th):
            return jnp.asarray(fn(layout.unflatten(th, host_links=links)))

        y = g(theta)
        if not k:
            empty = np.zeros((0, *np.shape(y)))
            return y, empty, empty, empty, cols
        tangents = jnp.asarray(root.T, dtype=theta.dtype)
        slope = jax.vmap(lambda v: jax.jvp(g, (theta,), (v,))[1])(tangents)  # (k, *out)
        sides = np.asarray(
            jax.vmap(g)(jnp.concatenate([theta + z * tangents, theta - z * tangents]))
        )
        return y, sides[:k], sides[k:], np.asarray(slope), cols

    def _covariance_root(self) -> tuple[np.ndarray, np.ndarray]:
        """(P, k) columns of the covariance's symmetric square root Σ^½ = V·√Λ·Vᵀ (Σ = R Rᵀ),
        and the (k,) leaf index of each column.

        The symmetric root, not the eigenvectors themselves: it is unique and
        continuous in Σ, where eigenvectors of equal eigenvalues (the many
        parameters left at one prior sd) are any basis of their space, and sigma
        points along them would move with rounding. Column i moves leaf i by its
        sd and its correlated leaves with it. Columns of Σ's null space (zero)
        are dropped.
        """
        w, V = np.linalg.eigh(self.covariance)
        keep = w > w.max() * 1e-12 if w.size and w.max() > 0 else np.zeros_like(w, bool)
        root = (V[:, keep] * np.sqrt(w[keep])) @ V[:, keep].T
        norms = np.linalg.norm(root, axis=0)
        cols = np.flatnonzero(
            norms > (norms.max() * 1e-9 if norms.size and norms.max() > 0 else np.inf)
        )
        return root[:, cols], cols

    # ---- (de)serialisation ------------------------------------------------------
    def to_dict(self) -> dict:
        """The profile as a JSON-ready dict (schema v1, see the module docstring)."""
        table = self.parameter_table()
        return jsonable(
            {
                "schema": PROFILE_SCHEMA_VERSION,
                "kind": PROFILE_KIND,
                "reliable": self.reliable,
                "heldout_p90": self.heldout_p90,
                "warnings": self.warnings,
                "notes": self.notes,
                "params": self.params.to_dict(),
                "covariance": {"leaves": self.leaf_names, "matrix": self.covariance},
                "identified": {row["name"]: row["identified"] for row in table},
                "parameters": table,
                "measured_ranges": self.measured_ranges,
                "prior": self.prior,
                "fit": self.fit,
                "validation": self.validation,
                "provenance": self.provenance,
            }
        )

    def to_json(self) -> str:
        """The profile file's text (covariance rows one per line)."""
        doc = self.to_dict()
        matrix = doc["covariance"].pop("matrix")
        doc["covariance"]["matrix"] = "@@MATRIX@@"
        text = json.dumps(doc, indent=1, allow_nan=False)
        rows = ",\n   ".join(
            "[" + ", ".join(repr(float(f"{v:.12g}")) for v in row) + "]" for row in matrix
        )
        return text.replace('"@@MATRIX@@"', "[\n   " + rows + "\n  ]") + "\n"

    def save(self, path: str | os.PathLike, overwrite: bool = False) -> Path:
        """Write the profile atomically (temporary file + rename).

        Raises:
            FileExistsError: if ``path`` exists and ``overwrite`` is false.
        """
        return atomic_write_text(path, self.to_json(), overwrite=overwrite)

    @classmethod
    def load(cls, path: str | os.PathLike) -> Profile:
        """Read and validate a profile file.

        Raises:
            FileNotFoundError: if the file does not exist.
            InputFileError: naming the file (and the line for JSON syntax
                errors) when it is not JSON, not a ddltune profile, of an
                unknown schema version, lacks a key or holds invalid values.
        """
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:  # a PNG given as --profile (a new user's trial)
            raise InputFileError(
                str(path), None, "not a text file, so not a ddltune profile"
            ) from None
        if not text.strip():
            raise InputFileError(str(path), None, "the file is empty")
        try:
            doc = json.loads(text, parse_constant=_reject_constant)
        except json.JSONDecodeError as e:
            head = text[:4096]
            if e.msg == "Extra data" and '"kind": "step"' in head:  # validate's records
                raise InputFileError(
                    str(path), None,
                    "this is a file of training-step records (ddltune validate's), not a "
                    f"profile: fit them with 'ddltune calibrate MEASUREMENTS.jsonl --steps {path} "
                    "-o profile.json' (the microbenchmarks' records; or '--preset NETWORK "
                    "--device DEVICE' in their place) and give that as --profile",
                ) from None  # fmt: skip
            if e.msg == "Extra data" and '"schema"' in head and '"kind"' in head:
                raise InputFileError(
                    str(path), None,
                    "this is a file of measurement records (JSON Lines), not a profile: fit "
                    f"one first with 'ddltune calibrate {path} -o profile.json' and give that "
                    "as --profile",
                ) from None  # fmt: skip
            raise InputFileError(
                str(path), e.lineno, f"not valid JSON: {e.msg} (column {e.colno})"
            ) from None
        except ValueError as e:
            raise InputFileError(str(path), None, str(e)) from None
        try:
            return cls.from_dict(doc)
        except ValueError as e:
            raise InputFileError(str(path), None, str(e)) from None

    @classmethod
    def from_dict(cls, doc) -> Profile:
        """Inverse of :meth:`to_dict`.

        Raises:
            ValueError: naming what is missing or invalid.
        """
        _check_header(doc)
        try:
            params = ClusterParams.from_dict(doc["params"])
        except ValueError as e:
            raise ValueError(f"'params': {e}") from None
        layout = ParamLayout(params.n_regimes)
        cov = _with_new_leaves(_node_ratio_leaves(doc["covariance"]), layout)
        m = _read_covariance(cov, layout)
        if not isinstance(doc["reliable"], bool):
            raise ValueError(f"'reliable' must be true or false, got {doc['reliable']!r}")
        hp = doc.get("heldout_p90")
        if hp is not None and not (isinstance(hp, int | float) and hp >= 0):
            raise ValueError(f"'heldout_p90' must be a fraction ≥ 0 or null, got {hp!r}")
        if doc["reliable"] and hp is not None and hp > RELIABLE_P90_LIMIT:
            # a hand edit that would let the tuner trust what calibration refused
            raise ValueError(
                f"'reliable' is true but 'heldout_p90' {hp:.4g} is over the "
                f"{RELIABLE_P90_LIMIT:g} limit that makes a profile unreliable; set it to "
                "false (and use --force), or calibrate again"
            )
        mr = doc["measured_ranges"]
        _check_ranges(mr)
        for k in ("prior", "provenance"):
            if not isinstance(doc[k], dict):
                raise ValueError(f"'{k}' must be an object")
        profile = cls(
            params=params,
            covariance=m,
            leaf_names=layout.names,
            prior=doc["prior"],
            fit=doc.get("fit") or {},
            validation=doc.get("validation") or {},
            measured_ranges=mr,
            reliable=doc["reliable"],
            heldout_p90=math.nan if hp is None else float(hp),
            provenance=doc["provenance"],
            warnings=doc.get("warnings") or [],
            notes=doc.get("notes") or [],
        )
        _check_readable_copy(doc.get("parameters"), profile)
        return profile

    def __repr__(self) -> str:
        hp = "n/a" if math.isnan(self.heldout_p90) else f"{100 * self.heldout_p90:.1f}%"
        return (
            f"Profile(prior={self.prior.get('preset')!r}, n_regimes={self.params.n_regimes}, "
            f"reliable={self.reliable}, heldout_p90={hp})"
        )


def _check_readable_copy(rows, profile: Profile) -> None:
    """Refuse a hand edit of ``parameters``, the readable copy of ``params``.

    ``parameters`` (name, value, unit, interval) is written for people; the
    model reads ``params``. An edit of a value there alone would change nothing
    and go unnoticed (a new user's trial set an inter-node bandwidth negative
    there, and ``show``, ``predict`` and ``recommend`` used the old one), so a
    value that differs from what ``params`` gives is a ValueError naming both.
    Names this version does not know (another version's table) are skipped;
    an absent table is accepted.
    """
    if rows is None:
        return
    if not isinstance(rows, list):
        raise ValueError(f"'parameters' must be a list, got {type(rows).__name__}")
    have = {row["name"]: row["value"] for row in profile.parameter_table()}
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or not isinstance(row.get("name"), str):
            raise ValueError(f"'parameters'[{i}] must be an object with a 'name'")
        name, value = row["name"], row.get("value")
        if name not in have:
            continue
        want = have[name]
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if not ok or not math.isclose(value, want, rel_tol=1e-6, abs_tol=1e-12):
            raise ValueError(
                f"'parameters' gives {name} = {value!r}, but 'params' (what ddltune uses) "
                f"gives {want:.6g}: 'parameters' is only a readable copy; edit 'params' "
                "instead, or calibrate again"
            )


def _check_header(doc) -> None:
    """The profile's type, schema and required keys (ValueError naming what is wrong)."""
    if not isinstance(doc, dict):
        raise ValueError(f"expected a JSON object (a ddltune profile), got {type(doc).__name__}")
    if doc.get("kind") != PROFILE_KIND and "schema" not in doc:
        if is_recommendation(doc):
            inputs = doc.get("inputs") if isinstance(doc.get("inputs"), dict) else {}
            prof = inputs.get("profile")
            raise ValueError(
                f"this is {RECOMMENDATION_WORDS}, not a profile"
                + (f"; the profile it came from: {prof}" if isinstance(prof, str) else "")
            )
        raise ValueError("not a ddltune profile (no 'schema' and 'kind' keys)")
    if doc.get("schema") != PROFILE_SCHEMA_VERSION:
        raise ValueError(
            f"unknown profile schema version {doc.get('schema')!r}; this ddltune reads "
            f"schema {PROFILE_SCHEMA_VERSION} (re-run 'ddltune calibrate' to rebuild it)"
        )
    if doc.get("kind") != PROFILE_KIND:
        raise ValueError(f"not a ddltune profile: 'kind' is {doc.get('kind')!r}")
    missing = [k for k in _REQUIRED if k not in doc]
    if missing:
        raise ValueError(f"missing key(s) {', '.join(missing)}")


#: Standard deviation of a preset profile's log conv_efficiency (0.1%: see Profile.from_preset).
_PRESET_CONV_SD = 1e-3

#: Standard deviation of a preset profile's log flops_per_s: ln 2, from the evidence
#: (issue 23, item 4; ``benchmarks/prior_widths.py``). The presets' compute rate
#: (costmodel.device_flops_per_s, kind "cnn") against the 23 published single-GPU
#: steps of the shared tf_cnn_benchmarks tables (K80, P100; ResNet-50/152,
#: InceptionV3, VGG16, AlexNet): log errors of mean 0.39 and sd 0.50, the 90th
#: percentile of |log error| 1.16 (VGG16 and AlexNet run 3x the preset's CNN rate),
#: so a 90% interval of ±1.645·σ needs σ ≈ 0.7. The calibration prior (PRIOR_SD,
#: ln 4) stays a weak regulariser: a CPU preset misses a measured CPU by ×4.
PRESET_FLOPS_SD = math.log(2.0)


def preset_sd(layout: ParamLayout) -> np.ndarray:
    """(P,) standard deviations of θ for a preset profile (nothing measured).

    The calibration prior (:meth:`ParamLayout.prior_sd`, ``PRIOR_SD``) except
    these, set from the evidence: log ``flops_per_s`` at
    :data:`PRESET_FLOPS_SD` (ln 2), and log ``conv_efficiency``,
    ``conv_backward_efficiency`` and ``gemm_half_dim`` at 0.1% —
    a preset's ``flops_per_s`` is already the rate of the model's kind (a
    CNN's, :func:`costmodel.device_flops_per_s`), so a CNN's interval must not
    count the compute spread twice — and log ``head_start_bytes`` (both levels)
    at 0.1%: a datasheet link (α + S·β) has no shaper's burst; and log
    ``all_to_all_congestion_cap`` at 0.1%: a preset's congestion (n−1)ᵉ has no
    ceiling; and log ``cache_bytes`` and ``cache_excess`` at 0.1%: a datasheet
    link's bytes all cost β. Calibration keeps ``PRIOR_SD`` (×4 on both), a weak regulariser that
    measurements override.
    """
    sd = layout.prior_sd()
    sd[layout.slices["log_conv_efficiency"]] = _PRESET_CONV_SD
    sd[layout.slices["log_conv_backward_efficiency"]] = _PRESET_CONV_SD
    sd[layout.slices["log_gemm_half"]] = _PRESET_CONV_SD
    sd[layout.slices["log_head_start"]] = _PRESET_CONV_SD
    sd[layout.slices["log_all_to_all_cap"]] = _PRESET_CONV_SD
    sd[layout.slices["log_cache_bytes"]] = _PRESET_CONV_SD
    sd[layout.slices["log_cache_excess"]] = _PRESET_CONV_SD
    sd[layout.slices["log_flops"]] = PRESET_FLOPS_SD
    return sd


#: Leaves added after profiles were first written: a file without them gets each
#: at its prior variance, uncorrelated (its value comes from ClusterParams.from_dict's
#: default, which leaves every prediction as the file's ddltune made it).
_NEW_LEAVES = (
    "log_step_comm",
    "logit_backward_hide",
    "log_conv_efficiency",
    "log_conv_backward_efficiency",
    "logit_latency_overlap",
    "log_gemm_half",
    "log_head_start",
    "log_all_to_all_cap",
    "log_cache_bytes",
    "log_cache_excess",
)


def _node_ratio_leaves(cov):
    """``cov`` of a file written before the node cap became a ratio to β, translated.

    Such files name ``log_node_beta[LEVEL]`` (log β_node); the leaf is now
    ``log_node_ratio[LEVEL]`` = log β_node − log β, a linear map A of θ, so the
    covariance becomes A Σ Aᵀ exactly. Anything else is returned as it is.
    """
    if not isinstance(cov, dict) or not isinstance(cov.get("leaves"), list):
        return cov
    names = [str(n) for n in cov["leaves"]]
    old = [i for i, n in enumerate(names) if n.startswith("log_node_beta[")]
    if not old:
        return cov
    try:
        m = np.asarray(cov["matrix"], dtype=np.float64)
        if m.shape != (len(names), len(names)):
            return cov
        A = np.eye(len(names))
        for i in old:
            A[i, names.index("log_beta" + names[i][len("log_node_beta") :])] = -1.0
    except (TypeError, ValueError):
        return cov
    new = [n.replace("log_node_beta[", "log_node_ratio[", 1) for n in names]
    return {"leaves": new, "matrix": (A @ m @ A.T).tolist()}


def _with_new_leaves(cov, layout: ParamLayout):
    """``cov`` with the leaves of :data:`_NEW_LEAVES` it lacks added (prior variance, uncorrelated).

    Anything else that differs from the layout is left for :func:`_read_covariance`
    to report.
    """
    if not isinstance(cov, dict) or not isinstance(cov.get("leaves"), list):
        return cov
    names = list(cov["leaves"])
    missing = [n for n in layout.names if n not in names]
    if not missing or any(n.split("[")[0] not in _NEW_LEAVES for n in missing):
        return cov
    if [n for n in layout.names if n in names] != names:
        return cov
    try:
        m = np.asarray(cov["matrix"], dtype=np.float64)
    except (TypeError, ValueError):
        return cov
    if m.shape != (len(names), len(names)):
        return cov
    pos = [layout.names.index(n) for n in names]
    big = np.diag(layout.prior_sd() ** 2)
    big[np.ix_(pos, pos)] = m
    return {"leaves": layout.names, "matrix": big.tolist()}


def _read_covariance(cov, layout: ParamLayout) -> np.ndarray:
    """The (P, P) covariance of a profile file, checked against the layout's leaves."""
    if not isinstance(cov, dict) or "leaves" not in cov or "matrix" not in cov:
        raise ValueError("'covariance' must be an object with 'leaves' and 'matrix'")
    if list(cov["leaves"]) != layout.names:
        raise ValueError(
            f"'covariance.leaves' do not match the parameters ({len(cov['leaves'])} names, "
            f"expected {layout.size} for {layout.n_regimes} regime(s))"
        )
    try:
        m = np.asarray(cov["matrix"], dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError("'covariance.matrix' must be a square array of numbers") from None
    if m.shape != (layout.size, layout.size):
        raise ValueError(
            f"'covariance.matrix' must be {layout.size}×{layout.size}, got shape {m.shape}"
        )
    if not np.all(np.isfinite(m)):
        raise ValueError("'covariance.matrix' holds non-finite values")
    if np.any(np.diag(m) < 0) or not np.allclose(m, m.T, rtol=1e-6, atol=1e-12):
        raise ValueError(
            "'covariance.matrix' is not a covariance (asymmetric or negative variance)"
        )
    w = np.linalg.eigvalsh(0.5 * (m + m.T))
    if w.size and w[0] < -1e-8 * max(float(np.max(np.abs(w))), 1e-300):
        raise ValueError(
            "'covariance.matrix' is not a covariance: not positive semi-definite (smallest "
            f"eigenvalue {w[0]:.3g}, largest {w[-1]:.3g}); an edited entry makes two "
            "parameters more correlated than ±1"
        )
    return m


def _check_ranges(mr) -> None:
    """``measured_ranges``: [min, max] or [] per range key, a list of collectives."""
    if not isinstance(mr, dict):
        raise ValueError("'measured_ranges' must be an object")
    for k in _RANGE_KEYS:
        v = mr.get(k)
        if (
            not isinstance(v, list)
            or len(v) not in (0, 2)
            or not all(isinstance(x, int | float) and x >= 0 for x in v)
        ):
            raise ValueError(f"'measured_ranges.{k}' must be [min, max] or [], got {v!r}")
        if len(v) == 2 and v[0] > v[1]:
            raise ValueError(f"'measured_ranges.{k}' has min > max: {v!r}")
    if not isinstance(mr.get("collectives"), list):
        raise ValueError("'measured_ranges.collectives' must be a list")


def _reject_constant(name: str):
    raise ValueError(f"{name} is not a valid number in a profile")
