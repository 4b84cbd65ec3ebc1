"""``collect``: measure collectives and compute on this machine or cluster, into a JSON Lines file.

The measuring itself happens in :mod:`calibration._worker`; this module plans
the run, starts the workers (locally with :func:`launch.launch_local`, or
joins an ``srun``/``mpirun`` job in-process), writes every record the moment
it arrives (:class:`calibration.RecordWriter`: validated, flushed, fsynced),
shows progress, and summarises.

Local runs: the parent process writes the file from what rank 0 sends, so a
worker that crashes or hangs cannot corrupt it; the run stops within
``timeout_s`` (plus a few seconds to stop the workers) of a fault, names the
rank and the point, and ``resume=True`` measures only what is missing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from costmodel import BUSBW_FACTOR, InputFileError, format_bytes, format_choices
from launch import (
    LaunchError,
    announce_alive,
    describe_silent,
    detect_cluster,
    initialize_worker,
    launch_local,
    rank_processes,
    set_message_handler,
    silent_ranks,
)

from ._names import COLLECT_SUITES as SUITES
from ._records import RecordWriter, read_records
from ._worker import _DTYPE_BYTES, COLLECT_PATTERNS, message_sizes, plan_points, point_key
from ._worker import run as run_worker

__all__ = ["collect", "CollectResult", "CollectError", "COLLECT_PATTERNS", "SUITES", "summary_rows"]

LAUNCHERS = ("auto", "local")


class CollectError(RuntimeError):
    """A collection run stopped early (a worker crashed, hung or never started).

    The records written before the fault are valid; the message says so and
    how to finish (``resume=True`` / ``--resume``).

    Attributes:
        rank, where: the faulty rank and what it was measuring (from
            :class:`launch.LaunchError`), or ``None``.
        written: records written by this run before it stopped.
        reason: what stopped it, without the advice on the file (which names
            ``--resume``, collect's option): for a caller that words its own,
            as ``ddltune run`` does; the message where none was given.
    """

    def __init__(
        self, message: str, *, rank=None, where=None, written: int = 0, reason: str | None = None
    ):
        super().__init__(message)
        self.rank = rank
        self.where = where
        self.written = written
        self.reason = message if reason is None else reason


@dataclasses.dataclass
class CollectResult:
    """What :func:`collect` returns.

    Attributes:
        path: the measurement file.
        written: records written by this run.
        skipped: points skipped because the file already had them (resume).
        wrong: measured calls, over all points of this run, whose result
            failed the correctness check (nccl-tests' ``#wrong``); 0 on a
            healthy system.
        elapsed_s: wall time of the whole run, seconds.
        launches: one dict per worker count: ``workers``, ``num_ranks``,
            ``ranks_per_node``, ``points``, ``skipped``, ``elapsed_s``.
        records: the records this run wrote, in order.
        rank: this process's rank (0 for local runs; under srun/mpirun only
            rank 0 writes and reports).
    """

    path: Path
    written: int
    skipped: int
    wrong: int
    elapsed_s: float
    launches: list[dict]
    records: list[dict]
    rank: int = 0

    def summary(self) -> dict:
        """A JSON-ready summary: counts, timing, and the per-point table rows."""
        return {
            "output": str(self.path),
            "written": self.written,
            "skipped": self.skipped,
            "wrong": self.wrong,
            "elapsed_s": self.elapsed_s,
            "launches": self.launches,
            "rows": summary_rows(self.table_records()),
        }

    def table_records(self) -> list[dict]:
        """The records to tabulate: every record of the file for the worker counts of this run."""
        if self.rank != 0 or not self.path.exists():
            return list(self.records)
        ranks = {(x["num_ranks"], x["ranks_per_node"]) for x in self.launches if "num_ranks" in x}
        dtypes = {r.get("dtype") for r in self.records} or None
        out = []
        try:
            recs = read_records(self.path)
        except Exception:  # an unreadable file is reported elsewhere; show this run's
            return list(self.records)
        for r in recs:
            if r.get("source") != "ddltune collect" or (dtypes and r.get("dtype") not in dtypes):
                continue
            if r["kind"] == "collective" and ranks:
                n = r["num_ranks"]
                within = r.get("nodes_at_once") and any(n == g for _, g in ranks)
                if not within and not any(n == nr for nr, _ in ranks):
                    continue
            out.append({k: v for k, v in r.items() if not k.startswith("_")})
        return out


def _statistic(rec: dict) -> str:
    """The statistic ddltune fits: p10 on CPU (noisy, bimodal), median elsewhere (DESIGN.md)."""
    return "p10" if rec.get("backend") == "cpu" else "median"


def summary_rows(records: Iterable[dict]) -> list[dict]:
    """One row per record, with nccl-tests' derived bandwidths.

    Collective rows: ``collective``, ``num_ranks``, ``ranks_per_node``,
    ``message_bytes``, ``count`` (elements), ``dtype``, ``statistic`` (the
    fitted one: ``p10`` on CPU, ``median`` on GPU), ``time_s``, ``algbw``
    (S/t, bytes/s), ``busbw`` (algbw × :func:`costmodel.BUSBW_FACTOR`, bytes/s),
    ``wrong``, and where the record has them ``algorithm`` and ``nodes_at_once``. Compute rows: ``op``, ``shape``, ``num_ranks``, ``dtype``,
    ``statistic``, ``time_s``, ``flops_per_s``.

    Source: nccl-tests ``doc/PERFORMANCE.md`` (algbw, busbw).
    """
    rows = []
    for r in records:
        stat = _statistic(r)
        ts = r["time_s"]
        t = ts.get(stat) or ts.get("median") or ts.get("mean") or ts.get("min")
        if r["kind"] == "collective":
            s, n = r["message_bytes"], r["num_ranks"]
            algbw = s / t
            rows.append(
                {
                    "collective": r["collective"],
                    "num_ranks": n,
                    "ranks_per_node": r["ranks_per_node"],
                    "message_bytes": s,
                    "count": s // _DTYPE_BYTES.get(r.get("dtype"), 1),
                    "dtype": r.get("dtype"),
                    "statistic": stat,
                    "time_s": t,
                    "algbw": algbw,
                    "busbw": algbw * float(BUSBW_FACTOR(r["collective"], n)),
                    "wrong": int(r.get("wrong", 0)),
                }
                | ({"algorithm": r["algorithm"]} if r.get("algorithm") else {})
                | ({"nodes_at_once": r["nodes_at_once"]} if r.get("nodes_at_once") else {})
            )
        elif r["kind"] == "compute":
            rows.append(
                {
                    "op": r["op"],
                    "shape": r.get("shape"),
                    "num_ranks": r["num_ranks"],
                    "dtype": r.get("dtype"),
                    "statistic": stat,
                    "time_s": t,
                    "flops_per_s": r["flops"] / t,
                }
            )
    return rows


def _check_names(values, valid, what: str) -> list[str]:
    if isinstance(values, str):
        values = [v.strip() for v in values.split(",") if v.strip()]
    values = list(values)
    bad = [v for v in values if v not in valid]
    if bad or not values:
        raise ValueError(
            f"{what}: unknown {', '.join(map(repr, bad)) or 'empty list'}; valid: {format_choices(valid, bad[0] if len(bad) == 1 else None)}"
        )
    return values


def _check_int(value, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer ≥ {minimum}, got {value!r}")
    return value


def _check_pos(value, name: str) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number > 0, got {value!r}") from None
    if not v > 0 or v != v or v == float("inf"):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return v


class _Progress:
    """tqdm bar over all points of all launches (points done / total, time left).

    tqdm is imported only when a bar is shown (``progress=True``).
    """

    def __init__(self, total: int, enabled: bool):
        self.bar = None
        # In a log (stderr not a terminal): an update every 5 s, no forced redraws.
        self.tty = bool(getattr(sys.stderr, "isatty", lambda: False)())
        if enabled:
            from tqdm.auto import tqdm

            self.bar = tqdm(
                total=total,
                unit="point",
                desc="collect",
                file=sys.stderr,
                dynamic_ncols=self.tty,
                mininterval=0.1 if self.tty else 5.0,
                leave=True,
            )

    def retotal(self, delta: int) -> None:
        if self.bar is not None and delta:
            self.bar.total = max(self.bar.n, self.bar.total + delta)
            if self.tty:
                self.bar.refresh()

    def describe(self, text: str) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(text, refresh=self.tty)

    def position(self) -> int:
        """Points done so far (0 without a bar)."""
        return 0 if self.bar is None else int(self.bar.n)

    def advance_to(self, points: float) -> None:
        """Move the bar forward to ``points`` done (whole points; never backward).

        Interleaved collection times every point in several rounds and writes
        the records after the last: the workers' ``point`` messages carry the
        points' worth of timing done so far (``done``), so that the bar moves
        through the rounds instead of sitting at 0 until the records arrive.
        """
        if self.bar is not None and int(points) > self.bar.n:
            if self.bar.n == 0:
                # The first points carry the launch (processes starting, XLA compiling):
                # counted, not timed, so that the time left comes from the rate that
                # follows (timed, a 1-minute collection's first estimate read 26 min).
                self.bar.n = self.bar.last_print_n = int(points)
                self.bar.last_print_t = time.time()
                return
            self.bar.update(int(points) - self.bar.n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def collect(
    output: str | os.PathLike,
    *,
    workers: int | Sequence[int] | None = None,
    collectives: Sequence[str] | str | None = None,
    min_bytes: int = 1024,
    max_bytes: int = 64 * 1024**2,
    step_factor: int = 4,
    dtype: str = "float32",
    suite: Sequence[str] | str = SUITES,
    iters: int = 5,
    max_iters: int = 200,
    warmup_iters: int = 2,
    budget_s: float = 0.5,
    rounds: int = 1,
    timeout_s: float = 50.0,
    launcher: str = "auto",
    coordinator: str | None = None,
    resume: bool = False,
    overwrite: bool = False,
    matmul_sizes: Sequence[int] | None = None,
    progress: bool = False,
    log_dir: str | os.PathLike | None = None,
    emulate=None,
    force: bool = False,
) -> CollectResult:
    """Measure collectives and compute with ``jax.distributed`` and write schema-v1 records.

    Each worker count gets its own launch of ``workers`` processes (one device
    each). See :mod:`calibration._worker` for what is measured and how it is
    timed, and :mod:`calibration._records` for the record schema.

    (Long only by its 21 documented options: the body checks them and hands
    over to the local launch or to the srun/mpirun job.)

    Args:
        output: the JSON Lines file to write.
        workers: worker processes per launch, each ≥ 1 (one launch per value;
            default ``(2,)``). Under srun/mpirun the job's size is used and a
            different value is an error.
        collectives: names from :data:`COLLECT_PATTERNS` (list or
            comma-separated string; default all).
        min_bytes, max_bytes: smallest and largest message, bytes
            (1 ≤ min ≤ max), nccl-tests' convention (the full array for
            all_gather / reduce_scatter); sizes are rounded down to whole
            elements, and to a multiple of n elements where the array is split.
        step_factor: size multiplier between points (integer ≥ 2).
        dtype: ``"float32"`` or ``"bfloat16"``.
        suite: subset of :data:`SUITES` (list or comma-separated string).
        iters: at least this many timed repetitions per point (≥ 1).
        max_iters: at most this many (≥ iters); samples are all kept.
        warmup_iters: untimed calls after compiling (≥ 0).
        budget_s: seconds per point: repetitions continue until both ``iters``
            and this budget are reached (> 0).
        rounds: timing passes over all points of a launch (≥ 1). With more
            than one, every point is compiled first and then timed in
            ``rounds`` interleaved passes, each with 1/rounds of ``budget_s``,
            ``iters`` and ``max_iters``, so that a slow stretch of a noisy
            machine spreads over many points instead of owning one (measured
            on 2 CPU cores: whole points at a steady ~3.8 ms where neighbours
            took 0.2 ms). Records then arrive after the last pass of a launch.
        timeout_s: a worker silent this long (seconds, > 0) is hung; the run
            stops within about ``timeout_s`` + 3 s of a fault (a crash: at once).
            A worker that has not joined after ``max(timeout_s, 30)`` s did not
            start.
        launcher: ``"auto"`` (inside srun/mpirun: join that job in-process;
            otherwise local) or ``"local"`` (always start local processes).
        coordinator: ``HOST:PORT`` of rank 0 for Open MPI 5 / MPICH jobs (or
            set ``JAX_COORDINATOR_ADDRESS``).
        resume: append to an existing file, skipping points it already has
            with the same settings (:func:`calibration.record_key`); the
            file must have been measured here (same host fingerprint, backend,
            device kind and emulated cluster shape, :func:`record_origin`).
        overwrite: replace an existing file (the old one stays until the
            first new record exists, :class:`RecordWriter`).
        matmul_sizes: matmul sizes m = n = k (default by backend: 128…1024 on
            CPU, 1024…8192 on GPU).
        progress: show a progress bar on stderr.
        log_dir: keep each worker's output there (``workers{n}/rank{r}.log``).
        emulate: a started :class:`launch.EmulatedCluster` to run the local
            workers in (default ``workers``: all its ranks); every record gets
            ``"emulated"`` beside its provenance fields
            (:meth:`launch.EmulatedCluster.provenance`).
        force: start more local workers than ``cores × WORKERS_PER_CORE``
            (:func:`check_local_bounds`; the memory bound still holds).

    Returns:
        A :class:`CollectResult`.

    Raises:
        ValueError: an invalid argument (named in the message), or ``resume``
            and ``overwrite`` together.
        FileExistsError: ``output`` exists and neither ``resume`` nor
            ``overwrite`` was given (the message suggests both).
        calibration.InputFileError: ``resume`` on a malformed file, or one
            measured on another machine (the message says whose).
        OutputPathError: ``output`` is a symbolic link.
        CollectError: a worker crashed, hung or never started; the message
            names the rank and the point; records already written stay valid.

    Example:
        >>> from calibration import collect
        >>> res = collect("m.jsonl", workers=[2], max_bytes=4 * 1024**2)  # doctest: +SKIP
        >>> res.written, res.wrong  # doctest: +SKIP
        (66, 0)
    """
    t_start = time.monotonic()
    worker_list = _worker_list(workers)
    config = _measure_config(
        collectives, suite, dtype, min_bytes, max_bytes, step_factor, iters, max_iters,
        warmup_iters, budget_s, rounds,
    )  # fmt: skip
    timeout_s = _check_pos(timeout_s, "timeout_s")
    if launcher not in LAUNCHERS:
        raise ValueError(
            f"launcher must be one of {format_choices(LAUNCHERS, launcher)}, got {launcher!r}"
        )
    if resume and overwrite:
        raise ValueError("resume and overwrite exclude each other: pick one")
    if matmul_sizes is not None:
        matmul_sizes = [_check_int(int(s), "matmul_sizes", 1) for s in matmul_sizes]
    config.update(matmul_sizes=matmul_sizes, source="ddltune collect")
    mode = "resume" if resume else "overwrite" if overwrite else "new"
    path = Path(output)
    cluster = detect_cluster() if launcher == "auto" else None
    if cluster is None:
        check_local_bounds(
            worker_list or [2 if emulate is None else emulate.spec.num_ranks],
            max_bytes if "collectives" in config["suite"] else 0,
            force=force,
        )
    if cluster is not None:
        return _collect_in_job(
            path, mode, config, worker_list, cluster, coordinator, timeout_s, progress, t_start
        )
    default_workers = [2 if emulate is None else emulate.spec.num_ranks]
    return _collect_local(
        path, mode, config, worker_list or default_workers, timeout_s, progress, log_dir,
        t_start, emulate,
    )  # fmt: skip


#: Local worker processes allowed per CPU core without ``force`` (issue 18).
WORKERS_PER_CORE = 4
#: Buffers of ``max_bytes`` one rank holds for a point: input, output, the
#: expected result and one temporary of the correctness check.
BUFFERS_PER_POINT = 4


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def mem_available_bytes() -> int | None:
    """``MemAvailable`` of ``/proc/meminfo`` in bytes (``None`` where there is none)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def known_wrong_cause(records) -> str | None:
    """Words for the known cause of collectives' wrong results, when one explains them all.

    Every record with wrong calls a CPU reduce_scatter: XLA:CPU's gloo reduce-scatter
    returns wrong values at the end of rank 0's chunk, intermittently
    (jax-ml/jax#40830: 4 MiB chunks wrong in 148 of 150 iterations; gloo's
    ReduceScatterHalvingDoubling sends from the caller's buffer while the other ranks
    overwrite it) — not the machine. Seen here with 256 KiB – 4 MiB chunks on 2 ranks
    and a 64 KiB chunk on 8 (2026-12-06). ``None`` when there are none, or another
    collective or backend is among them (the machine is then suspect).

    Args:
        records: record dicts (``kind``, ``collective``, ``wrong``, ``backend``).
    """
    bad = [r for r in records if r.get("kind") == "collective" and int(r.get("wrong", 0) or 0)]
    if not bad or any(
        r.get("collective") != "reduce_scatter" or r.get("backend") != "cpu" for r in bad
    ):
        return None
    return (
        "a known bug of XLA:CPU's gloo reduce-scatter, not this machine: it returns wrong "
        "values at the end of rank 0's chunk, intermittently (jax-ml/jax#40830)"
    )


