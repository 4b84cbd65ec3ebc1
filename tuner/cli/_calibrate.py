"""``ddltune calibrate``: fit a profile (parameters with uncertainty) to measurement files."""

from __future__ import annotations

import argparse
import json
import math
import sys
import warnings
from pathlib import Path

from calibration import STATISTICS
from costmodel import format_bytes, format_seconds

from ._common import (
    CLIError,
    UsageError,
    add_model_arguments,
    host_links_arg,
    model_workload_arg,
    plural,
    print_json,
)

NAME = "calibrate"
HELP = "fit cluster parameters (with uncertainty and held-out accuracy) to measurements"
#: Set by :func:`tuner.cli.main`: fit in float64 (the library also works in float32), and
#: keep the fit's compiled program between runs (opt out: DDLTUNE_NO_COMPILATION_CACHE=1):
#: a repeated calibration, or one after `ddltune run` (whose calibration compiles the same
#: program), skips XLA's compile (the 8xA100 nccl-tests table: 6.2 s cold, 2.5-3.0 s warm).
X64 = True
COMPILATION_CACHE = True
DESCRIPTION = """\
Fit one set of cluster parameters to every measurement in the given files
(from 'ddltune collect' or 'ddltune import-nccl-tests'): all collectives,
sizes, rank counts and ranks per node at once, and the compute records
(throughput, and how processes sharing a node's cores slow each other). The
loss is a robust (Huber) error on log time plus a weak prior centred on a
datasheet preset; the optimiser is Adam then L-BFGS (optax). The number of
protocol regimes per collective (NCCL's LL/LL128/Simple, MPI's eager and
rendezvous) is chosen on folds of the training points.

A deterministic share of each measured curve's sizes (--holdout, default 25%)
is held out of the fit; the median and p90 absolute percentage error on those
points is reported per series. When the held-out p90 exceeds 15% the profile
is marked unreliable (a warning here; 'ddltune recommend' refuses it unless
forced). Parameters the measurements cannot pin down (inter-node terms from
one-node data, collectives never measured) stay at the prior and are reported
as not identified.

Training steps people already have (--steps runs.csv: one run per line,
header workers,ranks_per_node,batch_size and samples_per_s or step_time_s;
optional architecture (default ring), servers, colocated, bucket_bytes
(default 25M)) calibrate the terms a real step has and microbenchmarks do not
see: the effective compute throughput, a fixed per-step overhead, how much
backward slows under overlapped communication, and how much slower (or
faster) the exchange runs inside a step than in its microbenchmark. They are fitted on top of the
measurement files' profile, or of the datasheet presets (--preset, --device)
when no file is given; --model (or --layers/--hf-config) names what was
trained. Terms the runs cannot separate stay at the prior and are reported as
not identified.

The profile (JSON) holds the parameters in SI units, their covariance, the
measured ranges, the prior and provenance; 'ddltune predict --profile' and
'ddltune recommend --profile' read it and give 90% prediction intervals."""
EPILOG = """\
examples:
  # fit what 'ddltune collect --workers 2,3,4' measured on this machine
  ddltune calibrate m.jsonl -o profile.json

  # nccl-tests imports from a DGX: name the prior, fit the mean nccl-tests printed
  ddltune calibrate ar.jsonl ag.jsonl -o dgx.json --prior-preset ib-hdr-200g,nvlink-a100:a100

  # two regimes exactly, a third of the sizes held out, JSON summary on stdout
  ddltune calibrate m.jsonl -o p.json --regimes 2 --holdout 0.33 --overwrite --json

  # observed training runs (throughput at 1, 8 and 16 V100s) on datasheet presets
  ddltune calibrate --steps runs.csv --model resnet50 --preset ib-edr-100g,nvlink-v100 --device v100 -o profile.json
  ddltune predict --profile profile.json --model resnet50 --arch ring --workers 16,32 --ranks-per-node 8"""


def _holdout_arg(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a fraction such as 0.25, got {text!r}"
        ) from None
    if not (0.0 <= v < 1.0):
        raise argparse.ArgumentTypeError(f"expected a fraction in [0, 1), got {text!r}")
    return v


def _regimes_arg(text: str):
    if text == "auto":
        return "auto"
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected 'auto' or an integer 1…8, got {text!r}"
        ) from None
    if not 1 <= v <= 8:
        raise argparse.ArgumentTypeError(f"expected 'auto' or an integer 1…8, got {text!r}")
    return v


