"""How fast is the tuner's exhaustive search, and what would Bayesian optimisation give up?

Times :func:`tuner.recommend` on its full default search for ResNet-50 (batch
64 per worker) with up to 1024 workers on a preset profile (10 Gb/s Ethernet,
V100): every architecture variant × 1 … 1024 workers × server counts × bucket
caps, exact model, continuous bucket refinement, the profile's intervals and
p_best. Compile time (first call minus the warm median) is reported apart
from the warm wall time. Then a Bayesian-optimisation baseline (optuna's TPE
sampler) searches the same space with budgets of 20 and 100 model evaluations,
and its regret is reported: the time per sample of its best configuration over
the exhaustive optimum's, minus one (0 = found the optimum).

Run:
    python benchmarks/tuner_speed.py            # float32, as the CLI runs
    python benchmarks/tuner_speed.py --float64  # as the tests run (about 2x slower)
    python benchmarks/tuner_speed.py --seeds 10 --max-workers 256

Full results are written to benchmarks/results/tuner_speed.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import time
from pathlib import Path


def parse_args(argv=None) -> argparse.Namespace:
    """The command line: model, search size, profile, repetitions, precision, output."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--max-workers", type=int, default=1024)
    ap.add_argument("--preset", default="ethernet-10g")
    ap.add_argument("--device", default="v100")
    ap.add_argument("--repeats", type=int, default=3, help="warm repetitions")
    ap.add_argument("--seeds", type=int, default=5, help="BO runs per budget")
    ap.add_argument("--float64", action="store_true", help="enable jax_enable_x64")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "tuner_speed.json"))
    return ap.parse_args(argv)


def import_optuna():
    """optuna, or exit naming the extra that provides it."""
    try:
        import optuna
    except ImportError:
        raise SystemExit(
            "tuner_speed.py needs the 'bench' extra (optuna): pip install -e '.[bench]'"
        ) from None
    return optuna


def timed(fn):
    """(wall s, CPU s of this process, result) of one call of ``fn``."""
    # CPU time is what load from others does not inflate (it sums the threads, so it
    # bounds the unloaded wall time from above on one core).
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - w0, time.process_time() - c0, out


def time_exhaustive(tuner, profile, workload, args) -> dict:
    """Time the exhaustive search: the first (compiling) call, then warm full and grid-only."""

    def full():
        return tuner.recommend(profile, workload, max_workers=args.max_workers)

    def grid_only():
        return tuner.recommend(profile.params, workload, max_workers=args.max_workers, refine=False)

    first, first_cpu, rec = timed(full)
    warm = [timed(full) for _ in range(args.repeats)]
    rec = warm[-1][2]
    grid_only()
    grid = [timed(grid_only) for _ in range(args.repeats)]
    return {
        "first": first,
        "first_cpu": first_cpu,
        "rec": rec,
        "warm": warm,
        "warm_s": statistics.median(w for w, _, _ in warm),
        "warm_cpu": statistics.median(c for _, c, _ in warm),
        "grid": grid,
        "grid_s": statistics.median(w for w, _, _ in grid),
        "grid_cpu": statistics.median(c for _, c, _ in grid),
    }


def make_objective(evaluate, profile, workload, rec, max_workers):
    """The BO objective over the exhaustive search's space, plus its variants and caps."""
    import numpy as np

    from costmodel import memory_per_rank

    sweeps = rec.sweeps
    labels = list(sweeps)
    variants = {label: sw.variant for label, sw in sweeps.items()}
    caps = sorted({int(c) for sw in sweeps.values() for c in np.unique(sw.bucket_bytes)})
    max_exp = int(math.floor(math.log2(max_workers)))
    memory = float(np.asarray(profile.params.memory_bytes))

    def objective(trial):
        label = trial.suggest_categorical("architecture", labels)
        n = trial.suggest_int("workers", 1, max_workers, log=True)
        v = variants[label]
        k = 0
        if v.uses_servers:
            e = trial.suggest_int("servers_log2", 0, max_exp)
            k = min(2**e, n)
        b = trial.suggest_categorical("bucket_bytes", caps)
        out = evaluate(profile.params, workload, v, [n], [k], [b])
        m = memory_per_rank(workload, v.arch, n, servers=max(k, 1), optimizer=1.0, bucket_bytes=b)
        if float(m.total_bytes) > memory or float(m.server_bytes) > memory:
            return 0.0
        return float(np.asarray(out.throughput_samples_per_s)[0])

    return objective, variants, caps


