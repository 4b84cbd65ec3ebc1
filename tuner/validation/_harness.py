"""Run real data-parallel training and record its step times (parent side).

:func:`run_training` starts one local multi-process run of the training
program (:mod:`tuner.validation._train_worker`) with :func:`launch.launch_local`,
trains every configuration given (architecture, servers, bucket size) in that
one launch, and returns one :class:`StepMeasurement` per configuration;
:func:`measure_configurations` runs the launches a validation needs (one per
worker count and process count, plus the single-worker step of the same model)
and writes every measurement as a schema-v1 ``kind: "step"`` record.

Prediction and comparison live in :mod:`tuner` (``ddltune validate``); this
module only measures.

Example:
    >>> from tuner.validation import StepConfig, run_training
    >>> runs = run_training("mlp", 2, [StepConfig("ring", bucket_bytes=1 << 20)],
    ...                     steps=5)  # doctest: +SKIP
    >>> runs.measurements[0].time_s["median"]  # doctest: +SKIP
    0.0021
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from calibration import RecordWriter, time_statistics
from costmodel import Workload
from launch import SYNC_FLOATS_PER_RANK, launch_local

from ._train_worker import (
    ARCHITECTURES,
    bucket_indices,
    model_layers,
    model_spec,
)

__all__ = [
    "StepConfig",
    "StepMeasurement",
    "TrainingRun",
    "model_name",
    "model_workload",
    "processes_needed",
    "run_training",
    "measure_configurations",
    "launch_groups",
    "program_key",
    "same_programs",
]


@dataclasses.dataclass(frozen=True)
class StepConfig:
    """One gradient-exchange configuration of the training harness.

    Attributes:
        architecture: ``"ps"``, ``"p2p"``, ``"ring"`` or ``"hierarchical"`` (the
            ring's buckets, each all-reduced within the node, across nodes, and
            gathered within the node again).
        bucket_bytes: gradient bucket cap, bytes ≥ 0 (0 = one bucket per tensor).
        servers: parameter servers k ≥ 1 for ``ps`` (0 otherwise).
        colocated: ``ps`` servers run on workers 0 … k−1 (else k extra processes).
        p2p_exchange: ``"all_to_all"`` (the cost model's P2P) or ``"reduce_scatter"``.

    Raises:
        ValueError: on an unknown architecture, a negative bucket size,
            ``servers < 1`` for ps, or servers/colocated given for another architecture.
    """

    architecture: str
    bucket_bytes: int = 0
    servers: int = 0
    colocated: bool = False
    p2p_exchange: str = "all_to_all"

    def __post_init__(self):
        if self.architecture not in ARCHITECTURES:
            raise ValueError(
                f"architecture must be one of {', '.join(ARCHITECTURES)}, got {self.architecture!r}"
            )
        if isinstance(self.bucket_bytes, bool) or int(self.bucket_bytes) != self.bucket_bytes:
            raise ValueError(f"bucket_bytes must be an integer, got {self.bucket_bytes!r}")
        if self.bucket_bytes < 0:
            raise ValueError(f"bucket_bytes must be ≥ 0 bytes, got {self.bucket_bytes}")
        object.__setattr__(self, "bucket_bytes", int(self.bucket_bytes))
        if self.architecture == "ps":
            if self.servers < 1:
                object.__setattr__(self, "servers", 1)
        elif self.servers or self.colocated:
            raise ValueError(
                f"servers/colocated apply to the ps architecture only, not {self.architecture!r}"
            )
        if self.p2p_exchange not in ("all_to_all", "reduce_scatter"):
            raise ValueError(
                f"p2p_exchange must be 'all_to_all' or 'reduce_scatter', got {self.p2p_exchange!r}"
            )

    def to_json(self) -> dict:
        """The worker's configuration dict."""
        d = {
            "architecture": self.architecture,
            "bucket_bytes": self.bucket_bytes,
            "servers": self.servers,
            "colocated": self.colocated,
        }
        if self.architecture == "p2p":
            d["p2p_exchange"] = self.p2p_exchange
        return d


def processes_needed(config: StepConfig, workers: int) -> int:
    """Processes a configuration needs: workers, plus k for dedicated parameter servers.

    Example:
        >>> processes_needed(StepConfig("ps", servers=2), 3)
        5
        >>> processes_needed(StepConfig("ps", servers=2, colocated=True), 3)
        3
    """
    if config.architecture == "ps" and not config.colocated:
        return workers + config.servers
    return workers


def program_key(config: StepConfig, spec: dict | str) -> tuple:
    """What decides the step program of a configuration: equal keys run the same program.

    The architecture, its servers and their placement, the P2P exchange and
    the gradient buckets the cap makes of the model's tensors
    (:func:`tuner.validation._train_worker.bucket_indices`, DDP's rule). Two
    caps that cut the tensors into the same buckets — for example 1.5 MiB and
    16 MiB on a model with 77 KiB of gradients, one bucket either way — give
    the same program and the same prediction.

    Args:
        config: a :class:`StepConfig`.
        spec: the model (``"mlp"``, ``"cnn"`` or a spec dict).

    Example:
        >>> program_key(StepConfig("ring", 3 << 19), "cnn") == program_key(StepConfig("ring", 16 << 20), "cnn")
        True
        >>> program_key(StepConfig("ring", 0), "cnn") == program_key(StepConfig("ring", 16 << 20), "cnn")
        False
    """
    leaf_bytes = [int(t["count"]) * 4 for t in model_layers(model_spec(spec))]
    buckets = tuple(tuple(b) for b in bucket_indices(leaf_bytes, config.bucket_bytes))
    exchange = config.p2p_exchange if config.architecture == "p2p" else ""
    return (config.architecture, config.servers, config.colocated, exchange, buckets)


def same_programs(
    configs: Sequence[StepConfig], spec: dict | str
) -> list[tuple[StepConfig, tuple[int, ...]]]:
    """The configurations with one per program: ``(configuration, the other caps it stands for)``.

    Of configurations that run the same program (:func:`program_key`), the one
    with the largest bucket cap is kept, in the place of the first of them; the
    others' caps (ascending) go with it. Measuring it once measures them all:
    timing identical programs twice only adds noise between them.

    Example:
        >>> [(c.bucket_bytes, o) for c, o in same_programs(
        ...     [StepConfig("ring", 0), StepConfig("ring", 3 << 19), StepConfig("ring", 16 << 20)], "cnn")]
        [(0, ()), (16777216, (1572864,))]
    """
    groups: dict[tuple, list[StepConfig]] = {}
    for c in configs:
        groups.setdefault(program_key(c, spec), []).append(c)
    out = []
    for same in groups.values():
        keep = max(same, key=lambda c: c.bucket_bytes)
        others = sorted({c.bucket_bytes for c in same} - {keep.bucket_bytes})
        out.append((keep, tuple(others)))
    return out


@dataclasses.dataclass(frozen=True)
class StepMeasurement:
    """Measured training steps of one configuration.

    Attributes:
        config: the :class:`StepConfig`.
        workers: n, processes computing gradients.
        processes: all processes of the run (n + k for dedicated servers).
        ranks_per_node: processes on the busiest host.
        model: model name (:func:`model_name`), ``model_spec`` its sizes.
        batch_size: samples per worker per step.
        samples_s: the timed steps, seconds (slowest rank's, warm-up excluded).
        compile_s: compile time of the step program, seconds.
        num_buckets: gradient buckets per step.
        record: the schema-v1 ``kind: "step"`` record.
    """

    config: StepConfig
    workers: int
    processes: int
    ranks_per_node: int
    model: str
    model_spec: dict
    batch_size: int
    samples_s: tuple[float, ...]
    compile_s: float
    num_buckets: int
    record: dict

    @property
    def time_s(self) -> dict:
        """Statistics of the samples (min, p10, median, mean, p90, iqr, max, count), seconds."""
        return self.record["time_s"]


@dataclasses.dataclass(frozen=True)
class TrainingRun:
    """What :func:`run_training` returns.

    Attributes:
        measurements: one :class:`StepMeasurement` per configuration, in order.
        params: with ``return_params``: ``{rank: [(initial leaves, final leaves)
            per configuration]}``, numpy float32 arrays in forward order; else {}.
        elapsed_s: wall time of the launch, seconds.
    """

    measurements: list[StepMeasurement]
    params: dict
    elapsed_s: float


def model_name(spec: dict | str) -> str:
    """A short name that identifies the model and its sizes, e.g. ``mlp-784-512x3-10``.

    Example:
        >>> model_name("mlp")
        'mlp-784-512x3-10'
        >>> model_name({"model": "cnn", "channels": 8})
        'cnn-16px-3c-8x3k3-10'
    """
    s = model_spec(spec)
    if s["model"] == "mlp":
        return f"mlp-{s['in']}-{s['width']}x{s['depth']}-{s['classes']}"
    return (
        f"cnn-{s['image']}px-{s['in_channels']}c-{s['channels']}x{s['depth']}"
        f"k{s['kernel']}-{s['classes']}"
    )


def model_workload(spec: dict | str, step_time_s: float | None = None):
    """The :class:`costmodel.Workload` of a harness model (tensors in forward order).

    Args:
        spec: model spec (see :func:`tuner.validation._train_worker.model_spec`).
        step_time_s: measured single-worker step time at the spec's batch size,
            seconds > 0, or ``None`` (compute from FLOPs).

    Example:
        >>> w = model_workload({"model": "mlp", "in": 4, "width": 3, "depth": 1, "classes": 2})
        >>> w.total_params, w.total_fwd_flops
        (23, 36.0)
    """
    s = model_spec(spec)
    layers = model_layers(s)
    fwd = np.array([t["fwd_flops"] for t in layers])
    return Workload(
        model_name(s),
        tuple(t["name"] for t in layers),
        np.array([t["count"] for t in layers], dtype=np.int64),
        fwd,
        None,
        batch_size=s["batch_size"],
        dtype_bytes=4,
        step_time_s=step_time_s,
        kind="cnn" if s["model"] == "cnn" else "mlp",
        gemm_dims=np.array([t["gemm"] for t in layers], dtype=np.float64),
        source="ddltune training harness (tuner.validation._train_worker); FLOPs = 2 x MACs",
    )


def _step_record(msg: dict, spec: dict) -> dict:
    cfg = msg["config"]
    samples = [float(s) for s in msg["samples_s"]]
    rec = {
        "schema": 1,
        "kind": "step",
        "architecture": cfg["architecture"],
        "servers": int(cfg["servers"]),
        "colocated": bool(cfg["colocated"]),
        "workers": int(msg["workers"]),
        "ranks_per_node": int(msg["ranks_per_node"]),
        "processes": int(msg["processes"]),
        "bucket_bytes": int(cfg["bucket_bytes"]),
        "model": model_name(spec),
        "model_spec": spec,
        "batch_size": int(msg["batch_size"]),
        "num_buckets": int(msg["num_buckets"]),
        "time_s": time_statistics(samples),
        "samples_s": samples,
        "compile_s": float(msg["compile_s"]),
        "warmup_iters": int(msg["warmup_steps"]),
        "repeats": int(msg.get("repeats", 1)),
    }
    if cfg["architecture"] == "p2p":
        rec["p2p_exchange"] = cfg.get("p2p_exchange", "all_to_all")
    if int(msg.get("sync_allreduces", 0)) > 0:  # what the harness adds before its swaps
        rec["sync"] = {
            "allreduces": int(msg["sync_allreduces"]),
            "message_bytes": 4 * SYNC_FLOATS_PER_RANK * int(msg["processes"]),
            "num_ranks": int(msg["processes"]),
            "ranks_per_node": int(msg["ranks_per_node"]),
        }
    rec.update(msg["provenance"])
    return rec


def run_training(
    model: dict | str,
    workers: int,
    configs: Sequence[StepConfig],
    *,
    steps: int = 10,
    warmup_steps: int = 3,
    repeats: int = 1,
    seed: int = 0,
    lr: float = 0.05,
    momentum: float = 0.9,
    platform: str | None = None,
    timeout_s: float = 180.0,
    writer: RecordWriter | None = None,
    on_measurement: Callable[[StepMeasurement], None] | None = None,
    return_params: bool = False,
    log_dir: str | os.PathLike | None = None,
    source: str = "ddltune validate",
    on_spawn: Callable[[int, int], None] | None = None,
    emulate=None,
    node_ranks: int | None = None,
    same_buckets_at: Sequence[Sequence[int]] | None = None,
) -> TrainingRun:
    """Train ``model`` with every configuration in one local multi-process launch.

    Starts ``processes_needed`` processes (the same for every configuration:
    dedicated parameter servers with different k need separate calls), each
    training ``warmup_steps`` + ``steps`` synchronous SGD-with-momentum steps per
    configuration from the same initial parameters (see
    :mod:`tuner.validation._train_worker`), and reaps them all.

    Args:
        model: ``"mlp"``, ``"cnn"`` or a spec dict with sizes.
        workers: n ≥ 1 processes computing gradients.
        configs: the configurations, at least one.
        steps: timed steps per configuration, ≥ 1.
        warmup_steps: untimed steps first, ≥ 0 (per round).
        repeats: rounds over all configurations, ≥ 1: each configuration is
            timed ``steps`` times per round, rounds interleaved, so that a
            burst of other load on the machine spreads over every configuration.
        seed: initial parameters and data.
        lr, momentum: optax SGD settings (> 0; momentum in [0, 1)).
        platform: jax platform of the workers (``"cpu"``, ``"gpu"``); default
            ``"cpu"`` for several processes (multi-worker runs stay on CPU
            processes), the default backend for a single worker.
        timeout_s: a process that sends nothing for this long (seconds) stops the run.
        writer: where to append each step record (optional).
        on_measurement: called with each :class:`StepMeasurement` as it arrives.
        return_params: also return every rank's initial and final parameters
            after one step (tests); the timed steps still run.
        log_dir: keep each rank's output there (default: a temporary folder).
        source: the records' ``source`` field.
        on_spawn: called as ``on_spawn(rank, pid)`` for every process started
            (tests check that every PID is gone afterwards).
        emulate: a started :class:`launch.EmulatedCluster` to train in (see
            :func:`launch.launch_local`); every step record gets ``"emulated"``.
        node_ranks: treat ranks ``i·g … i·g + g − 1`` as node i (g ≥ 1,
            dividing the processes) for ``hierarchical`` and the records'
            ``ranks_per_node``, instead of grouping by host name (tests of the
            two-level exchange on one host); default: by host.
        same_buckets_at: per configuration, the other bucket caps (bytes) that
            make the same buckets (:func:`same_programs`); each step record
            names them as ``same_buckets_at``. Default: none.

    Returns:
        A :class:`TrainingRun`.

    Raises:
        ValueError: on a bad argument (named), or configurations that need
            different numbers of processes.
        LaunchError: a worker crashed or hung (the message names its rank and
            configuration).
    """
    spec = model_spec(model)
    configs = list(configs)
    nproc = _check_training(workers, configs, steps, warmup_steps, repeats, lr, momentum)
    if platform is None and nproc > 1:
        platform = "cpu"
    if node_ranks is not None and (
        isinstance(node_ranks, bool) or not isinstance(node_ranks, int) or node_ranks < 1
        or nproc % node_ranks
    ):  # fmt: skip
        raise ValueError(
            f"node_ranks must be an integer ≥ 1 dividing the {nproc} processes, got {node_ranks!r}"
        )
    config = {"model": spec, "workers": workers, "configs": [c.to_json() for c in configs],
              "steps": steps, "warmup_steps": warmup_steps, "repeats": repeats, "seed": seed,
              "lr": lr, "momentum": momentum, "platform": platform,
              "return_params": bool(return_params), "source": source}  # fmt: skip
    if node_ranks is not None:
        config["node_ranks"] = node_ranks
    if same_buckets_at is not None and len(same_buckets_at) != len(configs):
        raise ValueError(
            f"same_buckets_at needs one entry per configuration ({len(configs)}), "
            f"got {len(same_buckets_at)}"
        )
    receiver = _Receiver(configs, spec, writer, on_measurement, emulate, same_buckets_at)
    t0 = time.monotonic()
    _launch_training(config, nproc, receiver.on_message, timeout_s, log_dir, on_spawn, emulate)
    if len(receiver.measurements) != len(configs):
        got = len(receiver.measurements)
        raise RuntimeError(f"the training run returned {got} of {len(configs)} measurements")
    return TrainingRun(receiver.measurements, receiver.params, time.monotonic() - t0)


def _check_training(workers, configs: list, steps, warmup_steps, repeats, lr, momentum) -> int:
    """The processes the run needs; raises ValueError/TypeError naming a bad argument."""
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be an integer ≥ 1, got {workers!r}")
    if not configs:
        raise ValueError("configs is empty: give at least one StepConfig")
    for c in configs:
        if not isinstance(c, StepConfig):
            raise TypeError(f"configs must hold StepConfig objects, got {type(c).__name__}")
        if c.architecture == "ps" and c.colocated and c.servers > workers:
            raise ValueError(
                f"colocated ps with {c.servers} servers needs at least {c.servers} workers, "
                f"got {workers}"
            )
    if workers == 1 and any(c.architecture == "ps" for c in configs):
        raise ValueError("ps needs at least 2 workers' worth of processes; use ring for 1 worker")
    procs = {processes_needed(c, workers) for c in configs}
    if len(procs) != 1:
        raise ValueError(
            f"these configurations need different numbers of processes ({sorted(procs)}); "
            "run each group separately (dedicated parameter servers are extra processes)"
        )
    for name, v, lo in (
        ("steps", steps, 1),
        ("warmup_steps", warmup_steps, 0),
        ("repeats", repeats, 1),
    ):
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise ValueError(f"{name} must be an integer ≥ {lo}, got {v!r}")
    if not lr > 0:
        raise ValueError(f"lr must be > 0, got {lr!r}")
    if not 0 <= momentum < 1:
        raise ValueError(f"momentum must be in [0, 1), got {momentum!r}")
    return procs.pop()


class _Receiver:
    """The parent's end of a training launch: turns the workers' messages into measurements.

    ``"step"`` messages (rank 0) become :class:`StepMeasurement` objects (in
    ``measurements``, written to ``writer`` and passed to ``on_measurement``);
    ``"params"`` messages (every rank, with ``return_params``) collect in
    ``params``.
    """

    def __init__(self, configs, spec: dict, writer, on_measurement, emulate=None, same=None):
        self.configs, self.spec, self.emulate = configs, spec, emulate
        self.same = same
        self.writer, self.on_measurement = writer, on_measurement
        self.measurements: list[StepMeasurement] = []
        self.params: dict = {}

    def on_message(self, rank: int, msg: dict) -> None:
        kind = msg.get("type")
        if kind == "params":
            self.params.setdefault(rank, []).append(
                (
                    [np.asarray(a, np.float32) for a in msg["initial"]],
                    [np.asarray(a, np.float32) for a in msg["final"]],
                )
            )
        elif kind == "step":
            rec = _step_record(msg, self.spec)
            if self.emulate is not None:
                rec["emulated"] = self.emulate.provenance()
            if self.same is not None and self.same[msg["config_index"]]:
                rec["same_buckets_at"] = [int(b) for b in self.same[msg["config_index"]]]
            m = StepMeasurement(
                self.configs[msg["config_index"]],
                rec["workers"],
                rec["processes"],
                rec["ranks_per_node"],
                rec["model"],
                self.spec,
                rec["batch_size"],
                tuple(rec["samples_s"]),
                rec["compile_s"],
                rec["num_buckets"],
                rec,
            )
            if self.writer is not None:
                self.writer.write(rec)
            self.measurements.append(m)
            if self.on_measurement is not None:
                self.on_measurement(m)


def _launch_training(
    config: dict, nproc: int, on_message, timeout_s, log_dir, on_spawn, emulate=None
) -> None:
    """Write the worker configuration to a temporary file and run ``nproc`` training processes."""
    env = {"JAX_PLATFORMS": config["platform"]} if config["platform"] == "cpu" else {}
    fd, path = tempfile.mkstemp(prefix="ddltune-train-", suffix=".json")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(config, fh)
        launch_local(
            "tuner.validation._train_worker",
            ["--config", path],
            nproc,
            timeout_s=timeout_s,
            on_message=on_message,
            env=env,
            log_dir=log_dir,
            on_spawn=on_spawn,
            emulate=emulate,
        )
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)


