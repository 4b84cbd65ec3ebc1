"""Gradient-exchange architectures (one file per family, a base class beside them)."""

from __future__ import annotations

from .._errors import format_choices
from .._names import ARCHITECTURE_NAMES
from ._allreduce import HierarchicalArchitecture as HierarchicalArchitecture
from ._allreduce import RingArchitecture as RingArchitecture
from ._allreduce import TreeArchitecture as TreeArchitecture
from ._base import AbstractArchitecture as AbstractArchitecture
from ._p2p import P2PArchitecture as P2PArchitecture
from ._ps import HybridArchitecture as HybridArchitecture
from ._ps import PSArchitecture as PSArchitecture
from ._ps import PSHostArchitecture as PSHostArchitecture

_CLASSES = {
    "ps": PSArchitecture,
    "ps_host": PSHostArchitecture,
    "hybrid": HybridArchitecture,
    "p2p": P2PArchitecture,
    "ring": RingArchitecture,
    "tree": TreeArchitecture,
    "hierarchical": HierarchicalArchitecture,
}
assert tuple(_CLASSES) == ARCHITECTURE_NAMES


def get_architecture(name: str, *, colocated: bool = False) -> AbstractArchitecture:
    """An architecture by its JSON name.

    Args:
        name: one of :data:`costmodel.ARCHITECTURE_NAMES`.
        colocated: for ``ps``: servers run on workers (else dedicated machines).

    Raises:
        ValueError: on an unknown name (listing the valid ones), or
            ``colocated`` for an architecture other than ``ps``.

    Example:
        >>> get_architecture("ps", colocated=True).label
        'ps (colocated)'
    """
    if name not in _CLASSES:
        raise ValueError(
            f"unknown architecture {name!r}; valid: {format_choices(ARCHITECTURE_NAMES)}"
        )
    if name == "ps":
        return PSArchitecture(colocated=bool(colocated))
    if colocated:
        raise ValueError(f"'colocated' applies to the ps architecture only, not {name!r}")
    return _CLASSES[name]()