def check_local_bounds(
    worker_list,
    max_bytes: int,
    *,
    force: bool = False,
    what: str | None = None,
    force_option: str | None = "--force",
) -> None:
    """Refuse a local run this machine cannot hold, before anything starts.

    Two bounds: at most ``cores × WORKERS_PER_CORE`` worker processes
    (``force`` lifts it), and ``max_bytes × BUFFERS_PER_POINT × workers`` bytes
    of buffers within ``MemAvailable`` (``/proc/meminfo``; not lifted by
    ``force``: an allocation beyond it ends in the kernel's OOM killer).

    Args:
        worker_list: worker counts, one launch each (the largest counts).
        max_bytes: the largest message, bytes (0: no collectives measured).
        force: allow more workers than the core bound.
        what: how the message names the process count (default ``--workers N``;
            e.g. ``--emulate 2x64@200mbit (128 ranks)``).
        force_option: the caller's option that lifts the core bound, offered in
            the message; ``None`` where the caller has none (``ddltune run``).

    Raises:
        ValueError: naming ``--workers`` or ``--max-bytes``, the bound and why.
    """
    n = max(worker_list)
    what = what or f"--workers {n}"
    cores = _cores()
    if n > cores * WORKERS_PER_CORE and not force:
        raise ValueError(
            f"{what} on {cores} CPU cores: more than {WORKERS_PER_CORE} local processes "
            "per core only time the scheduler; use fewer"
            + (
                f", a cluster (srun/mpirun), or {force_option} to insist"
                if force_option
                else " or measure on a cluster (ddltune collect under srun/mpirun, then "
                "ddltune run --measurements FILE)"
            )
        )
    need = max_bytes * BUFFERS_PER_POINT * n
    avail = mem_available_bytes()
    if avail is not None and need > avail:
        raise ValueError(
            f"--max-bytes {format_bytes(max_bytes)} × {BUFFERS_PER_POINT} buffers × {n} "
            f"processes ({what})"
            f" = {format_bytes(need)} of buffers, more than this machine's available memory "
            f"({format_bytes(avail)}, MemAvailable); lower --max-bytes or --workers"
        )


