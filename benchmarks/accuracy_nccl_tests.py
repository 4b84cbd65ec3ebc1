"""Accuracy of calibration on public nccl-tests tables: fit the even sizes, predict the odd.

For every nccl-tests output in ``../shared/data/nccl-tests`` (each names its
source): import it with :func:`calibration.import_nccl_tests` (passing the
flags a file cannot tell itself), take the lower of the out-of-place and
in-place time per size (what :func:`calibration.calibrate` fits by default),
calibrate on the even-indexed sizes only (``holdout=0``: the regime count is
still chosen on inner folds of those points), and predict the odd-indexed
sizes. Beside it, two references fitted on the same points by least squares on
log time:

* ``line``: one α-β line t = α + β·S (the baseline of issue 4);
* ``env2``: the hard lower envelope of two α-β lines, min(α₁ + β₁S, α₂ + β₂S)
  (the "2–3-regime envelope" of DESIGN.md, best of many starts).

Per file it prints the median and p90 absolute percentage error on the odd
sizes, the regime count chosen, and the share of odd sizes inside the
profile's 90% prediction interval. Targets (issue 4): median over files of
the per-file median ≤ 3% and of the per-file p90 ≤ 8%, and on no file a
median worse than the baseline's by more than 0.5 points.

Run:  python benchmarks/accuracy_nccl_tests.py [--data DIR] [--out FILE]
Full results (every point) go to benchmarks/results/accuracy_nccl_tests.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "nccl-tests"

# What each public file cannot tell (the importer's error names the flag):
# the superbench and sheffield logs never echo the binary, and the two
# 2-node runs print no device lines (8 GPUs per node, per their sources).
FLAGS = {
    "nccl_all_gather_a100-sxm4-superbench_8gpus_1.txt": {"collective": "all_gather"},
    "nccl_all_gather_h100-gke-a3mega-tcpxo_16gpus_1.txt": {
        "collective": "all_gather",
        "ranks_per_node": 8,
    },
    "nccl_all_reduce_a100-sxm4-superbench_8gpus_1.txt": {"collective": "all_reduce"},
    "nccl_all_reduce_h100-nebius-ib_16gpus_1.txt": {"ranks_per_node": 8},
    "nccl_all_reduce_v100-pcie-nonvlink_4gpus_1.txt": {"collective": "all_reduce"},
    "nccl_reduce_scatter_a100-sxm4-superbench_8gpus_1.txt": {"collective": "reduce_scatter"},
}


def ape_stats(pred, meas) -> tuple[float, float]:
    e = 100.0 * np.abs(np.asarray(pred) / np.asarray(meas) - 1.0)
    return float(np.median(e)), float(np.quantile(e, 0.9))


def fit_line(S, T):
    """One α-β line, least squares on log time."""
    p0 = [np.log(T.min()), np.log(T.max() / S.max())]
    p = least_squares(lambda q: np.log((np.exp(q[0]) + S * np.exp(q[1])) / T), p0).x
    return lambda s: np.exp(p[0]) + s * np.exp(p[1])


def fit_envelope2(S, T, starts: int = 40, seed: int = 0):
    """Hard lower envelope of two α-β lines, least squares on log time, best of many starts."""
    rng = np.random.default_rng(seed)

    def model(q, s):
        a = np.exp(q[:2])[None, :] + s[:, None] * np.exp(q[2:])[None, :]
        return a.min(axis=1)

    best = None
    for _ in range(starts):
        a = np.exp(rng.uniform(np.log(T.min() * 0.1), np.log(T.min() * 3), 2))
        b = np.exp(rng.uniform(np.log(T.max() / S.max() * 0.5), np.log(T.max() / S.max() * 50), 2))
        q0 = np.log(np.concatenate([np.sort(a), np.sort(b)[::-1]]))
        r = least_squares(lambda q: np.log(model(q, S) / T), q0)
        if best is None or r.cost < best.cost:
            best = r
    return lambda s: model(best.x, np.asarray(s, dtype=float))


def parse_args(argv=None) -> argparse.Namespace:
    """The command line: data folder, output file, regime count."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="folder of nccl-tests outputs")
    ap.add_argument(
        "--out",
        type=Path,
        default=ROOT / "benchmarks" / "results" / "accuracy_nccl_tests.json",
        help="where to write the full results (JSON)",
    )
    ap.add_argument(
        "--regimes", default="auto", help="n_regimes passed to calibrate (default auto)"
    )
    return ap.parse_args(argv)