def run_bo(optuna, objective, seeds: int, best_time_per_sample: float) -> dict:
    """TPE with budgets of 20 and 100 evaluations, ``seeds`` runs each: time and regret."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    bo = {}
    for budget in (20, 100):
        runs = []
        for seed in range(seeds):
            study = optuna.create_study(
                direction="maximize", sampler=optuna.samplers.TPESampler(seed=seed)
            )
            t0, c0 = time.perf_counter(), time.process_time()
            study.optimize(objective, n_trials=budget)
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            best = study.best_value
            regret = (1.0 / best) / best_time_per_sample - 1.0 if best > 0 else math.inf
            runs.append(
                {
                    "cpu_s": cpu,
                    "seed": seed,
                    "wall_s": wall,
                    "best_throughput": best,
                    "regret": regret,
                    "best_params": study.best_params,
                }
            )
        bo[budget] = {
            "runs": runs,
            "median_wall_s": statistics.median(r["wall_s"] for r in runs),
            "median_cpu_s": statistics.median(r["cpu_s"] for r in runs),
            "median_regret": statistics.median(r["regret"] for r in runs),
            "worst_regret": max(r["regret"] for r in runs),
            "found_optimum": sum(r["regret"] <= 1e-9 for r in runs),
        }
    return bo


def build_result(args, ex: dict, bo: dict, jax, optuna) -> dict:
    """The full results (JSON-ready): the search, its timings, BO and the machine."""
    rec = ex["rec"]
    return {
        "model": args.model,
        "max_workers": args.max_workers,
        "profile": f"{args.preset}:{args.device} (preset profile, prior covariance)",
        "float64": args.float64,
        "configurations": int(rec.excluded["total"]),
        "recommendation": rec.config.describe(),
        "throughput_samples_per_s": rec.throughput_samples_per_s,
        "first_call_s": ex["first"],
        "first_call_cpu_s": ex["first_cpu"],
        "warm_s": [w for w, _, _ in ex["warm"]],
        "warm_cpu_s": [c for _, c, _ in ex["warm"]],
        "warm_median_s": ex["warm_s"],
        "compile_s": ex["first"] - ex["warm_s"],
        "compile_cpu_s": ex["first_cpu"] - ex["warm_cpu"],
        "grid_only_warm_s": [w for w, _, _ in ex["grid"]],
        "grid_only_warm_cpu_s": [c for _, c, _ in ex["grid"]],
        "bayesian_optimisation": bo,
        "machine": {
            "cpus": os.cpu_count(),
            "load_avg": os.getloadavg(),
            "python": platform.python_version(),
            "jax": jax.__version__,
            "optuna": optuna.__version__,
        },
    }


def write_result(result: dict, path: str) -> Path:
    """Write the full results as JSON; return where."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, default=str) + "\n")
    return out


def print_table(args, ex: dict, bo: dict, out: Path) -> None:
    """The printed summary: the recommendation, then wall/CPU/regret per search."""
    rec = ex["rec"]
    first, first_cpu = ex["first"], ex["first_cpu"]
    warm_s, warm_cpu, grid_s, grid_cpu = ex["warm_s"], ex["warm_cpu"], ex["grid_s"], ex["grid_cpu"]
    print(
        f"{args.model}, up to {args.max_workers} workers, {int(rec.excluded['total']):,} "
        f"configurations, {'float64' if args.float64 else 'float32'}; load average "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    print(f"recommended: {rec.config.describe()} ({rec.throughput_samples_per_s:,.0f} samples/s)")
    print()
    print(f"{'search':<40}{'wall s':>9}{'CPU s':>9}{'regret':>10}")
    print(
        f"{'exhaustive, compile (first − warm)':<40}{first - warm_s:>9.2f}"
        f"{first_cpu - warm_cpu:>9.2f}{'':>10}"
    )
    print(f"{'exhaustive, warm (full recommend)':<40}{warm_s:>9.2f}{warm_cpu:>9.2f}{0.0:>10.2%}")
    print(f"{'exhaustive, warm (grid only)':<40}{grid_s:>9.2f}{grid_cpu:>9.2f}{0.0:>10.2%}")
    for budget, r in bo.items():
        print(
            f"{f'TPE, {budget} evaluations (median of {args.seeds})':<40}"
            f"{r['median_wall_s']:>9.2f}{r['median_cpu_s']:>9.2f}{r['median_regret']:>10.2%}"
        )
    print(f"\nfull results: {out}")


def main() -> int:
    """Time the exhaustive search, run the BO baseline, write and print the results."""
    args = parse_args()

    import jax

    if args.float64:
        jax.config.update("jax_enable_x64", True)

    optuna = import_optuna()

    import tuner
    from calibration import Profile
    from costmodel import get_workload
    from tuner import evaluate  # the tuner's own stable-shape evaluator

    profile = Profile.from_preset(args.preset, args.device)
    workload = get_workload(args.model, 64)

    ex = time_exhaustive(tuner, profile, workload, args)
    rec = ex["rec"]
    objective, variants, caps = make_objective(evaluate, profile, workload, rec, args.max_workers)
    # compile the evaluator for every variant first (the exhaustive timing excludes compile too)
    for v in variants.values():
        evaluate(profile.params, workload, v, [2], [1], [caps[-1]])
    bo = run_bo(optuna, objective, args.seeds, 1.0 / rec.throughput_samples_per_s)

    out = write_result(build_result(args, ex, bo, jax, optuna), args.out)
    print_table(args, ex, bo, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
