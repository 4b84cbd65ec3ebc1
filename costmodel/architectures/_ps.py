"""Parameter-server architectures: ``ps`` (k servers), ``ps_host`` and ``hybrid``.

``ps``: k servers each own 1/k of the parameters. Every worker pushes each
gradient bucket to the servers (the server link carries n·s/k), servers sum
(γ) and update their shard, workers pull the fresh parameters. Servers are
dedicated machines, or colocated on k of the workers (whose own share then
stays local). k = 1 dedicated is the paper's 1PS. As in TensorFlow's
parameter servers studied in the paper, communication follows backward (no
overlap) and the update runs on the servers. k ≥ 2 servers on workers send
their own worker's shares to the other servers while they receive the other
workers' (and the reverse in the pull): their NICs carry both directions at
once, so their bytes go at the rate of ``sendrecv`` (each rank sends and
receives at once), not the one-way rate of ``ps_push`` / ``ps_pull`` that one
server or dedicated servers see. Where the two directions share one budget
(a software shaper, a host stack's cores) that is slower: on the emulated
4 × 1 cluster the 2-PS colocated steps were predicted 9–18% short at the
one-way rate, within 7% at sendrecv's (issue 22). ps_host's and hybrid's
servers on the nodes likewise, across nodes.

``ps_host``: TensorFlow's ``local_parameter_device=cpu``: each node's host CPU
holds a 1/m shard (m nodes); GPUs push to their host over the intra-node link,
hosts exchange shards over the network, and back. A node's g GPUs reach host
memory through ``params.host_links`` independent links (PCIe switch uplinks,
:class:`~costmodel.ClusterParams`), spread evenly: the fan-in on one link is
⌈g / links⌉ (all g with the default of one link; two on an NVIDIA DGX-1, whose
eight GPUs sit in pairs on four PCIe switches, NVIDIA WP-08437-001 §2); the
host sums all g gradients (γ).

``hybrid``: TensorFlow's ``distributed_replicated``: all-reduce inside a node,
parameter servers (k, on the nodes) across nodes.

References:
    Li et al., OSDI 2014 (parameter server); Alqahtani & Demirbas, arXiv
    1909.02061, §3 (1PS, PS: server link n·S/k, congestion); TensorFlow
    tf_cnn_benchmarks ``variable_update`` modes (parameter_server,
    distributed_replicated, local_parameter_device).
"""

from __future__ import annotations

import numpy as np

from .._params import ClusterParams
from .._xp import is_traced, xp_of
from ..collectives import RingAllReduce, Terms, evaluate, finish, ps_exchange_terms
from ._base import AbstractArchitecture

__all__ = ["PSArchitecture", "PSHostArchitecture", "HybridArchitecture"]


def _both_ways(n, k, colocated: bool, xp=np):
    """k ≥ 2 servers on n ≥ 2 of the senders: each sends its own share out while the
    others' come in (see the module doc); dedicated servers and one server only receive."""
    return xp.minimum(k, n) >= 2.0 if colocated else xp.zeros_like(n + k, dtype=bool)


def _exchange(params, collective, s, n, k, g, *, colocated, inter=None):
    xp = xp_of(params, s, n, k, g, colocated, inter)
    # a colocated server's node-mates are workers that send through the node's memory;
    # dedicated servers run on nodes of their own
    local = xp.minimum(g, n) - 1.0 if colocated else 0.0
    t = ps_exchange_terms(
        s, n, k, g, params.fanin_exponent, colocated=colocated, inter=inter, local_senders=local
    )
    g = xp.minimum(g, n)
    # k ≥ 2 colocated servers: a server's NIC sends its own worker's shares to the
    # other servers while it receives the other workers' (push), and the reverse
    # (pull): both directions at once, at the rate sendrecv measures (each rank sends
    # and receives at once), not the one-way rate of ps_push / ps_pull
    both = _both_ways(n, k, colocated, xp)
    if is_traced(both) or (np.any(both) and not np.all(both)):  # a mix: both evaluations
        time = xp.where(
            both, evaluate(params, "sendrecv", t, g), evaluate(params, collective, t, g)
        )
    else:  # one kind throughout: one evaluation
        time = evaluate(params, "sendrecv" if np.any(both) else collective, t, g)
    return finish(params, time, t.steps, g)


class PSArchitecture(AbstractArchitecture):
    """k parameter servers (``servers`` argument), dedicated or colocated."""

    name = "ps"
    overlaps = False
    uses_servers = True
    colocated: bool = False

    def phase1_s(self, params: ClusterParams, s, n, g, k):
        xp = xp_of(params, s, n, g, k)
        kk = xp.minimum(k, n) if self.colocated else k
        push = _exchange(params, "ps_push", s, n, kk, g, colocated=self.colocated)
        senders = n - 1.0 if self.colocated else n  # a colocated lone worker sums nothing
        return push + xp.where(senders > 0, n * s / kk * params.gamma_s_per_byte, 0.0)

    def phase2_s(self, params: ClusterParams, s, n, g, k):
        xp = xp_of(params, s, n, g, k)
        kk = xp.minimum(k, n) if self.colocated else k
        return _exchange(params, "ps_pull", s, n, kk, g, colocated=self.colocated)

    def update_s(self, params: ClusterParams, total_bytes, n, k, g=None):
        xp = xp_of(params, total_bytes, n, k, g)
        kk = xp.minimum(k, n) if self.colocated else k
        return total_bytes / kk * params.update_s_per_byte

    def servers_send_and_receive(self, n, g, k):
        return _both_ways(np.asarray(n, float), np.asarray(k, float), self.colocated)

    @property
    def label(self) -> str:
        return f"ps ({'colocated' if self.colocated else 'dedicated'})"


