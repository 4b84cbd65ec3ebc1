"""``ddltune validate``: train a real model with each architecture and hold the profile's predictions against it."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from typing import TYPE_CHECKING

from costmodel import format_choices

from ..validation import DEFAULT_VALIDATE_BUCKETS
from ._common import (
    CLIError,
    UsageError,
    bytes_list_arg,
    int_list_arg,
    name_list_arg,
    positive_float_arg,
    positive_int_arg,
    print_json,
    safe_text,
)
from ._lab import add_emulate_argument, emulated

if TYPE_CHECKING:
    from ..validation import ValidationResult

NAME = "validate"
HELP = (
    "train a real model with PS, P2P, ring or hierarchical all-reduce and compare with the "
    "predictions"
)
DESCRIPTION = """\
Run real synchronous data-parallel training on local jax.distributed CPU
processes — an equinox MLP or small CNN, SGD with momentum, gradients
exchanged by a parameter server (k servers, dedicated or --colocated),
peer-to-peer (all_to_all, shard update, all_gather), ring all-reduce
(one all-reduce per bucket of at most --bucket-bytes) or hierarchical
all-reduce (each bucket reduce-scattered within the node, all-reduced across
nodes, all-gathered within the node) — for every architecture
x worker count x bucket size (x servers), one launch per worker count. Each
configuration's steps are timed (slowest rank, warm-up excluded; --repeats
interleaved rounds) and written as kind 'step' measurement records; the
single-worker step of the same model, measured before and after the rest,
gives the predictions their compute time.

Then each configuration is predicted with the profile and the table shows the
measured and predicted iteration time and the error, followed by the MAPE,
Kendall's tau over the pairs whose measured times differ by more than their
spread (step-time IQR), and the regret of the configuration the tuner would
pick among them (lowest predicted time per sample): its measured time per
sample / the best measured - 1. Measured time is the p10 of the steps on CPU
(what the calibration fits), the median on GPU.

On CPU the ring is predicted without overlap of backward and communication:
XLA:CPU runs a program's collectives and compute in sequence (--overlap yes
predicts with the overlapped ring anyway).

The profile should cover what the runs use: measure with
'ddltune collect --workers 2,3,4,5 --max-bytes 4M' for the defaults (every
process count, dedicated servers included, and messages up to the model's
gradient, 3.6 MiB for the default MLP); a process count or size the profile
never measured is extrapolated, and the output says so."""
EPILOG = """\
examples:
  ddltune validate --profile profile.json --workers 2,3,4 --model mlp
  ddltune validate --profile profile.json --workers 2 --arch ring,ps --servers 1,2 --colocated \\
      --bucket-bytes 0,1M,16M --steps 30 --measurements steps.jsonl --json
  ddltune validate --profile profile2.json --from steps.jsonl   # re-score saved steps
  ddltune validate --emulate 4x2@200mbit --profile p.json --workers 8 \\
      --arch ring,hierarchical --bucket-bytes 16M   # 2 ranks per emulated node
