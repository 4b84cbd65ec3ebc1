"""Wall time of the main job, ``ddltune run``, and of each of its phases.

Usage:
    python benchmarks/run_time.py                      # the default run (2 local workers)
    python benchmarks/run_time.py --repeat 2           # twice, to see the spread
    python benchmarks/run_time.py --keep /tmp/report   # and keep the report to look at
    python benchmarks/run_time.py -- --measurements m.jsonl --max-workers 32   # other options

Runs ``ddltune run`` exactly as a user would (a fresh process, the console
script's code path, into a temporary folder), reads the phase timings the run
records in ``recommendation.json`` (``timings``: collect or read, calibrate,
recommend, report, total, measured inside the process with a monotonic
clock), adds the process's own wall time (which includes Python and jax start-up
and the import of ddltune), prints a table and writes every run's figures to
``benchmarks/results/run_time.json``.

Target (issue 6): the whole run under 5 minutes on the 2-core machine. A loaded
machine inflates every phase; the table states the load average seen at the
start and the end of each run so that figures can be compared. The CLI keeps
compiled programs in a persistent cache; the benchmark gives its runs a cache
of their own, so run 1 is a first run (cold) and later runs are warm.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results" / "run_time.json"
PHASES = ("collect", "read", "calibrate", "recommend", "report", "total")


def one_run(extra: list[str], keep: Path | None = None, cache: Path | None = None) -> dict:
    with tempfile.TemporaryDirectory(prefix="ddltune-run-time-") as tmp:
        out = keep if keep is not None else Path(tmp) / "report"
        cmd = [sys.executable, "-m", "tuner.cli", "run", "-o", str(out), "--no-progress", *extra]
        load0 = os.getloadavg()[0]
        t0 = time.perf_counter()
        env = dict(os.environ)
        if cache is not None:  # this benchmark's own compilation cache: run 1 cold, later warm
            env["JAX_COMPILATION_CACHE_DIR"] = str(cache)
            env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0.1"
        res = subprocess.run(cmd, capture_output=True, text=True, env=env)
        wall = time.perf_counter() - t0
        load1 = os.getloadavg()[0]
        if res.returncode != 0:
            raise SystemExit(f"ddltune run failed ({res.returncode}):\n{res.stderr[-3000:]}")
        doc = json.loads((out / "recommendation.json").read_text())
        files = sorted(p.name for p in out.iterdir())
    return {
        "command": " ".join(cmd[2:]),
        "process_wall_s": wall,
        "timings_s": doc["timings"],
        "load_average_start": load0,
        "load_average_end": load1,
        "recommendation": doc["label"] + f", {doc['workers']} workers, "
        f"{doc['bucket_bytes']} B buckets",
        "reliable": doc["reliable"],
        "files": files,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Wall time of ddltune run and its phases.")
    ap.add_argument("--repeat", type=int, default=1, help="runs to make (default 1)")
    ap.add_argument("--keep", metavar="DIR", help="write the (last) report to DIR and keep it")
    ap.add_argument("extra", nargs="*", help="options passed to ddltune run (after --)")
    args = ap.parse_args(argv)
    keep = Path(args.keep) if args.keep else None
    if keep is not None and keep.exists():
        raise SystemExit(f"--keep {keep}: exists; give a new folder")
    runs = []
    with tempfile.TemporaryDirectory(prefix="ddltune-run-time-cache-") as cache:
        for i in range(max(1, args.repeat)):
            last = i == max(1, args.repeat) - 1
            runs.append(one_run(args.extra, keep if last else None, Path(cache)))
            runs[-1]["compilation_cache"] = "cold" if i == 0 else "warm"
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "machine": {
                    "cpus": os.cpu_count(),
                    "platform": platform.platform(),
                    "python": platform.python_version(),
                },
                "runs": runs,
            },
            indent=2,
        )
        + "\n"
    )
    phases = [p for p in PHASES if any(p in r["timings_s"] for r in runs)]
    head = ["run", *phases, "process", "cache", "load avg"]
    print("  ".join(f"{h:>12}" for h in head))
    for i, r in enumerate(runs, 1):
        cells = [str(i)] + [
            f"{r['timings_s'][p]:.1f} s" if p in r["timings_s"] else "—" for p in phases
        ]
        cells += [
            f"{r['process_wall_s']:.1f} s",
            r["compilation_cache"],
            f"{r['load_average_start']:.1f}→{r['load_average_end']:.1f}",
        ]
        print("  ".join(f"{c:>12}" for c in cells))
    print(f"\nrecommendation: {runs[-1]['recommendation']} (reliable: {runs[-1]['reliable']})")
    print(f"full results: {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
