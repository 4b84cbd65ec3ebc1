"""Two ranks swapping data through JAX's gloo ``ppermute`` over an emulated link, as in a step.

    python benchmarks/emulated_swaps.py                          # 2x1@100mbit, 1.9 MB, 12 swaps
    python benchmarks/emulated_swaps.py --queue-s 0.005          # a 5 ms queue instead of 50 ms
    python benchmarks/emulated_swaps.py --modes idle --reps 30
    python benchmarks/emulated_swaps.py --modes late,late-together,late-psum

Why: in real training on the emulated cluster, the steps whose exchange is a
swap between two ranks (2 parameter servers at 2 workers, P2P at 2) are
bimodal, and their slow steps fall on levels one transfer time apart, as if
one direction ran after the other; the microbenchmarks of the same swap
(``ddltune collect``: a barrier, then the swap, back to back) are steady.
This isolates the swap from the training step. Each mode starts two fresh
processes, one in each node's namespaces (``EmulatedCluster.wrap``), joined by
``jax.distributed`` with gloo collectives and gloo's I/O thread under
``SCHED_BATCH`` as ddltune's workers run; every repetition is a barrier (a
1-element ``psum``), then what the mode says, then the timed program:

=============  ==============================================================
plain          one swap (``lax.ppermute`` over pairs (0, 1), (1, 0)), right away
idle           0.3 s asleep, then one swap (a step's compute leaves the link idle)
two            two dependent swaps in one program (a parameter server's push,
               then its pull), right away
idle-two       0.3 s asleep, then the two swaps
late           rank 1 starts 20 ms after rank 0 (as after a longer compute),
               then one swap
late-together  the same, the swap behind two ``psum`` of 8 floats a rank
               (the training harness's ``start_together``)
late-psum      the same lateness, an all-reduce (``lax.psum``) of the same
               bytes each way instead of the swap, for contrast
two-together   the two swaps, each behind the two small ``psum``
=============  ==============================================================

For each it prints the samples (ms) — in the ``late`` modes the late rank's
own time from its start, otherwise the slower rank's — and the median and the
slowest as multiples of one swap's wire time (the message's wire bytes at the
rate, both directions at once). Results, both ranks' samples included, go to
``--out`` (JSON). Needs root or CAP_NET_ADMIN; every
namespace is removed at the end (the cluster's context manager), the
processes are waited for by PID with a timeout and killed after it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODES = ("plain", "idle", "two", "idle-two", "late", "late-together", "late-psum", "two-together")
#: How late rank 1 starts the timed program in the ``late`` modes, seconds.
LATE_S = 0.02


def _worker(rank: int, coordinator: str, mode: str, nbytes: int, reps: int) -> None:
    """One rank: time ``reps`` repetitions of ``mode``; print its samples as JSON."""
    sys.path.insert(0, str(ROOT))
    import jax
    import numpy as np
    from jax.experimental.shard_map import shard_map
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    from launch import gloo_io_threads_batch, start_together

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=coordinator, num_processes=2, process_id=rank)
    gloo_io_threads_batch()
    mesh = Mesh(np.array(jax.devices()), ("r",))
    pairs = [(0, 1), (1, 0)]

    def together(x):  # the training harness's own barrier before a swap
        return start_together(x, 2)

    def swaps(x):
        if mode == "late-psum":  # an all-reduce of as many bytes each way, for contrast
            return jax.lax.psum(x, "r")
        first = together(x) if mode.endswith("together") else x
        y = jax.lax.ppermute(first, "r", pairs)
        if "two" in mode:  # depends on the first, as a pull on its push
            second = 0.5 * y + x
            y = jax.lax.ppermute(
                together(second) if mode.endswith("together") else second, "r", pairs
            )
        return y

    spec = P("r")
    f = jax.jit(shard_map(swaps, mesh=mesh, in_specs=spec, out_specs=spec, check_rep=False))
    barrier = jax.jit(
        shard_map(lambda z: jax.lax.psum(z, "r"), mesh=mesh, in_specs=spec, out_specs=P())
    )
    sharding = NamedSharding(mesh, spec)
    x = jax.make_array_from_process_local_data(sharding, np.ones((nbytes // 4,), np.float32))
    z = jax.make_array_from_process_local_data(sharding, np.ones((1,), np.float32))
    for _ in range(2):  # compile and warm the connection
        jax.block_until_ready(f(x))
        jax.block_until_ready(barrier(z))
    samples = []
    for _ in range(reps):
        jax.block_until_ready(barrier(z))
        if mode.startswith("idle"):
            time.sleep(0.3)
        if mode.startswith("late") and rank == 1:
            time.sleep(LATE_S)
        t0 = time.perf_counter()
        jax.block_until_ready(f(x))
        samples.append(time.perf_counter() - t0)
    print(json.dumps({"mode": mode, "samples_s": samples}), flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--spec", default="2x1@100mbit", help="NODESxRANKS@RATE, 2 nodes of 1 rank")
    ap.add_argument("--bytes", type=int, default=1_900_000, help="bytes each rank sends (1.9 MB)")
    ap.add_argument("--reps", type=int, default=12, help="timed repetitions per mode")
    ap.add_argument("--modes", default=",".join(MODES), help=f"among {', '.join(MODES)}")
    ap.add_argument("--queue-s", type=float, default=None, help="the shaper's queue, seconds")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/emulated_swaps.json")
    ap.add_argument("--worker", nargs=4, metavar=("RANK", "COORD", "MODE", "BYTES"))
    a = ap.parse_args(argv)
    if a.worker:
        _worker(int(a.worker[0]), a.worker[1], a.worker[2], int(a.worker[3]), a.reps)
        return 0
    modes = [m for m in a.modes.split(",") if m]
    bad = [m for m in modes if m not in MODES]
    if bad:
        ap.error(f"--modes: unknown {', '.join(bad)}; choose among {', '.join(MODES)}")
    sys.path.insert(0, str(ROOT))
    from launch import EmulatedCluster, wire_bytes

    kw = {} if a.queue_s is None else {"queue_s": a.queue_s}
    results = []
    with EmulatedCluster(a.spec, **kw) as cluster:
        if cluster.spec.nodes != 2 or cluster.spec.ranks_per_node != 1:
            ap.error("--spec: 2 nodes of 1 rank (2x1@RATE)")
        rate = cluster.spec.rate_bits_per_s / 8
        wire_s = wire_bytes(a.bytes) / rate
        print(f"# {a.spec}, queue {1e3 * cluster.queue_s:g} ms; {a.bytes:,} bytes each way: "
              f"wire time {1e3 * wire_s:.1f} ms")  # fmt: skip
        for i, mode in enumerate(modes):
            coord = f"{cluster.nodes[0].address}:{5700 + i}"
            procs = [
                subprocess.Popen(
                    cluster.wrap(
                        node,
                        [
                            sys.executable,
                            __file__,
                            "--reps",
                            str(a.reps),
                            "--worker",
                            str(r),
                            coord,
                            mode,
                            str(a.bytes),
                        ],
                    ),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )  # fmt: skip
                for r, node in enumerate(cluster.nodes)
            ]
            outs = []
            for p in procs:
                try:
                    out, err = p.communicate(timeout=60 + 5 * a.reps)
                except subprocess.TimeoutExpired:
                    p.kill()
                    out, err = p.communicate()
                if p.returncode != 0:
                    raise SystemExit(f"{mode}: a rank failed: {(err or out).strip()[-800:]}")
                outs.append(out)
            by_rank = [json.loads(o.strip().splitlines()[-1])["samples_s"] for o in outs]
            # the exchange as the late rank sees it (from its own start), else the slower rank's
            samples = (
                by_rank[1]
                if mode.startswith("late")
                else [max(a0, a1) for a0, a1 in zip(*by_rank, strict=True)]
            )
            med = statistics.median(samples)
            row = {"mode": mode, "samples_s": samples, "samples_s_by_rank": by_rank,
                   "median_s": med, "median_over_wire": med / wire_s,
                   "max_over_wire": max(samples) / wire_s}  # fmt: skip
            results.append(row)
            print(f"{mode:>13}: " + " ".join(f"{1e3 * s:.0f}" for s in samples) + " ms; median "
                  f"{row['median_over_wire']:.2f}×, slowest {row['max_over_wire']:.2f}× the wire "
                  "time")  # fmt: skip
    doc = {"spec": a.spec, "queue_s": cluster.queue_s, "bytes": a.bytes, "wire_s": wire_s,
           "reps": a.reps, "results": results}  # fmt: skip
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"# wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
