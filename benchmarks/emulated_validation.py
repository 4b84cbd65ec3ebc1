"""The seed paper's experiment for real: training on an emulated cluster against the model.

    sudo python benchmarks/emulated_validation.py --quick            # 2-3 nodes at 200mbit
    sudo python benchmarks/emulated_validation.py                    # 2-4 nodes at 100 and 200mbit
    sudo python benchmarks/emulated_validation.py --rates 100mbit --nodes 2,3,4,5

Issue 12, item 3. For each rate R and the largest node count N:

1. build the emulated cluster ``(N+1)x1@R`` (launch.EmulatedCluster; N+1 nodes
   so that N workers plus one dedicated parameter server each get a node, one
   rank per node) and run its self-check (the goodput every figure is held
   against);
2. ``calibration.collect(..., emulate=cluster)`` on it at every process count
   the training needs (n workers and n+1 for the dedicated server, n in
   ``--nodes``), only the collectives the architectures use (all_reduce for
   ring; all_to_all and all_gather for P2P; ps_push and ps_pull for PS, and
   sendrecv for k ≥ 2 colocated servers, whose NICs send and receive at once), at
   sizes well above the token bucket (default 1 MiB – 8 MiB, factor 2: the bucket lets ~rate/HZ bytes through unshaped), plus
   the compute suite;
3. ``calibration.calibrate`` a profile on those records;
4. train the MLP (784-512×3-10, 3.7 MB of gradients) with 1PS dedicated, 1PS
   colocated, k-PS (k = 2, colocated), P2P and ring at 2-3 bucket caps on
   every node count (:func:`tuner.validation.measure_configurations` inside
   the emulated cluster, one rank per node: what ``validate(...,
   emulate=cluster)`` runs, with dedicated and colocated servers in one
   launch plan so that both share one single-worker baseline), and score the
   profile's predictions (:func:`tuner.validation.compare_steps`, what
   ``validate`` returns).

Printed: per rate, the link (set rate, self-check goodput, fitted 1/β_inter,
fitted slope of each collective between its two largest sizes), the
per-collective measured/predicted ratio at the largest size, every
configuration's measured and predicted step and its communication part
(step − single-worker step), MAPE, Kendall τ, regret, 90% interval coverage,
and T(N)/T(2) measured and predicted per architecture; then the same metrics
over every rate pooled. Issue 12's targets: fitted bandwidth within 5% of the
goodput and 10% of the set rate; MAPE ≤ 10%, τ ≥ 0.8, regret ≤ 5%, coverage ≥
80%; predicted T(N)/T(2) within 10% of measured.

Needs root (or CAP_NET_ADMIN + CAP_SYS_ADMIN) and iproute2. Full results
(records, profile, rows) go to ``benchmarks/results/emulated_validation*``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).parent / "results"
#: What each architecture of the harness costs in the model (costmodel.architectures).
COLLECTIVES = ("all_reduce", "all_to_all", "all_gather", "ps_push", "ps_pull", "sendrecv")
MB = 1e6 / 8  # bytes/s per Mbit/s
#: Bytes over the busiest NIC per byte of S, n ranks one per node (nccl-tests' S convention).
LINK_BYTES = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "ps_push": lambda n: n - 1.0,
    "ps_pull": lambda n: n - 1.0,
    "sendrecv": lambda n: 1.0,  # each rank sends S to the next and receives S
}


def _size(text: str) -> int:
    units = {"K": 2**10, "M": 2**20, "G": 2**30}
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    return int(float(t[:-1]) * units[t[-1]]) if t and t[-1] in units else int(t)


def _configs(buckets: list[int]):
    """Every configuration: 1PS dedicated/colocated, 2-PS colocated, P2P, ring per bucket cap.

    ``tuner.validation.seed_configurations`` (what ``ddltune run --emulate
    --validate`` trains); here one launch plan, the cluster having a node for
    the dedicated server at every worker count.
    """
    from tuner.validation import seed_configurations

    shared, dedicated = seed_configurations(buckets)
    return dedicated + shared


def _label(row) -> str:
    lab = row.label
    return f"{lab} {row.bucket_bytes // 1024}K" if row.architecture == "ring" else lab


def _link(prof, recs: list[dict], good: float) -> dict:
    """Fitted 1/β_inter and, per collective and rank count, the slope of records and of the profile."""
    from costmodel import collective_time

    beta = float(np.asarray(prof.params.beta_s_per_byte)[1])
    series: dict[tuple[str, int], dict[int, float]] = {}
    for r in recs:
        if r.get("kind") == "collective":
            key = (r["collective"], int(r["num_ranks"]))
            series.setdefault(key, {})[int(r["message_bytes"])] = float(r["time_s"]["p10"])
    rows = []
    for (name, n), ts in sorted(series.items()):
        sizes = sorted(ts)
        if len(sizes) < 2:
            continue
        s1, s2 = sizes[-2], sizes[-1]
        pred = {s: float(collective_time(prof.params, name, float(s), n, 1)) for s in sizes}
        dm, dp = ts[s2] - ts[s1], pred[s2] - pred[s1]
        link = LINK_BYTES[name](n) * (s2 - s1)
        rows.append(
            {
                "collective": name,
                "num_ranks": n,
                "largest_bytes": s2,
                "measured_s": ts[s2],
                "predicted_s": pred[s2],
                "ratio_pred_over_meas": pred[s2] / ts[s2],
                # time per byte at the largest sizes, measured / fitted: a ratio of bandwidths
                "slope_ratio_meas_over_fit": dm / dp if dp > 0 else float("nan"),
                # bandwidth of the busiest NIC between the two largest sizes (α cancels)
                "measured_bw_bytes_per_s": link / dm if dm > 0 else float("nan"),
                "fitted_bw_bytes_per_s": link / dp if dp > 0 else float("nan"),
                "measured_s_by_bytes": {str(s): ts[s] for s in sizes},
                "predicted_s_by_bytes": {str(s): pred[s] for s in sizes},
            }
        )
    errs = [
        abs(float(collective_time(prof.params, r["collective"], float(r["message_bytes"]),
                                  int(r["num_ranks"]), 1)) / float(r["time_s"]["p10"]) - 1)
        for r in recs
        if r.get("kind") == "collective" and r["message_bytes"] >= 64 * 1024
    ]  # fmt: skip
    held = [
        s["heldout"]["p90"]
        for s in prof.validation.get("series", [])
        if s.get("kind") == "collective" and s["heldout"]["points"]
    ]
    return {
        "collective_error_p90": float(np.quantile(errs, 0.9)) if errs else float("nan"),
        "collective_heldout_p90_worst_series": max(held, default=float("nan")),
        "fitted_inv_beta_inter_bytes_per_s": 1 / beta,
        "fitted_over_goodput": (1 / beta) / good if good else float("nan"),
        "series": rows,
    }


def _scaling(rows) -> dict[str, dict]:
    """T(N)/T(2) per configuration label, measured and predicted (N = every node count > 2)."""
    by: dict[str, dict[int, tuple[float, float]]] = {}
    for r in rows:
        by.setdefault(_label(r), {})[r.workers] = (r.measured_s, r.predicted_s)
    out = {}
    for lab, d in by.items():
        if 2 not in d:
            continue
        m2, p2 = d[2]
        out[lab] = {
            str(n): {"measured": m / m2, "predicted": p / p2, "error": (p / p2) / (m / m2) - 1}
            for n, (m, p) in sorted(d.items())
            if n != 2
        }
    return out


def _self_check(cluster, spec: str, out: dict) -> float:
    """Self-check the emulated links into ``out``, print the goodput and return it (bytes/s)."""
    t0 = time.monotonic()
    checks = cluster.self_check(1.0)
    out["self_check_s"] = time.monotonic() - t0
    out["links"] = [c.as_dict() for c in checks]
    prov = cluster.provenance()
    out["rate_bytes_per_s"] = cluster.spec.rate_bits_per_s / 8
    out["goodput_bytes_per_s"] = good = prov["goodput_bytes_per_s"]
    print(
        f"# {spec}: self-check goodput {good / MB:.1f} Mbit/s "
        f"({good / out['rate_bytes_per_s']:.1%} of the set rate)",
        flush=True,
    )
    return good


def _collect_phase(cluster, args, nodes: list[int], recs_path: Path, out: dict) -> None:
    """Collect the sweep at every node count and one more (unless reused), timed into ``out``."""
    from calibration import collect

    procs = sorted(set(nodes) | {n + 1 for n in nodes})
    t0 = time.monotonic()
    if not args.reuse_collect or not recs_path.exists():
        collect(
            recs_path,
            workers=procs,
            collectives=list(COLLECTIVES),
            suite="collectives,compute",
            min_bytes=args.min_bytes,
            max_bytes=args.max_bytes,
            step_factor=args.step_factor,
            budget_s=args.budget_s,
            iters=args.iters,
            rounds=args.rounds,
            overwrite=True,
            emulate=cluster,
            timeout_s=300,
        )
    out["collect_s"] = time.monotonic() - t0
    print(f"# collect at {procs} processes: {out['collect_s']:.0f} s", flush=True)


def _calibrate_phase(recs_path: Path, prof_path: Path, good: float, out: dict):
    """Calibrate on the collection, save the profile, and record its link fit into ``out``."""
    from calibration import calibrate

    t0 = time.monotonic()
    prof = calibrate(str(recs_path))
    prof.save(prof_path, overwrite=True)
    out["calibrate_s"] = time.monotonic() - t0
    recs = [json.loads(ln) for ln in recs_path.read_text().splitlines() if ln.strip()]
    out["link"] = _link(prof, recs, good)
    out["heldout_p90"] = prof.heldout_p90
    out["reliable"] = bool(prof.reliable)
    return prof


def _train_phase(cluster, args, nodes: list[int], steps_path: Path, out: dict) -> list[dict]:
    """Measure the model's steps for every configuration; return the step records."""
    from calibration import RecordWriter
    from tuner.validation import measure_configurations

    t0 = time.monotonic()
    buckets = [_size(b) for b in args.buckets.split(",")]
    writer = RecordWriter(steps_path, "overwrite")
    try:
        base, got = measure_configurations(
            args.model,
            nodes,
            _configs(buckets),
            steps=args.steps,
            warmup_steps=args.warmup_steps,
            repeats=args.repeats,
            timeout_s=300,
            writer=writer,
            emulate=cluster,
        )
    finally:
        writer.close()
    out["train_s"] = time.monotonic() - t0
    return [base.record] + [m.record for m in got]


