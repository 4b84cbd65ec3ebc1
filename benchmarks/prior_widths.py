"""How wide a preset-only 90% interval is, and how often it holds the published step.

Issue 23, item 4: priors as wide as the evidence. Two checks on the shared
tf_cnn_benchmarks tables (``../shared/data/scaling``, or ``--data``):

1. **Compute.** Each table's single-GPU step (batch / images_per_sec) against
   the preset's compute: batch × (forward + backward FLOPs) /
   ``costmodel.device_flops_per_s(device, kind="cnn")``. Prints every row's
   ratio, the mean and sd of the log errors and the 90th percentile of
   |log error|, which sets ``calibration._profile.PRESET_FLOPS_SD`` (a 90%
   interval is ±1.645 σ).
2. **Intervals.** Every multi-GPU row predicted from presets alone (the
   architecture and presets of ``accuracy_published_scaling.system_for``,
   compute from FLOPs) with the preset profile's covariance
   (``calibration.Profile.from_preset``'s), and with the former one (every leaf
   at the calibration prior ``PRIOR_SD``, log flops_per_s ×4): the share of the
   published steps (n × batch / images_per_sec) inside the 90% interval and the
   median interval width (high / low). With ``--measured-compute`` the
   predictions take the published single-GPU step instead (only the network,
   update and overhead terms uncertain).

Writes ``benchmarks/results/prior_widths.json`` (``prior_widths_measured_compute.json``
with ``--measured-compute``).

    PYTHONPATH=. python benchmarks/prior_widths.py [--data DIR] [--measured-compute] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

import accuracy_published_scaling as aps  # noqa: E402  (the tables' systems, one description)


def _device(path: Path) -> str:
    return "k80" if "aws-k80" in path.name else "p100"


def compute_errors(files: list[Path]) -> list[dict]:
    """Preset compute against each table's published single-GPU step (one dict per row)."""
    from costmodel import device_flops_per_s, get_workload

    out = []
    for f in files:
        dev = _device(f)
        rate = device_flops_per_s(dev, None, "cnn")[0]
        for (data, batch, model), ips in aps._single_gpu_baselines(aps.load_table(f)).items():
            b = int(batch)
            w = get_workload(aps.MODELS[model], b)
            pred = b * (float(np.sum(w.fwd_flops)) + float(np.sum(w.bwd_flops))) / rate
            meas = b / ips
            out.append(
                {
                    "table": f.name,
                    "device": dev,
                    "data": data,
                    "batch_size": b,
                    "model": model,
                    "predicted_s": pred,
                    "published_s": meas,
                    "log_error": float(np.log(pred / meas)),
                }
            )
    return out


def _profile(params, flops_sd: float | None):
    """A preset profile around ``params``: from_preset's covariance, log flops_per_s's sd
    ``flops_sd`` (None: the preset profile's, ``PRESET_FLOPS_SD``)."""
    from calibration import ParamLayout, Profile, preset_sd

    lay = ParamLayout(1)
    sd = preset_sd(lay)
    if flops_sd is not None:
        sd[lay.slices["log_flops"]] = flops_sd
    return Profile(params=params, covariance=np.diag(sd**2), leaf_names=lay.names, prior={})


def interval_rows(files: list[Path], flops_sd: float | None, measured_compute: bool) -> list[dict]:
    """Every multi-GPU row's 90% interval under the preset covariance (one dict per row)."""
    from costmodel import get_workload
    from tuner import predict_iterations

    out = []
    for f in files:
        system = aps.system_for(f)
        rows = aps.load_table(f)
        base = aps._single_gpu_baselines(rows)
        for (data, batch, model, arch, _), members in aps._group_rows(rows, base, system).items():
            b = int(batch)
            w = get_workload(aps.MODELS[model], b)
            if measured_compute:
                w = w.with_step_time(b / base[(data, batch, model)])
            prof = _profile(members[0][1][1], flops_sd)
            for r, choice in members:
                n = int(r["gpus"])
                g = min(n, system["gpus_per_node"])
                row = predict_iterations(
                    prof, w, [arch], [n], servers=[choice[2]], bucket_bytes=[0], ranks_per_node=g
                )[0]
                lo, hi = row["interval_s"]
                t = n * b / r["images_per_sec"]
                out.append(
                    {
                        "table": system["name"],
                        "data": data,
                        "batch_size": b,
                        "model": model,
                        "architecture": arch,
                        "gpus": n,
                        "published_s": t,
                        "predicted_s": row["iteration_s"],
                        "low_s": lo,
                        "high_s": hi,
                        "inside": bool(lo <= t <= hi),
                    }
                )
    return out


