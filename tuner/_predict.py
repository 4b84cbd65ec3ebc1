"""The cost model's predictions for a grid of configurations, with intervals.

What ``ddltune predict`` prints, as a Python API: :func:`predict_iterations`
(one synchronous SGD iteration per architecture × servers × workers × bucket
size) and :func:`predict_collective` (one collective per message size, with
nccl-tests' algbw and busbw). Both take datasheet :class:`costmodel.ClusterParams`
or a fitted :class:`calibration.Profile`; a profile adds a prediction interval
to every row (:meth:`calibration.Profile.interval`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np

from calibration import Profile
from costmodel import (
    BUSBW_FACTOR,
    DEFAULT_BUCKET_BYTES,
    Breakdown,
    ClusterParams,
    Workload,
    accumulated_workload,
    bucketize,
    collective_time,
    format_bytes,
    get_architecture,
    get_collective,
    iteration_time,
    with_grad_dtype,
)

from ._format import format_range
from ._uncertainty import takes_batched

__all__ = [
    "PREDICTION_LEVEL",
    "measured_ranks_per_node",
    "node_capacity_note",
    "predict_collective",
    "predict_iterations",
    "size_warnings",
    "topology_warnings",
]

#: Coverage of the intervals added when the cluster is a fitted profile.
PREDICTION_LEVEL = 0.9


def _split(cluster: ClusterParams | Profile) -> tuple[ClusterParams, Profile | None]:
    if isinstance(cluster, Profile):
        return cluster.params, cluster
    if isinstance(cluster, ClusterParams):
        return cluster, None
    raise TypeError(
        f"cluster: expected costmodel.ClusterParams or calibration.Profile, "
        f"got {type(cluster).__name__}"
    )


def _interval(profile: Profile | None, fn, level: float, of: str = "steps", batched=False):
    if profile is None:
        return None
    if batched and takes_batched(profile):  # fn runs in numpy on a batch of parameter sets
        low, high = profile.interval(fn, level=level, of=of, batched=True)
    else:
        low, high = profile.interval(fn, level=level, of=of)
    return np.asarray(low, dtype=np.float64), np.asarray(high, dtype=np.float64)


def _grid_interval(profile, workload, arch, colocated: bool, grid, ranks_per_node, level):
    """The ``level`` intervals of the step times of ``grid`` [(k, n, b), …] for one
    architecture, with every perturbed parameter set in one numpy call (the tuner's
    :func:`~tuner._search.spec_times`, nothing compiled): what ``recommend`` does."""
    from ._search import TimeSpec, Variant, spec_times

    batch = float(workload.batch_size)
    v = Variant(arch.name, colocated=colocated)
    rows = [(v, n, k or 1, b, batch, batch) for k, n, b in grid]
    spec, order = TimeSpec.build(workload, ranks_per_node, rows)
    lo, hi = profile.interval(lambda p: spec_times(p, spec), level=level, batched=True)
    out_lo, out_hi = np.empty(len(rows)), np.empty(len(rows))
    out_lo[order], out_hi[order] = np.ravel(lo), np.ravel(hi)
    return out_lo, out_hi


def _span(profile, key):
    mr = getattr(profile, "measured_ranges", None) or {}
    v = mr.get(key) if isinstance(mr, dict) else None
    if not isinstance(v, list | tuple) or len(v) != 2:
        return None
    return float(v[0]), float(v[1])


def measured_ranks_per_node(profile) -> int | None:
    """The one ranks-per-node value a profile's collectives were measured at, or ``None``.

    Args:
        profile: a :class:`calibration.Profile` (or anything with ``measured_ranges``).

    Returns:
        g when ``measured_ranges["ranks_per_node"]`` is ``[g, g]``; ``None`` when
        nothing was measured (a preset profile) or several values were.

    Example:
        >>> class P: measured_ranges = {"ranks_per_node": [8, 8]}
        >>> measured_ranks_per_node(P())
        8
    """
    span = _span(profile, "ranks_per_node")
    if span is None or span[0] != span[1]:
        return None
    return int(span[0])


def unreliable_warning(profile) -> str | None:
    """The warning for a prediction from a profile marked unreliable, or ``None``.

    ``recommend`` refuses such a profile unless forced; ``predict`` answers, and
    says so with every answer.

    Example:
        >>> class P: reliable, heldout_p90 = False, 0.157
        >>> unreliable_warning(P())[:62]
        'the profile is marked UNRELIABLE (held-out p90 error 15.7%, li'
    """
    from calibration import RELIABLE_P90_LIMIT

    if profile is None or bool(getattr(profile, "reliable", True)):
        return None
    p90 = getattr(profile, "heldout_p90", None)
    shown = "unknown" if p90 is None or not math.isfinite(float(p90)) else f"{100 * p90:.1f}%"
    return (
        f"the profile is marked UNRELIABLE (held-out p90 error {shown}, limit "
        f"{100 * RELIABLE_P90_LIMIT:.0f}%): its own microbenchmarks miss by that much, so these "
        "predictions may too ('ddltune show PROFILE' lists the misses per series)"
    )


def unmeasured_network_warning(profile, num_ranks, ranks_per_node) -> str | None:
    """The warning for a prediction across nodes from a profile none of whose records
    crossed nodes, or ``None``.

    Such a profile's inter-node α and β are its prior preset's datasheet values (no
    record depends on them), so a multi-node answer rests on that preset, not on the
    cluster (a new user's trial: ``ddltune run`` on one machine recommended 64 workers on
    32 nodes of the ethernet-10g prior, saying so only in the report's provenance).

    Args:
        profile: a :class:`calibration.Profile` (``measured_ranges``, ``prior``), or
            ``None`` (no warning).
        num_ranks: n ≥ 1 of the prediction.
        ranks_per_node: g ≥ 1 of the prediction.

    Returns:
        One sentence where n > g and the measured ranges show no record across nodes
        (the most ranks measured ≤ the fewest ranks per node); else ``None``.
    """
    if profile is None or int(num_ranks) <= int(ranks_per_node):
        return None
    ranks, rpn = _span(profile, "num_ranks"), _span(profile, "ranks_per_node")
    if ranks is None or rpn is None or ranks[1] > rpn[0]:
        return None
    prior = getattr(profile, "prior", None) or {}
    net = str(prior.get("network") or prior.get("preset") or "").split(":")[0].split(",")[0]
    link = f"the prior preset's {net} datasheet link" if net else "the prior preset's link"
    return (
        f"no measurement crossed nodes (every record ran within one node): across the "
        f"{int(num_ranks) / int(ranks_per_node):.0f} nodes of this prediction the network is "
        f"{link}, not your cluster's; measure across nodes (srun or mpirun ddltune collect, "
        "the README's 'Calibrating on a cluster') or calibrate with --prior-preset naming your "
        "network"
    )


def topology_warnings(profile, num_ranks, ranks_per_node) -> list[str]:
    """Warnings for a prediction at a topology the profile never measured.

    A profile fitted on one node says nothing about the inter-node network (its
    parameters stay at the prior there), so a prediction outside the measured
    rank counts or ranks per node is an extrapolation; this names what was measured.

    Args:
        profile: a :class:`calibration.Profile`, or ``None`` (no warnings).
        num_ranks: n ≥ 1, the ranks (workers) of the prediction.
        ranks_per_node: g ≥ 1 of the prediction (compared as min(g, n)).

    Returns:
        Zero to three messages (``[]`` for a profile with no measured ranges): ranks
        per node, rank count, and :func:`unmeasured_network_warning`.

    Example:
        >>> class P: measured_ranges = {"num_ranks": [8, 8], "ranks_per_node": [8, 8]}
        >>> topology_warnings(P(), 8, 1)[0]  # doctest: +NORMALIZE_WHITESPACE
        'extrapolation: 1 rank per node was never measured (the profile measured 8 ranks
        per node); predict at 8 ranks per node for the measured topology'
        >>> topology_warnings(P(), 8, 1)[1][:29]  # and no record crossed nodes
        'no measurement crossed nodes '
        >>> topology_warnings(P(), 8, 8)
        []
    """
    if profile is None:
        return []
    out = []
    n, g = int(num_ranks), min(int(ranks_per_node), int(num_ranks))
    rpn = _span(profile, "ranks_per_node")
    if rpn is not None and not rpn[0] <= g <= rpn[1]:
        hint = f"; predict at {rpn[0]:g} ranks per node for the measured topology"
        hint = hint if rpn[0] == rpn[1] else ""
        out.append(
            f"extrapolation: {g} rank{'s' if g != 1 else ''} per node was never measured "
            f"(the profile measured {format_range(*rpn)} ranks per node){hint}"
        )
    ranks = _span(profile, "num_ranks")
    if ranks is not None and not ranks[0] <= n <= ranks[1]:
        out.append(
            f"extrapolation: {n} rank{'s were' if n != 1 else ' was'} never measured (the "
            f"profile measured {format_range(*ranks)} ranks)"
        )
    net = unmeasured_network_warning(profile, n, g)
    return out if net is None else [*out, net]


def node_capacity_note(workers: int, ranks_per_node: int) -> str | None:
    """The note for a job smaller than one node, or ``None`` when it fills one or more.

    ``ranks_per_node`` g is the node's capacity: n < g workers run as n ranks
    on one node (as torchrun, Horovod and srun place them). The cost model
    costs them so: the collectives use min(g, n) ranks per node and no
    inter-node link, and dedicated ps servers share the node while n + k ≤ g.
    Such a query is answered, with this note, not refused.

    Args:
        workers: n ≥ 1, the job's workers (ranks).
        ranks_per_node: g ≥ 1, the ranks a node holds.

    Returns:
        One sentence, or ``None`` when n ≥ g.

    Example:
        >>> node_capacity_note(2, 8)
        '2 workers fit on one node of 8 ranks: costed as 2 ranks on one node (--ranks-per-node is the node capacity)'
        >>> node_capacity_note(8, 8) is None
        True
    """
    n, g = int(workers), int(ranks_per_node)
    if n >= g:
        return None
    return (
        f"{n} worker{'s' if n != 1 else ''} fit{'s' if n == 1 else ''} on one node of {g} "
        f"ranks: costed as {n} rank{'s' if n != 1 else ''} on one node "
        "(--ranks-per-node is the node capacity)"
    )


def size_warnings(profile, message_bytes) -> list[str]:
    """A warning for a message size outside the profile's measured sizes (an extrapolation).

    Args:
        profile: a :class:`calibration.Profile`, or ``None`` (no warnings).
        message_bytes: S ≥ 0, bytes.

    Returns:
        ``[]`` inside ``measured_ranges["message_bytes"]`` (or without it), else one message.

    Example:
        >>> class P: measured_ranges = {"message_bytes": [1024, 65536]}
        >>> size_warnings(P(), 2**30)
        ['extrapolation: 1 GiB is outside the measured sizes (1 KiB – 64 KiB)']
    """
    span = _span(profile, "message_bytes")
    if span is None or span[0] <= float(message_bytes) <= span[1]:
        return []
    lo, hi = (format_bytes(v) for v in span)
    return [
        f"extrapolation: {format_bytes(message_bytes)} is outside the measured sizes ({lo} – {hi})"
    ]


def bucket_size_warnings(profile, workload: Workload, bucket_bytes, architecture=None) -> list[str]:
    """A warning when a configuration's messages leave the profile's measured sizes.

    The messages are the buckets :func:`costmodel.bucketize` packs at the cap
    ``bucket_bytes`` (what the architecture exchanges, smallest to largest),
    or, for fsdp/hsdp, the units the architecture gathers and reduce-scatters
    (one per layer block: a 7B decoder's are hundreds of MB, whatever the cap).

    Args:
        profile: a :class:`calibration.Profile`, or ``None`` (no warnings).
        workload: the :class:`costmodel.Workload` being exchanged.
        bucket_bytes: the cap, bytes ≥ 0 (0: one message per tensor).
        architecture: the architecture instance, optional (default: buckets).

    Returns:
        ``[]`` when every message lies inside ``measured_ranges["message_bytes"]``
        (or the profile has none), else one message naming both ranges, how
        far the largest (or smallest) lies outside them, and the ``collect``
        option that measures up to the largest.

    Example:
        >>> from costmodel import get_workload
        >>> class P: measured_ranges = {"message_bytes": [1024, 16 * 2**20]}
        >>> from costmodel import get_architecture
        >>> print(bucket_size_warnings(P(), get_workload("llama2_7b"), 0, get_architecture("fsdp"))[0])
        extrapolation: FSDP unit messages of 772 MiB–1000 MiB reach outside the measured sizes (1 KiB–16 MiB): the largest is 62.5× the largest measured; measure up to it with ddltune collect --max-bytes 1G
    """
    span = _span(profile, "message_bytes")
    if span is None:
        return []
    if architecture is not None and hasattr(architecture, "bucket_table"):
        table = architecture.bucket_table(workload, [float(bucket_bytes)])
        sizes = table.sizes[0][table.sizes[0] > 0]
        kind = "FSDP unit"
    else:
        sizes, _ = bucketize(workload, bucket_bytes)
        kind = "bucket"
    lo, hi = float(np.min(sizes)), float(np.max(sizes))
    if span[0] <= lo and hi <= span[1]:
        return []
    text = (
        f"extrapolation: {kind} messages of {format_bytes(lo)}–{format_bytes(hi)} reach "
        f"outside the measured sizes ({format_bytes(span[0])}–{format_bytes(span[1])})"
    )
    far = []
    if hi > span[1]:
        far.append(
            f"the largest is {hi / span[1]:.3g}× the largest measured; measure up to it with "
            f"ddltune collect --max-bytes {_size_option(hi)}"
        )
    if lo < span[0]:
        far.append(f"the smallest is {span[0] / max(lo, 1.0):.3g}× below the smallest measured")
    return [text + ": " + "; ".join(far)]


def _size_option(nbytes: float) -> str:
    """The smallest size ≥ ``nbytes`` on ``ddltune collect``'s default grid (1 KiB × 4^k, its
    ``--min-bytes`` and ``--step-factor``) as a ``--max-bytes`` value (K/M/G = powers of
    1024): a cap between grid points is not measured (128M on that grid stops at 64 MiB)."""
    e = max(10, math.ceil(math.log2(max(nbytes, 1.0))))
    p = 1 << (e + (e - 10) % 2)
    for shift, suffix in ((30, "G"), (20, "M"), (10, "K")):
        if p >= 1 << shift:
            return f"{p >> shift}{suffix}"
    return str(p)


def _placement_notes(n, g) -> list[str]:
    note = node_capacity_note(n, g)
    return [] if note is None else [note]


def _unique(values, name: str) -> list:
    out = list(dict.fromkeys(values))
    if not out:
        raise ValueError(f"{name}: expected at least one value, got none")
    return out


def predict_iterations(
    cluster: ClusterParams | Profile,
    workload: Workload,
    architectures: Sequence[str],
    workers: Sequence[int],
    *,
    servers: Sequence[int] = (1,),
    bucket_bytes: Sequence[int] = (DEFAULT_BUCKET_BYTES,),
    ranks_per_node: int = 1,
    colocated: bool = False,
    level: float = PREDICTION_LEVEL,
    grad_dtype=None,
    accumulation_steps: int = 1,
) -> list[dict]:
    """One iteration's breakdown for every configuration of a grid.

    The grid is every architecture × servers (only for architectures with
    parameter servers, ``ps`` and ``hybrid``; ``None`` for the others) ×
    workers × bucket size, in that nesting order; duplicates are dropped. Each
    row is :func:`costmodel.iteration_time` of that configuration (one batched
    call per architecture).

    Args:
        cluster: datasheet parameters, or a fitted profile (then every row gets
            ``interval_s``, a ``level`` prediction interval).
        workload: the model (batch size per worker, layers, optional measured
            step time).
        architectures: names of :data:`costmodel.ARCHITECTURE_NAMES`.
        workers: data-parallel ranks n ≥ 1.
        servers: parameter servers k ≥ 1 (used by ``ps`` and ``hybrid``).
        bucket_bytes: gradient bucket caps, bytes ≥ 0 (0 = one collective per
            tensor).
        ranks_per_node: ranks a node holds (sharing its link), g ≥ 1; a job of
            n < g workers runs on one node (:func:`node_capacity_note`).
        colocated: ``ps`` servers run on k of the workers (only ``ps``).
        level: interval coverage in (0, 1).
        grad_dtype: gradients on the wire: ``None`` (the workload's),
            ``"fp32"``, ``"bf16"``, ``"fp16"`` (:func:`costmodel.with_grad_dtype`).
        accumulation_steps: K ≥ 1 micro-batches of the workload's batch per
            optimizer step, exchanged as each architecture does
            (:func:`costmodel.accumulated_workload`: once per step for DDP/PS/
            ZeRO-1, every micro-batch for ZeRO-2, FSDP and HSDP); every row is
            then per optimizer step.

    Returns:
        A list of JSON-ready dicts (SI units: s, bytes, samples/s): keys
        ``architecture``, ``servers``, ``colocated``, ``workers``,
        ``ranks_per_node`` (min(g, n): the ranks on a node), ``bucket_bytes``,
        ``accumulation_steps``, ``gradient_bytes`` (per worker per exchange),
        ``time_s`` (= ``iteration_s``), the fields of :class:`costmodel.Breakdown`,
        ``warnings`` (:func:`node_capacity_note` for a job smaller than a node,
        then :func:`topology_warnings`: rank counts or ranks per node the
        profile never measured) and ``interval_s`` ``[low, high]`` with a
        profile.

    Raises:
        ValueError: an unknown architecture (listing the valid ones), an empty
            list, ``colocated`` without ``ps``, or values out of range.
        TypeError: ``cluster`` is neither parameters nor a profile.

    Example:
        >>> from costmodel import get_workload, preset
        >>> rows = predict_iterations(preset("ethernet-10g", "v100"),
        ...     get_workload("resnet50", 64), ["ring", "ps"], [4, 8])
        >>> [(r["architecture"], r["workers"]) for r in rows]
        [('ring', 4), ('ring', 8), ('ps', 4), ('ps', 8)]

    (Long for its documentation: the body is 54 lines.)
    """
    params, profile = _split(cluster)
    if grad_dtype is not None:
        workload = with_grad_dtype(workload, grad_dtype)
    steps = accumulation_steps
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"accumulation_steps must be an integer >= 1, got {steps!r}")
    workload = accumulated_workload(workload, steps)  # the timeline runs the K micro-batches
    archs = _unique(architectures, "architectures")
    if colocated and "ps" not in archs:
        raise ValueError("colocated: applies to the ps architecture; add ps to architectures")
    workers = _unique(workers, "workers")
    servers = _unique(servers, "servers")
    buckets = _unique(bucket_bytes, "bucket_bytes")
    rows = []
    for a in archs:
        coloc = a == "ps" and colocated
        arch = get_architecture(a, colocated=coloc)  # ValueError: lists the valid names
        ks = servers if arch.uses_servers else [None]
        grid = list(itertools.product(ks, workers, buckets))
        k_arr = np.array([k or 1 for k, _, _ in grid], dtype=np.float64)
        n_arr = np.array([n for _, n, _ in grid], dtype=np.float64)
        b_arr = np.array([b for _, _, b in grid], dtype=np.float64)

        def predict(p, arch=arch, n_arr=n_arr, k_arr=k_arr, b_arr=b_arr):
            bd = iteration_time(
                p,
                workload,
                arch,
                n_arr,
                ranks_per_node=ranks_per_node,
                servers=k_arr,
                bucket_bytes=b_arr,
            )
            return bd

        out = predict(params).to_dict()
        if profile is not None and takes_batched(profile):  # every parameter set in numpy
            interval = _grid_interval(profile, workload, arch, coloc, grid, ranks_per_node, level)
        else:
            interval = _interval(profile, lambda p, f=predict: f(p).iteration_s, level)
        for i, (k, n, b) in enumerate(grid):
            row = {
                "architecture": a,
                "servers": k,
                "colocated": coloc,
                "workers": n,
                "ranks_per_node": min(ranks_per_node, n),
                "bucket_bytes": b,
                "accumulation_steps": steps,
                "gradient_bytes": workload.total_param_bytes,
                "time_s": out["iteration_s"][i],
            }
            row.update({f: out[f][i] for f in Breakdown.FIELDS})
            row["warnings"] = _placement_notes(n, ranks_per_node)
            row["warnings"] += topology_warnings(profile, n, ranks_per_node)
            row["warnings"] += [w for w in (unreliable_warning(profile),) if w]
            if n > 1:  # one worker exchanges nothing
                row["warnings"] += bucket_size_warnings(profile, workload, b, arch)
            if interval is not None:
                row["interval_s"] = [float(interval[0][i]), float(interval[1][i])]
            rows.append(row)
    return rows


def predict_collective(
    cluster: ClusterParams | Profile,
    collective: str,
    message_bytes: Sequence[int],
    num_ranks: int,
    *,
    ranks_per_node: int = 1,
    algorithm: str | None = None,
    level: float = PREDICTION_LEVEL,
) -> list[dict]:
    """A collective's time, algbw and busbw per message size.

    algbw = S / t and busbw = algbw × factor, as nccl-tests defines them
    (factor: all_reduce 2(n−1)/n; reduce_scatter, all_gather, all_to_all
    (n−1)/n; others 1; source: nccl-tests doc/PERFORMANCE.md).

    Args:
        cluster: datasheet parameters, or a fitted profile (adds ``interval_s``).
        collective: a name of :data:`costmodel.COLLECTIVE_NAMES`.
        message_bytes: sizes S ≥ 0 in bytes, nccl-tests' convention (the full
            array for all_gather and reduce_scatter), one row each, in order.
        num_ranks: n ≥ 1.
        ranks_per_node: g ≥ 1 (reported as min(g, n)).
        algorithm: for all_reduce ``ring`` (default), ``tree`` or
            ``hierarchical``; for reduce_scatter ``ring`` (default) or
            ``halving_doubling`` (gloo's, XLA:CPU's).
        level: interval coverage in (0, 1).

    Returns:
        A list of JSON-ready dicts: ``collective``, ``algorithm``,
        ``num_ranks``, ``ranks_per_node``, ``message_bytes``, ``time_s`` (s),
        ``algbw`` and ``busbw`` (bytes/s; ``None`` where t = 0, e.g. one rank),
        ``warnings`` (:func:`node_capacity_note`, :func:`topology_warnings`,
        :func:`size_warnings`) and ``interval_s`` with a profile.

    Raises:
        ValueError: an unknown collective or algorithm (listing the valid ones).
        TypeError: ``cluster`` is neither parameters nor a profile.

    Example:
        >>> from costmodel import preset
        >>> rows = predict_collective(preset("ethernet-10g"), "all_reduce", [1024], 1)
        >>> rows[0]["time_s"], rows[0]["busbw"]
        (0.0, None)
    """
    params, profile = _split(cluster)
    coll = get_collective(collective, algorithm)
    S = np.array(message_bytes, dtype=np.float64)
    n, g = num_ranks, ranks_per_node

    def predict(p):
        return collective_time(p, collective, S, n, g, algorithm=algorithm)

    t = np.asarray(predict(params.to_numpy()), dtype=np.float64)  # numpy: nothing compiled
    interval = _interval(profile, predict, level, of="microbenchmarks", batched=True)
    factor = float(BUSBW_FACTOR(collective, n))
    rows = []
    for i, s in enumerate(message_bytes):
        algbw = s / t[i] if t[i] > 0 else None
        row = {
            "collective": collective,
            "algorithm": coll.algorithm,
            "num_ranks": n,
            "ranks_per_node": min(g, n),
            "message_bytes": s,
            "time_s": float(t[i]),
            "algbw": algbw,
            "busbw": None if algbw is None else algbw * factor,
        }
        row["warnings"] = _placement_notes(n, g) + topology_warnings(profile, n, g)
        row["warnings"] += [w for w in (unreliable_warning(profile),) if w]
        row["warnings"] += size_warnings(profile, s)
        if interval is not None:
            row["interval_s"] = [float(interval[0][i]), float(interval[1][i])]
        rows.append(row)
    return rows
