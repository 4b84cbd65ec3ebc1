"""Ring algorithms: all_reduce, reduce_scatter, all_gather.

References:
    Patarasuk & Yuan, "Bandwidth optimal all-reduce algorithms for clusters of
    workstations", JPDC 69(2) 2009: ring all_reduce 2(n−1)α + 2(n−1)/n·Sβ + (n−1)/n·Sγ.
    Thakur, Rabenseifner & Gropp, IJHPCA 2005: ring reduce_scatter / all_gather
    (n−1)α + (n−1)/n·Sβ (+ (n−1)/n·Sγ).
    nccl-tests doc/PERFORMANCE.md: the size convention and busbw factors.
"""

from __future__ import annotations

from .._xp import xp_of
from ._abstract import AbstractCollective
from ._base import Terms

__all__ = ["RingAllReduce", "RingReduceScatter", "RingAllGather"]


def _node_bytes(link, n, g, inter):
    # One node: all n ranks move their link bytes through the node's shared
    # resource at once. Across nodes: a ring crosses each node boundary once.
    return xp_of(link, n, inter).where(inter, link, n * link)


class RingAllReduce(AbstractCollective):
    """Ring all_reduce: 2(n−1)α + 2(n−1)/n·Sβ + (n−1)/n·Sγ (Patarasuk & Yuan 2009).

    Example:
        >>> from costmodel import ClusterParams
        >>> p = ClusterParams.create(alpha_s=1e-5, beta_s_per_byte=1e-9, gamma_s_per_byte=1e-12,
        ...     node_beta_s_per_byte=1e-30, call_overhead_s=1e-30)
        >>> t = RingAllReduce()(p, 1e6, 4, 4)   # 6α + 1.5e6 β + 0.75e6 γ
        >>> round(float(t) * 1e6, 1)
        1560.8
    """

    name = "all_reduce"
    algorithm = "ring"

    def terms(self, S, n, g):
        xp = xp_of(S, n, g)
        f = (n - 1.0) / n
        link = 2.0 * f * S
        inter = n > g
        return Terms(
            2.0 * (n - 1.0), link, _node_bytes(link, n, g, inter), f * S, xp.ones_like(S), inter
        )


class RingReduceScatter(AbstractCollective):
    """Ring reduce_scatter of an S-byte array: (n−1)α + (n−1)/n·S(β + γ) (Thakur et al. 2005)."""

    name = "reduce_scatter"
    algorithm = "ring"

    def terms(self, S, n, g):
        xp = xp_of(S, n, g)
        f = (n - 1.0) / n
        link = f * S
        inter = n > g
        return Terms(n - 1.0, link, _node_bytes(link, n, g, inter), f * S, xp.ones_like(S), inter)


class RingAllGather(AbstractCollective):
    """Ring all_gather into an S-byte array: (n−1)α + (n−1)/n·Sβ (Thakur et al. 2005)."""

    name = "all_gather"
    algorithm = "ring"

    def terms(self, S, n, g):
        xp = xp_of(S, n, g)
        f = (n - 1.0) / n
        link = f * S
        inter = n > g
        return Terms(
            n - 1.0,
            link,
            _node_bytes(link, n, g, inter),
            xp.zeros_like(S),
            xp.ones_like(S),
            inter,
        )
