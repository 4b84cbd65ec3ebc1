"""all_to_all: every rank sends a distinct 1/n of its S-byte buffer to every other rank.

    T = (n−1)α + (n−1)/n·Sβ·η,    η = 1 + smooth min((n−1)ᵉ − 1, c)

The factor (n−1)ᵉ (e fitted, ≥ 0) models congestion of n−1 concurrent flows per
rank (incast at every receiver), held below a fitted ceiling 1 + c
(:func:`~costmodel.collectives.capped_congestion`; none by default): on the
emulated cluster (issue 22) the step from one flow per NIC (2 ranks, 1.00× the
wire time) to several (1.34–1.40× at 3 to 6 ranks) is all of it. Across nodes,
the NIC carries what all g ranks of a node send off-node: g·S·(n−g)/n.

References:
    Thakur et al. 2005 (pairwise exchange, (n−1)α + (n−1)/n·Sβ); nccl-tests
    doc/PERFORMANCE.md (size convention, busbw factor (n−1)/n).
"""

from __future__ import annotations

from .._params import ClusterParams
from .._xp import xp_of
from ._abstract import AbstractCollective
from ._base import Terms, capped_congestion, evaluate, finish

__all__ = ["AllToAll"]


class AllToAll(AbstractCollective):
    """Pairwise-exchange all_to_all with a fitted congestion factor."""

    name = "all_to_all"
    algorithm = "pairwise"

    def terms(self, S, n, g, exponent=0.0):
        xp = xp_of(S, n, g, exponent)
        f = (n - 1.0) / n
        link = f * S
        inter = n > g
        node = xp.where(inter, g * S * (n - g) / n, n * link)
        cong = xp.maximum(n - 1.0, 1.0) ** exponent
        return Terms(n - 1.0, link, node, xp.zeros_like(S), cong, inter)

    def time(self, params: ClusterParams, S, n, g):
        xp = xp_of(params, S, n, g)
        t = self.terms(S, n, g, params.all_to_all_exponent)
        t = t._replace(congestion=capped_congestion(t.congestion, params.all_to_all_congestion_cap))
        g = xp.minimum(g, n)
        return finish(params, evaluate(params, self.name, t, g), t.steps, g)