def measure_configurations(
    model: dict | str,
    workers: Iterable[int],
    configs: Sequence[StepConfig],
    *,
    steps: int = 10,
    warmup_steps: int = 3,
    repeats: int = 1,
    seed: int = 0,
    timeout_s: float = 180.0,
    writer: RecordWriter | None = None,
    on_measurement: Callable[[StepMeasurement], None] | None = None,
    baseline: bool = True,
    on_spawn: Callable[[int, int], None] | None = None,
    emulate=None,
) -> tuple[StepMeasurement | None, list[StepMeasurement]]:
    """Measure every configuration at every worker count, plus the single-worker step.

    One launch per (worker count, process count): every configuration that
    runs on the same processes (all but dedicated parameter servers with
    different k) shares a launch, looping over bucket sizes and servers inside.
    Configurations that run the same program (:func:`same_programs`: bucket
    caps that make the same buckets) are measured once, at the largest cap;
    its record names the others (``same_buckets_at``).
    The single-worker step (one process, no exchange: what the cost model's
    compute comes from) runs first and again last, on CPU like the
    multi-worker runs; its record pools both runs' samples, so that the
    compute every prediction uses does not depend on the load of one moment.

    Args:
        model: ``"mlp"``, ``"cnn"`` or a spec dict.
        workers: worker counts, each ≥ 2.
        configs: configurations to run at every worker count (colocated ps
            configurations with more servers than workers are skipped there).
        steps, warmup_steps, repeats, seed, timeout_s, writer, on_measurement,
            on_spawn, emulate: as :func:`run_training`.
        baseline: measure the single-worker step (before and after the others).

    Returns:
        ``(baseline measurement or None, measurements)``: one measurement
        per program, so fewer than the configurations where caps coincide.

    Raises:
        ValueError: on a worker count < 2 or no configuration.
        LaunchError: a run failed; ``writer`` then holds every configuration
            that finished and the first single-worker step, so that the file
            can be scored (``ddltune validate --from``).
    """
    workers = sorted(set(int(w) for w in workers))
    if not workers or workers[0] < 2:
        raise ValueError(f"workers must be integers ≥ 2, got {workers}")
    if not configs:
        raise ValueError("configs is empty")
    timing = {"steps": steps, "warmup_steps": warmup_steps, "repeats": repeats, "seed": seed,
              "timeout_s": timeout_s, "on_spawn": on_spawn, "emulate": emulate}  # fmt: skip
    first = _single_worker(model, timing) if baseline else None
    out: list[StepMeasurement] = []
    try:
        for n in workers:
            for group in launch_groups(configs, n):
                kept = same_programs(group, model)
                out += run_training(
                    model, n, [c for c, _ in kept], writer=writer, on_measurement=on_measurement,
                    same_buckets_at=[o for _, o in kept], **timing,
                ).measurements  # fmt: skip
    except BaseException:
        # A late failure keeps what it measured: the rows are in the file as they
        # finished; the baseline they need to be scored (--from) is added now.
        if first is not None and writer is not None:
            with contextlib.suppress(Exception):
                writer.write(first.record)
        raise
    if not baseline:
        return None, out
    base = _pooled(first, _single_worker(model, timing))
    if writer is not None:
        writer.write(base.record)
    if on_measurement is not None:
        on_measurement(base)
    return base, out


def launch_groups(configs: Sequence[StepConfig], n: int) -> list[list[StepConfig]]:
    """The configurations runnable with n workers, one list per process count (ascending).

    Colocated ps configurations with more servers than workers are left out.
    """
    groups: dict[int, list[StepConfig]] = {}
    for c in configs:
        if c.architecture == "ps" and c.colocated and c.servers > n:
            continue
        groups.setdefault(processes_needed(c, n), []).append(c)
    return [groups[nproc] for nproc in sorted(groups)]


def _single_worker(model, timing: dict) -> StepMeasurement:
    """The single-worker step of ``model`` (one CPU process, ring with nothing to exchange)."""
    return run_training(model, 1, [StepConfig("ring", 0)], platform="cpu", **timing).measurements[0]


def _pooled(a: StepMeasurement, b: StepMeasurement) -> StepMeasurement:
    samples = tuple(a.samples_s) + tuple(b.samples_s)
    rec = dict(a.record)
    rec["samples_s"] = list(samples)
    rec["time_s"] = time_statistics(samples)
    rec["repeats"] = int(a.record.get("repeats", 1)) + int(b.record.get("repeats", 1))
    return dataclasses.replace(a, samples_s=samples, record=rec)