def _prior_arg(text: str) -> str:
    from calibration import parse_prior_preset

    try:
        parse_prior_preset(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``ddltune calibrate``."""
    parser.add_argument(
        "files",
        nargs="*",
        metavar="M.jsonl",
        help="measurement files (JSON Lines, schema v1) from 'ddltune collect' or "
        "'ddltune import-nccl-tests'; all are fitted together (none with --steps: "
        "the presets are the base)",
    )
    st = parser.add_argument_group("training steps")
    st.add_argument(
        "--steps",
        action="append",
        metavar="RUNS.csv",
        help="observed training runs: a CSV, one run per line (columns: the description "
        "above), or the step records 'ddltune validate' writes (JSON Lines; their harness "
        "model needs no --model); repeat for several files",
    )
    m = st.add_mutually_exclusive_group()
    add_model_arguments(m)
    st.add_argument(
        "--preset",
        metavar="NET[,INTRA]",
        help="with --steps and no measurement file: the datasheet presets the other "
        "parameters come from, e.g. ib-edr-100g,nvlink-v100 (as in 'ddltune predict'); "
        "with measurement files, the prior's network (as --prior-preset)",
    )
    st.add_argument(
        "--device",
        metavar="NAME",
        help="device preset with --preset: k80, p100, v100, a100, h100, cpu (default v100)",
    )
    st.add_argument(
        "--host-links",
        type=host_links_arg,
        metavar="N",
        default=None,
        help="links from a node's GPUs to host memory (PCIe switch uplinks) on the cluster "
        "measured, 1-64, kept in the profile: ps_host puts ⌈ranks per node / N⌉ GPUs on "
        "each (default 1; an NVIDIA DGX-1 has 4: nvidia-smi topo -m)",
    )
    parser.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="PROFILE.json",
        help="profile to write (JSON); refused if it exists unless --overwrite",
    )
    parser.add_argument(
        "--prior-preset",
        type=_prior_arg,
        metavar="NET[,INTRA]:DEVICE",
        help="datasheet preset the prior is centred on and unidentified parameters stay at, "
        "e.g. ethernet-10g,shm:cpu or ib-hdr-200g,nvlink-a100:a100 (default: from the "
        "measured backend and device)",
    )
    parser.add_argument(
        "--statistic",
        choices=STATISTICS,
        help="time statistic to fit (default: p10 on CPU, whose timings are noisy upwards; "
        "median on GPU; the mean where only the mean exists, as in nccl-tests imports)",
    )
    parser.add_argument(
        "--holdout",
        type=_holdout_arg,
        default=0.25,
        metavar="FRACTION",
        help="share of each series' sizes held out to measure accuracy, in [0, 1) "
        "(default: %(default)s; 0 fits everything and validates nothing)",
    )
    parser.add_argument(
        "--regimes",
        type=_regimes_arg,
        default="auto",
        metavar="N|auto",
        help="protocol regimes per collective, 1…8, or auto: the best of 1, 2, 3 on inner "
        "folds of the training points (default: auto)",
    )
    parser.add_argument(
        "--in-place",
        choices=("lower", "both", "out-of-place", "in-place"),
        default="lower",
        help="nccl-tests imports time each size out-of-place and in-place: fit the lower "
        "of the two (default), both, or one of them",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the jitter on the second and later starting points (default 0)",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace the profile if it exists")
    parser.add_argument(
        "--json",
        action="store_true",
        help="print a summary (fit, per-series errors, parameters) as one JSON document",
    )


def _check_step_args(args) -> None:
    """Refuse combinations that cannot mean anything, naming the option."""
    if not args.files and not args.steps:
        raise UsageError("give measurement files (M.jsonl ...), --steps RUNS.csv, or both")
    if not args.steps and (args.model or args.layers):
        raise UsageError("--model/--layers/--hf-config go with --steps (the runs' model)")
    if args.device is not None and args.preset is None:
        raise UsageError("--device goes with --preset")
    if args.preset is not None and args.files and args.device is None:
        raise UsageError(
            "--preset with measurement files: give --device too (the prior's device; "
            "without --preset the prior comes from the measured backend and device)"
        )
    steps = [Path(f).resolve() for f in args.steps or ()]
    if len(set(steps)) < len(steps):
        raise UsageError("--steps: the same file twice (its runs would count twice)")

    if args.preset is not None and args.prior_preset is not None:
        raise UsageError("--preset/--device and --prior-preset name the same prior: give one")
    if args.preset is not None:
        try:
            args.prior_preset = _prior_arg(f"{args.preset}:{args.device or 'v100'}")
        except argparse.ArgumentTypeError as e:
            raise UsageError(f"--preset/--device: {e}") from None
    if not args.files and args.prior_preset is None:
        raise UsageError(
            "--steps without measurement files needs the presets the other parameters come "
            "from: --preset NET[,INTRA] --device NAME (e.g. --preset ib-edr-100g,nvlink-v100 "
            "--device v100)"
        )


def _step_workload(args, runs):
    if args.model is None and args.layers is None:
        specs = {json.dumps(r.get("model_spec"), sort_keys=True) for r in runs}
        if len(specs) == 1 and runs[0].get("model_spec"):
            from tuner.validation import model_workload

            return model_workload(runs[0]["model_spec"])  # the harness model of the records
        raise UsageError(
            "--steps needs the model that was trained: --model, --layers or --hf-config"
            + (" (the step records name several models)" if len(specs) > 1 else "")
        )
    return model_workload_arg(args.model, args.layers, 1)  # each run's batch is its own


def _validate_step_files(args, runs) -> list[list[dict]]:
    """Each ``--steps`` file's records where every file is ``ddltune validate``'s, with its
    single-worker step and another, and no model is named; else ``[]``.

    Those are fitted as ``validate`` fits them and ``run --validate`` folds them
    (:func:`tuner.validation.fit_step_records`: compute from the measured
    single-worker step, no overlap on CPU), one file (one model) after another.
    """
    if args.model is not None or args.layers is not None or not runs:
        return []
    from tuner.validation import can_fit_step_records

    out = []
    for f in args.steps:
        steps = []  # read_steps has read and checked each file: here its step records
        for line, raw in enumerate(Path(f).read_text(encoding="utf-8").splitlines(), 1):
            if not raw.strip() or raw.lstrip().startswith("#"):
                continue
            try:
                rec = json.loads(raw)
            except ValueError:  # a CSV of runs
                return []
            if isinstance(rec, dict) and rec.get("kind") == "step":
                steps.append(dict(rec, _file=str(f), _line=line))
        if not all(isinstance(r.get("model_spec"), dict) for r in steps):
            return []
        if not can_fit_step_records(steps):
            return []
        out.append(steps)
    return out


def run(args: argparse.Namespace) -> int:
    """Fit, write the profile atomically, print a summary (or JSON)."""
    from calibration import (
        CalibrationWarning,
        Profile,
        calibrate,
        check_output_file,
        fit_steps,
        parse_prior_preset,
        read_steps,
    )

    _check_step_args(args)
    try:  # a link, a device node, a read-only folder: refused before the fit
        out = check_output_file(
            args.output,
            overwrite=args.overwrite,
            what="-o",
            inputs=[*args.files, *(args.steps or ())],
        )
    except FileExistsError as e:
        raise CLIError(str(e)) from None
    runs = [r for f in args.steps or () for r in read_steps(f)]  # file:line errors
    harness = _validate_step_files(args, runs)
    workload = _step_workload(args, runs) if runs and not harness else None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", CalibrationWarning)
        if args.files:
            profile = calibrate(
                args.files,
                prior_preset=args.prior_preset,
                statistic=args.statistic,
                holdout=args.holdout,
                n_regimes=args.regimes,
                seed=args.seed,
                progress=sys.stderr.isatty() and not args.json,
                in_place=args.in_place.replace("-", "_"),
            )
        else:
            network, device = parse_prior_preset(args.prior_preset)
            try:
                profile = Profile.from_preset(network, device)
            except ValueError as e:
                raise UsageError(f"--preset/--device: {e}") from None
        if args.host_links is not None:  # topology: no microbenchmark or step measures it
            profile.params = profile.params.with_host_links(args.host_links)
        if harness:
            from tuner.validation import fit_step_records

            start = profile
            for steps in harness:  # one model after another, reported against the start
                profile = fit_step_records(profile, steps, reference=start)
        elif runs:
            profile = fit_steps(runs, workload, profile)
    try:
        profile.save(out, overwrite=args.overwrite)
    except FileExistsError as e:
        raise CLIError(str(e)) from None
    for w in caught:
        if issubclass(w.category, CalibrationWarning):
            print(f"ddltune {NAME}: warning: {w.message}", file=sys.stderr)
    if args.json:
        print_json(_summary(profile, out))
        return 0
    if args.host_links is not None:
        links = args.host_links
        print(
            f"host links per node: {links} (--host-links; ps_host puts ⌈ranks per node / "
            f"{links}⌉ GPUs on each link to the host)\n"
        )
    if not args.files:
        _print_steps(profile)
        print(f"\nwrote {out}")
    else:
        _print_text(profile, out, steps=bool(runs))
    return 0


def _summary(profile, out: Path) -> dict:
    v = profile.validation
    return {
        "output": str(out),
        "reliable": profile.reliable,
        "heldout_p90": profile.heldout_p90,
        "n_regimes": profile.params.n_regimes,
        "host_links": profile.params.host_links,
        "prior": profile.prior.get("preset"),
        "fit": {k: profile.fit.get(k) for k in ("statistic", "regime_selection", "points")},
        "train": v.get("train"),
        "heldout": v.get("heldout"),
        "series": v.get("series", []),
        "worst": v.get("worst", []),
        "measured_ranges": profile.measured_ranges,
        "parameters": profile.parameter_table(),
        "warnings": profile.warnings,
        "notes": profile.notes,
        "steps": _steps_summary(profile),
    }


def _steps_summary(profile) -> dict | None:
    """The step fit for --json: rows as fitted, each term also in SI units with its 90% interval."""
    st = profile.fit.get("steps")
    if not st:
        return None
    out = dict(st)
    out["terms"] = {}
    for leaf, t in st["terms"].items():
        lo, v, hi = _term_values(leaf, t)
        shown = _STEP_TERM_SHOWN[leaf]
        out["terms"][leaf] = dict(
            t, name=shown[2], si_value=v, si_low=lo, si_high=hi, unit=shown[3]
        )
    return out


def _term_values(leaf: str, t: dict) -> tuple[float, float, float]:
    """(low, value, high) of a step term in SI units: the 90% interval of its posterior."""
    import math

    z = 1.6448536269514722  # the normal quantile of 95%
    x = [t["value"] - z * t["posterior_sd"], t["value"], t["value"] + z * t["posterior_sd"]]
    if leaf.startswith("logit_"):
        return tuple(1.0 / (1.0 + math.exp(-v)) for v in x)
    return tuple(math.exp(v) for v in x)


#: How a step term is shown: its physical name, unit and the transform of its leaf.
_STEP_TERM_SHOWN = {
    "log_flops": ("compute throughput", "FLOP/s", "flops_per_s", "FLOP/s"),
    "log_step_overhead": ("per-step overhead", "s", "step_overhead_s", "s"),
    "logit_interference": ("backward slowdown under overlap", "", "overlap_interference", "1"),
    "log_step_comm": ("communication in a step / microbenchmark", "x", "step_comm_factor", "1"),
    "logit_backward_hide": ("backward a ps/p2p exchange hides behind", "", "backward_hide", "1"),
}


def _print_steps(profile) -> None:
    """The runs (measured against fitted) and the step terms, with what the runs identify."""
    from tuner import format_percent

    st = profile.fit["steps"]
    rows = [["run", "architecture", "workers", "per node", "bucket", "batch", "measured",
             "fitted", "error"]]  # fmt: skip
    for r in st["rows"]:
        arch = r["architecture"]
        if arch in ("ps", "hybrid", "ps_host"):  # which servers (validate's label)
            k = int(r.get("servers") or 1)
            arch += f" k={k} ({'colocated' if r.get('colocated') else 'dedicated'})"
        bb = r.get("bucket_bytes") or 0
        rows.append(
            [
                f"{r['file']}:{r['line']}",
                arch,
                str(r["workers"]),
                str(r["ranks_per_node"]),
                format_bytes(bb) if bb else "per tensor",
                str(r["batch_size"]),
                format_seconds(r["measured_s"]),
                format_seconds(r["fitted_s"]),
                f"{100 * (r['fitted_s'] / r['measured_s'] - 1):+.1f}%",
            ]
        )
    print(f"training runs fitted: {st['runs']} (step time per run)")
    _table(rows)
    rows = [["term", "value", "90% interval", "prior", "identified by the runs"]]
    for leaf, t in st["terms"].items():
        name, unit = _STEP_TERM_SHOWN[leaf][:2]

        def show(v, unit=unit, leaf=leaf):
            if leaf.startswith("logit_"):
                return format_percent(v)
            if unit == "x":
                return f"{v:.3g}×"
            return format_seconds(v) if unit == "s" else f"{v / 1e12:.3g} TFLOP/s"

        lo, v, hi = _term_values(leaf, t)
        prior = _term_values(leaf, dict(t, value=t["prior"], posterior_sd=0.0))[1]
        ident = "yes" if t["identified"] else "no"
        rows.append([name, show(v), f"{show(lo)} – {show(hi)}", show(prior), ident])
    print(
        "\nstep terms (identified by the runs: they pin it down to about ±16% and to under "
        "half its prior's spread, which for a term the microbenchmarks already identified "
        "they seldom do; a term they do not identify may still move, within its interval):"
    )
    _table(rows)
    print(step_interval_text(step_residual_half_width(profile), profile.steps_set_spread, True))


def step_residual_half_width(profile) -> float:
    """The residual part of a step's 90% interval as a half-width: sinh(z·s), s = residual_sd.

    The same measure as ``validate``'s median half-width, (high − low) / 2 over the
    prediction, of a band with no parameter uncertainty.
    """
    from statistics import NormalDist

    return math.sinh(NormalDist().inv_cdf(0.95) * profile.residual_sd(0.9))


def step_interval_text(half_width: float, from_runs: bool, runs: bool) -> str:
    """The line saying what a step prediction's 90% interval is made of (calibrate, show).

    Args:
        half_width: the residual part, a half-width as a fraction of the step.
        from_runs: whether the fitted training runs set it
            (:attr:`calibration.Profile.steps_set_spread`).
        runs: whether the profile was fitted on training runs at all.
    """
    if from_runs:
        why = "what the step fit leaves"
    elif runs:
        why = (
            "the microbenchmarks' held-out misses (the runs have fewer than two worker counts "
            "to show how the model's miss changes with the count)"
        )
    else:
        why = "the microbenchmarks' held-out misses"
    return (
        f"90% interval of a step: half-width {100 * half_width:.1f}% from {why}, plus the "
        "parameters' uncertainty"
    )


def _series_label(s: dict) -> str:
    from calibration import series_label

    return series_label(s, always_ranks_per_node=True)


def _table(rows: list[list[str]]) -> None:
    from tuner import format_table

    print("\n".join(format_table(rows[1:], head=rows[0], right=range(1, len(rows[0])))))


#: What a series' name says (printed under the table; a new user asked what "n=2 g=2" was).
_SERIES_LEGEND = (
    "(n: ranks in the collective or processes computing at once; g: ranks per node; errors "
    "are |predicted/measured − 1| over the series' sizes)"
)


def _value(row: dict) -> str:
    unit, v = row["unit"], row["value"]
    if unit == "s":
        return format_seconds(v)
    if unit == "s/byte":  # as the bandwidth 1/β, in a unit that keeps 3 digits
        bw = float(f"{1.0 / v:.3g}")  # rounded first: 999.6 MB/s reads 1.00 GB/s

        def digits(x: float) -> str:  # 3 significant digits, kept: 21.0, 1.00; 897, not "897."
            return f"{x:#.3g}".removesuffix(".")

        for scale, name in ((1e9, "GB/s"), (1e6, "MB/s"), (1e3, "kB/s")):
            if bw >= scale:
                return f"{digits(bw / scale)} {name}"
        return f"{digits(bw)} B/s"
    if unit == "FLOP/s":
        return f"{v / 1e9:.3g} GFLOP/s"
    if unit == "bytes":
        return format_bytes(v)
    return f"{v:.3g}"


def _print_text(profile, out: Path, steps: bool = False) -> None:
    from tuner import format_percent

    fit, v = profile.fit, profile.validation
    pts = fit.get("points", {})
    sel = fit.get("regime_selection", {})
    scores = ", ".join(
        f"{k}: {format_percent(s)}" for k, s in (sel.get("scores") or {}).items() if s is not None
    )
    asked, used = fit.get("statistic"), fit.get("statistics_used") or {}
    stat = f"statistic {asked}"
    if used and set(used) != {asked}:  # records without it fall back (nccl-tests: the mean)
        stat += " (used: " + ", ".join(f"{k} for {n}" for k, n in used.items()) + ")"
    print(
        f"fitted {plural(pts.get('train', 0), 'point')}, held out {pts.get('heldout', 0)}, "
        f"of {pts.get('collective', 0)} collective and {pts.get('compute', 0)} compute "
        f"records; {stat}; prior {profile.prior.get('preset')}"
    )
    from calibration import emulated_spec

    emulated = list(filter(None, map(emulated_spec, profile.provenance.get("emulated") or [])))
    if emulated:
        print(
            f"measured in the emulated cluster {', '.join(emulated)} (namespaces and shaped "
            "links on one machine): the profile describes it, not a real cluster"
        )
    print(
        f"regimes per collective: {profile.params.n_regimes}"
        + (
            f" (chosen on inner folds; mean abs. error by regime count: {scores})"
            if scores and "—" not in scores
            else ""
        )
    )
    print()
    rows = [["series", "train", "median", "p90", "held out", "median", "p90"]]
    for s in v.get("series", []):
        tr, ho = s["train"], s["heldout"]
        rows.append(
            [
                _series_label(s),
                str(tr["points"]),
                format_percent(tr["median"]),
                format_percent(tr["p90"]),
                str(ho["points"]),
                format_percent(ho["median"]),
                format_percent(ho["p90"]),
            ]
        )
    tr, ho = v.get("train", {}), v.get("heldout", {})
    rows.append(
        [
            "all",
            str(tr.get("points", 0)),
            format_percent(tr.get("median")),
            format_percent(tr.get("p90")),
            str(ho.get("points", 0)),
            format_percent(ho.get("median")),
            format_percent(ho.get("p90")),
        ]
    )
    _table(rows)
    print(_SERIES_LEGEND)
    worst = [w for w in v.get("worst", []) if w["heldout"]][:3]
    if worst:
        print("\nworst held-out points:")
        for w in worst:
            size = (
                format_bytes(w["size"])
                if w.get("kind") == "collective"
                else f"{w['size']:.3g} FLOP"
            )
            print(
                f"  {w['file']}:{w['line']}  {_series_label(w)} {size}: measured "
                f"{format_seconds(w['measured_s'])}, predicted {format_seconds(w['predicted_s'])} "
                f"({100 * w['error']:+.1f}%)"
            )
    table = profile.parameter_table()
    ident = [r for r in table if r["identified"]]
    print(
        f"\nparameters the data identify ({len(ident)} of {len(table)}; 90% interval; "
        "s/byte ones shown as their bandwidth 1/β):"
    )
    rows = [["name", "value", "low", "high"]]
    for r in ident:
        lo, hi = dict(r, value=r["low"]), dict(r, value=r["high"])
        if r["unit"] == "s/byte":  # shown as a bandwidth: the ends swap
            lo, hi = hi, lo
        rows.append([r["name"], _value(r), _value(lo), _value(hi)])
    if len(rows) > 1:
        _table(rows)
    if any(r["name"] == "conv_efficiency" for r in ident):
        print("(conv_efficiency: a convolution's FLOP rate / flops_per_s, 1 = a matmul's rate)")
    if any(r["name"] == "conv_backward_efficiency" for r in ident):
        print(
            "(conv_backward_efficiency: a convolution's backward FLOP rate / its forward rate, "
            "1 = the same)"
        )
    if any(r["name"].startswith(("cache_bytes", "cache_excess")) for r in ident):
        from tuner import CACHE_NOTE

        print(f"({CACHE_NOTE})")
    gemm = next((r for r in table if r["name"] == "gemm_half_dim"), None)
    if gemm is not None and "log_gemm_half" in profile.fit.get("free_leaves", ()):
        print(
            f"(gemm_half_dim: a matrix product whose smallest dimension is m runs at "
            f"m / (m + {gemm['value']:.3g}) of flops_per_s; 90%: {gemm['low']:.3g}–"
            f"{gemm['high']:.3g} elements"
            + ("" if gemm["identified"] else ", not pinned down")
            + ")"
        )
    frozen = len(profile.leaf_names) - len(profile.fit.get("free_leaves", profile.leaf_names))
    print(
        f"the other {len(table) - len(ident)} are not pinned down (90% interval wider than "
        f"about ±16%); {frozen} of the fit's {len(profile.leaf_names)} internal parameters (those "
        f"no measurement depends on) stay exactly at the prior {profile.prior.get('preset')}; "
        "'ddltune show' lists them all"
    )
    for note in profile.notes:
        print(f"note: {note}")
    if steps:
        print()
        _print_steps(profile)
    state = "reliable" if profile.reliable else "UNRELIABLE"
    measured = bool((profile.measured_ranges or {}).get("message_bytes"))
    if measured and profile.heldout_p90 != profile.heldout_p90:  # NaN: nothing held out
        print(
            f"\nwrote {out} (untested: no point was held out, so no error was measured "
            "out of sample; measure more sizes per series, or read the 90% intervals)"
        )
        return
    print(f"\nwrote {out} ({state}; held-out p90 {format_percent(profile.heldout_p90)})")