def _worker_list(workers) -> list[int] | None:
    """The worker counts of ``workers`` (None: the default, or the job's size)."""
    if workers is None:
        return None
    worker_list = [workers] if isinstance(workers, int) else list(workers)
    if not worker_list:
        raise ValueError("workers: expected at least one worker count, such as [2]")
    for w in worker_list:
        _check_int(w, "workers", 1)
    return worker_list


def _measure_config(
    collectives, suite, dtype, min_bytes, max_bytes, step_factor, iters, max_iters,
    warmup_iters, budget_s, rounds,
) -> dict:  # fmt: skip
    """What the workers measure and how long (see :func:`collect`); ValueError names a bad argument."""
    names = (
        list(COLLECT_PATTERNS)
        if collectives is None
        else _check_names(collectives, COLLECT_PATTERNS, "collectives")
    )
    suites = _check_names(suite, SUITES, "suite")
    if dtype not in _DTYPE_BYTES:
        raise ValueError(
            f"dtype must be one of {format_choices(_DTYPE_BYTES, dtype)}, got {dtype!r}"
        )
    _check_int(min_bytes, "min_bytes", 1)
    _check_int(max_bytes, "max_bytes", 1)
    _check_int(step_factor, "step_factor", 2)
    sizes = message_sizes(min_bytes, max_bytes, step_factor)
    _check_int(iters, "iters", 1)
    _check_int(max_iters, "max_iters", iters)
    _check_int(warmup_iters, "warmup_iters", 0)
    budget_s = _check_pos(budget_s, "budget_s")
    _check_int(rounds, "rounds", 1)
    return {
        "collectives": names,
        "sizes": sizes,
        "dtype": dtype,
        "suite": suites,
        "iters": iters,
        "max_iters": max_iters,
        "warmup_iters": warmup_iters,
        "budget_s": budget_s,
        "rounds": rounds,
    }


