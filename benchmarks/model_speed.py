"""How fast is the full iteration model? Configurations per second, numpy and jitted.

Sweeps every architecture × workers × gradient-bucket cap of ResNet-50 (batch
64 per worker, presets ethernet-10g + v100) through ``costmodel.iteration_time``
— one call per architecture — on its two paths: ``numpy`` (concrete
parameters: the closed forms in numpy, the way the tuner sweeps since issue 21;
nothing compiled) and ``jit`` (the same function of traced parameters under
``jax.jit``, the way a gradient-based fit would evaluate it; ``--dtype`` sets
its precision, numpy is always float64). Reports, per path, architecture and
in total:

* compile: the first call (jit: trace + XLA compile + one run), seconds;
* steady: the best of ``--repeats`` further calls, ``block_until_ready`` before
  reading the clock: numpy with *new* worker counts each time (the checks, the
  per-row step parts and costs, every bucket's max included; the bucket table
  and the sort of the caps are cached per distinct caps, as in a tuner sweep
  whose architectures share them); jit the compiled program run again on the
  same configurations (they are constants of the program);
* configurations per second = configurations / steady time.

Targets: issue 2, ≥ 1,000,000 configurations/s on 2 CPU cores; issue 21,
≥ 10 M/s with presets and ≥ 1 M/s with a 3-regime profile.

Run:  python benchmarks/model_speed.py [--dtype float32|float64|both] [--repeats 5] [--regimes 1]
      [--path numpy|jit|both]

Prints a short table last and writes everything to
benchmarks/results/model_speed.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ARCHITECTURES = ("ps", "ps_host", "hybrid", "p2p", "ring", "tree", "hierarchical")
MAX_WORKERS = 256
BUCKET_CAPS = 64  # log-spaced caps from 1 MiB to 1 GiB
RESULTS = Path(__file__).resolve().parent / "results" / "model_speed.json"


def _configurations(rng, np):
    """(workers, servers, bucket_bytes) arrays: every workers × cap pair, shuffled."""
    caps = np.unique(np.round(np.geomspace(1024**2, 1024**3, BUCKET_CAPS)))
    workers = np.arange(1, MAX_WORKERS + 1, dtype=np.float64)
    n, b = (x.ravel() for x in np.meshgrid(workers, caps, indexing="ij"))
    k = rng.integers(1, 9, n.size).astype(np.float64)  # servers (ps, hybrid)
    perm = rng.permutation(n.size)
    return n[perm], k[perm], b[perm], caps


def run(dtype: str, repeats: int, regimes: int = 1, path: str = "jit") -> dict:
    """Benchmark one path (numpy, or jit at one floating-point precision); returns its results."""
    import jax

    jax.config.update("jax_enable_x64", dtype == "float64")
    import numpy as np

    from costmodel import bucket_table, get_workload, iteration_time, preset

    params = preset("ethernet-10g", "v100", n_regimes=regimes)
    workload = get_workload("resnet50", 64)
    rng = np.random.default_rng(0)
    n, k, b, caps = _configurations(rng, np)
    # host-side part of every call: the exact bucketing of each cap (numpy; the
    # first call of a process computes it, later ones may reuse a cached table)
    host = []
    for _ in range(max(3, repeats)):
        t0 = time.perf_counter()
        table = bucket_table(workload, b)
        table.index(b)
        host.append(time.perf_counter() - t0)
    out = {"dtype": "float64" if path == "numpy" else dtype, "path": path}
    out.update({"configurations_per_architecture": int(n.size), "architectures": []})
    out["n_regimes"] = regimes
    out["bucket_caps_bytes"] = [float(caps[0]), float(caps[-1]), int(caps.size)]
    out["max_buckets"] = int(table.sizes.shape[1])
    out["host_bucketing_first_s"] = host[0]
    out["host_bucketing_s"] = min(host)

    def sweep_fn(arch):
        def f(p, workers):
            return iteration_time(
                p, workload, arch, workers, ranks_per_node=8, servers=k, bucket_bytes=b
            )

        if path == "numpy":
            return f
        # the configurations are checked and bucketed on the host: under jax.jit they
        # are constants of the program, which is compiled once per architecture and
        # then run again (jit keeps no results: every call computes)
        jitted = jax.jit(lambda p: f(p, n))
        return lambda p, workers: jitted(p)

    p_eval = params.to_numpy() if path == "numpy" else params
    fns = {}

    def call(arch, workers):
        fn = fns.setdefault(arch, sweep_fn(arch))
        res = fn(p_eval, workers)
        jax.block_until_ready(res.iteration_s)
        return res

    for arch in ARCHITECTURES:
        t0 = time.perf_counter()
        first = call(arch, n)
        compile_s = time.perf_counter() - t0
        if not bool(jax.numpy.all(jax.numpy.isfinite(first.iteration_s))):
            raise RuntimeError(f"{arch}: non-finite iteration times")
        steady = []
        for r in range(repeats):
            shifted = (n + r) % MAX_WORKERS + 1  # new values, same shapes
            t0 = time.perf_counter()
            call(arch, shifted)
            steady.append(time.perf_counter() - t0)
        best = min(steady)
        out["architectures"].append(
            {
                "architecture": arch,
                "configurations": int(n.size),
                "compile_s": compile_s,
                "steady_s": steady,
                "best_s": best,
                "median_s": statistics.median(steady),
                "configurations_per_s": n.size / best,
            }
        )
    total = sum(a["configurations"] for a in out["architectures"])
    best_total = sum(a["best_s"] for a in out["architectures"])
    out["total"] = {
        "configurations": total,
        "compile_s": sum(a["compile_s"] for a in out["architectures"]),
        "best_s": best_total,
        "configurations_per_s": total / best_total,
    }
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dtype", choices=("float32", "float64", "both"), default="both")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per architecture")
    parser.add_argument(
        "--regimes",
        type=int,
        default=1,
        help="protocol regimes per collective (1 = the presets' α-β line; fitted profiles "
        "may have 2–3, which the model evaluates bucket by bucket)",
    )
    parser.add_argument(
        "--path",
        choices=("numpy", "jit", "both"),
        default="both",
        help="numpy: concrete parameters (the tuner's sweep); jit: jax.jit of traced parameters",
    )
    parser.add_argument("--output", type=Path, default=RESULTS, help="JSON results file")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be ≥ 1")
    if not 1 <= args.regimes <= 8:
        parser.error("--regimes must be in 1..8")

    import jax

    dtypes = ("float32", "float64") if args.dtype == "both" else (args.dtype,)
    load_before = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    results = []
    if args.path in ("numpy", "both"):
        results.append(run("float64", args.repeats, args.regimes, "numpy"))
    if args.path in ("jit", "both"):
        results += [run(d, args.repeats, args.regimes, "jit") for d in dtypes]
    doc = {
        "benchmark": "model_speed",
        "workload": "resnet50, batch 64 per worker",
        "cluster": f"presets ethernet-10g + v100 ({args.regimes} regime(s)), 8 ranks per node",
        "sweep": f"{len(ARCHITECTURES)} architectures × workers 1..{MAX_WORKERS} × "
        f"{BUCKET_CAPS} bucket caps (1 MiB – 1 GiB), servers 1..8",
        "target_configurations_per_s": 1_000_000,
        "results": results,
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "jax": jax.__version__,
            "devices": [str(d) for d in jax.devices()],
            "cpu_count": os.cpu_count(),
            "load_average_before": load_before,
            "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        },
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(doc, indent=2) + "\n")

    print(f"\n{doc['sweep']}; resnet50; {args.regimes} regime(s); wrote {args.output}")
    print(
        f"{'path':14} {'architecture':13} {'configs':>8} {'compile s':>10} {'best s':>8} {'M configs/s':>12}"
    )
    for res in results:
        res_tag = f"{res['path']} {res['dtype']}"
        for a in res["architectures"]:
            print(
                f"{res_tag:14} {a['architecture']:13} {a['configurations']:8d} "
                f"{a['compile_s']:10.2f} {a['best_s']:8.3f} {a['configurations_per_s'] / 1e6:12.2f}"
            )
        t = res["total"]
        print(
            f"{res_tag:14} {'all':13} {t['configurations']:8d} {t['compile_s']:10.2f} "
            f"{t['best_s']:8.3f} {t['configurations_per_s'] / 1e6:12.2f}"
        )
        print(
            f"{res_tag:14} (host-side bucketing of {res['bucket_caps_bytes'][2]} caps into "
            f"{res['max_buckets']} bucket slots: {res['host_bucketing_first_s'] * 1e3:.1f} ms "
            f"first, {res['host_bucketing_s'] * 1e3:.1f} ms per later call)"
        )
    m = doc["machine"]
    print(
        f"load average before / after: {m['load_average_before']} / {m['load_average']} "
        f"on {m['cpu_count']} cores (others' work inflates every figure)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
