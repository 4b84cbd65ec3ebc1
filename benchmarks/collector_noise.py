"""Run-to-run noise of ``ddltune collect``: the same small sweep, measured twice.

For every point (collective and size; compute op and shape) it prints the ratio
run 2 / run 1 of the statistic calibration fits — p10 on CPU (noisy, bimodal
at small sizes), median on GPU (DESIGN.md, "Calibration") — then the spread of
those ratios (median and p90 of |ratio − 1|), the compile time, and the total
collection time of each run. A ratio far from 1 means one collection is not
enough to calibrate on: raise ``--budget-s`` or ``--iters``.

Full results (both runs' statistics, sample counts and ratios per point) go to
``benchmarks/results/collector_noise.json``.

Usage (from the repository root; takes about 2 × the collection time):

    python benchmarks/collector_noise.py                          # 2 workers, 1K…1M, collectives
    python benchmarks/collector_noise.py --workers 4 --max-bytes 16M --suite collectives,compute

Run it on a quiet machine: other load shows up as noise, which is the point
only if that load is what production sees.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

from calibration import collect, read_records
from costmodel import format_bytes, parse_bytes

RESULTS = Path(__file__).resolve().parent / "results" / "collector_noise.json"


def _key(r: dict) -> tuple:
    if r["kind"] == "collective":
        return ("collective", r["collective"], r["message_bytes"], r["num_ranks"])
    return ("compute", r["op"], json.dumps(r.get("shape"), sort_keys=True), r["num_ranks"])


def _label(key: tuple) -> str:
    if key[0] == "collective":
        return f"{key[1]:>14} {format_bytes(key[2]):>9}  n={key[3]}"
    shape = json.loads(key[2])
    what = (
        "x".join(str(shape[k]) for k in ("m", "n", "k"))
        if "m" in shape
        else (f"{shape.get('model')}[{shape.get('layer')}]")
    )
    return f"{key[1]:>14} {what:>9}  n={key[3]}"


def _quantile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    if not xs:
        return math.nan
    pos = q * (len(xs) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line: the sweep to collect (workers, sizes, suite, budget) and the output."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    p.add_argument("--min-bytes", default="1K", help="smallest message (default 1K)")
    p.add_argument("--max-bytes", default="1M", help="largest message (default 1M)")
    p.add_argument("--step-factor", type=int, default=4, help="size step (default 4)")
    p.add_argument(
        "--suite", default="collectives", help="collectives,compute (default collectives)"
    )
    p.add_argument("--collectives", default=None, help="comma list (default all)")
    p.add_argument("--budget-s", type=float, default=0.5, help="seconds per point (default 0.5)")
    p.add_argument("--iters", type=int, default=5, help="minimum repetitions (default 5)")
    p.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="interleaved timing passes per collection, as ddltune collect --rounds (default 3)",
    )
    p.add_argument("--dtype", default="float32")
    p.add_argument("--out", type=Path, default=RESULTS, help=f"results file (default {RESULTS})")
    return p.parse_args(argv)


def collect_once(args: argparse.Namespace, path: Path) -> dict:
    """One collection of the sweep into ``path``: its wall, launch and compile time and records."""
    t0 = time.perf_counter()
    res = collect(
        path,
        workers=[args.workers],
        collectives=args.collectives,
        min_bytes=parse_bytes(args.min_bytes),
        max_bytes=parse_bytes(args.max_bytes),
        step_factor=args.step_factor,
        suite=args.suite,
        budget_s=args.budget_s,
        rounds=args.rounds,
        iters=args.iters,
        dtype=args.dtype,
        launcher="local",
        progress=sys.stderr.isatty(),
    )
    wall = time.perf_counter() - t0
    recs = read_records(path)
    return {
        "wall_s": wall,
        "launch_s": sum(x.get("elapsed_s", 0.0) for x in res.launches),
        "compile_s": sum(r.get("compile_s", 0.0) for r in recs),
        "wrong": res.wrong,
        "records": {_key(r): r for r in recs},
    }


def compare_runs(runs: list[dict], stat: str) -> list[dict]:
    """Per point present in both runs: the two values of ``stat``, their ratio and counts."""
    points = []
    for key, r1 in runs[0]["records"].items():
        r2 = runs[1]["records"].get(key)
        if r2 is None:
            continue
        t1, t2 = r1["time_s"][stat], r2["time_s"][stat]
        points.append(
            {
                "key": list(key),
                "label": _label(key),
                "statistic": stat,
                "run1_s": t1,
                "run2_s": t2,
                "ratio": t2 / t1,
                "run1_count": r1["time_s"]["count"],
                "run2_count": r2["time_s"]["count"],
                "run1_iqr_s": r1["time_s"].get("iqr"),
                "run2_iqr_s": r2["time_s"].get("iqr"),
            }
        )
    return points


def summarise(runs: list[dict], points: list[dict], stat: str) -> dict:
    """The spread of |ratio − 1| over the points, and each run's collection and compile time."""
    dev = [abs(pt["ratio"] - 1.0) for pt in points]
    return {
        "statistic": stat,
        "points": len(points),
        "median_abs_ratio_minus_1": statistics.median(dev) if dev else math.nan,
        "p90_abs_ratio_minus_1": _quantile(dev, 0.9),
        "max_abs_ratio_minus_1": max(dev) if dev else math.nan,
        "collection_wall_s": [r["wall_s"] for r in runs],
        "compile_s": [r["compile_s"] for r in runs],
        "wrong": [r["wrong"] for r in runs],
    }