def _local_handler(writer, written: list, bar, info: dict, estimate: int, n: int, emulate):
    """The parent's handler of one local launch's messages: records written, plan and progress."""

    def on_message(rank: int, msg: dict) -> None:
        kind = msg.get("type")
        if kind == "record" and rank == 0:
            rec = msg["record"]
            if emulate is not None:
                rec["emulated"] = emulate.provenance()  # beside the provenance fields
            try:
                writer.write(rec)
            except InputFileError as e:  # --resume of another device's file
                raise CollectError(str(e)) from None
            except ValueError as e:  # a bug in the worker, not a usage error
                raise CollectError(
                    f"rank 0 sent an invalid record ({e}); nothing was written for it"
                ) from e
            written.append(rec)
            state["records"] += 1
            bar.advance_to(state["base"] + max(state["records"], state["done"]))
        elif kind == "plan" and rank == 0:
            info.update(
                num_ranks=msg["num_ranks"],
                ranks_per_node=msg["ranks_per_node"],
                points=msg["points"],
                skipped=msg["skipped"],
            )
            bar.retotal(msg["points"] - estimate)
        elif kind == "point" and rank == 0:
            bar.describe(f"{n} workers: {msg.get('where', '')}")
            state["done"] = float(msg.get("done", state["done"]))
            bar.advance_to(state["base"] + max(state["records"], state["done"]))

    # this launch's points: records written, points' worth of timing done (rounds)
    state = {"base": bar.position(), "records": 0, "done": 0.0}
    return on_message


