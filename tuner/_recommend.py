"""Recommend an architecture, worker count and bucket size: :func:`recommend`.

The search (see :mod:`tuner._search`) evaluates every configuration exactly
with :func:`costmodel.iteration_time`; the objective picks one; the bucket
size of the leading configurations is refined continuously; the choice gets a
prediction interval from the profile, the probability that it really beats the
best other architecture, a plain-words rationale and warnings.

References:
    Alqahtani & Demirbas, "Performance Analysis and Comparison of Distributed
    Machine Learning Systems", arXiv 1909.02061 (PS, 1PS, P2P, ring all-reduce);
    Li et al., VLDB 2020 (DDP buckets); Sergeev & Del Balso, arXiv 1802.05799.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from calibration import RELIABLE_P90_LIMIT, STEPS_ONLY_PARAMETERS
from costmodel import (
    Breakdown,
    Workload,
    format_bytes,
    format_choices,
    format_first,
    format_seconds,
    get_architecture,
)

from ._format import format_percent, format_range
from ._predict import bucket_size_warnings, node_capacity_note, unmeasured_network_warning
from ._search import (
    Sweep,
    TimeSpec,
    Variant,
    bucket_grid,
    evaluate,
    memory_need,
    refine_bucket,
    resolve_variants,
    spec_times,
    spec_times_draws,
    spec_times_fd,
    spec_times_jit,
    sweep,
    worker_grid,
)
from ._uncertainty import (
    as_profile,
    flat_covariance,
    heldout_p90,
    parameter_draws,
    takes_batched,
)

__all__ = [
    "OBJECTIVES",
    "Configuration",
    "Curve",
    "Recommendation",
    "UnreliableProfileError",
    "InfeasibleError",
    "recommend",
]

#: Objectives :func:`recommend` accepts.
OBJECTIVES = ("throughput", "cost", "efficiency", "min-workers")

#: Random parameter draws for :attr:`Recommendation.p_best`.
P_BEST_DRAWS = 200

#: Collectives (as named in profiles' measured ranges) each architecture relies on.
_COLLECTIVES_USED = {
    "ps": ("ps_push", "ps_pull"),
    "ps_host": ("ps_push", "ps_pull"),
    "hybrid": ("all_reduce", "ps_push", "ps_pull", "broadcast"),
    "p2p": ("all_to_all", "all_gather"),
    "ring": ("all_reduce",),
    "tree": ("all_reduce",),
    "hierarchical": ("all_reduce",),
    "zero1": ("all_reduce", "all_gather"),
    "zero2": ("reduce_scatter", "all_gather"),
    "fsdp": ("all_gather", "reduce_scatter"),
    "hsdp": ("all_gather", "reduce_scatter", "all_reduce"),
}


def _collectives_used(chosen: _Row, g: int) -> tuple[str, ...]:
    """The collectives whose fitted rows predict ``chosen`` (:data:`_COLLECTIVES_USED`),
    with ``sendrecv`` where its servers on workers send and receive at once
    (``AbstractArchitecture.servers_send_and_receive``)."""
    used = _COLLECTIVES_USED[chosen.variant.name]
    arch = get_architecture(chosen.variant.name, colocated=chosen.variant.colocated)
    both = arch.servers_send_and_receive(float(chosen.n), float(g), float(chosen.k))
    return (*used, "sendrecv") if bool(both) else used


#: Sharded data parallelism (each rank holds a shard of the model states).
_SHARDED = ("zero1", "zero2", "fsdp", "hsdp")

#: Machinery of each architecture, least first, for ties (:func:`_prefer_simpler`):
#: an all-reduce of replicas (DDP, Horovod); peer-to-peer, servers on the workers or
#: ZeRO-1's sharded optimizer (DDP + ``ZeroRedundancyOptimizer``: the same shard
#: exchange as p2p); dedicated servers; ZeRO-2's sharded gradients; FSDP/HSDP's
#: sharded parameters, gathered again every step. Within a level the faster wins.
MACHINERY = {
    "ring": 0,
    "tree": 0,
    "hierarchical": 0,
    "p2p": 1,
    "ps_host": 1,
    "zero1": 1,
    "hybrid": 2,
    "ps": 2,
    "zero2": 3,
    "fsdp": 4,
    "hsdp": 4,
}

#: Below this relative difference of the objective, two configurations tie even when
#: the profile has no intervals (bare parameters, presets): "practically as fast".
TIE_TOLERANCE = 0.005


class UnreliableProfileError(ValueError):
    """The profile's held-out error is over the calibration's limit; pass ``force=True``."""


class InfeasibleError(ValueError):
    """No configuration meets the constraints.

    Attributes:
        recommendation: the :class:`Recommendation` with ``status ==
            "infeasible"``, its configuration the best that is possible.
    """

    def __init__(self, message: str, recommendation: Recommendation):
        super().__init__(message)
        self.recommendation = recommendation


@dataclass(frozen=True)
class Configuration:
    """One evaluated configuration (SI units).

    Attributes:
        architecture: name in :data:`costmodel.ARCHITECTURE_NAMES`.
        colocated: ``ps`` servers on workers (False for dedicated machines and
            other architectures).
        servers: parameter servers k (0 for architectures without servers).
        workers: n.
        ranks_per_node: g, the ranks a node holds (a job of fewer workers runs
            on one node).
        bucket_bytes: gradient bucket cap, bytes (0 = one collective per tensor).
        batch_size: samples each worker computes per step.
        iteration_time_s: predicted step time, s.
        interval_s: (low, high) 90% prediction interval of the step time, s.
        throughput_samples_per_s: samples per second over all workers.
        scaling_efficiency: throughput / (n × single-worker throughput), in (0, 1].
        cost_per_sample: price per sample (the prices' currency), or None
            without prices.
        breakdown: :meth:`costmodel.Breakdown.to_dict` of this configuration.
        refined: the bucket size came from the continuous refinement.
        memory_bytes_per_rank: device memory a worker rank needs (model states,
            buffers: :func:`costmodel.memory_per_rank`), bytes; None if unknown.
    """

    architecture: str
    colocated: bool
    servers: int
    workers: int
    ranks_per_node: int
    bucket_bytes: int
    batch_size: float
    iteration_time_s: float
    interval_s: tuple[float, float]
    throughput_samples_per_s: float
    scaling_efficiency: float
    cost_per_sample: float | None
    breakdown: dict = field(repr=False)
    refined: bool = False
    memory_bytes_per_rank: float | None = None

    @property
    def variant(self) -> Variant:
        """The architecture variant."""
        return Variant(self.architecture, self.colocated)

    @property
    def label(self) -> str:
        """``ring``, ``ps (dedicated)``, …"""
        return self.variant.label

    def describe(self) -> str:
        """One line: architecture, servers, workers, bucket size.

        Example:
            >>> c = Configuration("ring", False, 0, 8, 1, 25 * 2**20, 64.0, 0.1, (0.1, 0.1),
            ...                   5120.0, 0.9, None, {})
            >>> c.describe()
            'ring, 8 workers, 25 MiB buckets'
            >>> import dataclasses
            >>> dataclasses.replace(c, bucket_bytes=2**27, breakdown={"num_buckets": 1}).describe()
            'ring, 8 workers, one bucket (cap 128 MiB)'
            >>> dataclasses.replace(c, workers=1).describe()
            '1 worker, no gradient exchange'
        """
        if self.workers == 1:  # every architecture and bucket is the same step
            return "1 worker, no gradient exchange"
        parts = [self.label]
        if self.servers:
            parts.append(f"{self.servers} server{'s' if self.servers != 1 else ''}")
        parts.append(f"{self.workers} worker{'s' if self.workers != 1 else ''}")
        if self.workers < self.ranks_per_node:
            parts[-1] += " (on one node)"
        elif self.ranks_per_node > 1:
            parts[-1] += f" ({self.ranks_per_node} per node)"
        buckets = (self.breakdown or {}).get("num_buckets")
        if not self.uses_bucket_bytes:
            parts.append("one FSDP unit per layer block")
        elif self.bucket_bytes == 0:
            parts.append("one collective per tensor")
        elif buckets is not None and buckets <= 1:  # a cap above the gradient: one bucket
            parts.append(f"one bucket (cap {format_bytes(self.bucket_bytes)})")
        else:
            parts.append(f"{format_bytes(self.bucket_bytes)} buckets")
        return ", ".join(parts)

    @property
    def uses_bucket_bytes(self) -> bool:
        """Whether the bucket cap is a setting of this configuration (not of block-wrapped fsdp/hsdp)."""
        return bool(getattr(self.variant.arch, "uses_bucket_bytes", True))

    def to_dict(self) -> dict:
        """JSON-ready dict with the keys of :meth:`Recommendation.to_dict` for one configuration."""
        return {
            "architecture": self.architecture,
            "label": self.label,
            "servers": int(self.servers),
            "colocated": bool(self.colocated),
            "workers": int(self.workers),
            "ranks_per_node": int(self.ranks_per_node),
            "bucket_bytes": int(self.bucket_bytes),
            "batch_size": float(self.batch_size),
            "iteration_time_s": float(self.iteration_time_s),
            "interval_s": [float(self.interval_s[0]), float(self.interval_s[1])],
            "throughput_samples_per_s": float(self.throughput_samples_per_s),
            "scaling_efficiency": float(self.scaling_efficiency),
            "cost_per_sample": None
            if self.cost_per_sample is None
            else float(self.cost_per_sample),
            "breakdown": dict(self.breakdown),
            "refined": bool(self.refined),
            "memory_bytes_per_rank": None
            if self.memory_bytes_per_rank is None
            else float(self.memory_bytes_per_rank),
        }


@dataclass(frozen=True)
class Curve:
    """Per worker count, the best configuration of one architecture variant.

    All arrays have shape (W,), one entry per worker count that has a
    configuration fitting in memory; intervals at the requested level.

    Attributes:
        label: the variant's label.
        workers, servers, bucket_bytes: the configuration at each worker count.
        iteration_s, low_s, high_s: predicted step time and its interval, s.
        throughput, throughput_low, throughput_high: samples/s and its interval.
        efficiency: scaling efficiency.
        level: the interval's level.
    """

    label: str
    workers: np.ndarray
    servers: np.ndarray
    bucket_bytes: np.ndarray
    iteration_s: np.ndarray
    low_s: np.ndarray
    high_s: np.ndarray
    throughput: np.ndarray
    throughput_low: np.ndarray
    throughput_high: np.ndarray
    efficiency: np.ndarray
    level: float

    def to_dict(self) -> dict:
        """Plain lists."""
        out = {"label": self.label, "level": self.level}
        for k in (
            "workers",
            "servers",
            "bucket_bytes",
            "iteration_s",
            "low_s",
            "high_s",
            "throughput",
            "throughput_low",
            "throughput_high",
            "efficiency",
        ):
            out[k] = np.asarray(getattr(self, k)).tolist()
        return out


@dataclass(frozen=True)
class _Context:
    profile: object
    workload: Workload
    ranks_per_node: int
    global_batch: int | None


@dataclass(frozen=True)
class Recommendation:
    """The tuner's answer.

    Attributes:
        config: the chosen :class:`Configuration`.
        alternatives: up to 5 runner-ups: the best of each other architecture
            variant first (best first), then the next-best configurations.
        p_best: probability, under the profile's parameter uncertainty, that
            the chosen configuration scores better on the objective than the
            best configuration of the runner-up architecture variant (both
            held at their nominal configurations): 200 parameter draws
            θ = θ̂ + A·z from the covariance of the flattened unconstrained
            leaves (A its Cholesky factor), wins counted (ties half). NaN when
            the profile has no covariance or there is no other architecture.
        rationale: plain words: what bounds the choice (compute, bandwidth,
            latency, server congestion, memory) and why it wins.
        warnings: extrapolation beyond measured ranges, unreliable profile,
            memory exclusions, missing covariance.
        reliable: False when the profile's held-out error is over the limit
            (only with ``force=True``).
        objective: the objective used.
        status: ``"ok"``, or ``"infeasible"`` (then ``config`` is the best
            possible and ``message`` says what could not be met).
        message: a human summary of the status.
        excluded: configurations excluded for memory, by reason
            (``worker_memory``, ``server_memory``), and ``total`` searched.
        sweeps: label → :class:`tuner.Sweep`, every configuration searched
            (flat arrays workers, servers, bucket_bytes, iteration_s,
            throughput, efficiency, feasible); not in :meth:`to_dict` unless asked.
    """

    config: Configuration
    alternatives: tuple[Configuration, ...]
    p_best: float
    rationale: str
    warnings: tuple[str, ...]
    reliable: bool
    objective: str
    status: str
    message: str
    excluded: Mapping[str, int]
    sweeps: Mapping[str, Sweep] = field(repr=False, compare=False)
    _context: _Context | None = field(default=None, repr=False, compare=False)

    # --- the chosen configuration's fields, for convenience --------------------
    architecture = property(lambda self: self.config.architecture, doc="Chosen architecture.")
    servers = property(lambda self: self.config.servers, doc="Chosen server count (0: none).")
    colocated = property(lambda self: self.config.colocated, doc="Chosen ps placement.")
    workers = property(lambda self: self.config.workers, doc="Chosen worker count.")
    ranks_per_node = property(lambda self: self.config.ranks_per_node, doc="Ranks per node.")
    bucket_bytes = property(lambda self: self.config.bucket_bytes, doc="Chosen bucket cap, bytes.")
    iteration_time_s = property(lambda self: self.config.iteration_time_s, doc="Step time, s.")
    interval_s = property(lambda self: self.config.interval_s, doc="90% interval, s.")
    throughput_samples_per_s = property(
        lambda self: self.config.throughput_samples_per_s, doc="Samples/s."
    )
    scaling_efficiency = property(lambda self: self.config.scaling_efficiency, doc="Efficiency.")
    breakdown = property(lambda self: self.config.breakdown, doc="Breakdown dict.")
    label = property(lambda self: self.config.label, doc="Chosen variant's label.")

    def to_dict(self, *, include_sweeps: bool = False) -> dict:
        """One JSON-ready document.

        Keys: ``architecture``, ``label``, ``servers``, ``colocated``,
        ``workers``, ``ranks_per_node``, ``bucket_bytes``, ``batch_size``,
        ``iteration_time_s``, ``interval_s`` ([low, high]),
        ``throughput_samples_per_s``, ``scaling_efficiency``,
        ``cost_per_sample``, ``breakdown``, ``refined``, ``alternatives``
        (list of dicts with the configuration keys), ``p_best`` (None when
        NaN), ``rationale``, ``warnings``, ``reliable``, ``objective``,
        ``status``, ``message``, ``excluded``; with ``include_sweeps`` also
        ``sweeps`` (label → :meth:`Sweep.to_dict`).
        """
        out = self.config.to_dict()
        out.update(
            alternatives=[a.to_dict() for a in self.alternatives],
            p_best=None if not math.isfinite(self.p_best) else float(self.p_best),
            rationale=self.rationale,
            warnings=list(self.warnings),
            reliable=bool(self.reliable),
            objective=self.objective,
            status=self.status,
            message=self.message,
            excluded=dict(self.excluded),
        )
        if include_sweeps:
            out["sweeps"] = {k: s.to_dict() for k, s in self.sweeps.items()}
        return out

    def curve(self, label: str, level: float = 0.9) -> Curve:
        """Per worker count, the fastest configuration of one variant that fits in memory.

        For the report's plots of iteration time and throughput vs workers
        with bands. Configurations are the grid's (not refined); intervals
        come from the profile (a point for bare parameters). For every
        variant at once (one interval computation), use :meth:`curves`.

        Args:
            label: a key of :attr:`sweeps` (``"ring"``, ``"ps (dedicated)"``, …).
            level: interval level in (0, 1).

        Raises:
            ValueError: on an unknown label (listing the valid ones) or level.
        """
        if label not in self.sweeps:
            raise ValueError(
                f"unknown architecture label {label!r}; valid: {format_choices(self.sweeps, label)}"
            )
        return self.curves(level, labels=[label])[label]

    def curves(self, level: float = 0.9, labels=None) -> dict[str, Curve]:
        """:meth:`curve` for several variants (default all), with one interval computation.

        Variants with no configuration that fits in memory are left out.

        Raises:
            ValueError: on an unknown label or a level outside (0, 1).
        """
        if not 0.0 < level < 1.0:
            raise ValueError(f"level must be in (0, 1), got {level!r}")
        labels = list(self.sweeps) if labels is None else list(labels)
        for label in labels:
            if label not in self.sweeps:
                raise ValueError(
                    f"unknown architecture label {label!r}; valid: {format_choices(self.sweeps, label)}"
                )
        ctx = self._context
        picked, spec_rows, nominal = [], [], []
        for label in labels:
            sw = self.sweeps[label]
            t = sw.iteration_s
            idx = np.flatnonzero(sw.feasible & np.isfinite(t))
            order = idx[np.lexsort((t[idx], sw.workers[idx]))]
            _, first = np.unique(sw.workers[order], return_index=True)
            rows = order[first]
            picked.append((label, sw, rows))
            for i in rows:
                base = float(ctx.global_batch) if ctx.global_batch else sw.batch_size[i]
                spec_rows.append(
                    (
                        sw.variant,
                        sw.workers[i],
                        max(sw.servers[i], 1),
                        sw.bucket_bytes[i],
                        sw.batch_size[i],
                        base,
                    )
                )
            nominal.append(t[rows])
        if spec_rows:
            lo_all, hi_all = _intervals(ctx, spec_rows, level, np.concatenate(nominal))
        out, at = {}, 0
        for label, sw, rows in picked:
            m = rows.size
            if m == 0:
                continue
            lo, hi = lo_all[at : at + m], hi_all[at : at + m]
            at += m
            t = sw.iteration_s[rows]
            thr = sw.throughput[rows]
            scale = thr * t  # samples per step
            out[label] = Curve(
                label,
                sw.workers[rows],
                sw.servers[rows],
                sw.bucket_bytes[rows],
                t,
                lo,
                hi,
                thr,
                scale / hi,
                scale / lo,
                sw.efficiency[rows],
                float(level),
            )
        return out

    def bucket_curve(self, label: str | None = None, workers: int | None = None) -> dict:
        """Iteration time vs bucket cap for one architecture and worker count (grid points).

        Args:
            label: variant label; default the chosen one.
            workers: worker count; default the chosen one (for variants with
                servers, the best server count at each cap is taken).

        Returns:
            ``{"label", "workers", "bucket_bytes": [...], "iteration_s": [...],
            "servers": [...]}``.

        Raises:
            ValueError: unknown label or a worker count not searched.
        """
        label = self.config.label if label is None else label
        if label not in self.sweeps:
            raise ValueError(
                f"unknown architecture label {label!r}; valid: {format_choices(self.sweeps, label)}"
            )
        n = self.config.workers if workers is None else int(workers)
        sw = self.sweeps[label]
        sel = np.flatnonzero(sw.workers == n)
        if sel.size == 0:
            raise ValueError(f"{n} workers were not searched for {label!r}")
        caps = np.unique(sw.bucket_bytes[sel])
        times, servers = [], []
        for c in caps:
            rows = sel[sw.bucket_bytes[sel] == c]
            j = rows[np.argmin(sw.iteration_s[rows])]
            times.append(float(sw.iteration_s[j]))
            servers.append(int(sw.servers[j]))
        return {
            "label": label,
            "workers": n,
            "bucket_bytes": caps.tolist(),
            "iteration_s": times,
            "servers": servers,
        }


# ---------------------------------------------------------------------------
# Input checks
# ---------------------------------------------------------------------------
def _check_objective(objective: str) -> str:
    key = str(objective).strip().lower().replace("_", "-")
    if key not in OBJECTIVES:
        raise ValueError(
            f"unknown objective {objective!r}; valid: {', '.join(OBJECTIVES)} (--objective)"
        )
    return key


def _positive(name: str, value, flag: str, *, allow_none=True, upper=None) -> float | None:
    if value is None:
        if allow_none:
            return None
        raise ValueError(f"{name} is required ({flag})")
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r} ({flag})") from None
    if not math.isfinite(v) or v <= 0 or (upper is not None and v > upper):
        rng = f"in (0, {upper:g}]" if upper is not None else "finite and > 0"
        raise ValueError(f"{name} must be {rng}, got {value!r} ({flag})")
    return v


# ---------------------------------------------------------------------------
# Scores
# ---------------------------------------------------------------------------
class _Scorer:
    """The objective as a key to minimise, plus constraints."""

    def __init__(
        self,
        objective,
        price,
        server_price,
        min_efficiency,
        target_throughput,
    ):
        self.objective = objective
        self.price = price
        self.server_price = server_price
        self.min_efficiency = min_efficiency
        self.target = target_throughput

    def cost(self, variant: Variant, n, k, thr):
        """Price per sample, or None without the prices it needs."""
        if self.price is None or (variant.dedicated_servers and self.server_price is None):
            return None
        rate = np.asarray(n, dtype=np.float64) * self.price
        if variant.dedicated_servers:
            rate = rate + np.asarray(k, dtype=np.float64) * (self.server_price or 0.0)
        return rate / 3600.0 / np.asarray(thr, dtype=np.float64)

    def constraints(self, thr, eff) -> np.ndarray:
        ok = np.isfinite(thr)
        if self.min_efficiency is not None:
            ok &= eff >= self.min_efficiency - 1e-12
        if self.target is not None:
            ok &= thr >= self.target * (1 - 1e-12)
        return ok

    def key(self, variant: Variant, n, k, thr) -> np.ndarray:
        """Lower is better: a (N, 2) array of (primary, secondary) keys."""
        thr = np.asarray(thr, dtype=np.float64)
        n = np.asarray(n, dtype=np.float64)
        if self.objective == "cost":
            return np.stack([self.cost(variant, n, k, thr), -thr], axis=-1)
        if self.objective == "min-workers":
            return np.stack([n, -thr], axis=-1)
        return np.stack([-thr, n], axis=-1)


def _argbest(keys: np.ndarray) -> int:
    """Row with the lexicographically smallest (primary, secondary) key (first on ties)."""
    return int(np.lexsort((np.arange(len(keys)), keys[:, 1], keys[:, 0]))[0])


@dataclass
class _Row:
    variant: Variant
    n: int
    k: int
    b: int
    batch: float
    bd: dict  # breakdown as floats
    refined: bool = False

    @property
    def thr(self):
        return self.bd["throughput_samples_per_s"]

    @property
    def eff(self):
        return self.bd["scaling_efficiency"]

    @property
    def t(self):
        return self.bd["iteration_s"]


def _row(sw: Sweep, i: int) -> _Row:
    bd = {f: float(np.asarray(getattr(sw.breakdown, f))[i]) for f in Breakdown.FIELDS}
    return _Row(
        sw.variant,
        int(sw.workers[i]),
        int(sw.servers[i]),
        int(sw.bucket_bytes[i]),
        float(sw.batch_size[i]),
        bd,
    )


def _row_key(scorer: _Scorer, r: _Row) -> tuple:
    k = scorer.key(r.variant, [r.n], [r.k], [r.thr])[0]
    return (float(k[0]), float(k[1]))


# ---------------------------------------------------------------------------
# Evaluation helpers (stable shapes; params may be drawn)
# ---------------------------------------------------------------------------
def _eval_rows(params, ctx: _Context, variant, n, k, b, batch, differentiable=False) -> Breakdown:
    base = (
        np.full(np.shape(n), float(ctx.global_batch))
        if ctx.global_batch is not None
        else np.asarray(batch, dtype=np.float64)
    )
    out = evaluate(
        params,
        ctx.workload,
        variant,
        n,
        k,
        b,
        ranks_per_node=ctx.ranks_per_node,
        batch_size=batch,
        base_batch_size=base,
        differentiable=differentiable,
    )
    return out


def _throughput(ctx: _Context, n, batch, t):
    if ctx.global_batch is not None:
        return ctx.global_batch / t
    return np.asarray(n, dtype=np.float64) * np.asarray(batch, dtype=np.float64) / t


def _spec_rows(ctx: _Context, rows) -> list:
    """(variant, n, k, b, batch, base) tuples for :class:`TimeSpec` from :class:`_Row` s."""
    return [
        (
            r.variant,
            r.n,
            max(r.k, 1),
            r.b,
            r.batch,
            float(ctx.global_batch) if ctx.global_batch is not None else r.batch,
        )
        for r in rows
    ]


def _intervals(ctx: _Context, spec_rows: list, level: float, nominal) -> tuple:
    """The profile's ``level`` intervals of the step times of ``spec_rows``.

    For bare parameters (no covariance) the interval is the point: ``nominal``
    is returned without evaluating anything. Otherwise the profile's
    :meth:`interval` (sigma points along the covariance, central differences
    where one is not finite, and the held-out residual spread) evaluates every
    configuration under every perturbed parameter set in one numpy call
    (``batched=True``: nothing compiled). A profile
    object whose ``interval`` takes no ``batched`` gets the jitted function
    whose directional derivatives are central differences
    (:func:`tuner._search.spec_times_fd`); should they not be finite,
    automatic derivatives are used instead.
    """
    t = np.asarray(nominal, dtype=np.float64)
    if getattr(ctx.profile, "bare", False):
        return t, t.copy()

    def run(exact: bool):
        spec, order = TimeSpec.build(ctx.workload, ctx.ranks_per_node, spec_rows, exact)
        if takes_batched(ctx.profile):
            lo, hi = ctx.profile.interval(lambda p: spec_times(p, spec), level=level, batched=True)
        else:
            fn = (
                (lambda p: spec_times_jit(p, spec)) if exact else (lambda p: spec_times_fd(p, spec))
            )
            lo, hi = ctx.profile.interval(fn, level=level)
        lo = np.atleast_1d(np.asarray(lo, dtype=np.float64))
        hi = np.atleast_1d(np.asarray(hi, dtype=np.float64))
        if lo.shape != (len(spec_rows),) or hi.shape != lo.shape:
            raise RuntimeError(
                f"profile.interval returned arrays of shape {lo.shape} and {hi.shape}; "
                f"expected ({len(spec_rows)},)"
            )
        out_lo, out_hi = np.empty_like(lo), np.empty_like(hi)
        out_lo[order], out_hi[order] = lo, hi
        return out_lo, out_hi

    lo, hi = run(False)
    if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))):
        lo, hi = run(True)  # automatic derivatives, cap by cap
    return lo, hi


# ---------------------------------------------------------------------------
# Refinement of the bucket size
# ---------------------------------------------------------------------------
def _refine(ctx, params, sw: Sweep, row: _Row, caps: np.ndarray, scorer) -> _Row:
    """Refine one overlapping configuration's bucket cap; keep it if the exact model agrees."""
    G = float(ctx.workload.total_param_bytes)
    sel = np.flatnonzero((sw.workers == row.n) & (sw.servers == row.k) & (sw.bucket_bytes > 0))
    if sel.size == 0:
        return row
    start = float(sw.bucket_bytes[sel[np.argmin(sw.iteration_s[sel])]])
    pos = caps[caps > 0]
    low = max(1024.0, float(pos.min()) / 2.0) if pos.size else 1024.0
    high = max(2.0 * low, min(G, float(pos.max()) * 2.0)) if pos.size else G
    batch = row.batch
    base = float(ctx.global_batch) if ctx.global_batch is not None else batch
    b_ref = refine_bucket(
        params,
        ctx.workload,
        row.variant,
        row.n,
        row.k,
        start,
        ranks_per_node=ctx.ranks_per_node,
        batch_size=batch,
        base_batch_size=base,
        low_bytes=low,
        high_bytes=high,
    )
    # snap with the exact model: 61 caps within a factor 2 of the fluid optimum (tensors
    # are never split, so the exact optimum can sit a few tensors away from the fluid
    # one: ResNet-50 at 1,024 workers, fluid 80 MiB, exact 50 MiB), and 61 from a
    # quarter to twice the grid's best (where the fluid model's kinks may have led the
    # gradient elsewhere); one numpy evaluation of the exact model, a few milliseconds
    near = b_ref * np.concatenate([[1.0], np.geomspace(0.5, 2.0, 60)])
    local = np.geomspace(start / 4.0, start * 2.0, 61)
    cands = np.unique(np.round(np.concatenate([near, local])))
    cands = cands[(cands >= 1) & (cands <= max(high, start * 2.0))]
    m = cands.size
    out = _eval_rows(
        params, ctx, row.variant, np.full(m, row.n), np.full(m, row.k), cands, np.full(m, batch)
    )
    t = np.asarray(out.iteration_s, dtype=np.float64)
    j = int(np.argmin(t))
    # better beyond rounding (the grid and this evaluation take different array shapes)
    tol = 1e-12 if np.asarray(out.iteration_s).dtype == np.float64 else 1e-6
    if not t[j] < row.t * (1 - tol):
        return row
    # Tensors are never split, so the optimum is a plateau between two tensors' edges:
    # any byte in it gives the same step, and which one the candidates hit depends on
    # rounding (a run said 102,196,406 bytes, recommend on its saved profile 102,196,405).
    # The coarsest whole MiB, 64 KiB or KiB on the plateau is what a user can type.
    round_caps = np.array([f(cands[j] / q) * q for q in _ROUND_CAPS for f in (np.floor, np.ceil)])
    out_r = _eval_rows(
        params, ctx, row.variant, np.full(round_caps.size, row.n), np.full(round_caps.size, row.k),
        np.maximum(round_caps, 1.0), np.full(round_caps.size, batch),
    )  # fmt: skip
    t_r = np.asarray(out_r.iteration_s, dtype=np.float64)
    on = np.flatnonzero((round_caps >= 1) & (t_r <= t[j] * (1 + tol)))
    if on.size:  # the first is the coarsest
        out, t, j, cands = out_r, t_r, int(on[0]), round_caps
    bd = {f: float(np.asarray(getattr(out, f))[j]) for f in Breakdown.FIELDS}
    bd["throughput_samples_per_s"] = float(_throughput(ctx, row.n, batch, t[j]))
    if ctx.global_batch is not None:
        bd["scaling_efficiency"] *= (ctx.global_batch / row.n) / batch
    return _Row(row.variant, row.n, row.k, int(cands[j]), batch, bd, refined=True)


#: Granularities, coarsest first, to which a refined bucket cap snaps on its plateau, bytes.
_ROUND_CAPS = (2.0**20, 2.0**16, 2.0**10)


# ---------------------------------------------------------------------------
# p_best
# ---------------------------------------------------------------------------
def _draw_throughputs(ctx, profile, rows: list[_Row]):
    """(D, R) throughputs of ``rows`` under D parameter draws (nominal dropped), or None.

    The same draws for every row, so differences between rows are paired.
    ``None`` when the profile has no usable covariance.
    """
    draws, ok = parameter_draws(profile, P_BEST_DRAWS)
    if not ok:
        return None
    spec, order = TimeSpec.build(ctx.workload, ctx.ranks_per_node, _spec_rows(ctx, rows))
    out = np.asarray(spec_times_draws(draws, spec), dtype=np.float64)
    times = np.empty_like(out)
    times[:, order] = out
    times = times[1:]  # drop the nominal draw
    n = np.array([r.n for r in rows], dtype=np.float64)
    batch = np.array([r.batch for r in rows], dtype=np.float64)
    return _throughput(ctx, n[None, :], batch[None, :], times)


def _draw_scores(scorer: _Scorer, rows: list[_Row], thr):
    """(D, R) objective values per draw, higher better (throughput, or −price per sample)."""
    if scorer.objective == "cost":
        return -np.stack(
            [scorer.cost(r.variant, r.n, r.k, thr[:, i]) for i, r in enumerate(rows)], axis=1
        )
    return thr


def _p_best(ctx, profile, chosen: _Row, others: list[_Row], scorer: _Scorer) -> float:
    """Share of parameter draws in which ``chosen`` beats every row of ``others`` (ties half)."""
    if not others:
        return float("nan")
    rows = [chosen, *others]
    thr = _draw_throughputs(ctx, profile, rows)
    if thr is None:
        return float("nan")
    if scorer.objective == "min-workers":
        n = np.array([r.n for r in rows], dtype=np.float64)
        reach = thr[:, 0] >= (scorer.target or 0.0)
        same = n[None, 1:] <= n[0]
        better = np.where(same, thr[:, :1] > thr[:, 1:], True) & reach[:, None]
        ties = np.where(same, thr[:, :1] == thr[:, 1:], False) & reach[:, None]
    else:
        score = _draw_scores(scorer, rows, thr)
        better, ties = score[:, :1] > score[:, 1:], score[:, :1] == score[:, 1:]
    win = np.all(better | ties, axis=1)
    tie = win & np.any(ties, axis=1)
    return float((np.sum(win) - 0.5 * np.sum(tie)) / P_BEST_DRAWS)


# ---------------------------------------------------------------------------
# Rationale and warnings
# ---------------------------------------------------------------------------
def _arc_elasticity(params, ctx, row: _Row, **factors) -> float:
    """log(T(θ·2) / T(θ)) / log 2 for the given parameters doubled (exact model)."""
    p2 = params.scaled(**{k: 2.0 for k in factors})
    out = _eval_rows(
        p2,
        ctx,
        row.variant,
        np.array([row.n]),
        np.array([row.k]),
        np.array([row.b]),
        np.array([row.batch]),
    )
    t2 = float(np.asarray(out.iteration_s)[0])
    return math.log(t2 / row.t) / math.log(2.0)


def _bottleneck(params, ctx, chosen: _Row) -> str:
    """The rationale's first sentence: what bounds the chosen step (compute, server
    congestion, bandwidth or latency), with the elasticities that tell them apart."""
    bd = chosen.bd
    T = bd["iteration_s"]
    comp = (bd["forward_s"] + bd["backward_s"]) / T
    exposed = bd["exposed_communication_s"] / T
    v = chosen.variant
    if exposed < 0.10:
        hidden = "overlapped with backward" if v.overlaps else "short"
        if v.overlaps and hasattr(v.arch, "schedule"):  # fsdp/hsdp gather during forward too
            hidden = "overlapped with forward and backward"
        text = (
            f"Compute-bound: {format_percent(comp, 0)} of the {format_seconds(bd['iteration_s'])} step is "
            f"forward and backward compute; communication is {hidden} "
            f"(exposed: {format_percent(exposed, 0)})."
        )
        placed = min(ctx.ranks_per_node, int(chosen.n))
        shares = params.to_numpy().core_share(np.asarray([float(placed), 1.0]))
        share = float(shares[0] / shares[1])  # against the baseline's one rank on a node
        eff = bd.get("scaling_efficiency", 1.0)
        if share > 1.05 and eff < 0.95:  # the efficiency lost is the node's shared cores
            text += (
                f" Scaling efficiency is {format_percent(eff, 1)} nonetheless: the {placed} ranks "
                f"sharing a node's cores each compute {share:.2f}× slower than one rank alone."
            )
        return text
    lat = _arc_elasticity(params, ctx, chosen, alpha=1, call_overhead=1)
    bw = _arc_elasticity(params, ctx, chosen, beta=1, node_beta=1)
    server_bound = v.name in ("ps", "hybrid") and chosen.k > 0 and chosen.n > chosen.k
    if server_bound and bw >= lat:
        ratio = chosen.n / max(chosen.k, 1)
        return (
            f"Server congestion: {format_percent(exposed, 0)} of the step is exposed communication, "
            f"and each of the {chosen.k} server links carries {ratio:.3g}× a worker's "
            f"traffic (doubling link times would lengthen the step by {format_percent(2**bw - 1, 0)})."
        )
    if bw >= lat:
        return (
            f"Bandwidth-bound: {format_percent(exposed, 0)} of the step is exposed communication; "
            f"halving the bandwidth would lengthen the step by {format_percent(2**bw - 1, 0)}, "
            f"doubling latency by {format_percent(2**lat - 1, 0)}."
        )
    return (
        f"Latency-bound: {format_percent(exposed, 0)} of the step is exposed communication, "
        f"dominated by per-message latency (doubling it would lengthen the step by "
        f"{format_percent(2**lat - 1, 0)}; halving the bandwidth by {format_percent(2**bw - 1, 0)})."
    )


def _versus_runner_up(chosen: _Row, o: _Row, scorer) -> str:
    """The rationale's sentence comparing the chosen row with ``o``, the best other
    architecture, in the objective's terms (cost, workers or throughput)."""
    v = chosen.variant
    where = f"{o.variant.label} ({o.n} workers"
    where += f", {o.k} servers)" if o.k else ")"
    if scorer.objective == "cost" and scorer.price is not None:
        c0 = float(scorer.cost(v, chosen.n, chosen.k, chosen.thr))
        c1 = float(scorer.cost(o.variant, o.n, o.k, o.thr))
        gain = 1.0 - c0 / c1
        return (
            f"The best other architecture, {where}, costs practically the same per sample "
            "(within 0.5%)."
            if gain < 0.005
            else f"It costs {format_percent(gain, 0)} less per sample than the best other "
            f"architecture, {where}."
        )
    elif scorer.objective == "min-workers" and o.n > chosen.n:
        return f"The best other architecture, {where}, needs more workers."
    else:
        gain = chosen.thr / o.thr - 1.0
        if abs(gain) < 0.005:
            return f"The best other architecture, {where}, is practically as fast (within 0.5%)."
        return (
            f"It is {format_percent(abs(gain), 1 if abs(gain) < 0.1 else 0)} "
            f"{'faster' if gain > 0 else 'slower'} than "
            f"the best other architecture, {where}, {o.thr:,.0f} samples/s."
        )


def _rationale(params, ctx, chosen: _Row, others: list[_Row], scorer, memory_note) -> str:
    parts = [_bottleneck(params, ctx, chosen)]
    if others:
        parts.append(_versus_runner_up(chosen, others[0], scorer))
    if scorer.objective == "efficiency":
        parts.append(
            f"Scaling efficiency {format_percent(chosen.eff, 0)} meets the floor of "
            f"{format_percent(scorer.min_efficiency, 0)}."
        )
    if scorer.objective == "min-workers":
        parts.append(
            f"{chosen.n} workers are the fewest that reach {scorer.target:,.0f} samples/s."
        )
    if memory_note:
        parts.append(memory_note)
    if chosen.refined:
        parts.append(
            f"The bucket size was refined continuously to {format_bytes(chosen.b)} "
            "(faster than every grid size under the exact model)."
        )
    return " ".join(parts)


def _range(mr: Mapping, key: str):
    v = mr.get(key) if isinstance(mr, Mapping) else None
    try:
        lo, hi = float(v[0]), float(v[1])
    except (TypeError, ValueError, IndexError, KeyError):
        return None
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return None
    return lo, hi


def _relevant_names(chosen: _Row, g: int, ident: Mapping | None = None):
    """A predicate on profile parameter names: does the chosen configuration use it?

    A level's base α or β counts only where a collective the configuration uses
    has no identified regime value of it at that level (``ident``): a regime's
    α and β are base × factor, and where every used product is identified the
    base's own spread does not reach the prediction.
    """
    levels = (["inter"] if chosen.n > g else []) + (["intra"] if g > 1 else [])
    colls = _collectives_used(chosen, g)
    ident = ident or {}

    def covered(base: str, level: str) -> bool:
        for c in colls:
            keys = [k for k in ident if k.startswith(f"regime_{base}[{c},{level},")]
            if not keys or not all(ident[k] for k in keys):
                return False
        return bool(colls)

    def relevant(name: str) -> bool:
        base, _, idx = name.partition("[")
        parts = idx.rstrip("]").split(",") if idx else []
        if base in ("alpha_s", "beta_s_per_byte"):
            return bool(parts) and parts[0] in levels and not covered(base, parts[0])
        if base == "node_beta_s_per_byte":
            return bool(parts) and parts[0] in levels
        if base.startswith("regime_") and base != "regime_sharpness":
            return len(parts) >= 2 and parts[0] in colls and parts[1] in levels
        if base == "fanin_exponent":
            return chosen.variant.name in ("ps", "ps_host", "hybrid") and bool(levels)
        if base in ("all_to_all_exponent", "all_to_all_congestion_cap"):
            return chosen.variant.name == "p2p" and bool(levels)
        if base == "call_overhead_s":
            return bool(levels)
        return base == "flops_per_s"

    return relevant


#: An interval whose high side is more than this over the prediction gets a note on
#: what sets it.
_WIDE_INTERVAL = 1.25


def _interval_note(ctx: _Context, chosen: _Row, lo: float, hi: float) -> str | None:
    """A warning naming what sets a wide interval, and what would narrow it.

    ``None`` unless the chosen step's 90% high bound is over ×1.25 its prediction
    (and the profile can split it: :meth:`calibration.Profile.interval_drivers`).
    The warning names the driver that holds half or more of that side's
    log-variance, else the three largest: parameters (saying which the
    measurements do not identify) or the residual spread (the microbenchmarks'
    held-out misses, or what a step fit leaves), and how the first could be
    narrowed.
    """
    prof = ctx.profile
    t = float(chosen.t)
    if not (t > 0 and hi > _WIDE_INTERVAL * t) or not takes_batched(prof):
        return None
    drivers = getattr(prof, "interval_drivers", None)
    if drivers is None:
        return None
    spec, _ = TimeSpec.build(ctx.workload, ctx.ranks_per_node, _spec_rows(ctx, [chosen]))
    ranked = drivers(lambda p: spec_times(p, spec), 0.9, batched=True)
    if not ranked:
        return None
    span = f"the 90% interval of the step ({lo:.3g} s – {hi:.3g} s)"
    ident = getattr(prof, "identified", None) or {}
    steps = bool(getattr(prof, "steps_set_spread", False))
    name, share = ranked[0]
    top = ranked[:1] if share >= 0.5 else ranked[:3]
    shown = [f"{_driver(n, steps)} ({format_percent(v, 0)})" for n, v in top]
    listed = shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " and " + shown[-1]
    what = ("mostly " if share >= 0.5 else "") + f"because of {listed} of its upper side's variance"
    free = [n for n, _ in top if n in ident and not ident[n]]
    if free and len(free) == len(top):
        what += ", which the measurements do not identify (near the prior)"
    elif free:
        what += f"; the measurements do not identify {', '.join(free)} (near the prior)"
    if name == "held-out residual":
        if steps:
            how = "more training runs, or steadier ones, narrow it"
        else:
            how = (
                "measuring again with a larger --budget-s or on a quieter machine narrows it "
                "('ddltune show PROFILE' lists the misses per series)"
            )
    elif ident.get(name, True):
        how = ""
    elif name in STEPS_ONLY_PARAMETERS:
        how = (
            "training steps measure it: `ddltune calibrate MEASUREMENTS --steps RUNS.csv "
            "--model NAME -o P` with runs you already have, then recommend from P; or "
            "`ddltune run --validate`, which trains on the cluster and fits its own steps"
        )
    elif "inter" in name:
        how = "measurements with ranks on more than one node measure it"
    else:
        how = f"measurements that exercise {'them' if len(free) > 1 else 'it'} would narrow it"
    return f"{span} is wide {what}" + (f"; {how}" if how else "")


def _driver(name: str, steps: bool) -> str:
    """A driver of an interval as the note names it (``steps``: a step fit set the residual)."""
    if name == "held-out residual":
        return "what the step fit leaves" if steps else "the microbenchmarks' held-out misses"
    return name


def _warnings(profile, ctx, chosen: _Row, forced_unreliable: bool, excluded, bare) -> list[str]:
    out = []
    if forced_unreliable:
        out.append(
            f"unreliable profile: held-out p90 error {format_percent(heldout_p90(profile))} is over the "
            f"{format_percent(RELIABLE_P90_LIMIT, 0)} limit; this recommendation was forced and may be wrong"
        )
    if bare:
        out.append(
            "no profile covariance (bare parameters): the interval is the point prediction "
            "and p_best is unknown"
        )
    elif flat_covariance(profile) is None:
        out.append("the profile has no usable covariance: p_best is unknown")
    mr = getattr(profile, "measured_ranges", None) or {}
    ranks = _range(mr, "num_ranks")
    sizes = _range(mr, "message_bytes")
    rpn = _range(mr, "ranks_per_node")
    if not bare and ranks is None and sizes is None:
        out.append(
            "the profile holds no measurements (datasheet presets): every prediction is a "
            "prior; calibrate on the cluster for a trustworthy answer"
        )
    elif not bare and not math.isfinite(heldout_p90(profile)) and sizes is not None:
        out.append(
            "untested profile: its calibration held no point out (too few sizes per series), "
            "so its error out of sample is unknown; measure more sizes to test it"
        )
    if ranks is not None and not ranks[0] <= chosen.n <= ranks[1]:
        out.append(
            f"extrapolation: {chosen.n} workers is outside the measured rank counts "
            f"({format_range(*ranks)})"
        )
    out += bucket_size_warnings(profile, ctx.workload, chosen.b, chosen.variant.arch)
    prov = getattr(profile, "provenance", None) or {}
    if prov.get("backend") == "cpu" and chosen.variant.arch.overlaps:
        out.append(
            f"{chosen.variant.label} is predicted with its buckets' exchange under backward, "
            "as PyTorch DDP (gloo on CPU too), Horovod and FSDP run it; an XLA:CPU program "
            "(JAX on CPU, and 'ddltune validate') runs its collectives after the compute, "
            "which adds the exposed exchange to every step and can change the pick"
        )
    placed = min(ctx.ranks_per_node, int(chosen.n))  # a job smaller than a node: one node
    note = node_capacity_note(chosen.n, ctx.ranks_per_node)
    if note is not None:
        out.append(note)
    if rpn is not None and not rpn[0] <= placed <= rpn[1]:
        out.append(
            f"extrapolation: {placed} rank{'s' if placed != 1 else ''} per node "
            f"{'are' if placed != 1 else 'is'} outside the measured {format_range(*rpn)}"
        )
    if not bare:
        net = unmeasured_network_warning(profile, int(chosen.n), placed)
        if net is not None:
            out.append(net)
    measured = mr.get("collectives") if isinstance(mr, Mapping) else None
    if measured:
        missing = [c for c in _collectives_used(chosen, ctx.ranks_per_node) if c not in measured]
        if missing:
            out.append(
                f"the profile has no measurements of {', '.join(missing)}, which "
                f"{chosen.variant.label} uses: its prediction rests on the prior"
            )
    ident = getattr(profile, "identified", None) or {}
    if isinstance(ident, Mapping) and (ranks is not None or sizes is not None):
        relevant = _relevant_names(chosen, ctx.ranks_per_node, ident)
        not_id = sorted(str(k) for k, v in ident.items() if not v and relevant(str(k)))
        if not_id:
            shown = format_first(not_id, 6)
            out.append(
                "parameters this configuration depends on that the measurements could not "
                f"identify (wide 90% intervals: their values may have moved from the prior, "
                f"but not far enough to trust): {shown}"
            )
    total = excluded.get("total", 0)
    nw, ns = excluded.get("worker_memory", 0), excluded.get("server_memory", 0)
    if nw or ns:
        what = []
        if nw:
            what.append(f"{nw:,} because a worker cannot hold them")
        if ns:
            what.append(f"{ns:,} because a server cannot hold its shard")
        out.append(
            f"memory: {nw + ns:,} of {total:,} configurations excluded ({'; '.join(what)}) "
            f"with {format_bytes(excluded.get('memory_bytes', 0))} per device for parameters, "
            "gradients, optimizer state, buffers"
            + (" and activations" if excluded.get("activations") else "")
        )
    return out


# ---------------------------------------------------------------------------
# recommend
# ---------------------------------------------------------------------------
def recommend(
    profile,
    workload: Workload,
    *,
    max_workers: int,
    ranks_per_node: int = 1,
    architectures: Sequence[str] | str | None = None,
    bucket_bytes: Sequence[int] | None = None,
    servers: Sequence[int] | None = None,
    global_batch: int | None = None,
    objective: str = "throughput",
    min_efficiency: float | None = None,
    target_throughput: float | None = None,
    price_per_hour: float | None = None,
    server_price_per_hour: float | None = None,
    optimizer_state_factor: float = 1.0,
    device_memory_bytes: float | None = None,
    force: bool = False,
    refine: bool = True,
    on_infeasible: str = "raise",
) -> Recommendation:
    """Recommend the architecture, servers, worker count and bucket size for a workload.

    (Long for its documentation only: the body checks the arguments, then
    runs the named steps — sweep, best per variant, refinement, memory note,
    alternatives, assembly.)

    Search: every architecture variant — ``ps`` with dedicated and with
    colocated servers (k ∈ ``servers``, default the powers of two ≤ n),
    ``p2p``, ``ring``, ``tree``, the sharded ``zero1``, ``zero2``, ``fsdp``
    (its per-block units make the bucket cap moot: one cap, no refinement),
    and with ``ranks_per_node`` > 1 also ``ps_host``, ``hybrid``,
    ``hierarchical`` and ``hsdp`` — × worker counts 1 …
    ``max_workers`` (multiples of ``ranks_per_node`` when it is > 1 and at
    most ``max_workers``; else 1 … ``max_workers`` on one node, with a note) × bucket
    caps, each evaluated exactly by :func:`costmodel.iteration_time`. The best
    configurations of architectures that overlap communication with backward
    (those within 10% of the best score, and the best overall) get their
    bucket size refined by gradient steps on log bucket size through
    :func:`costmodel.fluid_iteration_time`, snapped to the exact bucketing and
    kept only where the exact model says it is faster.

    Objectives (all subject to memory and to the optional constraints
    ``min_efficiency`` and ``target_throughput``, which apply to every
    objective):

    * ``throughput``: the most samples/s;
    * ``cost``: the lowest cost per sample, (n·``price_per_hour`` + k·
      ``server_price_per_hour`` for dedicated ps servers) / 3600 / throughput;
    * ``efficiency``: the most samples/s with scaling efficiency ≥ ``min_efficiency``;
    * ``min-workers``: the fewest workers reaching ``target_throughput``
      (ties: the most samples/s).

    Memory: a configuration is excluded when a worker or a server cannot hold
    parameters + gradients + optimizer state (+ the sharded architectures'
    staging buffers; :func:`costmodel.memory_per_rank`, the ZeRO paper's
    accounting) in
    ``device_memory_bytes`` (default the profile's ``memory_bytes``);
    :attr:`Recommendation.excluded` counts them and a warning says so.

    Args:
        profile: a :class:`calibration.Profile` (``Profile.load``,
            ``Profile.from_preset``) or bare :class:`costmodel.ClusterParams`
            (then intervals are points and ``p_best`` is NaN; a warning says so).
        workload: a :class:`costmodel.Workload`; its ``batch_size`` is the
            per-worker batch unless ``global_batch`` is given.
        max_workers: the most workers to consider, integer ≥ 1.
        ranks_per_node: g ≥ 1 workers a node holds (GPUs per node); with
            ``max_workers`` < g the job runs on one node, said in ``warnings``.
        architectures: names to search (see :func:`tuner.resolve_variants`),
            default all applicable.
        bucket_bytes: bucket caps in bytes ≥ 0 (0 = one collective per
            tensor); default :data:`tuner.DEFAULT_BUCKET_GRID` (0, 64 KiB …
            1 GiB in powers of two, and DDP's 25 MiB).
        servers: server counts for ``ps``/``hybrid`` (default powers of two).
        global_batch: a fixed global batch B ≥ 1: each of n workers computes
            ⌈B/n⌉ samples; throughput is B / step time. Default: fixed batch
            per worker (the workload's).
        objective: one of :data:`OBJECTIVES`.
        min_efficiency: scaling-efficiency floor in (0, 1]; required for
            ``efficiency``.
        target_throughput: samples/s > 0; required for ``min-workers``.
        price_per_hour: price of one worker-hour (> 0), required for ``cost``.
        server_price_per_hour: price of one dedicated server-hour (> 0),
            required for ``cost`` when dedicated ps servers are searched.
        optimizer_state_factor: optimizer state in units of the model bytes
            (SGD 0, momentum 1, Adam 2), ≥ 0.
        device_memory_bytes: memory per worker and server, bytes > 0.
        force: recommend even from an unreliable profile (held-out p90 over
            :data:`RELIABLE_P90_LIMIT`); the result is marked ``reliable=False``.
        refine: refine the bucket size continuously.
        on_infeasible: ``"raise"`` (default) raises :class:`InfeasibleError`
            when no configuration meets the constraints, carrying the
            recommendation; ``"return"`` returns it with ``status="infeasible"``.

    Returns:
        A :class:`Recommendation`.

    Raises:
        UnreliableProfileError: the profile is unreliable and ``force`` is False.
        InfeasibleError: nothing meets the constraints (memory, efficiency
            floor, target throughput) and ``on_infeasible="raise"``; the
            message says what is infeasible and the best that is possible.
        ValueError: bad input, naming the argument and its CLI flag:
            ``max_workers`` < 1, an unknown architecture or objective, a
            missing price for ``cost``, a missing ``min_efficiency`` or
            ``target_throughput`` for their objectives, out-of-range numbers.
        TypeError: ``profile`` or ``workload`` of the wrong type.

    Example:
        >>> from costmodel import preset, get_workload
        >>> rec = recommend(preset("ethernet-10g", "v100"), get_workload("resnet50", 64),
        ...                 max_workers=4, architectures=["ring", "ps"], refine=False)
        >>> rec.architecture in ("ring", "ps"), 1 <= rec.workers <= 4
        (True, True)
    """
    objective = _check_objective(objective)
    if on_infeasible not in ("raise", "return"):
        raise ValueError(f"on_infeasible must be 'raise' or 'return', got {on_infeasible!r}")
    if not isinstance(workload, Workload):
        raise TypeError(
            "workload must be a costmodel.Workload (get_workload(name), load_layers(path)), "
            f"got {type(workload).__name__}"
        )
    prof = as_profile(profile)
    workers = worker_grid(max_workers, ranks_per_node)
    variants = resolve_variants(architectures, ranks_per_node)
    scorer = _check_scorer(
        objective,
        variants,
        min_efficiency,
        target_throughput,
        price_per_hour,
        server_price_per_hour,
    )
    _check_global_batch(global_batch, workers)
    osf = _check_optimizer_state(optimizer_state_factor)
    memory = (
        float(prof.params.to_numpy().memory_bytes)
        if device_memory_bytes is None
        else _positive("device_memory_bytes", device_memory_bytes, "--device-memory")
    )
    servers = _check_servers(servers, workers)
    reliable = _check_reliable(prof, force)

    ctx = _Context(prof, workload, int(ranks_per_node), global_batch)
    caps = bucket_grid(bucket_bytes, float(workload.total_param_bytes))
    sweeps, excluded = _sweep_variants(ctx, variants, workers, caps, servers, memory, osf)
    best, keys, masks = _best_per_variant(sweeps, scorer)
    status, message = "ok", ""
    if not best:
        status = "infeasible"
        message, fallback = _infeasible(sweeps, scorer, memory)
        best = {fallback.variant.label: fallback}
    elif refine:
        _refine_leaders(ctx, sweeps, best, caps, scorer)
    ranked = sorted(best.values(), key=lambda r: _row_key(scorer, r))
    tie_note = ""
    if status == "ok":
        ranked, tie_note = _prefer_simpler(ctx, scorer, ranked)
    chosen, others = ranked[0], ranked[1:]
    memory_note = (
        _memory_note(ctx, sweeps, keys, scorer, chosen, excluded, osf) if status == "ok" else ""
    )
    if status == "ok" and chosen.variant.name in _SHARDED:
        note = _sharding_note(
            workload, chosen, ranked, osf, memory, ctx.ranks_per_node, memory_note
        )
        memory_note = f"{memory_note} {note}".strip()
    memory_note = f"{tie_note} {memory_note}".strip()
    alt_rows = _alternatives(sweeps, masks, keys, scorer, chosen, others, status == "ok")
    rec = _assemble(
        ctx,
        scorer,
        variants,
        chosen,
        others,
        alt_rows,
        memory_note=memory_note,
        excluded=excluded,
        sweeps=sweeps,
        status=status,
        message=message,
        reliable=reliable,
        osf=osf,
    )
    if status == "infeasible" and on_infeasible == "raise":
        raise InfeasibleError(message, rec)
    return rec


def _check_scorer(objective, variants, min_efficiency, target, price, server_price) -> _Scorer:
    """The objective's scorer, once the numbers it needs are present and in range."""
    min_efficiency = _positive("min_efficiency", min_efficiency, "--min-efficiency", upper=1.0)
    target = _positive("target_throughput", target, "--target-throughput")
    price = _positive("price_per_hour", price, "--price-per-hour")
    server_price = _positive("server_price_per_hour", server_price, "--server-price-per-hour")
    if objective == "efficiency" and min_efficiency is None:
        raise ValueError(
            "objective 'efficiency' needs min_efficiency, the scaling-efficiency floor in (0, 1] "
            "(--min-efficiency 0.8)"
        )
    if objective == "min-workers" and target is None:
        raise ValueError(
            "objective 'min-workers' needs target_throughput in samples/s (--target-throughput)"
        )
    if objective == "cost":
        if price is None:
            raise ValueError(
                "objective 'cost' needs price_per_hour, the price of one worker-hour "
                "(--price-per-hour)"
            )
        if server_price is None and any(v.dedicated_servers for v in variants):
            raise ValueError(
                "objective 'cost' with dedicated parameter servers needs server_price_per_hour "
                "(--server-price-per-hour), or leave dedicated ps out of the search "
                "(--arch without 'ps', or 'ps_colocated')"
            )
    return _Scorer(objective, price, server_price, min_efficiency, target)


def _check_global_batch(global_batch, workers: np.ndarray) -> None:
    if global_batch is None:
        return
    if isinstance(global_batch, bool) or not isinstance(global_batch, int | np.integer):
        raise ValueError(f"global_batch must be an integer ≥ 1, got {global_batch!r}")
    if global_batch < 1:
        raise ValueError(f"global_batch must be ≥ 1, got {global_batch} (--global-batch)")
    if global_batch < workers[0]:
        raise ValueError(
            f"global_batch={global_batch} is smaller than the fewest workers searched "
            f"({workers[0]}): every worker needs at least one sample"
        )


def _check_optimizer_state(optimizer_state_factor) -> float:
    try:
        osf = float(optimizer_state_factor)
    except (TypeError, ValueError):
        osf = float("nan")
    if not math.isfinite(osf) or osf < 0:
        raise ValueError(
            f"optimizer_state_factor must be ≥ 0 (SGD 0, momentum 1, Adam 2), "
            f"got {optimizer_state_factor!r}"
        )
    return osf


def _check_servers(servers, workers) -> list[int] | None:
    """The server counts asked for; one at least must fit the most workers searched
    (a worker count that none fits is costed with 1 server, which was not asked for)."""
    if servers is None:
        return None
    servers = [int(s) for s in servers]
    if not servers or min(servers) < 1:
        raise ValueError(f"servers must be integers ≥ 1, got {servers!r}")
    most = int(np.max(workers))
    if min(servers) > most:
        raise ValueError(
            f"servers {servers} are all more than the {most} workers searched "
            "(--servers, --max-workers): a ps needs at most one server per worker"
        )
    return servers


def _check_reliable(prof, force: bool) -> bool:
    """The profile's reliability; refuses an unreliable one unless ``force``."""
    reliable = bool(getattr(prof, "reliable", True))
    if not reliable and not force:
        p90 = heldout_p90(prof)
        shown = "unknown" if not math.isfinite(p90) else format_percent(p90)
        raise UnreliableProfileError(
            f"the profile's held-out p90 error is {shown}, over the {format_percent(RELIABLE_P90_LIMIT, 0)} "
            "limit: its predictions are not trustworthy enough to recommend from. Recalibrate "
            "with more measurements, or force a recommendation marked unreliable "
            "('ddltune recommend --force'; recommend(..., force=True))."
        )
    return reliable


def _sweep_variants(ctx: _Context, variants, workers, caps, servers, memory: float, osf: float):
    """Every variant's exhaustive :class:`Sweep`, and what memory excluded."""
    sweeps: dict[str, Sweep] = {}
    for v in variants:
        sweeps[v.label] = sweep(
            ctx.profile.params,
            ctx.workload,
            v,
            workers,
            caps,
            ranks_per_node=ctx.ranks_per_node,
            servers=servers,
            global_batch=ctx.global_batch,
            memory_bytes=memory,
            optimizer_state_factor=osf,
        )
    excluded = {
        "total": sum(len(s) for s in sweeps.values()),
        "worker_memory": sum(int(np.sum(s.worker_bytes > memory)) for s in sweeps.values()),
        "server_memory": sum(
            int(np.sum((s.server_bytes > memory) & (s.worker_bytes <= memory)))
            for s in sweeps.values()
        ),
        "memory_bytes": memory,
        "activations": ctx.workload.transformer is not None,
    }
    return sweeps, excluded


def _best_per_variant(sweeps: dict[str, Sweep], scorer: _Scorer):
    """Per variant: its best row under memory and the constraints, its keys, its mask."""
    best: dict[str, _Row] = {}
    keys: dict[str, np.ndarray] = {}
    masks: dict[str, np.ndarray] = {}
    for label, sw in sweeps.items():
        ok = sw.feasible & scorer.constraints(sw.throughput, sw.efficiency)
        masks[label] = ok
        keys[label] = scorer.key(sw.variant, sw.workers, sw.servers, sw.throughput)
        if ok.any():
            idx = np.flatnonzero(ok)
            best[label] = _row(sw, int(idx[_argbest(keys[label][idx])]))
    return best, keys, masks


def _refine_leaders(ctx: _Context, sweeps, best: dict, caps, scorer: _Scorer) -> None:
    """Refine the bucket size of overlapping variants close to the lead (in place)."""
    lead = min(best.values(), key=lambda r: _row_key(scorer, r))
    lead_key = _row_key(scorer, lead)
    for label, r in list(best.items()):
        if not getattr(r.variant.arch, "uses_bucket_bytes", True):
            continue  # block-wrapped fsdp/hsdp: the cap changes nothing
        if r.variant.overlaps and (r is lead or _close(_row_key(scorer, r), lead_key, scorer)):
            best[label] = _refine(ctx, ctx.profile.params, sweeps[label], r, caps, scorer)


def _memory_note(ctx: _Context, sweeps, keys, scorer: _Scorer, chosen: _Row, excluded, osf) -> str:
    """A sentence when excluding what does not fit in memory changed the answer, else ``""``."""
    if not (excluded["worker_memory"] or excluded["server_memory"]):
        return ""
    free = []
    for label, sw in sweeps.items():
        ok = scorer.constraints(sw.throughput, sw.efficiency)
        if ok.any():
            idx = np.flatnonzero(ok)
            free.append(_row(sw, int(idx[_argbest(keys[label][idx])])))
    if not free:
        return ""
    unconstrained = min(free, key=lambda r: _row_key(scorer, r))
    if not _row_key(scorer, unconstrained) < _row_key(scorer, chosen):
        return ""
    u = unconstrained
    wb, sb = memory_need(
        ctx.workload, u.variant, u.n, max(u.k, 1), osf,
        ranks_per_node=ctx.ranks_per_node, bucket_bytes=u.b, batch_size=u.batch,
    )  # fmt: skip
    need = max(float(wb), float(sb))
    if need <= excluded["memory_bytes"]:
        return ""  # it fits: something else (a tie, a constraint) decided
    return (
        f"Memory bounds the choice: {u.variant.label} with {u.n} workers would be better but "
        f"needs {format_bytes(need)} per device, over the "
        f"{format_bytes(excluded['memory_bytes'])} available."
    )


def _alternatives(sweeps, masks, keys, scorer, chosen: _Row, others: list, fill: bool) -> list:
    """Up to five runner-ups: the other variants' bests, then (``fill``) the next-best rows.

    The fill prefers configurations not yet listed (another worker or server count)
    over a listed one at another bucket size: the same configuration at three bucket
    sizes tells a reader less than three configurations (a new user's trial).
    """
    alt_rows = list(others[:5])
    if len(alt_rows) >= 5 or not fill:
        return alt_rows
    taken = {(r.variant, r.n, r.k, r.b) for r in [chosen, *alt_rows]}
    configs = {key[:3] for key in taken}
    pool = []
    for label, sw in sweeps.items():
        idx = np.flatnonzero(masks[label])
        if idx.size == 0:
            continue
        kk = keys[label][idx]
        order = idx[np.lexsort((kk[:, 1], kk[:, 0]))]
        # the best rows, and each configuration's best (its first row in that order)
        _, first = np.unique(
            np.stack([sw.workers[order], sw.servers[order]], axis=1), axis=0, return_index=True
        )
        best_each = order[np.sort(first)][: 5 + len(taken)]
        pool += [_row(sw, int(i)) for i in dict.fromkeys([*order[: 5 + len(taken)], *best_each])]
    pool.sort(key=lambda r: _row_key(scorer, r))
    for new_configuration_only in (True, False):
        for r in pool:
            if len(alt_rows) >= 5:
                break
            key = (r.variant, r.n, r.k, r.b)
            if key in taken or (new_configuration_only and key[:3] in configs):
                continue
            taken.add(key)
            configs.add(key[:3])
            alt_rows.append(r)
    # the other architectures' bests first (ranked), then the fill, ranked by the objective
    first = min(len(others), 5)
    alt_rows[first:] = sorted(alt_rows[first:], key=lambda r: _row_key(scorer, r))
    return alt_rows


def _configuration(ctx: _Context, scorer: _Scorer, r: _Row, interval, osf: float) -> Configuration:
    cost = scorer.cost(r.variant, r.n, r.k, r.thr)
    wb, _ = memory_need(
        ctx.workload, r.variant, r.n, max(r.k, 1), osf,
        ranks_per_node=ctx.ranks_per_node, bucket_bytes=r.b, batch_size=r.batch,
    )  # fmt: skip
    return Configuration(
        r.variant.name,
        r.variant.colocated,
        int(r.k),
        int(r.n),
        int(ctx.ranks_per_node),
        int(r.b),
        float(r.batch),
        float(r.t),
        (float(interval[0]), float(interval[1])),
        float(r.thr),
        float(r.eff),
        None if cost is None else float(cost),
        dict(r.bd),
        r.refined,
        float(wb),
    )


def _assemble(
    ctx,
    scorer,
    variants,
    chosen,
    others,
    alt_rows,
    *,
    memory_note,
    excluded,
    sweeps,
    status,
    message,
    reliable,
    osf,
) -> Recommendation:
    """Intervals, p_best, rationale and warnings of the chosen rows, as a Recommendation."""
    prof, bare = ctx.profile, bool(getattr(ctx.profile, "bare", False))
    rows = [chosen, *alt_rows]
    lo_by, hi_by = _intervals(ctx, _spec_rows(ctx, rows), 0.9, [r.t for r in rows])
    if chosen.n == 1 and all(o.n == 1 for o in others):  # only one worker searched
        return _one_worker(ctx, scorer, chosen, (lo_by[0], hi_by[0]), reliable, excluded,
                           sweeps, status, message, osf, bare)  # fmt: skip
    p_best = _p_best(ctx, prof, chosen, others[:1], scorer) if not bare else float("nan")
    rationale = _rationale(prof.params, ctx, chosen, others, scorer, memory_note)
    warns = _warnings(prof, ctx, chosen, not reliable, excluded, bare)
    note = None if bare else _interval_note(ctx, chosen, lo_by[0], hi_by[0])
    if note is not None:
        warns.append(note)
    if len(variants) == 1:
        warns.append("only one architecture was searched: p_best does not apply")
    configs = [
        _configuration(ctx, scorer, r, (lo_by[i], hi_by[i]), osf) for i, r in enumerate(rows)
    ]
    if status == "ok":
        message = f"recommended: {configs[0].describe()}"
    return Recommendation(
        configs[0],
        tuple(configs[1:]),
        p_best,
        rationale,
        tuple(warns),
        reliable,
        scorer.objective,
        status,
        message,
        excluded,
        sweeps,
        ctx,
    )


def _one_worker(ctx, scorer, chosen: _Row, interval, reliable, excluded, sweeps, status, message,
                osf, bare) -> Recommendation:  # fmt: skip
    """A recommendation of one worker: nothing is exchanged, so nothing is compared.

    Every architecture and bucket size gives the same step there (forward,
    backward, the update), so the runner-ups, ``p_best`` and the exchange's
    warnings would only repeat it (a new user's trial: 'p_best 50 %', five
    identical runner-ups, DDP settings for a 0 MiB bucket).
    """
    warns = [w for w in _warnings(ctx.profile, ctx, chosen, not reliable, excluded, bare)
             if not w.startswith("extrapolation") and "exchange" not in w]  # fmt: skip
    config = _configuration(ctx, scorer, chosen, interval, osf)
    rationale = (
        "One worker exchanges no gradients: every architecture and bucket size gives the same "
        f"{format_seconds(chosen.t)} step (forward, backward and the update), so there is "
        "nothing to choose; more workers (--max-workers, or max_workers, of 2 or more) are "
        "what an exchange can pay for."
    )
    if status == "ok":
        message = f"recommended: {config.describe()}"
    return Recommendation(config, (), float("nan"), rationale, tuple(warns), reliable,
                          scorer.objective, status, message, excluded, sweeps, ctx)  # fmt: skip


def _sharding_note(workload, chosen: _Row, ranked, osf, memory, g, memory_note="") -> str:
    """Why a sharded architecture won: a replica does not fit (memory), or it is faster (time)."""
    kw = dict(ranks_per_node=g, bucket_bytes=chosen.b, batch_size=chosen.batch)
    replica, _ = memory_need(workload, Variant("ring"), chosen.n, 1, osf, **kw)
    own, _ = memory_need(workload, chosen.variant, chosen.n, 1, osf, **kw)
    replica, own = float(replica), float(own)
    if replica > memory and memory_note:  # memory changed the answer; the note says what
        return (
            f"Sharding is chosen for memory: with the model states sharded, "
            f"{chosen.variant.label} needs {format_bytes(own)} per rank in all (activations "
            f"and buffers included); a full replica (DDP) needs {format_bytes(replica)}, over "
            f"the {format_bytes(memory)} available."
        )
    if replica > memory:  # the best even with unlimited memory, and a replica does not fit
        return (
            f"Sharding is chosen for time, and memory agrees: {chosen.variant.label} would "
            f"win with unlimited memory too, and a full replica of the model states (DDP, "
            f"ring all-reduce) needs {format_bytes(replica)} per device, over the "
            f"{format_bytes(memory)} available ({format_bytes(own)} per rank sharded)."
        )
    rivals = [r for r in ranked if r.variant.name not in _SHARDED]
    than = ""
    if rivals:
        gain = chosen.thr / rivals[0].thr - 1.0
        than = (
            f", {format_percent(gain, 0)} faster than the best replicated architecture, "
            f"{rivals[0].variant.label} ({rivals[0].n} workers)"
        )
    return (
        f"Sharding is chosen for time: a full replica fits ({format_bytes(replica)} per "
        f"device), but {chosen.variant.label} is faster{than} (each rank updates only its "
        f"shard; {format_bytes(own)} per rank)."
    )


def _machinery(r: _Row) -> tuple:
    """Less is simpler: (architecture's :data:`MACHINERY`, dedicated servers, workers)."""
    servers = r.k if r.variant.dedicated_servers else 0
    return (MACHINERY.get(r.variant.name, max(MACHINERY.values())), servers, r.n)


def _prefer_simpler(ctx: _Context, scorer: _Scorer, ranked: list) -> tuple[list, str]:
    """Move the simplest configuration that ties with the lead to the front.

    Two configurations tie when their objectives are within
    :data:`TIE_TOLERANCE` of each other, or when the 90% interval of the lead's
    relative gain over the other, over the profile's parameter draws (the same
    draws for both: paired, as :attr:`Recommendation.p_best` counts them),
    reaches within :data:`TIE_TOLERANCE` of zero. Comparing the two marginal
    90% intervals instead would call every pair a tie under a datasheet prior
    (a 7B model's step: 2–90 s for every architecture), though the draws agree
    on which is faster. Of
    the lead and the rows that tie with it, the one with the least
    :func:`_machinery` goes first (ring/DDP before ZeRO and FSDP, fewer dedicated
    servers, fewer workers); the rest keep their order. The min-workers
    objective already prefers fewer workers and is left as it is.

    Returns:
        ``(ranked, note)``: the reordered rows and a sentence for the rationale
        (``""`` when the lead stays).
    """
    lead = ranked[0]
    if scorer.objective == "min-workers" or len(ranked) < 2:
        return ranked, ""
    simpler = [r for r in ranked[1:] if _machinery(r) < _machinery(lead)]
    if not simpler:
        return ranked, ""
    rows = [lead, *simpler]
    lead_v = abs(_row_key(scorer, lead)[0])
    thr = _draw_throughputs(ctx, ctx.profile, rows)
    ties = []
    for i, r in enumerate(simpler, start=1):
        v = abs(_row_key(scorer, r)[0])
        if abs(v - lead_v) <= TIE_TOLERANCE * max(lead_v, v):
            ties.append(r)
        elif thr is not None:
            # paired: the same parameter draws for both, so what the profile does not
            # know about the cluster moves both alike and only their difference counts
            score = _draw_scores(scorer, [lead, r], thr[:, [0, i]])
            gain = (
                score[:, 0] / score[:, 1] - 1.0
                if scorer.objective != "cost"
                else (score[:, 1] / score[:, 0] - 1.0)
            )
            lo_g, hi_g = np.quantile(gain, [0.05, 0.95])
            if lo_g <= TIE_TOLERANCE and hi_g >= -TIE_TOLERANCE:
                ties.append(r)
    if not ties:
        return ranked, ""
    pick = min(ties, key=_machinery)
    gain = _gain(scorer, lead, pick)
    what = "faster" if scorer.objective != "cost" else "cheaper"
    note = (
        f"Ties go to the simpler architecture: {pick.variant.label} ({pick.n} workers) is "
        f"chosen over {lead.variant.label} ({lead.n} workers), which is predicted "
        f"{format_percent(abs(gain), 1)} {what if gain >= 0 else 'slower'}, within the 90% "
        f"interval of their difference; {pick.variant.label} needs less machinery."
    )
    return [pick, *(r for r in ranked if r is not pick)], note


def _gain(scorer: _Scorer, a: _Row, b: _Row) -> float:
    """How much better ``a`` is than ``b`` on the objective, relative (> 0: a is better)."""
    ka, kb = _row_key(scorer, a)[0], _row_key(scorer, b)[0]
    return (kb - ka) / abs(kb) if kb else 0.0


def _close(k0: tuple, lead: tuple, scorer: _Scorer) -> bool:
    """Whether a variant's best is within 10% of the lead (refinement could change the order)."""
    if scorer.objective == "min-workers":
        return k0[0] == lead[0]
    a, b = abs(k0[0]), abs(lead[0])
    return a <= 1.10 * b if scorer.objective == "cost" else a >= b / 1.10


#: recommend's remedies when nothing fits in memory (its options; ``ddltune run``
#: replaces this sentence with its own advice).
MEMORY_REMEDIES = (
    "Use a device with more memory (--device-memory), more servers, a smaller optimizer "
    "state, a smaller batch with --accumulation-steps, or --activation-checkpointing"
)


def _infeasible(sweeps: dict[str, Sweep], scorer: _Scorer, memory: float):
    """The message and best-possible row when nothing meets the constraints."""
    fits = {k: s for k, s in sweeps.items() if s.feasible.any()}
    if not fits:
        # nothing fits in memory: the configuration that needs the least
        best_need, best = math.inf, None
        for sw in sweeps.values():
            need = np.maximum(sw.worker_bytes, sw.server_bytes)
            i = int(np.argmin(need))
            if need[i] < best_need:
                best_need, best = float(need[i]), _row(sw, i)
        msg = (
            f"no configuration fits in memory: every worker or server needs more than the "
            f"{format_bytes(memory)} per device for parameters, gradients, optimizer state, "
            "buffers and (transformers) activations; "
            f"the least demanding, {best.variant.label} with {best.n} workers"
            + (f" and {best.k} servers" if best.k else "")
            + f", needs {format_bytes(best_need)}. {MEMORY_REMEDIES}"
        )
        return msg, best
    reasons, cands = [], []
    for sw in fits.values():
        idx = np.flatnonzero(sw.feasible)
        cands += [(sw, int(i)) for i in idx[[np.argmax(sw.efficiency[idx])]]]
        cands += [(sw, int(i)) for i in idx[[np.argmax(sw.throughput[idx])]]]
    if scorer.min_efficiency is not None:
        sw, i = max(cands, key=lambda c: c[0].efficiency[c[1]])
        if sw.efficiency[i] < scorer.min_efficiency:
            d = 0  # enough digits that the best shown is below the floor shown
            while d < 4 and format_percent(sw.efficiency[i], d) == format_percent(
                scorer.min_efficiency, d
            ):
                d += 1
            reasons.append(
                f"no configuration reaches the scaling efficiency floor of "
                f"{format_percent(scorer.min_efficiency, 0)}: the best possible is "
                f"{format_percent(sw.efficiency[i], d)} ({sw.label}, {sw.workers[i]} workers)"
            )
            best = _row(sw, i)
    if scorer.target is not None:
        sw, i = max(cands, key=lambda c: c[0].throughput[c[1]])
        if sw.throughput[i] < scorer.target:
            reasons.append(
                f"no configuration reaches {scorer.target:,.0f} samples/s: the most possible is "
                f"{sw.throughput[i]:,.0f} samples/s ({sw.label}, {sw.workers[i]} workers)"
            )
            best = _row(sw, i)
    if not reasons:
        # both constraints reachable separately but not together
        sw, i = max(cands, key=lambda c: c[0].throughput[c[1]])
        best = _row(sw, i)
        reasons.append(
            f"no configuration meets the efficiency floor of {format_percent(scorer.min_efficiency, 0)} and "
            f"{scorer.target:,.0f} samples/s at once: the fastest reaches "
            f"{sw.throughput[i]:,.0f} samples/s at {format_percent(sw.efficiency[i], 0)} efficiency"
        )
    return "; ".join(reasons), best