"""

_STATISTICS = ("p10", "median", "min", "mean")
_ARCHS = ("ps", "p2p", "ring", "hierarchical")
_DEFAULT_ARCHS = ("ps", "p2p", "ring")


def _size_arg(text: str) -> dict:
    out = {}
    for part in (p.strip() for p in str(text).split(",")):
        if not part:
            continue
        key, sep, value = part.partition("=")
        if not sep:
            raise argparse.ArgumentTypeError(
                f"expected KEY=VALUE[,KEY=VALUE…] such as width=256,depth=2, got {text!r}"
            )
        try:
            out[key.strip().replace("-", "_")] = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"model size {key.strip()!r} must be an integer, got {value!r}"
            ) from None
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``ddltune validate``.

    Long because it declares one option per line, each with its help; nothing to split.
    """
    add_emulate_argument(parser)
    parser.add_argument(
        "--profile", required=True, metavar="FILE", help="fitted profile (ddltune calibrate)"
    )
    parser.add_argument(
        "--workers",
        type=int_list_arg,
        default=None,
        metavar="N[,N…]",
        help="worker counts, each ≥ 2 (default 2,3,4; with --from: only these rows)",
    )
    parser.add_argument(
        "--model", choices=("mlp", "cnn"), default="mlp", help="model to train (default mlp)"
    )
    parser.add_argument(
        "--size",
        type=_size_arg,
        default={},
        metavar="KEY=N[,…]",
        help="model sizes: mlp in, width, depth, classes, batch_size (default 784, 512, 3, 10, "
        "32); cnn image, in_channels, channels, depth, kernel, classes, batch_size "
        "(default 16, 3, 32, 3, 3, 10, 16); batch_size is per worker",
    )
    parser.add_argument(
        "--arch",
        type=name_list_arg,
        default=None,
        metavar="NAME[,NAME…]",
        help="architectures among ps, p2p, ring, hierarchical (the ring's buckets all-reduced "
        "within each node, across nodes, then gathered within the node: with --emulate "
        "NODESxRANKS, RANKS ≥ 2) (default ps,p2p,ring; with --from: only these rows)",
    )
    parser.add_argument(
        "--servers",
        type=int_list_arg,
        default=[1],
        metavar="K[,K…]",
        help="parameter servers for ps (default 1)",
    )
    parser.add_argument(
        "--colocated",
        action="store_true",
        help="ps servers run on workers 0…k−1 (default: k extra processes that only "
        "aggregate and update)",
    )
    parser.add_argument(
        "--bucket-bytes",
        type=bytes_list_arg,
        default=list(DEFAULT_VALIDATE_BUCKETS),
        metavar="SIZE[,SIZE…]",
        help="gradient bucket caps, bytes; 0 = one bucket per tensor; suffixes K, M, G "
        "(default 0,1536K,16M)",
    )
    parser.add_argument(
        "--steps",
        type=positive_int_arg,
        default=10,
        metavar="N",
        help="timed steps per configuration and round (default 10)",
    )
    parser.add_argument(
        "--warmup-steps",
        type=int,
        default=2,
        metavar="N",
        help="untimed steps per configuration and round first (default 2)",
    )
    parser.add_argument(
        "--repeats",
        type=positive_int_arg,
        default=3,
        metavar="R",
        help="timing rounds over all configurations of a launch, interleaved so that other "
        "load spreads over all of them; the single-worker step runs before and after the rest "
        "(default 3)",
    )
    parser.add_argument(
        "--measurements",
        default=None,
        metavar="OUT.jsonl",
        help="also write every step as a measurement record (kind 'step', schema v1)",
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="replace an existing --measurements file"
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="start more local training processes than 4 per CPU core (refused otherwise, "
        "before anything starts: they would only time the scheduler)",
    )
    parser.add_argument(
        "--from",
        dest="from_file",
        default=None,
        metavar="FILE",
        help="do not train: compare the step records of FILE (a --measurements output); "
        "--workers and --arch select rows, the training options do not apply",
    )
    parser.add_argument(
        "--statistic",
        choices=_STATISTICS,
        default=None,
        help="statistic of the step samples to compare (default p10 on CPU, median on GPU)",
    )
    parser.add_argument(
        "--overlap",
        choices=("auto", "yes", "no"),
        default="auto",
        help="predict the ring with overlap of backward and all-reduce: auto = not on CPU "
        "(default auto)",
    )
    parser.add_argument(
        "--timeout-s",
        type=positive_float_arg,
        default=180.0,
        metavar="SECONDS",
        help="a worker silent this long (compiling included) stops the run (default 180)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress lines on stderr")
    parser.add_argument(
        "--json",
        action="store_true",
        help='print one JSON document: {"rows": [...], "mape", "kendall_tau", "regret", …} '
        "(fractions, not percents)",
    )


