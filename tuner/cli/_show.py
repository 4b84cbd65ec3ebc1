"""``ddltune show``: a readable summary of a measurement file or a profile."""

from __future__ import annotations

import argparse
import json
import math
import re
from pathlib import Path

from costmodel import InputFileError, format_bytes, format_seconds

from ._calibrate import step_interval_text, step_residual_half_width
from ._common import CLIError, print_json, safe_tree

NAME = "show"
HELP = "summarise a measurement file (.jsonl), a profile or a recommendation (.json)"
DESCRIPTION = """\
Print what a file holds, in words and tables.

A measurement file (JSON Lines, schema v1, from 'ddltune collect',
'ddltune import-nccl-tests' or 'ddltune validate'): what was measured (kinds,
collectives, rank counts, message-size ranges, compute ops), where (backend,
device, hosts — as fingerprints), when (first and last timestamp), with which
library versions, and how many records.

A profile (JSON, from 'ddltune calibrate' or 'ddltune run'): the fitted
parameters in human units (µs, GB/s) with their 90% intervals and whether the
data identified each, the fit errors per series (training and held out),
whether the profile is reliable enough to recommend from, and the measured
ranges beyond which predictions extrapolate.

A recommendation (recommendation.json from 'ddltune run', or what
'ddltune recommend --json' prints): the configuration, its step time with the
90% interval, throughput, memory, why, the runners-up and the warnings.

A ddltune folder (from 'ddltune run' or 'ddltune report'): its profile.json,
else its recommendation.json, measurements.jsonl or validation.jsonl, with the
commands that show the others.

The kind of file is recognised from its content, not its name."""
EPILOG = """\
examples:
  ddltune show ddltune-report                       # the folder's profile
  ddltune show ddltune-report/measurements.jsonl
  ddltune show profile.json --json"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``ddltune show``."""
    parser.add_argument(
        "file",
        metavar="FILE",
        help="a measurement file, a profile, or a ddltune folder holding them",
    )
    parser.add_argument(
        "--json", action="store_true", help="print the summary as one JSON document"
    )


# --------------------------------------------------------------------------- detection


#: The head of a file ``show`` reads to tell its kind, and the largest file it
#: parses whole as one JSON document (a profile is a few hundred KiB).
_HEAD_BYTES = 64 * 1024
_MAX_PROFILE_BYTES = 64 * 1024**2


