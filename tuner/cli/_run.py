"""``ddltune run``: the main job — measure this machine, calibrate, recommend, write the report."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from costmodel import format_bytes, format_seconds

from ._common import (
    CLIError,
    UsageError,
    bytes_arg,
    positive_float_arg,
    positive_int_arg,
    print_json,
)

NAME = "run"
HELP = "the main job: measure, calibrate, recommend and write an HTML/Markdown report"
#: Set by :func:`tuner.cli.main`: float64 as 'ddltune calibrate'; compiled
#: programs kept between runs (opt out: DDLTUNE_NO_COMPILATION_CACHE=1).
X64 = True
COMPILATION_CACHE = True
#: The report it writes needs ``pip install 'ddltune[report]'``.
EXTRA = ("report", ("matplotlib", "jinja2"))
DESCRIPTION = """\
Run everything in one go and write a report you can open in a browser:

  1. start local worker processes (2 by default) joined by jax.distributed and
     measure the collectives (all_reduce, reduce_scatter, all_gather,
     all_to_all, sendrecv, parameter-server push and pull; 1 KiB – 16 MiB)
     and the compute kernels — or, with --measurements, read a cluster's
     measurement files (from 'ddltune collect' or 'ddltune import-nccl-tests');
  2. calibrate the cost model on them and print the held-out errors;
  3. recommend the gradient-exchange architecture, worker count and bucket
     size for the model (default resnet50, batch 64 per worker, up to 64
     workers);
  4. write DIR/index.html (opens from disk), DIR/report.md and the figures.

Everything measured and fitted is kept in DIR (measurements.jsonl,
profile.json, recommendation.json with the phase timings), so each step can be
rerun on its own ('ddltune calibrate', 'ddltune recommend', 'ddltune report').

