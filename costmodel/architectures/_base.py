"""Abstract base of the gradient-exchange architectures."""

from __future__ import annotations

import abc
from typing import ClassVar

import equinox as eqx
import numpy as np
from jaxtyping import Array, Float

from .._params import ClusterParams
from .._xp import xp_of

__all__ = ["AbstractArchitecture"]


class AbstractArchitecture(eqx.Module):
    """How one synchronous SGD step exchanges gradients.

    An architecture defines, for a bucket of ``s`` gradient bytes,

    * :meth:`phase1_s` — communication that starts once the bucket's gradients
      are ready (all-reduce, push, reduce-scatter), in seconds;
    * :meth:`phase2_s` — communication after the optimizer update (pull,
      all-gather of parameters), in seconds (0 for all-reduce);
    * :attr:`overlaps` — whether phase 1 overlaps backward compute (bucketed,
      wait-free backprop) or starts after it;
    * :meth:`update_s` — the optimizer update on the critical path (on every
      worker for all-reduce, on a shard for peer-to-peer, on the servers for PS);

    (What each rank holds in memory is :func:`costmodel.memory_per_rank`.)

    All methods take arrays and are jit/vmap/grad-friendly; ``workers`` (n),
    ``ranks_per_node`` (g) and ``servers`` (k) are float arrays ≥ 1.
    """

    name: ClassVar[str]
    overlaps: ClassVar[bool] = True
    uses_servers: ClassVar[bool] = False
    #: Under gradient accumulation (K micro-batches per optimizer step), whether
    #: phase 1 runs in every micro-batch's backward (DeepSpeed ZeRO stage ≥ 2)
    #: rather than once, in the last (DDP ``no_sync``, Horovod
    #: ``backward_passes_per_step``, ZeRO stage 1). FSDP/HSDP cost it in their
    #: own schedule.
    exchanges_every_micro_step: ClassVar[bool] = False

    # Methods come out as plain bound methods. equinox wraps every method looked up
    # on a Module in a BoundMethod Module (so that a bound method is a PyTree to pass
    # through jax transformations), about 23 µs a lookup: 5–8 per sweep call of an
    # architecture, 5% of a 16,384-configuration numpy sweep. Nothing passes these
    # objects' bound methods through a transformation; the objects themselves (a few
    # static fields) still are PyTrees.
    __getattribute__ = object.__getattribute__

    @abc.abstractmethod
    def phase1_s(self, params: ClusterParams, s, n, g, k) -> Float[Array, "*b"]:
        """Seconds of the bucket's first communication phase."""

    def phase2_s(self, params: ClusterParams, s, n, g, k) -> Float[Array, "*b"]:
        """Seconds of the bucket's post-update communication (default none)."""
        return xp_of(s, n).zeros_like(s + 0.0 * n)

    def phase_key(self, n, g, k):
        """``(n, g, k)`` as the phases see them (numpy float arrays of one shape).

        Two configurations with equal keys cost the same per bucket, and
        ``phase1_s``/``phase2_s`` of the key equal those of the configuration
        (the numpy sweep costs each distinct key once). Default: k = 1 where the
        architecture has no servers.
        """
        return n, g, (k if self.uses_servers else np.ones_like(k))

    def servers_send_and_receive(self, n, g, k):
        """Whether servers on workers send and receive at once in this exchange (bool, *b).

        Where they do, the exchange's bytes go at ``sendrecv``'s fitted rate, not
        the one-way rate of ``ps_push`` / ``ps_pull`` (:mod:`costmodel.architectures._ps`),
        and a profile needs ``sendrecv`` measured. Default: never (no servers).
        """
        return np.zeros(np.shape(n + g + k), dtype=bool)

    def update_s(self, params: ClusterParams, total_bytes, n, k, g=None) -> Float[Array, "*b"]:
        """Optimizer update time on the critical path: every worker updates all (default).

        Args:
            total_bytes: G, parameter bytes; n workers, k servers, g ranks per
                node (``None``: one per node).
        """
        return total_bytes * params.update_s_per_byte + 0.0 * n

    @property
    def label(self) -> str:
        """Human-readable name, e.g. ``ps (4 servers, colocated)``."""
        return self.name