def _load_json(path: Path):
    """The file as one JSON document, or ``None`` if it is not one (JSON Lines).

    Raises:
        InputFileError: nested deeper than the records' depth limit.
    """
    from calibration import MAX_JSON_DEPTH, json_depth_ok

    try:
        doc = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except RecursionError:
        doc = False
    except ValueError:  # not one JSON document
        return None
    if doc is False or not json_depth_ok(doc):
        raise InputFileError(str(path), None, f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
    return doc


def detect_kind(path: Path) -> str:
    """``"profile"``, ``"recommendation"`` or ``"measurements"`` from the file's content.

    A profile is one JSON object (over any number of lines) with a ``params``
    key; a recommendation (``recommendation.json``, ``recommend --json``) one
    with ``iteration_time_s`` and ``architecture``; a measurement file has one
    JSON object per line.

    Raises:
        FileNotFoundError, IsADirectoryError: as ``open``.
        InputFileError: empty file, or neither kind.
    """
    from calibration import is_recommendation

    with open(path, "rb") as fh:  # decide on the head: a junk file fails at once
        head = fh.read(_HEAD_BYTES)
    if not head.strip():
        raise InputFileError(str(path), None, "the file is empty")
    if head.lstrip(b" \t\r\n\xef\xbb\xbf").startswith(b"{") and (
        path.stat().st_size <= _MAX_PROFILE_BYTES
    ):
        doc = _load_json(path)
    else:
        doc = None  # JSON Lines, nccl-tests output or junk: the head tells
    if isinstance(doc, dict):
        if "params" in doc:
            return "profile"
        if "kind" in doc or "time_s" in doc:
            return "measurements"  # a one-record measurement file: the reader validates it
        if is_recommendation(doc):
            return "recommendation"
        raise InputFileError(
            str(path),
            None,
            "a JSON object that is neither a profile (no 'params' key) nor a measurement record",
        )
    if re.search(rb'"kind"\s*:\s*"ddltune-profile"', head):
        return "profile"  # a profile that is not whole JSON: its reader names the line
    text = head.decode("utf-8", errors="replace")
    first = next(line for line in text.splitlines() if line.strip())
    if first.lstrip("\ufeff \t").lower().startswith(("<!doctype html", "<html")):
        raise InputFileError(
            str(path),
            None,
            "this is an HTML page (a ddltune report?), not a ddltune file; show reads a "
            "profile or measurement records: the report's folder has profile.json and "
            "measurements.jsonl",
        )
    if first.lstrip("\ufeff \t").startswith("# ddltune report"):  # report.md's first line
        raise InputFileError(
            str(path),
            None,
            "this is a ddltune report (Markdown), not a ddltune file; show reads a "
            "profile or measurement records: the report's folder has profile.json and "
            "measurements.jsonl",
        )
    if first.lstrip().startswith("{"):
        return "measurements"
    if "busbw" in text or "nccl-tests" in text or "_perf" in text:
        raise InputFileError(
            str(path),
            None,
            "this looks like nccl-tests output, not a ddltune file; import it first: "
            f"ddltune import-nccl-tests {path} -o measurements.jsonl",
        )
    raise InputFileError(
        str(path),
        1,
        "not a ddltune file: expected a profile (JSON object) or measurement records "
        "(JSON Lines, one object per line)",
    )


# --------------------------------------------------------------------------- measurements


def _table(head, rows) -> list[str]:
    from tuner import format_table

    return format_table(rows, head=head)


def _print_measurements(s: dict) -> None:
    kinds = ", ".join(f"{n} {k}" for k, n in s["kinds"].items())
    print(f"{s['file']}: measurement records (schema v1)")
    print(f"  records:   {s['records']} ({kinds})")
    print(
        f"  where:     backend {', '.join(s['backends'])}; device {', '.join(s['device_kinds'])}; "
        f"written on {s['hosts']} machine(s)"
        + (
            f"; jobs across {', '.join(map(str, s['job_hosts']))} host(s)"
            if s.get("job_hosts")
            else ""
        )
    )
    if s.get("emulated"):
        print(
            f"  emulated:  {', '.join(s['emulated'])} (network namespaces and shaped links on "
            "one machine, not a real cluster)"
        )
    # one time where every record has it (an import stamps its rows alike)
    when = s["first"] if s["first"] == s["last"] else f"{s['first']} … {s['last']}"
    print(f"  when:      {when}")
    print(f"  source:    {', '.join(s['sources'])}")
    if s["versions"]:
        print("  versions:  " + ", ".join(f"{k} {'/'.join(v)}" for k, v in s["versions"].items()))
    if s["collectives"]:
        print("\ncollectives (times: the median, or the mean for imported rows)")
        rows = [
            (
                c["collective"],
                c["num_ranks"],
                c["ranks_per_node"]
                if not c.get("nodes_at_once")
                else f"{c['ranks_per_node']} ({c['nodes_at_once']} nodes at once)",
                c["points"],
                f"{format_bytes(c['min_bytes'])} – {format_bytes(c['max_bytes'])}",
                f"{format_seconds(c['min_time_s'])} – {format_seconds(c['max_time_s'])}",
                c["wrong"],
            )
            for c in s["collectives"]
        ]
        for line in _table(
            ("collective", "ranks", "ranks/node", "points", "sizes", "time", "wrong"), rows
        ):
            print("  " + line)
    if s["compute"]:
        print("\ncompute")
        rows = [
            (
                c["op"],
                c["num_ranks"],
                c["points"],
                f"{c['min_gflop_s']:.3g} – {c['max_gflop_s']:.3g}",
            )
            for c in s["compute"]
        ]
        for line in _table(("op", "processes at once", "points", "GFLOP/s"), rows):
            print("  " + line)
    if s["steps"]:
        print("\ntraining steps")
        rows = [(t["architecture"], t["workers"], t["model"], t["points"]) for t in s["steps"]]
        for line in _table(("architecture", "workers", "model", "points"), rows):
            print("  " + line)


# --------------------------------------------------------------------------- profile


def summarize_profile(path: Path) -> dict:
    """A JSON-ready summary of a profile (via ``calibration.Profile.load``).

    Raises:
        InputFileError: from ``Profile.load`` on a malformed profile.
        CLIError: when this installation has no profile support.
    """
    try:
        from calibration import Profile
    except ImportError:  # pragma: no cover - calibration without profiles
        raise CLIError(
            f"{path} is a profile, but this ddltune has no calibration.Profile to read it"
        ) from None
    from tuner import profile_summary

    prof = Profile.load(path)
    out = {"file": str(path), "type": "profile"}
    out.update(profile_summary(prof))
    steps = prof.fit.get("steps")
    if steps:  # training runs fitted on top (calibrate --steps)
        err = [abs(r["fitted_s"] / r["measured_s"] - 1) for r in steps["rows"]]
        out["steps"] = {
            "runs": steps["runs"],
            "files": steps.get("files", []),
            "workers": [
                min(r["workers"] for r in steps["rows"]),
                max(r["workers"] for r in steps["rows"]),
            ],  # fmt: skip
            "median_abs_error": float(sorted(err)[len(err) // 2]),
            "max_abs_error": float(max(err)),
            "terms": {k: {"identified": v["identified"]} for k, v in steps["terms"].items()},
        }
    # the residual part of a step's 90% interval (a half-width, fraction of the step), and whose
    out["step_interval"] = {
        "residual_half_width": step_residual_half_width(prof),
        "from": "training runs" if prof.steps_set_spread else "microbenchmarks",
    }
    return out


def _span(r) -> str:
    """``[lo, hi]`` of measured ranges as ``lo–hi`` (or ``lo``), not a list."""
    if isinstance(r, list | tuple) and len(r) == 2:
        return f"{r[0]}" if r[0] == r[1] else f"{r[0]}–{r[1]}"
    return str(r)


def _print_profile(s: dict) -> None:
    from tuner import CACHE_NOTE, format_parameter_rows, format_percent

    state = "reliable" if s["reliable"] else "UNRELIABLE (the tuner refuses it without --force)"
    print(f"{s['file']}: profile — {state}")
    p90 = s.get("heldout_p90")
    steps = s.get("steps")
    if p90 is not None and math.isfinite(p90):
        print(f"  held-out p90 error: {100 * p90:.1f}% (limit {100 * s['limit']:.0f}%)")
    elif steps:
        print("  held-out error: none (no microbenchmarks: datasheet presets plus training runs)")
    else:
        print("  held-out error: none (no measurements: a preset profile)")
    if steps:
        lo, hi = steps["workers"]
        from tuner.cli._calibrate import _STEP_TERM_SHOWN

        ident = [
            _STEP_TERM_SHOWN[k][2] if k in _STEP_TERM_SHOWN else k
            for k, v in steps["terms"].items()
            if v["identified"]
        ]
        print(
            f"  training runs: {steps['runs']} at {lo}–{hi} workers "
            f"({', '.join(steps['files'])}); fitted step time |error| median "
            f"{100 * steps['median_abs_error']:.1f}%, max {100 * steps['max_abs_error']:.1f}%; "
            f"step terms identified: {', '.join(ident) if ident else 'none'}"
        )

    band = s.get("step_interval")
    if band and band["residual_half_width"] > 0:
        from_runs = band["from"] == "training runs"
        print("  " + step_interval_text(band["residual_half_width"], from_runs, bool(steps)))
    if s.get("prior"):
        print(f"  prior: {s['prior']}")
    if s.get("host_links", 1) != 1:
        print(
            f"  host links per node: {s['host_links']} (ps_host puts ⌈g / {s['host_links']}⌉ GPUs on each)"
        )
    r = s.get("measured_ranges") or {}
    if r.get("message_bytes"):
        lo, hi = r["message_bytes"]
        print(
            f"  measured sizes: {format_bytes(lo)} – {format_bytes(hi)}; ranks "
            f"{_span(r.get('num_ranks'))}; ranks/node {_span(r.get('ranks_per_node'))}; "
            f"collectives {', '.join(r.get('collectives') or [])}"
        )
    prov = s.get("provenance") or {}
    for k, v in prov.items():
        if isinstance(v, str | int | float):
            print(f"  {k}: {v}")
    for entry in prov.get("inputs") or []:
        if isinstance(entry, dict) and entry.get("path"):
            sha = str(entry.get("sha256") or "")[:12]
            print(f"  input: {entry['path']}" + (f" (sha256 {sha}…)" if sha else ""))
    from calibration import emulated_spec

    for spec in filter(None, map(emulated_spec, prov.get("emulated") or [])):
        print(
            f"  emulated: {spec} (namespaces and shaped links on one machine, not a real cluster)"
        )
    print(
        "\nparameters (90% interval; 'no' = not identified: the data cannot pin it down; "
        "its value may have moved from the prior, within a wide interval; 'prior' = no "
        "measurement depends on it: the prior preset's datasheet value)"
    )
    main = [r for r in s["parameters"] if not str(r["name"]).startswith("regime_")]
    regimes = [r for r in s["parameters"] if str(r["name"]).startswith("regime_")]
    shown = [r for r in regimes if r.get("identified")]
    head = ("parameter", "value", "unit", "90% interval", "identified")
    for line in _table(head, format_parameter_rows(main + shown)):
        print("  " + line)
    if len(regimes) > len(shown):
        print(
            f"  (+ {len(regimes) - len(shown)} protocol-regime values not identified; "
            "--json lists every one)"
        )
    print(
        "  ('none': at its default, no such effect, which the data did not move. "
        "gemm_half_dim: a matrix product whose smallest dimension is m runs at m / (m + "
        "gemm_half_dim) of flops_per_s. latency_overlap, backward_hide: shares in (0, 1). "
        "head_start_bytes: bytes of a call that cross before the link's rate applies, a "
        "shaper's burst. all_to_all_congestion_cap: c, all_to_all's congestion factor "
        f"stays below 1 + c. {CACHE_NOTE})"
    )
    if s["series"]:
        print("\nfit error per series (absolute % error of the fitted statistic)")
        rows = [
            (
                e["series"],
                e.get("train_points", "—"),
                format_percent(e.get("train_median")),
                format_percent(e.get("train_p90")),
                e.get("heldout_points", "—"),
                format_percent(e.get("heldout_median")),
                format_percent(e.get("heldout_p90")),
            )
            for e in s["series"]
        ]
        head = ("series", "train pts", "train med", "train p90", "held pts", "held med", "held p90")
        for line in _table(head, rows):
            print("  " + line)
    for w in s.get("warnings") or []:
        print(f"warning: {w}")
    for n in s.get("notes") or []:
        print(f"note: {n}")


# --------------------------------------------------------------------------- run


def _number(v) -> bool:
    """A finite int or float (not a bool)."""
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def summarize_recommendation(path: Path) -> dict:
    """The recommendation a file holds (``recommendation.json``, ``recommend --json``), checked.

    Returns:
        The document's fields (as written), for :func:`_print_recommendation` and ``--json``.

    Raises:
        InputFileError: naming the file and the field that is missing or not what
            ``ddltune recommend`` writes.
    """
    doc = _load_json(path)

    def need(key, ok, what):
        if not ok(doc.get(key)):
            raise InputFileError(
                str(path), None, f"'{key}' must be {what}, got {doc.get(key, 'nothing')!r}"
            )

    need("label", lambda v: isinstance(v, str), "the architecture's name")
    need("workers", lambda v: isinstance(v, int) and v >= 1, "an integer ≥ 1")
    need("iteration_time_s", lambda v: _number(v) and v > 0, "a time > 0 s")
    need("bucket_bytes", lambda v: _number(v) and v >= 0, "bytes ≥ 0")
    return doc


def _print_recommendation(s: dict) -> None:
    from tuner import format_percent  # here, not at the top: building the parser stays light
    from tuner.validation import bucket_text

    def num(key):
        v = s.get(key)
        return v if _number(v) else None

    print(s.get("message") or f"recommended: {s['label']}, {s['workers']} workers")
    lo_hi = s.get("interval_s")
    band = (
        f" (90%: {format_seconds(lo_hi[0])} – {format_seconds(lo_hi[1])})"
        if isinstance(lo_hi, list)
        and len(lo_hi) == 2
        and all(isinstance(x, int | float) for x in lo_hi)
        else ""
    )
    parts = [f"step {format_seconds(s['iteration_time_s'])}{band}"]
    if num("throughput_samples_per_s") is not None:
        parts.append(f"{num('throughput_samples_per_s'):,.1f} samples/s")
    if num("scaling_efficiency") is not None:
        parts.append(f"scaling efficiency {format_percent(num('scaling_efficiency'))}")
    print("  " + "; ".join(parts))
    more = []
    w = s.get("workload") if isinstance(s.get("workload"), dict) else {}
    if num("memory_bytes_per_rank") is not None:
        from tuner import NO_ACTIVATIONS

        caveat = f" ({NO_ACTIVATIONS})" if w.get("activations_in_memory") is False else ""
        more.append(f"memory per rank {format_bytes(num('memory_bytes_per_rank'))}{caveat}")
    if num("p_best") is not None:
        more.append(f"chance it is the best of those compared {format_percent(num('p_best'), 0)}")
    if more:
        print("  " + "; ".join(more))
    if w.get("name"):
        print(f"  workload: {w['name']}, batch {w.get('batch_size', '?')} per worker"
              + (f", {format_bytes(w['gradient_bytes'])} of gradients"
                 if isinstance(w.get("gradient_bytes"), int | float) else ""))  # fmt: skip
    reliable = s.get("reliable")
    inputs = s.get("inputs") if isinstance(s.get("inputs"), dict) else {}
    if isinstance(inputs.get("profile"), str):
        print(f"  from the profile {inputs['profile']}"
              + (" (UNRELIABLE: forced)" if reliable is False else ""))  # fmt: skip
    if isinstance(s.get("rationale"), str):
        print(f"\nwhy: {s['rationale']}")
    alts = [a for a in s.get("alternatives") or [] if isinstance(a, dict)]
    rows = []
    for a in alts[:5]:
        t = a.get("iteration_time_s")
        rows.append([str(a.get("label", "?")), str(a.get("workers", "?")),
                     bucket_text(a["bucket_bytes"]) if _number(a.get("bucket_bytes")) else "—",
                     format_seconds(t) if isinstance(t, int | float) else "—"])  # fmt: skip
    if rows:
        print("\nrunners-up:")
        for line in _table(["architecture", "workers", "bucket", "step"], rows):
            print("  " + line)
    warns = [w for w in s.get("warnings") or [] if isinstance(w, str)]
    if warns:
        print("\nwarnings:")
        for x in warns:
            print(f"  - {x}")


#: A ddltune folder's files, in the order ``show FOLDER`` reads them: the profile first.
_FOLDER_FILES = ("profile.json", "recommendation.json", "measurements.jsonl", "validation.jsonl")


def run(args: argparse.Namespace) -> int:
    """Summarise FILE, or the first of a ddltune folder's files (``_FOLDER_FILES``)."""
    from calibration import summarize_measurements

    path = Path(args.file)
    if not path.exists():
        raise FileNotFoundError(2, "No such file", str(path))
    others: list[Path] = []
    if path.is_dir():
        own = [path / n for n in _FOLDER_FILES if (path / n).is_file()]
        if not own:
            raise IsADirectoryError(
                # the CLI's handler adds which of its files to give (folder_hint), once
                21,
                f"Is a directory, not a ddltune folder (none of {', '.join(_FOLDER_FILES)})",
                str(path),
            )
        path, others = own[0], own[1:]
    kind = detect_kind(path)
    if kind == "profile":
        summary = summarize_profile(path)
    elif kind == "recommendation":
        summary = summarize_recommendation(path)
    else:
        summary = summarize_measurements(path)  # InputFileError: file and line
    if args.json:
        print_json(summary)  # JSON escapes control characters itself (\u001b)
    elif kind == "profile":
        _print_profile(safe_tree(summary))
    elif kind == "recommendation":
        _print_recommendation(safe_tree(summary))
    else:
        _print_measurements(safe_tree(summary))
    if others and not args.json:
        print(f"\n(the summary of {path}; the folder also holds: "
              + "; ".join(f"ddltune show {p}" for p in others) + ")")  # fmt: skip
    return 0