def _collect_local(
    path, mode, config, worker_list, timeout_s, progress, log_dir, t_start, emulate=None
):
    writer = RecordWriter(path, mode, emulated=None if emulate is None else emulate.provenance())
    written: list[dict] = []
    launches: list[dict] = []
    skipped = 0
    # Estimated totals (CPU sizes, all ranks on this host); each launch's "plan"
    # message corrects its share.
    estimates = {}
    for n in worker_list:
        plan = plan_points(config, n, n, num_processes=n)
        estimates[n] = sum(point_key(p) not in writer.existing_keys for p in plan)
    bar = _Progress(sum(estimates.values()), progress)
    try:
        with tempfile.TemporaryDirectory(prefix="ddltune-collect-") as tmp:
            for n in worker_list:
                cfg = dict(config, existing_keys=[list(k) for k in writer.existing_keys])
                cfg_path = Path(tmp) / f"config-{n}.json"
                cfg_path.write_text(json.dumps(cfg), encoding="utf-8")
                info = {"workers": n}
                n_before = len(written)

                on_message = _local_handler(writer, written, bar, info, estimates[n], n, emulate)

                t0 = time.monotonic()
                try:
                    launch_local(
                        "calibration._worker",
                        ["--config", str(cfg_path)],
                        n,
                        timeout_s=timeout_s,
                        # Importing jax and joining can take a while on a loaded machine.
                        start_timeout_s=max(timeout_s, 30.0),
                        on_message=on_message,
                        log_dir=None if log_dir is None else Path(log_dir) / f"workers{n}",
                        cwd=os.getcwd(),
                        emulate=emulate,
                    )
                except LaunchError as e:
                    done = len(written)
                    raise CollectError(
                        f"{e} (with {n} workers). The {done} records written to {path} by this "
                        f"run are valid; run again with --resume to measure the rest",
                        rank=e.rank,
                        where=e.where,
                        written=done,
                        reason=f"{e} (with {n} workers)",
                    ) from e
                info["elapsed_s"] = time.monotonic() - t0
                info.setdefault("points", len(written) - n_before)
                skipped += info.get("skipped", 0)
                launches.append(info)
    finally:
        bar.close()
        writer.close()
    wrong = sum(int(r.get("wrong", 0)) for r in written)
    return CollectResult(
        path, len(written), skipped, wrong, time.monotonic() - t_start, launches, written
    )


