"""Ring against hierarchical all-reduce, measured in one job (run under srun or mpirun).

    srun -N 4 --ntasks-per-node 2 python benchmarks/allreduce_algorithms_worker.py --max-bytes 16M

Every rank joins the launcher's job (:func:`launch.initialize_worker`, as
``ddltune collect`` does under a launcher), then times, at each size S =
``message_bytes`` from 1 KiB by factors of 4 to ``--max-bytes``, two programs
over the same ranks (``jax.shard_map`` over a (node, local) mesh; ranks
``g·k … g·k + g − 1`` on node k, the block placement srun and mpirun give,
checked from the ranks' host names):

* ``ring``: one ``lax.psum`` over all ranks, what ``ddltune collect``
  measures as ``all_reduce`` (gloo's algorithm for the whole job);
* ``hierarchical``: a reduce-scatter inside the node (each local rank keeps
  S/g; an ``lax.all_to_all`` of the g shards and a sum, since XLA:CPU's gloo
  ``psum_scatter`` returns wrong values when several groups run at once,
  jax-ml/jax#40830, as ``ddltune collect``'s hierarchical all_reduce and
  ``ddltune validate``'s hierarchical training do), ``lax.psum`` of that shard across the nodes (g groups of m
  ranks, one per local index, sharing each node's NIC), ``lax.all_gather``
  inside the node (Goyal et al., arXiv 1706.02677, §4; the phases of
  :class:`costmodel.collectives.HierarchicalAllReduce`).

Both results are checked equal to the expected sum on every rank. Timing as
the collector's: compiled ahead of time, ``--warmup`` untimed calls, then
rounds in which the two algorithms alternate (at least ``--reps``, on until
``--budget-s`` seconds per size, at most ``--max-reps``: the small sizes' p10
then rests on about a hundred samples, not nine), each call preceded by
:meth:`launch.Ranks.sync` (a barrier that carries every rank's time of the
previous call, so a sample is the slowest rank's). Rank 0 prints one JSON line
per (algorithm, size) with the samples in seconds; ``benchmarks/emulated_launchers.py``
reads them.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import jax
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from costmodel import parse_bytes
from launch import Ranks, hierarchical_psum, initialize_worker


def _programs(mesh: Mesh):
    spec = P(("node", "local"))

    def ring(a):
        return lax.psum(a, ("node", "local"))

    return {
        name: jax.jit(jax.shard_map(f, mesh=mesh, in_specs=spec, out_specs=spec))
        for name, f in (("ring", ring), ("hierarchical", hierarchical_psum))
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--max-bytes", default="16M", help="largest message (default 16M)")
    ap.add_argument(
        "--reps",
        type=int,
        default=9,
        help="at least this many timed calls per point and algorithm (default 9)",
    )
    ap.add_argument(
        "--budget-s",
        type=float,
        default=2.0,
        help="and rounds go on until this many seconds per point (default 2)",
    )
    ap.add_argument(
        "--max-reps",
        type=int,
        default=200,
        help="at most this many timed calls per point and algorithm (default 200)",
    )
    ap.add_argument("--warmup", type=int, default=2, help="untimed calls per point (default 2)")
    args = ap.parse_args(argv)
    initialize_worker(timeout_s=120, single_ok=False)
    ranks = Ranks()
    n = ranks.n
    try:
        mesh = ranks.node_mesh()
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    g = mesh.shape["local"]
    sharding = NamedSharding(mesh, P(("node", "local")))
    progs = _programs(mesh)
    S = 1024
    sizes = []
    while S <= parse_bytes(args.max_bytes):
        sizes.append(S)
        S *= 4
    for S in sizes:
        count = S // 4
        shards = [jax.device_put(np.full((1, count), i + 1, np.float32), d) for i, d in ranks.local]
        a = jax.make_array_from_single_device_arrays((n, count), sharding, shards)
        expected = n * (n + 1) / 2
        compiled = {k: f.lower(a).compile() for k, f in progs.items()}
        samples = {k: [] for k in compiled}
        for k, f in compiled.items():
            for _ in range(args.warmup):
                out = f(a)
                out.block_until_ready()
            block = np.asarray(out.addressable_shards[0].data)
            if not np.all(block == expected):
                print(f"{k} all-reduce of {S} bytes is wrong on rank {ranks.rank}", file=sys.stderr)
                return 1
        prev, took, rounds, t0_point = None, 0.0, 0, time.perf_counter()
        done = False
        while not done:
            for i, (k, f) in enumerate(compiled.items()):
                # rank 0 decides, at a round's start, whether the point has enough samples;
                # the barrier carries its decision and every rank's time of the previous call
                enough = rounds >= args.max_reps or (
                    rounds >= args.reps and time.perf_counter() - t0_point >= args.budget_s
                )
                stop, slowest, _ = ranks.sync(i == 0 and enough, {r: took for r, _ in ranks.local})
                if prev is not None:
                    samples[prev].append(slowest)
                    prev = None
                if stop:
                    done = True
                    break
                t0 = time.perf_counter()
                f(a).block_until_ready()
                prev, took = k, time.perf_counter() - t0
            rounds += 1
        if ranks.is_rank0:
            for k, s in samples.items():
                print(json.dumps({"algorithm": k, "message_bytes": S, "num_ranks": n,
                                  "ranks_per_node": g, "samples_s": s}), flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
