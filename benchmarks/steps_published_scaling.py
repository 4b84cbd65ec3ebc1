"""Fit the step terms on a table's small GPU counts, predict its large ones (issue 23, item 5).

For every published scaling table in ``../shared/data/scaling`` (tf_cnn_benchmarks,
2017) and every series in it (data, batch per GPU, model): the rows with the
smallest GPU counts — those up to a third of the series' largest count, at
least two — are the training runs :func:`calibration.fit_steps` fits (compute
throughput, per-step overhead, backward slowdown under overlap, communication
in a step over its microbenchmark), on top of datasheet presets for the system
(the same architecture and presets as ``accuracy_published_scaling.py``, whose
``system_for`` this reuses: nothing in them is fitted to the tables). The
model then predicts every other row. Beside it, two baselines from the same
fitted rows:

* ``linear``: the smallest count's throughput × n / n_min;
* ``constant efficiency``: the largest fitted count's throughput × n / n_fit
  (its scaling efficiency held), strong on tables of this kind.

Prints every predicted row (published, model with its 90% interval, both
baselines, errors), and per table the median absolute error of each, the
model's interval coverage and median relative width; writes everything to
``benchmarks/results/steps_published_scaling.json``. Targets (issue 23): median
≤ 5%, better than both baselines on every table, coverage ≥ 80%.

    python benchmarks/steps_published_scaling.py
    python benchmarks/steps_published_scaling.py --data tests/data/scaling --json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from accuracy_published_scaling import DATA, FALLBACK_DATA, MODELS, load_table, system_for  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "steps_published_scaling.json"


def _base_profile(params, reason: str):
    """A preset profile of these parameters: their prior as the only uncertainty."""
    from calibration import Profile

    prof = Profile.from_preset("ethernet-10g", "v100")  # the layout and prior widths
    return Profile(
        params=params,
        covariance=prof.covariance,
        leaf_names=prof.leaf_names,
        prior={
            "preset": reason,
            "reason": "datasheet presets of the system",
            "sd": prof.prior["sd"],
        },
        provenance=prof.provenance,
    )


def _runs(rows, system, batch):
    out = []
    for r in rows:
        n = int(r["gpus"])
        arch, _params, k, _reason = system["choose"](r)
        out.append(
            {
                "workers": n,
                "ranks_per_node": min(n, system["gpus_per_node"]),
                "batch_size": batch,
                "architecture": arch,
                "servers": k,
                "colocated": False,
                "bucket_bytes": 0.0,  # TensorFlow 2017: every variable on its own
                "step_time_s": n * batch / r["images_per_sec"],
                "file": r["_file"],
                "line": r["_row"],
            }
        )
    return out


def series_results(path: Path) -> list[dict]:
    """Every predicted row of one table (see the module docstring)."""
    from calibration import fit_steps, step_time
    from costmodel import get_workload

    system = system_for(path)
    rows = [r for r in load_table(path) if r["images_per_sec"] is not None]
    for r in rows:
        r["_file"] = str(path)
    series: dict = {}
    for r in rows:
        series.setdefault((r["data"], r["batch_size_per_gpu"], r["model"]), []).append(r)
    out = []
    for (data, batch, model), members in sorted(series.items()):
        members.sort(key=lambda r: int(r["gpus"]))
        counts = sorted({int(r["gpus"]) for r in members})
        if len(counts) < 3:
            continue  # nothing left to predict after two fitted counts
        cut = max(c for c in counts if c <= counts[-1] / 3) if counts[0] <= counts[-1] / 3 else 0
        fit_counts = [c for c in counts if c <= cut]
        if len(fit_counts) < 2:
            fit_counts = counts[:2]
        fit_rows = [r for r in members if int(r["gpus"]) in fit_counts]
        test_rows = [r for r in members if int(r["gpus"]) not in fit_counts]
        b = int(batch)
        arch, params, _k, reason = system["choose"](fit_rows[0])
        w = get_workload(MODELS[model], b)
        prof = fit_steps(_runs(fit_rows, system, b), w, _base_profile(params, reason))
        test = _runs(test_rows, system, b)
        t = step_time(prof.params.to_numpy(), w, test)
        lo, hi = prof.interval(lambda p, test=test, w=w: step_time(p, w, test), batched=True)
        n_min, n_fit = fit_counts[0], fit_counts[-1]
        ips_min = np.mean([r["images_per_sec"] for r in fit_rows if int(r["gpus"]) == n_min])
        ips_fit = np.mean([r["images_per_sec"] for r in fit_rows if int(r["gpus"]) == n_fit])
        terms = prof.fit["steps"]["terms"]
        for i, r in enumerate(test_rows):
            n, y = int(r["gpus"]), r["images_per_sec"]
            pred = n * b / float(t[i])
            out.append(
                {
                    "table": system["name"],
                    "data": data,
                    "batch_size": b,
                    "model": model,
                    "architecture": arch,
                    "fitted_gpus": fit_counts,
                    "gpus": n,
                    "published": y,
                    "predicted": pred,
                    "low": n * b / float(hi[i]),
                    "high": n * b / float(lo[i]),
                    "linear": ips_min * n / n_min,
                    "constant_efficiency": ips_fit * n / n_fit,
                    "error": pred / y - 1,
                    "linear_error": ips_min * n / n_min / y - 1,
                    "constant_efficiency_error": ips_fit * n / n_fit / y - 1,
                    "terms": {k: v["value"] for k, v in terms.items()},
                    "identified": [k for k, v in terms.items() if v["identified"]],
                }
            )
    return out


def summarise(rows: list[dict]) -> dict:
    def med(key):
        return float(np.median([abs(r[key]) for r in rows]))

    inside = [r["low"] <= r["published"] <= r["high"] for r in rows]
    width = [(r["high"] - r["low"]) / r["predicted"] for r in rows]
    return {
        "rows": len(rows),
        "model_median": med("error"),
        "linear_median": med("linear_error"),
        "constant_efficiency_median": med("constant_efficiency_error"),
        "coverage": float(np.mean(inside)),
        "median_width": float(np.median(width)),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA if DATA.is_dir() else FALLBACK_DATA)
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    args = ap.parse_args(argv)
    import jax

    jax.config.update("jax_enable_x64", True)  # a benchmark is an entry point
    t0 = time.perf_counter()
    files = sorted(args.data.glob("*.csv"))
    if not files:
        print(f"no scaling tables (*.csv) in {args.data}", file=sys.stderr)
        return 2
    doc = {"tables": {}, "rows": []}
    for f in files:
        rows = series_results(f)
        doc["rows"] += rows
        if rows:
            doc["tables"][rows[0]["table"]] = summarise(rows)
    doc["seconds"] = time.perf_counter() - t0
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(doc, indent=1) + "\n")
    if args.json:
        print(json.dumps(doc, indent=1))
        return 0
    head = f"{'table':<24}{'model':<12}{'batch':>6}{'fit on':>12}{'GPUs':>6}{'published':>11}"
    head += f"{'model':>10}{'90% interval':>18}{'err':>8}{'linear':>8}{'const eff':>10}"
    print(head)
    for r in doc["rows"]:
        fit = ",".join(str(c) for c in r["fitted_gpus"])
        print(
            f"{r['table']:<24}{r['model']:<12}{r['batch_size']:>6}{fit:>12}{r['gpus']:>6}"
            f"{r['published']:>11.1f}{r['predicted']:>10.1f}"
            f"{r['low']:>9.0f}–{r['high']:<8.0f}{100 * r['error']:>+7.1f}%"
            f"{100 * r['linear_error']:>+7.1f}%{100 * r['constant_efficiency_error']:>+9.1f}%"
        )
    print("\n(images/s; errors = prediction / published − 1)")
    print(
        f"\n{'table':<24}{'rows':>5}{'model':>9}{'linear':>9}{'const eff':>11}{'in 90%':>8}{'width':>8}"
    )
    ok = True
    for name, s in doc["tables"].items():
        best = s["model_median"] < min(s["linear_median"], s["constant_efficiency_median"])
        ok &= best and s["model_median"] <= 0.05 and s["coverage"] >= 0.8
        print(
            f"{name:<24}{s['rows']:>5}{100 * s['model_median']:>8.1f}%{100 * s['linear_median']:>8.1f}%"
            f"{100 * s['constant_efficiency_median']:>10.1f}%{100 * s['coverage']:>7.0f}%"
            f"{100 * s['median_width']:>7.0f}%"
        )
    print(
        f"\ntargets (median ≤ 5%, better than both baselines, coverage ≥ 80%): "
        f"{'met' if ok else 'NOT met'}; {doc['seconds']:.1f} s; full results: {RESULTS}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
