"""``ddltune report``: the HTML/Markdown report from a profile, for a model."""

from __future__ import annotations

import argparse
import shlex
import sys
import warnings

from ._common import (
    CLIError,
    add_model_arguments,
    add_precision_arguments,
    cli_phrases,
    folder_hint,
    load_profile,
    positive_int_arg,
    preset_compute,
    print_json,
    safe_text,
)

NAME = "report"
HELP = "write the HTML/Markdown report (figures, tables) from a profile, for a model"
#: Set by :func:`tuner.cli.main`: float64 as 'ddltune calibrate'; compiled
#: programs kept between runs (opt out: DDLTUNE_NO_COMPILATION_CACHE=1).
X64 = True
COMPILATION_CACHE = True
#: The figures and templates need ``pip install 'ddltune[report]'``.
EXTRA = ("report", ("matplotlib", "jinja2"))
DESCRIPTION = """\
Recommend a configuration for the model from a fitted profile and write
DIR/index.html (opens from disk: no server, no network), DIR/report.md and the
figures (PNG, in DIR/figures/):

  * measured vs predicted time per collective and rank count, with residuals,
    and bus bandwidth vs size (needs --measurements: the files the profile was
    fitted on);
  * iteration time, throughput and scaling efficiency vs workers for every
    architecture, with 90% bands;
  * iteration time vs bucket size for the recommended configuration;
  * one iteration as a timeline, recommended and best of each other
    architecture;
  * sensitivity of the iteration time to each hardware parameter;
  * tables: fitted parameters (µs, GB/s) with intervals, fit errors per
    series, the recommendation with its runner-ups, rationale and warnings,
    provenance.

A profile over the tuner's error limit still gets a report: the
recommendation is then forced and marked UNRELIABLE at the top, with the
errors that make it so."""
EPILOG = """\
examples:
  ddltune report --profile profile.json --measurements m.jsonl --model resnet50 -o report
  ddltune report --profile profile.json --layers my_model.json --batch-size 32 \\
      --max-workers 256 --ranks-per-node 8 -o report --overwrite"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``ddltune report``."""
    from tuner import RUN_DEFAULTS

    parser.add_argument(
        "--profile", required=True, metavar="FILE", help="a profile from 'ddltune calibrate'"
    )
    parser.add_argument(
        "--measurements",
        nargs="+",
        metavar="FILE",
        help="the measurement files the profile was fitted on (for the measured-vs-model "
        "figures; without them those figures are left out)",
    )
    m = parser.add_mutually_exclusive_group(required=True)
    add_model_arguments(m)
    parser.add_argument(
        "--batch-size",
        type=positive_int_arg,
        default=64,
        metavar="B",
        help="samples per worker per step (default 64)",
    )
    parser.add_argument(
        "--max-workers",
        type=positive_int_arg,
        default=RUN_DEFAULTS["max_workers"],
        metavar="N",
        help=f"the most workers to consider (default {RUN_DEFAULTS['max_workers']})",
    )
    parser.add_argument(
        "--ranks-per-node",
        type=positive_int_arg,
        default=None,
        metavar="G",
        help="workers per node (default: the one value the profile measured, else 1)",
    )
    add_precision_arguments(parser)
    parser.add_argument(
        "-o", "--output", required=True, metavar="DIR", help="the report folder (created)"
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="write into a non-empty folder, replacing only the report's own files there "
        "(index.html, report.md, figures/<its figures>); other files are kept",
    )
    parser.add_argument(
        "--json", action="store_true", help="print the written paths as one JSON document"
    )


def run(args: argparse.Namespace) -> int:
    """Recommend and write the report."""
    from pathlib import Path

    import calibration
    import tuner
    from costmodel import get_workload, load_layers

    preset_compute(args, None)  # a profile carries its compute rate: refuses --compute-dtype
    try:  # before anything is read or computed
        out = tuner.check_report_dir(Path(args.output), args.overwrite)
    except FileExistsError as e:
        raise CLIError(f"-o {e}") from None
    profile = load_profile(args.profile)
    records = _read_measurements(calibration, args.measurements)
    _warn_foreign_measurements(profile, args.profile, args.measurements or [])
    workload = (
        load_layers(args.layers, batch_size=args.batch_size)
        if args.layers
        else get_workload(args.model, args.batch_size)
    )
    from ._recommend import transform_workload

    workload = transform_workload(workload, args)
    if args.ranks_per_node is None:  # the measured topology, not a silent g = 1
        args.ranks_per_node = tuner.measured_ranks_per_node(profile) or 1
    kwargs = dict(max_workers=args.max_workers, ranks_per_node=args.ranks_per_node)
    refusal = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            rec = tuner.recommend(profile, workload, **kwargs)
        except tuner.UnreliableProfileError as e:
            refusal = cli_phrases(str(e))  # options, not recommend(..., force=True)
            rec = tuner.recommend(profile, workload, force=True, **kwargs)
    files = tuner.build_report(
        out,
        profile=profile,
        workload=workload,
        recommendation=rec,
        records=records,
        inputs=[args.profile, *(args.measurements or [])],
        refusal=refusal,
        command="ddltune " + shlex.join(sys.argv[1:]) if sys.argv[1:2] == ["report"] else None,
        overwrite=args.overwrite,
    )
    if args.json:
        print_json(
            {
                "html": str(files.html),
                "markdown": str(files.markdown),
                "figures": {k: str(v) for k, v in files.figures.items()},
                "skipped": files.skipped,
                "reliable": bool(rec.reliable),
                "refusal": refusal,
                "recommendation": rec.to_dict(),
            }
        )
        return 0
    if refusal:
        print(
            f"ddltune report: warning: {refusal} (the report marks it UNRELIABLE)", file=sys.stderr
        )
    for name, why in files.skipped.items():
        print(f"ddltune report: note: {name} left out: {why}", file=sys.stderr)
    print(f"recommendation: {rec.config.describe()}")
    print(f"report: {files.html}")
    print(f"        {files.markdown}")
    return 0


def _read_measurements(calibration, paths) -> list:
    """``--measurements`` files' records; a missing file, a folder or an unreadable one is a
    one-line error naming the option (as ``--profile``'s is)."""
    if not paths:
        return []
    try:
        return calibration.read_records(paths)
    except (FileNotFoundError, IsADirectoryError, PermissionError) as e:
        path = e.filename or paths[0]
        hint = folder_hint(path, "records") if isinstance(e, IsADirectoryError) else ""
        raise CLIError(safe_text(f"--measurements {path}: {e.strerror}") + hint) from None


def _warn_foreign_measurements(profile, profile_path, measurements) -> None:
    """Warn (stderr) about --measurements files the profile was not fitted on, by content.

    Their points are still drawn against the model, but the figure's "fitted" and
    "held out" marks follow the profile's hold-out rule, not what its fit saw.
    """
    from calibration import file_entry  # what calibrate wrote into the profile's provenance

    prov = getattr(profile, "provenance", None) or {}
    known = {e.get("sha256") for e in prov.get("inputs") or [] if isinstance(e, dict)}
    if not known:
        return  # a preset or a profile that does not list its inputs
    for m in measurements:
        if file_entry(m)["sha256"] not in known:
            print(
                f"ddltune report: warning: {m} is not among the files {profile_path} was fitted "
                "on (by content): its points are drawn against the model, but the figure's "
                "'fitted' and 'held out' marks do not tell what the fit saw",
                file=sys.stderr,
            )
