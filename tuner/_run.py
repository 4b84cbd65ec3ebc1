"""The main job, ``ddltune run``: measure, calibrate, recommend, report — in one folder.

:func:`run_main_job` chains the public steps, each of which can be rerun on
its own from the files it leaves behind:

1. **collect** (:func:`calibration.collect`): local worker processes joined by
   ``jax.distributed`` measure the collectives and the compute kernels →
   ``DIR/measurements.jsonl``. Skipped with ``measurements=[...]`` (a
   cluster's collector output or imported nccl-tests files), whose records are
   then copied into ``DIR/measurements.jsonl`` so the folder stands alone.
2. **calibrate** (:func:`calibration.calibrate`) → ``DIR/profile.json``, with
   the held-out errors per series.
3. **recommend** (:func:`tuner.recommend`) for the workload. A profile whose
   held-out error is over the tuner's limit is refused by ``recommend``; the
   main job then asks again with ``force=True`` and keeps the refusal's
   message, which the report shows at the top → ``DIR/recommendation.json``
   (with the phase timings under ``"timings"``).
4. **report** (:func:`tuner._report.build_report`) → ``DIR/index.html``,
   ``DIR/report.md``, ``DIR/figures/*.png``.

Equivalent commands (what the folder lets you rerun)::

    ddltune collect --workers 2 --max-bytes 16M -o DIR/measurements.jsonl
    ddltune calibrate DIR/measurements.jsonl -o DIR/profile.json
    ddltune recommend --profile DIR/profile.json --model resnet50 --max-workers 64 --force
    ddltune report --profile DIR/profile.json --measurements DIR/measurements.jsonl \\
        --model resnet50 -o DIR
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import re
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import calibration
from calibration import (
    OutputPathError,
    atomic_replace_dir,
    atomic_write_text,
    read_records,
    refuse_current_folder,
    refuse_symlink,
)
from costmodel import (
    WorkloadTerms,
    format_bytes,
    format_first,
    format_seconds,
    get_workload,
    load_layers,
)

from ._defaults import RUN_DEFAULTS
from ._format import jsonable
from ._predict import measured_ranks_per_node
from ._recommend import (
    MEMORY_REMEDIES,
    RELIABLE_P90_LIMIT,
    InfeasibleError,
    UnreliableProfileError,
    recommend,
)
from ._report import build_report, profile_summary, report_owns
from .validation import seed_experiment
from .validation import validate as validate_training

__all__ = [
    "RUN_DEFAULTS",
    "RunResult",
    "run_main_job",
    "run_owns",
    "DATA_FILES",
    "model_option",
    "recommend_command",
]

#: Files the main job keeps beside the report.
DATA_FILES = ("measurements.jsonl", "profile.json", "recommendation.json")


@dataclasses.dataclass(frozen=True)
class RunResult:
    """What :func:`run_main_job` produced.

    Attributes:
        directory: the output folder.
        report: ``DIR/index.html``.
        markdown: ``DIR/report.md``.
        measurements, profile_path, recommendation_path: the three data files.
        profile: the fitted :class:`calibration.Profile`.
        recommendation: the :class:`tuner.Recommendation`.
        refusal: the tuner's refusal message when the profile was unreliable
            and the recommendation had to be forced, else ``None``.
        timings: ``{phase: seconds}`` (collect, calibrate, recommend, report, total).
        records: number of measurement records used.
    """

    directory: Path
    report: Path
    markdown: Path
    measurements: Path
    profile_path: Path
    recommendation_path: Path
    profile: object
    recommendation: object
    refusal: str | None
    timings: dict
    records: int


def _say(log: Callable[[str], None] | None, msg: str) -> None:
    if log is not None:
        log(msg)


def _check_out_dir(out: Path, overwrite: bool) -> Path:
    refuse_current_folder(out, "-o")
    refuse_symlink(out, "-o")
    if out.exists() and not out.is_dir():
        raise OutputPathError(out, "-o: exists and is not a folder; choose another -o")
    if out.exists() and any(out.iterdir()) and not overwrite:
        names = sorted(p.name for p in out.iterdir())
        raise FileExistsError(
            f"-o {out}: the folder is not empty ({', '.join(names[:3])}"
            f"{', ...' if len(names) > 3 else ''}); pass --overwrite to replace what the main "
            "job writes there (other files are kept), or choose another -o folder"
        )
    return out


_LOG = re.compile(r"logs/workers\d+/rank\d+\.log")


def run_owns(rel: str) -> bool:
    """Whether an entry of a ``ddltune run`` folder (relative POSIX path) is the run's own.

    The report's files (:func:`tuner.report_owns`), :data:`DATA_FILES`,
    ``validation.jsonl`` (and, in an emulated cluster, ``validation-cnn.jsonl``)
    and the workers' ``logs/workers<n>/rank<r>.log``: what ``--overwrite``
    replaces (a previous run's ``validation*.jsonl`` is removed when this run
    writes none). Every other entry of the folder is kept.

    Example:
        >>> [run_owns(p) for p in ("profile.json", "logs/workers2/rank0.log", "notes.txt")]
        [True, True, False]
    """
    return (
        report_owns(rel)
        or rel in DATA_FILES
        or rel in ("validation.jsonl", "validation-cnn.jsonl")
        or bool(_LOG.fullmatch(rel))
    )


def _copy_measurements(paths: Sequence[str | os.PathLike], dest: Path) -> int:
    """Validate ``paths`` and write their records into ``dest`` (atomically); return the count."""
    recs = read_records(list(paths))  # raises InputFileError naming file and line
    text = "".join(
        json.dumps({k: v for k, v in r.items() if not k.startswith("_")}, allow_nan=False) + "\n"
        for r in recs
    )
    atomic_write_text(dest, text)
    return len(recs)


def _print_errors(profile, log) -> None:
    s = profile_summary(profile)
    p90 = s["heldout_p90"]
    state = "reliable" if s["reliable"] else "UNRELIABLE"
    overall = "no held-out point" if p90 is None else f"held-out p90 error {100 * p90:.1f}%"
    _say(log, f"  profile: {state} ({overall}, limit {100 * s['limit']:.0f}%)")
    if any(e["heldout_points"] for e in s["series"]):
        _say(log, "    (n: ranks in the collective or processes computing; g: ranks per node)")
    shown = [e for e in s["series"] if e["heldout_points"]]
    width = max((len(e["series"]) for e in shown), default=0)
    for e in shown:
        _say(
            log,
            f"    {e['series']:<{width}} held-out median {100 * (e['heldout_median'] or 0):5.1f}%"
            f"  p90 {100 * (e['heldout_p90'] or 0):5.1f}%  ({e['heldout_points']} point{'' if e['heldout_points'] == 1 else 's'})",
        )


def run_main_job(
    out_dir: str | os.PathLike = "ddltune-report",
    *,
    workers: int = RUN_DEFAULTS["workers"],
    measurements: Sequence[str | os.PathLike] | None = None,
    model: str | None = RUN_DEFAULTS["model"],
    layers: str | os.PathLike | None = None,
    batch_size: int = RUN_DEFAULTS["batch_size"],
    max_workers: int = RUN_DEFAULTS["max_workers"],
    ranks_per_node: int | None = None,
    prior_preset: str | None = None,
    min_bytes: int = RUN_DEFAULTS["min_bytes"],
    max_bytes: int = RUN_DEFAULTS["max_bytes"],
    budget_s: float = RUN_DEFAULTS["budget_s"],
    overwrite: bool = False,
    step_factor: int = RUN_DEFAULTS["step_factor"],
    progress: bool = True,
    log: Callable[[str], None] | None = None,
    command: str | None = None,
    validate: bool = False,
    emulate=None,
    validate_steps: int = 5,
) -> RunResult:
    """Measure this machine (or read measurements), calibrate, recommend and write the report.

    (Long for its documentation only: the body runs the steps ``_measure``,
    ``_calibrate``, ``_recommend``, ``_validate``, ``_report`` in turn, timing each.)

    Args:
        out_dir: the output folder; created; a non-empty folder is refused
            unless ``overwrite``.
        workers: local worker processes for the collector, ≥ 2 (ignored with
            ``measurements``).
        measurements: measurement files (JSON Lines, schema v1) to use instead
            of collecting.
        model: a zoo model (:data:`costmodel.WORKLOAD_NAMES`); ignored with ``layers``.
        layers: a layer file (JSON or CSV, see :func:`costmodel.load_layers`).
        batch_size: samples per worker per step, ≥ 1.
        max_workers: the largest worker count to consider, ≥ 1.
        ranks_per_node: workers per node of the target cluster, ≥ 1; ``None`` (the
            default): the one value the collectives were measured at
            (:func:`tuner.measured_ranks_per_node`: ``workers`` local processes share
            one node; ``--emulate NxR``: R), else 1 — as ``recommend`` and ``report``
            take it from a profile, so the three agree on the same measurements.
        prior_preset: ``"NETWORK[,INTRA]:DEVICE"``: the prior for what the
            measurements cannot identify (default: chosen by the calibration
            from the measured backend).
        min_bytes, max_bytes: message sizes the collector measures, bytes.
        step_factor: the size multiplier between measured points, an integer ≥ 2
            (default 2: every power of 2, as nccl-tests' ``-f 2``).
        budget_s: the collector's seconds per point (> 0).
        overwrite: replace what a previous run left in ``out_dir``.
        progress: progress bars on stderr.
        log: where to print progress lines (``None``: silent).
        command: the command line, recorded in the report.
        validate: also train a small MLP for real with ps, p2p and ring
            all-reduce on ``workers`` local processes (``tuner.validation.validate``)
            and put measured against predicted steps in the report
            (``DIR/validation.jsonl`` keeps the step records); then fit the
            step terms on those steps (``tuner.validation.fit_step_records``)
            and recommend again, so the interval carries what they measured.
        emulate: a started :class:`launch.EmulatedCluster`: collect (and
            validate) in it; ``workers`` becomes its rank count and every
            record carries ``"emulated"``.
        validate_steps: training steps timed per configuration and repeat
            when validating, ≥ 1 (default 5, after 2 warm-up steps).

    Returns:
        A :class:`RunResult`.

    Raises:
        FileExistsError: ``out_dir`` is not empty and ``overwrite`` is false
            (checked before anything is measured).
        ValueError: an invalid argument (named), an unknown model.
        calibration.InputFileError: a malformed measurement or layer file.
        calibration.CollectError: a worker crashed or hung.
        InfeasibleError: nothing fits the device's memory: before anything is
            measured where the prior's device is known (``prior_preset``, an
            emulated cluster, a machine without accelerator plugins), else once
            calibrated (the fitted profile is kept beside ``out_dir``).
    """
    t_start = time.monotonic()
    if emulate is not None:
        workers = emulate.spec.num_ranks
    _check_run_args(workers, batch_size, max_workers, ranks_per_node, budget_s, validate_steps)
    # Everything that can be checked cheaply is checked before the slow part.
    workload = (
        load_layers(layers, batch_size=batch_size)
        if layers is not None
        else get_workload(model or RUN_DEFAULTS["model"], batch_size)
    )
    try:  # what recommend would refuse after the measuring (the model's own check): said before
        WorkloadTerms.from_workload(workload, numpy=True)
    except ValueError:
        raise ValueError(
            f"the layers of {workload.name!r} have no FLOP counts, which 'ddltune run' needs "
            "to time a step: give each layer's fwd_flops (and bwd_flops) in the file, or "
            "predict from a measured single-worker step with 'ddltune recommend --layers "
            "FILE --step-time SECONDS' on a profile"
        ) from None
    for p in measurements or ():
        if not Path(p).is_file():
            raise FileNotFoundError(2, "No such file", str(p))
    if not measurements:  # what collect would refuse, before "[1/4] measuring …" is said
        if isinstance(step_factor, bool) or not isinstance(step_factor, int) or step_factor < 2:
            raise ValueError(f"step_factor must be an integer ≥ 2, got {step_factor!r}")
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < min_bytes:
            raise ValueError(
                f"max_bytes must be at least {format_bytes(min_bytes)}, the smallest message "
                f"the run measures, got {max_bytes!r}"
            )
        calibration.check_local_bounds(
            [workers],
            max_bytes,
            what=None if emulate is None else f"--emulate {emulate.spec.text} ({workers} ranks)",
            force_option=None,
        )
        _check_fits_before_measuring(
            workload, layers, max_workers, ranks_per_node, workers, prior_preset, emulate
        )
    out = _check_out_dir(Path(out_dir), overwrite)
    m_path, prof_path, rec_path = (out / name for name in DATA_FILES)
    timings: dict[str, float] = {}
    done: dict = {}

    def build(stage: Path) -> None:
        # Every phase writes into the staging folder beside -o; it replaces -o's
        # own files only once the report is complete (run_owns), so an
        # interruption at any phase leaves the old folder whole.
        sm, sp, sr = (stage / name for name in DATA_FILES)
        try:
            with _timed(timings, "collect" if not measurements else "read"):
                done["records"] = _measure(
                    sm, measurements, workers, min_bytes, max_bytes, budget_s, progress, log,
                    emulate, step_factor,
                )  # fmt: skip
            later_phases(stage, sm, sp, sr)
        except calibration.CollectError as e:
            # collect's own advice names the staging file (gone with the staging
            # folder) and its --resume, which run does not have: say what was kept
            kept = _keep_measurements(sm, out, None)
            raise calibration.CollectError(
                f"{e.reason}; {_kept_text(kept, out)}",
                rank=e.rank,
                where=e.where,
                written=e.written,
                reason=e.reason,
            ) from e
        except BaseException:
            if not measurements:  # what this run measured outlives the staging folder
                _keep_measurements(sm, out, log)
            raise

    def later_phases(stage: Path, sm: Path, sp: Path, sr: Path) -> None:
        with _timed(timings, "calibrate"):
            profile = _calibrate(sm, sp, prior_preset, progress, log, shown={sm: m_path})
        _print_errors(profile, log)
        g = ranks_per_node or measured_ranks_per_node(profile) or 1

        def recommend_on(profile, again: bool = False):
            with _timed(timings, "recommend"):
                try:
                    return _recommend(profile, workload, max_workers, g, log, again)
                except InfeasibleError as e:
                    what = model_option(layers, workload.name)
                    kept = _keep_profile(profile, out)
                    text = _infeasible_text(e, kept, what, workload, max_workers, profile.reliable)
                    raise InfeasibleError(text, e.recommendation) from None

        rec, refusal = recommend_on(profile)
        validation = None
        if validate:
            with _timed(timings, "validate"):
                validation = _validate(profile, workers, stage, log, emulate, validate_steps)
            with _timed(timings, "fit steps"):
                informed = _fit_validation_steps(profile, stage, out, log)
            if informed is not None:  # its steps narrow the interval the run reports
                profile = informed
                profile.save(sp, overwrite=True)
                before = rec.config
                rec, refusal = recommend_on(profile, again=True)
                _say(log, "  " + _changed_text(before, rec.config))
        with _timed(timings, "report"):
            _say(log, "[4/4] writing the report")
            _report(
                stage,
                profile,
                workload,
                rec,
                (str(m_path), sm),
                measurements,
                timings,
                refusal,
                command,
                validation,
                progress,
            )
        timings["total"] = time.monotonic() - t_start
        _write_recommendation(
            sr, rec, refusal, workload, m_path, prof_path, measurements, validation, timings
        )
        done.update(profile=profile, rec=rec, refusal=refusal)

    atomic_replace_dir(out, build, overwrite=True, replaces=run_owns)
    return RunResult(
        directory=out,
        report=out / "index.html",
        markdown=out / "report.md",
        measurements=m_path,
        profile_path=prof_path,
        recommendation_path=rec_path,
        profile=done["profile"],
        recommendation=done["rec"],
        refusal=done["refusal"],
        timings=timings,
        records=done["records"],
    )


def _kept_text(kept: tuple[Path, int] | None, out: Path) -> str:
    """What an interrupted run kept of its measurements and how to go on, for its error."""
    if kept is None:
        return (
            f"no measurement had finished (each is written after its last of "
            f"{RUN_DEFAULTS['rounds']} rounds), so none was kept; {out} is as it was"
        )
    dest, n = kept
    return (
        f"its {n} finished measurement{'s are' if n != 1 else ' is'} kept in {dest} (use them: "
        f"'ddltune run --measurements {dest} -o DIR', or measure the rest first: 'ddltune "
        f"collect -o {dest} --resume'); {out} is as it was"
    )


def _beside(out: Path, what: str, ext: str) -> Path:
    """A new path beside ``-o`` for what a stopped run keeps: ``<out>.<what>-<UTC>.<ext>``,
    ``-2``, ``-3`` … appended until no file (or link) has the name."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    dest, k = out.parent / f"{out.name}.{what}-{stamp}.{ext}", 1
    while dest.exists() or dest.is_symlink():
        k += 1
        dest = out.parent / f"{out.name}.{what}-{stamp}-{k}.{ext}"
    return dest


