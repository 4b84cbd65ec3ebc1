"""Helpers shared by the CLI subcommands: errors, JSON output, argument types."""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import re
import sys
import traceback

# costmodel (and with it jax) is imported inside the functions that need it, so
# that `ddltune --help` and argument parsing stay fast.

__all__ = [
    "CLIError",
    "UsageError",
    "add_common_arguments",
    "add_model_arguments",
    "add_nics_argument",
    "add_host_links_argument",
    "host_links_arg",
    "add_precision_arguments",
    "preset_compute",
    "progress_kwargs",
    "one_line_errors",
    "configure_jax",
    "enable_compilation_cache",
    "require_extra",
    "fail",
    "print_json",
    "bytes_arg",
    "bytes_list_arg",
    "message_bytes_list_arg",
    "int_list_arg",
    "name_list_arg",
    "plural",
    "positive_float_arg",
    "positive_int_arg",
    "safe_text",
    "safe_tree",
    "option_names",
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
        help="your model's parameter tensors as a JSON or CSV layer file: name, params, "
        "fwd_flops, optional bwd_flops and each layer's GEMM shape gemm_rows, gemm_width "
        "(see the README)",
    )
    group.add_argument(  # load_layers reads a config.json: the same path as --layers
        "--hf-config",
        dest="layers",
        metavar="FILE",
        help="a Hugging Face transformer's "
        "config.json (llama, mistral, qwen2, gpt2, bert): tensors and FLOPs from it alone",
    )


def model_workload_arg(model: str | None, layers: str | None, batch_size: int):
    """The workload of ``--model NAME`` or ``--layers/--hf-config FILE`` at ``batch_size``.

    Raises:
        UsageError: an unknown ``--model``, naming the valid ones.
        InputFileError: a bad layer file (its file and line).
    """
    from costmodel import WORKLOAD_NAMES, format_choices, get_workload, load_layers

    if model is not None:
        try:
            return get_workload(model, batch_size)
        except ValueError:
            raise UsageError(
                f"--model: unknown model {model!r}; valid: "
                f"{format_choices(WORKLOAD_NAMES, model)} (or your own with --layers FILE)"
            ) from None
    return load_layers(layers, batch_size=batch_size)  # InputFileError: file and line


def add_precision_arguments(group) -> None:
    """Add ``--grad-dtype`` and ``--accumulation-steps`` (gradient bytes and exchanges per step).

    ``--grad-dtype`` goes to :func:`costmodel.with_grad_dtype`, ``--accumulation-steps``
    to :func:`costmodel.accumulated_workload`, ``--activation-checkpointing`` to
    :func:`costmodel.with_activation_checkpointing`, ``--compute-dtype`` to the
    preset (:func:`preset_compute`). All default to ``None``.
    """
    group.add_argument(
        "--grad-dtype",
        choices=("fp32", "bf16", "fp16"),
        default=None,
        help="gradient dtype on the wire: fp32 (default, 4 bytes), bf16 or fp16 (2 bytes: "
        "AMP with DDP's fp16/bf16 compress hook, Horovod's Compression.fp16)",
    )
    group.add_argument(
        "--activation-checkpointing",
        choices=("none", "selective", "full"),
        default=None,
        help="transformers: what backward recomputes instead of keeping (Korthikanti et al. "
        "2022): none (default; activations of every layer kept, flash attention assumed), "
        "selective (the attention core, +4·s²·h FLOPs per layer), full (each layer from its "
        "input, one more forward); counted in memory per rank and in the step",
    )
    group.add_argument(
        "--compute-dtype",
        choices=("fp32", "tf32", "bf16", "fp16", "fp8"),
        default=None,
        help="with --preset: the dtype forward and backward run in, for the device's "
        "throughput (its datasheet peak in that dtype × the published utilisation of the "
        "model's kind: transformers 45%% MFU). Default: --grad-dtype when bf16/fp16 "
        "(mixed precision), else the device's default path (TF32 on a100/h100, else fp32)",
    )
    group.add_argument(
        "--accumulation-steps",
        type=accumulation_steps_arg,
        metavar="K",
        default=None,
        help="micro-batches of --batch-size per optimizer step, ≥ 1 (default 1), exchanged "
        "as each framework does: once per step in the last backward for DDP (no_sync), "
        "Horovod, parameter servers and ZeRO-1; in every micro-batch for ZeRO-2 (DeepSpeed) "
        "and FSDP/HSDP (gathers and reduce-scatters each time); times and throughput are "
        "per optimizer step",
    )


