"""``ddltune --help`` lists every command without importing the model (issue 21).

The top-level parser reads each subcommand's NAME and HELP from its source and
loads only the subcommand being run; ``tuner``'s public face is lazy. Checked in
a fresh interpreter (this test process has jax loaded already).
"""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("jax", "equinox", "optax", "scipy", "matplotlib", "jinja2", "costmodel", "calibration")

PROBE = r"""
import contextlib, io, json, sys
{setup}
import tuner.cli
with contextlib.redirect_stdout(io.StringIO()) as out:
    rc = tuner.cli.main({argv!r})
print(json.dumps({{"rc": rc, "loaded": sorted(m for m in {heavy!r} if m in sys.modules),
                  "help": out.getvalue()}}))
"""


def _probe(argv, setup=""):
    code = PROBE.format(setup=setup, argv=argv, heavy=HEAVY)
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_top_level_help_imports_nothing_heavy_and_lists_every_command():
    out = _probe(["--help"])
    assert out["rc"] == 0
    assert out["loaded"] == []
    for name in ("run", "predict", "collect", "import-nccl-tests", "calibrate", "recommend"):
        assert f"    {name}" in out["help"]


def test_the_probe_sees_an_import():
    # positive control: a module imported before the CLI shows up in the list
    out = _probe(["--help"], setup="import scipy")
    assert out["loaded"] == ["scipy"]


def test_a_subcommand_loads_what_it_needs():
    out = _probe(["predict", "--help"])
    assert out["rc"] == 0 and "--workers" in out["help"]
    assert "costmodel" in out["loaded"] and "jax" in out["loaded"]