def _keep_profile(profile, out: Path) -> Path | None:
    """Save a run's fitted profile beside ``-o`` (``<out>.profile-<UTC>.json``, never an
    existing name) when the run stops after calibrating; ``None`` if it cannot be written."""
    dest = _beside(out, "profile", "json")
    try:
        profile.save(dest)
    except (OSError, FileExistsError):
        return None
    return dest


def _check_fits_before_measuring(
    workload, layers, max_workers, ranks_per_node, workers, prior_preset, emulate
) -> None:
    """Refuse, before minutes of measuring, a model that fits no device of the prior.

    Which configurations fit memory depends on the device's memory alone, which
    the measurements do not move (``memory_bytes``: prior sd 10%, the preset's); so
    :func:`tuner.recommend` on the prior preset (``prior_preset``, or the CPU preset
    calibration would choose, where no jax plugin for an accelerator is installed or
    the cluster is emulated) says now what it would say after calibration. Without
    a known device (an accelerator may be present: asking jax would claim it before
    the workers start) nothing is checked here.

    Raises:
        InfeasibleError: nothing fits, with :func:`_infeasible_text`'s remedies.
    """
    if prior_preset is not None:
        network, device = calibration.parse_prior_preset(prior_preset)
    elif emulate is not None or not _accelerator_plugins():
        network, device, _ = calibration.default_prior_preset("cpu", "cpu")
    else:
        return
    from costmodel import preset

    g = ranks_per_node or (emulate.spec.ranks_per_node if emulate is not None else workers)
    try:
        recommend(preset(network, device), workload, max_workers=max_workers,
                  ranks_per_node=g, force=True, refine=False)  # feasibility only  # fmt: skip
    except InfeasibleError as e:
        what = model_option(layers, workload.name)
        raise InfeasibleError(
            _infeasible_text(e, None, what, workload, max_workers, before=(network, device)),
            e.recommendation,
        ) from None


