"""Rooted collectives with nccl-tests semantics: broadcast and reduce, and sendrecv.

The root's link carries S once (NCCL pipelines them along a chain/ring), so

    broadcast: (n−1)α + Sβ          reduce: (n−1)α + S(β + γ)
    sendrecv (every rank sends S to its ring neighbour): α + Sβ

References:
    nccl-tests doc/PERFORMANCE.md (busbw factor 1 for broadcast, reduce and
    sendrecv: "the root link carries S"); Thakur et al. 2005 (pipelined chain).
"""

from __future__ import annotations

from .._xp import xp_of
from ._abstract import AbstractCollective
from ._base import Terms

__all__ = ["Broadcast", "Reduce", "SendRecv"]


def _chain(S, n, g, reduce: bool):
    xp = xp_of(S, n, g)
    inter = n > g
    node = xp.where(inter, S, n * S)
    return Terms(
        n - 1.0,
        S * xp.ones_like(n),
        node,
        S if reduce else xp.zeros_like(S),
        xp.ones_like(S),
        inter,
    )


class Broadcast(AbstractCollective):
    """Pipelined broadcast: (n−1)α + Sβ."""

    name = "broadcast"
    algorithm = "pipelined"

    def terms(self, S, n, g):
        return _chain(S, n, g, reduce=False)


class Reduce(AbstractCollective):
    """Pipelined reduce: (n−1)α + S(β + γ)."""

    name = "reduce"
    algorithm = "pipelined"

    def terms(self, S, n, g):
        return _chain(S, n, g, reduce=True)


class SendRecv(AbstractCollective):
    """One ring step, every rank sending S to its neighbour: α + Sβ (for n > 1)."""

    name = "sendrecv"
    algorithm = "ring"

    def terms(self, S, n, g):
        xp = xp_of(S, n, g)
        inter = n > g
        steps = xp.where(n > 1, 1.0, 0.0)
        return Terms(
            steps,
            S * xp.ones_like(n),
            xp.where(inter, S, n * S),
            xp.zeros_like(S),
            xp.ones_like(S),
            inter,
        )
