"""Test configuration: float64 and strict dtype promotion, once for the session; shared fixtures."""

import hashlib
import os
import signal
from pathlib import Path

import jax
import pytest

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_dtype_promotion", "strict")

# A suite started in the background by a non-interactive shell (`cmd &`, nohup) inherits
# SIGINT ignored, and so does every process it starts: the Ctrl-C tests' children then
# never see their SIGINT (4 failures, measured). Python's own handler here makes the
# children start with the default disposition, as they do under a terminal.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _tree(folder: Path) -> dict:
    """Every entry under ``folder`` (links not followed) → its bytes' hash, link or 'dir'."""
    out = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            p = Path(root) / name
            rel = p.relative_to(folder).as_posix()
            if p.is_symlink():
                out[rel] = "link:" + os.readlink(p)
            elif p.is_file():
                out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
            else:
                out[rel] = "dir"
    return out


@pytest.fixture
def tree():
    """The folder snapshot function: ``tree(folder)`` → {relative path: hash, link or 'dir'}."""
    return _tree