def model_option(layers, model: str) -> str:
    """The option that names run's model to ``ddltune recommend``: ``--layers FILE`` or
    ``--model NAME``."""
    return f"--layers {layers}" if layers is not None else f"--model {model}"


def recommend_command(source: str, what: str, batch_size: int, max_workers: int) -> str:
    """``ddltune recommend`` for run's model and limits on ``source`` (``--profile FILE``
    or ``--preset NET --device DEV``); ``what``: :func:`model_option`."""
    return (
        f"ddltune recommend {source} {what} --batch-size {batch_size} --max-workers {max_workers}"
    )


def _accelerator_plugins() -> bool:
    """Whether a jax plugin for an accelerator (CUDA, ROCm, TPU, …) is installed: jax
    finds them as ``jax_plugins`` entry points or modules of that namespace package."""
    import importlib.metadata
    import importlib.util
    import pkgutil

    if list(importlib.metadata.entry_points(group="jax_plugins")):
        return True
    if importlib.util.find_spec("libtpu") is not None:
        return True
    try:
        import jax_plugins
    except ImportError:
        return False
    return any(True for _ in pkgutil.iter_modules(jax_plugins.__path__))


def _infeasible_text(
    e: Exception,
    kept: Path | None,
    what: str,
    workload,
    max_workers,
    reliable: bool = True,
    before: tuple[str, str] | None = None,
) -> str:
    """Run's error when nothing fits: recommend's reason, with the options that are
    ``ddltune recommend``'s (run has none of them) and the profile to use them on;
    ``before``: (network, device) of the prior preset it was found on before measuring
    (the command then names the preset)."""
    reason = str(e).replace(f" {MEMORY_REMEDIES}", "").rstrip(".")
    profile = str(kept) if kept is not None else "DIR/profile.json"
    source = (
        f"--preset {before[0]} --device {before[1]}"
        if before is not None
        else f"--profile {profile}"
    )
    return (
        (f"nothing was measured: on the prior's device ({before[1]}), " if before else "")
        + f"{reason}. 'ddltune run' sizes the model as given ({what}, --batch-size "
        f"{workload.batch_size}); a smaller --batch-size may fit, and 'ddltune recommend' "
        "has the other remedies: "
        f"'{recommend_command(source, what, workload.batch_size, max_workers)} "
        "--device-memory 80G"
        + ("" if reliable else " --force")  # an unreliable profile: recommend would refuse it
        + "' (a device with more memory), --accumulation-steps K, "
        "--activation-checkpointing full, --optimizer sgd"
        + (f" (the fitted profile is kept in {kept})" if kept is not None else "")
    )