def preset_compute(args, workload) -> tuple[str | None, str]:
    """(compute dtype, model kind) for a preset's device throughput (``costmodel.preset``).

    The dtype is ``--compute-dtype``, else the ``--grad-dtype`` when it is a
    16-bit one (mixed precision computes in it), else ``None`` (the device's
    default path); the kind is the workload's (:attr:`costmodel.Workload.kind`).

    Raises:
        UsageError: ``--compute-dtype`` given with ``--profile`` (a fitted
            profile carries the compute rate it measured).
    """
    explicit = getattr(args, "compute_dtype", None)
    if explicit and getattr(args, "profile", None):
        raise UsageError(
            "--compute-dtype applies to --preset; a profile carries the compute rate it measured"
        )
    grad = getattr(args, "grad_dtype", None)
    dtype = explicit or (grad if grad in ("bf16", "fp16") else None)
    return dtype, getattr(workload, "kind", "")


def add_nics_argument(group) -> None:
    """Add ``--nics-per-node N`` (rails; :func:`costmodel.preset`'s ``nics_per_node``)."""
    group.add_argument(
        "--nics-per-node",
        type=positive_int_arg,
        metavar="N",
        default=None,
        help="with --preset: NICs (rails) per node, ≥ 1, each at the preset's bandwidth "
        "(default: the preset's, e.g. 8 on DGX-class nodes, else 4)",
    )


def add_host_links_argument(group) -> None:
    """Add ``--host-links N`` (:func:`costmodel.preset`'s ``host_links``)."""
    group.add_argument(
        "--host-links",
        type=host_links_arg,
        metavar="N",
        default=None,
        help="with --preset: independent links from a node's GPUs to host memory (PCIe "
        "switch uplinks), 1-64; ps_host puts ⌈ranks per node / N⌉ GPUs on each "
        "(default 1; an NVIDIA DGX-1 has 4, two GPUs per switch: nvidia-smi topo -m)",
    )


#: Python argument names in library messages → the CLI options that set them.
_OPTION_NAMES = {
    "max_bytes": "--max-bytes",
    "min_bytes": "--min-bytes",
    "budget_s": "--budget-s",
    "max_workers": "--max-workers",
    "ranks_per_node": "--ranks-per-node",
    "num_ranks": "--num-ranks",
    "message_bytes": "--message-bytes",
    "bucket_bytes": "--bucket-bytes",
    "batch_size": "--batch-size",
    "global_batch": "--global-batch",
    "step_time_s": "--step-time",
    "accumulation_steps": "--accumulation-steps",
    "grad_dtype": "--grad-dtype",
    "nics_per_node": "--nics-per-node",
    "host_links": "--host-links",
    "min_efficiency": "--min-efficiency",
    "target_throughput": "--target-throughput",
    "price_per_hour": "--price-per-hour",
    "server_price_per_hour": "--server-price-per-hour",
    "device_memory_bytes": "--device-memory",
    "num_processes": "--num-processes",
    "timeout_s": "--timeout",
}


#: A library message's advice to Python callers, as the command line says it
#: (:func:`fail`): a user of ``ddltune`` has options, not functions.
_CLI_PHRASES = {
    "For your own model use load_layers(path) or workload_from_pytree(params).": (
        "For your own model give its layers: --layers FILE (a JSON or CSV layer file, or a "
        "Hugging Face config.json; see the README's 'Your own model')."
    ),
    "('ddltune recommend --force'; recommend(..., force=True))": "(--force)",
}


def cli_phrases(message: str) -> str:
    """``message`` with the library's advice to Python callers as command-line advice.

    Example:
        >>> cli_phrases("unreliable ('ddltune recommend --force'; recommend(..., force=True)).")
        'unreliable (--force).'
    """
    for api, cli in _CLI_PHRASES.items():
        message = message.replace(api, cli)
    return message


def option_names(message: str, params=()) -> str:
    """A library message with Python argument names replaced by the CLI options.

    Only whole words are replaced (``max_bytes`` → ``--max-bytes``), and not
    ones already written as an option or inside a longer identifier. The
    names are the common ones (:data:`_OPTION_NAMES`) plus ``params``, a
    command's own ``dest`` names (``foo_bar`` → ``--foo-bar``).

    Example:
        >>> option_names("max_bytes must be >= min_bytes, got 0")
        '--max-bytes must be >= --min-bytes, got 0'
        >>> option_names("rounds (0) must be >= 1", ["rounds"])
        '--rounds (0) must be >= 1'
    """
    import re

    names = {**_OPTION_NAMES, **{p: "--" + p.replace("_", "-") for p in params}}

    def sub(m):
        return names[m.group(0)]

    alternatives = "|".join(map(re.escape, sorted(names, key=len, reverse=True)))
    pattern = r"(?<![\w.'\"-])(" + alternatives + r")(?![\w(])"
    return re.sub(pattern, sub, message)


