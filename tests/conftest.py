"""Test configuration: float64 and strict dtype promotion, once for the session; shared fixtures."""

import hashlib
import os
from pathlib import Path

import jax
import pytest

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_dtype_promotion", "strict")


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