def split_even_odd(recs: list[dict]) -> tuple[list[dict], list[dict]]:
    """Lower of out-of-place / in-place per size, then the even-indexed sizes and the odd."""
    best: dict[int, dict] = {}
    for r in recs:
        s = r["message_bytes"]
        if s not in best or r["time_s"]["mean"] < best[s]["time_s"]["mean"]:
            best[s] = r
    sizes = sorted(best)
    train = [best[s] for i, s in enumerate(sizes) if i % 2 == 0]
    test = [best[s] for i, s in enumerate(sizes) if i % 2 == 1]
    return train, test


def evaluate_file(path: Path, recs: list[dict], n_regimes) -> tuple[dict, dict]:
    """Calibrate on one file's even sizes, predict its odd: (table row, full record)."""
    from calibration import Profile, calibrate
    from costmodel import collective_time

    train, test = split_even_odd(recs)
    c, n, g = train[0]["collective"], train[0]["num_ranks"], train[0]["ranks_per_node"]
    S_tr = np.asarray([r["message_bytes"] for r in train], dtype=float)
    T_tr = np.asarray([r["time_s"]["mean"] for r in train])
    S_te = np.asarray([r["message_bytes"] for r in test], dtype=float)
    T_te = np.asarray([r["time_s"]["mean"] for r in test])

    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prof: Profile = calibrate(train, holdout=0.0, n_regimes=n_regimes)
    fit_s = time.perf_counter() - t0
    pred = np.asarray(collective_time(prof.params, c, S_te, n, g), dtype=float)
    lo, hi = prof.interval(
        lambda p, c=c, s=S_te, n=n, g=g: collective_time(p, c, s, n, g), of="microbenchmarks"
    )
    inside = float(np.mean((T_te >= np.asarray(lo)) & (T_te <= np.asarray(hi))))
    line = fit_line(S_tr, T_tr)(S_te)
    env2 = fit_envelope2(S_tr, T_tr)(S_te)
    m, p90 = ape_stats(pred, T_te)
    lm, lp90 = ape_stats(line, T_te)
    em, ep90 = ape_stats(env2, T_te)
    row = {
        "file": path.name,
        "collective": c,
        "num_ranks": n,
        "ranks_per_node": g,
        "train_points": len(train),
        "test_points": len(test),
        "n_regimes": prof.params.n_regimes,
        "median": m,
        "p90": p90,
        "line_median": lm,
        "line_p90": lp90,
        "env2_median": em,
        "env2_p90": ep90,
        "coverage90": inside,
        "fit_s": fit_s,
    }
    columns = (S_te, T_te, pred, np.asarray(lo), np.asarray(hi), line, env2)
    points = [
        {
            "message_bytes": int(s),
            "measured_s": float(t),
            "predicted_s": float(p),
            "low_s": float(a),
            "high_s": float(b),
            "line_s": float(q),
            "env2_s": float(e),
        }
        for s, t, p, a, b, q, e in zip(*columns, strict=True)
    ]
    return row, {**row, "flags": FLAGS.get(path.name, {}), "points": points, "fit": prof.fit}


