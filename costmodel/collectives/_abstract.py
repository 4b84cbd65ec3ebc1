"""Abstract base of the collectives."""

from __future__ import annotations

import abc
from typing import ClassVar

import equinox as eqx
from jaxtyping import Array, ArrayLike, Float

from .._params import ClusterParams
from .._xp import xp_of
from ._base import Terms, as_float, check_static_ranks, evaluate, finish

__all__ = ["AbstractCollective"]


class AbstractCollective(eqx.Module):
    """A collective operation's cost model.

    Subclasses define :meth:`terms` (the α/β/γ terms at a size and rank count).
    Calling an instance returns seconds, vectorised over broadcastable arrays of
    ``message_bytes``, ``num_ranks`` and ``ranks_per_node``; it is jit-, vmap-
    and grad-friendly (no Python control flow on values).

    ``message_bytes`` follows nccl-tests: the bytes of the buffer the collective
    is named after (all_reduce: the array reduced; all_gather and
    reduce_scatter: the *full* array, n × the per-rank shard; all_to_all: each
    rank's whole send buffer; broadcast/reduce: the root's buffer; ps_push/ps_pull:
    what each worker sends/receives).
    """

    name: ClassVar[str]
    algorithm: ClassVar[str] = ""

    # Methods come out as plain bound methods. equinox wraps every method looked up
    # on a Module in a BoundMethod Module (so that a bound method is a PyTree to pass
    # through jax transformations), about 23 µs a lookup: 5–8 per sweep call of an
    # architecture, 5% of a 16,384-configuration numpy sweep. Nothing passes these
    # objects' bound methods through a transformation; the objects themselves (a few
    # static fields) still are PyTrees.
    __getattribute__ = object.__getattribute__

    @abc.abstractmethod
    def terms(self, S: Float[Array, "*b"], n: Float[Array, "*b"], g: Float[Array, "*b"]) -> Terms:
        """The cost terms for ``S`` bytes over ``n`` ranks, ``g`` of them per node."""

    def phases(self, S, n, g) -> tuple[Terms, ...]:
        """The terms of each phase run one after another (one phase: :meth:`terms`).

        A collective of several phases on different levels (the hierarchical
        all-reduce) overrides it; :func:`costmodel.collective_batch` makes one
        row of each phase and :func:`costmodel.collective_batch_time` adds them
        up as :meth:`time` does.
        """
        return (self.terms(S, n, g),)

    def time(self, params: ClusterParams, S, n, g) -> Float[Array, "*b"]:
        """Seconds for already-validated float arrays ``S, n, g`` (g ≤ n).

        The phases (:meth:`phases`) that have steps, each at its own level,
        added up; the per-call overhead once (:func:`finish`).
        """
        xp = xp_of(params, S, n, g)
        phases = self.phases(S, n, g)
        g = xp.minimum(g, n)
        if len(phases) == 1:
            t = phases[0]
            return finish(params, evaluate(params, self.name, t, g), t.steps, g)
        e = sum(xp.where(ph.steps > 0, evaluate(params, self.name, ph, g), 0.0) for ph in phases)
        return finish(params, e, sum(ph.steps for ph in phases), g)

    def __call__(
        self,
        params: ClusterParams,
        message_bytes: ArrayLike,
        num_ranks: ArrayLike,
        ranks_per_node: ArrayLike = 1,
    ) -> Float[Array, "*b"]:
        """Time of one call, in seconds.

        Args:
            params: cluster parameters.
            message_bytes: S ≥ 0, bytes (nccl-tests' convention, see class doc).
            num_ranks: n ≥ 1 participants.
            ranks_per_node: g ≥ 1 ranks per node (clipped to n); the collective
                uses the inter-node α, β when n > g.

        Returns:
            Seconds, broadcast shape of the inputs. Exactly 0 for n = 1.

        Raises:
            ValueError: if a concrete input is negative, non-finite, or n, g < 1.
        """
        check_static_ranks(message_bytes, num_ranks, ranks_per_node)
        S, n, g = as_float(message_bytes), as_float(num_ranks), as_float(ranks_per_node)
        xp = xp_of(S, n, g)
        S, n, g = xp.broadcast_arrays(S, n, g)
        return self.time(params, S, n, xp.minimum(g, n))
