"""What the tuner needs of a profile, for a fitted :class:`calibration.Profile` or bare parameters.

The tuner reads a profile through a small interface: ``params``
(:class:`costmodel.ClusterParams`), ``interval(fn, level)`` (a prediction
interval for any function of the parameters), ``reliable``, ``heldout_p90``,
``measured_ranges``, ``identified`` and ``covariance`` (of the flattened
unconstrained parameter leaves, in :func:`jax.flatten_util.ravel_pytree`
order). Bare :class:`~costmodel.ClusterParams` are wrapped by
:class:`BareProfile`: no covariance, so every interval is the point prediction.

Parameter draws for the probability that a choice is the best
(:func:`parameter_draws`) are θ = θ̂ + A·z, z ~ N(0, I), with A a square root of
the covariance (its Cholesky factor when it is positive definite, else the
symmetric eigen-decomposition's V·√max(λ, 0)).
"""

from __future__ import annotations

import math

import numpy as np

from costmodel import ClusterParams

__all__ = ["BareProfile", "ScaledProfile", "as_profile", "flat_covariance", "parameter_draws"]


class BareProfile:
    """The profile interface for bare parameters: no covariance, no measurements.

    Attributes:
        params: the :class:`costmodel.ClusterParams`.
        reliable: True (nothing to judge it by).
        heldout_p90: NaN (no held-out data).
        measured_ranges: ``{}`` (nothing measured).
        identified: ``{}``.
        covariance: ``None``.
        provenance: ``{"source": "bare ClusterParams"}``.
    """

    bare = True

    def __init__(self, params: ClusterParams):
        self.params = params
        self.reliable = True
        self.heldout_p90 = float("nan")
        self.measured_ranges: dict = {}
        self.identified: dict = {}
        self.covariance = None
        self.provenance = {"source": "bare ClusterParams"}

    def interval(self, fn, level: float = 0.9, *, batched: bool = False, of: str = "steps"):
        """The point prediction twice: without a covariance there is no spread.

        ``batched``: ``fn`` takes a batch of one numpy parameter set (as
        :meth:`calibration.Profile.interval`) and returns (1, *out); ``of``
        is accepted as there and changes nothing.
        """
        if batched:
            v = np.asarray(fn(self.params.from_flat(self.params.flat()[None])), np.float64)[0]
        else:
            v = np.asarray(fn(self.params), dtype=np.float64)
        return v, v.copy()


class ScaledProfile:
    """A profile whose parameters are another's with physical factors applied (what-if).

    Scaling multiplies positive parameters, i.e. shifts their log-stored leaves
    by constants, so the covariance of the leaves is unchanged; intervals are
    the base profile's intervals of ``fn ∘ scale``.

    Args:
        base: a profile (or :class:`BareProfile`).
        changes: factors for :meth:`costmodel.ClusterParams.scaled`.
    """

    def __init__(self, base, changes: dict):
        self.base = base
        self.changes = dict(changes)
        self.params = base.params.scaled(**self.changes)
        for name in ("reliable", "heldout_p90", "measured_ranges", "identified", "covariance"):
            setattr(self, name, getattr(base, name, None))
        self.provenance = {"base": getattr(base, "provenance", None), "scaled": self.changes}
        self.bare = getattr(base, "bare", False)

    def interval(self, fn, level: float = 0.9, *, batched: bool = False, of: str = "steps"):
        """The base profile's interval of ``fn`` applied to the scaled parameters."""
        changes = self.changes
        return self.base.interval(lambda p: fn(p.scaled(**changes)), level, batched=batched, of=of)


def as_profile(profile):
    """Wrap bare :class:`ClusterParams`; pass a profile through.

    Raises:
        TypeError: when ``profile`` is neither a profile (an object with
            ``params`` and ``interval``) nor :class:`ClusterParams`.
    """
    if isinstance(profile, ClusterParams):
        return BareProfile(profile)
    if isinstance(getattr(profile, "params", None), ClusterParams) and callable(
        getattr(profile, "interval", None)
    ):
        return profile
    raise TypeError(
        "profile must be a calibration.Profile (Profile.load(path) or Profile.from_preset(...)) "
        f"or costmodel.ClusterParams, got {type(profile).__name__}"
    )


def flat_covariance(profile) -> np.ndarray | None:
    """The covariance of the flattened parameter leaves as a (P, P) array, or None.

    ``None`` when the profile has none or its shape does not match the leaves.
    """
    cov = getattr(profile, "covariance", None)
    if cov is None:
        return None
    if hasattr(cov, "matrix"):  # a covariance object carrying its matrix
        cov = cov.matrix
    try:
        cov = np.asarray(cov, dtype=np.float64)
    except (TypeError, ValueError):
        return None
    p = int(profile.params.flat().size)
    if cov.shape != (p, p) or not np.all(np.isfinite(cov)):
        return None
    return 0.5 * (cov + cov.T)


def _sqrt_factor(cov: np.ndarray) -> np.ndarray:
    try:
        return np.linalg.cholesky(cov)
    except np.linalg.LinAlgError:
        w, v = np.linalg.eigh(cov)
        return v * np.sqrt(np.maximum(w, 0.0))


def parameter_draws(profile, num: int = 200, seed: int = 0):
    """``num`` parameter sets drawn from the profile's covariance, stacked, nominal first.

    Args:
        profile: a profile with ``params`` and ``covariance`` (see module doc).
        num: number of random draws, ≥ 1.
        seed: seed of numpy's default generator (draws are reproducible).

    Returns:
        ``(stacked, ok)``: a :class:`ClusterParams` of float64 numpy leaves
        whose leading axis has length ``num + 1`` (index 0 = the nominal
        parameters; the batched form of :meth:`ClusterParams.from_flat`, so
        the cost model evaluates every draw in one numpy call), and whether a
        usable covariance was found (if not, every draw is nominal).
    """
    flat = profile.params.flat()
    cov = flat_covariance(profile)
    ok = cov is not None and bool(np.any(np.diag(cov) > 0))
    if ok:
        z = np.random.default_rng(seed).standard_normal((num, flat.size))
        draws = flat[None, :] + z @ _sqrt_factor(cov).T
    else:
        draws = np.repeat(flat[None, :], num, axis=0)
    allv = np.concatenate([flat[None, :], draws])
    return profile.params.from_flat(allv), ok


def takes_batched(profile) -> bool:
    """Whether ``profile.interval`` accepts ``batched=True`` (the numpy evaluation).

    :class:`calibration.Profile`, :class:`BareProfile` and :class:`ScaledProfile`
    do; a user's own profile object with ``interval(fn, level)`` gets the
    jax-traceable path.
    """
    import inspect

    try:
        return "batched" in inspect.signature(profile.interval).parameters
    except (TypeError, ValueError):
        return False


def heldout_p90(profile) -> float:
    """The profile's held-out p90 absolute relative error (NaN when unknown)."""
    v = getattr(profile, "heldout_p90", float("nan"))
    try:
        v = float(v)
    except (TypeError, ValueError):
        return float("nan")
    return v if math.isfinite(v) else float("nan")
