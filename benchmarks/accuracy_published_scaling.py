"""Predicted against published multi-GPU training throughput (tf_cnn_benchmarks, 2017).

For every table in ``../shared/data/scaling`` (one file per system), predict the
throughput at each GPU count from the published 1-GPU throughput of the same
model, batch and data (compute = the measured single-GPU step, batch /
images_per_sec, via ``Workload.with_step_time``) with the cost model, the
architecture TensorFlow used and datasheet presets for the system; print the
error of every row and the MAPE per file beside a naive linear-scaling
baseline (n × the 1-GPU throughput).

Systems (presets chosen from datasheets, never fitted to these tables):

* ``aws-k80-distributed-ps`` — Amazon EC2 p2.8xlarge, 8 Tesla K80 GPUs each,
  up to 8 instances. ``variable_update=distributed_replicated`` is ddltune's
  ``hybrid`` (all-reduce inside an instance, parameter servers across
  instances), with the table's server counts (k = instances, except
  InceptionV3 at 8 instances: 6; ResNet-50 batch 32 and ResNet-152 at 8
  instances: 4). Network ``ethernet-10g``: AWS lists p2.8xlarge's network
  performance as "10 Gigabit" (EC2 instance types, accelerated computing);
  intra-node ``pcie3-x16``: p2 GPUs sit on PCIe 3.0 (no NVLink); device ``k80``.
  8 GPUs per node.
* ``dgx1-p100`` — one NVIDIA DGX-1 (8 Tesla P100 SXM2). ``parameter_server``
  with ``local_parameter_device=cpu`` is ddltune's ``ps_host`` (parameters on
  the host CPU; GPUs reach it over PCIe 3.0 x16, DGX-1 datasheet) with intra
  ``pcie3-x16`` and 4 host links (the GPUs sit in pairs on four PCIe switches,
  each with its own uplink to a CPU: DGX-1 System Architecture white paper,
  WP-08437-001 §2; ``host_links=4`` puts two GPUs on each); ``replicated`` with NCCL is ``ring`` over NVLink: the
  ``nvlink-v100`` preset scaled to P100's NVLink 1.0 (4 links × 20 GB/s per
  direction, P100 SXM2 datasheet, against V100's 6 × 25 GB/s: β × 150/80).
  Network ``ib-edr-100g`` (the DGX-1's 4 × EDR InfiniBand, DGX-1 datasheet;
  unused on one node); device ``p100``. All GPUs on one node.

TensorFlow of that era exchanged every variable on its own (no gradient
fusion): bucket_bytes = 0 (one bucket per tensor).

After the table a diagnosis compares, per row, the per-step overhead the
published numbers imply, T(n) − T(1) with T(n) = n·batch / images_per_sec, with
the model's, and prints a what-if with parameter-server push overlapped with
backward (TensorFlow's dataflow sends each gradient as soon as it exists; the
cost model's ``ps``/``ps_host``/``hybrid`` do not overlap). The what-if is a
diagnosis of what the model lacks, not a fit.

Full results go to ``benchmarks/results/accuracy_published_scaling.json``.

Usage (from the repository root; about half a minute, mostly compilation: one
program per model and architecture):

    python benchmarks/accuracy_published_scaling.py
    python benchmarks/accuracy_published_scaling.py --data ../shared/data/scaling --json
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "data" / "scaling"
FALLBACK_DATA = ROOT / "tests" / "data" / "scaling"
RESULTS = Path(__file__).resolve().parent / "results" / "accuracy_published_scaling.json"

#: Published model names → ddltune's model zoo.
MODELS = {
    "InceptionV3": "inception_v3",
    "ResNet-50": "resnet50",
    "ResNet-152": "resnet152",
    "AlexNet": "alexnet",
    "VGG16": "vgg16",
    "VGG-16": "vgg16",
}

# NVLink per direction: P100 SXM2 4 links x 20 GB/s, V100 SXM2 6 links x 25 GB/s (datasheets).
P100_OVER_V100_NVLINK = 150.0 / 80.0
# The DGX-1's eight GPUs reach the two CPUs through four PCIe switches, two GPUs (and one
# InfiniBand NIC) on each (NVIDIA DGX-1 System Architecture white paper, WP-08437-001, §2).
DGX1_HOST_LINKS = 4


def _k80_servers(model: str, batch: int, instances: int) -> int:
    """Parameter servers of the K80 runs: one per instance, except as the table's header says."""
    if instances == 8 and model == "InceptionV3":
        return 6
    if instances == 8 and (model == "ResNet-152" or (model == "ResNet-50" and batch == 32)):
        return 4
    return instances