def _collect_in_job(
    path, mode, config, worker_list, cluster, coordinator, timeout_s, progress, t_start
):
    """Run as one rank of an srun/mpirun job: measure in-process; rank 0 writes."""
    if worker_list is not None and worker_list != [cluster.num_processes]:
        raise ValueError(
            f"workers={worker_list} but this {cluster.kind} job has {cluster.num_processes} "
            "processes: under srun/mpirun the job's size is the worker count; drop --workers "
            "or launch as many tasks as you want workers"
        )
    rank0 = cluster.process_id == 0
    # Rank 0 opens the file before joining, so that a refused file fails fast.
    writer = RecordWriter(path, mode) if rank0 else None
    bar = _Progress(0, progress and rank0)
    rx = _InJobReceiver(cluster, writer, bar, timeout_s)
    threading.Thread(target=rx.watchdog, name="ddltune-collect-watchdog", daemon=True).start()
    set_message_handler(rx.handler)
    try:
        with _stdout_on_stderr():
            initialize_worker(coordinator_address=coordinator, timeout_s=max(timeout_s, 60.0))
            # before the first collective: rank 0 can then name every rank's host
            announce_alive(cluster.process_id)
            rx.joined = True  # the watchdog beats from now on (not before: an unjoined
            # client's call is a fatal error of the whole job in jax's service)
            keys = writer.existing_keys if writer else []
            cfg = dict(config, existing_keys=[list(k) for k in keys])
            t0 = time.monotonic()
            try:
                run_worker(cfg, rx.handler)
            except Exception:
                if cluster.num_processes > 1:  # a peer that died shows as silent in 2 s
                    time.sleep(2.5)
                    print(
                        f"ddltune collect: rank {cluster.process_id}: a collective failed: "
                        f"{describe_silent(silent_ranks(2.0))}",
                        file=sys.stderr,
                        flush=True,
                    )
                raise
            rx.info["elapsed_s"] = time.monotonic() - t0
    finally:
        rx.stop.set()
        set_message_handler(None)
        bar.close()
        if writer is not None:
            writer.close()
    written = rx.written
    wrong = sum(int(r.get("wrong", 0)) for r in written)
    return CollectResult(
        path,
        len(written),
        rx.info.get("skipped", 0),
        wrong,
        time.monotonic() - t_start,
        [rx.info],
        written,
        rank=cluster.process_id,
    )