def _validate(prof, steps: list[dict], out: dict) -> None:
    """Compare the measured steps with the profile's predictions, into ``out``."""
    from tuner.validation import compare_steps

    res = compare_steps(prof, steps)
    out["validation"] = res.to_dict()
    out["scaling"] = _scaling(res.rows)
    errs: dict[str, list[float]] = {}
    for row in res.rows:
        errs.setdefault(_label(row), []).append(abs(row.error))
    out["mape_by_configuration"] = {k: float(np.mean(v)) for k, v in errs.items()}
    out["_rows"] = res.rows
    out["_result"] = res


def run_rate(rate: str, args, nodes: list[int]) -> dict:
    """At one link rate: self-check, collect, calibrate, train and validate on an emulated cluster."""
    import calibration  # noqa: F401  (loaded before the cluster starts; the phases use it)
    import tuner.validation  # noqa: F401
    from launch import EmulatedCluster

    top = max(nodes)
    spec = f"{top + 1}x1@{rate}"
    tag = rate.replace("/", "_")
    recs_path = RESULTS / f"emulated_validation-{tag}-collect.jsonl"
    steps_path = RESULTS / f"emulated_validation-{tag}-steps.jsonl"
    prof_path = RESULTS / f"emulated_validation-{tag}-profile.json"
    out: dict = {"spec": spec, "rate": rate}
    with EmulatedCluster(spec) as cluster:
        good = _self_check(cluster, spec, out)
        _collect_phase(cluster, args, nodes, recs_path, out)
        prof = _calibrate_phase(recs_path, prof_path, good, out)
        steps = _train_phase(cluster, args, nodes, steps_path, out)
    _validate(prof, steps, out)
    return out


