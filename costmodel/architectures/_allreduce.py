"""All-reduce architectures: ring, tree (recursive doubling) and hierarchical.

Every worker all-reduces each gradient bucket as soon as it is ready,
overlapping backward compute (PyTorch DDP, Horovod), then updates its full copy
of the parameters.

References:
    Sergeev & Del Balso, "Horovod", arXiv 1802.05799 (ring all-reduce, tensor
    fusion); Li et al., "PyTorch Distributed", VLDB 2020 (gradient buckets,
    overlap with backward); Alqahtani & Demirbas, arXiv 1909.02061 (RA).
"""

from __future__ import annotations

from .._params import ClusterParams
from ..collectives import ALL_REDUCE
from ._base import AbstractArchitecture

__all__ = ["RingArchitecture", "TreeArchitecture", "HierarchicalArchitecture"]


class _AllReduceArchitecture(AbstractArchitecture):
    algorithm = "ring"
    overlaps = True

    def phase1_s(self, params: ClusterParams, s, n, g, k):
        return ALL_REDUCE[self.algorithm].time(params, s, n, g)


class RingArchitecture(_AllReduceArchitecture):
    """Ring all-reduce per bucket, overlapped with backward; update on every worker."""

    name = "ring"
    algorithm = "ring"


class TreeArchitecture(_AllReduceArchitecture):
    """Recursive-doubling (latency-optimal) all-reduce per bucket, overlapped."""

    name = "tree"
    algorithm = "tree"


class HierarchicalArchitecture(_AllReduceArchitecture):
    """Intra-node reduce-scatter, inter-node all-reduce, intra-node all-gather, per bucket."""

    name = "hierarchical"
    algorithm = "hierarchical"