def evaluate_files(files: list[Path], n_regimes) -> tuple[list[dict], list[dict]]:
    """Import and evaluate every file, logging each to stderr: (table rows, full records)."""
    from calibration import import_nccl_tests, read_records

    rows, full = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for k, path in enumerate(files):
            out = Path(tmp) / f"{k}.jsonl"
            import_nccl_tests(path, out, **FLAGS.get(path.name, {}))
            row, record = evaluate_file(path, read_records(out), n_regimes)
            rows.append(row)
            full.append(record)
            print(
                f"[{k + 1}/{len(files)}] {path.name}: {row['median']:.2f}% / {row['p90']:.2f}% "
                f"(line {row['line_median']:.2f}% / {row['line_p90']:.2f}%), "
                f"{row['fit_s']:.1f} s",
                file=sys.stderr,
            )
    return rows, full


def summarise(rows: list[dict], total: float) -> dict:
    """Medians over files for the fit and both references, coverage, and the targets."""
    import jax

    med = lambda key: float(np.median([r[key] for r in rows]))  # noqa: E731
    worst_gap = max(r["median"] - r["line_median"] for r in rows)
    return {
        "median_of_medians": med("median"),
        "median_of_p90": med("p90"),
        "line_median_of_medians": med("line_median"),
        "line_median_of_p90": med("line_p90"),
        "env2_median_of_medians": med("env2_median"),
        "env2_median_of_p90": med("env2_p90"),
        "worst_median_minus_line": worst_gap,
        "mean_coverage90": float(np.mean([r["coverage90"] for r in rows])),
        "targets_met": bool(med("median") <= 3.0 and med("p90") <= 8.0 and worst_gap <= 0.5),
        "total_s": total,
        "jax_x64": bool(jax.config.jax_enable_x64),
    }


def print_table(rows: list[dict], summary: dict, out: Path) -> None:
    """The per-file table, the median-over-files line and the targets verdict."""
    head = f"{'file':<55} {'R':>1} {'median':>7} {'p90':>7} {'line med':>8} {'line p90':>8} {'env2 med':>8} {'env2 p90':>8} {'in 90%':>6}"
    print(head)
    print("-" * len(head))
    for r in rows:
        print(
            f"{r['file']:<55} {r['n_regimes']:>1} {r['median']:>6.2f}% {r['p90']:>6.2f}% "
            f"{r['line_median']:>7.2f}% {r['line_p90']:>7.2f}% {r['env2_median']:>7.2f}% "
            f"{r['env2_p90']:>7.2f}% {100 * r['coverage90']:>5.0f}%"
        )
    print("-" * len(head))
    print(
        f"{'median over files':<55} {'':>1} {summary['median_of_medians']:>6.2f}% "
        f"{summary['median_of_p90']:>6.2f}% {summary['line_median_of_medians']:>7.2f}% "
        f"{summary['line_median_of_p90']:>7.2f}% {summary['env2_median_of_medians']:>7.2f}% "
        f"{summary['env2_median_of_p90']:>7.2f}% {100 * summary['mean_coverage90']:>5.0f}%"
    )
    print(
        f"targets (median ≤ 3%, p90 ≤ 8%, no file > line + 0.5 pt): "
        f"{'met' if summary['targets_met'] else 'NOT met'} "
        f"(worst median − line median: {summary['worst_median_minus_line']:+.2f} pt); "
        f"{summary['total_s']:.1f} s in all; full results: {out}"
    )


def main(argv=None) -> int:
    """Fit the even sizes and predict the odd on every file; write and print the results."""
    args = parse_args(argv)
    import calibration  # noqa: F401  (loaded before the clock starts, so total_s is the fits)
    import costmodel  # noqa: F401

    files = sorted(p for p in args.data.iterdir() if p.is_file())
    if not files:
        print(f"no files in {args.data}", file=sys.stderr)
        return 1
    n_regimes = args.regimes if args.regimes == "auto" else int(args.regimes)
    t_all = time.perf_counter()
    rows, full = evaluate_files(files, n_regimes)
    summary = summarise(rows, time.perf_counter() - t_all)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"summary": summary, "files": full}, indent=1) + "\n")
    print_table(rows, summary, args.out)
    return 0 if summary["targets_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
