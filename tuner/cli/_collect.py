"""``ddltune collect``: measure collectives and compute on this machine or cluster."""

from __future__ import annotations

import argparse
import sys
import warnings

from calibration import COLLECT_PATTERNS, COLLECT_SUITES
from costmodel import InputFileError

from ._common import (
    CLIError,
    UsageError,
    bytes_arg,
    int_list_arg,
    name_list_arg,
    option_names,
    positive_float_arg,
    positive_int_arg,
    print_json,
)
from ._lab import add_emulate_argument, emulated

NAME = "collect"
HELP = "measure collectives and compute with jax.distributed into a measurement file"
DESCRIPTION = """\
Measure the collectives a gradient exchange uses (all_reduce, reduce_scatter,
all_gather, all_to_all, sendrecv, and the parameter-server fan-in ps_push and
fan-out ps_pull) at message sizes from --min-bytes to --max-bytes, and the
compute throughput (matmul; forward/backward of the MLP's dense layers and of
3x3 convolutions at four channel widths, which calibration gives their own
rate, conv_efficiency), with
jax.distributed; write one JSON Lines record per point (schema v1) for
'ddltune calibrate'. Sizes follow nccl-tests (for all_gather/reduce_scatter the
size is the full array). Each timed repetition is the slowest rank's time;
every result is checked (#wrong; exit status 1 when any is wrong, except
reduce_scatters on CPU, a known gloo bug, jax-ml/jax#40830: a warning). At the
end a table like nccl-tests' is printed (time = p10 on CPU, median on GPU: the
statistic calibration fits).

Locally (default outside a cluster) it starts --workers processes on this
machine. Under srun or mpirun each task runs it and they join as one job
(--launcher auto); see README 'Calibrating on a cluster'. A worker that crashes,
hangs or never starts stops the run within --timeout-s, naming the rank and
the point; what was written stays valid and --resume measures the rest."""
EPILOG = """\
examples:
  ddltune collect --workers 2 --max-bytes 4M -o m.jsonl
  ddltune collect --workers 2,3,4 --collectives all_reduce,ps_push -o m.jsonl --resume
  srun -N 2 --ntasks-per-node 4 --kill-on-bad-exit=1 ddltune collect -o cluster.jsonl
"""