def _keep_measurements(staged: Path, out: Path, log) -> tuple[Path, int] | None:
    """Copy a failed or interrupted run's measurements beside ``-o`` under a new name.

    The staging folder (and ``-o``, left whole) lose nothing of what the user
    had; this keeps what the run itself measured, so that it is not lost with
    the staging folder: ``<out>.measurements-<UTC>.jsonl`` (never an existing
    name), said on the log (when one is given) with the commands that continue
    from it. Returns the path and its record count, or ``None`` when nothing was
    measured or it cannot be written.
    """
    try:
        if not staged.is_file() or staged.stat().st_size == 0:
            return None
        dest = _beside(out, "measurements", "jsonl")
        text = staged.read_text(encoding="utf-8")
        atomic_write_text(dest, text)
    except OSError:
        return None
    n = sum(1 for line in text.splitlines() if line.strip())
    _say(
        log,
        f"kept the {n} measurements of this run in {dest} (finish them with 'ddltune "
        f"collect -o {dest} --resume', or use them: 'ddltune run --measurements {dest} "
        "-o DIR')",
    )
    return dest, n


@contextlib.contextmanager
def _timed(timings: dict, key: str):
    """Add the seconds the block takes to ``timings[key]``."""
    t0 = time.monotonic()
    try:
        yield
    finally:
        timings[key] = timings.get(key, 0.0) + time.monotonic() - t0


