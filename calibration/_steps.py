"""Calibration on training steps: observed step times as data for the iteration model.

People who would use ddltune often have numbers from real training already:
throughput at a few GPU counts, a vendor's scaling table, step times from
their logs. :func:`read_steps_csv` reads such observations, one run per line;
:func:`fit_steps` fits the terms of the iteration model that a training step
has and microbenchmarks do not see, on top of a base profile (a microbenchmark
calibration, or datasheet presets), and returns a :class:`Profile` that
``predict``, ``recommend`` and ``report`` read as any other.

The terms (leaves of :class:`costmodel.ClusterParams`, all already used by
:func:`costmodel.iteration_time`):

* ``log_flops`` — the effective compute throughput of one device (the step's
  forward + backward FLOPs over it), which the 1-worker rows pin down;
* ``log_step_overhead`` — a fixed per-step overhead (data loading, optimizer
  bookkeeping, launch gaps), paid at every worker count;
* ``logit_interference`` — how much backward compute slows while gradient
  buckets are exchanged under it (0..1), visible only where an overlapping
  architecture communicates;
* ``log_step_comm`` — the exchange inside a step over its collectives'
  microbenchmark time (1: the same; issue 7 measured about 2× for an
  all-reduce in a step), which is how the scaling curve bends: it multiplies
  every architecture's communication, so the rows at a few worker counts set
  it and the model carries it to the counts not run;
* ``logit_backward_hide`` — the share of backward that the exchange of an
  architecture without bucket overlap (ps, ps_host, hybrid, p2p) hides behind
  (TensorFlow's dataflow sends each gradient when it exists).

Every other leaf stays at the base profile. The objective is the calibration's
(:mod:`calibration._fit`): a Huber loss on log step time (δ =
:data:`HUBER_DELTA`) plus the base profile's Gaussian prior on each term
(its posterior where the base measured it, the preset's prior otherwise). It is
minimised by Levenberg–Marquardt on iteratively reweighted residuals, the
Jacobian by central differences of the numpy model (all 2P + 1 parameter sets
in one batched call per architecture: a handful of terms, nothing to compile);
the covariance is the same Laplace approximation as the microbenchmark fit
(:func:`calibration._fit._laplace`). A term the rows cannot move keeps its
prior variance and is reported as not identified.

CSV format (header required; ``#`` lines and blank lines ignored; one run per
line): ``workers`` (all data-parallel ranks), ``ranks_per_node``,
``batch_size`` (per worker), and ``samples_per_s`` (all workers together) or
``step_time_s``; optional ``architecture`` (default ``ring``), ``servers``
(default 1), ``colocated`` (true/false, default false) and ``bucket_bytes``
(default 25 MiB, PyTorch DDP's; units such as ``25M`` accepted).

References:
    Huber 1964; Nocedal & Wright 2006 (Levenberg–Marquardt, §10.3); Pollux
    (Qiao et al., OSDI 2021) and Horovod's autotuner fit such terms online, on
    live steps — this fits them offline, from a handful of runs.
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import numpy as np

from costmodel import (
    ARCHITECTURE_NAMES,
    DEFAULT_BUCKET_BYTES,
    InputFileError,
    collective_time,
    get_architecture,
    iteration_time,
    parse_bytes,
    read_text_bounded,
    with_overlap,
)

from ._fit import HUBER_DELTA, _laplace
from ._layout import _PHYSICAL, ParamLayout
from ._profile import Profile
from ._records import compute_contention

__all__ = [
    "STEP_TERMS",
    "read_steps",
    "read_steps_csv",
    "read_step_records",
    "run_architecture",
    "step_record_run",
    "fit_steps",
    "step_time",
]

#: The leaves a step fit moves (field names of :class:`costmodel.ClusterParams`).
STEP_TERMS = (
    "log_flops",
    "log_step_overhead",
    "logit_interference",
    "log_step_comm",
    "logit_backward_hide",
)

_REQUIRED = ("workers", "ranks_per_node", "batch_size")
_RECORD_FIELDS = ("architecture", "workers", "ranks_per_node", "batch_size", "servers",
                  "bucket_bytes", "time_s")  # fmt: skip
_OPTIONAL = ("architecture", "servers", "colocated", "bucket_bytes")
_TIMES = ("samples_per_s", "step_time_s")
_TRUE, _FALSE = {"true", "yes", "1"}, {"false", "no", "0", ""}
_JAC_STEP = 1e-5
_MAX_ITER = 60
#: Levenberg–Marquardt stops once a step moves no term (a log or logit) by more
#: than this, or lowers the objective by less than :data:`_LM_FTOL` of it. The
#: Huber reweighting converges linearly (each step ~0.75 of the last, measured),
#: so 1e-6 leaves the terms within ~3e-6 of the optimum, far inside their
#: posterior sd (≥ 1e-3); 1e-8 took twice the iterations for nothing.
_LM_XTOL = 1e-6
_LM_FTOL = 1e-13
#: The hidden share's prior in a step fit when the base profile has none (its
#: default, logit −30): uninformed, one half, sd 2 in logit (0.02–0.98 at ±2 sd).
#: Whether a framework hides its exchange is what the steps tell, not the presets.
_HIDE_PRIOR = (0.0, 2.0)
_NO_HIDE_LOGIT = -29.0
#: A steps file larger than this is refused (a table of runs is a few KiB).
_MAX_STEPS_FILE_BYTES = 16 << 20


def read_steps(path) -> list[dict]:
    """Training runs from a CSV (:func:`read_steps_csv`) or step records (:func:`read_step_records`).

    A file whose first line that is not blank or a ``#`` comment starts with
    ``{`` is JSON Lines; anything else is CSV. Errors as those functions raise.
    """
    path = Path(path)
    text = read_text_bounded(path, _MAX_STEPS_FILE_BYTES, what="steps file")  # read once: a pipe
    first = next((ln.strip() for ln in text.splitlines()
                  if ln.strip() and not ln.lstrip().startswith("#")), "")  # fmt: skip
    if first.startswith("{"):
        return read_step_records(path, text=text)
    return read_steps_csv(path, text=text)


def read_step_records(path, *, text: str | None = None) -> list[dict]:
    """Training runs from the ``kind: "step"`` records ``ddltune validate`` writes (JSON Lines).

    The time of each run is the records' ``p10`` on CPU (timings there are
    noisy upwards, as calibration fits) and the median elsewhere. Records of
    other kinds (collectives, compute) are skipped; each run keeps the
    record's ``model_spec`` (the harness model it trained).

    Returns:
        Runs as :func:`read_steps_csv` returns them, plus ``model_spec``.

    Raises:
        InputFileError: naming the file and line: a line that is not a JSON
            object, a step record without one of the fields used or with a
            non-positive value, or a file with no step record.
    """
    path = Path(path)
    if text is None:
        text = read_text_bounded(path, _MAX_STEPS_FILE_BYTES, what="steps file")
    if text.lstrip().startswith("{\n") or '"kind": "ddltune-profile"' in text[:4096]:
        raise InputFileError(
            path, None, "this is a ddltune profile (JSON), not training runs: give it as "
            "--profile to predict/recommend; --steps takes a CSV or validate's step records"
        )  # fmt: skip
    runs = []
    for line, raw in enumerate(text.splitlines(), 1):
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        try:
            rec = json.loads(raw)
        except json.JSONDecodeError as e:
            raise InputFileError(path, line, f"not JSON: {e.msg}") from None
        if not isinstance(rec, dict):
            raise InputFileError(path, line, "a record must be a JSON object")
        if rec.get("kind") != "step":
            continue
        runs.append(step_record_run(rec, path=path, line=line))
    if not runs:
        raise InputFileError(path, None, "no training-step records (kind 'step') in this file")
    return runs


def step_record_run(rec: dict, step_time_s: float | None = None, *, path="<step records>",
                    line=None) -> dict:  # fmt: skip
    """One ``kind: "step"`` record (``ddltune validate``'s) as a training run.

    The one conversion of a step record: :func:`read_step_records` (each line
    of a file) and the validation's cross-fitted predictions (records in
    memory) both use it. The harness writes 0 servers for ring and p2p; a run
    has 1.

    Args:
        rec: the record (a dict with :data:`_RECORD_FIELDS`).
        step_time_s: the time to fit, seconds > 0; default the record's ``p10``
            on CPU (timings there are noisy upwards, as calibration fits) and
            its median elsewhere.
        path, line: where the record came from, for errors and the run's origin.

    Returns:
        A run as :func:`read_steps_csv` returns it, plus ``model_spec``.

    Raises:
        InputFileError: naming ``path`` and ``line``: a field missing, not a
            number, or out of range.
    """
    missing = [k for k in _RECORD_FIELDS if k not in rec]
    if missing:
        raise InputFileError(path, line, f"step record without {', '.join(missing)}")
    if not isinstance(rec["time_s"], dict):
        raise InputFileError(path, line, "time_s: expected the statistics object "
                             '{"p10": …, "median": …} of a step record')  # fmt: skip
    for k in ("workers", "ranks_per_node", "batch_size", "servers", "bucket_bytes"):
        if isinstance(rec[k], bool) or not isinstance(rec[k], int | float):
            raise InputFileError(path, line, f"{k}: expected a number, got {rec[k]!r}")
    t = step_time_s
    if t is None:
        stats = rec["time_s"]
        stat = "p10" if rec.get("backend") == "cpu" and "p10" in stats else "median"
        t = stats.get(stat, stats.get("p10"))
    row = {k: str(rec[k]) for k in ("workers", "ranks_per_node", "batch_size", "servers",
                                     "bucket_bytes", "architecture")}  # fmt: skip
    if rec["architecture"] not in ("ps", "ps_host", "hybrid") and rec["servers"] == 0:
        row["servers"] = "1"  # the harness writes 0 servers for ring and p2p
    row["colocated"] = "true" if rec.get("colocated") else "false"
    row["step_time_s"] = "" if t is None else repr(float(t))
    run = _run(path, line, row)
    run["model_spec"] = rec.get("model_spec")
    run["sync"] = rec.get("sync")
    try:
        _check_processes(rec, run)
        run["compute_share"] = compute_contention(rec)
    except ValueError as e:
        raise InputFileError(path, line, str(e)) from None
    return run


def _check_processes(rec: dict, run: dict) -> None:
    """A step record's servers and ``processes`` agree with its workers (ValueError if not):
    colocated servers run on workers (k ≤ n), and a job runs its workers plus its
    dedicated servers (the harness writes ``processes``; a hand-edited count that
    disagrees would change every prediction's rank counts without a word)."""
    n, k = run["workers"], run["servers"]
    ps = run["architecture"] == "ps"
    if ps and run["colocated"] and k > n:
        raise ValueError(f"servers: {k} colocated servers need as many workers, got {n}")
    if "processes" in rec:
        want = n + (k if ps and not run["colocated"] else 0)
        got = rec["processes"]
        if isinstance(got, bool) or not isinstance(got, int | float) or got != want:
            raise ValueError(
                f"processes: {got!r}, but {n} worker{'s' if n != 1 else ''}"
                + (f" and {k} dedicated server{'s' if k != 1 else ''}" if want != n else "")
                + f" run {want}"
            )


def contended(workload, share: float):
    """``workload`` with its measured single-worker step ``share`` times as long
    (:func:`compute_contention`); itself at 1 or without a measured step."""
    if share == 1.0 or workload.step_time_s is None:
        return workload
    return workload.with_step_time(workload.step_time_s * share)


def run_architecture(name: str, colocated: bool = False, *, overlap: bool = True):
    """The architecture a training run's steps are costed with.

    Args:
        name: a name in :data:`costmodel.ARCHITECTURE_NAMES`.
        colocated: ``ps`` servers on the workers (ignored by the others).
        overlap: ``False`` for a runtime that runs a program's collectives after
            its compute (XLA:CPU): :func:`costmodel.with_overlap` of it. Only
            the all-reduce family changes (PS and P2P never overlap).

    Raises:
        ValueError: an unknown name.
    """
    arch = get_architecture(name, colocated=colocated if name == "ps" else False)
    return arch if overlap else with_overlap(arch, False)


def read_steps_csv(path, *, text: str | None = None) -> list[dict]:
    """Observed training runs from a CSV file (format: the module docstring).

    Args:
        path: the file.

    Returns:
        One dict per run: ``workers``, ``ranks_per_node``, ``batch_size``,
        ``architecture``, ``servers``, ``colocated``, ``bucket_bytes`` (bytes),
        ``step_time_s`` (seconds; from ``samples_per_s`` as
        workers × batch_size / samples_per_s), ``file``, ``line``.

    Raises:
        InputFileError: naming the file, the line and the column: a missing
            header or required column, a value that is not a positive number
            (an integer where a count is meant), an unknown architecture,
            neither time column given, or no run at all.
    """
    path = Path(path)
    if text is None:
        text = read_text_bounded(path, _MAX_STEPS_FILE_BYTES, what="steps file")
    lines = [(i, ln) for i, ln in enumerate(text.splitlines(), 1)]
    body = [(i, ln) for i, ln in lines if ln.strip() and not ln.lstrip().startswith("#")]
    if not body:
        raise InputFileError(path, None, "no header line: expected a CSV header such as "
                             "'workers,ranks_per_node,batch_size,samples_per_s'")  # fmt: skip
    head_line, header = body[0]
    cols = [c.strip().lower() for c in next(csv.reader(io.StringIO(header)))]
    known = set(_REQUIRED + _OPTIONAL + _TIMES)
    twice = sorted({c for c in cols if cols.count(c) > 1})
    if twice:
        raise InputFileError(path, head_line, f"column {twice[0]!r} appears twice in the header")
    unknown = [c for c in cols if c not in known]
    if unknown and unknown[0] == "":
        raise InputFileError(path, head_line, "an empty column name (a trailing comma?)")
    if unknown:
        raise InputFileError(
            path, head_line, f"unknown column {unknown[0]!r}; the columns are "
            f"{', '.join(_REQUIRED + _TIMES + _OPTIONAL)}"
        )  # fmt: skip
    for c in _REQUIRED:
        if c not in cols:
            raise InputFileError(path, head_line, f"the header has no {c!r} column")
    if not any(c in cols for c in _TIMES):
        raise InputFileError(
            path, head_line, "the header needs a 'samples_per_s' or a 'step_time_s' column"
        )
    runs = []
    for line, raw in body[1:]:
        values = next(csv.reader(io.StringIO(raw)))
        if len(values) != len(cols):
            raise InputFileError(
                path, line, f"{len(values)} values for {len(cols)} columns ({', '.join(cols)})"
            )
        row = {c: v.strip() for c, v in zip(cols, values, strict=True)}
        runs.append(_run(path, line, row))
    if not runs:
        raise InputFileError(path, head_line, "a header but no run below it")
    return runs


def _run(path, line, row: dict) -> dict:
    def number(col, integer=False, default=None):
        text = row.get(col, "")
        if text == "" and default is not None:
            return default
        try:
            v = float(text)
        except ValueError:
            raise InputFileError(path, line, f"{col}: expected a number, got {text!r}") from None
        if not math.isfinite(v) or v <= 0 or (integer and v != int(v)):
            what = "a positive integer" if integer else "a positive number"
            raise InputFileError(path, line, f"{col}: expected {what}, got {text!r}")
        return int(v) if integer else v

    arch = row.get("architecture") or "ring"
    if arch not in ARCHITECTURE_NAMES:
        raise InputFileError(
            path, line, f"architecture: unknown {arch!r}; valid: {', '.join(ARCHITECTURE_NAMES)}"
        )
    coloc = row.get("colocated", "").lower()
    if coloc not in _TRUE | _FALSE:
        raise InputFileError(
            path, line, f"colocated: expected true/false (yes/no, 1/0), got {coloc!r}"
        )
    bucket = row.get("bucket_bytes", "")
    try:
        bucket_bytes = (
            float(parse_bytes(bucket, name="bucket_bytes"))
            if bucket
            else float(DEFAULT_BUCKET_BYTES)
        )
    except ValueError as e:
        raise InputFileError(path, line, str(e)) from None
    n = number("workers", integer=True)
    g = number("ranks_per_node", integer=True)
    b = number("batch_size", integer=True)
    if row.get("step_time_s") and row.get("samples_per_s"):
        t = number("step_time_s")
        t2 = n * b / number("samples_per_s")
        if abs(t / t2 - 1) > 0.01:
            raise InputFileError(
                path, line, f"step_time_s {t:g} s and samples_per_s (workers × batch_size / "
                f"samples_per_s = {t2:.4g} s) disagree by more than 1%: give one of them"
            )  # fmt: skip
    elif row.get("step_time_s"):
        t = number("step_time_s")
    elif row.get("samples_per_s"):
        t = n * b / number("samples_per_s")
    else:
        raise InputFileError(path, line, "neither samples_per_s nor step_time_s is given")
    return {
        "workers": n,
        "ranks_per_node": g,
        "batch_size": b,
        "architecture": arch,
        "servers": number("servers", integer=True, default=1),
        "colocated": coloc in _TRUE,
        "bucket_bytes": bucket_bytes,
        "step_time_s": t,
        "file": str(path),
        "line": line,
    }


def sync_time(params, syncs) -> np.ndarray:
    """Seconds per step of the small all-reduces a step record declares (``"sync"``).

    The training harness starts each swap behind two all-reduces of a few
    floats (``tuner.validation``'s ``start_together``: XLA:CPU's gloo swap runs one
    direction after the other when one rank comes late); a record's ``sync``
    says how many, how large and over how many processes. Their cost is the
    model's own all-reduce (:func:`costmodel.collective_time`, ring), with the
    record's ranks per node (default 1).

    Args:
        params: :class:`costmodel.ClusterParams`, or a batch of D sets.
        syncs: one ``{"allreduces", "message_bytes", "num_ranks"[, "ranks_per_node"]}``
            or None per run.

    Returns:
        (N,) seconds, or (D, N) for a batch; 0 where a run declares none. Traceable
        by jax when ``params`` are.
    """
    syncs = list(syncs)
    c = np.array([0.0 if s is None else float(s["allreduces"]) for s in syncs])
    size = np.array([4.0 if s is None else float(s["message_bytes"]) for s in syncs])
    ranks = np.array([1.0 if s is None else float(s["num_ranks"]) for s in syncs])
    g = np.array([1.0 if s is None else float(s.get("ranks_per_node", 1)) for s in syncs])
    t = collective_time(params, "all_reduce", size, ranks, np.minimum(g, ranks))
    return t * c  # numpy, or jax under tracing (a profile's own interval differentiates it)


def step_time(params, workload, runs: list[dict], *, overlap: bool = True) -> np.ndarray:
    """Predicted step time of every run, seconds: :func:`costmodel.iteration_time`.

    Args:
        params: :class:`costmodel.ClusterParams` with numpy leaves, or a batch
            of D parameter sets (``ClusterParams.from_flat`` of (D, P)).
        workload: the model trained (:class:`costmodel.Workload`).
        runs: from :func:`read_steps_csv`, or :func:`step_record_run` (whose
            ``compute_share``, :func:`compute_contention`, multiplies the
            workload's measured single-worker step, and the cores' part of its
            communication: :meth:`costmodel.ClusterParams.with_core_contention`).
        overlap: the all-reduce overlaps backward (the stock architectures);
            ``False`` for a runtime that runs a program's collectives after its
            compute (XLA:CPU, :func:`costmodel.with_overlap`).

    Returns:
        (N,) seconds, or (D, N) for a batch; one numpy call per (architecture,
        compute share).
    """
    out = None
    groups: dict = {}
    for i, r in enumerate(runs):
        key = (r["architecture"], r["colocated"], r.get("compute_share", 1.0))
        groups.setdefault(key, []).append(i)
    for (arch, coloc, share), rows in groups.items():
        col = {k: np.asarray([runs[i][k] for i in rows], dtype=np.float64) for k in
               ("workers", "ranks_per_node", "servers", "bucket_bytes", "batch_size")}  # fmt: skip
        t = iteration_time(
            params.with_core_contention(share),
            contended(workload, share),
            run_architecture(arch, coloc, overlap=overlap),
            col["workers"],
            ranks_per_node=col["ranks_per_node"],
            servers=col["servers"],
            bucket_bytes=col["bucket_bytes"],
            batch_size=col["batch_size"],
            colocated=coloc,
        ).iteration_s
        t = np.asarray(t, dtype=np.float64)
        t = t + sync_time(params.with_core_contention(share), [runs[i].get("sync") for i in rows])
        if out is None:
            out = np.zeros(t.shape[:-1] + (len(runs),))
        out[..., rows] = t
    return out


def fit_steps(
    runs: list[dict], workload, base: Profile, *, overlap: bool = True,
    reference: Profile | None = None,
) -> Profile:  # fmt: skip
    """Fit the step terms (:data:`STEP_TERMS`) to observed runs, on top of ``base``.

    Args:
        runs: from :func:`read_steps_csv` (≥ 1).
        workload: the model the runs trained (its batch is each run's own).
        base: the profile the other parameters come from (a microbenchmark
            calibration, or :meth:`Profile.from_preset`); its values and
            covariance are the terms' prior.
        overlap: as :func:`step_time` (``False`` for runs of XLA:CPU).
        reference: the profile whose step terms' prior ``fit["steps"]["terms"]``
            reports (``prior``, ``prior_sd``, ``identified``); default ``base``.
            Fits chained one model after another pass the first one's base, so
            that a term the first fit pinned is not "unidentified" by the next
            (whose prior is already narrow).

    Returns:
        A new :class:`Profile`: ``base``'s parameters with the fitted terms,
        its covariance with the terms' block replaced by their posterior (cross
        terms zero), ``fit["steps"]`` (rows with measured and fitted time, the
        terms with prior and posterior), ``measured_ranges`` widened to the
        runs' ``num_ranks`` and ``ranks_per_node``; the runs' log residuals,
        the effective number of terms fitted and the worker counts in
        ``validation["step_log_residuals"]``, ``["step_effective_parameters"]``
        and ``["step_worker_counts"]`` (the spread of the profile's step
        predictions, :meth:`Profile.residual_sd`), the residuals also in
        ``validation["train_log_residuals"]`` when ``base`` has none.

    Raises:
        ValueError: no runs.
    """
    if not runs:
        raise ValueError("no training runs to fit")
    layout = ParamLayout(base.params.n_regimes)
    idx = np.concatenate([np.arange(layout.size)[layout.slices[f]] for f in STEP_TERMS])
    theta0 = np.asarray(base.params.flat(), dtype=np.float64)
    mu, sd = _step_prior(base, idx)
    mu_ref, sd_ref = (mu, sd) if reference is None else _step_prior(reference, idx)
    logt = np.log([r["step_time_s"] for r in runs])
    template = base.params.to_numpy()

    def log_pred(phis: np.ndarray) -> np.ndarray:  # (D, p) -> (D, N)
        th = np.repeat(theta0[None], len(phis), axis=0)
        th[:, idx] = phis
        return np.log(step_time(template.from_flat(th), workload, runs, overlap=overlap))

    def jac(phi):
        h = _JAC_STEP * np.maximum(1.0, np.abs(phi))
        pts = np.vstack([phi[None], phi + np.diag(h), phi - np.diag(h)])
        lp = log_pred(pts)
        p = len(phi)
        return lp[0], ((lp[1 : p + 1] - lp[p + 1 :]) / (2 * h)[:, None]).T

    d = HUBER_DELTA

    def objective(r, phi):
        a = np.abs(r)
        hub = np.where(a <= d, 0.5 * r * r, d * (a - 0.5 * d)) / (d * d)
        return float(np.sum(hub) + 0.5 * np.sum(((phi - mu) / sd) ** 2))

    def lm(phi):
        """Levenberg–Marquardt on Huber-reweighted residuals from ``phi``."""
        lam = 1e-3
        lp, J = jac(phi)
        r = lp - logt
        f = objective(r, phi)
        for _ in range(_MAX_ITER):
            w = np.minimum(1.0, d / np.maximum(np.abs(r), 1e-300)) / (d * d)
            H = J.T @ (w[:, None] * J) + np.diag(1.0 / sd**2)
            g = J.T @ (w * r) + (phi - mu) / sd**2
            step = np.linalg.solve(H + lam * np.diag(np.diag(H)), -g)
            cand = phi + step
            f_c = objective(log_pred(cand[None])[0] - logt, cand)
            small = np.max(np.abs(step)) < _LM_XTOL
            if np.isfinite(f_c) and f_c <= f:
                done = small or f - f_c <= _LM_FTOL * abs(f)
                phi, f, lam = cand, f_c, max(lam / 10, 1e-9)
                lp, J = jac(phi)
                r = lp - logt
                if done:
                    break
            else:
                lam *= 10
                if small or lam > 1e10:  # a tiny step that rounding refuses: at the optimum
                    break
        return f, phi, lp, J, r

    # Starts: the prior, and a per-step overhead of 10% and 40% of the fastest step
    # (a small overhead moves a step's log time little, so from a 1 ms prior the
    # descent can settle where the other terms absorb it), each with and without hiding.
    # The hidden share starts at its prior (none) and at one half: at logit −30 its
    # gradient is ~1e-13, so only a start inside (0, 1) can find rows that hide.
    over, hide = STEP_TERMS.index("log_step_overhead"), STEP_TERMS.index("logit_backward_hide")
    starts = []
    for share in (None, 0.1, 0.4):
        for h in (None, 0.0):
            s0 = mu.copy()
            if share is not None:
                s0[over] = math.log(share * float(np.exp(logt.min())))
            if h is not None:
                s0[hide] = h
            if not any(np.array_equal(s0, x) for x in starts):  # the prior's hide may be 0
                starts.append(s0)
    f, phi, lp, J, r = min((lm(s0) for s0 in starts), key=lambda x: x[0])
    cov_p, scale, p_eff = _laplace(J, r, sd, np.ones(len(phi), dtype=bool))
    theta = theta0.copy()
    theta[idx] = phi
    cov = np.array(base.covariance, dtype=np.float64)
    cov[idx, :] = 0.0
    cov[:, idx] = 0.0
    cov[np.ix_(idx, idx)] = cov_p
    params = template.from_flat(theta)
    return _profile(
        base, params, cov, runs, np.exp(lp), r, mu_ref, sd_ref, phi, cov_p, scale, p_eff
    )


def _step_prior(prof: Profile, idx) -> tuple[np.ndarray, np.ndarray]:
    """The step terms' prior mean and sd in ``prof`` (a base assuming no hiding gets the
    hidden share's own prior, :data:`_HIDE_PRIOR`)."""
    mu = np.asarray(prof.params.flat(), dtype=np.float64)[idx]
    sd = np.sqrt(np.clip(np.diag(prof.covariance)[idx], 1e-12, None))
    hide = STEP_TERMS.index("logit_backward_hide")
    if mu[hide] <= _NO_HIDE_LOGIT:  # the base assumes nothing hides
        mu[hide], sd[hide] = _HIDE_PRIOR
    return mu, sd


def _profile(base, params, cov, runs, fitted, r, mu, sd, phi, cov_p, scale, p_eff) -> Profile:
    """The new profile: ``base`` with the step fit's parameters, covariance and records."""
    names = list(STEP_TERMS)
    post_sd = np.sqrt(np.clip(np.diag(cov_p), 0.0, None))
    terms = {
        n: {
            "value": float(v),
            "prior": float(m),
            "prior_sd": float(s0),
            "posterior_sd": float(s1),
            "identified": bool(s1 < 0.1 and s1 < 0.5 * s0),
        }
        for n, v, m, s0, s1 in zip(names, phi, mu, sd, post_sd, strict=True)
    }
    rows = [
        {k: run[k] for k in ("file", "line", "architecture", "workers", "ranks_per_node",
                             "servers", "colocated", "bucket_bytes", "batch_size")}
        | {"measured_s": run["step_time_s"], "fitted_s": float(t), "log_residual": float(e)}
        for run, t, e in zip(runs, fitted, r, strict=True)
    ]  # fmt: skip
    fit = dict(base.fit)
    fit["steps"] = {
        "runs": len(runs),
        "terms": terms,
        "residual_scale": scale,
        "effective_parameters": p_eff,
        "rows": rows,
        "files": sorted({run["file"] for run in runs}),
    }
    validation = dict(base.validation)
    # the spread of step predictions (Profile.residual_sd(of="steps")): what the fit leaves
    validation["step_log_residuals"] = [float(e) for e in r]
    validation["step_effective_parameters"] = float(p_eff)
    validation["step_worker_counts"] = sorted({int(run["workers"]) for run in runs})
    if not validation.get("train_log_residuals") and not validation.get("heldout_log_residuals"):
        validation["train_log_residuals"] = [float(e) for e in r]
        fit.setdefault("effective_parameters", p_eff)
    mr = dict(base.measured_ranges)
    for key, vals in (
        ("num_ranks", [run["workers"] for run in runs]),
        # a single-worker step exchanges nothing: its node says nothing of a topology
        # (with it, steps at 1 and 2 per node left recommend no measured default)
        ("ranks_per_node",
         [min(run["ranks_per_node"], run["workers"]) for run in runs if run["workers"] > 1]),
    ):  # fmt: skip
        if not vals:
            continue
        old = (
            mr.get(key) if isinstance(mr.get(key), list | tuple) and len(mr.get(key)) == 2 else None
        )
        lo, hi = min(vals), max(vals)
        mr[key] = [min(lo, old[0]), max(hi, old[1])] if old else [lo, hi]
    notes = list(base.notes) + [
        f"step terms fitted on {len(runs)} training run(s): "
        + ", ".join(f"{_PHYSICAL.get(n, n)} {'identified' if t['identified'] else 'not identified'}"
                    f" by them" for n, t in terms.items())
    ]  # fmt: skip
    prov = dict(base.provenance)
    prov["steps"] = fit["steps"]["files"]
    return Profile(
        params=params,
        covariance=cov,
        leaf_names=base.leaf_names,
        prior=base.prior,
        fit=fit,
        validation=validation,
        measured_ranges=mr,
        reliable=base.reliable,
        heldout_p90=base.heldout_p90,
        provenance=prov,
        warnings=base.warnings,
        notes=notes,
    )