def _warmup_arg(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer ≥ 0, got {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"expected an integer ≥ 0, got {text!r}")
    return v


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``ddltune collect``.

    Long because it declares one option per call, each with its help text;
    there is nothing to split.
    """
    parser.add_argument(
        "-o",
        "--output",
        default="measurements.jsonl",
        metavar="FILE",
        help="measurement file to write, JSON Lines (default: %(default)s)",
    )
    parser.add_argument(
        "--workers",
        type=int_list_arg,
        default=None,
        metavar="N[,N…]",
        help="worker processes, one launch per value, e.g. 2,3,4 (default 2; under "
        "srun/mpirun: the job's size)",
    )
    parser.add_argument(
        "--collectives",
        type=name_list_arg,
        default=None,
        metavar="NAME[,NAME…]",
        help=f"patterns to measure (default all: {','.join(COLLECT_PATTERNS)})",
    )
    parser.add_argument(
        "--min-bytes",
        type=bytes_arg,
        default=1024,
        metavar="SIZE",
        help="smallest message, bytes; suffixes K, M, G are powers of 1024 (default 1K)",
    )
    parser.add_argument(
        "--max-bytes",
        type=bytes_arg,
        default=64 * 1024**2,
        metavar="SIZE",
        help="largest message, bytes (default 64M)",
    )
    parser.add_argument(
        "--step-factor",
        type=positive_int_arg,
        default=4,
        metavar="F",
        help="size multiplier between points, ≥ 2 (default 4)",
    )
    parser.add_argument(
        "--dtype",
        choices=("float32", "bfloat16"),
        default="float32",
        help="element type (default float32)",
    )
    parser.add_argument(
        "--suite",
        type=name_list_arg,
        default=list(COLLECT_SUITES),
        metavar="SUITE[,SUITE…]",
        help="what to measure: collectives, compute or both (default collectives,compute)",
    )
    parser.add_argument(
        "--iters",
        type=positive_int_arg,
        default=5,
        metavar="N",
        help="at least N timed repetitions per point (default 5)",
    )
    parser.add_argument(
        "--max-iters",
        type=positive_int_arg,
        default=200,
        metavar="N",
        help="at most N timed repetitions per point (default 200)",
    )
    parser.add_argument(
        "--warmup-iters",
        type=_warmup_arg,
        default=2,
        metavar="N",
        help="untimed calls after compiling, per point (default 2)",
    )
    parser.add_argument(
        "--budget-s",
        "--budget",  # as 'ddltune run' spelled it
        type=positive_float_arg,
        default=0.5,
        metavar="SECONDS",
        help="time per point: repetitions continue until --iters are done and this many "
        "seconds spent (default 0.5)",
    )
    parser.add_argument(
        "--rounds",
        type=positive_int_arg,
        default=3,
        metavar="R",
        help="interleaved timing passes over all points of a launch, each with 1/R of "
        "--budget-s, --iters and --max-iters (which count over all passes): a slow stretch "
        "of a noisy machine then spreads over many points instead of owning one; records "
        "are written after the last pass (1 = time each point in one go, written as it "
        "finishes; default 3)",
    )
    parser.add_argument(
        "--timeout-s",
        type=positive_float_arg,
        default=50.0,
        metavar="SECONDS",
        help="a worker silent this long is declared hung and the run stopped (default 50)",
    )
    parser.add_argument(
        "--launcher",
        choices=("auto", "local"),
        default="auto",
        help="auto: join the srun/mpirun job this runs in, else start local workers; "
        "local: always start local workers (default auto)",
    )
    parser.add_argument(
        "--coordinator",
        default=None,
        metavar="HOST:PORT",
        help="rank 0's host and a free port, for Open MPI 5 and MPICH jobs "
        "(or set JAX_COORDINATOR_ADDRESS)",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--resume",
        action="store_true",
        help="append to an existing file, measuring only the points it does not have",
    )
    mode.add_argument("--overwrite", action="store_true", help="replace an existing file")
    parser.add_argument(
        "--matmul-sizes",
        type=int_list_arg,
        default=None,
        metavar="N[,N…]",
        help="square matmul sizes of the compute suite, instead of the default matmuls "
        "(128,256,512,1024 on CPU, 1024…8192 on GPU, and two thin ones, a batch of 16 and of "
        "64 through a 1024×1024 matrix on CPU, which fit how far small GEMMs run below the "
        "rate)",
    )
    parser.add_argument(
        "--log-dir",
        default=None,
        metavar="DIR",
        help="keep every worker's output there (workers<N>/rank<R>.log)",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="start more local workers than 4 per CPU core (refused without it: they only "
        "time the scheduler)",
    )
    add_emulate_argument(parser)
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument(
        "--json",
        action="store_true",
        help="print one JSON summary document instead of the tables",
    )


def _shape(shape: dict | None) -> str:
    if not shape:
        return ""
    if "m" in shape:
        return f"{shape['m']}x{shape['n']}x{shape['k']}"
    return f"{shape.get('model')}[{shape.get('layer')}] {shape.get('in')}→{shape.get('out')} b{shape.get('batch')}"


def format_tables(rows: list[dict]) -> str:
    """nccl-tests-like tables: one per (collective group, rank count), and one for compute."""
    out = []
    coll = [r for r in rows if "collective" in r]
    groups: dict[tuple, list[dict]] = {}
    for r in coll:
        key = (r["num_ranks"], r["ranks_per_node"], r["dtype"], r["statistic"],
               r.get("nodes_at_once"), r.get("algorithm"))  # fmt: skip
        groups.setdefault(key, []).append(r)
    for (n, g, dtype, stat, at_once, algo), rs in groups.items():
        what = f"# {n} ranks ({g} per node)"
        if at_once:
            what = f"# {n} ranks within each of {at_once} nodes at once"
        if algo:
            what += f", {algo} all_reduce"
        out.append(f"{what}, {dtype}; time = {stat} of the repetitions")
        out.append(
            f"# {'collective':>14} {'size':>10} {'count':>10} {'time(us)':>10} "
            f"{'algbw(GB/s)':>11} {'busbw(GB/s)':>11} {'#wrong':>6}"
        )
        for r in rs:
            out.append(
                f"  {r['collective']:>14} {r['message_bytes']:>10d} {r['count']:>10d} "
                f"{r['time_s'] * 1e6:>10.1f} {r['algbw'] / 1e9:>11.4g} {r['busbw'] / 1e9:>11.4g} "
                f"{r['wrong']:>6d}"
            )
        out.append("")
    comp = [r for r in rows if "op" in r]
    if comp:
        out.append(
            f"# compute, {comp[0]['dtype']}; time = {comp[0]['statistic']}; procs = "
            "processes running it at once on the node"
        )
        out.append(f"# {'op':>9} {'shape':>28} {'procs':>5} {'time(us)':>10} {'GFLOP/s':>9}")
        for r in comp:
            out.append(
                f"  {r['op']:>9} {_shape(r['shape']):>28} {r['num_ranks']:>5d} "
                f"{r['time_s'] * 1e6:>10.1f} {r['flops_per_s'] / 1e9:>9.2f}"
            )
        out.append("")
    return "\n".join(out)


def run(args: argparse.Namespace) -> int:
    """Run the collection; print the tables (or ``--json``); exit 1 on wrong results (a
    warning where :func:`calibration.known_wrong_cause` explains them all)."""
    progress = not args.no_progress and sys.stderr.isatty()
    from calibration import RecordRepairWarning

    def say(message, category, *rest, **kw):
        if issubclass(category, RecordRepairWarning):
            print(f"ddltune collect: warning: {message}", file=sys.stderr)
        else:
            default(message, category, *rest, **kw)

    _check_plan(args)
    with warnings.catch_warnings(), emulated(args) as cluster:  # both undone on the way out
        default = warnings.showwarning
        warnings.showwarning = say
        args.emulate_cluster = cluster
        return _run(args, progress)


def _check_plan(args: argparse.Namespace) -> None:
    """With ``--emulate``: its rank count against the cores and memory, and ``-o``, before
    the namespaces are built (a refusal after them cost a 14 s self-check)."""
    if not args.emulate:
        return
    from calibration import check_output_file

    from ._lab import check_emulated_plan

    check_emulated_plan(
        args.emulate,
        args.workers or [],
        args.max_bytes if "collectives" in args.suite else 0,
        force=args.force,
    )
    try:
        check_output_file(args.output, overwrite=args.overwrite or args.resume, what="-o")
    except FileExistsError as e:
        raise CLIError(f"{e} (or --resume to add to it)") from None


#: ``collect()`` parameters that are options of this command, for error messages.
_OPTIONS = (
    "workers", "collectives", "min_bytes", "max_bytes", "step_factor", "dtype", "suite",
    "iters", "max_iters", "warmup_iters", "budget_s", "rounds", "timeout_s", "launcher",
    "coordinator", "matmul_sizes",
)  # fmt: skip


def _record_lines(path) -> int:
    """Complete lines of a records file (0 where there is none)."""
    try:
        with open(path, "rb") as fh:
            return sum(1 for line in fh if line.endswith(b"\n"))
    except OSError:
        return 0


def _run(args: argparse.Namespace, progress: bool) -> int:
    from calibration import CollectError, collect, summary_rows

    before = _record_lines(args.output)
    try:
        result = collect(
            args.output,
            workers=args.workers,
            collectives=args.collectives,
            min_bytes=args.min_bytes,
            max_bytes=args.max_bytes,
            step_factor=args.step_factor,
            dtype=args.dtype,
            suite=args.suite,
            iters=args.iters,
            max_iters=max(args.max_iters, args.iters),
            warmup_iters=args.warmup_iters,
            budget_s=args.budget_s,
            rounds=args.rounds,
            timeout_s=args.timeout_s,
            launcher=args.launcher,
            coordinator=args.coordinator,
            resume=args.resume,
            overwrite=args.overwrite,
            matmul_sizes=args.matmul_sizes,
            progress=progress,
            log_dir=args.log_dir,
            emulate=getattr(args, "emulate_cluster", None),
            force=args.force,
        )
    except (CollectError, FileExistsError) as e:
        raise CLIError(str(e)) from e
    except KeyboardInterrupt:  # say what was kept and how to go on (then exit 130)
        kept = _record_lines(args.output) - before
        if kept > 0:
            print(
                f"ddltune collect: interrupted: {kept} records written to {args.output} stay "
                "valid; rerun the same command with --resume to measure only the rest",
                file=sys.stderr,
            )
        else:
            print(
                f"ddltune collect: interrupted before any point was complete (each is timed in "
                f"--rounds {args.rounds} interleaved passes): nothing written to {args.output}",
                file=sys.stderr,
            )
        raise
    except InputFileError:
        raise
    except ValueError as e:  # the library names its parameters: say the options
        raise UsageError(option_names(str(e), _OPTIONS)) from None
    if result.rank != 0:
        return 0  # under srun/mpirun, rank 0 reports
    if args.json:
        print_json(result.summary())
    else:
        sys.stdout.write(format_tables(summary_rows(result.table_records())))
        print(
            f"# wrote {result.written} records to {result.path}"
            + (f" ({result.skipped} points already there were skipped)" if result.skipped else "")
            + f" in {result.elapsed_s:.1f} s"
        )
    if result.wrong:
        from calibration import known_wrong_cause

        text = (
            f"{result.wrong} measured calls returned wrong results (see the #wrong column); "
            f"they are recorded in {result.path} with their 'wrong' count and calibration "
            "leaves them out"
        )
        cause = known_wrong_cause(result.table_records())
        if cause is None:
            raise CLIError(text)
        # an upstream bug, not this cluster: the job (srun, mpirun) must not fail for it
        print(f"ddltune collect: warning: {text} ({cause})", file=sys.stderr)
    return 0