def _print_rate(r: dict) -> None:
    link, res = r["link"], r["_result"]
    fit = link["fitted_inv_beta_inter_bytes_per_s"]
    print(
        f"\n## {r['spec']}: set {r['rate_bytes_per_s'] / MB:.1f}, goodput "
        f"{r['goodput_bytes_per_s'] / MB:.1f}, fitted 1/β_inter {fit / MB:.1f} Mbit/s of payload "
        f"(fit/goodput {fit / r['goodput_bytes_per_s']:.3f}, fit/set "
        f"{fit / r['rate_bytes_per_s']:.3f}); held-out p90 {r['heldout_p90']:.1%} (collectives: "
        f"worst series {link['collective_heldout_p90_worst_series']:.1%}, p90 of every point "
        f"{link['collective_error_p90']:.1%}); "
        f"collect {r['collect_s']:.0f} s, calibrate {r['calibrate_s']:.0f} s, "
        f"train {r['train_s']:.0f} s"
    )
    print(f"{'collective':>11} {'n':>2} {'largest':>8} {'meas ms':>8} {'pred ms':>8} "
          f"{'pred/meas':>9} {'meas bw':>8} {'fit bw':>8} {'fit/good':>8}")  # fmt: skip
    for s in link["series"]:
        print(
            f"{s['collective']:>11} {s['num_ranks']:>2} {s['largest_bytes'] // 1024:>7}K "
            f"{s['measured_s'] * 1e3:>8.1f} {s['predicted_s'] * 1e3:>8.1f} "
            f"{s['ratio_pred_over_meas']:>9.3f} {s['measured_bw_bytes_per_s'] / MB:>8.1f} "
            f"{s['fitted_bw_bytes_per_s'] / MB:>8.1f} "
            f"{s['fitted_bw_bytes_per_s'] / r['goodput_bytes_per_s']:>8.3f}"
        )
    b = res.baseline_step_s
    print(f"single-worker step {b * 1e3:.1f} ms ({res.statistic})")
    print(f"{'configuration':>24} {'n':>2} {'meas ms':>8} {'pred ms':>8} {'err':>7} "
          f"{'comm meas':>9} {'comm pred':>9} {'90% interval':>17} {'IQR':>6}")  # fmt: skip
    for row in sorted(res.rows, key=lambda x: (_label(x), x.workers)):
        print(
            f"{_label(row):>24} {row.workers:>2} {row.measured_s * 1e3:>8.1f} "
            f"{row.predicted_s * 1e3:>8.1f} {row.error:>+7.1%} "
            f"{(row.measured_s - b) * 1e3:>9.1f} {(row.predicted_s - b) * 1e3:>9.1f} "
            f"{row.interval_low_s * 1e3:>8.0f}–{row.interval_high_s * 1e3:<8.0f} "
            f"{row.spread_s * 1e3:>6.1f}"
        )
    _print_metrics(res)
    by = r["mape_by_configuration"]
    print("MAPE by configuration: " + ", ".join(f"{k} {v:.1%}" for k, v in by.items()))
    print("T(N)/T(2) measured / predicted:")
    for lab, d in r["scaling"].items():
        cells = ", ".join(
            f"N={n}: {v['measured']:.2f} / {v['predicted']:.2f} ({v['error']:+.1%})"
            for n, v in d.items()
        )
        print(f"  {lab:>24}: {cells}")


