"""Collective operations' cost models (seconds for S bytes over n ranks).

One file per algorithm; :data:`COLLECTIVES` maps each name in
:data:`costmodel.COLLECTIVE_NAMES` to its default algorithm, and
:func:`collective_time` is the convenient entry point.
"""

from __future__ import annotations

import numpy as np
from jaxtyping import ArrayLike

from .._errors import format_choices
from .._names import COLLECTIVE_NAMES
from .._params import ClusterParams
from .._xp import to_jax
from ._abstract import AbstractCollective as AbstractCollective
from ._all_to_all import AllToAll as AllToAll
from ._base import _EXPONENT_PROPERTIES, check_static_ranks
from ._base import CONGESTION_CAP_SHARPNESS as CONGESTION_CAP_SHARPNESS
from ._base import CONGESTION_EXPONENT as CONGESTION_EXPONENT
from ._base import HEAD_START_SHARPNESS as HEAD_START_SHARPNESS
from ._base import NEGLIGIBLE_CACHE_EXCESS as NEGLIGIBLE_CACHE_EXCESS
from ._base import NEGLIGIBLE_HEAD_START_BYTES as NEGLIGIBLE_HEAD_START_BYTES
from ._base import NEGLIGIBLE_OVERLAP as NEGLIGIBLE_OVERLAP
from ._base import CollectiveBatch as CollectiveBatch
from ._base import Terms as Terms
from ._base import after_head_start as after_head_start
from ._base import cache_is_none as cache_is_none
from ._base import capped_congestion as capped_congestion
from ._base import collective_batch_time as collective_batch_time
from ._base import evaluate as evaluate
from ._base import finish as finish
from ._halving import HalvingDoublingReduceScatter as HalvingDoublingReduceScatter
from ._hierarchical import HierarchicalAllReduce as HierarchicalAllReduce
from ._ps import PSPull as PSPull
from ._ps import PSPush as PSPush
from ._ps import ps_exchange_terms as ps_exchange_terms
from ._ring import RingAllGather as RingAllGather
from ._ring import RingAllReduce as RingAllReduce
from ._ring import RingReduceScatter as RingReduceScatter
from ._rooted import Broadcast as Broadcast
from ._rooted import Reduce as Reduce
from ._rooted import SendRecv as SendRecv
from ._tree import TreeAllReduce as TreeAllReduce

#: Default algorithm of each collective (what NCCL/gloo use for large messages).
COLLECTIVES: dict[str, AbstractCollective] = {
    "all_reduce": RingAllReduce(),
    "reduce_scatter": RingReduceScatter(),
    "all_gather": RingAllGather(),
    "all_to_all": AllToAll(),
    "broadcast": Broadcast(),
    "reduce": Reduce(),
    "sendrecv": SendRecv(),
    "ps_push": PSPush(),
    "ps_pull": PSPull(),
}
assert tuple(COLLECTIVES) == COLLECTIVE_NAMES

ALL_REDUCE = {
    "ring": RingAllReduce(),
    "tree": TreeAllReduce(),
    "hierarchical": HierarchicalAllReduce(),
}

#: reduce_scatter's algorithms: the ring (NCCL, the default) and gloo's halving-doubling
#: (XLA:CPU's psum_scatter, what ``ddltune collect`` times on CPU).
REDUCE_SCATTER = {
    "ring": RingReduceScatter(),
    "halving_doubling": HalvingDoublingReduceScatter(),
}

#: Collectives with more than one algorithm, and their algorithms by name.
ALGORITHMS = {"all_reduce": ALL_REDUCE, "reduce_scatter": REDUCE_SCATTER}


def get_collective(name: str, algorithm: str | None = None) -> AbstractCollective:
    """The cost model of a collective by name (and algorithm, where it has several).

    Args:
        name: a name of :data:`costmodel.COLLECTIVE_NAMES`.
        algorithm: ``None`` (the default: ring), or for all_reduce ``ring``,
            ``tree``, ``hierarchical``; for reduce_scatter ``ring`` or
            ``halving_doubling``; for the others their one algorithm's name.

    Raises:
        ValueError: on an unknown name or algorithm, listing the valid ones.
    """
    if name not in COLLECTIVES:
        raise ValueError(
            f"unknown collective {name!r}; valid: {format_choices(COLLECTIVE_NAMES, name)}"
        )
    if algorithm is None:
        return COLLECTIVES[name]
    if name not in ALGORITHMS:
        if algorithm != COLLECTIVES[name].algorithm:
            raise ValueError(
                f"{name} has one algorithm ({COLLECTIVES[name].algorithm}), got {algorithm!r}"
            )
        return COLLECTIVES[name]
    if algorithm not in ALGORITHMS[name]:
        raise ValueError(
            f"unknown {name} algorithm {algorithm!r}; valid: {format_choices(ALGORITHMS[name], algorithm)}"
        )
    return ALGORITHMS[name][algorithm]


