"""``ddltune import-nccl-tests``: turn nccl-tests outputs into a measurement file."""

from __future__ import annotations

import argparse
import sys
import warnings

from costmodel import format_bytes

from ._common import CLIError, positive_int_arg, print_json

NAME = "import-nccl-tests"
HELP = "import nccl-tests outputs (all_reduce_perf & co.) as measurement records"
DESCRIPTION = """\
Read the text output of nccl-tests runs (all_reduce_perf, all_gather_perf,
reduce_scatter_perf, alltoall_perf, broadcast_perf, reduce_perf, sendrecv_perf)
and write one JSON Lines measurement file that 'ddltune calibrate' reads: one
record per table row and variant (out-of-place and in-place), with the
average time nccl-tests printed (µs, stored in seconds) as time_s.mean.

Shell prompts, launcher logs and NCCL INFO lines around the table are ignored.
What the table itself does not say is read from the file: the collective from
an echoed command line or the '# Collective test starting' header; the number
of ranks from the '#  Rank … device …' lines, an echoed mpirun/srun command,
the count column or the busbw/algbw ratio; the ranks per node from the host
names in the device lines. When the file cannot tell, the error says which
option to pass; an option that contradicts the file is an error naming both.
Every file is parsed before anything is written, and the output appears whole
or not at all.

Options apply to every FILE: import files that need different options in
separate runs (into separate outputs; 'ddltune calibrate' reads several)."""
EPILOG = """\
examples:
  # a single-node run with its header and device lines: nothing to add
  ddltune import-nccl-tests all_reduce_8gpus.txt -o m.jsonl

  # a 2-node log without device lines: say what the file cannot
  ddltune import-nccl-tests allgather.log -o m.jsonl --collective all_gather \\
      --ranks-per-node 8

  # replace an existing output, print what was detected as JSON
  ddltune import-nccl-tests runs/*.txt -o m.jsonl --overwrite --json"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``ddltune import-nccl-tests``."""
    parser.add_argument(
        "files",
        nargs="+",
        metavar="FILE",
        help="text output of an nccl-tests *_perf run, one run (one table) per file",
    )
    parser.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="M.jsonl",
        help="measurement file to write (JSON Lines, schema v1); refused if it exists "
        "unless --overwrite",
    )
    parser.add_argument(
        "--collective",
        metavar="NAME",
        help="the collective, for files that do not name their test binary: all_reduce, "
        "all_gather, reduce_scatter, all_to_all (nccl-tests' alltoall), broadcast, reduce, "
        "sendrecv",
    )
    parser.add_argument(
        "--num-ranks",
        type=positive_int_arg,
        metavar="N",
        help="ranks in the collective (GPUs taking part, all nodes), for files without "
        "device lines whose columns do not tell it",
    )
    parser.add_argument(
        "--ranks-per-node",
        type=positive_int_arg,
        metavar="G",
        help="ranks (GPUs) per node, for files without device lines naming the hosts; "
        "must divide N",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the output file if it exists",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print what was detected and written as one JSON document instead of a table",
    )


def run(args: argparse.Namespace) -> int:
    """Import the files; print a table (or JSON) of what was detected per file."""
    from calibration import import_nccl_tests

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            summary = import_nccl_tests(
                args.files,
                args.output,
                collective=args.collective,
                num_ranks=args.num_ranks,
                ranks_per_node=args.ranks_per_node,
                mode="overwrite" if args.overwrite else "new",
            )
        except FileExistsError:
            raise CLIError(
                f"{args.output} already exists; pass --overwrite to replace it, or choose "
                "another -o file"
            ) from None
    summary["warnings"] = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    for w in summary["warnings"]:
        print(f"ddltune {NAME}: warning: {w}", file=sys.stderr)
    if args.json:
        print_json(summary)
        return 0
    _print_table(summary)
    return 0


def _print_table(summary: dict) -> None:
    head = ("file", "collective", "ranks", "ranks/node", "rows", "sizes", "dtype", "device")
    lines = [head]
    for f in summary["files"]:
        lines.append(
            (
                f["path"],
                f["collective"],
                str(f["num_ranks"]),
                str(f["ranks_per_node"]),
                str(f["rows"]),
                f"{format_bytes(f['min_bytes'])} – {format_bytes(f['max_bytes'])}",
                ",".join(f["dtypes"]),
                f["device_kind"],
            )
        )
    widths = [max(len(row[i]) for row in lines) for i in range(len(head))]
    for row in lines:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    print()
    for f in summary["files"]:
        src = f["sources"]
        print(f"{f['path']}:")
        print(
            f"  collective from {src['collective']}; ranks from {src['num_ranks']}; "
            f"ranks/node from {src['ranks_per_node']}; device from {src['device_kind']}"
        )
        print(f"  layout: {f['layout']}")
        for note in f["notes"]:
            print(f"  note: {note}")
    print(
        f"\nwrote {summary['records']} records (out-of-place and in-place per row) "
        f"to {summary['output']}"
    )