def system_for(path: Path) -> dict:
    """The system a table describes: how to predict each of its rows, and why.

    Returns:
        ``{"name", "gpus_per_node", "choose(row) -> (architecture, params, servers, reason)"}``.

    Raises:
        ValueError: for a file this benchmark has no system description of.
    """
    from costmodel import preset

    name = path.name
    if "aws-k80" in name:

        def choose(row):
            n = int(row["gpus"])
            m = max(1, n // 8)
            k = _k80_servers(row["model"], int(row["batch_size_per_gpu"]), m)
            return (
                "hybrid",
                preset("ethernet-10g,pcie3-x16", "k80"),
                k,
                "distributed_replicated = hybrid; p2.8xlarge 10 Gb/s, PCIe 3.0, K80",
            )

        return {"name": "aws-k80-distributed-ps", "gpus_per_node": 8, "choose": choose}
    if "dgx1-p100" in name:

        def choose(row):
            vu = row["variable_update"]
            if vu.startswith("parameter_server"):
                if row.get("local_parameter_device", "").strip() == "gpu":
                    return (
                        "ps",
                        preset("ib-edr-100g,pcie3-x16", "p100"),
                        1,
                        "parameter_server, parameters on a GPU = ps",
                    )
                return (
                    "ps_host",
                    preset("ib-edr-100g,pcie3-x16", "p100", host_links=DGX1_HOST_LINKS),
                    1,
                    "parameter_server, local_parameter_device=cpu = ps_host over PCIe 3.0, "
                    f"{DGX1_HOST_LINKS} PCIe switches (two GPUs each) to the hosts",
                )
            if vu.startswith("replicated"):
                return (
                    "ring",
                    preset("ib-edr-100g,nvlink-v100", "p100").scaled(
                        beta_intra=P100_OVER_V100_NVLINK
                    ),
                    1,
                    "replicated with NCCL = ring over P100 NVLink",
                )
            raise ValueError(f"{path}: unknown variable_update {vu!r}")

        return {"name": "dgx1-p100", "gpus_per_node": 8, "choose": choose}
    raise ValueError(f"{path}: no system description for this table; add one to system_for()")


def load_table(path: Path) -> list[dict]:
    """The rows of a scaling CSV (``#`` comment lines skipped); 'N/A' rows kept as None."""
    with open(path, encoding="utf-8") as fh:
        lines = [ln for ln in fh if ln.strip() and not ln.lstrip().startswith("#")]
    rows = []
    for i, r in enumerate(csv.DictReader(lines)):
        v = r["images_per_sec"].strip()
        r["images_per_sec"] = None if v.upper() == "N/A" else float(v)
        r["_row"] = i
        rows.append(r)
    return rows


def _overlapped(arch_name: str, colocated: bool = False):
    """What-if: the same architecture with phase 1 (push) overlapped with backward."""
    from costmodel import get_architecture, with_overlap

    return with_overlap(get_architecture(arch_name, colocated=colocated), True)


def _single_gpu_baselines(rows: list[dict]) -> dict:
    """Published 1-GPU images/s per (data, batch, model): each prediction's compute step."""
    return {
        (r["data"], r["batch_size_per_gpu"], r["model"]): r["images_per_sec"]
        for r in rows
        if r["gpus"].strip() == "1" and r["images_per_sec"] is not None
    }


def _group_rows(rows: list[dict], base: dict, system: dict) -> dict:
    """Multi-GPU rows with a baseline, grouped by data, batch, model, architecture and reason."""
    # One vectorised iteration_time call per group (over the GPU counts).
    groups: dict[tuple, list[tuple[dict, tuple]]] = {}
    for r in rows:
        n = int(r["gpus"])
        key = (r["data"], r["batch_size_per_gpu"], r["model"])
        if n == 1 or r["images_per_sec"] is None or key not in base:
            continue
        choice = system["choose"](r)
        groups.setdefault(key + (choice[0], choice[3]), []).append((r, choice))
    return groups


def _predict_group(group: tuple, members: list, ips1: float, system: dict, what_if: bool):
    """Predict one group's rows (one iteration_time call over its GPU counts)."""
    from costmodel import get_workload, iteration_time

    data, batch, model, arch, reason = group
    b = int(batch)
    t1 = b / ips1
    params = members[0][1][1]
    n = np.array([int(r["gpus"]) for r, _ in members], dtype=np.float64)
    g = np.minimum(n, system["gpus_per_node"])
    k = np.array([c[2] for _, c in members], dtype=np.float64)
    w = get_workload(MODELS[model], b).with_step_time(t1)
    bd = iteration_time(params, w, arch, n, ranks_per_node=g, servers=k, bucket_bytes=0)
    alt = None
    if what_if and arch in ("ps", "ps_host", "hybrid"):
        alt = iteration_time(
            params, w, _overlapped(arch), n, ranks_per_node=g, servers=k, bucket_bytes=0
        )
    out = []
    for i, (r, _) in enumerate(members):
        y = r["images_per_sec"]
        pred = float(bd.throughput_samples_per_s[i])
        lin = n[i] * ips1
        row = {
            "data": data,
            "batch_size": b,
            "model": model,
            "gpus": int(n[i]),
            "architecture": arch,
            "servers": int(k[i]),
            "ranks_per_node": int(g[i]),
            "published": y,
            "predicted": pred,
            "linear": float(lin),
            "error": pred / y - 1.0,
            "linear_error": float(lin / y - 1.0),
            "observed_overhead_s": float(n[i] * b / y - t1),
            "model_overhead_s": float(bd.iteration_s[i]) - t1,
            "model_communication_s": float(bd.communication_s[i]),
            "reason": reason,
            "_row": r["_row"],
        }
        if alt is not None:
            row["what_if_overlap_predicted"] = float(alt.throughput_samples_per_s[i])
            row["what_if_overlap_error"] = row["what_if_overlap_predicted"] / y - 1.0
        out.append(row)
    return out


def _summarise_file(path: Path, system: dict, out: list[dict]) -> dict:
    """One table's result: its rows and MAPEs (overall, by data, by architecture, what-if)."""

    def mape(key, sel=lambda x: True):
        v = [abs(x[key]) for x in out if sel(x) and key in x]
        return float(np.mean(v)) if v else float("nan")

    def what_if_mape(sel=lambda x: True):
        v = [abs(x.get("what_if_overlap_error", x["error"])) for x in out if sel(x)]
        return float(np.mean(v)) if v else float("nan")

    def median_of(key, a):
        return float(np.median([x[key] for x in out if x["architecture"] == a]))

    archs = sorted({x["architecture"] for x in out})

    return {
        "file": path.name,
        "system": system["name"],
        "rows": out,
        "mape": mape("error"),
        "linear_mape": mape("linear_error"),
        "mape_synthetic": mape("error", lambda x: x["data"] == "synthetic"),
        "linear_mape_synthetic": mape("linear_error", lambda x: x["data"] == "synthetic"),
        "mape_real": mape("error", lambda x: x["data"] == "real"),
        "linear_mape_real": mape("linear_error", lambda x: x["data"] == "real"),
        "mape_by_architecture": {
            a: mape("error", lambda x, a=a: x["architecture"] == a) for a in archs
        },
        "linear_mape_by_architecture": {
            a: mape("linear_error", lambda x, a=a: x["architecture"] == a) for a in archs
        },
        "what_if_overlap_mape": what_if_mape(),
        "what_if_overlap_mape_by_architecture": {
            a: what_if_mape(lambda x, a=a: x["architecture"] == a) for a in archs
        },
        "median_overhead_s_by_architecture": {
            a: {
                "observed": median_of("observed_overhead_s", a),
                "model": median_of("model_overhead_s", a),
            }
            for a in archs
        },
        "beats_linear": mape("error") < mape("linear_error"),
    }


def predict_file(path: Path, *, what_if: bool = True) -> dict:
    """Predict every multi-GPU row of one table; returns rows and MAPEs (fractions)."""
    system = system_for(path)
    rows = load_table(path)
    base = _single_gpu_baselines(rows)
    out = []
    for group, members in _group_rows(rows, base, system).items():
        ips1 = base[group[:3]]
        out.extend(_predict_group(group, members, ips1, system, what_if))
    out.sort(key=lambda x: x.pop("_row"))
    return _summarise_file(path, system, out)


def _pct(x: float) -> str:
    return (
        "   n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x * 100:+6.1f}%"
    )


def format_file(res: dict) -> str:
    """Per-row table, then the MAPE lines of one file."""
    out = [f"== {res['file']} ({res['system']})"]
    out.append(
        f"{'data':>9} {'batch':>5} {'model':>11} {'gpus':>4} {'arch':>8} {'k':>2} "
        f"{'published':>9} {'model':>9} {'error':>7} {'linear':>9} {'error':>7} "
        f"{'dT obs(ms)':>10} {'dT model(ms)':>12}"
    )
    for r in res["rows"]:
        out.append(
            f"{r['data']:>9} {r['batch_size']:>5d} {r['model']:>11} {r['gpus']:>4d} "
            f"{r['architecture']:>8} {r['servers']:>2d} {r['published']:>9.0f} "
            f"{r['predicted']:>9.0f} {_pct(r['error'])} {r['linear']:>9.0f} "
            f"{_pct(r['linear_error'])} {r['observed_overhead_s'] * 1e3:>10.1f} "
            f"{r['model_overhead_s'] * 1e3:>12.1f}"
        )
    by_arch = ", ".join(
        f"{a} {v * 100:.1f}% (linear {res['linear_mape_by_architecture'][a] * 100:.1f}%)"
        for a, v in res["mape_by_architecture"].items()
    )
    out.append(
        f"MAPE model {res['mape'] * 100:.1f}% vs linear {res['linear_mape'] * 100:.1f}% "
        f"-> {'beats' if res['beats_linear'] else 'DOES NOT beat'} linear scaling"
    )
    out.append(
        f"  synthetic data: model {res['mape_synthetic'] * 100:.1f}% vs linear "
        f"{res['linear_mape_synthetic'] * 100:.1f}%; real data: model "
        f"{res['mape_real'] * 100:.1f}% vs linear {res['linear_mape_real'] * 100:.1f}%"
        if not math.isnan(res["mape_real"])
        else f"  synthetic data only ({len(res['rows'])} rows)"
    )
    out.append(f"  by architecture: {by_arch}")
    over = ", ".join(
        f"{a} {v['observed'] * 1e3:.1f} ms observed vs {v['model'] * 1e3:.1f} ms model"
        for a, v in res["median_overhead_s_by_architecture"].items()
    )
    out.append(f"  median per-step overhead T(n) - T(1): {over}")
    wi = ", ".join(
        f"{a} {v * 100:.1f}%" for a, v in res["what_if_overlap_mape_by_architecture"].items()
    )
    out.append(
        f"  what-if (diagnosis, not a fit): parameter-server push overlapped with backward -> "
        f"MAPE {res['what_if_overlap_mape'] * 100:.1f}% ({wi})"
    )
    return "\n".join(out)


def main(argv=None) -> int:
    """Run the benchmark over every table of --data; print tables, write the JSON results."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default = DATA if DATA.is_dir() else FALLBACK_DATA
    p.add_argument("--data", type=Path, default=default, help=f"tables folder (default {default})")
    p.add_argument("--out", type=Path, default=RESULTS, help=f"results file (default {RESULTS})")
    p.add_argument("--json", action="store_true", help="print the results as JSON instead")
    args = p.parse_args(argv)
    files = sorted(args.data.glob("*.csv"))
    if not files:
        print(f"no .csv tables in {args.data}", file=sys.stderr)
        return 1
    t0 = time.perf_counter()
    for f in files:  # first pass: compiles one program per model and architecture
        predict_file(f)
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    results = [predict_file(f) for f in files]
    warm = time.perf_counter() - t0
    doc = {"files": results, "first_pass_s": first, "warm_pass_s": warm, "data": str(args.data)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1))
    if args.json:
        print(json.dumps(doc, indent=1))
        return 0
    for res in results:
        print(format_file(res))
        print()
    print(f"{'file':<62} {'rows':>4} {'model MAPE':>10} {'linear MAPE':>11} {'beats':>5}")
    for res in results:
        print(
            f"{res['file']:<62} {len(res['rows']):>4d} {res['mape'] * 100:>9.1f}% "
            f"{res['linear_mape'] * 100:>10.1f}% {'yes' if res['beats_linear'] else 'NO':>5}"
        )
    print(
        f"(first pass {first:.1f} s, mostly compilation; warm pass {warm:.2f} s; "
        f"full results in {args.out})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
