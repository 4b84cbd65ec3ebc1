"""The target-cluster path across emulated nodes: srun collect, calibrate, what it fitted.

    python benchmarks/emulated_launchers.py                     # 4 nodes x 2 ranks, 200 Mbit/s
    python benchmarks/emulated_launchers.py --nodes 4 --rate 300mbit --max-bytes 4M

Brings up SLURM across an emulated cluster (``tests/_launchers.py``:
``EmulatedSlurmCluster``, one slurmd inside each node's namespaces), then runs,
from the login node, exactly what a user runs on a cluster::

    srun -N NODES --ntasks-per-node 2 ddltune collect --max-bytes 16M -o m.jsonl
    srun -N NODES --ntasks-per-node 1 ddltune collect --max-bytes 16M -o m.jsonl --resume
    srun -N 1 --ntasks-per-node 2 ddltune collect --max-bytes 16M -o m.jsonl --resume
    ddltune calibrate m.jsonl -o p.json

and prints: the host each rank ran on (``srun hostname``), the records'
``num_ranks`` / ``ranks_per_node``, the fitted inter-node bandwidth (1/β of
level 1) against the set rate's TCP goodput (the rate × 1448/1514, payload per
full Ethernet frame), and the fitted intra-node bandwidth (level 0: loopback,
as NVLink inside a node). Needs root (namespaces), slurm-wlm and munge.
Everything it starts is stopped and removed at the end, whatever happens.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _helpers():
    spec = importlib.util.spec_from_file_location(
        "ddltune_launchers", ROOT / "tests" / "_launchers.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=4, help="emulated nodes (default 4)")
    ap.add_argument("--per-node", type=int, default=2, help="ranks per node (default 2)")
    ap.add_argument("--rate", default="200mbit", help="each NIC's rate, tc units (default 200mbit)")
    ap.add_argument("--max-bytes", default="16M", help="collect's --max-bytes (default 16M)")
    ap.add_argument(
        "--collectives", default="all_reduce", help="collect's --collectives (default all_reduce)"
    )
    ap.add_argument(
        "--out", default=None, help="folder for m.jsonl and p.json (default: temporary)"
    )
    args = ap.parse_args(argv)
    H = _helpers()
    why = H.EmulatedSlurmCluster.unavailable()
    if why:
        print(f"emulated_launchers: cannot run here: {why}", file=sys.stderr)
        return 2
    out = Path(args.out or tempfile.mkdtemp(prefix="ddltune-elaunch-"))
    out.mkdir(parents=True, exist_ok=True)
    c = H.EmulatedSlurmCluster(f"{args.nodes}x1@{args.rate}")
    try:
        t0 = time.monotonic()
        c.start()
        print(f"SLURM on {args.nodes} emulated nodes up in {time.monotonic() - t0:.1f} s")
        srun = c.srun(args.nodes, args.per_node)
        env = dict(c.env, JAX_PLATFORMS="cpu", PYTHONUNBUFFERED="1")
        names = subprocess.run(
            [*srun, "sh", "-c", 'echo "$SLURM_PROCID $(hostname)"'],
            capture_output=True, text=True, env=env, timeout=120,
        ).stdout.split()  # fmt: skip
        hosts = dict(zip(map(int, names[::2]), names[1::2], strict=True))
        print(
            "ranks per host:", {h: sorted(r for r in hosts if hosts[r] == h) for h in c.hostnames}
        )
        m = out / "m.jsonl"
        m.unlink(missing_ok=True)
        collect_s = 0.0
        # one job per shape, as a user separates the links: all nodes × their ranks, one rank
        # per node (every hop on a NIC), one node (every hop inside it)
        for nodes, per in ((args.nodes, args.per_node), (args.nodes, 1), (1, args.per_node)):
            cmd = [*c.srun(nodes, per), sys.executable, "-m", "tuner.cli", "collect",
                   "--max-bytes", args.max_bytes, "--collectives", args.collectives,
                   "--suite", "collectives", "--no-progress", "-o", str(m), "--resume"]  # fmt: skip
            t0 = time.monotonic()
            res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
            collect_s += time.monotonic() - t0
            print(f"srun -N {nodes} --ntasks-per-node {per} ddltune collect: rc {res.returncode}, "
                  f"{time.monotonic() - t0:.0f} s")  # fmt: skip
            if res.returncode != 0:
                print(res.stdout[-2000:], res.stderr[-3000:], file=sys.stderr)
                return 1
    finally:
        c.stop()
    from calibration import Profile, read_records

    recs = read_records(m)
    shapes = sorted({(r["num_ranks"], r["ranks_per_node"]) for r in recs})
    print(
        f"collect: {len(recs)} records in {collect_s:.0f} s; (num_ranks, ranks_per_node): {shapes}"
    )
    p = out / "p.json"
    t0 = time.monotonic()
    cal = subprocess.run(
        [sys.executable, "-m", "tuner.cli", "calibrate", str(m), "-o", str(p), "--overwrite"],
        capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    print(f"calibrate: rc {cal.returncode} in {time.monotonic() - t0:.0f} s")
    print("\n".join(cal.stdout.splitlines()[:12]))
    if cal.returncode != 0:
        print(cal.stderr[-3000:], file=sys.stderr)
        return 1
    prof = Profile.load(p)
    beta = [float(b) for b in prof.params.to_numpy().beta_s_per_byte]
    rate_bits = c.cluster.spec.rate_bits_per_s
    goodput = rate_bits / 8 * 1448 / 1514
    inter, intra = 1 / beta[1], 1 / beta[0]
    # nccl-tests' busbw of the largest all_reduce with one rank per node: what the NIC carried
    big = max(
        (r for r in recs if r["collective"] == "all_reduce" and r["ranks_per_node"] == 1),
        key=lambda r: r["message_bytes"],
        default=None,
    )
    busbw = None
    if big is not None:
        n = big["num_ranks"]
        busbw = 2 * (n - 1) / n * big["message_bytes"] / big["time_s"]["p10"]
        print(
            f"measured: all_reduce {big['message_bytes'] / 2**20:g} MiB on {n} nodes x 1, busbw "
            f"{busbw / 1e6:.2f} MB/s = {busbw / goodput:.1%} of the goodput"
        )
    summary = {
        "measured_busbw_bytes_per_s": busbw,
        "nodes": args.nodes,
        "ranks_per_node": args.per_node,
        "rate_bits_per_s": rate_bits,
        "tcp_goodput_bytes_per_s": goodput,
        "fitted_inter_node_bytes_per_s": inter,
        "fitted_intra_node_bytes_per_s": intra,
        "inter_over_goodput": inter / goodput,
        "records": len(recs),
        "collect_s": collect_s,
        "shapes": shapes,
        "distinct_hosts": len(set(hosts.values())),
    }
    print(
        f"inter-node: fitted {inter / 1e6:.2f} MB/s = {inter / goodput:.1%} of the goodput "
        f"{goodput / 1e6:.2f} MB/s ({rate_bits / 1e6:g} Mbit/s); intra-node {intra / 1e6:.1f} MB/s "
        f"({intra / inter:.1f}x the NIC)"
    )
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    print(f"files: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
