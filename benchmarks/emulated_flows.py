"""Many TCP flows at once through the emulated NICs: what share of the rate each pattern gets.

    python benchmarks/emulated_flows.py                                # 4x1@200mbit, 4 MB a flow
    python benchmarks/emulated_flows.py --spec 4x1@100mbit --patterns a2a,ring --repeats 5
    python benchmarks/emulated_flows.py --burst-frames 8 --queue-s 0.01   # another shaper

Issue 22 asked that the emulated links be measured again "with many flows at
once" before trusting them for the architectures whose exchanges cross: one
flow through a shaped NIC is α + S/R (``ddltune lab check``), but a
parameter server's fan-in, a ring and an all-to-all load a NIC with several
flows, in one direction or in both. This benchmark brings up an emulated
cluster (``launch.EmulatedCluster``, root or CAP_NET_ADMIN), starts one plain
Python TCP sender/receiver per node inside the node's namespace (no gloo, no
JAX: the network alone), and times each pattern from a common start to its
last byte:

=========  =====================================================================
one        node 0 → node 1 (one flow)
fanout     node 0 → every other node (n − 1 flows out of one NIC)
fanin      every other node → node 0 (n − 1 flows into one NIC)
bidir      node 0 ⇄ node 1 (one flow each way through both NICs)
chain      node 1 → node 0 and node 2 → node 1 (node 1 sends and receives)
ring       node i → node i + 1 for every i (one flow each way through every NIC)
a2a        every node → every other node (n − 1 flows each way through every NIC)
=========  =====================================================================

For each it prints the busiest NIC direction's bytes over the time, as a share
of the TCP goodput of the set rate (rate × 1448/1514, payload per full frame).
Results go to ``--out`` (JSON). Every namespace is removed at the end,
whatever happens (the cluster's context manager); the node processes are
started and waited for by PID with a timeout.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from launch import EmulatedCluster, parse_emulate

PATTERNS = ("one", "fanout", "fanin", "bidir", "chain", "ring", "a2a")

#: One node's part: listen for ``nin`` flows and send ``nbytes`` to each target,
#: starting at the wall-clock time ``t_start`` (every namespace shares the clock).
NODE = r"""
import json, socket, sys, threading, time
me, addrs, targets, nin, nbytes, t_start, port = (
    int(sys.argv[1]), sys.argv[2].split(","), [int(x) for x in sys.argv[3].split(",") if x],
    int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6]), int(sys.argv[7]))
ends = {"recv": [], "send": []}
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind((addrs[me], port)); srv.listen(64); srv.settimeout(60)
def sink(c):
    got = 0
    while got < nbytes:
        b = c.recv(1 << 20)
        if not b:
            break
        got += len(b)
    ends["recv"].append(time.time()); c.close()
def accept():
    ts = []
    for _ in range(nin):
        c, _ = srv.accept(); t = threading.Thread(target=sink, args=(c,)); t.start(); ts.append(t)
    for t in ts:
        t.join()
acceptor = threading.Thread(target=accept); acceptor.start()
socks = []
for t in targets:
    for _ in range(200):
        try:
            socks.append(socket.create_connection((addrs[t], port), timeout=60)); break
        except OSError:
            time.sleep(0.05)
    else:
        sys.exit(f"node {me}: cannot reach node {t}")
buf = b"\0" * nbytes
while time.time() < t_start:
    time.sleep(0.0005)
def send(s):
    s.sendall(buf); s.shutdown(socket.SHUT_WR); ends["send"].append(time.time())
ts = [threading.Thread(target=send, args=(s,)) for s in socks]
for t in ts:
    t.start()
for t in ts:
    t.join()
