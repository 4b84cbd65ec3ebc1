"""``ddltune calibrate``: fit a profile (parameters with uncertainty) to measurement files."""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

from calibration import STATISTICS
from costmodel import format_bytes, format_seconds

from ._common import CLIError, plural, print_json

NAME = "calibrate"
HELP = "fit cluster parameters (with uncertainty and held-out accuracy) to measurements"
#: Set by :func:`tuner.cli.main`: fit in float64 (the library also works in float32).
X64 = True
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
  ddltune calibrate m.jsonl -o p.json --regimes 2 --holdout 0.33 --overwrite --json"""


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
        nargs="+",
        metavar="M.jsonl",
        help="measurement files (JSON Lines, schema v1) from 'ddltune collect' or "
        "'ddltune import-nccl-tests'; all are fitted together",
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


def run(args: argparse.Namespace) -> int:
    """Fit, write the profile atomically, print a summary (or JSON)."""
    from calibration import CalibrationWarning, calibrate, check_output_file

    try:  # a link, a device node, a read-only folder: refused before the fit
        out = check_output_file(args.output, overwrite=args.overwrite, what="-o")
    except FileExistsError as e:
        raise CLIError(str(e)) from None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", CalibrationWarning)
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
    try:
        profile.save(out, overwrite=args.overwrite)
    except FileExistsError as e:
        raise CLIError(str(e)) from None
    for w in caught:
        if issubclass(w.category, CalibrationWarning):
            print(f"ddltune {NAME}: warning: {w.message}", file=sys.stderr)
    if args.json:
        print_json(_summary(profile, out))
    else:
        _print_text(profile, out)
    return 0


def _summary(profile, out: Path) -> dict:
    v = profile.validation
    return {
        "output": str(out),
        "reliable": profile.reliable,
        "heldout_p90": profile.heldout_p90,
        "n_regimes": profile.params.n_regimes,
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
    }


def _series_label(s: dict) -> str:
    what = s.get("collective") or s.get("op")
    return f"{what} n={s['num_ranks']} g={s['ranks_per_node']}"


def _table(rows: list[list[str]]) -> None:
    from tuner import format_table

    print("\n".join(format_table(rows[1:], head=rows[0], right=range(1, len(rows[0])))))


def _value(row: dict) -> str:
    unit, v = row["unit"], row["value"]
    if unit == "s":
        return format_seconds(v)
    if unit == "s/byte":
        return f"{1e-9 / v:.3g} GB/s"
    if unit == "FLOP/s":
        return f"{v / 1e9:.3g} GFLOP/s"
    if unit == "bytes":
        return format_bytes(v)
    return f"{v:.3g}"


def _print_text(profile, out: Path) -> None:
    from tuner import format_percent

    fit, v = profile.fit, profile.validation
    pts = fit.get("points", {})
    sel = fit.get("regime_selection", {})
    scores = ", ".join(
        f"{k}: {format_percent(s)}" for k, s in (sel.get("scores") or {}).items() if s is not None
    )
    print(
        f"fitted {plural(pts.get('train', 0), 'point')}, held out {pts.get('heldout', 0)} "
        f"({pts.get('collective', 0)} collective, {pts.get('compute', 0)} compute); "
        f"statistic {fit.get('statistic')}; prior {profile.prior.get('preset')}"
    )
    print(
        f"regimes per collective: {profile.params.n_regimes}"
        + (f" (inner-fold mean abs. error {scores})" if scores and "—" not in scores else "")
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
    print(f"\nparameters the data identify ({len(ident)} of {len(table)}; 90% interval):")
    rows = [["name", "value", "low", "high"]]
    for r in ident:
        lo, hi = dict(r, value=r["low"]), dict(r, value=r["high"])
        if r["unit"] == "s/byte":  # shown as a bandwidth: the ends swap
            lo, hi = hi, lo
        rows.append([r["name"], _value(r), _value(lo), _value(hi)])
    if len(rows) > 1:
        _table(rows)
    frozen = len(profile.leaf_names) - len(profile.fit.get("free_leaves", profile.leaf_names))
    print(
        f"the other {len(table) - len(ident)} are not pinned down (90% interval wider than "
        f"about ±16%); {frozen} of the {len(profile.leaf_names)} unconstrained leaves (those no "
        f"measurement depends on) stay exactly at the prior {profile.prior.get('preset')}; "
        "'ddltune show' lists them all"
    )
    for note in profile.notes:
        print(f"note: {note}")
    state = "reliable" if profile.reliable else "UNRELIABLE"
    print(f"\nwrote {out} ({state}; held-out p90 {format_percent(profile.heldout_p90)})")