def _check_run_args(
    workers, batch_size, max_workers, ranks_per_node, budget_s, validate_steps=5
) -> None:
    for name, v, lo in (
        ("workers", workers, 2),
        ("batch_size", batch_size, 1),
        ("max_workers", max_workers, 1),
        ("ranks_per_node", ranks_per_node, 1),
        ("validate_steps", validate_steps, 1),
    ):
        if v is None and name == "ranks_per_node":  # the measured topology
            continue
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise ValueError(f"{name} must be an integer ≥ {lo}, got {v!r}")
    if not (isinstance(budget_s, int | float) and math.isfinite(budget_s) and budget_s > 0):
        raise ValueError(f"budget_s must be a number of seconds > 0, got {budget_s!r}")


def _measure(
    m_path, measurements, workers, min_bytes, max_bytes, budget_s, progress, log, emulate=None,
    step_factor=RUN_DEFAULTS["step_factor"],
) -> int:  # fmt: skip
    """Step 1: copy the given measurement files, or collect on local processes; the record count."""
    if measurements:
        _say(log, f"[1/4] reading {len(measurements)} measurement file(s)")
        n_records = _copy_measurements(measurements, m_path)
        _say(log, f"  {n_records} records copied to {m_path.name}")
        return n_records
    _say(
        log,
        f"[1/4] measuring collectives and compute with {workers} local worker processes "
        f"({format_bytes(min_bytes)} – {format_bytes(max_bytes)})",
    )
    if emulate is not None:
        _say(log, f"  in the emulated cluster {emulate.spec.text}")
    res = calibration.collect(
        m_path,
        emulate=emulate,
        workers=[workers],
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        step_factor=step_factor,
        iters=RUN_DEFAULTS["iters"],
        budget_s=budget_s,
        rounds=RUN_DEFAULTS["rounds"],
        launcher="local",
        overwrite=True,
        progress=progress,
        log_dir=m_path.parent / "logs",
    )
    _say(log, f"  {res.written} records in {res.elapsed_s:.0f} s")
    note = _wrong_results_note(res.records)
    if note:
        _say(log, f"  warning: {note}")
    return res.written