def format_table(result: ValidationResult) -> str:
    """The per-configuration table and the summary lines."""
    rows = result.rows
    out = []
    if rows:
        r0 = rows[0]
        out.append(
            f"# {r0.model}, batch {r0.batch_size} per worker; single-worker step "
            f"{result.baseline_step_s * 1e3:.3f} ms; time = {result.statistic} of the steps; "
            f"ring predicted {'with' if result.overlap else 'without'} overlap"
        )
    wb = max([10] + [len(r.bucket_label) for r in rows])
    out.append(
        f"# {'architecture':<22} {'workers':>7} {'procs/node':>10} {'bucket':>{wb}} "
        f"{'measured(ms)':>12} {'iqr(ms)':>8} {'predicted(ms)':>13} {'90% interval(ms)':>17} "
        f"{'error':>7}"
    )
    for i, r in enumerate(rows):
        mark = (" <- picked" if i == result.chosen else "") + (
            " <- best measured" if i == result.best else ""
        )
        interval = (
            f"{r.interval_low_s * 1e3:.2f}-{r.interval_high_s * 1e3:.2f}"
            if r.interval_low_s == r.interval_low_s
            else "-"
        )
        out.append(
            f"  {r.label:<22} {r.workers:>7d} {r.ranks_per_node:>10d} {r.bucket_label:>{wb}} "
            f"{r.measured_s * 1e3:>12.3f} {r.spread_s * 1e3:>8.3f} {r.predicted_s * 1e3:>13.3f} "
            f"{interval:>17} {r.error * 100:>+6.1f}%{mark}"
        )
    by_n = ", ".join(f"{n} workers {v * 100:.1f}%" for n, v in result.mape_by_workers.items())
    used, total = result.tau_pairs
    if result.step_fit_note:
        out.append(f"# predictions: {result.step_fit_note}")
    out.append(f"MAPE {result.mape * 100:.1f}% ({by_n}) over {len(rows)} configurations")
    if result.interval_coverage == result.interval_coverage:
        out.append(
            f"the profile's 90% prediction interval holds {result.interval_coverage * 100:.0f}% "
            f"of the measured times (median half-width {result.interval_half_width * 100:.1f}% "
            "of the prediction)"
        )
    every = result.kendall_tau_all
    every = f"{every:.3f}" if every == every else "n/a"  # NaN: fewer than two configurations
    out.append(
        f"Kendall tau {result.kendall_tau:.3f} over {used} of {total} pairs whose measured times "
        f"differ by more than their spread (all pairs: {every})"
        if used
        else f"Kendall tau n/a: none of {total} pairs' measured times differ by more than their "
        f"spread (all pairs: {every})"
    )
    if rows:
        c, b = rows[result.chosen], rows[result.best]
        out.append(
            f"regret {result.regret * 100:.1f}%: the model picks {c.label} at {c.workers} workers, "
            f"bucket {c.bucket_label}; best measured per sample: {b.label} at "
            f"{b.workers} workers, bucket {b.bucket_label}"
        )
        within = ", ".join(
            f"{n} workers {v * 100:.1f}%" for n, v in result.regret_by_workers.items()
        )
        out.append(f"regret within each worker count (iteration time): {within}")
    out.extend(f"warning: {w}" for w in result.warnings)
    return "\n".join(out) + "\n"