def _summary(rows: list[dict]) -> dict:
    by: dict[str, list[dict]] = {}
    for r in rows:
        by.setdefault(r["table"], []).append(r)
    by["all"] = rows
    return {
        k: {
            "rows": len(v),
            "coverage": float(np.mean([r["inside"] for r in v])),
            "median_width": float(np.median([r["high_s"] / r["low_s"] for r in v])),
        }
        for k, v in by.items()
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "scaling")
    ap.add_argument("--measured-compute", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    import jax

    jax.config.update("jax_enable_x64", True)
    from calibration import PRESET_FLOPS_SD, PRIOR_SD

    files = sorted(args.data.glob("*.csv"))
    if not files:
        print(f"no *.csv under {args.data}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    comp = compute_errors(files)
    e = np.array([c["log_error"] for c in comp])
    stats = {
        "rows": len(e),
        "mean_log_error": float(e.mean()),
        "sd_log_error": float(e.std(ddof=1)),
        "p90_abs_log_error": float(np.percentile(np.abs(e), 90)),
        "sd_for_90pct": float(np.percentile(np.abs(e), 90) / 1.645),
    }
    before = interval_rows(files, PRIOR_SD["log_flops"], args.measured_compute)
    after = interval_rows(files, None, args.measured_compute)
    doc = {
        "compute": {"rows": comp, **stats},
        "flops_sd": {"before": PRIOR_SD["log_flops"], "after": PRESET_FLOPS_SD},
        "measured_compute": args.measured_compute,
        "before": {"summary": _summary(before), "rows": before},
        "after": {"summary": _summary(after), "rows": after},
        "elapsed_s": time.perf_counter() - t0,
    }
    name = "prior_widths_measured_compute.json" if args.measured_compute else "prior_widths.json"
    out = ROOT / "benchmarks" / "results" / name
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    if args.json:
        print(
            json.dumps(
                {k: v for k, v in doc.items() if k not in ("before", "after")}
                | {"before": doc["before"]["summary"], "after": doc["after"]["summary"]},
                indent=1,
            )
        )
        return 0
    print("preset compute against the published single-GPU steps:")
    for c in comp:
        print(
            f"  {c['device']:>5} {c['model']:<12} batch {c['batch_size']:>3} {c['data']:<9} "
            f"predicted {c['predicted_s']:.3f} s, published {c['published_s']:.3f} s, "
            f"ratio {np.exp(c['log_error']):.2f}"
        )
    print(
        f"  {stats['rows']} rows: log error mean {stats['mean_log_error']:.2f}, sd "
        f"{stats['sd_log_error']:.2f}; 90th percentile of |log error| "
        f"{stats['p90_abs_log_error']:.2f} -> sigma {stats['sd_for_90pct']:.2f} for a 90% interval "
        f"(the preset profile's: ln 2 = {PRESET_FLOPS_SD:.2f})"
    )
    what = "published single-GPU step" if args.measured_compute else "compute from FLOPs"
    print(f"\npreset-only 90% intervals of every multi-GPU row ({what}):")
    print(
        f"  {'table':<24} {'rows':>4}  {'before: in 90%':>14} {'width':>7}  {'after: in 90%':>13} {'width':>7}"
    )
    sb, sa = _summary(before), _summary(after)
    for k in sb:
        print(
            f"  {k:<24} {sb[k]['rows']:>4}  {100 * sb[k]['coverage']:>13.0f}% "
            f"{sb[k]['median_width']:>6.2f}x  {100 * sa[k]['coverage']:>12.0f}% "
            f"{sa[k]['median_width']:>6.2f}x"
        )
    print(f"({doc['elapsed_s']:.0f} s; full results: {out})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
