"""The target-cluster path across emulated nodes: launch, collect, calibrate, what it fitted.

    python benchmarks/emulated_launchers.py                     # srun, 4 nodes x 2 ranks, 200 Mbit/s
    python benchmarks/emulated_launchers.py --launcher openmpi  # or mpich
    python benchmarks/emulated_launchers.py --nodes 4 --rate 300mbit --max-bytes 4M

Brings up an emulated cluster of hosts (``tests/_launchers.py``: for ``srun``
``EmulatedSlurmCluster``, one slurmd inside each node's namespaces; for Open MPI
and MPICH ``EmulatedNodes``, their daemons started through an ssh stand-in),
then runs, from the login node, exactly what a user runs on a cluster::

    LAUNCH -N NODES x 2 ddltune collect --max-bytes 16M -o m.jsonl
    LAUNCH -N NODES x 1 ddltune collect --max-bytes 16M -o m.jsonl --resume
    LAUNCH -N 1 x 2 ddltune collect --max-bytes 16M -o m.jsonl --resume
    LAUNCH -N NODES x 2 python benchmarks/allreduce_algorithms_worker.py   # ring and hierarchical
    ddltune calibrate m.jsonl -o p.json

and prints: the host each rank ran on, the records' ``num_ranks`` /
``ranks_per_node``, the busbw of the largest all-reduce with one rank per
node measured and as the fitted profile predicts it, against the set rate's
TCP goodput (the rate × 1448/1514, payload per full Ethernet frame), the link's
bandwidth as fitted (the busbw of each further byte, no latency in it) against
the set rate, the fitted
all-reduce bandwidths with their 90% intervals and whether the data identify
them, the intra-node busbw, and the ring against the hierarchical all-reduce
on NODES × 2 measured (p10) and predicted by the profile, size by size, with
which is faster each way. Needs root (namespaces) and the launcher's packages.
Everything it starts is stopped and removed at the end, whatever happens;
``summary.json`` in ``--out`` holds the figures.
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


#: Each launcher's variable for the rank, as its ranks see it.
_RANK_VAR = {"srun": "SLURM_PROCID", "openmpi": "OMPI_COMM_WORLD_RANK", "mpich": "PMI_RANK"}


def _p10(samples) -> float:
    """The statistic calibration fits on CPU (:data:`calibration.STATISTICS`): the 10th percentile."""
    import numpy as np

    return float(np.percentile(np.asarray(samples, dtype=float), 10))


def _cluster(H, name: str, spec: str):
    """(cluster, start(nodes, per_node) → argv prefix, env) for one launcher."""
    if name == "srun":
        c = H.EmulatedSlurmCluster(spec)
        return c, c.srun, lambda: c.env
    argv, version = (H.find_openmpi if name == "openmpi" else H.find_mpich)()
    if argv is None:
        raise SystemExit(f"emulated_launchers: {version}")
    c = H.EmulatedNodes(spec)
    start = c.openmpi if name == "openmpi" else c.mpich
    return c, (lambda nodes, per: start(argv[0], nodes, per)), H.clean_env


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--launcher", choices=sorted(_RANK_VAR), default="srun",
                    help="srun (SLURM, one slurmd per node; default), openmpi or mpich")  # fmt: skip
    ap.add_argument("--nodes", type=int, default=4, help="emulated nodes (default 4)")
    ap.add_argument("--per-node", type=int, default=2, help="ranks per node (default 2)")
    ap.add_argument("--rate", default="200mbit", help="each NIC's rate, tc units (default 200mbit)")
    ap.add_argument("--max-bytes", default="16M", help="collect's --max-bytes (default 16M)")
    ap.add_argument(
        "--collectives", default="all_reduce", help="collect's --collectives (default all_reduce)"
    )
    ap.add_argument(
        "--budget-s",
        default=None,
        help="collect's --budget-s, seconds per point (default: collect's)",
    )
    ap.add_argument(
        "--step-factor",
        default=None,
        help="collect's --step-factor, the size multiplier between points (default: collect's)",
    )
    ap.add_argument("--no-algorithms", action="store_true",
                    help="skip the ring-against-hierarchical job")  # fmt: skip
    ap.add_argument(
        "--out", default=None, help="folder for m.jsonl and p.json (default: temporary)"
    )
    args = ap.parse_args(argv)
    H = _helpers()
    why = (H.EmulatedSlurmCluster if args.launcher == "srun" else H.EmulatedNodes).unavailable()
    if why:
        print(f"emulated_launchers: cannot run here: {why}", file=sys.stderr)
        return 2
    out = Path(args.out or tempfile.mkdtemp(prefix="ddltune-elaunch-"))
    out.mkdir(parents=True, exist_ok=True)
    c, start, env_of = _cluster(H, args.launcher, f"{args.nodes}x1@{args.rate}")
    algos = []
    try:
        t0 = time.monotonic()
        c.start()
        print(f"{args.launcher} on {args.nodes} emulated nodes up in {time.monotonic() - t0:.1f} s")
        env = dict(env_of(), JAX_PLATFORMS="cpu", PYTHONUNBUFFERED="1")
        names = subprocess.run(
            [*start(args.nodes, args.per_node), "sh", "-c",
             f'echo "${_RANK_VAR[args.launcher]} $(hostname)"'],
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
            cmd = [*start(nodes, per), sys.executable, "-m", "tuner.cli", "collect",
                   "--max-bytes", args.max_bytes, "--collectives", args.collectives,
                   "--suite", "collectives", "--no-progress", "-o", str(m), "--resume",
                   *(["--budget-s", args.budget_s] if args.budget_s else []),
                   *(["--step-factor", args.step_factor] if args.step_factor else [])]  # fmt: skip
            t0 = time.monotonic()
            res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600,
                                 cwd=ROOT)  # fmt: skip
            collect_s += time.monotonic() - t0
            print(f"{args.launcher} {nodes} nodes x {per} ddltune collect: rc {res.returncode}, "
                  f"{time.monotonic() - t0:.0f} s")  # fmt: skip
            if res.returncode != 0:
                print(res.stdout[-2000:], res.stderr[-3000:], file=sys.stderr)
                return 1
        if not args.no_algorithms and args.per_node > 1 and args.nodes > 1:
            cmd = [*start(args.nodes, args.per_node), sys.executable,
                   str(ROOT / "benchmarks" / "allreduce_algorithms_worker.py"),
                   "--max-bytes", args.max_bytes]  # fmt: skip
            t0 = time.monotonic()
            res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600,
                                 cwd=ROOT)  # fmt: skip
            print(f"{args.launcher} {args.nodes} nodes x {args.per_node} ring and hierarchical "
                  f"all-reduce: rc {res.returncode}, {time.monotonic() - t0:.0f} s")  # fmt: skip
            if res.returncode != 0:
                print(res.stdout[-2000:], res.stderr[-3000:], file=sys.stderr)
                return 1
            algos = [json.loads(ln) for ln in res.stdout.splitlines() if ln.startswith("{")]
    finally:
        c.stop()
    from calibration import Profile, core_sharing, read_records
    from costmodel import collective_batch, collective_batch_time, format_bytes

    def predict(S, n, g, sharing, algorithm=None):
        """The profile's all_reduce time with the cores shared as ``sharing``
        (``calibration.core_sharing``: share ranks, contention) says."""
        share, contention = sharing
        batch = collective_batch(["all_reduce"], [S], [n], [g], [algorithm], [share], [contention])
        return float(collective_batch_time(prof.params, batch)[0])

    recs = read_records(m)
    shapes = sorted({(r["num_ranks"], r["ranks_per_node"]) for r in recs})
    print(
        f"collect: {len(recs)} records in {collect_s:.0f} s; (num_ranks, ranks_per_node): {shapes}"
    )
    p = out / "p.json"
    t0 = time.monotonic()
    cal = subprocess.run(
        [sys.executable, "-m", "tuner.cli", "calibrate", str(m), "-o", str(p), "--overwrite"],
        capture_output=True, text=True, timeout=1200, cwd=ROOT,
    )  # fmt: skip
    print(f"calibrate: rc {cal.returncode} in {time.monotonic() - t0:.0f} s")
    print("\n".join(cal.stdout.splitlines()[:12]))
    if cal.returncode != 0:
        print(cal.stderr[-3000:], file=sys.stderr)
        return 1
    prof = Profile.load(p)
    rate_bits = c.cluster.spec.rate_bits_per_s
    goodput = rate_bits / 8 * 1448 / 1514
    # the NIC's bandwidth as the fit uses it: the busbw it predicts for the largest
    # all_reduce with one rank per node (every byte on a NIC), beside the measured one
    big = max(
        (r for r in recs if r["collective"] == "all_reduce" and r["ranks_per_node"] == 1),
        key=lambda r: r["message_bytes"],
        default=None,
    )
    busbw = fitted = link = None
    if big is not None:
        n, S = big["num_ranks"], big["message_bytes"]
        factor = 2 * (n - 1) / n * S
        busbw = factor / big["time_s"]["p10"]
        share = core_sharing(big)
        fitted = factor / predict(S, n, 1, share)
        # the link as the fit has it: the busbw of the time each further byte takes
        # (the predicted slope from S to 16·S), which no latency term enters
        slope = (predict(16 * S, n, 1, share) - predict(S, n, 1, share)) / (15 * S)
        link = 2 * (n - 1) / n / slope
        print(
            f"inter-node: all_reduce {S / 2**20:g} MiB on {n} nodes x 1: busbw measured "
            f"{busbw / 1e6:.2f} MB/s ({busbw / goodput:.1%} of the TCP goodput "
            f"{goodput / 1e6:.2f} MB/s of {rate_bits / 1e6:g} Mbit/s), fitted "
            f"{fitted / 1e6:.2f} MB/s ({fitted / busbw - 1:+.1%} of the measured, "
            f"{fitted / goodput:.1%} of the goodput)"
        )
        print(
            f"inter-node link as fitted (busbw of each further byte, {S / 2**20:g}–"
            f"{16 * S / 2**20:g} MiB): {link / 1e6:.2f} MB/s, {link * 8 / rate_bits - 1:+.1%} "
            f"of the set {rate_bits / 1e6:g} Mbit/s ({link / goodput - 1:+.1%} of its TCP goodput)"
        )
    rows = [r for r in prof.parameter_table() if r["name"].startswith(
        "regime_beta_s_per_byte[all_reduce,")]  # fmt: skip
    for r in rows:
        print(f"  {r['name']}: {1 / r['value'] / 1e6:.2f} MB/s (90%: {1 / r['high'] / 1e6:.2f}"
              f"–{1 / r['low'] / 1e6:.2f}), identified: {'yes' if r['identified'] else 'no'}")  # fmt: skip
    intra = [r for r in recs if r["num_ranks"] == r["ranks_per_node"] > 1]
    intra_bw = None
    if intra:
        b = max(intra, key=lambda r: r["message_bytes"])
        n, S = b["num_ranks"], b["message_bytes"]
        intra_bw = 2 * (n - 1) / n * S / b["time_s"]["p10"]
        print(f"intra-node: all_reduce {S / 2**20:g} MiB on 1 node x {n}: busbw "
              f"{intra_bw / 1e6:.1f} MB/s ({intra_bw / (busbw or goodput):.1f}x the NIC's)")  # fmt: skip
    comparison = []
    if algos:
        print("\nring against hierarchical all-reduce, "
              f"{args.nodes} nodes x {args.per_node} (p10 of the samples; model: the profile above)")  # fmt: skip
        print(f"{'size':>9}  {'ring meas':>10} {'pred':>9} {'err':>6}   "
              f"{'hier meas':>10} {'pred':>9} {'err':>6}   faster: measured / predicted")  # fmt: skip
        by = {(a["algorithm"], a["message_bytes"]): a for a in algos}
        for S in sorted({a["message_bytes"] for a in algos}):
            row = {"message_bytes": S}
            for alg in ("ring", "hierarchical"):
                a = by[(alg, S)]
                t = _p10(a["samples_s"])
                # every rank of the emulated nodes runs on this machine's cores: their
                # sharing as a collect record of this cluster has it
                n_, g_ = a["num_ranks"], a["ranks_per_node"]
                like = {"num_ranks": n_, "ranks_per_node": g_, "ranks_per_machine": n_}
                if recs and recs[0].get("emulated") is not None:
                    like["emulated"] = recs[0]["emulated"]
                pred = predict(S, n_, g_, core_sharing(like), alg)
                row[alg] = {"measured_s": t, "predicted_s": pred, "error": pred / t - 1}
            fm = min(("ring", "hierarchical"), key=lambda k: row[k]["measured_s"])
            fp = min(("ring", "hierarchical"), key=lambda k: row[k]["predicted_s"])
            row["faster_measured"], row["faster_predicted"] = fm, fp
            comparison.append(row)
            r, h = row["ring"], row["hierarchical"]
            print(f"{format_bytes(S):>9}  {r['measured_s'] * 1e3:>7.2f} ms {r['predicted_s'] * 1e3:>6.2f} ms "
                  f"{r['error']:>+6.1%}   {h['measured_s'] * 1e3:>7.2f} ms {h['predicted_s'] * 1e3:>6.2f} ms "
                  f"{h['error']:>+6.1%}   {fm} / {fp}")  # fmt: skip
    summary = {
        "launcher": args.launcher,
        "measured_busbw_bytes_per_s": busbw,
        "fitted_busbw_bytes_per_s": fitted,
        "fitted_link_busbw_bytes_per_s": link,
        "nodes": args.nodes,
        "ranks_per_node": args.per_node,
        "rate_bits_per_s": rate_bits,
        "tcp_goodput_bytes_per_s": goodput,
        "intra_node_busbw_bytes_per_s": intra_bw,
        "records": len(recs),
        "collect_s": collect_s,
        "shapes": shapes,
        "distinct_hosts": len(set(hosts.values())),
        "heldout_p90": prof.heldout_p90,
        "ring_vs_hierarchical": comparison,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    print(f"files: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