acceptor.join()
print(json.dumps({k: (max(v) - t_start if v else 0.0) for k, v in ends.items()}))
"""


def plan(pattern: str, n: int) -> tuple[dict, dict]:
    """(targets per node, incoming flows per node) of one pattern on n nodes."""
    if pattern == "one":
        return {0: [1]}, {1: 1}
    if pattern == "fanout":
        return {0: list(range(1, n))}, {i: 1 for i in range(1, n)}
    if pattern == "fanin":
        return {i: [0] for i in range(1, n)}, {0: n - 1}
    if pattern == "bidir":
        return {0: [1], 1: [0]}, {0: 1, 1: 1}
    if pattern == "chain":
        if n < 3:
            raise ValueError("chain needs 3 or more nodes")
        return {1: [0], 2: [1]}, {0: 1, 1: 1}
    if pattern == "ring":
        return {i: [(i + 1) % n] for i in range(n)}, {i: 1 for i in range(n)}
    if pattern == "a2a":
        return {i: [j for j in range(n) if j != i] for i in range(n)}, {i: n - 1 for i in range(n)}
    raise ValueError(f"unknown pattern {pattern!r}; valid: {', '.join(PATTERNS)}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--spec", default="4x1@200mbit", help="NODESx1@RATE (default 4x1@200mbit)")
    ap.add_argument("--patterns", default=",".join(PATTERNS), help="comma-separated, of "
                    + ", ".join(PATTERNS))  # fmt: skip
    ap.add_argument("--bytes", type=float, default=4e6, help="bytes per flow (default 4e6)")
    ap.add_argument("--repeats", type=int, default=3, help="times per pattern (default 3)")
    ap.add_argument("--burst-frames", type=int, default=None,
                    help="the token bucket's depth in frames (default: the emulator's)")  # fmt: skip
    ap.add_argument("--queue-s", type=float, default=None,
                    help="the bucket's queue in seconds of the rate (default: the emulator's)")  # fmt: skip
    ap.add_argument("--out", default="benchmarks/results/emulated_flows.json")
    args = ap.parse_args(argv)
    patterns = [p for p in args.patterns.split(",") if p]
    spec = parse_emulate(args.spec)
    for p in patterns:
        plan(p, spec.nodes)  # unknown or impossible patterns, before anything starts
    if not 1 <= args.repeats <= 50 or not 1e3 <= args.bytes <= 1e9:
        ap.error("--repeats 1…50 and --bytes 1e3…1e9")
    kw = {k: v for k, v in (("burst_frames", args.burst_frames), ("queue_s", args.queue_s))
          if v is not None}  # fmt: skip
    nbytes = int(args.bytes)
    rows = []
    with tempfile.TemporaryDirectory() as tmp, EmulatedCluster(spec, **kw) as cluster:
        script = Path(tmp) / "node.py"
        script.write_text(NODE)
        n = len(cluster.nodes)
        addrs = ",".join(node.address for node in cluster.nodes)
        goodput = spec.rate_bits_per_s / 8 * 1448 / 1514
        print(f"{spec.text}: burst {cluster.burst_bytes} B, queue limit {cluster.limit_bytes} B, "
              f"{nbytes:,} B per flow; TCP goodput {goodput / 1e6:.2f} MB/s")  # fmt: skip
        for k, pattern in enumerate(patterns):
            targets, nin = plan(pattern, n)
            busiest = max(max(len(t) for t in targets.values()), max(nin.values())) * nbytes
            times = []
            for _ in range(args.repeats):
                t0 = time.time() + 1.0 + 0.05 * n
                procs = [
                    subprocess.Popen(
                        [
                            "ip",
                            "netns",
                            "exec",
                            node.netns,
                            sys.executable,
                            str(script),
                            str(i),
                            addrs,
                            ",".join(map(str, targets.get(i, []))),
                            str(nin.get(i, 0)),
                            str(nbytes),
                            repr(t0),
                            str(47000 + k),
                        ],
                        stdout=subprocess.PIPE,
                        text=True,
                    )  # fmt: skip
                    for i, node in enumerate(cluster.nodes)
                ]
                try:
                    outs = [json.loads(p.communicate(timeout=300)[0]) for p in procs]
                finally:
                    for p in procs:
                        if p.poll() is None:
                            p.kill()
                            p.wait()
                times.append(max(max(o.values()) for o in outs))
            t = statistics.median(times)
            share = busiest / t / goodput
            rows.append({"pattern": pattern, "busiest_nic_bytes": busiest, "times_s": times,
                         "median_s": t, "share_of_goodput": share})  # fmt: skip
            print(f"  {pattern:7s} busiest NIC direction {busiest / 1e6:6.1f} MB: "
                  f"{t * 1e3:7.0f} ms median of {len(times)} "
                  f"({min(times) * 1e3:.0f}–{max(times) * 1e3:.0f}), "
                  f"{busiest / t / 1e6:5.2f} MB/s = {share:.1%} of the goodput", flush=True)  # fmt: skip
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"args": vars(args), "rows": rows}, indent=1) + "\n")
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