def _wrong_results_note(records: list[dict]) -> str | None:
    """What a collection's wrong results were, by record, or ``None`` when there were none.

    A collective's result is checked against the expected sum (nccl-tests'
    ``#wrong``); a record with wrong calls is kept with its count and left out of
    the fit (:func:`calibration.calibrate`).
    """
    bad = [r for r in records if r.get("kind") == "collective" and int(r.get("wrong", 0))]
    if not bad:
        return None
    calls = sum(int(r["wrong"]) for r in bad)
    what = format_first(
        (
            f"{r['collective']} {format_bytes(r['message_bytes'])} on {r['num_ranks']} ranks "
            f"({int(r['wrong'])} of its calls)"
            for r in bad
        ),
        4,
    )
    return (
        f"{calls} measured call{'s' if calls != 1 else ''} returned a wrong result (checked "
        f"against the expected sum), in {len(bad)} record{'s' if len(bad) != 1 else ''}: "
        f"{what}; "
        f"{'these records are' if len(bad) > 1 else 'this record is'} kept with the 'wrong' "
        "count and left out of the fit ("
        + (
            calibration.known_wrong_cause(records)
            or "an overloaded or faulty machine: measure again if it repeats"
        )
        + ")"
    )


def _calibrate(m_path: Path, prof_path: Path, prior_preset, progress, log, shown=None):
    """Step 2: fit the profile and save it (input paths in its provenance as ``shown`` maps them)."""
    _say(log, "[2/4] calibrating the cost model (held-out errors below)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", calibration.CalibrationWarning)  # shown below instead
        profile = calibration.calibrate(m_path, prior_preset=prior_preset, progress=progress)
    names = {str(k): str(v) for k, v in (shown or {}).items()}
    for entry in profile.provenance.get("inputs") or []:
        if isinstance(entry, dict) and entry.get("path") in names:
            entry["path"] = names[entry["path"]]  # the final path, not the staging folder's
    for point in profile.validation.get("worst") or []:  # the worst points' file:line too
        if isinstance(point, dict) and point.get("file") in names:
            point["file"] = names[point["file"]]
    for staged, final in names.items():  # and the notes' (a point the fit does not follow)
        profile.notes = [n.replace(staged, final) for n in profile.notes]
        profile.warnings = [w.replace(staged, final) for w in profile.warnings]
    profile.save(prof_path, overwrite=True)
    return profile


