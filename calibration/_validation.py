"""Held-out validation of a calibration: deterministic splits and error statistics.

The splits are by *size within a series*: a series is one measured curve — a
collective at one (num_ranks, ranks_per_node), or a compute op at one number
of concurrent processes — and its points are ordered by message size (or
FLOPs). Holding out whole sizes, spread evenly over the interior of the curve,
measures what the profile will be used for: predicting sizes that were not
measured, between the measured extremes (extrapolation is flagged separately,
from the profile's measured ranges).

Errors are reported as absolute percentage errors |t̂/t − 1| (fractions here,
percent in the CLI), the way nccl-tests users compare timings.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence

import numpy as np

__all__ = [
    "holdout_mask",
    "inner_folds",
    "error_summary",
    "series_report",
    "worst_points",
    "systematic_misses",
    "systematic_note",
    "RELIABLE_P90_LIMIT",
]

#: Held-out p90 absolute percentage error (fraction) above which a profile is
#: marked ``reliable: false`` and the tuner refuses it unless forced. The one
#: definition: the tuner and the report read ``calibration.RELIABLE_P90_LIMIT``.
RELIABLE_P90_LIMIT = 0.15


def _interior_pick(m: int, k: int) -> list[int]:
    """k indices spread evenly over 1 … m−2 (never the smallest or largest size)."""
    k = max(0, min(k, m - 2))
    if k == 0:
        return []
    inner = m - 2
    return sorted({1 + min(inner - 1, int((j + 0.5) * inner / k)) for j in range(k)})


def _by_series(series: Sequence, sizes: np.ndarray, select: np.ndarray | None = None):
    groups: dict = defaultdict(list)
    for i, key in enumerate(series):
        if select is None or select[i]:
            groups[key].append(i)
    for key, idx in groups.items():
        uniq = np.unique(sizes[idx])
        yield key, np.asarray(idx), uniq


def holdout_mask(series: Sequence, sizes, fraction: float) -> np.ndarray:
    """Which points to hold out: a deterministic ``fraction`` of each series' sizes.

    Per series, the distinct sizes are sorted and ``round(fraction × m)`` of
    them, spread evenly over the interior (never the smallest or the largest),
    are held out — every point measured at a held-out size. A series with
    fewer than 4 distinct sizes holds out nothing.

    Args:
        series: (N,) hashable series keys.
        sizes: (N,) sizes (bytes or FLOPs), > 0.
        fraction: in [0, 1).

    Returns:
        (N,) bool, True = held out.

    Raises:
        ValueError: if ``fraction`` is not in [0, 1).

    Example:
        >>> holdout_mask(["a"] * 8, [1, 2, 4, 8, 16, 32, 64, 128], 0.25).nonzero()[0].tolist()
        [2, 5]
    """
    f = float(fraction)
    if not (0.0 <= f < 1.0) or math.isnan(f):
        raise ValueError(f"holdout must be a fraction in [0, 1), got {fraction!r}")
    sizes = np.asarray(sizes, dtype=np.float64)
    out = np.zeros(len(series), dtype=bool)
    if f == 0.0:
        return out
    for _, idx, uniq in _by_series(series, sizes):
        m = len(uniq)
        if m < 4:
            continue
        k = int(math.floor(f * m + 0.5))
        held = uniq[_interior_pick(m, k)]
        out[idx] = np.isin(sizes[idx], held)
    return out


def inner_folds(series: Sequence, sizes, train: np.ndarray, k: int = 3) -> np.ndarray:
    """K interleaved folds of the *training* sizes, for choosing the regime count.

    Per series, the distinct training sizes are sorted; interior size number
    i (1 … m−2) goes to fold (i − 1) mod k. The smallest and largest sizes
    are never held out, so a fold never asks for extrapolation. Series with
    fewer than k + 2 sizes hold out nothing.

    Args:
        series, sizes: as :func:`holdout_mask`.
        train: (N,) bool, the points calibrate may use.
        k: number of folds ≥ 2.

    Returns:
        (k, N) bool, True = held out in that fold (always a subset of ``train``).

    Example:
        >>> f = inner_folds(["a"] * 7, [1, 2, 4, 8, 16, 32, 64], [True] * 7, k=3)
        >>> [row.nonzero()[0].tolist() for row in f]
        [[1, 4], [2, 5], [3]]
    """
    sizes = np.asarray(sizes, dtype=np.float64)
    train = np.asarray(train, dtype=bool)
    out = np.zeros((k, len(series)), dtype=bool)
    for _, idx, uniq in _by_series(series, sizes, train):
        m = len(uniq)
        if m < k + 2:
            continue
        rank = np.searchsorted(uniq, sizes[idx])
        for j, i in zip(idx, rank, strict=True):
            if 1 <= i <= m - 2:
                out[(i - 1) % k, j] = True
    return out


def error_summary(abs_err) -> dict:
    """``{"points", "median", "p90", "max"}`` of absolute fractional errors (NaN when empty).

    Example:
        >>> error_summary([0.01, 0.02, 0.03])["median"]
        0.02
    """
    e = np.asarray(abs_err, dtype=np.float64)
    if e.size == 0:
        return {"points": 0, "median": math.nan, "p90": math.nan, "max": math.nan}
    return {
        "points": int(e.size),
        "median": float(np.median(e)),
        "p90": float(np.quantile(e, 0.9)),
        "max": float(e.max()),
    }


def series_report(points: Sequence[dict], pred_s, heldout: np.ndarray) -> list[dict]:
    """Per series: train and held-out median / p90 absolute percentage error.

    Args:
        points: (N,) point descriptions with ``series`` (dict form of the key)
            and ``time_s`` (measured).
        pred_s: (N,) predicted seconds.
        heldout: (N,) bool.

    Returns:
        One dict per series (in order of first appearance): the series'
        fields plus ``train`` and ``heldout`` :func:`error_summary` dicts.
    """
    pred = np.asarray(pred_s, dtype=np.float64)
    meas = np.asarray([p["time_s"] for p in points], dtype=np.float64)
    err = np.abs(pred / meas - 1.0)
    groups: dict = {}
    for i, p in enumerate(points):
        key = tuple(sorted(p["series"].items()))
        groups.setdefault(key, (p["series"], []))[1].append(i)
    out = []
    for series, idx in groups.values():
        idx = np.asarray(idx)
        h = heldout[idx]
        out.append(
            {
                **series,
                "train": error_summary(err[idx[~h]]),
                "heldout": error_summary(err[idx[h]]),
            }
        )
    return out


def worst_points(points: Sequence[dict], pred_s, heldout: np.ndarray, k: int = 5) -> list[dict]:
    """The ``k`` points with the largest absolute percentage error (held-out first).

    Each: ``file``, ``line``, the series fields, ``size``, ``measured_s``,
    ``predicted_s``, ``error`` (signed fraction t̂/t − 1), ``heldout``.
    """
    pred = np.asarray(pred_s, dtype=np.float64)
    meas = np.asarray([p["time_s"] for p in points], dtype=np.float64)
    err = pred / meas - 1.0
    order = sorted(range(len(points)), key=lambda i: (not heldout[i], -abs(err[i])))
    out = []
    for i in order[:k]:
        p = points[i]
        out.append(
            {
                "file": p.get("file"),
                "line": p.get("line"),
                **p["series"],
                "size": p["size"],
                "measured_s": float(meas[i]),
                "predicted_s": float(pred[i]),
                "error": float(err[i]),
                "heldout": bool(heldout[i]),
            }
        )
    return out


def systematic_misses(
    points: Sequence[dict], pred_s, heldout: np.ndarray, *, min_series: int = 3
) -> list[dict]:
    """Held-out message sizes that the series miss the same way, by more than the limit.

    Noise scatters a size's held-out errors over both signs; a size held out in
    at least ``min_series`` collective series, whose median signed error is over
    :data:`RELIABLE_P90_LIMIT` and which at least 3 in 4 of them miss in that
    direction, is a curve the model cannot follow (on one CPU: caches, whose cost
    per byte grows with the size), which measuring longer does not change.

    Args:
        points: the fit's points (``kind``, ``size``, ``time_s``).
        pred_s: predicted seconds, one per point.
        heldout: boolean mask of the held-out points.
        min_series: the fewest held-out points of one size to judge it, ≥ 2.

    Returns:
        One dict per such size, smallest first: ``size`` (bytes), ``points``,
        ``median_error``, ``min_error``, ``max_error`` (signed fractions t̂/t − 1).
    """
    pred = np.asarray(pred_s, dtype=np.float64)
    by: dict = defaultdict(list)
    for i, p in enumerate(points):
        if heldout[i] and p.get("kind") == "collective":
            by[float(p["size"])].append(pred[i] / float(p["time_s"]) - 1.0)
    out = []
    for size in sorted(by):
        e = np.asarray(by[size])
        med = float(np.median(e))
        agree = float(np.mean(np.sign(e) == np.sign(med)))
        if len(e) >= max(2, min_series) and abs(med) > RELIABLE_P90_LIMIT and agree >= 0.75:
            out.append(
                {
                    "size": size,
                    "points": int(len(e)),
                    "median_error": med,
                    "min_error": float(e.min()),
                    "max_error": float(e.max()),
                }
            )
    return out


def systematic_note(entries: Sequence[Mapping]) -> str:
    """One sentence on :func:`systematic_misses`' sizes, or ``""`` when there are none.

    Example:
        >>> systematic_note([{"size": 1048576, "points": 7, "median_error": 0.3,
        ...                   "min_error": 0.17, "max_error": 0.56}])[:63]
        'held-out misses that measuring longer will not remove: at 1 MiB'
    """
    from costmodel import format_bytes

    if not entries:
        return ""
    parts = [
        f"at {format_bytes(int(e['size']))} {e['points']} series are predicted "
        f"{100 * e['median_error']:+.0f}% (median; {100 * e['min_error']:+.0f}% … "
        f"{100 * e['max_error']:+.0f}%)"
        for e in entries
    ]
    return (
        "held-out misses that measuring longer will not remove: "
        + "; ".join(parts)
        + ". The model's α-β-γ curve cannot follow these sizes here (on one CPU, caches "
        "make each byte of a large message cost more than one of a small message); "
        "measure the cluster you will train on, or an emulated one"
    )


def series_label(s: Mapping, *, always_ranks_per_node: bool = False) -> str:
    """A fit series' name: ``all_reduce n=8``, ``all_reduce n=16 g=4``, ``forward conv2d n=2``.

    Args:
        s: a mapping with ``collective`` (or ``op`` for compute series, and
            ``layer`` for a model layer's: ``linear``, ``conv2d``), optionally
            ``algorithm`` (an all-reduce other than the ring: ``all_reduce
            (hierarchical) n=8 g=2``) and ``nodes_at_once`` (a collective
            timed within each node, every node at once: ``all_reduce n=2 g=2
            (4 nodes at once)``),
            ``num_ranks`` and ``ranks_per_node``.
        always_ranks_per_node: also show ``g`` when it is 1 or n (one rank per
            node, or all on one node).

    Example:
        >>> series_label({"collective": "all_reduce", "num_ranks": 8, "ranks_per_node": 8})
        'all_reduce n=8'
    """
    what = s.get("collective") or s.get("op") or "?"
    if s.get("algorithm"):
        what = f"{what} ({s['algorithm']})"
    if s.get("layer"):
        what = f"{what} {s['layer']}"
    n, g = s.get("num_ranks"), s.get("ranks_per_node")
    show = always_ranks_per_node or g not in (None, 1, n) or s.get("nodes_at_once")
    label = f"{what} n={n}" + (f" g={g}" if show else "")
    if s.get("nodes_at_once"):  # timed within each node, every node at once
        label += f" ({s['nodes_at_once']} nodes at once)"
    return label