If the profile's held-out error is over the tuner's limit (15% p90) the run
still finishes: the recommendation is forced and the report marks it
UNRELIABLE, with the errors that make it so. A run with 2 local workers takes
a few minutes on a 2-core machine."""
EPILOG = """\
examples:
  # this machine, everything by default: ./ddltune-report/index.html
  ddltune run

  # a cluster's measurements, 8 GPUs per node, BERT-large at 32 per GPU
  ddltune run --measurements cluster.jsonl --model bert_large --batch-size 32 \\
      --ranks-per-node 8 --max-workers 256 --preset ib-hdr-200g,nvlink-a100 --device a100 \\
      -o bert-report

  # imported nccl-tests logs, your own model
  ddltune import-nccl-tests logs/*.txt -o nccl.jsonl
  ddltune run --measurements nccl.jsonl --layers my_model.json -o my-report"""


#: The emulated run the plain run suggests at its end: into its own folder, so that it
#: runs as printed beside the plain run's report (a new user's trial: it was refused,
#: "-o ddltune-report is not empty").
EMULATE_SUGGESTION = "ddltune run --emulate 2x1@100mbit -o ddltune-report-emulated"


def emulate_suggestion() -> str:
    """:data:`EMULATE_SUGGESTION`, with ``--overwrite`` once its folder (relative to the
    current folder) holds files: run as printed, a second time it was refused."""
    folder = Path(EMULATE_SUGGESTION.rsplit(" -o ", 1)[1])
    again = folder.is_dir() and any(folder.iterdir())
    return EMULATE_SUGGESTION + (" --overwrite" if again else "")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``ddltune run``.

    Long because it declares one option per line, each with its help; nothing to split.
    """
    from costmodel import WORKLOAD_NAMES
    from tuner import RUN_DEFAULTS

    src = parser.add_argument_group("measurements")
    from ._lab import add_emulate_argument

    add_emulate_argument(src)
    src.add_argument(
        "--workers",
        type=positive_int_arg,
        default=RUN_DEFAULTS["workers"],
        metavar="N",
        help=f"local worker processes to measure with, ≥ 2 (default {RUN_DEFAULTS['workers']})",
    )
    src.add_argument(
        "--measurements",
        nargs="+",
        metavar="FILE",
        help="skip measuring: use these measurement files (JSON Lines from 'ddltune collect' "
        "on a cluster, or 'ddltune import-nccl-tests')",
    )
    src.add_argument(
        "--max-bytes",
        type=bytes_arg,
        default=RUN_DEFAULTS["max_bytes"],
        metavar="SIZE",
        help="largest message to measure (default 16M; K/M/G are powers of 1024)",
    )
    src.add_argument(
        "--step-factor",
        type=int,
        default=RUN_DEFAULTS["step_factor"],
        metavar="F",
        help="size multiplier between measured messages, an integer ≥ 2 (default "
        f"{RUN_DEFAULTS['step_factor']}: every power of 2, as nccl-tests' -f 2; 4 measures "
        "about 40%% faster and predicts the sizes between less well)",
    )
    src.add_argument(
        "--budget-s",
        "--budget",  # the old spelling, kept; --budget-s as in 'ddltune collect'
        dest="budget",
        type=positive_float_arg,
        default=RUN_DEFAULTS["budget_s"],
        metavar="SECONDS",
        help=f"seconds of repetitions per measured point (default {RUN_DEFAULTS['budget_s']}); "
        "more gives steadier CPU timings",
    )
    prior = parser.add_argument_group("prior (what the measurements cannot tell)")
    prior.add_argument(
        "--preset",
        metavar="NET[,INTRA]",
        help="network preset the calibration falls back on for what was not measured, e.g. "
        "ethernet-10g or ib-hdr-200g,nvlink-a100 (default: chosen from the measured backend)",
    )
    prior.add_argument(
        "--device",
        metavar="NAME",
        help="device preset for the prior: k80, p100, v100, a100, h100, cpu "
        "(default: with --preset, v100; without, chosen from the measurements)",
    )
    wl = parser.add_argument_group("model")
    m = wl.add_mutually_exclusive_group()
    m.add_argument(
        "--model",
        metavar="NAME",
        default=None,
        help=f"a model of the zoo (default {RUN_DEFAULTS['model']}): {', '.join(WORKLOAD_NAMES)}",
    )
    m.add_argument(
        "--layers", metavar="FILE", help="your model as a JSON or CSV layer file (see README)"
    )
    wl.add_argument(
        "--batch-size",
        type=positive_int_arg,
        default=RUN_DEFAULTS["batch_size"],
        metavar="B",
        help=f"samples per worker per step (default {RUN_DEFAULTS['batch_size']})",
    )
    s = parser.add_argument_group("search")
    s.add_argument(
        "--max-workers",
        type=positive_int_arg,
        default=RUN_DEFAULTS["max_workers"],
        metavar="N",
        help=f"the most workers to consider (default {RUN_DEFAULTS['max_workers']})",
    )
    s.add_argument(
        "--ranks-per-node",
        type=positive_int_arg,
        default=None,
        metavar="G",
        help="workers per node of the target cluster (default: as measured: the local "
        "--workers share one node, --emulate NxR has R per node; as recommend and report "
        "take it from a profile)",
    )
    parser.add_argument(
        "--validate",
        action="store_true",
        help="also train a small MLP for real with ps, p2p and ring all-reduce on --workers "
        "local processes and compare each measured step with the prediction (adds a minute "
        "or two; a table in the report, step records in DIR/validation.jsonl); with "
        "--emulate, the seed paper's experiment: the MLP and the CNN, 1 and 2 colocated "
        "servers, 1 dedicated where a rank is left, p2p and ring, at every worker count from "
        "2 to the cluster's ranks (about a minute per model and worker count; a figure in the "
        "report, the CNN's steps in DIR/validation-cnn.jsonl). The measured steps then "
        "calibrate the step terms microbenchmarks cannot see (communication in a step over "
        "its microbenchmark, per-step overhead), so the recommendation's 90%% interval "
        "carries what they measured; profile.json keeps them",
    )
    parser.add_argument(
        "--validate-steps",
        type=positive_int_arg,
        default=5,
        metavar="N",
        help="with --validate: training steps timed per configuration, twice, after 2 "
        "warm-up steps (default 5; fewer is faster and noisier)",
    )
    o = parser.add_argument_group("output")
    o.add_argument(
        "-o",
        "--output",
        default="ddltune-report",
        metavar="DIR",
        help="report folder (default ./ddltune-report); a non-empty folder is refused "
        "unless --overwrite",
    )
    o.add_argument(
        "--overwrite",
        action="store_true",
        help="replace what a previous run left in DIR (its report, data files and logs); "
        "other files there are kept",
    )
    o.add_argument("--no-progress", action="store_true", help="no progress bars (log lines only)")
    o.add_argument(
        "--json",
        action="store_true",
        help="print one JSON document (paths, recommendation, timings) on stdout; progress "
        "stays on stderr",
    )


def _prior(args) -> str | None:
    if args.preset is None and args.device is None:
        return None
    if args.preset is None:
        raise UsageError(
            "--device needs --preset (the network) as well, e.g. --preset ethernet-10g --device cpu"
        )
    import costmodel

    try:  # validate the names now, not after minutes of measuring
        costmodel.preset(args.preset, args.device or "v100")
    except ValueError as e:
        raise UsageError(f"--preset/--device: {e}") from None
    return f"{args.preset}:{args.device or 'v100'}"


def run(args: argparse.Namespace) -> int:
    """Run the main job (in an emulated cluster with ``--emulate``); see :func:`_run`."""
    from ._lab import emulated

    if args.emulate and args.measurements:
        raise UsageError("--emulate measures this machine; it excludes --measurements")
    if args.emulate:  # the plan and -o, before the namespaces exist
        from pathlib import Path

        import tuner

        from ._lab import check_emulated_plan

        _check_run_args(args)
        check_emulated_plan(args.emulate, [], args.max_bytes, force_option=None)  # run has none
        try:
            tuner.check_report_dir(Path(args.output), args.overwrite)
        except FileExistsError as e:
            raise CLIError(f"-o {e}") from None
    with emulated(args) as cluster:  # removed on the way out, whatever happens
        args.emulate_cluster = cluster
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    """Run the main job and print a short summary (or JSON)."""
    import tuner

    _check_run_args(args)
    try:
        res = _run_main_job(args, _prior(args))
    except tuner.InfeasibleError as e:  # not a usage error: the model fits no device
        raise CLIError(str(e)) from None
    if args.json:
        _print_json(res)
    else:
        _print_summary(args, res)
    return 0


def _check_run_args(args: argparse.Namespace) -> None:
    """Refuse option combinations ``ddltune run`` cannot serve, before anything runs."""
    if args.validate and args.measurements:
        raise UsageError(
            "--validate trains on this machine's processes; it cannot check measurements of "
            "another cluster (--measurements): run 'ddltune validate' there"
        )
    if args.workers < 2 and not args.measurements:
        raise UsageError(f"--workers must be ≥ 2 to measure collectives, got {args.workers}")
    if args.step_factor < 2:
        raise UsageError(f"--step-factor must be an integer ≥ 2, got {args.step_factor}")
    if args.model is not None:  # named now, not after minutes of measuring
        from costmodel import get_workload

        try:
            get_workload(args.model)
        except ValueError as e:
            raise UsageError(f"--model: {e}") from None


def _run_main_job(args: argparse.Namespace, prior):
    """:func:`tuner.run_main_job` with the command line's options; progress to stderr."""
    import tuner

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    return tuner.run_main_job(
        args.output,
        workers=args.workers,
        measurements=args.measurements,
        model=args.model,
        layers=args.layers,
        batch_size=args.batch_size,
        max_workers=args.max_workers,
        ranks_per_node=args.ranks_per_node,
        prior_preset=prior,
        max_bytes=args.max_bytes,
        step_factor=args.step_factor,
        budget_s=args.budget,
        overwrite=args.overwrite,
        progress=not args.no_progress,
        log=log,
        command="ddltune " + shlex.join(sys.argv[1:]) if sys.argv[1:2] == ["run"] else None,
        validate=args.validate,
        emulate=getattr(args, "emulate_cluster", None),
        validate_steps=args.validate_steps,
    )


def _print_json(res) -> None:
    """The run's files, record count, recommendation and timings as one JSON object."""
    rec = res.recommendation
    doc = {
        "report": str(res.report),
        "markdown": str(res.markdown),
        "measurements": str(res.measurements),
        "profile": str(res.profile_path),
        "recommendation_file": str(res.recommendation_path),
        "records": res.records,
        "reliable": bool(rec.reliable),
        "refusal": res.refusal,
        "recommendation": rec.to_dict(),
        "timings_s": res.timings,
    }
    print_json(doc)


def _print_summary(args: argparse.Namespace, res) -> None:
    """The recommendation, its interval, the runner-up, warnings, timings and report paths."""
    import tuner

    rec = res.recommendation
    c = rec.config
    lo, hi = c.interval_s
    print()
    print(f"recommendation{'' if rec.reliable else ' (UNRELIABLE: see the report)'}:")
    print(f"  {c.describe()}")
    print(
        f"  {format_seconds(c.iteration_time_s)} per step (90%: {format_seconds(lo)} – "
        f"{format_seconds(hi)}), {c.throughput_samples_per_s:.4g} samples/s, scaling "
        f"efficiency {100 * c.scaling_efficiency:.0f}%"
    )
    if c.uses_bucket_bytes and c.bucket_bytes > 0:
        # the rounded size above buckets differently (a new user's 97.5 MiB split off one
        # tensor fewer than the 97.46 MiB chosen): the exact bytes, and where the
        # framework settings are
        what = tuner.model_option(args.layers, args.model or tuner.RUN_DEFAULTS["model"])
        cmd = tuner.recommend_command(
            f"--profile {res.profile_path}", what, args.batch_size, args.max_workers
        )
        print(
            f"  bucket size exactly {int(c.bucket_bytes):,} bytes; the framework settings for "
            f"it (DDP bucket_cap_mb, Horovod) are printed by: {cmd}"
            + ("" if rec.reliable else " --force")
        )
    if rec.alternatives:
        a = rec.alternatives[0]
        print(f"  runner-up: {a.describe()}, {a.throughput_samples_per_s:.4g} samples/s")
    for note in (w for w in rec.warnings if w.startswith("the 90% interval of the step (")):
        print(f"  note: {note}")  # what sets a wide interval, and what narrows it
    for w in (w for w in rec.warnings if w.startswith("no measurement crossed nodes")):
        # the headline's nodes are the prior's network: said here, not only in the report
        # and 'recommend' (a new user read a 32-node answer from one machine as measured)
        print(f"  warning: {w}")
    if res.refusal:
        p90 = res.profile.heldout_p90
        systematic = (res.profile.validation or {}).get("systematic")
        what = (  # noise wants more repetitions; a curve the model cannot follow does not
            "its misses are systematic, not noise ("
            + "; ".join(
                f"at {format_bytes(int(e['size']))} {e['points']} series predicted "
                f"{100 * e['median_error']:+.0f}% (median)"
                for e in systematic
            )
            + "): a larger --budget-s will not remove them; measure the cluster you will "
            "train on, or an emulated one ('ddltune lab --help')"
            if systematic
            else "measure again with a larger --budget-s or on a quieter machine"
        )
        print(
            f"  warning: the profile's held-out p90 error is {100 * p90:.1f}% (the tuner's limit "
            f"is {100 * tuner.RELIABLE_P90_LIMIT:.0f}%): {what}; the report lists the errors "
            "per collective"
        )
    t = res.timings
    phases = ", ".join(f"{k} {v:.0f} s" for k, v in t.items() if k != "total")
    print(
        f"  took {t['total']:.0f} s ({phases}); {res.records} measurements, "
        f"messages up to {format_bytes(args.max_bytes)}"
        if not args.measurements
        else f"  took {t['total']:.0f} s ({phases}); {res.records} measurements"
    )
    print(f"\nreport: {res.report}")
    print(f"        {res.markdown}")
    from launch import emulation_unavailable_reason

    if not args.emulate and not args.measurements and emulation_unavailable_reason() is None:
        print(
            "\nthis machine can emulate a cluster, where the network and not the shared cores "
            f"decides step times: {emulate_suggestion()} (see 'ddltune lab --help')"
        )