def _recommend(profile, workload, max_workers, ranks_per_node, log, again: bool = False):
    """Step 3: the recommendation, forced (with the refusal kept) on an unreliable profile."""
    _say(
        log,
        "[3c/4] recommending again with the step terms the validation measured"
        if again
        else f"[3/4] recommending for {workload.name}, batch {workload.batch_size} per worker, "
        f"up to {max_workers} workers",
    )
    kwargs = dict(max_workers=max_workers, ranks_per_node=ranks_per_node)
    try:
        return recommend(profile, workload, **kwargs), None
    except UnreliableProfileError as e:
        p90 = float(getattr(profile, "heldout_p90", math.nan))
        _say(
            log,
            f"  the tuner refuses this profile (held-out p90 error {100 * p90:.1f}%, limit "
            f"{100 * RELIABLE_P90_LIMIT:.0f}%): recommending anyway, marked UNRELIABLE",
        )
        return recommend(profile, workload, force=True, **kwargs), str(e)


def _validate(profile, workers: int, stage: Path, log, emulate=None, steps: int = 5) -> list:
    """Step 3b: real training against the profile's predictions; one result per model.

    On this machine: the MLP with ps (colocated), p2p and ring on ``workers``
    processes (``DIR/validation.jsonl``). In an emulated cluster: the seed
    paper's experiment (:func:`tuner.validation.seed_experiment`: 1 and 2
    colocated servers, 1 dedicated where a rank is left, P2P, ring) at every
    worker count from 2 to its ranks, for the MLP and the CNN
    (``validation.jsonl``, ``validation-cnn.jsonl``).
    """
    if emulate is not None:
        return _seed_experiment(profile, stage, log, emulate, steps)
    _say(log, f"[3b/4] validating: real MLP training on {workers} local processes")
    validation = validate_training(
        profile,
        model="mlp",
        workers=(workers,),
        # colocated servers: the run uses the process count it measured
        # (dedicated ones would add a process the profile never saw)
        colocated=True,
        measurements=stage / "validation.jsonl",
        overwrite=True,
        steps=steps,
        repeats=2,
    )
    _say_validation(log, validation)
    return [validation]


def _fit_validation_steps(profile, stage: Path, out: Path, log):
    """Step 3c: the validation's steps fitted into the profile's step terms.

    A microbenchmark profile leaves the terms a training step has and
    microbenchmarks do not (``calibration.STEP_TERMS``) at their prior (×3 on
    the communication), which sets the width of the recommendation's 90%
    interval. The validation just measured real steps on the same machines:
    each model's records are fitted (:func:`tuner.validation.fit_step_records`,
    what ``ddltune validate`` fits in each of its cross-validation folds), one
    model after the other (the MLP's posterior is the CNN's prior). Returns the
    new profile, or ``None`` when no file has a single-worker step and another.
    """
    from .validation import can_fit_step_records, fit_step_records

    informed, runs, models = profile, 0, []
    for name in ("validation.jsonl", "validation-cnn.jsonl"):
        path = stage / name
        if not path.exists():
            continue
        steps = [r for r in read_records(path) if r.get("kind") == "step"]
        if not can_fit_step_records(steps):
            continue
        informed = fit_step_records(informed, steps, reference=profile)
        runs += len(steps)
        spec = steps[0].get("model_spec")
        models.append(str(spec.get("model") if isinstance(spec, dict) else "the model").upper())
    if informed is profile:
        return None
    # the files' final paths, not the staging folder's (as _calibrate does for its inputs)
    shown = {str(stage / n): str(out / n) for n in ("validation.jsonl", "validation-cnn.jsonl")}
    st = informed.fit["steps"]
    st["files"] = [shown.get(f, f) for f in st["files"]]
    informed.provenance["steps"] = st["files"]
    for row in st["rows"]:
        row["file"] = shown.get(row["file"], row["file"])
    terms = st["terms"]
    _say(
        log,
        f"  step terms fitted on the validation's {runs} steps ({' then '.join(models)}): "
        f"{sum(t['identified'] for t in terms.values())} of {len(terms)} identified; "
        "profile.json keeps them",
    )
    return informed


def _changed_text(before, after) -> str:
    """What fitting the validation's steps did to the recommendation (one line)."""

    def step(c) -> str:
        lo, hi = c.interval_s
        return (
            f"{format_seconds(c.iteration_time_s)} (90%: {format_seconds(lo)} – "
            f"{format_seconds(hi)})"
        )

    same = before.describe() == after.describe()
    return (
        f"with the steps: {after.describe()}, {step(after)}; before them "
        + ("the same configuration, " if same else f"{before.describe()}, ")
        + step(before)
    )


