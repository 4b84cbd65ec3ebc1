"""End-to-end validation: predicted against measured training iterations.

Microbenchmarks fit the parts of the cost model; only real training steps show
whether the whole prediction is right. :func:`validate` trains a real model
with every configuration (the harness :func:`tuner.validation.measure_configurations`:
ring all-reduce, peer-to-peer, parameter servers, on ``jax.distributed``
processes), predicts each configuration with a profile
(:func:`costmodel.iteration_time`, compute from the single-worker step of the
same model measured in the same run), and scores the predictions
(:func:`compare_steps`):

* **MAPE** — mean over configurations of |predicted − measured| / measured.
* **Kendall τ** — rank agreement of predicted and measured iteration times,
  over the pairs of configurations whose measured times differ by more than
  their spread (the larger of the two step-time IQRs): τ = (concordant −
  discordant) / pairs, which equals ``scipy.stats.kendalltau`` (τ-b) when every
  pair qualifies and there are no ties.
* **Regret** — of the configuration the tuner would pick among those measured
  (the lowest predicted time per sample): its measured time per sample / the
  best measured − 1. Time per sample (iteration time / (workers × batch)) is
  the tuner's objective across worker counts; within one worker count it is
  the iteration time's ratio.

Measured time is the statistic the profile is fitted on (DESIGN.md): the p10 of
the step samples on CPU, the median elsewhere.

Overlap: the cost model's ring all-reduce overlaps each bucket's all-reduce
with the rest of backward. XLA:CPU runs a program's collectives and compute in
sequence (measured: a 512³ matmul chain and a 4 MiB all-reduce in one program
take the sum of their separate times, not the max), so on CPU the harness's
ring is predicted with the same all-reduce costs and no overlap
(``overlap="auto"``); ``overlap=True`` predicts with the stock overlapped ring.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from calibration import (
    Profile,
    RecordWriter,
    compute_contention,
    contended,
    fit_steps,
    run_architecture,
    step_record_run,
    sync_time,
    time_statistics,
)
from costmodel import (
    ClusterParams,
    InputFileError,
    format_bytes,
    iteration_time,
)

from .._defaults import DEFAULT_VALIDATE_BUCKETS
from .._format import format_range
from .._predict import unreliable_warning
from .._uncertainty import takes_batched
from ._harness import (
    StepConfig,
    launch_groups,
    measure_configurations,
    model_workload,
    processes_needed,
    program_key,
)
from ._train_worker import ARCHITECTURES, model_spec

__all__ = [
    "bucket_text",
    "ValidationRow",
    "ValidationResult",
    "load_params",
    "predict_records",
    "rank_agreement",
    "regret",
    "check_validation_plan",
    "compare_steps",
    "pool_same_programs",
    "validate",
    "seed_configurations",
    "seed_experiment",
    "DEFAULT_VALIDATE_BUCKETS",
]


def bucket_text(bucket_bytes: int, same_buckets_at: Sequence[int] = ()) -> str:
    """A bucket cap for people: ``per tensor`` (0), ``16 MiB``, and the caps that make the
    same buckets, ``16 MiB (= 1.5 MiB)``.

    Example:
        >>> bucket_text(16 << 20, [0, 3 << 19])
        '16 MiB (= per tensor, 1.5 MiB)'
    """

    def one(b) -> str:
        return "per tensor" if b == 0 else format_bytes(b)

    same = ", ".join(one(b) for b in same_buckets_at)
    return one(bucket_bytes) + (f" (= {same})" if same else "")


@dataclasses.dataclass(frozen=True)
class ValidationRow:
    """One configuration: measured and predicted iteration time (seconds).

    Attributes:
        architecture, servers, colocated, workers, ranks_per_node, bucket_bytes,
        model, batch_size: the configuration (as in the step record).
        measured_s: the measured statistic of the step samples, s.
        spread_s: the IQR of the step samples, s (run-to-run spread).
        predicted_s: the cost model's iteration time, s.
        interval_low_s, interval_high_s: the profile's 90% prediction
            interval, s (NaN when the profile has no uncertainty, e.g. bare
            parameters).
        same_buckets_at: the other bucket caps, bytes, that make the same
            buckets of this model: the same program, measured and scored as
            this one row (:func:`compare_steps`).
    """

    architecture: str
    servers: int
    colocated: bool
    workers: int
    ranks_per_node: int
    bucket_bytes: int
    model: str
    batch_size: int
    measured_s: float
    spread_s: float
    predicted_s: float
    interval_low_s: float = float("nan")
    interval_high_s: float = float("nan")
    same_buckets_at: tuple[int, ...] = ()

    @property
    def error(self) -> float:
        """predicted / measured − 1 (a fraction; positive: the model is slower)."""
        return self.predicted_s / self.measured_s - 1.0

    @property
    def label(self) -> str:
        """``ps k=1 (dedicated)``, ``ring``, … for tables."""
        if self.architecture == "ps":
            return f"ps k={self.servers} ({'colocated' if self.colocated else 'dedicated'})"
        return self.architecture

    @property
    def bucket_label(self) -> str:
        """The cap for tables: ``per tensor``, ``16 MiB``, ``16 MiB (= 1.5 MiB)`` (:func:`bucket_text`)."""
        return bucket_text(self.bucket_bytes, self.same_buckets_at)

    def to_dict(self) -> dict:
        """JSON-ready: the configuration, ``measured_s``, ``predicted_s``, ``error``, ``spread_s``."""
        d = dataclasses.asdict(self)
        d["same_buckets_at"] = list(self.same_buckets_at)
        d["error"] = self.error
        return d


@dataclasses.dataclass(frozen=True)
class ValidationResult:
    """What :func:`compare_steps` and :func:`validate` return.

    Attributes:
        rows: one :class:`ValidationRow` per configuration; configurations
            that run the same program are one row (:func:`compare_steps`).
        mape: mean absolute percentage error, a fraction.
        mape_by_workers: MAPE per worker count.
        kendall_tau: τ over the distinguishable pairs (NaN if none).
        tau_pairs: distinguishable pairs / all pairs.
        kendall_tau_all: ``scipy.stats.kendalltau`` over all configurations (τ-b).
        regret: measured time per sample of the predicted-best configuration /
            the best measured − 1.
        regret_by_workers: the same within each worker count (iteration time).
        chosen, best: indices (into rows) of the predicted-best and measured-best
            configurations (time per sample).
        baseline_step_s: the measured single-worker step (the compute the
            predictions use), s.
        statistic: the sample statistic compared (``p10`` or ``median``).
        overlap: whether the ring was predicted with overlap.
        interval_coverage: fraction of configurations whose measured time lies
            in the profile's 90% prediction interval (NaN without intervals).
        interval_half_width: the median over configurations of the interval's
            half-width, (high − low) / 2, over the prediction (NaN without
            intervals): how much the band claims.
        warnings: what the profile never measured that the predictions need
            (process counts, message sizes): those predictions extrapolate.
        emulated: the emulated cluster the steps ran in (the step records'
            ``"emulated"``: nodes, ranks_per_node, rate_bits_per_s, …), or
            ``None`` for plain local processes.
        step_fit: how the step terms of the predictions were set: ``"profile"``
            (the profile's, as it is) or ``"cross"`` (fitted on the other
            worker counts' steps: :func:`compare_steps`).
        step_fit_note: one sentence for people: how the predictions' step
            terms were set and what that makes of the scores (in-sample where
            the profile was fitted on these steps; the terms' prior where
            one worker count cannot be cross-fitted); "" when nothing needs saying.
    """

    rows: list[ValidationRow]
    mape: float
    mape_by_workers: dict[int, float]
    kendall_tau: float
    tau_pairs: tuple[int, int]
    kendall_tau_all: float
    regret: float
    regret_by_workers: dict[int, float]
    chosen: int
    best: int
    baseline_step_s: float
    statistic: str
    overlap: bool
    interval_coverage: float = float("nan")
    interval_half_width: float = float("nan")
    warnings: tuple[str, ...] = ()
    emulated: dict | None = None
    step_fit: str = "profile"
    step_fit_note: str = ""

    def to_dict(self) -> dict:
        """``{"rows": [...], "mape", "kendall_tau", "regret", …}`` (fractions, not percents)."""
        return {
            "rows": [r.to_dict() for r in self.rows],
            "mape": self.mape,
            "kendall_tau": self.kendall_tau,
            "regret": self.regret,
            "mape_by_workers": {str(k): v for k, v in self.mape_by_workers.items()},
            "kendall_tau_pairs": list(self.tau_pairs),
            "kendall_tau_all": self.kendall_tau_all,
            "regret_by_workers": {str(k): v for k, v in self.regret_by_workers.items()},
            "chosen": self.rows[self.chosen].to_dict() if self.rows else None,
            "best": self.rows[self.best].to_dict() if self.rows else None,
            "baseline_step_s": self.baseline_step_s,
            "statistic": self.statistic,
            "overlap": self.overlap,
            "interval_coverage": self.interval_coverage,
            "interval_half_width": self.interval_half_width,
            "warnings": list(self.warnings),
            "step_fit": self.step_fit,
            "step_fit_note": self.step_fit_note,
        }


# --------------------------------------------------------------------------- profile


def load_params(profile):
    """The :class:`costmodel.ClusterParams` of a profile, a path to one, or params themselves.

    Accepts a ``calibration.Profile`` (its ``.params``), a
    :class:`costmodel.ClusterParams`, or a path to a profile JSON file (read
    with ``calibration.Profile.load`` when available; a file holding
    ``ClusterParams.to_dict()``, bare or under ``"params"``, is also accepted).

    Raises:
        FileNotFoundError: the path does not exist.
        InputFileError: the file is not a profile (naming the file).
        TypeError: an object of another type.
    """
    return _resolve(profile)[0]


def _resolve(profile):
    """``(ClusterParams, Profile or None)``: see :func:`load_params`."""
    if isinstance(profile, ClusterParams):
        return profile, None
    if hasattr(profile, "params") and isinstance(profile.params, ClusterParams):
        return profile.params, (profile if hasattr(profile, "interval") else None)
    if not isinstance(profile, str | os.PathLike):
        raise TypeError(
            f"profile must be a calibration.Profile, ClusterParams or a path, got "
            f"{type(profile).__name__}"
        )
    path = os.fspath(profile)
    if not os.path.exists(path):
        raise FileNotFoundError(2, "No such file or directory", path)
    try:
        with open(path, encoding="utf-8") as fh:
            first = fh.readline()
            rest = fh.read()
    except UnicodeDecodeError:
        raise InputFileError(path, None, "not a text file, so not a ddltune profile") from None
    try:
        doc = json.loads(first + rest)
    except json.JSONDecodeError as e:
        try:  # a measurements file: one JSON object per line
            head = json.loads(first)
        except json.JSONDecodeError:
            head = None
        if isinstance(head, dict) and head.get("kind") in ("collective", "compute", "step"):
            raise InputFileError(
                path,
                1,
                "this is a measurements file (JSON Lines), not a profile: fit one with "
                "'ddltune calibrate FILE -o profile.json'",
            ) from None
        raise InputFileError(
            path, e.lineno, f"not valid JSON: {e.msg} (column {e.colno})"
        ) from None
    if isinstance(doc, dict) and ("schema" in doc or "kind" in doc):
        # A profile file: load it whole (schema, parameters, covariance); its
        # own errors say what is wrong, never a fallback that drops them.
        try:
            prof = Profile.load(path)
        except InputFileError:
            raise
        except (ValueError, KeyError, TypeError) as e:
            raise InputFileError(path, None, f"not a usable ddltune profile: {e}") from None
        return prof.params, prof
    d = doc.get("params", doc) if isinstance(doc, dict) else doc
    try:
        return ClusterParams.from_dict(d), None
    except ValueError as e:
        raise InputFileError(path, None, f"not a ddltune profile: {e}") from None


# --------------------------------------------------------------------------- metrics


def rank_agreement(measured, predicted, spread) -> tuple[float, int, int]:
    """Kendall τ over the pairs whose measured times differ by more than their spread.

    A pair (i, j) counts when |mᵢ − mⱼ| > max(sᵢ, sⱼ); it is concordant when
    the prediction orders it the same way. τ = (concordant − discordant) /
    counted pairs (a predicted tie counts 0).

    Args:
        measured, predicted, spread: 1-D arrays of equal length N (seconds;
            spread ≥ 0).

    Returns:
        ``(tau, counted pairs, all pairs)``; τ is NaN when no pair counts.

    Raises:
        ValueError: on arrays of different lengths.

    Example:
        >>> rank_agreement([1.0, 2.0, 3.0], [1.1, 2.5, 2.0], [0.0, 0.0, 0.0])[0]
        0.3333333333333333
        >>> rank_agreement([1.0, 1.05], [1.0, 2.0], [0.1, 0.1])
        (nan, 0, 1)
    """
    m, p, s = (np.asarray(a, dtype=np.float64).ravel() for a in (measured, predicted, spread))
    if not (len(m) == len(p) == len(s)):
        raise ValueError(
            f"measured, predicted and spread must have equal lengths, got {len(m)}, {len(p)}, {len(s)}"
        )
    i, j = np.triu_indices(len(m), k=1)
    dm, dp = m[i] - m[j], p[i] - p[j]
    ok = np.abs(dm) > np.maximum(s[i], s[j])
    total = int(len(i))
    if not ok.any():
        return float("nan"), 0, total
    agree = np.sign(dm[ok]) * np.sign(dp[ok])
    return float(agree.sum() / ok.sum()), int(ok.sum()), total


def regret(measured, predicted) -> tuple[float, int, int]:
    """Regret of picking the lowest predicted value: measured[pick] / min(measured) − 1.

    Returns:
        ``(regret, index picked, index of the measured best)``.

    Raises:
        ValueError: on empty or unequal inputs.

    Example:
        >>> regret([2.0, 1.0, 1.5], [1.0, 1.2, 3.0])
        (1.0, 0, 1)
    """
    m, p = np.asarray(measured, dtype=np.float64), np.asarray(predicted, dtype=np.float64)
    if m.size == 0 or m.shape != p.shape:
        raise ValueError(
            f"measured and predicted must be non-empty and alike, got {m.shape}, {p.shape}"
        )
    pick, best = int(np.argmin(p)), int(np.argmin(m))
    return float(m[pick] / m[best] - 1.0), pick, best


# --------------------------------------------------------------------------- prediction


def _statistic(rec: dict, statistic: str | None) -> str:
    if statistic is not None:
        return statistic
    return "p10" if rec.get("backend") == "cpu" else "median"


def _value(rec: dict, statistic: str) -> float:
    ts = rec["time_s"]
    if statistic in ts:
        return float(ts[statistic])
    samples = rec.get("samples_s")
    if samples and statistic in ("p10", "median", "min", "mean"):
        q = {"p10": 0.1, "median": 0.5, "min": 0.0}.get(statistic)
        return float(np.mean(samples) if q is None else np.quantile(samples, q))
    raise ValueError(
        f"record {rec.get('_file', '')}:{rec.get('_line', '')} has no {statistic!r} statistic"
    )


def _spread(rec: dict) -> float:
    ts = rec["time_s"]
    if "iqr" in ts:
        return float(ts["iqr"])
    samples = rec.get("samples_s") or []
    if len(samples) >= 2:
        q1, q3 = np.quantile(samples, [0.25, 0.75])
        return float(q3 - q1)
    return 0.0


def predict_records(
    params,
    records: Sequence[dict],
    baseline_step_s: float,
    *,
    overlap: bool = True,
    profile=None,
    level: float = 0.9,
):
    """Predicted iteration time (s) of each ``kind: "step"`` record's configuration.

    Compute comes from ``baseline_step_s``, the measured single-worker step of
    the same model at the records' batch size (``Workload.with_step_time``),
    times :func:`calibration.compute_contention` where emulated nodes share a
    CPU, which slows the cores' part of the communication alike
    (:meth:`costmodel.ClusterParams.with_core_contention`); the workload's
    tensors and FLOPs (which only say when each gradient is ready) come from
    the record's ``model_spec`` (:func:`tuner.validation.model_workload`).

    Args:
        params: :class:`costmodel.ClusterParams`.
        records: step records of one model and batch size (from the harness).
        baseline_step_s: single-worker step time, s > 0.
        overlap: predict all-reduce with overlap of backward (the cost model's
            ring); ``False`` for runtimes that run collectives after compute.
        profile: a ``calibration.Profile`` (optional): also return its
            ``level`` prediction interval of every prediction
            (``Profile.interval``: parameter covariance and held-out spread).
        level: coverage of the interval, in (0, 1).

    Returns:
        float64 array (len(records),), seconds; with ``profile``, the tuple
        ``(predicted, low, high)`` of such arrays.

    Raises:
        ValueError: on a record without ``model_spec``, records of different
            models or batch sizes, or a baseline that is not > 0.
    """
    if not (
        isinstance(baseline_step_s, int | float)
        and math.isfinite(baseline_step_s)
        and baseline_step_s > 0
    ):
        raise ValueError(f"baseline_step_s must be a finite time > 0 s, got {baseline_step_s!r}")
    if not records:
        empty = np.zeros((0,))
        return (empty, empty, empty) if profile is not None else empty
    specs = {json.dumps(r.get("model_spec"), sort_keys=True) for r in records}
    batches = {r["batch_size"] for r in records}
    if None in [r.get("model_spec") for r in records]:
        raise ValueError("step records need 'model_spec' (written by the training harness)")
    if len(specs) != 1 or len(batches) != 1:
        raise ValueError("records of several models or batch sizes: compare each separately")
    spec = records[0]["model_spec"]
    workload = model_workload(spec, step_time_s=float(baseline_step_s))
    out, low, high = (np.zeros(len(records)) for _ in range(3))
    groups: dict[tuple, list[int]] = {}
    for i, r in enumerate(records):
        key = (r["architecture"], bool(r.get("colocated", False)), compute_contention(r))
        groups.setdefault(key, []).append(i)
    for (name, colocated, share), idx in groups.items():
        fn = _iteration_fn(
            contended(workload, share),
            run_architecture(name, colocated, overlap=overlap),
            [records[i] for i in idx],
            share,
        )
        out[idx] = np.asarray(fn(params), dtype=np.float64)
        if profile is not None:  # every perturbed parameter set in one numpy call, where it can
            batched = takes_batched(profile)
            lo, hi = (
                profile.interval(fn, level, batched=True)
                if batched
                else profile.interval(fn, level)
            )
            low[idx], high[idx] = np.asarray(lo, np.float64), np.asarray(hi, np.float64)
    return (out, low, high) if profile is not None else out


def _iteration_fn(workload, arch, sel: Sequence[dict], contention: float = 1.0):
    """``params -> iteration times (s)`` of the records ``sel`` (one architecture), batched;
    their communication under the cores' ``contention``
    (:meth:`costmodel.ClusterParams.with_core_contention`), plus the small all-reduces
    a record declares the harness ran (:func:`calibration.sync_time`)."""
    n = np.array([r["workers"] for r in sel], dtype=np.float64)
    g = np.array([r.get("ranks_per_node", r["workers"]) for r in sel], dtype=np.float64)
    k = np.array([max(r.get("servers", 1), 1) for r in sel], dtype=np.float64)
    bb = np.array([r.get("bucket_bytes", 0) for r in sel], dtype=np.float64)
    batch = np.array([r["batch_size"] for r in sel], dtype=np.float64)

    syncs = [r.get("sync") for r in sel]

    def fn(p):
        p = p.with_core_contention(contention)
        t = iteration_time(
            p, workload, arch, n, ranks_per_node=g, servers=k, bucket_bytes=bb, batch_size=batch
        ).iteration_s
        return t + sync_time(p, syncs)  # the harness's own small all-reduces (its "sync")

    return fn


def _check_step_specs(steps: list[dict]) -> None:
    """Every step record names a valid, bounded ``model_spec``; else an error at its file and line."""
    for r in steps:
        where = (r.get("_file"), r.get("_line"))
        spec = r.get("model_spec")
        try:
            if not isinstance(spec, dict):
                raise ValueError(
                    "a step record needs 'model_spec' (the model's sizes, written by the training "
                    f"harness), got {'none' if spec is None else type(spec).__name__}"
                )
            model_spec(spec)
        except ValueError as e:
            if where[0] is None:
                raise
            raise InputFileError(str(where[0]), where[1], f"model_spec: {e}") from None
        # the one conversion of a step record checks its fields, ranges and consistency
        step_record_run(r, 1.0, path="<step records>" if where[0] is None else str(where[0]),
                        line=where[1])  # fmt: skip


def compare_steps(
    profile,
    records: Iterable[dict],
    *,
    statistic: str | None = None,
    overlap: bool | str = "auto",
    step_fit: str = "auto",
) -> ValidationResult:
    """Score a profile's predictions against measured step records.

    Args:
        profile: a ``calibration.Profile``, :class:`costmodel.ClusterParams` or a path.
        records: ``kind: "step"`` records of one model (others are ignored):
            exactly one with ``workers == 1`` (the single-worker baseline) and
            the configurations to compare (workers ≥ 2).
        statistic: the sample statistic to compare (``p10``, ``median``, …);
            default p10 on CPU, median elsewhere (the calibration's choice).
        overlap: ``True``/``False``, or ``"auto"``: no overlap on CPU (XLA:CPU
            runs collectives in sequence with compute), overlap elsewhere.
        step_fit: ``"profile"``: predict with the profile as it is;
            ``"cross"``: the terms a training step has and microbenchmarks do
            not (:data:`calibration.STEP_TERMS`: communication in a step over
            its microbenchmark, overlap interference, per-step overhead)
            fitted (:func:`calibration.fit_steps`) on the baseline and the
            steps of the *other* worker counts, each count predicted from
            those — leave one worker count out, so every prediction and its
            interval is out of sample; ``"auto"`` (default): ``"cross"`` for a
            :class:`calibration.Profile` without step terms of its own and
            steps at two or more worker counts, else ``"profile"``. Without
            steps the profile's interval carries those terms' prior (×3 on the
            communication), which is honest but no test of the model.

    Configurations that run the same program — the same architecture,
    servers, worker and process counts and place, whose bucket caps cut the
    model's tensors into the same buckets (:func:`pool_same_programs`) — are
    one row: the model predicts them alike, and scoring them apart would rank
    noise between identical programs.

    Returns:
        A :class:`ValidationResult`.

    Raises:
        ValueError: no baseline record, several baselines of different
            models, or no configuration to compare.
    """
    params, prof = _resolve(profile)
    records = list(records)
    steps = [r for r in records if r.get("kind") == "step"]
    if not steps:
        kinds = sorted({str(r.get("kind")) for r in records})
        raise ValueError(
            "no training-step records (kind 'step') to compare"
            + (f"; these are {', '.join(kinds)} records" if kinds else "")
            + ": give a file written by 'ddltune validate --measurements'"
        )
    _check_step_specs(steps)
    base = [r for r in steps if r["workers"] == 1]
    rows_in = [r for r in steps if r["workers"] >= 2]
    if not base:
        raise ValueError(
            "no single-worker step record (workers = 1): the predictions need the measured "
            "single-worker step of the same model"
        )
    if not rows_in:
        raise ValueError("no step record with workers ≥ 2 to compare")
    rows_in = pool_same_programs(rows_in)
    models = {r["model"] for r in rows_in} | {base[-1]["model"]}
    if len(models) != 1:
        raise ValueError(f"records of several models ({', '.join(sorted(models))}); give one")
    stat = _statistic(base[-1], statistic)
    if overlap == "auto":
        overlap = base[-1].get("backend") != "cpu"
    baseline = _value(base[-1], stat)
    low = high = [float("nan")] * len(rows_in)
    fit_mode = _step_fit_mode(step_fit, prof, rows_in)
    if fit_mode == "cross":
        predicted, low, high = _cross_fitted(prof, base[-1], rows_in, baseline, stat, bool(overlap))
    elif prof is not None:
        predicted, low, high = predict_records(
            params, rows_in, baseline, overlap=bool(overlap), profile=prof
        )
    else:
        predicted = predict_records(params, rows_in, baseline, overlap=bool(overlap))
    rows = [
        ValidationRow(
            r["architecture"],
            int(r.get("servers", 0)),
            bool(r.get("colocated", False)),
            int(r["workers"]),
            int(r.get("ranks_per_node", r["workers"])),
            int(r.get("bucket_bytes", 0)),
            r["model"],
            int(r["batch_size"]),
            _value(r, stat),
            _spread(r),
            float(p),
            float(lo),
            float(hi),
            tuple(int(b) for b in r.get("same_buckets_at", ())),
        )
        for r, p, lo, hi in zip(rows_in, predicted, low, high, strict=True)
    ]
    result = _score(rows, baseline, stat, bool(overlap))
    emulated = next((r["emulated"] for r in rows_in if isinstance(r.get("emulated"), dict)), None)
    return dataclasses.replace(
        result,
        warnings=_coverage_warnings(prof, rows_in),
        emulated=emulated,
        step_fit=fit_mode,
        step_fit_note=_step_fit_note(fit_mode, prof, rows_in),
    )


def pool_same_programs(records: Sequence[dict]) -> list[dict]:
    """Step records of configurations that run the same program, pooled into one each.

    Two records run the same program when their architecture, servers,
    placement, P2P exchange, worker, process and per-node counts, batch,
    emulated cluster and model match and their bucket caps make the same
    buckets (:func:`tuner.validation.program_key`). The pooled record is the
    one with the largest cap; its samples are all of theirs (each a separate
    measurement: ``time_s`` recomputed over them, ``repeats`` summed) and
    ``same_buckets_at`` names the other caps. A record whose configuration is
    not one the harness runs is kept as it is. Order: where each program first
    appears.

    Args:
        records: ``kind: "step"`` records with ``model_spec``.

    Returns:
        New list; records that pool nothing are returned unchanged (not copied).

    Example:
        >>> r = {"architecture": "ring", "workers": 2, "processes": 2, "batch_size": 8,
        ...      "model_spec": {"model": "cnn"}, "samples_s": [1.0], "time_s": {}}
        >>> [p["bucket_bytes"] for p in pool_same_programs(
        ...     [r | {"bucket_bytes": 3 << 19}, r | {"bucket_bytes": 16 << 20}])]
        [16777216]
    """
    groups: dict[tuple, list[dict]] = {}
    for i, r in enumerate(records):
        try:
            cfg = StepConfig(
                r["architecture"], int(r.get("bucket_bytes", 0)), int(r.get("servers", 0)),
                bool(r.get("colocated", False)), r.get("p2p_exchange", "all_to_all"),
            )  # fmt: skip
            key = (
                program_key(cfg, r["model_spec"]),
                int(r["workers"]),
                int(r.get("processes", r["workers"])),
                int(r.get("ranks_per_node", r["workers"])),
                int(r["batch_size"]),
                json.dumps(r.get("emulated"), sort_keys=True),
                json.dumps(r["model_spec"], sort_keys=True),
            )
        except (KeyError, TypeError, ValueError):
            key = ("as it is", i)
        groups.setdefault(key, []).append(r)
    out = []
    for same in groups.values():
        keep = max(same, key=lambda r: int(r.get("bucket_bytes", 0)))
        if len(same) == 1:
            out.append(keep)
            continue
        caps = {int(r.get("bucket_bytes", 0)) for r in same}
        caps |= {int(b) for r in same for b in r.get("same_buckets_at", ())}
        pooled = dict(keep)
        pooled["same_buckets_at"] = sorted(caps - {int(keep.get("bucket_bytes", 0))})
        if all(r.get("samples_s") for r in same):
            samples = [float(t) for r in same for t in r["samples_s"]]
            pooled["samples_s"] = samples
            pooled["time_s"] = time_statistics(samples)
            pooled["repeats"] = sum(int(r.get("repeats", 1)) for r in same)
        out.append(pooled)
    return out


def _step_fit_note(mode: str, prof, rows_in: Sequence[dict]) -> str:
    """What :attr:`ValidationResult.step_fit_note` says (see there)."""
    if mode == "cross":
        return (
            "the profile with its step terms (communication in a step over its microbenchmark, "
            "interference, per-step overhead) fitted on the baseline and the other worker "
            "counts' steps: each worker count is predicted out of sample"
        )
    if not isinstance(prof, Profile):
        return ""
    steps = (prof.fit or {}).get("steps")
    if steps:
        files = ", ".join(steps.get("files") or []) or "a steps file"
        return (
            f"the profile as it is, with the step terms it was fitted on ({steps['runs']} "
            f"training runs from {files}): where those are these steps, the scores are "
            "in-sample, not a validation; give the profile calibrated without --steps to "
            "predict each worker count out of sample"
        )
    counts = sorted({int(r["workers"]) for r in rows_in})
    return (
        f"the profile as it is: steps at one worker count ({counts[0]}) cannot be fitted on "
        "the others, so the step terms (communication in a step over its microbenchmark, "
        "interference, per-step overhead) keep their prior, and the 90% intervals carry its "
        "width (×3 on the communication)"
        if len(counts) == 1
        else "the profile as it is (step_fit='profile')"
    )


def _step_fit_mode(step_fit: str, prof, rows_in: Sequence[dict]) -> str:
    """``"cross"`` or ``"profile"`` (see :func:`compare_steps`); ValueError on another value."""
    if step_fit not in ("auto", "cross", "profile"):
        raise ValueError(f"step_fit must be 'auto', 'cross' or 'profile', got {step_fit!r}")
    counts = {int(r["workers"]) for r in rows_in}
    possible = isinstance(prof, Profile) and len(counts) >= 2
    if step_fit == "cross" and not possible:
        raise ValueError(
            "step_fit='cross' needs a calibration.Profile and steps at two or more worker "
            f"counts (got {len(counts)})"
        )
    if step_fit == "auto":
        return "cross" if possible and "steps" not in (prof.fit or {}) else "profile"
    return step_fit


def _as_run(r: dict, stat: str, line: int) -> dict:
    """A step record as a training run of :func:`calibration.fit_steps`, timed by ``stat``
    (its file and line where :func:`calibration.read_records` read it, else ``line``)."""
    return step_record_run(
        r, _value(r, stat), path=r.get("_file", "<step records>"), line=r.get("_line", line)
    )


def _cross_fitted(prof, base: dict, rows_in: Sequence[dict], baseline: float, stat: str,
                  overlap: bool):  # fmt: skip
    """Predictions and 90% intervals of ``rows_in``, each worker count from the others' steps."""
    out = [np.zeros(len(rows_in)) for _ in range(3)]
    for w in sorted({int(r["workers"]) for r in rows_in}):
        train = [r for r in rows_in if int(r["workers"]) != w]
        fitted = _fit_steps_of(prof, base, train, stat, overlap)
        idx = [i for i, r in enumerate(rows_in) if int(r["workers"]) == w]
        got = predict_records(
            fitted.params, [rows_in[i] for i in idx], baseline, overlap=overlap, profile=fitted
        )
        for o, g in zip(out, got, strict=True):
            o[idx] = g
    return tuple(out)


def _fit_steps_of(prof, base: dict, rows_in: Sequence[dict], stat: str, overlap: bool,
                  reference=None):  # fmt: skip
    """``prof`` with its step terms fitted on the baseline record and ``rows_in``."""
    workload = model_workload(base["model_spec"], step_time_s=_value(base, stat))
    runs = [_as_run(r, stat, i) for i, r in enumerate([base, *rows_in])]
    return fit_steps(runs, workload, prof, overlap=overlap, reference=reference)


def can_fit_step_records(records: Iterable[dict]) -> bool:
    """Whether :func:`fit_step_records` has what it fits: among ``records``' steps, one at
    a single worker (the compute baseline) and one at ≥ 2 workers (communication)."""
    workers = [r.get("workers") for r in records if r.get("kind") == "step"]
    return 1 in workers and any(isinstance(w, int | float) and w >= 2 for w in workers)


def fit_step_records(
    profile, records: Iterable[dict], *, statistic: str | None = None,
    overlap: bool | str = "auto", reference=None,
):  # fmt: skip
    """``profile`` with the step terms fitted on validate's step records of one model.

    What :func:`compare_steps` fits in each fold of ``step_fit="cross"``, on
    every record at once: the terms a training step has and microbenchmarks do
    not (:data:`calibration.STEP_TERMS`), by :func:`calibration.fit_steps`,
    with the workload's compute set to the measured single-worker step. ``ddltune
    run --validate`` fits its own validation this way before it recommends, so
    its interval carries what the steps measured, not the terms' prior.

    Args:
        profile: a :class:`calibration.Profile` (its values and covariance are the
            terms' prior).
        records: ``kind: "step"`` records of one model (others are ignored), one
            with ``workers == 1`` and at least one with ``workers ≥ 2``.
        statistic, overlap: as :func:`compare_steps`.
        reference: as :func:`calibration.fit_steps` (chained fits, one model
            after another, pass the profile they started from).

    Returns:
        A new :class:`calibration.Profile` (see :func:`calibration.fit_steps`).

    Raises:
        ValueError: a profile that is not a :class:`calibration.Profile`, no
            baseline, no other step, or records of several models.
    """
    _, prof = _resolve(profile)
    if prof is None:
        raise ValueError("fit_step_records needs a calibration.Profile (its covariance)")
    steps = [r for r in records if r.get("kind") == "step"]
    _check_step_specs(steps)
    if not can_fit_step_records(steps):
        raise ValueError("fitting step terms needs a single-worker step and one at ≥ 2 workers")
    base = [r for r in steps if r["workers"] == 1]
    rows_in = [r for r in steps if r["workers"] >= 2]
    if len({json.dumps(r.get("model_spec"), sort_keys=True) for r in steps}) != 1:
        raise ValueError("step records of several models; fit them one model at a time")
    stat = _statistic(base[-1], statistic)
    if overlap == "auto":
        overlap = base[-1].get("backend") != "cpu"
    return _fit_steps_of(prof, base[-1], rows_in, stat, bool(overlap), reference)


def _coverage_warnings(prof, records: Sequence[dict]) -> tuple[str, ...]:
    """What the configurations need that the profile never measured (its ``measured_ranges``)."""
    ranges = getattr(prof, "measured_ranges", None) or {}
    out = []
    unreliable = unreliable_warning(prof)
    if unreliable:
        out.append(unreliable)
    ranks = ranges.get("num_ranks")
    if ranks:
        # Processes of the run (workers + dedicated servers); older records lack it.
        procs = sorted(
            {int(r.get("processes", r.get("ranks_per_node", r["workers"]))) for r in records}
        )
        outside = [p for p in procs if not ranks[0] <= p <= ranks[1]]
        if outside:
            out.append(
                f"the profile measured {format_range(*ranks)} ranks, but configurations here run "
                f"{', '.join(map(str, outside))} processes (dedicated servers count): their "
                "predictions extrapolate; collect with --workers covering every process count"
            )
    sizes = ranges.get("message_bytes")
    if sizes:
        spec = records[0].get("model_spec") if records else None
        grad = 0
        if spec is not None:
            grad = int(model_workload(spec).total_param_bytes)
        if grad > sizes[1] * 1.05:
            out.append(
                f"the model's gradients are {format_bytes(grad)} but the profile measured messages "
                f"up to {format_bytes(sizes[1])}: larger buckets extrapolate"
            )
    return tuple(out)


def _score(rows: list[ValidationRow], baseline: float, stat: str, overlap: bool):
    """The metrics of the rows (see :class:`ValidationResult`).

    scipy.stats is imported here, as :mod:`calibration` does, so that
    importing :mod:`tuner` does not load it; only scoring needs it.
    """
    from scipy.stats import kendalltau

    m = np.array([r.measured_s for r in rows])
    p = np.array([r.predicted_s for r in rows])
    s = np.array([r.spread_s for r in rows])
    ape = np.abs(p - m) / m
    by_n: dict[int, list[int]] = {}
    for i, r in enumerate(rows):
        by_n.setdefault(r.workers, []).append(i)
    tau, used, total = rank_agreement(m, p, s)
    tau_all = float(kendalltau(m, p).statistic) if len(rows) >= 2 else float("nan")
    per_sample = np.array([r.workers * r.batch_size for r in rows], dtype=np.float64)
    reg, chosen, best = regret(m / per_sample, p / per_sample)
    lo = np.array([r.interval_low_s for r in rows])
    hi = np.array([r.interval_high_s for r in rows])
    known = np.isfinite(lo) & np.isfinite(hi)
    coverage = float(np.mean((m >= lo) & (m <= hi))) if known.all() and rows else float("nan")
    half = float(np.median((hi - lo) / 2 / p)) if known.all() and rows else float("nan")
    return ValidationResult(
        rows=rows,
        mape=float(ape.mean()),
        mape_by_workers={n: float(ape[i].mean()) for n, i in sorted(by_n.items())},
        kendall_tau=tau,
        tau_pairs=(used, total),
        kendall_tau_all=tau_all,
        regret=reg,
        regret_by_workers={n: regret(m[i], p[i])[0] for n, i in sorted(by_n.items())},
        chosen=chosen,
        best=best,
        baseline_step_s=baseline,
        statistic=stat,
        overlap=overlap,
        interval_coverage=coverage,
        interval_half_width=half,
    )


def validate(
    profile,
    model: dict | str = "mlp",
    workers: Sequence[int] = (2, 3, 4),
    *,
    architectures: Sequence[str] = ("ps", "p2p", "ring"),
    servers: Sequence[int] = (1,),
    colocated: bool = False,
    bucket_bytes: Sequence[int] = DEFAULT_VALIDATE_BUCKETS,
    steps: int = 10,
    warmup_steps: int = 2,
    repeats: int = 3,
    measurements: str | os.PathLike | None = None,
    overwrite: bool = False,
    statistic: str | None = None,
    overlap: bool | str = "auto",
    timeout_s: float = 180.0,
    on_measurement: Callable | None = None,
    emulate=None,
    force: bool = False,
) -> ValidationResult:
    """Train a real model with every configuration, predict each with ``profile``, compare.

    Runs the single-worker step and then one launch per (worker count,
    process count) of the training harness (:func:`tuner.validation.measure_configurations`),
    for every architecture × servers × bucket size, on local CPU processes.

    Args:
        profile: a ``calibration.Profile``, :class:`costmodel.ClusterParams` or a path.
        model: ``"mlp"``, ``"cnn"`` or a spec dict with sizes.
        workers: worker counts, each ≥ 2.
        architectures: subset of ``ps``, ``p2p``, ``ring``, ``hierarchical``
            (the ring's buckets all-reduced within each host, across hosts and
            within the host again: the emulated cluster's nodes with
            ``NODESxRANKS`` ranks each, or the hosts of a launcher's job).
        servers: parameter-server counts k ≥ 1 (ps only).
        colocated: ps servers on workers (else dedicated extra processes).
        bucket_bytes: bucket caps, bytes ≥ 0.
        steps, warmup_steps: timed and untimed steps per configuration and round.
        repeats: rounds over all configurations of a launch (interleaved, so
            that other load on the machine spreads over all of them); the
            single-worker step is measured before and after everything else.
        measurements: also write every step record there (JSON Lines).
        overwrite: replace an existing ``measurements`` file.
        statistic, overlap: see :func:`compare_steps`.
        timeout_s: a worker silent this long stops the run, seconds.
        on_measurement: called with each :class:`tuner.validation.StepMeasurement`.
        emulate: a started :class:`launch.EmulatedCluster` to train in
            (:func:`launch.launch_local`); step records get ``"emulated"``.
        force: start more local processes than 4 per CPU core (refused
            otherwise, before the first launch: they would only time the scheduler).

    Returns:
        A :class:`ValidationResult`.

    Raises:
        ValueError: on a bad argument (named).
        FileExistsError: ``measurements`` exists and ``overwrite`` is false.
        LaunchError: a training run failed.
    """
    params, prof = _resolve(profile)  # fail on a bad profile before training
    configs = _configurations(architectures, servers, colocated, bucket_bytes)
    check_validation_plan(  # every launch fits, before the first one starts
        workers,
        architectures=architectures,
        servers=servers,
        colocated=colocated,
        bucket_bytes=bucket_bytes,
        emulated_ranks=None if emulate is None else emulate.spec.num_ranks,
        emulate_text=None if emulate is None else emulate.spec.text,
        force=force,
        model=model,
        ranks_per_node=None if emulate is None else emulate.spec.ranks_per_node,
    )
    writer = None
    if measurements is not None:
        writer = RecordWriter(measurements, "overwrite" if overwrite else "new")
    try:
        base, got = measure_configurations(
            model, workers, configs, steps=steps, warmup_steps=warmup_steps, repeats=repeats,
            timeout_s=timeout_s, writer=writer, on_measurement=on_measurement, emulate=emulate,
        )  # fmt: skip
    finally:
        if writer is not None:
            writer.close()
    return compare_steps(
        prof if prof is not None else params,
        [base.record] + [m.record for m in got],
        statistic=statistic,
        overlap=overlap,
    )


def seed_configurations(bucket_bytes: Sequence[int]) -> tuple[list[StepConfig], list[StepConfig]]:
    """The seed paper's configurations: ``(on the workers' processes, with a dedicated server)``.

    1 parameter server colocated on a worker, 2 colocated (skipped where there
    are fewer workers), P2P — each at the largest bucket cap — and the ring at
    every cap; and 1 dedicated parameter server (an extra process) at the
    largest cap. The two lists run as separate launch plans because the
    dedicated server needs one process more than the workers.

    Example:
        >>> a, b = seed_configurations([0, 1 << 20])
        >>> [(c.architecture, c.servers, c.colocated, c.bucket_bytes) for c in a + b][:4]
        [('ps', 1, True, 1048576), ('ps', 2, True, 1048576), ('p2p', 0, False, 1048576), ('ring', 0, False, 0)]
    """
    caps = sorted({int(b) for b in bucket_bytes})
    if not caps or caps[0] < 0:
        raise ValueError(f"bucket_bytes must be sizes ≥ 0 bytes, got {list(bucket_bytes)}")
    big = caps[-1]
    shared = [
        StepConfig("ps", big, 1, True),
        StepConfig("ps", big, 2, True),
        StepConfig("p2p", big),
    ]
    shared += [StepConfig("ring", b) for b in caps]
    return shared, [StepConfig("ps", big, 1, False)]


def seed_experiment(
    profile,
    workers: Sequence[int],
    *,
    processes: int,
    model: dict | str = "mlp",
    bucket_bytes: Sequence[int] = DEFAULT_VALIDATE_BUCKETS,
    steps: int = 5,
    warmup_steps: int = 2,
    repeats: int = 2,
    measurements: str | os.PathLike | None = None,
    overwrite: bool = False,
    timeout_s: float = 300.0,
    emulate=None,
) -> ValidationResult:
    """The seed paper's experiment: every architecture at every worker count, against the model.

    Trains ``model`` with :func:`seed_configurations` at each worker count
    (one single-worker baseline for all of them), the dedicated server only
    where ``workers + 1 ≤ processes``, and scores the profile's predictions
    (:func:`compare_steps`): MAPE, Kendall τ, regret, interval coverage, and
    the rows from which T(n)/T(2) per architecture follows.

    Args:
        profile: as :func:`validate`.
        workers: worker counts, each ≥ 2 and ≤ ``processes``.
        processes: the processes the machine or emulated cluster can run at once.
        model, bucket_bytes, steps, warmup_steps, repeats, timeout_s, emulate:
            as :func:`validate`.
        measurements: also write every step record there (a new file, or
            replaced with ``overwrite``).

    Returns:
        A :class:`ValidationResult` over every configuration.

    Raises:
        ValueError: a worker count outside 2…``processes``, or a bad argument.
        FileExistsError: ``measurements`` exists and ``overwrite`` is false.
        LaunchError: a training run failed.
    """
    params, prof = _resolve(profile)
    ws = sorted({int(w) for w in workers})
    if not ws or ws[0] < 2 or ws[-1] > int(processes):
        raise ValueError(f"workers must be in 2…{processes}, got {list(workers)}")
    shared, dedicated = seed_configurations(bucket_bytes)
    with_server = [w for w in ws if w + 1 <= int(processes)]
    em = dict(
        emulated_ranks=None if emulate is None else emulate.spec.num_ranks,
        emulate_text=None if emulate is None else emulate.spec.text,
        model=model,
    )
    # every launch fits, before the first one starts
    check_validation_plan(ws, servers=(1, 2), colocated=True, bucket_bytes=bucket_bytes, **em)
    if with_server:
        check_validation_plan(with_server, architectures=("ps",), bucket_bytes=bucket_bytes, **em)
    writer = None
    if measurements is not None:
        writer = RecordWriter(measurements, "overwrite" if overwrite else "new")
    kw = dict(steps=steps, warmup_steps=warmup_steps, repeats=repeats, timeout_s=timeout_s)
    try:
        base, got = measure_configurations(model, ws, shared, writer=writer, emulate=emulate, **kw)
        if with_server:
            _, more = measure_configurations(
                model, with_server, dedicated, writer=writer, emulate=emulate, baseline=False, **kw
            )
            got = got + more
    finally:
        if writer is not None:
            writer.close()
    return compare_steps(
        prof if prof is not None else params, [base.record] + [m.record for m in got]
    )


def check_validation_plan(
    workers: Sequence[int],
    *,
    architectures: Sequence[str] = ("ps", "p2p", "ring"),
    servers: Sequence[int] = (1,),
    colocated: bool = False,
    bucket_bytes: Sequence[int] = DEFAULT_VALIDATE_BUCKETS,
    emulated_ranks: int | None = None,
    emulate_text: str | None = None,
    force: bool = False,
    model: dict | str | None = None,
    ranks_per_node: int | None = None,
) -> list[tuple[int, int]]:
    """Check, before any process starts, that every launch of a validation can run.

    The plan is one launch per (worker count, process count) of
    :func:`tuner.validation.measure_configurations`, plus the single-worker
    step: a dedicated ps configuration needs n + k processes (its servers are
    ranks too). In an emulated cluster every launch must fit its ranks; on
    this machine within :func:`calibration.check_local_bounds`' process bound.
    Refusing here is what keeps a run from training for minutes and then
    failing at its largest configuration.

    Args:
        workers: worker counts, each ≥ 2.
        architectures, servers, colocated, bucket_bytes: as :func:`validate`.
        emulated_ranks: the emulated cluster's rank count, or ``None`` (local processes).
        emulate_text: the cluster as ``--emulate`` gave it, for the message.
        force: lift the local per-core bound (as ``collect --force``).
        model: the model spec (as :func:`validate`), or ``None``: when given,
            the largest launch's ``processes × 4 × parameter bytes`` (each
            process holds parameters, gradients, momentum and a communication
            buffer, float32) must fit in this machine's ``MemAvailable`` —
            all processes run here, emulated or not; ``force`` does not lift it.
        ranks_per_node: the emulated cluster's ranks per node (ranks fill the
            nodes in blocks); ``hierarchical`` needs every worker count to be
            a multiple of it (every node the same number of ranks).

    Returns:
        The plan: ``[(workers, processes), ...]`` in launch order (the
        single-worker step first).

    Raises:
        ValueError: a launch needs more processes than the cluster has (naming
            the worker count, the configuration and what to change), or a bad argument.

    Example:
        >>> check_validation_plan([2, 4], architectures=["ps"], bucket_bytes=[0])
        [(1, 1), (2, 3), (4, 5)]
    """
    from calibration import check_local_bounds

    configs = _configurations(architectures, servers, colocated, bucket_bytes)
    counts = sorted({int(w) for w in workers})
    if not counts or counts[0] < 2:
        raise ValueError(f"workers must be integers ≥ 2, got {list(workers)}")
    plan = [(1, 1)]
    for n in counts:
        for group in launch_groups(configs, n):
            plan.append((n, processes_needed(group[0], n)))
    if "hierarchical" in architectures and ranks_per_node:
        odd = [n for n in counts if n % ranks_per_node]
        if odd:
            raise ValueError(
                f"--workers {','.join(map(str, odd))}: hierarchical needs the same number of "
                f"ranks on every node, and the emulated cluster {emulate_text or ''} places "
                f"{ranks_per_node} per node in blocks; nothing was started: give worker counts "
                f"that are multiples of {ranks_per_node}"
            )
    n, procs = max(plan, key=lambda p: p[1])
    if emulated_ranks is not None and procs > emulated_ranks:
        big = next(c for c in configs if processes_needed(c, n) == procs)
        cluster = emulate_text or f"of {emulated_ranks} ranks"
        if big.servers and procs > n:  # dedicated servers are ranks too
            what = f"ps with {big.servers} dedicated server{'s' if big.servers != 1 else ''}"
            raise ValueError(
                f"--workers {n}: {what} needs {procs} processes ({n} workers + {big.servers}), "
                f"more than the emulated cluster {cluster} has ({emulated_ranks} ranks); "
                f"nothing was started: emulate at least {procs} ranks, pass --colocated, or "
                f"drop {n} from --workers"
            )
        raise ValueError(
            f"--workers {n}: {n} workers need {n} processes, more than the emulated cluster "
            f"{cluster} has ({emulated_ranks} ranks); nothing was started: emulate at least "
            f"{n} ranks or drop {n} from --workers"
        )
    if emulated_ranks is None:
        check_local_bounds([procs], 0, force=force)
    if model is not None:
        _check_model_memory(model_spec(model), procs, n)
    return plan


#: float32 copies of the model each training process holds: parameters,
#: gradients, the optimizer's momentum, and a communication buffer.
MODEL_COPIES = 4


def _check_model_memory(spec: dict, procs: int, n: int) -> None:
    from calibration import mem_available_bytes

    from ._train_worker import _param_count

    per_copy = _param_count(spec) * 4
    need = procs * MODEL_COPIES * per_copy
    avail = mem_available_bytes()
    if avail is not None and need > avail:
        raise ValueError(
            f"--workers {n}: {procs} processes × {MODEL_COPIES} copies × "
            f"{format_bytes(per_copy)} of the {spec['model']} model (--model/--size) = "
            f"{format_bytes(need)}, more than this machine's available memory "
            f"({format_bytes(avail)}, MemAvailable); nothing was started: give smaller "
            "--size or fewer --workers"
        )


def _configurations(architectures, servers, colocated: bool, bucket_bytes) -> list[StepConfig]:
    """Every architecture × bucket size (× servers for ps); ValueError names a bad argument."""
    for a in architectures:
        if a not in ARCHITECTURES:
            raise ValueError(f"architectures must be among {', '.join(ARCHITECTURES)}; got {a!r}")
    if not architectures:
        raise ValueError("architectures is empty")
    for k in servers:
        if int(k) < 1:
            raise ValueError(f"servers must be integers ≥ 1, got {k!r}")
    buckets = sorted({int(b) for b in bucket_bytes})
    if not buckets or buckets[0] < 0:
        raise ValueError(f"bucket_bytes must be sizes ≥ 0 bytes, got {list(bucket_bytes)}")
    configs = []
    for a in architectures:
        for b in buckets:
            if a == "ps":
                configs.extend(StepConfig("ps", b, int(k), bool(colocated)) for k in servers)
            else:
                configs.append(StepConfig(a, b))
    return configs