class _InJobReceiver:
    """This rank's end of an in-process run: a watchdog on progress and, on rank 0, the file.

    Every message counts as progress; a rank that sees none for ``timeout_s``
    seconds (a peer crashed or hung inside a collective) says so and exits
    (status 1). Rank 0 writes each record and keeps the launch's ``info``.
    """

    def __init__(self, cluster, writer, bar: _Progress, timeout_s: float):
        self.cluster, self.writer, self.bar, self.timeout_s = cluster, writer, bar, timeout_s
        self.rank0 = cluster.process_id == 0
        self.written: list[dict] = []
        self.done = 0.0  # points' worth of timing done (the workers' point messages)
        self.info: dict = {"workers": cluster.num_processes}
        self.last = [time.monotonic(), "starting"]
        self.stop = threading.Event()
        self.joined = False

    def watchdog(self) -> None:
        while not self.stop.wait(1.0):
            if self.joined:
                announce_alive(self.cluster.process_id)
            if time.monotonic() - self.last[0] > self.timeout_s:
                who = describe_silent(silent_ranks(5.0)) if self.joined else "before joining"
                print(
                    f"ddltune collect: error: rank {self.cluster.process_id} saw no progress for "
                    f"{self.timeout_s:g} s while {self.last[1]}: a peer rank crashed or hung "
                    f"({who}); stopping ({len(self.written)} records written are valid; rerun "
                    "with --resume)",
                    file=sys.stderr,
                    flush=True,
                )
                os._exit(1)

    def _print_hosts(self) -> None:
        """One line naming each host's ranks and their process ids.

        A launcher names a failed rank by number (srun, Open MPI) or by process
        id and host (MPICH's Hydra: "PID … RUNNING AT host"); this line ties
        either to the other.
        """
        procs = rank_processes() or {}
        if len({h for h, _ in procs.values()}) < 2:
            return
        by: dict[str, list[str]] = {}
        for r, (h, pid) in sorted(procs.items()):
            by.setdefault(h, []).append(f"{r}" + (f" (pid {pid})" if pid is not None else ""))
        line = "; ".join(f"{h}: {', '.join(rs)}" for h, rs in by.items())
        print(f"# ranks per host: {line}", file=sys.stderr, flush=True)

    def handler(self, msg: dict) -> None:
        self.last[0] = time.monotonic()
        if isinstance(msg.get("where"), str):
            self.last[1] = msg["where"]
        kind = msg.get("type")
        if not self.rank0:
            return
        if kind == "record":
            self.writer.write(msg["record"])
            self.written.append(msg["record"])
            self.bar.advance_to(max(len(self.written), self.done))
        elif kind == "plan":
            self._print_hosts()
            self.info.update(
                num_ranks=msg["num_ranks"],
                ranks_per_node=msg["ranks_per_node"],
                points=msg["points"],
                skipped=msg["skipped"],
            )
            self.bar.retotal(msg["points"])
        elif kind == "point":
            self.bar.describe(msg.get("where", ""))
            self.done = float(msg.get("done", self.done))
            self.bar.advance_to(max(len(self.written), self.done))


@contextlib.contextmanager
def _stdout_on_stderr():
    """File descriptor 1 points at stderr inside the block.

    The collective libraries print on file descriptor 1 (gloo: "[Gloo] Rank 0
    is connected..."); this keeps stdout for the caller's results (--json)
    while measuring.
    """
    sys.stdout.flush()
    saved_stdout = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved_stdout, 1)
        os.close(saved_stdout)
