"""The ranks of a ``jax.distributed`` job as a one-axis mesh, with per-rank arrays and a timing barrier.

Both programs that run as ranks — the collector (:mod:`calibration`) and the
training harness (:mod:`tuner.validation`) — measure the same way: one
``jax.shard_map`` program over a mesh ``"r"`` of one device per rank, every
timed call preceded by a barrier that also carries every rank's time of the
previous call, so that a sample is the slowest rank's. :class:`Ranks` is that
mesh, the way to build a global array from each rank's block, and that
barrier.
"""

from __future__ import annotations

import socket
import zlib
from collections.abc import Callable, Mapping

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from ._launch import waiting

__all__ = ["Ranks", "hierarchical_psum", "start_together", "SYNC_FLOATS_PER_RANK"]


def hierarchical_psum(x, reduce: Callable = jax.lax.psum):
    """The sum over every rank of ``x``, in three phases over ``("node", "local")``.

    Inside ``jax.shard_map`` over :meth:`Ranks.node_mesh`: a reduce-scatter
    within the node (each local rank keeps 1/g of ``x``), ``reduce`` of that
    shard across the nodes (g such all-reduces side by side, one per local
    rank, sharing the node's NIC), an all-gather within the node (Goyal et al.,
    arXiv 1706.02677, §4; the phases of
    :class:`costmodel.collectives.HierarchicalAllReduce`). The reduce-scatter
    is an ``all_to_all`` of the g shards and a local sum, the same bytes and
    steps: XLA:CPU's gloo ``psum_scatter`` returns wrong values at the end of
    local rank 0's shard when several groups run at once (jax-ml/jax#40830;
    8 processes as 4 × 2, 16 MiB: 3 of 20 calls wrong, 18,079 elements each).

    Args:
        x: this rank's array; its size a multiple of the ranks per node g.
        reduce: the cross-node reduction, ``(shard, axis name) -> shard``
            (``lax.pmax`` makes the collector's injected wrong result).

    Returns:
        The reduced array, shape of ``x``.
    """
    g = jax.lax.axis_size("local")
    got = jax.lax.all_to_all(x.reshape(g, -1), "local", 0, 0, tiled=True)
    shard = reduce(got.sum(axis=0), "node")
    return jax.lax.all_gather(shard, "local", axis=0, tiled=True).reshape(x.shape)


#: Floats a rank contributes to each all-reduce of :func:`start_together` (every ring segment non-empty).
SYNC_FLOATS_PER_RANK = 8


def start_together(x, nproc: int):
    """``x``, after two small all-reduces that depend on it: every rank starts what follows at once.

    Put before each exchange in which two ranks send to each other (a swap).
    XLA:CPU's CollectivePermute and AllToAll over gloo post each send before
    its receive (xla ``backends/cpu/collectives/gloo_communicator.cc``), and
    gloo's TCP pair sends an unbound buffer at once when the peer's
    receive-ready notice is already there, queueing its own notice behind the
    data in the same connection (gloo ``transport/tcp/pair.cc``,
    ``Pair::send``/``Pair::recv``). A rank that reaches a swap later than its
    peer (its compute took longer, or its previous exchange ended later)
    therefore sends its whole buffer before its peer may start: the swap takes
    twice its wire time, which no network does (MPI's and NCCL's rendezvous let
    both directions flow). gloo's ring all-reduce posts each receive before its
    send, and two of them, of 8 floats a rank (every ring segment non-empty),
    leave the ranks close enough in time. Measured with
    ``benchmarks/emulated_swaps.py --modes late,late-together,late-psum,two,two-together
    --reps 12`` (2x1@100mbit, 1.9 MB each way): one rank 20 ms late, the swap
    took 2.02–2.24× its wire time (``late``) and 1.04–1.14× behind this
    (``late-together``), as an all-reduce of the same bytes does (1.03–1.19×,
    ``late-psum``); two dependent swaps (a push, then its pull) took a median
    3.08× one swap's wire time, up to 4.02× (``two``), and 2.13–2.40× behind
    this (``two-together``; 2× is perfect). Costs two small all-reduces,
    about 4(n − 1) α, which the records declare (``"sync"``: the training
    harness's steps, ``tuner.validation.sync_allreduces``; ``ddltune collect``'s
    swaps on 2 ranks) and their predictions add (``calibration.sync_time``,
    ``calibration.sync_batch``).

    Args:
        x: a float array (any shape, ≥ 1 element) inside ``shard_map`` over the
            one-axis mesh ``"r"`` of all ``nproc`` ranks.
        nproc: the ranks on axis ``"r"``, ≥ 1.

    Returns:
        ``x`` unchanged in value (0.0 added to its first element), now
        depending on the two all-reduces.
    """
    k = min(int(x.size), SYNC_FLOATS_PER_RANK * int(nproc))
    t = jax.lax.psum(x.reshape(-1)[:k] * 0.0, "r")
    t = jax.lax.psum(t, "r")
    return x.at[0].add(t[0])