def collective_time(
    params: ClusterParams,
    name: str,
    message_bytes: ArrayLike,
    num_ranks: ArrayLike,
    ranks_per_node: ArrayLike = 1,
    *,
    algorithm: str | None = None,
):
    """Seconds of one collective call (see :class:`AbstractCollective`).

    Args:
        params: cluster parameters.
        name: collective name (:data:`costmodel.COLLECTIVE_NAMES`).
        message_bytes: S ≥ 0 bytes, nccl-tests' convention.
        num_ranks: n ≥ 1.
        ranks_per_node: g ≥ 1.
        algorithm: for all_reduce, ``ring`` (default), ``tree`` or ``hierarchical``.

    Raises:
        ValueError: unknown name/algorithm, or a concrete input out of range.

    Example:
        >>> from costmodel import ClusterParams
        >>> p = ClusterParams.create()
        >>> float(collective_time(p, "all_reduce", 1024, 1))
        0.0
    """
    return get_collective(name, algorithm)(params, message_bytes, num_ranks, ranks_per_node)


def busbw(name: str, message_bytes, time_s, num_ranks):
    """nccl-tests' bus bandwidth (bytes/s): algbw × factor, algbw = S / t.

    Source: nccl-tests doc/PERFORMANCE.md.
    """
    from .._names import BUSBW_FACTOR

    return message_bytes / time_s * BUSBW_FACTOR(name, num_ranks)


