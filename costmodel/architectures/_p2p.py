"""Peer-to-peer: every worker owns a 1/n shard of the parameters.

Per bucket: all_to_all of gradient shards (each worker receives its shard
from every other), the owner sums them (γ) and updates its shard, then an
all_gather of the updated parameters. As in the paper's P2P (and TensorFlow's
collective-free P2P setups), communication starts after backward: no overlap.

References:
    Alqahtani & Demirbas, arXiv 1909.02061, §3 (P2P); Thakur et al. 2005.
"""

from __future__ import annotations

from .._params import ClusterParams
from ..collectives import AllToAll, RingAllGather
from ._base import AbstractArchitecture

__all__ = ["P2PArchitecture"]


class P2PArchitecture(AbstractArchitecture):
    """all_to_all + sum of shards, shard update, all_gather; not overlapped."""

    name = "p2p"
    overlaps = False

    def phase1_s(self, params: ClusterParams, s, n, g, k):
        return AllToAll().time(params, s, n, g) + (n - 1.0) / n * s * params.gamma_s_per_byte

    def phase2_s(self, params: ClusterParams, s, n, g, k):
        return RingAllGather().time(params, s, n, g)

    def update_s(self, params: ClusterParams, total_bytes, n, k, g=None):
        return total_bytes / n * params.update_s_per_byte