class PSHostArchitecture(AbstractArchitecture):
    """Parameters on each node's host CPU (one shard per node)."""

    name = "ps_host"
    overlaps = False

    def _phase(self, params, collective, s, n, g):
        xp = xp_of(params, s, n, g)
        g = xp.minimum(g, n)
        m = xp.ceil(n / g)
        one = xp.ones_like(s)
        # GPUs of a node ↔ their host, ⌈g / links⌉ on each of the node's host links
        # (the links run side by side: one link's fan-in is the phase's time).
        per_link = xp.ceil(g / params.host_links)
        local = _exchange(
            params,
            collective,
            s,
            per_link,
            one,
            per_link + 1.0,
            colocated=False,
            inter=xp.zeros_like(s, dtype=bool),
        )
        # Hosts exchange shards: m colocated servers over m nodes.
        remote = _exchange(params, collective, s, m, m, one, colocated=True, inter=m > 1)
        return local + remote

    def phase1_s(self, params: ClusterParams, s, n, g, k):
        xp = xp_of(params, s, n, g, k)
        g = xp.minimum(g, n)
        return self._phase(params, "ps_push", s, n, g) + g * s * params.gamma_s_per_byte

    def phase2_s(self, params: ClusterParams, s, n, g, k):
        return self._phase(params, "ps_pull", s, n, g)

    def update_s(self, params: ClusterParams, total_bytes, n, k, g=None):
        return total_bytes * params.update_s_per_byte + 0.0 * n

    def servers_send_and_receive(self, n, g, k):
        n, g = np.asarray(n, float), np.asarray(g, float)
        m = np.ceil(n / np.minimum(g, n))  # the hosts' shards: m servers on m nodes
        return _both_ways(m, m + 0.0 * np.asarray(k, float), True)


class HybridArchitecture(AbstractArchitecture):
    """All-reduce inside each node, parameter servers (k, on the nodes) across nodes."""

    name = "hybrid"
    overlaps = False
    uses_servers = True

    def phase_key(self, n, g, k):
        """The phases see only g' = min(g, n), m = ⌈n/g'⌉ nodes and k' = clip(k, 1, m)
        servers: the key is (m·g', g', k'), which gives the same g', m and k'."""
        g = np.minimum(g, n)
        m = np.ceil(n / g)
        return m * g, g, np.clip(k, 1.0, m)

    def phase1_s(self, params: ClusterParams, s, n, g, k):
        xp = xp_of(params, s, n, g, k)
        g = xp.minimum(g, n)
        m = xp.ceil(n / g)
        kk = xp.clip(k, 1.0, m)
        intra = RingAllReduce().time(params, s, g, g)
        push = _exchange(params, "ps_push", s, m, kk, xp.ones_like(s), colocated=True, inter=m > 1)
        return intra + push + xp.where(m > 1, m * s / kk * params.gamma_s_per_byte, 0.0)

    def phase2_s(self, params: ClusterParams, s, n, g, k):
        xp = xp_of(params, s, n, g, k)
        g = xp.minimum(g, n)
        m = xp.ceil(n / g)
        kk = xp.clip(k, 1.0, m)
        pull = _exchange(params, "ps_pull", s, m, kk, xp.ones_like(s), colocated=True, inter=m > 1)
        # the node's copy reaches its g ranks (pipelined intra-node broadcast)
        bcast = finish(
            params,
            evaluate(
                params,
                "broadcast",
                Terms(
                    g - 1.0,
                    s,
                    g * s,
                    xp.zeros_like(s),
                    xp.ones_like(s),
                    xp.zeros_like(s, dtype=bool),
                ),
                g,
            ),
            g - 1.0,
            g,
        )
        # on one node the intra-node all-reduce already left the sum on every rank
        return pull + xp.where(m > 1, bcast, 0.0)

    def update_s(self, params: ClusterParams, total_bytes, n, k, g=None):
        xp = xp_of(params, total_bytes, n, k, g)
        # the servers are clipped to the m nodes, as in the communication phases
        m = xp.ceil(n / xp.minimum(1.0 if g is None else g, n))
        return total_bytes / xp.clip(k, 1.0, m) * params.update_s_per_byte

    def servers_send_and_receive(self, n, g, k):
        n, g, k = (np.asarray(x, float) for x in (n, g, k))
        m = np.ceil(n / np.minimum(g, n))  # k' = clip(k, 1, m) servers on m nodes
        return _both_ways(m, np.clip(k, 1.0, m), True)
