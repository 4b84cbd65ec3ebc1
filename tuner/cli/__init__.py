"""The ``ddltune`` command line: one command, one subcommand per job.

This package only parses arguments, calls public functions of ``costmodel``,
``calibration`` and ``tuner``, and formats their results. Each subcommand lives
in its own module ``_<name>.py`` that defines ``NAME``, ``HELP``,
``add_arguments(parser)`` and ``run(args) -> int``.

Conventions (every subcommand follows them):

* ``--help`` explains every option with its unit and gives an example;
* errors are one line on stderr, exit code 2 for usage errors (bad arguments,
  unknown names), 1 for failures (a malformed file, a run that failed);
  no traceback unless ``--debug``;
* ``--json`` prints exactly one JSON document on stdout;
* sizes accept nccl-tests suffixes (``1K``, ``64M``, ``1G``: powers of 1024).
* ``NAME``, ``HELP`` and ``add_arguments`` import nothing that imports jax:
  the model is imported inside ``run`` (and the helpers it calls), so that
  ``ddltune COMMAND --help`` is fast; the names options list come from the
  packages' lazy public faces (``from costmodel import WORKLOAD_NAMES`` loads
  a pure-Python module). ``tests/test_cli_imports.py`` checks it.

A subcommand module may also declare ``X64 = True`` and
``COMPILATION_CACHE = True`` (the JAX settings it needs: :func:`main` applies
them once, through :func:`~tuner.cli._common.configure_jax`, before ``run``)
and ``EXTRA = (name, modules)`` (an optional dependency group it needs:
a missing one is a one-line error naming the extra), and ``check(args)``
(pure-Python checks of the options' combination, run before jax is imported,
so that a usage error answers as fast as ``--help``).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib
import importlib.util
import os
import re
import sys
from pathlib import Path

from ._common import (
    add_common_arguments,
    configure_jax,
    fail,
    one_line_errors,
    require_extra,
)

__all__ = ["main", "build_parser"]

# Subcommands in the order ``--help`` lists them. A module that does not exist
# yet is simply not offered.
_SUBCOMMANDS = [
    "run",
    "predict",
    "collect",
    "import_nccl_tests",
    "calibrate",
    "recommend",
    "report",
    "show",
    "validate",
    "lab",
]


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("ddltune")
    except Exception:  # pragma: no cover - not installed
        return "unknown"


def _declared(spec) -> tuple[str | None, str | None]:
    """A subcommand module's ``NAME`` and ``HELP``, read from its source without importing it."""
    found: dict[str, str] = {}
    try:
        tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, TypeError):
        return None, None
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id in ("NAME", "HELP")
        ):
            try:
                found[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                return None, None
    return found.get("NAME"), found.get("HELP")


def build_parser(argv: list[str] | None = None) -> tuple[argparse.ArgumentParser, dict]:
    """Build the top-level parser; returns it and ``{subcommand: module}``.

    Args:
        argv: the arguments to be parsed, or ``None``. Given, only the
            subcommand they name is imported (with its options); the others
            are listed by the ``NAME`` and ``HELP`` their source declares, so
            ``ddltune --help`` imports none of them (nor jax). ``None``
            imports every subcommand (the returned dict then holds them all).
    """
    parser = argparse.ArgumentParser(
        prog="ddltune",
        description=(
            "Recommend the gradient-exchange architecture (parameter server, peer-to-peer, "
            "ring/tree/hierarchical all-reduce), worker count and gradient bucket size for "
            "synchronous data-parallel training, from a JAX cost model calibrated on your cluster."
        ),
        epilog="Run 'ddltune COMMAND --help' for a command's options and an example.",
    )
    one_line_errors(parser)
    parser.add_argument("--version", action="version", version=f"ddltune {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    wanted = argv[0] if argv and not argv[0].startswith("-") else None
    modules = {}
    for name in _SUBCOMMANDS:
        modname = f"{__name__}._{name}"
        spec = importlib.util.find_spec(modname)
        if spec is None:
            continue
        if argv is not None:
            declared, help_text = _declared(spec)
            if declared is not None and help_text is not None and declared != wanted:
                sub.add_parser(declared, help=help_text)  # listed, not loaded
                continue
        mod = importlib.import_module(modname)
        p = sub.add_parser(
            mod.NAME,
            help=mod.HELP,
            description=getattr(mod, "DESCRIPTION", mod.HELP),
            epilog=getattr(mod, "EPILOG", None),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        one_line_errors(p, mod.NAME)
        mod.add_arguments(p)
        add_common_arguments(p)
        modules[mod.NAME] = mod
    return parser, modules


_NEGATIVE = re.compile(r"^-(\d|\.\d)")


def _negative_values_attached(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """``--opt -5G`` as ``--opt=-5G`` for a subcommand's options that take one value.

    argparse reads a token that starts with ``-`` and is not a plain number as
    an option, so ``--device-memory -5G`` failed with "expected one argument";
    attached, the value reaches the option's own check, which says what is
    wrong with it.

    Example:
        >>> p = argparse.ArgumentParser(); sp = p.add_subparsers(dest="c")
        >>> _ = sp.add_parser("x").add_argument("--m")
        >>> _negative_values_attached(p, ["x", "--m", "-5G", "-v"])
        ['x', '--m=-5G', '-v']
    """
    sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    if sub is None or not argv or argv[0] not in sub.choices:
        return argv
    takes_one = {
        opt
        for a in sub.choices[argv[0]]._actions
        if a.option_strings and a.nargs is None  # one value (flags have nargs 0)
        for opt in a.option_strings
    }
    out, i = [], 0
    while i < len(argv):
        tok = argv[i]
        if tok in takes_one and i + 1 < len(argv) and _NEGATIVE.match(argv[i + 1]):
            out.append(f"{tok}={argv[i + 1]}")
            i += 2
            continue
        out.append(tok)
        i += 1
    return out


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``ddltune`` console script.

    Args:
        argv: arguments without the program name; ``None`` reads ``sys.argv``.

    Returns:
        The process exit code: 0 success, 1 failure, 2 usage error.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    parser, modules = build_parser(argv)
    argv = _negative_values_attached(parser, argv)
    try:
        args, unknown = parser.parse_known_args(argv)
        if unknown:  # said by the subcommand's parser: its name and its --help
            sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
            where = sub.choices.get(getattr(args, "command", None) or "", parser)
            where.error(f"unrecognized arguments: {' '.join(unknown)}")
    except SystemExit as exc:  # argparse: --help/--version (0) or usage error (2)
        return int(exc.code or 0)
    if not args.command:
        parser.print_help(sys.stderr)
        return 2
    debug = getattr(args, "debug", False)
    mod = modules[args.command]
    try:
        if hasattr(mod, "EXTRA"):
            require_extra(mod.NAME, *mod.EXTRA)
        if hasattr(mod, "check"):  # usage errors answer before jax is imported (0.6 s)
            mod.check(args)
        configure_jax(
            x64=getattr(mod, "X64", False),
            compilation_cache=getattr(mod, "COMPILATION_CACHE", False),
        )
        return int(mod.run(args) or 0)
    except KeyboardInterrupt:
        print("ddltune: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `ddltune show FILE | head`: the reader left, not an error
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silence the flush at exit
        except OSError:
            pass
        return 0
    except Exception as exc:  # one clear line, no traceback unless --debug
        return fail(exc, command=args.command, debug=debug)


def console_main() -> None:
    """The ``ddltune`` console script (and ``python -m tuner.cli``): :func:`main`, then exit.

    After Ctrl-C (exit 130) with JAX loaded, the process ends at once
    (``os._exit``, the output flushed) rather than through the interpreter's
    teardown: XLA's threads can still be running the interrupted work, and
    tearing down beside them crashed (exit 139, SIGSEGV: every interrupt of
    ``ddltune calibrate`` at 3–6 s in a new user's trial, 2 of 2 at 3 and 5 s
    when reproduced on that trial's records). Everything the
    command writes is complete or removed before :func:`main` returns.
    """
    code = main()
    if code == 130 and "jax" in sys.modules:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(130)
    sys.exit(code)


if __name__ == "__main__":  # pragma: no cover
    console_main()
