"""``ddltune --help`` and ``ddltune COMMAND --help`` without importing the model (issue 21).

The top-level parser reads each subcommand's NAME and HELP from its source and
loads only the subcommand being run; a subcommand imports the model inside
``run``, and the few names its options list (WORKLOAD_NAMES, STATISTICS, ...)
come from pure-Python modules through the packages' lazy public faces (PEP 562).
Checked in a fresh interpreter (this test process has jax loaded already).
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys

import pytest

#: What building a parser must not import (the model's dependencies and the extras').
HEAVY = ("jax", "equinox", "optax", "scipy", "matplotlib", "jinja2")
COMMANDS = (
    "run",
    "predict",
    "collect",
    "import-nccl-tests",
    "calibrate",
    "recommend",
    "report",
    "show",
    "validate",
    "lab",
)

PROBE = r"""
import contextlib, io, json, sys
{setup}
import tuner.cli
with contextlib.redirect_stdout(io.StringIO()) as out, \
        contextlib.redirect_stderr(io.StringIO()) as err:
    rc = tuner.cli.main({argv!r})
x64 = sys.modules["jax"].config.jax_enable_x64 if "jax" in sys.modules else None
print(json.dumps({{"rc": rc, "loaded": sorted(m for m in {heavy!r} if m in sys.modules),
                  "help": out.getvalue(), "err": err.getvalue(), "x64": x64}}))
"""


def _python(code: str, cwd=None) -> str:
    env = dict(os.environ, DDLTUNE_NO_COMPILATION_CACHE="1")
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
        env=env,
        cwd=cwd,
    )
    return proc.stdout.strip().splitlines()[-1]


def _probe(argv, setup="", heavy=HEAVY):
    return json.loads(_python(PROBE.format(setup=setup, argv=argv, heavy=heavy)))


def test_top_level_help_imports_nothing_heavy_and_lists_every_command():
    out = _probe(["--help"], heavy=(*HEAVY, "costmodel", "calibration"))
    assert out["rc"] == 0
    assert out["loaded"] == []
    for name in COMMANDS:
        assert f"    {name}" in out["help"]


def test_building_every_subcommands_parser_imports_nothing_heavy():
    # build_parser() without argv imports every subcommand module and adds its options
    code = (
        "import sys, tuner.cli; tuner.cli.build_parser(); "
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    )
    assert _python(code) == "[]"


def test_the_check_sees_an_import():
    # positive control of the check above: a module imported before it is seen
    code = (
        "import sys, numpy, tuner.cli; tuner.cli.build_parser(); "
        f"print(sorted(m for m in {(*HEAVY, 'numpy')!r} if m in sys.modules))"
    )
    assert _python(code) == "['numpy']"


@pytest.mark.parametrize("command", COMMANDS)
def test_a_subcommands_help_imports_nothing_heavy(command):
    out = _probe([command, "--help"])
    assert out["rc"] == 0
    assert out["loaded"] == []
    assert f"usage: ddltune {command}" in out["help"] and "--debug" in out["help"]


def test_the_probe_sees_an_import():
    # positive control: a module imported before the CLI shows up in the list
    out = _probe(["predict", "--help"], setup="import scipy")
    assert out["loaded"] == ["scipy"]


def test_a_subcommand_that_runs_loads_the_model_with_its_jax_settings(tmp_path):
    # predict declares X64: jax is imported by run, after main switched float64 on
    argv = ["predict", "--preset", "ethernet-10g", "--model", "resnet18"]
    argv += ["--arch", "ring", "--workers", "2", "--json"]
    out = _probe(argv)
    assert out["rc"] == 0 and '"rows"' in out["help"]
    assert "jax" in out["loaded"] and "equinox" in out["loaded"]
    assert out["x64"] is True


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--model", "resnet18", "--workers", "2"], "iteration mode needs --arch"),
        (["--collective", "all_reduce"], "collective mode needs --num-ranks, --message-bytes"),
        (["--model", "resnet18", "--num-ranks", "2"], "cannot be combined"),
    ],
)
def test_a_usage_error_answers_before_jax_is_imported(argv, says):
    # predict's check(args) runs before main configures jax: exit 2, the option
    # named on stderr, nothing heavy loaded
    out = _probe(["predict", "--preset", "ethernet-10g", *argv])
    assert out["rc"] == 2
    assert says in out["err"]
    assert out["loaded"] == []


# --------------------------------------------------------------------------- lazy faces

FACES = ("costmodel", "costmodel.workloads", "calibration", "tuner", "tuner.validation")


@pytest.mark.parametrize("name", FACES)
def test_a_lazy_face_offers_each_name_as_its_module_defines_it(name):
    pkg = importlib.import_module(name)
    assert pkg.__all__ == sorted(pkg._EXPORTS)
    assert set(pkg.__all__) <= set(dir(pkg))
    for attr, module in pkg._EXPORTS.items():
        defined = getattr(importlib.import_module(module, name), attr)
        assert getattr(pkg, attr) is defined, attr
        ns = {}
        exec(f"from {name} import {attr}", ns)
        assert ns[attr] is defined, attr
    for sub in getattr(pkg, "_SUBPACKAGES", ()):
        assert getattr(pkg, sub) is importlib.import_module(f"{name}.{sub}")
        assert sub in dir(pkg)
    with pytest.raises(AttributeError, match="no_such_name"):
        pkg.no_such_name  # noqa: B018 - the attribute access is the test


def test_the_names_help_lists_are_the_ones_their_modules_use():
    # moved to pure-Python modules for --help; their old homes import them
    import calibration
    import costmodel
    import tuner
    from calibration import _collect, _fit, _worker
    from costmodel.workloads import _zoo
    from tuner import _run
    from tuner.validation import _validate

    assert calibration.STATISTICS is _fit.STATISTICS
    assert calibration.COLLECT_PATTERNS is _worker.COLLECT_PATTERNS is _collect.COLLECT_PATTERNS
    assert calibration.COLLECT_SUITES is _collect.SUITES
    assert costmodel.WORKLOAD_NAMES is _zoo.WORKLOAD_NAMES == tuple(_zoo._BUILDERS)
    assert tuner.RUN_DEFAULTS is _run.RUN_DEFAULTS
    assert tuner.validation.DEFAULT_VALIDATE_BUCKETS is _validate.DEFAULT_VALIDATE_BUCKETS
