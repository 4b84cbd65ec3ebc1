"""Gradient-exchange architectures (one file per family, a base class beside them)."""

from __future__ import annotations

import dataclasses

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
from ._sharded import WRAP_POLICIES as WRAP_POLICIES
from ._sharded import FSDPArchitecture as FSDPArchitecture
from ._sharded import HSDPArchitecture as HSDPArchitecture
from ._sharded import Zero1Architecture as Zero1Architecture
from ._sharded import Zero2Architecture as Zero2Architecture
from ._sharded import layer_blocks as layer_blocks
from ._sharded import unit_bytes as unit_bytes

_CLASSES = {
    "ps": PSArchitecture,
    "ps_host": PSHostArchitecture,
    "hybrid": HybridArchitecture,
    "p2p": P2PArchitecture,
    "ring": RingArchitecture,
    "tree": TreeArchitecture,
    "hierarchical": HierarchicalArchitecture,
    "zero1": Zero1Architecture,
    "zero2": Zero2Architecture,
    "fsdp": FSDPArchitecture,
    "hsdp": HSDPArchitecture,
}
assert tuple(_CLASSES) == ARCHITECTURE_NAMES

_OVERLAP_VARIANTS: dict[tuple[type, bool], type] = {}


def with_overlap(arch: AbstractArchitecture, overlaps: bool) -> AbstractArchitecture:
    """The same architecture with its first phase overlapped with backward, or not.

    The stock architectures follow the seed paper: all-reduce overlaps each
    bucket with the rest of backward (Horovod, DDP); parameter servers and
    P2P exchange after backward. Real runtimes differ, and this makes the
    variant:

    * ``overlaps=True`` for a parameter server whose runtime sends each
      gradient as soon as backward produces it (TensorFlow's dataflow
      ``parameter_server`` / ``distributed_replicated``; MXNet KVStore and
      BytePS push per tensor; Zhang et al., "Poseidon", USENIX ATC 2017: wait-free
      backpropagation);
    * ``overlaps=False`` for a runtime that runs a program's collectives after
      its compute (XLA:CPU, measured in :mod:`tuner.validation`).

    Only the timeline changes (``T = fwd + max(bwd, end_K) + …`` against
    ``fwd + bwd + C₁ + …``); costs, updates and memory are those of ``arch``.
    One subclass per (class, overlaps) is made and cached, so that repeated
    calls reuse compiled programs.

    Args:
        arch: an architecture (:func:`get_architecture`).
        overlaps: whether phase 1 overlaps backward compute.

    Returns:
        ``arch`` itself when it already has this ``overlaps``, else an
        instance of the variant with ``arch``'s fields (e.g. ``colocated``).

    Raises:
        TypeError: when ``arch`` is not an :class:`AbstractArchitecture`.

    Example:
        >>> with_overlap(get_architecture("ps"), True).overlaps
        True
    """
    if not isinstance(arch, AbstractArchitecture):
        raise TypeError(f"arch must be an AbstractArchitecture, got {type(arch).__name__}")
    overlaps = bool(overlaps)
    if arch.overlaps == overlaps:
        return arch
    cls = type(arch)
    key = (cls, overlaps)
    if key not in _OVERLAP_VARIANTS:
        prefix = "Overlapped" if overlaps else "Serial"
        _OVERLAP_VARIANTS[key] = type(
            f"{prefix}{cls.__name__}", (cls,), {"overlaps": overlaps, "__module__": __name__}
        )
    fields = {f.name: getattr(arch, f.name) for f in dataclasses.fields(arch)}
    return _OVERLAP_VARIANTS[key](**fields)


def get_architecture(
    name: str, *, colocated: bool = False, wrap: str | None = None
) -> AbstractArchitecture:
    """An architecture by its JSON name.

    Args:
        name: one of :data:`costmodel.ARCHITECTURE_NAMES`.
        colocated: for ``ps``: servers run on workers (else dedicated machines).
        wrap: for ``fsdp``/``hsdp``: the unit granularity, one of
            :data:`WRAP_POLICIES` (default ``"block"``, one unit per layer block).

    Raises:
        ValueError: on an unknown name (listing the valid ones), ``colocated``
            for an architecture other than ``ps``, or ``wrap`` for one other
            than ``fsdp``/``hsdp`` or not in :data:`WRAP_POLICIES`.

    Example:
        >>> get_architecture("ps", colocated=True).label
        'ps (colocated)'
    """
    if name not in _CLASSES:
        raise ValueError(
            f"unknown architecture {name!r}; valid: {format_choices(ARCHITECTURE_NAMES, name)}"
        )
    if name == "ps":
        return PSArchitecture(colocated=bool(colocated))
    if colocated:
        raise ValueError(f"'colocated' applies to the ps architecture only, not {name!r}")
    if wrap is not None:
        if name not in ("fsdp", "hsdp"):
            raise ValueError(f"'wrap' applies to fsdp and hsdp only, not {name!r}")
        return _CLASSES[name](wrap=wrap)
    return _CLASSES[name]()