def one_line_errors(parser: argparse.ArgumentParser, command: str | None = None) -> None:
    """Make ``parser``'s usage errors one line: ``ddltune CMD: error: ... (see --help)``.

    argparse prints the whole usage block before its message; ddltune errors are
    one line on stderr, exit code 2, with a hint to ``--help``.
    """
    prog = f"ddltune {command}" if command else "ddltune"

    def error(message: str):
        parser.exit(2, f"{prog}: error: {message} (see '{prog} --help')\n")

    parser.error = error


def progress_kwargs(file=None, *, interval_s: float = 5.0) -> dict:
    """tqdm arguments for a progress bar that is quiet in a log.

    On a terminal: the usual bar (updates at most 10 times a second). When the
    stream is not a terminal (a log file, CI): an update at most every
    ``interval_s`` seconds, written as whole lines (no carriage-return redraw of
    the bar for every point).

    Args:
        file: the stream of the bar (default ``sys.stderr``).
        interval_s: seconds between updates in a log, > 0.

    Returns:
        Keyword arguments for ``tqdm(...)``: ``file``, ``mininterval``,
        ``dynamic_ncols`` and, in a log, ``ascii`` and a ``maxinterval``.
    """
    file = sys.stderr if file is None else file
    try:
        tty = bool(file.isatty())
    except (AttributeError, ValueError):
        tty = False
    if tty:
        return {"file": file, "mininterval": 0.1, "dynamic_ncols": True}
    return {
        "file": _LineStream(file),
        "mininterval": float(interval_s),
        "maxinterval": max(float(interval_s), 10.0),
        "ascii": True,
        "ncols": 80,
    }


