"""Halving-doubling reduce_scatter, as gloo runs it (XLA:CPU's ``psum_scatter``).

XLA:CPU's gloo communicator implements ReduceScatter with
``gloo::ReduceScatterHalvingDoubling`` (openxla/xla,
``xla/backends/cpu/collectives/gloo_communicator.cc``; facebookincubator/gloo,
``gloo/reduce_scatter.h``), not a ring. With B = 2^⌊log₂ n⌋:

1. recursive halving within the largest binary block of B ranks: step i
   exchanges S/2^(i+1) with the rank whose index differs in bit i
   (S(1 − 1/B) each way in log₂ B steps, each half reduced: γ on the same);
2. for n not a power of two ("binary blocks"), the ranks outside that block
   send their data to it (one more step, S/B into each of its ranks, reduced);
3. distribution: the block holds the result in B chunks of S/B in
   bit-reversed order and sends each rank its S/n: S/B for the ranks whose
   bit-reversed index differs from their own (n = B ≥ 4), about S/n
   otherwise (n not a power of two), nothing for n = 2.

The busiest rank moves S/2 for n = 2, S for n = 4, 8, … and S + S/n otherwise
(n = 3: 4S/3, twice the ring's (n − 1)/n·S): on the emulated 4 × 1 cluster at
200 Mbit/s a 1 MiB reduce_scatter took 23.0, 60.8 and 56.0 ms on 2, 3 and 4
ranks, where a ring would take 22, 29 and 33 ms (issue 22).

Each step is two messages, and so two latency terms: its data, and the
notification gloo sends the peer once it has reduced it (awaited at the end,
so that a buffer is not overwritten before it is read); the distribution's
sends likewise; the binary blocks' sends go without one.

With g ranks per node placed consecutively, the steps whose partner differs in
a bit below log₂ g pair ranks of one node (intra-node), the rest cross nodes;
g that is not a power of two is counted as its largest power of two.

References:
    Thakur, Rabenseifner & Gropp, "Optimization of collective communication
    operations in MPICH", IJHPCA 19(1) 2005 (recursive halving; the binary
    blocks for non-powers of two).
"""

from __future__ import annotations

from .._xp import xp_of
from ._abstract import AbstractCollective
from ._base import Terms, phases_in_sequence

__all__ = ["HalvingDoublingReduceScatter"]


def _pow2_floor(x, xp):
    """(2^k, k) with k = ⌊log₂ x⌋ for x ≥ 1 (k = 0 below 2), exactly: from frexp and
    ldexp, not log2 and exp2 (XLA's log2(8) is 2.9999999999999996, whose floor is 2)."""
    x = xp.maximum(x, 1.0)
    _, e = xp.frexp(x)  # x = m·2^e, m in [0.5, 1)
    return xp.ldexp(xp.ones_like(x), e - 1), (e - 1).astype(x.dtype)  # exp2 is not exact in XLA


class HalvingDoublingReduceScatter(AbstractCollective):
    """gloo's halving-doubling reduce_scatter of an S-byte array (see the module doc).

    Example:
        >>> import numpy as np
        >>> hd = HalvingDoublingReduceScatter()
        >>> [float(sum(p.link_bytes for p in hd.phases(np.float64(1.0), np.float64(n),
        ...        np.float64(1.0)))) for n in (2, 3, 4, 8)]    # the busiest rank's bytes / S
        [0.5, 1.3333333333333333, 1.0, 1.0]
    """

    name = "reduce_scatter"
    algorithm = "halving_doubling"

    def phases(self, S, n, g):
        """(intra-node halving steps, inter-node halving steps, binary blocks + distribution)."""
        xp = xp_of(S, n, g)
        g = xp.minimum(g, n)
        B, log_b = _pow2_floor(n, xp)
        one_node = n <= g
        gp, log_gp = _pow2_floor(g, xp)
        gi = xp.where(one_node, B, xp.minimum(gp, B))
        log_gi = xp.where(one_node, log_b, xp.minimum(log_gp, log_b))
        rest = n > B
        one = xp.ones_like(S)
        no = xp.zeros_like(S, dtype=bool)
        # 1: the halving steps between ranks of one node, through its memory
        intra = S * (1.0 - 1.0 / gi)
        p1 = Terms(2.0 * log_gi, intra, g * intra, intra, one, no)
        # 2: the halving steps across nodes, g such exchanges through each NIC at once
        cross = S * (1.0 / gi - 1.0 / B)
        p2 = Terms(2.0 * (log_b - log_gi), cross, g * cross, cross, one, ~one_node)
        # 3: the ranks outside the largest block send into it, then the distribution
        into = xp.where(rest, S / B, 0.0)
        moves = rest | (B >= 4.0)  # n = 2 needs no distribution: its halves are in place
        dist = xp.where(rest, S / n, xp.where(moves, S / B, 0.0))
        steps3 = rest.astype(S.dtype) + 2.0 * moves.astype(S.dtype)
        link3 = into + dist
        node3 = xp.where(one_node, n * link3, g * link3)
        p3 = Terms(steps3, link3, node3, into, one, ~one_node & (n > 1.0))
        return p1, p2, p3

    def terms(self, S, n, g):
        p1, p2, p3 = self.phases(S, n, g)
        return phases_in_sequence((p1, p2, p3), p2.inter)