def run(args: argparse.Namespace) -> int:
    """Train (in an emulated cluster with ``--emulate``), predict, compare; see :func:`_run`."""
    for a in args.arch or ():
        if a not in _ARCHS:
            raise UsageError(
                f"--arch: unknown architecture {a!r}; valid: {format_choices(_ARCHS, a)}"
            )
    if args.from_file is not None:
        given = [opt for opt, v in (("--measurements", args.measurements),
                                    ("--emulate", args.emulate)) if v]  # fmt: skip
        if given:
            raise UsageError(
                f"{' and '.join(given)} belong{'' if len(given) > 1 else 's'} to training; "
                f"--from re-scores the steps of "
                f"{args.from_file} without training, so nothing would be "
                + ("written" if "--measurements" in given else "emulated")
            )
        return _run(args)
    # the plan, before the namespaces (or any process, or the step file) exist
    from ..validation import check_validation_plan

    _check_workers(args.workers or [2, 3, 4])
    spec = None
    if args.emulate:
        from ._lab import parse_spec

        spec = parse_spec(args.emulate)
    try:
        check_validation_plan(
            args.workers or [2, 3, 4],
            architectures=args.arch or list(_DEFAULT_ARCHS),
            servers=args.servers,
            colocated=args.colocated,
            bucket_bytes=args.bucket_bytes,
            emulated_ranks=None if spec is None else spec.num_ranks,
            emulate_text=None if spec is None else spec.text,
            force=args.force,
            ranks_per_node=None if spec is None else spec.ranks_per_node,
            model={"model": args.model, **(args.size or {})},
        )
    except ValueError as e:
        raise UsageError(str(e)) from None
    if "hierarchical" in (args.arch or ()):
        _note_flat_hierarchical(args.workers or [2, 3, 4], spec)
    with emulated(args) as cluster:  # removed on the way out, whatever happens
        args.emulate_cluster = cluster
        return _run(args)


def _note_flat_hierarchical(workers, spec) -> None:
    """Say where a hierarchical all-reduce has only one of its two levels."""
    per = spec.ranks_per_node if spec is not None else None
    if per is None:
        print("note: without --emulate every rank is on this host, so the hierarchical "
              "all-reduce has no inter-node stage (it is the intra-node one)", file=sys.stderr)  # fmt: skip
        return
    if per == 1:
        print(f"note: {spec.text} has 1 rank per node, so the hierarchical all-reduce has no "
              "intra-node stage (it is the ring across nodes)", file=sys.stderr)  # fmt: skip
    for n in workers:
        if per > 1 and n <= per:
            print(f"note: {n} workers fill one node of {spec.text}: the hierarchical "
                  "all-reduce there has no inter-node stage", file=sys.stderr)  # fmt: skip


def _check_workers(workers) -> None:
    if min(workers) < 2:
        raise UsageError(f"--workers must be ≥ 2 each, got {workers}")


def _run(args: argparse.Namespace) -> int:
    """Train, predict and compare (or re-score ``--from`` FILE); print the table or ``--json``."""
    from ..validation import compare_steps

    overlap = {"auto": "auto", "yes": True, "no": False}[args.overlap]
    if args.from_file is not None:
        from calibration import read_records

        records = read_records(args.from_file)
        if args.workers is not None or args.arch is not None:
            keep_n = set(args.workers or ()) | {1}  # the single-worker step stays
            before = [r for r in records if r.get("kind") == "step" and r.get("workers", 0) >= 2]
            records = [
                r
                for r in records
                if r.get("kind") != "step"
                or r.get("workers") == 1
                or (
                    (args.workers is None or r.get("workers") in keep_n)
                    and (args.arch is None or r.get("architecture") in args.arch)
                )
            ]
            if before and not any(
                r.get("kind") == "step" and r.get("workers", 0) >= 2 for r in records
            ):
                ws = ", ".join(str(w) for w in sorted({r.get("workers") for r in before}))
                archs = ", ".join(sorted({str(r.get("architecture")) for r in before}))
                asked = " and ".join(
                    f"--{k} {','.join(map(str, v))}"
                    for k, v in (("workers", args.workers), ("arch", args.arch))
                    if v is not None
                )
                verb = "select" if " and " in asked else "selects"
                raise UsageError(
                    f"{asked} {verb} none of the {len(before)} step records of "
                    f"{args.from_file} (workers {ws}; architectures {archs})"
                )
        result = compare_steps(args.profile, records, statistic=args.statistic, overlap=overlap)
    else:
        args.workers = args.workers or [2, 3, 4]
        args.arch = args.arch or list(_DEFAULT_ARCHS)
        _check_workers(args.workers)
        if args.warmup_steps < 0:
            raise UsageError(f"--warmup-steps must be ≥ 0, got {args.warmup_steps}")
        spec = {"model": args.model, **args.size}
        progress = not args.no_progress
        from tuner.validation import bucket_text  # here: building the parser stays free of jax

        def show(m) -> None:
            if progress:
                c = m.config
                what = c.architecture + (
                    f" k={c.servers} {'colocated' if c.colocated else 'dedicated'}"
                    if c.architecture == "ps"
                    else ""
                )
                bucket = bucket_text(c.bucket_bytes, m.record.get("same_buckets_at") or ())
                print(
                    f"ddltune validate: {m.workers} worker(s) {what} bucket "
                    f"{bucket}: {m.time_s['p10'] * 1e3:.3f} ms p10, "
                    f"{m.time_s['median'] * 1e3:.3f} ms median",
                    file=sys.stderr,
                    flush=True,
                )

        if args.measurements and os.path.exists(args.measurements) and not args.overwrite:
            if os.path.getsize(args.measurements) > 0:
                raise CLIError(
                    f"{args.measurements} already exists; pass --overwrite to replace it or "
                    "choose another --measurements file"
                )
        if args.measurements is None:  # the rows are kept as they finish, always
            args.measurements = time.strftime("validate-steps-%Y%m%d-%H%M%S.jsonl", time.gmtime())
            print(
                f"ddltune validate: step records go to {args.measurements} as they finish "
                "(--measurements FILE to choose)",
                file=sys.stderr,
            )
        with _partial_on_failure(args):
            result = _train(args, spec, overlap, show)
    if args.json:
        print_json(result.to_dict())
    else:
        sys.stdout.write(format_table(result))
    return 0