def collective_batch(
    collectives,
    message_bytes: ArrayLike,
    num_ranks: ArrayLike,
    ranks_per_node: ArrayLike = 1,
    algorithms=None,
    share_ranks: ArrayLike | None = None,
    contention: ArrayLike | None = None,
) -> CollectiveBatch:
    """The cost terms of N calls of mixed collectives (and all_reduce algorithms), for
    :func:`collective_batch_time`.

    Each call's terms come from its collective's own
    :meth:`~costmodel.AbstractCollective.phases` (grouped by name and
    algorithm, one vectorised call per group; a hierarchical all-reduce has
    three phases, each a row of its own level); only the parameters are left
    to apply. Built from concrete values (data preparation, not traced).

    Args:
        collectives: N names in :data:`costmodel.COLLECTIVE_NAMES`.
        message_bytes: (N,) S ≥ 0 bytes, nccl-tests' convention.
        num_ranks: (N,) n ≥ 1.
        ranks_per_node: (N,) or scalar g ≥ 1 (clipped to n).
        algorithms: ``None`` (every call its collective's default algorithm)
            or N entries, each ``None`` or an algorithm :func:`get_collective`
            knows for that collective (all_reduce: ``ring``, ``tree``,
            ``hierarchical``).
        share_ranks: ``None`` or (N,) ranks sharing the cores of each call's
            node, ≥ min(g, n) (default min(g, n): a node's ranks have its cores
            to themselves). More where nodes share one machine's cores (an
            emulated cluster: a record's ``ranks_per_machine``): what
            :meth:`~costmodel.ClusterParams.core_share` slows the latency
            steps, reductions, intra-node bytes and call overhead by; the
            terms (topology) still come from ``ranks_per_node``.
        contention: ``None`` or (N,) c ≥ 1 per call: the cores shared c-fold
            beyond the share ranks' (emulated nodes on fewer CPUs,
            ``calibration.compute_contention``); it multiplies the core share
            (:func:`~costmodel.collectives.evaluate`).

    Returns:
        :class:`CollectiveBatch` of jax's default float dtype.

    Raises:
        ValueError: on an unknown collective name or algorithm, lengths that
            differ, or a value out of range (naming the argument).

    Example:
        >>> from costmodel import ClusterParams
        >>> p = ClusterParams.create()
        >>> b = collective_batch(["all_reduce", "broadcast"], [1024, 1024], [4, 4], 4)
        >>> t = collective_batch_time(p, b)
        >>> bool(abs(t[0] - collective_time(p, "all_reduce", 1024, 4, 4)) < 1e-12)
        True
    """
    names = [str(c) for c in collectives]
    for c in names:
        if c not in COLLECTIVES:
            raise ValueError(
                f"collectives: unknown collective {c!r}; valid: {format_choices(COLLECTIVE_NAMES, c)}"
            )
    N = len(names)
    algos = [None] * N if algorithms is None else list(algorithms)
    if len(algos) != N:
        raise ValueError(f"algorithms: {len(algos)} entries for {N} collectives")
    models = {}
    for c, a in zip(names, algos, strict=True):
        if (c, a) not in models:
            try:
                models[(c, a)] = COLLECTIVES[c] if a is None else get_collective(c, a)
            except ValueError as e:
                raise ValueError(f"algorithms: {e}") from None
    check_static_ranks(message_bytes, num_ranks, ranks_per_node)
    S = np.broadcast_to(np.asarray(message_bytes, dtype=np.float64), (N,))
    n = np.broadcast_to(np.asarray(num_ranks, dtype=np.float64), (N,))
    g = np.minimum(np.broadcast_to(np.asarray(ranks_per_node, dtype=np.float64), (N,)), n)
    share = g
    if share_ranks is not None:
        share = np.broadcast_to(np.asarray(share_ranks, dtype=np.float64), (N,))
        if not np.all(share >= g):
            raise ValueError("share_ranks: each must be ≥ min(ranks_per_node, num_ranks)")
    cont = None
    if contention is not None:
        cont = np.broadcast_to(np.asarray(contention, dtype=np.float64), (N,))
        if not np.all(np.isfinite(cont) & (cont >= 1.0)):
            raise ValueError("contention: each must be a finite number ≥ 1")
    fields = ("steps", "link_bytes", "node_bytes", "reduce_bytes", "congestion")

    def new_phase() -> dict:
        cols = {f: np.zeros(N) for f in fields} | {"inter": np.zeros(N, dtype=bool)}
        cols["congestion"][:] = 1.0
        return cols

    # rows of phase 0 are the calls (0 … N−1); further phases are appended after them
    phase_rows = [new_phase()]
    has = [np.ones(N, dtype=bool)]
    cidx = np.zeros(N, dtype=np.int32)
    expo = np.zeros(N, dtype=np.int32)
    for (name, algo), model in models.items():
        rows = np.asarray([k for k in range(N) if names[k] == name and algos[k] == algo], dtype=int)
        args = (S[rows], n[rows], g[rows])
        # The congestion base: the factor at exponent 1 (then η = base ** fitted exponent).
        if name in CONGESTION_EXPONENT:
            phases = (model.terms(*args, 1.0),)
        else:
            phases = model.phases(*args)
        for p, t in enumerate(phases):
            if p == len(phase_rows):
                phase_rows.append(new_phase())
                has.append(np.zeros(N, dtype=bool))
            for f in fields:
                phase_rows[p][f][rows] = np.broadcast_to(
                    np.asarray(getattr(t, f), np.float64), rows.shape
                )
            phase_rows[p]["inter"][rows] = np.broadcast_to(np.asarray(t.inter), rows.shape)
            has[p][rows] = True
        cidx[rows] = COLLECTIVE_NAMES.index(name)
        expo[rows] = _EXPONENT_PROPERTIES.index(CONGESTION_EXPONENT.get(name, ""))
    call = np.concatenate([np.flatnonzero(h) for h in has])
    cols = {
        f: np.concatenate([ph[f][h] for ph, h in zip(phase_rows, has, strict=True)])
        for f in (*fields, "inter")
    }
    combine = None
    if len(phase_rows) > 1:
        combine = np.zeros((call.size, N))
        combine[np.arange(call.size), call] = 1.0
        combine = to_jax(combine)
    inter = cols.pop("inter")
    return CollectiveBatch(
        terms=Terms(**{f: to_jax(v) for f, v in cols.items()}, inter=to_jax(inter)),
        collective=to_jax(cidx[call]),
        exponent=to_jax(expo[call]),
        ranks_per_node=to_jax(share[call]),
        combine=combine,
        call=to_jax(call),
        contention=None if cont is None else to_jax(cont[call]),
    )
