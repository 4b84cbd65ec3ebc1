"""Latency-optimal all_reduce: recursive doubling.

    T = ⌈log₂ n⌉ · (α + Sβ + Sγ)

Each of the ⌈log₂ n⌉ rounds exchanges and reduces the whole array with a
partner; it wins for small messages and loses for large ones.

References:
    Thakur, Rabenseifner & Gropp, IJHPCA 19(1) 2005, §4 (recursive doubling).
"""

from __future__ import annotations

from .._xp import xp_of
from ._abstract import AbstractCollective
from ._base import Terms

__all__ = ["TreeAllReduce"]


def ceil_log2(n):
    """⌈log₂ n⌉ for float arrays n ≥ 1 (0 for n = 1)."""
    xp = xp_of(n)
    return xp.ceil(xp.log2(xp.maximum(n, 1.0)) - 1e-9)


class TreeAllReduce(AbstractCollective):
    """Recursive-doubling all_reduce: ⌈log₂ n⌉(α + Sβ + Sγ) (Thakur et al. 2005)."""

    name = "all_reduce"
    algorithm = "tree"

    def terms(self, S, n, g):
        xp = xp_of(S, n, g)
        rounds = ceil_log2(n)
        inter = n > g
        m = xp.ceil(n / g)
        link = rounds * S
        # Across nodes, the ⌈log₂ m⌉ rounds with off-node partners put all g
        # ranks' exchanges through the NIC.
        node = xp.where(inter, g * S * ceil_log2(m), n * link)
        return Terms(rounds, link, node, rounds * S, xp.ones_like(S), inter)
