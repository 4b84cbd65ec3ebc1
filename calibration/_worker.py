"""The measuring program of ``ddltune collect``: one copy runs in every worker process.

Run as ``python -m calibration._worker --config FILE`` by the local launcher
(:func:`launch.launch_local`), or in-process under ``srun``/``mpirun``
(:func:`calibration.collect` with ``launcher="auto"``). It measures every point
of the plan (:func:`plan_points`) and sends, from rank 0, one schema-v1 record
per point to whoever writes the file (see :func:`run`).

Ranks (:class:`launch.Ranks` with ``every_local_device``): with several
processes, the first device of each process is one rank (one process per GPU
on GPU clusters); a single process with several devices (e.g.
``XLA_FLAGS=--xla_force_host_platform_device_count=4``) uses each device as a
rank, which is how the tests exercise the logic without processes.

Patterns (``jax.shard_map`` over a one-axis mesh ``"r"``, nccl-tests' names and
size convention, ``S`` = ``message_bytes``):

* ``all_reduce``: ``lax.psum`` of S bytes per rank.
* ``reduce_scatter``: ``lax.psum_scatter`` (tiled); S is the full input array,
  each rank keeps S/n.
* ``all_gather``: ``lax.all_gather`` (tiled); S is the full output, each rank
  contributes S/n.
* ``all_to_all``: ``lax.all_to_all`` (tiled); S per rank, S/n to each peer.
* ``sendrecv``: one ring step, ``lax.ppermute`` r → r+1; S per rank.
* ``ps_push``: the n−1 transfers into rank 0 (the server), S each, issued in one
  program as n−1 single-pair ``ppermute`` (jax allows one sender per
  destination and call), summed into one S-byte buffer as they arrive (the
  server aggregates, as the training harness's does); measures the server
  link under fan-in. Stacking the n−1 results instead costs a copy of
  (n−1)·S that no parameter server makes: on 2 CPU cores it doubled the
  time at 4 MiB (5 ranks: 29 ms stacked, 15 ms summed).
* ``ps_pull``: the n−1 transfers out of rank 0, S each, each worker receiving
  into one buffer; the server link under fan-out. Whether the backend runs
  these transfers concurrently or in turn is its business: the time is what a
  parameter server would see.

Timing (as nccl-tests, plus what CPU noise needs): the program is compiled
ahead of time (compile time is recorded as ``compile_s``) and called
``warmup_iters`` times untimed; then each timed repetition is preceded by a
cheap barrier (a psum of a few floats) that also carries every rank's time of
the previous repetition and rank 0's stop decision, so a repetition's time is
the slowest rank's and all ranks stop together. Repetitions continue until at
least ``iters`` were timed and ``budget_s`` seconds were spent on the point,
or ``max_iters`` were timed. ``block_until_ready`` precedes every clock read.
Every timed call's result is compared with the expected value outside the
timed region; ``wrong`` counts the calls whose result differed on any rank
(nccl-tests reports ``#wrong``).

Compute (``kind: "compute"``): square matmuls and two thin ones, b×N by N×N
with a small outer dimension b, as a dense layer on a small batch (``op: "matmul"``, flops 2·m·n·k, on every
process at once, and on rank 0 alone where a node runs more than one rank: the
thin ones pin down how far a small GEMM runs below the rate,
``ClusterParams.gemm_half_dim``), and the forward and
backward pass of each layer of a small MLP and of one conv layer (equinox
layers; ``op: "forward"`` / ``"backward"``; flops of a dense layer 2·B·in·out
forward and twice that backward, of a conv 2·B·H·W·Cout·Cin·kh·kw forward).
``num_ranks`` of a compute record is the number of processes that ran it at
once on the node (schema v1), so calibration can fit how processes share a
node's cores.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from costmodel import format_bytes
from launch import (
    SYNC_FLOATS_PER_RANK,
    Ranks,
    heartbeat,
    hierarchical_psum,
    start_together,
    waiting,
    worker_main,
)

from ._names import COLLECT_PATTERNS
from ._records import provenance, record_key, time_statistics

__all__ = ["COLLECT_PATTERNS", "plan_points", "message_sizes", "run", "main", "Faults", "swaps"]

_DTYPE_BYTES = {"float32": 4, "bfloat16": 2}
_SPLIT = ("reduce_scatter", "all_gather", "all_to_all")  # S must split into n equal blocks

#: Matmul sizes (m = n = k) by backend, and the small models' layer shapes.
MATMUL_SIZES = {"cpu": (128, 256, 512, 1024), "gpu": (1024, 2048, 4096, 8192)}
#: Thin matmuls b×N by N×N, as a dense layer of width N on a batch of b: N and
#: the small batches b (XLA:CPU on this project's cores: b = 16 at 56%, 64 at
#: 80% of the 1024³ rate; a small inner dimension costs less, 62% and 82%, and is
#: rarer in training)
THIN_MATMULS = {"cpu": (1024, (16, 64)), "gpu": (8192, (64, 256))}
MLP = {"cpu": (64, (784, 512, 512, 10)), "gpu": (1024, (784, 4096, 4096, 10))}
#: batch, H=W, channel widths (C_in = C_out; four, so that the conv series has a
#: held-out interior size: calibration.holdout_mask), kernel
CONV = {"cpu": (8, 32, (32, 48, 64, 96), 3), "gpu": (64, 56, (32, 64, 128, 256), 3)}


# --------------------------------------------------------------------------- plan


def message_sizes(min_bytes: int, max_bytes: int, step_factor: int) -> list[int]:
    """Sizes from ``min_bytes`` to ``max_bytes`` multiplied by ``step_factor`` (nccl-tests ``-b -e -f``).

    Raises:
        ValueError: on ``min_bytes < 1``, ``max_bytes < min_bytes`` or ``step_factor < 2``.

    Example:
        >>> message_sizes(1024, 65536, 4)
        [1024, 4096, 16384, 65536]
    """
    if min_bytes < 1:
        raise ValueError(f"min_bytes must be ≥ 1 byte, got {min_bytes}")
    if max_bytes < min_bytes:
        raise ValueError(f"max_bytes ({max_bytes}) must be ≥ min_bytes ({min_bytes})")
    if step_factor < 2:
        raise ValueError(f"step_factor must be an integer ≥ 2, got {step_factor}")
    out, s = [], min_bytes
    while s <= max_bytes:
        out.append(s)
        s *= step_factor
    return out


def _count(collective: str, size: int, n: int, itemsize: int) -> int:
    """Elements of the nccl-tests-sized array: a multiple of n where it must split."""
    count = size // itemsize
    if collective in _SPLIT:
        count -= count % n
    return count


def plan_points(
    config: dict,
    num_ranks: int,
    ranks_per_node: int,
    *,
    backend: str = "cpu",
    num_processes: int | None = None,
    nodes: int = 1,
) -> list[dict]:
    """The points a launch will measure, in order, before skipping known ones.

    A job over ``nodes`` ≥ 2 hosts of ``ranks_per_node`` ≥ 2 ranks each
    (block placement) also measures every collective within a node, on every
    node at once (``nodes_at_once``): the intra-node phases of a hierarchical
    exchange run so, and on an emulated cluster, whose nodes share this
    machine's cores, only that measures what they cost inside such a job (the
    same node's collective alone had the machine's cores to itself: 0.02 s of
    the 0.16 s the two intra-node phases of a 16 MiB hierarchical all-reduce
    took on 4 × 2 ranks). On a real cluster both are the same number. On CPU
    the reduce_scatter is left out of that (jax-ml/jax#40830: gloo's
    ``psum_scatter`` returns wrong values when several groups run at once),
    and the hierarchical all-reduce of the whole job is measured too
    (``algorithm: "hierarchical"``; its reduce-scatter an ``all_to_all``).

    Args:
        config: the collect configuration (see :func:`calibration.collect`):
            ``collectives``, ``sizes`` (bytes), ``dtype``, ``suite`` and
            optionally ``matmul_sizes``.
        num_ranks: ranks of the collectives (n ≥ 1); with n = 1 there is
            nothing to exchange and no collective is planned.
        ranks_per_node: ranks sharing the busiest node (≥ 1).
        backend: ``"cpu"``, ``"gpu"`` or ``"tpu"`` (picks the compute sizes).
        num_processes: processes in the job (default ``num_ranks``); compute
            runs once per process, so a single process, or one rank per node,
            plans no "alone" matmul (its key would be the concurrent one's).
        nodes: distinct hosts of the job whose ranks sit in whole blocks of
            ``ranks_per_node`` (:meth:`launch.Ranks.node_mesh`), or 1.

    Returns:
        One dict per point: the identifying fields of its record (``kind``,
        ``collective`` or ``op``, ``message_bytes``/``shape``, ``num_ranks``,
        ``ranks_per_node``, ``dtype``) plus ``count`` (elements per rank
        buffer), ``solo`` (compute on rank 0 alone), ``desc`` (words) and,
        for a collective within each node, ``nodes_at_once``.
    """
    dtype = config["dtype"]
    procs = num_ranks if num_processes is None else num_processes
    points = []
    if "collectives" in config["suite"] and num_ranks >= 2:
        points += _collective_points(config, num_ranks, ranks_per_node)
        if nodes >= 2 and ranks_per_node >= 2 and num_ranks == nodes * ranks_per_node:
            for p in _collective_points(config, ranks_per_node, ranks_per_node):
                if p["collective"] == "reduce_scatter" and backend == "cpu":
                    # XLA:CPU's gloo psum_scatter returns wrong values when several
                    # groups run at once (jax-ml/jax#40830): 4 groups of 2 here
                    continue
                p["nodes_at_once"] = nodes
                p["desc"] += f" within each of {nodes} nodes at once"
                points.append(p)
            if "all_reduce" in config["collectives"]:
                points += _hierarchical_points(config, num_ranks, ranks_per_node)
    if "compute" in config["suite"]:
        key = "gpu" if backend in ("gpu", "cuda", "rocm") else "cpu"
        concurrent = min(ranks_per_node, procs) if procs > 1 else 1
        # "Rank 0 alone" only where it differs from the concurrent layout by its key:
        # with one rank per node both are 1-rank records, and alone it measured a
        # host that the job's other nodes leave idle (on an emulated cluster, nodes
        # that share a core: 2.3x faster than with every node busy, the same key).
        layouts = [(False, concurrent)] + ([(True, 1)] if concurrent > 1 else [])
        if config.get("matmul_sizes"):  # the user's sizes, square, and nothing else
            shapes = [(s, s, s) for s in config["matmul_sizes"]]
        else:
            n_thin, bs = THIN_MATMULS[key]
            shapes = [(s, s, s) for s in MATMUL_SIZES[key]] + [(b, n_thin, n_thin) for b in bs]
        points += _matmul_points(shapes, layouts, dtype)
        points += _mlp_points(*MLP[key], concurrent, dtype)
        points += _conv_points(*CONV[key], concurrent, dtype)
    return points


def swaps(collective: str, num_ranks: int) -> bool:
    """Whether the pattern is a swap the collector starts behind :func:`launch.start_together`.

    On 2 ranks the one-step patterns whose only peer is the other rank:
    all_to_all, sendrecv, all_gather and reduce_scatter (gloo's ring at 2).
    XLA:CPU over gloo runs such a swap one direction after the other when one
    rank comes late (:func:`launch.start_together`), and the collector's
    host-side barrier leaves the ranks a latency apart: on the emulated 5 × 1
    cluster (200 Mbit/s, 2026-12-07) every 16 MiB all_to_all on 2 ranks took
    2.17–2.27× its wire time and the all_gather 1.69–2.28×, where an
    all_reduce of the same bytes each way took 1.17–1.21×; behind the barrier
    they took 403 and 435 ms (1.20×, 1.30×). The all-reduce (gloo's ring posts
    each receive before its send) and the parameter-server patterns (one
    direction per pair) do not swap.

    Not on 3 or more ranks: there the barrier cost more than the exchange it
    guards at small sizes (on the same cluster, whose 5 nodes share 2 CPUs, it
    added 1.0, 2.0 and 2.8 ms to a 1 KiB all_to_all on 3, 4 and 5 ranks that took
    0.5–1.1 ms without it), the model's two all-reduces overstated it by about
    half, and the fit could not follow it (that collection's held-out p90 45.6%,
    25.0% with the declarations stripped; the collection without the barrier
    22.5%).
    """
    return int(num_ranks) == 2 and collective in (
        "all_to_all",
        "sendrecv",
        "all_gather",
        "reduce_scatter",
    )


def _collective_points(config: dict, num_ranks: int, ranks_per_node: int) -> list[dict]:
    """Every collective × size of ``config`` on ``num_ranks`` ranks (sizes too small to split dropped).

    A swap pattern (:func:`swaps`) runs behind :func:`launch.start_together`
    inside its timed program; its point (and record) declares those two small
    all-reduces as ``sync``, which calibration adds to the pattern's own time
    (``calibration.sync_batch``)."""
    dtype = config["dtype"]
    itemsize = _DTYPE_BYTES[dtype]
    points = []
    for name in config["collectives"]:
        for size in config["sizes"]:
            count = _count(name, size, num_ranks, itemsize)
            if count < (num_ranks if name in _SPLIT else 1):
                continue
            nbytes = count * itemsize
            point = {
                "kind": "collective",
                "collective": name,
                "message_bytes": nbytes,
                "num_ranks": num_ranks,
                "ranks_per_node": ranks_per_node,
                "dtype": dtype,
                "count": count,
                "desc": f"{name} {format_bytes(nbytes)} on {num_ranks} ranks",
            }
            if swaps(name, num_ranks):
                block = count // num_ranks if name == "all_gather" else count  # a rank's input
                point["sync"] = {
                    "allreduces": 2,
                    "message_bytes": min(block, SYNC_FLOATS_PER_RANK * num_ranks) * itemsize,
                    "num_ranks": num_ranks,
                    "ranks_per_node": ranks_per_node,
                }
            points.append(point)
    return points


def _hierarchical_points(config: dict, num_ranks: int, ranks_per_node: int) -> list[dict]:
    """The hierarchical all-reduce at every size of ``config`` (count a multiple of g)."""
    itemsize = _DTYPE_BYTES[config["dtype"]]
    points = []
    for size in config["sizes"]:
        count = size // itemsize
        count -= count % ranks_per_node
        if count < ranks_per_node:
            continue
        nbytes = count * itemsize
        points.append(
            {
                "kind": "collective",
                "collective": "all_reduce",
                "algorithm": "hierarchical",
                "message_bytes": nbytes,
                "num_ranks": num_ranks,
                "ranks_per_node": ranks_per_node,
                "dtype": config["dtype"],
                "count": count,
                "desc": f"all_reduce (hierarchical) {format_bytes(nbytes)} on {num_ranks} ranks",
            }
        )
    return points


def _matmul_points(shapes, layouts: list[tuple[bool, int]], dtype: str) -> list[dict]:
    """Matmuls m×k by k×n (flops 2·m·n·k) of every ``(m, n, k)``, per layout ``(solo,
    processes at once)``."""
    points = []
    for m, n, k in shapes:
        s = f"{m}³" if m == n == k else f"{m}×{k}×{n}"
        for solo, nr in layouts:
            points.append(
                {
                    "kind": "compute",
                    "op": "matmul",
                    "shape": {"m": m, "n": n, "k": k},
                    "flops": 2.0 * m * n * k,
                    "num_ranks": nr,
                    "ranks_per_node": nr,
                    "dtype": dtype,
                    "solo": solo,
                    "desc": f"matmul {s} on {'rank 0 alone' if solo else f'{nr} processes'}",
                }
            )
    return points


def _layer_point(op: str, shape: dict, flops: float, concurrent: int, dtype: str, desc: str):
    """One forward or backward compute point of a model layer, run by ``concurrent`` processes."""
    return {
        "kind": "compute",
        "op": op,
        "shape": dict(shape),
        "flops": flops,
        "num_ranks": concurrent,
        "ranks_per_node": concurrent,
        "dtype": dtype,
        "solo": False,
        "desc": desc,
    }


def _mlp_points(batch: int, dims, concurrent: int, dtype: str) -> list[dict]:
    """Forward (2·B·in·out flops) and backward (twice that) of each dense layer of the MLP."""
    points = []
    for i, (d_in, d_out) in enumerate(zip(dims[:-1], dims[1:], strict=True)):
        fwd = 2.0 * batch * d_in * d_out
        shape = {"model": "mlp", "layer": i, "type": "linear", "batch": batch}
        shape.update({"in": d_in, "out": d_out})
        for op, flops in (("forward", fwd), ("backward", 2 * fwd)):
            desc = f"mlp layer {i} {op} ({d_in}→{d_out}, batch {batch})"
            points.append(_layer_point(op, shape, flops, concurrent, dtype, desc))
    return points


def _conv_points(b: int, hw: int, widths, k: int, concurrent: int, dtype: str) -> list[dict]:
    """Forward (2·B·H·W·Cout·Cin·kh·kw flops) and backward (twice that) of a SAME conv per width.

    One conv layer per channel width C (C_in = C_out = C), so that the fit sees
    how a convolution's rate compares with a matmul's over a range of sizes
    (``ClusterParams.conv_efficiency``).
    """
    points = []
    for i, ch in enumerate(widths):
        fwd = 2.0 * b * hw * hw * ch * ch * k * k
        shape = {"model": "cnn", "layer": i, "type": "conv2d", "batch": b, "height": hw}
        shape.update({"width": hw, "in": ch, "out": ch, "kernel": k})
        for op, flops in (("forward", fwd), ("backward", 2 * fwd)):
            desc = f"cnn conv {k}x{k} {op} ({ch}→{ch} ch, {hw}², batch {b})"
            points.append(_layer_point(op, shape, flops, concurrent, dtype, desc))
    return points


def point_key(point: dict) -> tuple:
    """:func:`calibration.record_key` of the record this point will produce."""
    return record_key(point)


# --------------------------------------------------------------------------- faults (tests)


class Faults:
    """Fault injection for tests, from ``DDLTUNE_COLLECT_FAULT`` (comma-separated).

    ``exit:R@K`` — rank R exits (status 17) when it reaches point K of its plan;
    ``kill:R@K`` — rank R is killed there (``SIGKILL``, as the kernel's OOM
    killer does: no handler runs, nothing is printed after the fault's line);
    ``hang:R@K`` — rank R sleeps forever there; ``wrong:NAME`` — collective
    NAME returns a wrong result (``all_reduce`` uses ``pmax`` instead of
    ``psum``; others add 1 on rank 1), which the correctness check must flag.
    """

    def __init__(self, spec: str | None = None):
        spec = os.environ.get("DDLTUNE_COLLECT_FAULT", "") if spec is None else spec
        self.exit: set[tuple[int, int]] = set()
        self.kill: set[tuple[int, int]] = set()
        self.hang: set[tuple[int, int]] = set()
        self.wrong: set[str] = set()
        for part in (p.strip() for p in spec.split(",")):
            if not part:
                continue
            what, _, arg = part.partition(":")
            if what in ("exit", "kill", "hang"):
                r, _, k = arg.partition("@")
                getattr(self, what).add((int(r), int(k)))
            elif what == "wrong":
                self.wrong.add(arg)

    def at_point(self, rank: int, k: int) -> None:
        if (rank, k) in self.exit:
            print(f"injected fault: rank {rank} exits at point {k}", file=sys.stderr, flush=True)
            os._exit(17)
        if (rank, k) in self.kill:
            print(
                f"injected fault: rank {rank} is killed at point {k}", file=sys.stderr, flush=True
            )
            os.kill(os.getpid(), signal.SIGKILL)
        if (rank, k) in self.hang:
            print(f"injected fault: rank {rank} hangs at point {k}", file=sys.stderr, flush=True)
            while True:
                time.sleep(3600)


# --------------------------------------------------------------------------- patterns


class _Values:
    """Host values of a rank's block of ``length`` elements, all exact in bfloat16."""

    def __init__(self, length: int):
        self.idx = np.arange(length, dtype=np.int64)

    def red(self, i: int):
        """Rank i's values to reduce: sums stay exact in bfloat16 for n ≤ 128."""
        return ((i + self.idx) % 3).astype(np.float32)

    def mov(self, i: int):
        """Rank i's values to move: they tell ranks and positions apart."""
        return ((i * 13 + self.idx) % 251).astype(np.float32)


# Each pattern: (n, count, values, wrong) -> (data(i), f(local block), expect(i)),
# data(i) rank i's input, expect(i) rank i's local output.


def _all_reduce(n: int, count: int, v: _Values, wrong: bool):
    def f(a):
        return lax.pmax(a, "r") if wrong else lax.psum(a, "r")

    total = sum(v.red(q) for q in range(n))
    return v.red, f, lambda i: total


def _hierarchical_all_reduce(n: int, count: int, v: _Values, wrong: bool):
    """All-reduce in three phases on a ``("node", "local")`` mesh
    (:func:`launch.hierarchical_psum`; ``pmax`` across nodes when wrong)."""

    def f(a):
        return hierarchical_psum(a, lax.pmax if wrong else lax.psum)

    total = sum(v.red(q) for q in range(n))
    return v.red, f, lambda i: total


def _reduce_scatter(n: int, count: int, v: _Values, wrong: bool):
    b = count // n

    def f(a):
        return lax.psum_scatter(a, "r", scatter_dimension=1, tiled=True)

    total = sum(v.red(q) for q in range(n))
    return v.red, f, lambda i: total[i * b : (i + 1) * b]


def _all_gather(n: int, count: int, v: _Values, wrong: bool):
    def f(a):
        return lax.all_gather(a, "r", axis=1, tiled=True)

    return v.mov, f, lambda i: np.concatenate([v.mov(q) for q in range(n)])


def _all_to_all(n: int, count: int, v: _Values, wrong: bool):
    b = count // n

    def f(a):
        return lax.all_to_all(a, "r", 1, 1, tiled=True)

    return v.mov, f, lambda i: np.concatenate([v.mov(q)[i * b : (i + 1) * b] for q in range(n)])


def _sendrecv(n: int, count: int, v: _Values, wrong: bool):
    perm_ring = [(i, (i + 1) % n) for i in range(n)]

    def f(a):
        return lax.ppermute(a, "r", perm_ring)

    return v.mov, f, lambda i: v.mov((i - 1) % n)


def _ps_push(n: int, count: int, v: _Values, wrong: bool):
    # The server sums what arrives, as a parameter server aggregates (and
    # as ddltune's training harness does): one S-byte buffer, no stacking.
    def f(a):
        acc = None
        for q in range(1, n):
            got = lax.ppermute(a, "r", [(q, 0)])
            acc = got if acc is None else acc + got
        return acc

    push_total = sum(v.red(q) for q in range(1, n))
    return v.red, f, lambda i: push_total if i == 0 else np.zeros(count, np.float32)


def _ps_pull(n: int, count: int, v: _Values, wrong: bool):
    # Every worker receives the server's S bytes into its one buffer.
    def f(a):
        acc = None
        for q in range(1, n):
            got = lax.ppermute(a, "r", [(0, q)])
            acc = got if acc is None else acc + got
        return acc

    return v.mov, f, lambda i: v.mov(0) if i > 0 else np.zeros(count, np.float32)


_PATTERNS = {
    "all_reduce": _all_reduce,
    "reduce_scatter": _reduce_scatter,
    "all_gather": _all_gather,
    "all_to_all": _all_to_all,
    "sendrecv": _sendrecv,
    "ps_push": _ps_push,
    "ps_pull": _ps_pull,
    "hierarchical": _hierarchical_all_reduce,  # all_reduce, algorithm "hierarchical"
}


def _off_by_one_on_rank1(inner):
    """``inner`` with 1 added to rank 1's result (the injected wrong result of non-psum patterns)."""

    def f(a):
        out = inner(a)
        return out + (lax.axis_index("r") == 1).astype(out.dtype)

    return f


def _patterns(n: int, name: str, count: int, jdtype, wrong: bool):
    """(function of the local block, input rows(i), expected local output of rank i), n ranks."""
    if name not in _PATTERNS:  # pragma: no cover - names are checked by collect()
        raise ValueError(f"unknown pattern {name!r}")
    length = count // n if name == "all_gather" else count  # elements each rank sends
    data, f, expect = _PATTERNS[name](n, count, _Values(length), wrong)
    if wrong and name not in ("all_reduce", "hierarchical"):
        f = _off_by_one_on_rank1(f)

    def rows(i):
        return data(i)[None].astype(jdtype)

    return f, rows, expect


# --------------------------------------------------------------------------- measurement


def _timed(ranks: Ranks, step, check, config: dict, where: str, solo: bool = False):
    """Warm up, then time repetitions until the budget is spent; returns (samples, wrong)."""
    for _ in range(int(config["warmup_iters"])):
        ranks.sync(False, {}, {})
        if not solo or ranks.is_rank0:
            step()
        heartbeat(where)
    iters, max_iters = int(config["iters"]), int(config["max_iters"])
    budget = float(config["budget_s"])
    samples: list[float] = []
    wrong_calls = 0
    times: dict[int, float] = {}
    wrong: dict[int, int] = {}
    t_start = time.perf_counter()
    k = 0
    while True:
        stop = k >= max_iters or (k >= iters and time.perf_counter() - t_start >= budget)
        stop, t_max, w = ranks.sync(stop, times, wrong)
        if k > 0:
            samples.append(max(t_max, 1e-9))
            wrong_calls += w
        if stop:
            return samples, wrong_calls
        times, wrong = {}, {}
        if not solo or ranks.is_rank0:
            with waiting(where):  # blocked with the peers: the launcher blames a silent one
                t0 = time.perf_counter()
                out = step()  # blocks until ready
                t = time.perf_counter() - t0
            bad = check(out) if check is not None else {}
            for i, _ in ranks.local if not solo else ranks.local[:1]:
                times[i] = t
                wrong[i] = bad.get(i, 0)
        k += 1
        heartbeat(where)


def _collective_step(ranks: Ranks, point: dict, faults: Faults):
    name, count = point["collective"], point["count"]
    jdtype = jnp.dtype(point["dtype"])
    mesh, spec, g = ranks.mesh, P("r"), ranks.n
    if point.get("nodes_at_once"):  # axis "r" within each node, every node at once
        nm = ranks.node_mesh()
        mesh, spec, g = Mesh(nm.devices, ("node", "r")), P(("node", "r")), nm.shape["local"]
    if point.get("algorithm") == "hierarchical":
        mesh, spec = ranks.node_mesh(), P(("node", "local"))
        f, rows, expect = _patterns(g, "hierarchical", count, jdtype, name in faults.wrong)
    else:
        f, rows, expect = _patterns(g, name, count, jdtype, name in faults.wrong)
    if point.get("sync"):  # a swap: every rank starts it at once, as the record declares
        inner = f

        def f(a):
            return inner(start_together(a, g))

    x = ranks.put_rows(lambda i: rows(i % g))
    if mesh is not ranks.mesh:  # the same blocks on the same devices, another mesh
        x = jax.make_array_from_single_device_arrays(
            x.shape, NamedSharding(mesh, spec), [s.data for s in x.addressable_shards]
        )
    t0 = time.perf_counter()
    compiled = (
        jax.jit(jax.shard_map(f, mesh=mesh, in_specs=spec, out_specs=spec)).lower(x).compile()
    )
    compile_s = time.perf_counter() - t0
    # Expected local results, kept on the host: checking there needs no compilation
    # and stays out of the timed region (on a GPU it costs one device-to-host copy).
    expected = {}
    for i, _ in ranks.local:
        e = np.asarray(expect(i % g), np.float32)
        expected[i] = e[None].astype(jdtype)

    def step():
        out = compiled(x)
        out.block_until_ready()
        return out

    def check(out):
        bad = {}
        by_dev = {s.device: s.data for s in out.addressable_shards}
        for i, d in ranks.local:
            got = np.asarray(by_dev[d])
            bad[i] = int(got.shape != expected[i].shape or bool(np.any(got != expected[i])))
        return bad

    return step, check, compile_s


def _filled(tree, rng, dev):
    """Replace every array shape in ``tree`` by random host data put on ``dev`` (no compile)."""

    def fill(leaf):
        if isinstance(leaf, jax.ShapeDtypeStruct):
            data = rng.standard_normal(leaf.shape, dtype=np.float32) * 0.1
            return jax.device_put(data.astype(leaf.dtype), dev)
        return leaf

    return jax.tree.map(fill, tree)


def _layer_call(point: dict, rng, dev):
    """``(fn, args)`` of a model layer's forward or backward point (equinox layers, random data)."""
    # imported here: a collective-only run (--suite collectives, the launcher jobs) starts
    # 0.35 s sooner per rank without it (`import calibration._worker`: 1.17 → 0.8 s)
    import equinox as eqx

    dtype = jnp.dtype(point["dtype"])
    shape = point["shape"]
    key = jax.random.PRNGKey(0)  # only traced for shapes below: nothing is initialised on device
    if shape["type"] == "linear":
        layer = eqx.filter_eval_shape(
            eqx.nn.Linear, shape["in"], shape["out"], key=key, dtype=dtype
        )
        x_shape = (shape["batch"], shape["in"])
    else:
        layer = eqx.filter_eval_shape(
            eqx.nn.Conv2d,
            shape["in"],
            shape["out"],
            shape["kernel"],
            padding="SAME",
            key=key,
            dtype=dtype,
        )
        x_shape = (shape["batch"], shape["in"], shape["height"], shape["width"])

    def fwd(layer, x):
        return jax.vmap(layer)(x)

    layer, x = _filled((layer, jax.ShapeDtypeStruct(x_shape, dtype)), rng, dev)
    if point["op"] == "forward":
        return fwd, (layer, x)
    y = jax.eval_shape(fwd, layer, x)

    def bwd(layer, x, ct):
        _, vjp = jax.vjp(fwd, layer, x)
        return vjp(ct)

    return bwd, (layer, x, _filled(y, rng, dev))


def _compute_step(ranks: Ranks, point: dict):
    """A compiled compute call on this process's device (equinox layers for the models)."""
    dev = ranks.local[0][1]
    rng = np.random.default_rng(0)
    if point["op"] == "matmul":
        dtype, shape = jnp.dtype(point["dtype"]), point["shape"]
        m, n_, k = shape["m"], shape["n"], shape["k"]
        args = _filled(
            (jax.ShapeDtypeStruct((m, k), dtype), jax.ShapeDtypeStruct((k, n_), dtype)), rng, dev
        )

        def fn(a, b):
            return a @ b
    else:
        fn, args = _layer_call(point, rng, dev)

    t0 = time.perf_counter()
    compiled = jax.jit(fn).lower(*args).compile()
    compile_s = time.perf_counter() - t0

    def step():
        out = compiled(*args)
        jax.block_until_ready(out)
        return out

    return step, compile_s


# --------------------------------------------------------------------------- the run


def run(
    config: dict,
    emit: Callable[[dict], None],
    *,
    faults: Faults | None = None,
) -> dict:
    """Measure every point of the plan on the ranks of this JAX job.

    Every rank calls it (after ``jax.distributed`` is initialised, where there
    are several processes). All ranks send ``{"type": "point", "i", "where"}``
    when they start a point; rank 0 also sends ``{"type": "plan", "points",
    "skipped"}`` first and ``{"type": "record", "record": {...}}`` after each
    point (a complete schema-v1 record).

    Args:
        config: ``collectives`` (names from :data:`COLLECT_PATTERNS`),
            ``sizes`` (bytes), ``dtype`` (``"float32"``/``"bfloat16"``),
            ``suite`` (subset of ``["collectives", "compute"]``), ``iters``
            (≥ 1), ``max_iters`` (≥ iters), ``warmup_iters`` (≥ 0),
            ``budget_s`` (> 0), ``existing_keys`` (record keys to skip, as
            lists), optional ``matmul_sizes``, ``rounds`` (≥ 1, see
            :func:`calibration.collect`) and ``source``.
        emit: where messages go (the launcher's ``send_message``, or a list's append).
        faults: fault injection (tests); default from ``DDLTUNE_COLLECT_FAULT``.

    Returns:
        ``{"measured": int, "skipped": int, "num_ranks": int, "ranks_per_node": int}``.
    """
    faults = Faults() if faults is None else faults
    ranks = Ranks(every_local_device=True)
    rpn = ranks.ranks_per_host()
    plan, todo = _todo(config, ranks, rpn)
    if ranks.is_rank0:
        emit({"type": "plan", "points": len(todo), "skipped": len(plan) - len(todo),
              "num_ranks": ranks.n, "ranks_per_node": rpn})  # fmt: skip
    session = _Session(config, ranks, faults, emit)
    if session.rounds == 1:
        session.measure_in_turn(todo)
    else:
        session.measure_interleaved(todo)
    return {
        "measured": len(todo),
        "skipped": len(plan) - len(todo),
        "num_ranks": ranks.n,
        "ranks_per_node": rpn,
    }


def _todo(config: dict, ranks: Ranks, rpn: int) -> tuple[list[dict], list[dict]]:
    """``(plan, the points of it not in config["existing_keys"])``; rank 0's file decides."""
    existing = {tuple(k) for k in config.get("existing_keys", [])}
    nodes = 1
    if ranks.n > rpn > 1:
        try:  # whole blocks of rpn ranks per host: the intra-node series run on every node
            nodes = ranks.node_mesh().shape["node"]
        except ValueError:
            nodes = 1
    plan = plan_points(
        config, ranks.n, rpn, backend=ranks.backend, num_processes=ranks.num_processes,
        nodes=nodes,
    )  # fmt: skip
    keep = [point_key(p) not in existing for p in plan]
    if ranks.num_processes > 1:
        # Rank 0's file decides (under srun/mpirun only rank 0 reads it).
        mask = np.asarray(keep + [True], dtype=np.int32)  # never empty
        keep = [bool(v) for v in multihost_utils.broadcast_one_to_all(mask)[:-1]]
    return plan, [p for p, k in zip(plan, keep, strict=True) if k]


class _Session:
    """One launch's measuring: prepares, times and records the points of the plan."""

    def __init__(self, config: dict, ranks: Ranks, faults: Faults, emit: Callable[[dict], None]):
        self.config, self.ranks, self.faults, self.emit = config, ranks, faults, emit
        self.prov = provenance(config.get("source", "ddltune collect"))
        self.rounds = max(1, int(config.get("rounds", 1)))

    def prepare(self, point: dict):
        """``(step, check, compile_s, solo)`` of one point (compiled; a no-op where it does not run)."""
        ranks = self.ranks
        if point["kind"] == "collective":
            step, check, compile_s = _collective_step(ranks, point, self.faults)
            return step, check, compile_s, False
        solo = point["solo"]
        if solo and not ranks.is_rank0:
            return (lambda: None), None, 0.0, solo
        step, compile_s = _compute_step(ranks, point)
        return step, None, compile_s, solo

    def record(self, point: dict, samples: list[float], wrong: int, compile_s: float) -> dict:
        """The schema-v1 record of a measured point."""
        rec = {"schema": 1}
        rec.update({k2: v for k2, v in point.items() if k2 not in ("desc", "solo")})
        if point["kind"] == "collective":
            rec["wrong"] = int(wrong)
            rec["in_place"] = False
            # kept from run()'s count: no jax call; a collective within each node spans one
            rec["num_hosts"] = 1 if point.get("nodes_at_once") else self.ranks.hosts()[1]
            machine = self.ranks.ranks_per_machine()
            if machine > rec["ranks_per_node"]:  # nodes sharing this machine's cores
                rec["ranks_per_machine"] = machine
        else:
            rec.pop("count", None)
            rec["num_processes"] = self.ranks.num_processes
        rec["time_s"] = time_statistics(samples)
        rec["samples_s"] = [float(s) for s in samples]
        rec["compile_s"] = float(compile_s)
        rec["warmup_iters"] = int(self.config["warmup_iters"])
        if self.rounds > 1:
            rec["rounds"] = self.rounds
        rec.update(self.prov)
        rec["timestamp"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        return rec

    def start(self, k: int, where: str, done: float = 0.0) -> None:
        """Tell the launcher that this rank starts point k, then let a test's fault strike.

        ``done``: the points' worth of timing finished before it (the progress bar's).
        """
        me = self.ranks.process_index
        self.emit({"type": "point", "i": k, "where": where, "rank": me, "done": done})
        self.faults.at_point(me, k)

    def measure_in_turn(self, todo: list[dict]) -> None:
        """Prepare and time each point in turn; rank 0 sends its record at once."""
        ranks = self.ranks
        for k, point in enumerate(todo):
            where = f"measuring {point['desc']} (point {k + 1}/{len(todo)})"
            self.start(k, where, done=float(k))
            step, check, compile_s, solo = self.prepare(point)
            samples, wrong = _timed(ranks, step, check, self.config, where, solo=solo)
            if ranks.is_rank0:
                rec = self.record(point, samples, wrong, compile_s)
                self.emit({"type": "record", "record": rec, "where": where})

    def measure_interleaved(self, todo: list[dict]) -> None:
        """Compile every point first, then time all of them in ``rounds`` passes.

        Each pass has 1/rounds of the budget, so that a slow episode of the
        machine (CPU: seconds-long stretches in which every call waits ~4 ms
        for a scheduler tick) spreads over many points instead of owning one.
        Rank 0 sends the records after the last pass.
        """
        config, rounds = self.config, self.rounds
        prepared = []
        for k, point in enumerate(todo):
            self.start(k, f"compiling {point['desc']} (point {k + 1}/{len(todo)})")
            prepared.append(self.prepare(point))
        per_round = dict(config)
        per_round["budget_s"] = float(config["budget_s"]) / rounds
        per_round["iters"] = -(-int(config["iters"]) // rounds)
        per_round["max_iters"] = -(-int(config["max_iters"]) // rounds)
        samples_of = [[] for _ in todo]
        wrong_of = [0 for _ in todo]
        for r in range(rounds):
            if r > 0:
                per_round["warmup_iters"] = min(1, int(config["warmup_iters"]))
            for k, (point, (step, check, _, solo)) in enumerate(zip(todo, prepared, strict=True)):
                where = (
                    f"measuring {point['desc']} (point {k + 1}/{len(todo)}, round {r + 1}/{rounds})"
                )
                done = (r * len(todo) + k) / rounds  # points' worth of timing finished
                self.emit(
                    {
                        "type": "point",
                        "i": k,
                        "where": where,
                        "rank": self.ranks.process_index,
                        "done": done,
                    }
                )
                got, wrong = _timed(self.ranks, step, check, per_round, where, solo=solo)
                samples_of[k].extend(got)
                wrong_of[k] += wrong
        if self.ranks.is_rank0:
            for k, (point, prep) in enumerate(zip(todo, prepared, strict=True)):
                rec = self.record(point, samples_of[k], wrong_of[k], prep[2])
                self.emit({"type": "record", "record": rec, "where": f"point {k + 1}/{len(todo)}"})


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m calibration._worker --config FILE`` (one worker process)."""
    return worker_main("python -m calibration._worker", run, argv)


if __name__ == "__main__":
    sys.exit(main())
