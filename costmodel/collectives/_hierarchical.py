"""Hierarchical all_reduce over m nodes × g ranks.

    intra-node reduce_scatter (g ranks, S)
    + inter-node ring all_reduce of S/g (m nodes, g such rings in parallel sharing the NIC)
    + intra-node all_gather (g ranks, S)

each phase with its own level's α and β.

References:
    Thakur et al. 2005 (phases); Goyal et al., "Accurate, Large Minibatch SGD",
    arXiv 1706.02677, §4 (the three-phase hierarchical all-reduce); NCCL's
    tree/ring across nodes behaves alike.
"""

from __future__ import annotations

from .._xp import xp_of
from ._abstract import AbstractCollective
from ._base import Terms, phases_in_sequence

__all__ = ["HierarchicalAllReduce"]


class HierarchicalAllReduce(AbstractCollective):
    """Hierarchical all_reduce; equals the intra-node ring all_reduce on one node."""

    name = "all_reduce"
    algorithm = "hierarchical"

    def phases(self, S, n, g):
        """The three phases' terms: (intra reduce_scatter, inter all_reduce, intra all_gather)."""
        xp = xp_of(S, n, g)
        g = xp.minimum(g, n)
        m = xp.ceil(n / g)
        fg = (g - 1.0) / g
        fm = (m - 1.0) / m
        one = xp.ones_like(S)
        no = xp.zeros_like(S, dtype=bool)
        rs = Terms(g - 1.0, fg * S, g * fg * S, fg * S, one, no)
        link = 2.0 * fm * S / g
        ar = Terms(2.0 * (m - 1.0), link, g * link, fm * S / g, one, m > 1)
        ag = Terms(g - 1.0, fg * S, g * fg * S, xp.zeros_like(S), one, no)
        return rs, ar, ag

    def terms(self, S, n, g):
        rs, ar, ag = self.phases(S, n, g)
        return phases_in_sequence((rs, ar, ag), ar.inter)
