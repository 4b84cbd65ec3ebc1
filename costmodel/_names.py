"""The names ddltune uses for collectives and architectures (stable: they appear in files)."""

from __future__ import annotations

__all__ = ["COLLECTIVE_NAMES", "ALL_REDUCE_ALGORITHMS", "ARCHITECTURE_NAMES", "BUSBW_FACTOR"]

#: Collectives, with nccl-tests' names where nccl-tests has them. ``ps_push``
#: is k senders → one receiver (each sending S), ``ps_pull`` one sender → k
#: receivers (each receiving S); ``sendrecv`` is one ring step (every rank
#: sends S to its right neighbour).
COLLECTIVE_NAMES = (
    "all_reduce",
    "reduce_scatter",
    "all_gather",
    "all_to_all",
    "broadcast",
    "reduce",
    "sendrecv",
    "ps_push",
    "ps_pull",
)

#: Algorithms ddltune models for all_reduce.
ALL_REDUCE_ALGORITHMS = ("ring", "tree", "hierarchical")

#: Gradient-exchange architectures, as written in JSON (``architecture`` key):
#: parameter servers, peer-to-peer, all-reduce (replicated data parallelism), and
#: sharded data parallelism (ZeRO-1, ZeRO-2, FSDP = ZeRO-3, HSDP).
ARCHITECTURE_NAMES = (
    "ps",
    "ps_host",
    "hybrid",
    "p2p",
    "ring",
    "tree",
    "hierarchical",
    "zero1",
    "zero2",
    "fsdp",
    "hsdp",
)


def BUSBW_FACTOR(collective: str, num_ranks):  # noqa: N802 - a table, named like a constant
    """nccl-tests' bus-bandwidth factor: busbw = algbw × factor.

    From nccl-tests ``doc/PERFORMANCE.md``: all_reduce 2(n−1)/n; reduce_scatter,
    all_gather, all_to_all (n−1)/n; broadcast, reduce, sendrecv 1. ddltune's
    ``ps_push``/``ps_pull`` are reported like reduce/broadcast (factor 1).

    Args:
        collective: a name from :data:`COLLECTIVE_NAMES`.
        num_ranks: n ≥ 1 (int or array).

    Raises:
        ValueError: on an unknown collective name.

    Example:
        >>> BUSBW_FACTOR("all_reduce", 4)
        1.5
    """
    n = num_ranks
    if collective == "all_reduce":
        return 2.0 * (n - 1) / n
    if collective in ("reduce_scatter", "all_gather", "all_to_all"):
        return (n - 1) / n
    if collective in ("broadcast", "reduce", "sendrecv", "ps_push", "ps_pull"):
        return 1.0 + 0.0 * n
    raise ValueError(f"unknown collective {collective!r}; valid: {', '.join(COLLECTIVE_NAMES)}")