class _LineStream:
    """A stream wrapper turning tqdm's carriage-return redraws into whole lines."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        text = text.replace("\r", "").replace("\x1b[A", "")
        if text.strip():
            self._stream.write(text.rstrip("\n") + "\n")
        return len(text)

    def flush(self) -> None:
        self._stream.flush()

    def isatty(self) -> bool:
        return False


def plural(n, word: str, words: str | None = None) -> str:
    """``n`` and the word, plural unless n is 1.

    Example:
        >>> plural(1, "point"), plural(3, "point"), plural(0, "bus", "buses")
        ('1 point', '3 points', '0 buses')
    """
    return f"{n} {word if n == 1 else (words or word + 's')}"


def fail(exc: BaseException, *, command: str, debug: bool) -> int:
    """Print ``exc`` as one line on stderr and return the exit code.

    Usage errors (:class:`UsageError`, and ``ValueError``/``TypeError`` that are
    not about a file) exit 2; file problems and other failures exit 1.
    """
    from costmodel import InputFileError

    if debug:
        traceback.print_exception(exc)
    msg = safe_text(str(exc).strip().replace("\n", " ")) or type(exc).__name__
    if isinstance(exc, InputFileError | CLIError) and not isinstance(exc, UsageError):
        code = 1
    elif isinstance(exc, UsageError | ValueError | TypeError | KeyError):
        code = 2
    elif isinstance(
        exc, FileNotFoundError | IsADirectoryError | PermissionError | FileExistsError
    ):  # a file problem: its message, or the file and the system's words, say what
        code = 1
        if getattr(exc, "filename", None):
            msg = safe_text(f"{exc.filename}: {exc.strerror}")  # a name is the user's text
            if isinstance(exc, IsADirectoryError):
                first = {"calibrate": "measurements.jsonl", "validate": "validation.jsonl"}
                want = "records" if command in first else ""
                msg += folder_hint(exc.filename, want, first.get(command, ""))
    else:
        code = 1
        msg = f"{type(exc).__name__}: {msg}"
    if code == 2:  # a library's argument names, as the options the user typed
        msg = option_names(msg)
    msg = cli_phrases(msg)
    hint = (
        ""
        if debug
        else " (run with --debug for the traceback)"
        if code == 1 and not isinstance(exc, InputFileError | CLIError | OSError)
        else ""
    )
    print(f"ddltune {command}: error: {msg}{hint}", file=sys.stderr)
    return code


def load_profile(path, option: str = "--profile"):
    """:meth:`calibration.Profile.load` of an option's file; a file that is missing, a
    folder or unreadable is a one-line error naming the option (exit 1).

    Raises:
        CLIError: ``--profile PATH: No such file or directory`` and the like.
        costmodel.InputFileError: a file that is not a valid profile (names the file).
    """
    from calibration import Profile

    try:
        return Profile.load(path)
    except (FileNotFoundError, IsADirectoryError, PermissionError) as e:
        hint = folder_hint(path, "profile") if isinstance(e, IsADirectoryError) else ""
        raise CLIError(safe_text(f"{option} {path}: {e.strerror}") + hint) from None


def folder_hint(path, want: str = "", first: str = "") -> str:
    """What to give instead of a folder: ``"; give a file, for example R/profile.json"``.

    Args:
        path: the folder.
        want: ``"profile"`` (its JSON files that are ddltune profiles),
            ``"records"`` (its JSON Lines files) or ``""`` (both kinds of file).
        first: a file name to list before the others (sorted by name).

    Returns:
        The hint: at most three files, or ``"; give a file, not a folder"`` where
        the folder has none of the kind.
    """
    import glob

    try:
        names = sorted(glob.glob(os.path.join(glob.escape(str(path)), "*.json*")))
    except OSError:
        names = []
    ends = {"profile": (".json",), "records": (".jsonl",)}.get(want, (".json", ".jsonl"))
    names = [n for n in names if n.endswith(ends) and os.path.isfile(n)]
    if want == "profile":  # a profile says so at its top: {"schema": 1, "kind": "ddltune-profile"
        names = [n for n in names if b"ddltune-profile" in _head(n)]
    names.sort(key=lambda n: os.path.basename(n) != first)  # stable: the rest stay sorted
    if not names:
        return "; give a file, not a folder"
    more = ", …" if len(names) > 3 else ""
    return "; give a file, for example " + ", ".join(safe_text(n) for n in names[:3]) + more


def _head(path, size: int = 512) -> bytes:
    """The first ``size`` bytes of a file (b"" where it cannot be read)."""
    try:
        with open(path, "rb") as fh:
            return fh.read(size)
    except OSError:
        return b""


def print_json(doc) -> None:
    """Print one JSON document on stdout (NaN/inf become ``null``; arrays become lists)."""
    from tuner import jsonable  # one implementation, shared with profiles and reports

    json.dump(jsonable(doc), sys.stdout, indent=2, allow_nan=False)
    sys.stdout.write("\n")


def bytes_arg(text: str) -> int:
    """argparse type: a size in bytes with nccl-tests suffixes (1K, 64M, 1G)."""
    from costmodel import parse_bytes

    try:
        return parse_bytes(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def bytes_list_arg(text: str) -> list[int]:
    """argparse type: comma-separated sizes (``1K,64M``)."""
    from costmodel import parse_bytes_list

    try:
        return parse_bytes_list(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def message_bytes_list_arg(text: str) -> list[int]:
    """argparse type: comma-separated message sizes (``1K,64M``), each at least 1 byte.

    A collective of 0 bytes moves nothing: NCCL returns at once, and nccl-tests'
    0-byte row times an empty launch, which no α-β-γ term describes.
    """
    from costmodel import parse_bytes_list

    try:
        sizes = parse_bytes_list(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if 0 in sizes:
        zero = next(
            p.strip() for p in str(text).split(",") if p.strip() and parse_bytes_list(p) == [0]
        )
        raise argparse.ArgumentTypeError(
            f"a message must be at least 1 byte, got {zero!r} in {text!r} (a 0-byte collective "
            "moves nothing)"
        )
    return sizes


def int_list_arg(text: str) -> list[int]:
    """argparse type: comma-separated positive integers (``2,4,8``)."""
    out = []
    parts = [p.strip() for p in str(text).split(",")]
    if "" in parts and any(parts):
        raise argparse.ArgumentTypeError(f"an empty item in {text!r} (a doubled or stray comma?)")
    for part in parts:
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


#: The most micro-batches per optimizer step we accept: beyond it a step's times overflow
#: float precision (1e20 micro-batches gave an exposed time 45,000x the communication).
MAX_ACCUMULATION_STEPS = 1 << 16


def accumulation_steps_arg(text: str) -> int:
    """argparse type: an integer 1 … :data:`MAX_ACCUMULATION_STEPS`."""
    v = positive_int_arg(text)
    if v > MAX_ACCUMULATION_STEPS:
        raise argparse.ArgumentTypeError(
            f"expected at most {MAX_ACCUMULATION_STEPS} micro-batches per step, got {text!r}"
        )
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


def host_links_arg(text: str) -> int:
    """argparse type: host links per node, an integer in [1, 64]."""
    v = positive_int_arg(text)
    if v > 64:
        raise argparse.ArgumentTypeError(f"expected at most 64 host links per node, got {text!r}")
    return v


def enable_compilation_cache() -> None:
    """Keep compiled programs on disk between runs (JAX's persistent compilation cache).

    The folder is ``$XDG_CACHE_HOME/ddltune/jax`` (default ``~/.cache/ddltune/jax``);
    programs that took at least 0.1 s to compile are kept. Skipped when the
    user chose a folder (``JAX_COMPILATION_CACHE_DIR``, which JAX reads itself,
    or ``jax_compilation_cache_dir`` already set), opted out
    (``DDLTUNE_NO_COMPILATION_CACHE``), or the folder cannot be created.
    Called by :func:`configure_jax`, the one place the CLI changes JAX settings.
    """
    if os.environ.get("DDLTUNE_NO_COMPILATION_CACHE") or os.environ.get(
        "JAX_COMPILATION_CACHE_DIR"
    ):
        return
    import jax

    if jax.config.jax_compilation_cache_dir:
        return
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    path = os.path.join(base, "ddltune", "jax")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError:
        return
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.1)


def configure_jax(*, x64: bool = False, compilation_cache: bool = False) -> None:
    """The JAX settings of one CLI run, chosen once at the entry (library code never does).

    A subcommand module declares what it needs as module constants, read by
    :func:`tuner.cli.main`: ``X64 = True`` (float64: ``predict``, ``calibrate``,
    ``report``, ``run``, whose printed digits or fits need it; ``recommend``
    keeps float32, which halves its search time) and ``COMPILATION_CACHE = True``
    (:func:`enable_compilation_cache`: ``predict``, ``calibrate``, ``recommend``,
    ``report``, ``run``).
    With neither, JAX is not even imported.

    Args:
        x64: switch ``jax_enable_x64`` on (it is never switched off here).
        compilation_cache: keep compiled programs between runs.
    """
    if x64:
        import jax

        jax.config.update("jax_enable_x64", True)
    if compilation_cache:
        enable_compilation_cache()


def require_extra(command: str, extra: str, modules: tuple[str, ...]) -> None:
    """Fail in one line, naming the extra, when an optional dependency is missing.

    Args:
        command: the subcommand (``report``), for the message.
        extra: the ``pyproject.toml`` optional-dependency group (``report``).
        modules: top-level modules the extra installs (``("matplotlib", "jinja2")``).

    Raises:
        CLIError: ``ddltune report needs the 'report' extra (jinja2 is not
            installed): pip install 'ddltune[report]'``.
    """
    missing = []
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if missing:
        verb = "is" if len(missing) == 1 else "are"
        raise CLIError(
            f"ddltune {command} needs the {extra!r} extra ({', '.join(missing)} {verb} not "
            f"installed): pip install 'ddltune[{extra}]'"
        )


_ESC_SEQ = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]?"
    r"|\x1b\][^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[PX^_][^\x1b\x9c]*(?:\x1b\\|\x9c)?"
    r"|\x1b[\x20-\x7e]?"
    r"|\x9b[0-?]*[ -/]*[@-~]?"
    r"|\x9d[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
)


def safe_text(value) -> str:
    """``str(value)`` with terminal control removed, for anything printed to a terminal.

    Removes escape sequences (CSI such as colours or cursor moves, OSC such as
    OSC 52 which writes the clipboard, DCS/APC/PM/SOS strings, two-character
    ``ESC x``, and their 8-bit C1 forms), then every remaining C0 control
    character except tab and newline, DEL (0x7f), the C1 range 0x80–0x9f and
    the Unicode bidirectional controls (U+202E and its kin, which reorder the
    text a terminal shows). Printable text (any script) is kept. Source of the sequence grammar:
    ECMA-48, sections 5.4–5.6 and 8.3.

    Args:
        value: anything; converted with ``str``.

    Returns:
        Text safe to write to a terminal (a user's string from a record or a
        profile cannot change the terminal's state).

    Example:
        >>> safe_text("cpu\\x1b]52;c;aGk=\\x07 \\x1b[31mred\\x1b[0m\\r")
        'cpu red'
    """
    from tuner import strip_controls  # one list of controls, shared with report.md

    return strip_controls(_ESC_SEQ.sub("", str(value)))


def safe_tree(obj):
    """``obj`` with :func:`safe_text` applied to every string in it (keys too).

    Dicts, lists and tuples are copied; other values are returned as they are.
    For summaries whose strings come from user files, cleaned before layout so
    that tables stay aligned.

    Example:
        >>> safe_tree({"device_kind": ["cpu\\x1b[2J"]})
        {'device_kind': ['cpu']}
    """
    if isinstance(obj, str):
        return safe_text(obj)
    if isinstance(obj, dict):
        return {safe_tree(k): safe_tree(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(safe_tree(v) for v in obj)
    return obj