def _train(args, spec, overlap, show):
    from ..validation import validate

    return validate(
        args.profile,
        spec,
        args.workers,
        architectures=args.arch,
        servers=args.servers,
        colocated=args.colocated,
        bucket_bytes=args.bucket_bytes,
        steps=args.steps,
        warmup_steps=args.warmup_steps,
        repeats=args.repeats,
        measurements=args.measurements,
        overwrite=args.overwrite,
        statistic=args.statistic,
        overlap=overlap,
        timeout_s=args.timeout_s,
        on_measurement=show,
        emulate=getattr(args, "emulate_cluster", None),
        force=args.force,
    )


@contextlib.contextmanager
def _partial_on_failure(args):
    """On a failure (or Ctrl-C) after some steps finished: print what they show, name the file.

    The records are already in ``args.measurements`` (written as each
    configuration finished, with the single-worker step added on the failure);
    they are scored as ``--from`` would, and printed (the table, or the JSON
    document with ``"partial": true`` and ``"error"``), before the error line.
    """
    try:
        yield
    except Exception as e:
        if isinstance(e, UsageError) or not _print_partial(args, e):
            raise
        raise CLIError(
            f"{safe_text(e)}; the steps that finished are kept in {args.measurements} "
            f"(score them: ddltune validate --profile {args.profile} --from {args.measurements})"
        ) from e
    except KeyboardInterrupt as e:
        if _print_partial(args, e):
            print(
                f"ddltune validate: the steps that finished are kept in {args.measurements} "
                f"(score them: ddltune validate --profile {args.profile} --from "
                f"{args.measurements})",
                file=sys.stderr,
            )
        raise


def _print_partial(args, error) -> bool:
    """Score and print the finished steps of ``args.measurements``; False when there are none."""
    from calibration import read_records

    from ..validation import compare_steps

    try:
        records = read_records(args.measurements)
        overlap = {"auto": "auto", "yes": True, "no": False}[args.overlap]
        result = compare_steps(args.profile, records, statistic=args.statistic, overlap=overlap)
    except Exception:  # nothing finished, or no configuration beyond the baseline
        return False
    if args.json:
        print_json({**result.to_dict(), "partial": True, "error": safe_text(error)})
    else:
        what = "Ctrl-C" if isinstance(error, KeyboardInterrupt) else "the failure"
        print(f"# partial: {len(result.rows)} configurations finished before {what}")
        sys.stdout.write(format_table(result))
    return True