def _seed_experiment(profile, stage: Path, log, emulate, steps: int = 5) -> list:
    """Step 3b in an emulated cluster: the seed paper's experiment, MLP and CNN."""
    ranks = emulate.spec.num_ranks
    out = []
    for model, name in (("mlp", "validation.jsonl"), ("cnn", "validation-cnn.jsonl")):
        _say(
            log,
            f"[3b/4] validating: real {model.upper()} training in the emulated cluster "
            f"{emulate.spec.text}, " + ("2 workers" if ranks == 2 else f"2–{ranks} workers"),
        )
        v = seed_experiment(
            profile,
            range(2, ranks + 1),
            processes=ranks,
            model=model,
            measurements=stage / name,
            overwrite=True,
            emulate=emulate,
            steps=steps,
        )
        _say_validation(log, v)
        out.append(v)
    return out


def _say_validation(log, v) -> None:
    used, total = v.tau_pairs
    cover = (
        f", 90% interval coverage {100 * v.interval_coverage:.0f}% (median half-width "
        f"{100 * v.interval_half_width:.1f}%)"
        if v.interval_coverage == v.interval_coverage  # not NaN
        else ""
    )
    tau = (
        f"Kendall tau {v.kendall_tau:.2f} over {used} of {total} pairs that differ beyond "
        f"their spread (all pairs {v.kendall_tau_all:.2f})"
        if used
        else f"Kendall tau n/a (none of {total} pairs differs beyond its spread; all pairs "
        f"{v.kendall_tau_all:.2f})"
    )
    _say(
        log,
        f"  {len(v.rows)} configurations: MAPE {100 * v.mape:.1f}%, {tau}, "
        f"regret {100 * v.regret:.1f}%{cover}",
    )
    note = getattr(v, "step_fit_note", "") or ""
    if getattr(v, "step_fit", None) == "profile" and "one worker count" in note:
        _say(log, f"  (predicted with {note})")  # why the intervals are that wide


def _report(
    out,
    profile,
    workload,
    rec,
    m_path,
    measurements,
    timings,
    refusal,
    command,
    validation,
    progress,
):
    """Step 4: the report (with a progress bar over its parts when ``progress``)."""
    bar = None
    if progress:
        from tqdm.auto import tqdm

        tty = sys.stderr.isatty()  # in a log: one update every few seconds, not one per part
        bar = tqdm(
            total=7, desc="report", unit="part", file=sys.stderr, leave=False,
            mininterval=0.1 if tty else 5.0, dynamic_ncols=tty,
        )  # fmt: skip
    started = []

    def step(msg: str) -> None:  # called as each part starts: count the previous one done
        if bar is not None:
            if started:
                bar.update(1)
            started.append(msg)
            bar.set_postfix_str(msg)

    try:
        return build_report(
            out,
            profile=profile,
            workload=workload,
            recommendation=rec,
            records=read_records(m_path[1]),
            inputs=[m_path] + [Path(p) for p in (measurements or [])],
            timings=dict(timings),
            refusal=refusal,
            command=command,
            validation=validation,
            overwrite=True,
            progress=step,
        )
    finally:
        if bar is not None:
            bar.close()


def _write_recommendation(
    rec_path, rec, refusal, workload, m_path, prof_path, measurements, validation, timings
) -> None:
    """``DIR/recommendation.json``: the recommendation with its inputs, refusal and timings."""
    doc = rec.to_dict()
    doc["refusal"] = refusal
    doc["workload"] = {
        "name": workload.name,
        "batch_size": workload.batch_size,
        "parameters": workload.total_params,
        "gradient_bytes": workload.total_param_bytes,
        # memory_bytes_per_rank holds activations only for a transformer (NO_ACTIVATIONS):
        # the recommendation's own account of its memory says whether they were counted
        "activations_in_memory": bool(rec.excluded.get("activations")),
    }
    # absolute: 'ddltune show' of this file from another folder named a path relative to
    # the folder the run started in (a new user's trial)
    doc["inputs"] = {
        "measurements": os.path.abspath(m_path),
        "profile": os.path.abspath(prof_path),
        "source_measurements": [os.path.abspath(p) for p in (measurements or [])],
    }
    if validation:
        doc["validation"] = validation[0].to_dict()
        doc["validation_by_model"] = {v.rows[0].model: v.to_dict() for v in validation if v.rows}
    doc["timings"] = {k: round(v, 3) for k, v in timings.items()}
    atomic_write_text(rec_path, json.dumps(jsonable(doc), indent=2, allow_nan=False) + "\n")