def _print_metrics(res, name: str = "") -> None:
    used, total = res.tau_pairs
    print(
        f"{name}{len(res.rows)} configurations: MAPE {res.mape:.1%}, Kendall τ {res.kendall_tau:.2f} "
        f"({used}/{total} pairs; τ over all {res.kendall_tau_all:.2f}), regret {res.regret:.1%} "
        f"(chose {_label(res.rows[res.chosen])} n={res.rows[res.chosen].workers}, best "
        f"{_label(res.rows[res.best])} n={res.rows[res.best].workers}), 90% coverage "
        f"{res.interval_coverage:.0%}"
    )
    for w in res.warnings:
        print(f"  warning: {w}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--rates", default=None, help="comma-separated tc rates (default 100mbit,200mbit)"
    )
    p.add_argument("--nodes", default=None, help="worker counts (default 2,3,4)")
    p.add_argument("--quick", action="store_true", help="2,3 nodes at 200mbit, 1M-4M, 1 repeat")
    p.add_argument("--model", default="mlp")
    p.add_argument(
        "--buckets", default="1536K,16M", help="ring's bucket caps (the largest for ps/p2p)"
    )
    p.add_argument("--min-bytes", type=_size, default=2**20)
    p.add_argument("--max-bytes", type=_size, default=None)
    p.add_argument("--step-factor", type=int, default=2)
    p.add_argument("--budget-s", type=float, default=0.3)
    p.add_argument("--iters", type=int, default=3)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--warmup-steps", type=int, default=1)
    p.add_argument("--repeats", type=int, default=None)
    p.add_argument("--reuse-collect", action="store_true", help="keep an existing collect file")
    p.add_argument("--out", default=str(RESULTS / "emulated_validation.json"))
    args = p.parse_args(argv)
    q = args.quick
    rates = [s.strip() for s in (args.rates or ("200mbit" if q else "100mbit,200mbit")).split(",")]
    nodes = sorted({int(s) for s in (args.nodes or ("2,3" if q else "2,3,4")).split(",")})
    if args.max_bytes is None:
        args.max_bytes = (4 if q else 8) * 2**20
    if args.repeats is None:
        args.repeats = 1 if q else 2
    if nodes[0] < 2:
        print("emulated_validation: --nodes must be ≥ 2", file=sys.stderr)
        return 2
    from launch import emulation_unavailable_reason

    reason = emulation_unavailable_reason()
    if reason:
        print(f"emulated_validation: {reason}", file=sys.stderr)
        return 1
    RESULTS.mkdir(parents=True, exist_ok=True)
    t_all = time.monotonic()
    results = []
    for rate in rates:
        r = run_rate(rate, args, nodes)
        _print_rate(r)
        results.append(r)
    pooled_d = None
    if len(results) > 1:  # a decision is made per network, so τ and regret stay per rate
        rows = [row for r in results for row in r["_rows"]]
        m = np.array([x.measured_s for x in rows])
        pr = np.array([x.predicted_s for x in rows])
        lo = np.array([x.interval_low_s for x in rows])
        hi = np.array([x.interval_high_s for x in rows])
        pooled_d = {
            "configurations": len(rows),
            "mape": float(np.mean(np.abs(pr - m) / m)),
            "interval_coverage": float(np.mean((m >= lo) & (m <= hi))),
            "kendall_tau_by_rate": [r["_result"].kendall_tau for r in results],
            "regret_by_rate": [r["_result"].regret for r in results],
        }
        print(
            f"\npooled over {len(rates)} rates: {len(rows)} configurations, MAPE "
            f"{pooled_d['mape']:.1%}, 90% coverage {pooled_d['interval_coverage']:.0%}; τ by rate "
            + ", ".join(f"{t:.2f}" for t in pooled_d["kendall_tau_by_rate"])
            + "; regret by rate "
            + ", ".join(f"{x:.1%}" for x in pooled_d["regret_by_rate"])
        )
    doc = {
        "args": vars(args),
        "rates": rates,
        "nodes": nodes,
        "total_s": time.monotonic() - t_all,
        "results": [{k: v for k, v in r.items() if not k.startswith("_")} for r in results],
        "pooled": pooled_d,
    }
    Path(args.out).write_text(json.dumps(doc, indent=2, default=float))
    print(f"# total {doc['total_s'] / 60:.1f} min; full results: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
