"""Parameter-server traffic: fan-in (``ps_push``) and fan-out (``ps_pull``).

With n ranks, one is the server and n − 1 are workers; each worker sends
(push) or receives (pull) S bytes. Within one node the server's link carries
k = n − 1 flows of S; across nodes of g ranks its NIC carries only the
k = n − g flows of the other nodes (its g − 1 node-mates' bytes go through the
node's memory, at the same time):

    T = α + k·S·β·kᵉ

where kᵉ (e ≥ 0, fitted) is the efficiency loss of k concurrent flows into (or
out of) one link (TCP incast). These are not nccl-tests' broadcast/reduce,
whose root link carries S once.

The general form used by the architectures (k servers, n workers, model S)
is :func:`ps_exchange_terms`: the server link carries n·S/k, a worker's link S,

    T ≈ α + max(S·β, n·S/k·β)·(n/k)ᵉ.

References:
    Li et al., "Scaling Distributed Machine Learning with the Parameter Server",
    OSDI 2014; Alqahtani & Demirbas, arXiv 1909.02061, §3 (server link carries
    n·S/k); incast: Chen et al., "Understanding TCP incast", WREN 2009.
"""

from __future__ import annotations

from .._params import ClusterParams
from .._xp import xp_of
from ._abstract import AbstractCollective
from ._base import Terms, evaluate, finish

__all__ = ["PSPush", "PSPull", "ps_exchange_terms"]


def ps_exchange_terms(
    S, workers, servers, g, fanin_exponent, *, colocated=False, inter=None, local_senders=0.0
):
    """Terms of one push (or pull) of an S-byte model from ``workers`` to ``servers``.

    Args:
        S: model (bucket) bytes each worker sends, ≥ 0.
        workers: n ≥ 1 senders.
        servers: k ≥ 1 servers, each owning S/k.
        g: ranks per node (for the inter/intra decision and node caps).
        fanin_exponent: e of the congestion factor (flows into one link / k)ᵉ.
        colocated: servers run on k of the workers, whose own share stays local.
        inter: override of the level; default: the processes span nodes.
        local_senders: senders on a server's own node (0 … g − 1), whose bytes
            go through the node's memory, not its NIC: across nodes the
            server's link carries the other senders' bytes only (and their
            flows only count toward the congestion); default 0 (each server
            on a node of its own).

    Returns:
        :class:`Terms`.
    """
    xp = xp_of(S, workers, servers, g, fanin_exponent, inter, local_senders)
    n = xp.maximum(workers, 1.0)
    k = xp.maximum(xp.minimum(servers, n) if colocated else servers, 1.0)
    # flows into one server: none when there is no worker (a lone server rank)
    senders = xp.maximum(n - 1.0 if colocated else workers, 0.0)
    procs = n if colocated else n + k
    if inter is None:
        inter = procs > g
    # across nodes the server's NIC carries the flows of other nodes only
    flows = xp.where(inter, xp.maximum(senders - local_senders, 0.0), senders)
    server_link = flows * S / k
    worker_link = S * ((k - 1.0) / k if colocated else 1.0)
    link = xp.maximum(server_link, worker_link)
    node = xp.where(inter, xp.maximum(server_link, xp.minimum(g, n) * worker_link), senders * S)
    cong = xp.maximum(flows / k, 1.0) ** fanin_exponent
    steps = xp.where(senders > 0, 1.0, 0.0)
    return Terms(steps, link, node, xp.zeros_like(S), cong, inter)


class _PS(AbstractCollective):
    def terms(self, S, n, g, exponent=0.0):
        # n ranks: one server (rank 0), n−1 workers, all sending S; across nodes the
        # server's g − 1 node-mates send through the node's memory
        xp = xp_of(S, n, g, exponent)
        inter = n > g
        local = xp.where(inter, xp.minimum(g, n) - 1.0, 0.0)
        return ps_exchange_terms(
            S, n - 1.0, xp.ones_like(n), g, exponent, inter=inter, local_senders=local
        )

    def time(self, params: ClusterParams, S, n, g):
        xp = xp_of(params, S, n, g)
        t = self.terms(S, n, g, params.fanin_exponent)
        g = xp.minimum(g, n)
        return finish(params, evaluate(params, self.name, t, g), t.steps, g)


class PSPush(_PS):
    """Fan-in: n−1 workers each send S bytes to one server, which sums them.

    T = α + (n−1)·S·β·(n−1)ᵉ + (n−1)·S·γ: the server aggregates what arrives
    (as a parameter server does, and as ``ddltune collect``'s ``ps_push``
    measures it), the γ term the ``ps`` architecture adds to its push.
    """

    name = "ps_push"
    algorithm = "fan-in"

    def terms(self, S, n, g, exponent=0.0):
        t = super().terms(S, n, g, exponent)
        return t._replace(reduce_bytes=xp_of(S, n).maximum(n - 1.0, 0.0) * S)


class PSPull(_PS):
    """Fan-out: one server sends S bytes to each of n−1 workers: α + (n−1)·S·β·(n−1)ᵉ."""

    name = "ps_pull"
    algorithm = "fan-out"