def write_results(args, first: dict, summary: dict, points: list[dict]) -> None:
    """Write the settings, machine, summary and points to ``args.out`` as JSON."""
    doc = {
        "benchmark": "collector_noise",
        "settings": vars(args) | {"out": str(args.out)},
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "backend": first.get("backend"),
            "device_kind": first.get("device_kind"),
            "versions": first.get("versions"),
        },
        "summary": summary,
        "points": points,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1, allow_nan=False, default=str) + "\n")


def print_table(args, runs: list[dict], points: list[dict], summary: dict) -> None:
    """The per-point ratio table, the spread of the ratios and each run's collection time."""
    print(
        f"# run-to-run ratio of the {summary['statistic']} (run 2 / run 1), {args.workers} "
        f"workers, {args.rounds} interleaved rounds"
    )
    print(f"# {'point':>34} {'run1(us)':>10} {'run2(us)':>10} {'ratio':>7}")
    for pt in points:
        print(
            f"  {pt['label']:>34} {pt['run1_s'] * 1e6:>10.1f} {pt['run2_s'] * 1e6:>10.1f} "
            f"{pt['ratio']:>7.3f}"
        )
    print(
        f"# |ratio-1|: median {summary['median_abs_ratio_minus_1']:.3f}, "
        f"p90 {summary['p90_abs_ratio_minus_1']:.3f}, max {summary['max_abs_ratio_minus_1']:.3f} "
        f"over {len(points)} points"
    )
    print(
        "# collection time: "
        + ", ".join(
            f"run {i + 1} {r['wall_s']:.1f} s (compile {r['compile_s']:.1f} s)"
            for i, r in enumerate(runs)
        )
    )
    print(f"# full results: {args.out}")


def main(argv: list[str] | None = None) -> int:
    """Collect the sweep twice, compare the runs point by point, write and print the results."""
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ddltune-noise-") as tmp:
        runs = [collect_once(args, Path(tmp) / f"run{i}.jsonl") for i in (1, 2)]
    first = next(iter(runs[0]["records"].values()))
    stat = "p10" if first.get("backend") == "cpu" else "median"
    points = compare_runs(runs, stat)
    summary = summarise(runs, points, stat)
    write_results(args, first, summary, points)
    print_table(args, runs, points, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