class Ranks:
    """The mesh of ranks of this JAX job, per-rank arrays, and the barrier that gathers times.

    Which devices are ranks: the first device (lowest id) of every process, in
    process order — one process per GPU on GPU clusters, one CPU device per
    process under :func:`launch.launch_local`. With ``every_local_device`` and
    a job of a single process, every device of that process is a rank instead
    (e.g. ``XLA_FLAGS=--xla_force_host_platform_device_count=4``), which is
    how tests exercise the collectives without starting processes.

    Args:
        platform: jax platform of the ranks (``"cpu"``, ``"gpu"``); default
            the default backend.
        every_local_device: in a single-process job, make each local device a
            rank (default: one rank per process).

    Attributes:
        devices: the ranks' devices, rank order (rank i = ``devices[i]``).
        n: number of ranks (≥ 1).
        mesh: the one-axis mesh ``"r"`` over ``devices``.
        sharding: ``NamedSharding(mesh, P("r"))``: axis 0 split over the ranks.
        local: ``(rank, device)`` of this process's ranks, rank order.
        rank, device: this process's first rank and its device.
        is_rank0: whether this process holds rank 0 (the one that reports).
        process_index, num_processes: this process and the job's process count.
        backend: the ranks' platform name (``"cpu"``, ``"gpu"``, …).

    Example:
        >>> from launch import Ranks
        >>> ranks = Ranks()
        >>> ranks.n, ranks.rank, ranks.is_rank0
        (1, 0, True)
        >>> ranks.sync(False, {0: 0.25})
        (False, 0.25, 0)
    """

    def __init__(self, platform: str | None = None, *, every_local_device: bool = False):
        devs = jax.devices(platform) if platform else jax.devices()
        if every_local_device and jax.process_count() == 1:
            devices = list(devs)
        else:
            first: dict[int, object] = {}
            for d in sorted(devs, key=lambda d: (d.process_index, d.id)):
                first.setdefault(d.process_index, d)
            devices = [first[p] for p in sorted(first)]
        self.devices = devices
        self.n = len(devices)
        self.mesh = Mesh(np.array(devices, dtype=object), ("r",))
        self.sharding = NamedSharding(self.mesh, P("r"))
        self.process_index = jax.process_index()
        self.num_processes = jax.process_count()
        self.local = [
            (i, d) for i, d in enumerate(devices) if d.process_index == self.process_index
        ]
        self.rank, self.device = self.local[0]
        self.is_rank0 = self.rank == 0
        self.backend = self.device.platform
        self._width = 1 + 2 * self.n  # stop flag, n times, n wrong counts
        self._hosts: list[int] | None = None
        self._machines: list[int] | None = None

        def psum(a):
            return jax.lax.psum(a, "r")

        self._psum = jax.jit(jax.shard_map(psum, mesh=self.mesh, in_specs=P("r"), out_specs=P("r")))
        row = np.zeros((1, self._width), np.float32)
        self._barrier = self._psum.lower(self.put(row)).compile()

    def put_rows(self, rows: Callable[[int], object]):
        """The global array whose block of rank i is ``rows(i)``, for this process's ranks.

        Args:
            rows: rank index → host array of shape (b, …), the same shape for every rank.

        Returns:
            A ``jax.Array`` of shape (n·b, …) sharded over the ranks (only this
            process's blocks are built; no compilation).
        """
        shards, shape = [], None
        for i, d in self.local:
            block = np.asarray(rows(i))
            shape = block.shape
            shards.append(jax.device_put(block, d))
        gshape = (self.n * shape[0],) + tuple(shape[1:])
        return jax.make_array_from_single_device_arrays(gshape, self.sharding, shards)

    def put(self, block):
        """The global (n·b, …) array with the host array ``block`` (b, …) as every local rank's block."""
        block = np.asarray(block)
        return self.put_rows(lambda i: block)

    def put_tree(self, tree):
        """Every leaf of a pytree of host/jax arrays as a global array with the leaf as each rank's block (1, …)."""
        return jax.tree_util.tree_map(lambda a: self.put(np.asarray(a)[None]), tree)

    def local_block(self, tree):
        """This process's first rank's block of every leaf of ``tree``, leading axis dropped, as numpy."""
        return jax.tree_util.tree_map(lambda a: np.asarray(a.addressable_shards[0].data)[0], tree)

    def sync(
        self, stop: bool, times: Mapping[int, float], wrong: Mapping[int, int] | None = None
    ) -> tuple[bool, float, int]:
        """Barrier: (rank 0's stop decision, the slowest rank's time, whether any rank was wrong).

        One psum of a row per rank (float32): column 0 carries rank 0's
        ``stop``, column 1 + i rank i's time of the previous call,
        column 1 + n + i rank i's count of wrong results. Every rank calls it
        with the same arguments' meaning, so all ranks stop together.

        Args:
            stop: this process's stop decision (only rank 0's counts).
            times: rank → seconds ≥ 0 of its previous call (missing: 0).
            wrong: rank → wrong results of its previous call (missing: 0).

        Returns:
            ``(stop, max time over ranks in seconds, 1 if any rank was wrong else 0)``.
        """
        wrong = {} if wrong is None else wrong
        n = self.n

        def row(i):
            r = np.zeros((1, self._width), np.float32)
            if i == 0 and stop:
                r[0, 0] = 1.0
            r[0, 1 + i] = times.get(i, 0.0)
            r[0, 1 + n + i] = wrong.get(i, 0)
            return r

        with waiting():
            out = self._barrier(self.put_rows(row))
            out.block_until_ready()
        table = np.asarray(out.addressable_shards[0].data)[0]
        return bool(table[0] > 0), float(table[1 : 1 + n].max()), int(table[1 + n :].max() > 0)

    def node_mesh(self, ranks_per_node: int | None = None) -> Mesh:
        """The ranks as a two-axis mesh ``("node", "local")``: one row per node.

        A hierarchical exchange reduces over ``"local"`` (the ranks of one
        node) and ``"node"`` (one rank of each node, ``g`` such groups side by
        side); ``P(("node", "local"))`` splits axis 0 over the ranks exactly as
        :attr:`sharding` does. Collective (every rank calls it) unless
        ``ranks_per_node`` is given.

        Args:
            ranks_per_node: group ranks ``i·g … i·g + g − 1`` as node i with
                this g (≥ 1, dividing :attr:`n`) instead of by host name (tests
                on one host); default: the hosts, from :meth:`host_hashes`.

        Returns:
            A ``Mesh`` of shape (nodes, g) over :attr:`devices`, rank order.

        Raises:
            ValueError: ``ranks_per_node`` does not divide the ranks, or the
                hosts do not hold the same number of ranks in consecutive
                blocks (the launchers' block placement: ``srun``'s default,
                ``mpirun --map-by slot``), naming each host's ranks.
        """
        n = self.n
        if ranks_per_node is not None:
            g = int(ranks_per_node)
            if g < 1 or n % g:
                raise ValueError(f"ranks_per_node must be ≥ 1 and divide the {n} ranks, got {g}")
        else:
            hashes = self.host_hashes()
            g = hashes.count(hashes[0])
            blocks = [hashes[i : i + g] for i in range(0, n, g)]
            regular = n % g == 0 and all(len(set(b)) == 1 for b in blocks)
            if not regular or len({b[0] for b in blocks}) != len(blocks):
                order: dict[int, list[int]] = {}
                for i, h in enumerate(hashes):
                    order.setdefault(h, []).append(i)
                placed = "; ".join(
                    f"host {k + 1}: ranks {', '.join(map(str, r))}"
                    for k, r in enumerate(order.values())
                )
                raise ValueError(
                    "a hierarchical exchange needs the same number of ranks on every host, "
                    f"in consecutive blocks (block placement); this job has {placed}"
                )
        devs = np.array(self.devices, dtype=object).reshape(n // g, g)
        return Mesh(devs, ("node", "local"))

    def ranks_per_host(self) -> int:
        """Ranks on the busiest host (host names hashed and summed across ranks; no jax call for one process)."""
        return self.hosts()[0]

    def hosts(self) -> tuple[int, int]:
        """``(ranks on the busiest host, distinct hosts)`` of the job, from :meth:`host_hashes`."""
        hashes = self.host_hashes()
        return max(hashes.count(x) for x in set(hashes)), len(set(hashes))

    def host_hashes(self) -> list[int]:
        """Rank → a hash of its host name (crc32 of ``socket.gethostname()``, never the name).

        One psum of a row per rank (with :meth:`machine_hashes`'); one process
        is one host without a jax call. Collective (every rank calls it);
        computed once and kept.
        """
        return list(self._identities()[0])

    def machine_hashes(self) -> list[int]:
        """Rank → a hash of the kernel it runs on (crc32 of ``/proc/sys/kernel/random/boot_id``).

        Ranks with one boot id share one machine's cores, whatever their host
        names: the nodes of an emulated cluster (network and UTS namespaces on
        one machine) do; on a real cluster each node is its own machine.
        Collective, computed once with :meth:`host_hashes`.
        """
        return list(self._identities()[1])

    def ranks_per_machine(self) -> int:
        """Ranks on the busiest machine (kernel boot id): the processes sharing its cores."""
        m = self.machine_hashes()
        return max(m.count(x) for x in set(m))

    def _identities(self) -> tuple[list[int], list[int]]:
        if self._hosts is None:
            h = zlib.crc32(socket.gethostname().encode()) & 0x7FFFFFFF
            try:
                with open("/proc/sys/kernel/random/boot_id", "rb") as f:
                    m = zlib.crc32(f.read().strip()) & 0x7FFFFFFF
            except OSError:  # no procfs: the host name stands for the machine
                m = h
            if self.num_processes == 1:
                self._hosts, self._machines = [h] * self.n, [m] * self.n
            else:
                n = self.n

                def row(i):
                    r = np.zeros((1, 2 * n), np.int32)
                    r[0, i], r[0, n + i] = h, m
                    return r

                out = self._psum(self.put_rows(row))
                table = [int(x) for x in np.asarray(out.addressable_shards[0].data)[0]]
                self._hosts, self._machines = table[:n], table[n:]
        return self._hosts, self._machines
