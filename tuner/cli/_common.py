"""Helpers shared by the CLI subcommands: errors, JSON output, argument types."""

from __future__ import annotations

import argparse
import json
import math
import sys
import traceback

from costmodel import InputFileError, parse_bytes, parse_bytes_list

__all__ = [
    "CLIError",
    "UsageError",
    "add_common_arguments",
    "add_model_arguments",
    "fail",
    "print_json",
    "bytes_arg",
    "bytes_list_arg",
    "int_list_arg",
    "name_list_arg",
    "positive_float_arg",
    "positive_int_arg",
]


class CLIError(Exception):
    """A failure the CLI reports in one line with exit code 1."""


class UsageError(CLIError):
    """A usage problem (bad or missing arguments): exit code 2."""


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    """Options every subcommand has."""
    parser.add_argument(
        "--debug", action="store_true", help="show the full Python traceback on errors"
    )


def add_model_arguments(group) -> None:
    """Add ``--model NAME``, ``--layers FILE`` and ``--hf-config FILE`` to a (mutually exclusive) group.

    The zoo's names come from :data:`costmodel.WORKLOAD_NAMES`, so ``--help``
    lists exactly what :func:`costmodel.get_workload` accepts.
    """
    from costmodel import WORKLOAD_NAMES

    group.add_argument(
        "--model", metavar="NAME", help=f"a model of the zoo: {', '.join(WORKLOAD_NAMES)}"
    )
    group.add_argument(
        "--layers",
        metavar="FILE",
        help="your model's parameter tensors as a JSON or CSV layer file (see the README)",
    )
    group.add_argument(  # load_layers reads a config.json: the same path as --layers
        "--hf-config",
        dest="layers",
        metavar="FILE",
        help="a Hugging Face transformer's "
        "config.json (llama, mistral, qwen2, gpt2, bert): tensors and FLOPs from it alone",
    )


def fail(exc: BaseException, *, command: str, debug: bool) -> int:
    """Print ``exc`` as one line on stderr and return the exit code.

    Usage errors (:class:`UsageError`, and ``ValueError``/``TypeError`` that are
    not about a file) exit 2; file problems and other failures exit 1.
    """
    if debug:
        traceback.print_exception(exc)
    msg = str(exc).strip().replace("\n", " ") or type(exc).__name__
    if isinstance(exc, InputFileError | CLIError) and not isinstance(exc, UsageError):
        code = 1
    elif isinstance(exc, UsageError | ValueError | TypeError | KeyError):
        code = 2
    elif isinstance(exc, FileNotFoundError | IsADirectoryError | PermissionError):
        code = 1
        if getattr(exc, "filename", None):
            msg = f"{exc.filename}: {exc.strerror}"
    else:
        code = 1
        msg = f"{type(exc).__name__}: {msg}"
    hint = (
        ""
        if debug
        else " (run with --debug for the traceback)"
        if code == 1 and not isinstance(exc, InputFileError | CLIError | OSError)
        else ""
    )
    print(f"ddltune {command}: error: {msg}{hint}", file=sys.stderr)
    return code


def _jsonable(obj):
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    if hasattr(obj, "tolist"):
        return _jsonable(obj.tolist())
    if hasattr(obj, "item"):
        return obj.item()
    return obj


def print_json(doc) -> None:
    """Print one JSON document on stdout (NaN/inf become ``null``; arrays become lists)."""
    json.dump(_jsonable(doc), sys.stdout, indent=2, allow_nan=False)
    sys.stdout.write("\n")


def bytes_arg(text: str) -> int:
    """argparse type: a size in bytes with nccl-tests suffixes (1K, 64M, 1G)."""
    try:
        return parse_bytes(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def bytes_list_arg(text: str) -> list[int]:
    """argparse type: comma-separated sizes (``1K,64M``)."""
    try:
        return parse_bytes_list(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def int_list_arg(text: str) -> list[int]:
    """argparse type: comma-separated positive integers (``2,4,8``)."""
    out = []
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        try:
            v = int(part)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected comma-separated integers such as 2,4,8, got {text!r}"
            ) from None
        if v < 1:
            raise argparse.ArgumentTypeError(f"every value must be ≥ 1, got {v} in {text!r}")
        out.append(v)
    if not out:
        raise argparse.ArgumentTypeError(f"expected at least one integer, got {text!r}")
    return out


def name_list_arg(text: str) -> list[str]:
    """argparse type: comma-separated names (``ps,ring``)."""
    out = [p.strip() for p in str(text).split(",") if p.strip()]
    if not out:
        raise argparse.ArgumentTypeError(f"expected comma-separated names, got {text!r}")
    return out


def positive_float_arg(text: str) -> float:
    """argparse type: a finite number > 0."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(v) or v <= 0:
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text!r}")
    return v


def positive_int_arg(text: str) -> int:
    """argparse type: an integer ≥ 1."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected an integer ≥ 1, got {text!r}")
    return v
