"""Summaries of measurement files: what was measured, where, when, how much."""

from __future__ import annotations

import math
import os
from collections import Counter

from ._records import emulated_spec, read_records

__all__ = ["summarize_measurements"]


def summarize_measurements(path: str | os.PathLike) -> dict:
    """A JSON-ready summary of a measurement file (what ``ddltune show`` prints).

    Groups the records (read and validated by :func:`read_records`) by what
    they measured: collectives per (collective, num_ranks, ranks_per_node),
    compute ops per (op, num_ranks), training steps per (architecture,
    workers, model). A record's time is its central statistic: the median,
    else the mean (nccl-tests imports), p10 or min.

    Args:
        path: a JSON Lines measurement file (schema v1).

    Returns:
        A dict: ``file``, ``type`` (``"measurements"``), ``records`` (count),
        ``kinds`` (count per kind), ``backends``, ``device_kinds``, ``hosts``
        (distinct host fingerprints: the machines that wrote the records),
        ``job_hosts`` (the distinct ``num_hosts`` the measuring jobs spanned,
        where recorded), ``emulated`` (the emulated clusters the records were
        measured in, as ``--emulate`` specs, e.g. ``2x1@100mbit``; empty for a
        real machine), ``sources``, ``first``/``last``
        (timestamps), ``versions`` (library → versions seen), ``collectives``
        (per series: points, distinct sizes, min/max bytes, min/max time in s,
        wrong results), ``compute`` (per op: points, min/max GFLOP/s = 10⁹
        FLOP/s) and ``steps`` (points per configuration); lists sorted.

    Raises:
        InputFileError: naming the file and line of a malformed record.
        FileNotFoundError: as ``open``.
    """
    recs = read_records(path)
    kinds = Counter(r["kind"] for r in recs)
    stamps = sorted(r["timestamp"] for r in recs)
    versions: dict[str, set] = {}
    for r in recs:
        for k, v in (r.get("versions") or {}).items():
            versions.setdefault(k, set()).add(str(v))
    steps: dict[tuple, int] = Counter(
        (r["architecture"], r["workers"], r["model"]) for r in recs if r["kind"] == "step"
    )
    return {
        "file": str(path),
        "type": "measurements",
        "records": len(recs),
        "kinds": dict(kinds),
        "backends": sorted({r["backend"] for r in recs}),
        "device_kinds": sorted({r["device_kind"] for r in recs}),
        "hosts": len({r.get("host_fingerprint") for r in recs}),
        "job_hosts": sorted({r["num_hosts"] for r in recs if "num_hosts" in r}),
        "emulated": sorted(
            {e for e in (emulated_spec(r.get("emulated")) for r in recs) if e is not None}
        ),
        "sources": sorted({r["source"] for r in recs}),
        "first": stamps[0],
        "last": stamps[-1],
        "versions": {k: sorted(v) for k, v in sorted(versions.items())},
        "collectives": _collective_series(recs),
        "compute": _compute_ops(recs),
        "steps": [
            {"architecture": k[0], "workers": k[1], "model": k[2], "points": n}
            for k, n in sorted(steps.items())
        ],
    }


def _collective_series(recs: list[dict]) -> list[dict]:
    """The summary's ``collectives``: one entry per (collective, num_ranks, ranks_per_node),
    the all-reduce's algorithm named beside its collective (``all_reduce (hierarchical)``),
    a series timed within every node at once apart (``nodes_at_once``)."""
    series: dict[tuple, dict] = {}
    for r in recs:
        if r["kind"] != "collective":
            continue
        key = (
            r["collective"] + (f" ({r['algorithm']})" if r.get("algorithm") else ""),
            r["num_ranks"],
            r["ranks_per_node"],
            int(r.get("nodes_at_once") or 0),
        )
        s = series.setdefault(
            key, {"points": 0, "sizes": set(), "min_s": math.inf, "max_s": 0.0, "wrong": 0}
        )
        t = _central(r)
        s["points"] += 1
        s["sizes"].add(r["message_bytes"])
        s["min_s"] = min(s["min_s"], t)
        s["max_s"] = max(s["max_s"], t)
        s["wrong"] += int(r.get("wrong", 0))
    return [
        {
            "collective": k[0],
            "num_ranks": k[1],
            "ranks_per_node": k[2],
            "points": v["points"],
            "sizes": len(v["sizes"]),
            "min_bytes": min(v["sizes"]),
            "max_bytes": max(v["sizes"]),
            "min_time_s": v["min_s"],
            "max_time_s": v["max_s"],
            "wrong": v["wrong"],
        }
        | ({"nodes_at_once": k[3]} if k[3] else {})
        for k, v in sorted(series.items())
    ]


def _compute_ops(recs: list[dict]) -> list[dict]:
    """The summary's ``compute``: one entry per (op, num_ranks), GFLOP/s range."""
    compute: dict[tuple, dict] = {}
    for r in recs:
        if r["kind"] != "compute":
            continue
        key = (r["op"], r["num_ranks"])
        c = compute.setdefault(key, {"points": 0, "gflop_s": []})
        c["points"] += 1
        c["gflop_s"].append(r["flops"] / _central(r) / 1e9)
    return [
        {
            "op": k[0],
            "num_ranks": k[1],
            "points": v["points"],
            "min_gflop_s": min(v["gflop_s"]),
            "max_gflop_s": max(v["gflop_s"]),
        }
        for k, v in sorted(compute.items())
    ]


def _central(rec: dict) -> float:
    ts = rec["time_s"]
    for k in ("median", "mean", "p10", "min"):
        if k in ts:
            return float(ts[k])
    raise ValueError("record without a central time statistic")  # validated: unreachable
