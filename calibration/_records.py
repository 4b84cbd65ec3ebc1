"""Measurement records: schema v1 (JSON Lines), validation, reading and writing.

One JSON object per line, one measured point per object. Every ddltune tool that
measures or imports timings writes this format (``ddltune collect``,
``ddltune import-nccl-tests``, ``ddltune validate``), and the calibration
reads it. Schema v1:

Common fields (every record):
    ``schema`` (int, 1); ``kind`` (``"collective"``, ``"compute"`` or ``"step"``);
    ``time_s``: statistics of the measured time in seconds, an object with any of
    ``min``, ``p10``, ``median``, ``mean``, ``p90``, ``iqr``, ``max`` and ``count``
    (at least one of min/p10/median/mean, all finite and > 0);
    ``samples_s`` (list of raw sample times in seconds; optional only for
    imported rows that have a single average); ``backend`` (``"cpu"``,
    ``"gpu"``, ``"tpu"``); ``device_kind`` (str); ``versions`` (object of
    library versions); ``host_fingerprint`` (hashed, never a host name);
    ``timestamp`` (ISO 8601, UTC); ``source`` (str: ``"ddltune collect"``,
    or the imported file's path).

``kind: "collective"``:
    ``collective`` (one of :data:`costmodel.COLLECTIVE_NAMES`); ``message_bytes``
    (int > 0, nccl-tests' size convention: for all_gather/reduce_scatter the
    full array); ``num_ranks`` (int ≥ 1); ``ranks_per_node`` (int ≥ 1,
    ≤ num_ranks); ``dtype`` (str); ``wrong`` (int ≥ 0: results that failed the
    correctness check, as nccl-tests' ``#wrong``; optional, default 0);
    ``in_place`` (bool, optional); ``algorithm`` (all_reduce only, optional:
    ``ring`` (default), ``tree``, ``hierarchical``); ``nodes_at_once`` (int,
    optional: a collective within each node, timed on this many nodes at
    once); ``ranks_per_machine`` (int ≥ ranks_per_node, optional: the job's
    ranks on one machine, sharing its cores, where that is more than a node's:
    the nodes of an emulated cluster share this machine; absent, a node's ranks
    have its cores to themselves); ``sync`` (optional, as a step's below: the
    small all-reduces ``ddltune collect`` ran before a swap on 2 ranks inside each
    timed call, which a prediction of it adds: :func:`sync_batch`);
    ``num_hosts`` (int, optional: the distinct
    host names among the job's ranks, as ``ddltune collect`` counts them, in
    [⌈num_ranks / ranks_per_node⌉, num_ranks − ranks_per_node + 1]; a host name
    itself is never written).

``kind: "compute"``:
    ``op`` (str, e.g. ``"matmul"``, ``"forward"``, ``"backward"``); ``flops``
    (float > 0, floating-point operations of one timed call; a multiply-add
    counts 2); ``num_ranks`` (processes running it at once on the node, ≥ 1);
    ``ranks_per_node`` (≥ 1); ``dtype``; ``shape`` (object, optional).

``kind: "step"``:
    ``architecture`` (``ps``, ``ps_host``, ``hybrid``, ``p2p``, ``ring``,
    ``tree``, ``hierarchical``); ``servers`` (int ≥ 0); ``colocated`` (bool);
    ``workers`` (int ≥ 1); ``ranks_per_node`` (int ≥ 1); ``bucket_bytes``
    (int ≥ 0); ``model`` (str); ``batch_size`` (int ≥ 1, per worker);
    ``same_buckets_at`` (optional list of ints ≥ 0: other caps that cut the
    model into the same buckets, measured as this one); ``sync`` (optional
    ``{"allreduces", "message_bytes", "num_ranks", "ranks_per_node"}``: the
    small all-reduces the training harness ran in each step to start its swaps
    together, which a prediction of the step adds: ``calibration.sync_time``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import platform
import socket
import tempfile
import time
import warnings
from collections.abc import Iterable, Iterator
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from costmodel import ALL_REDUCE_ALGORITHMS, ARCHITECTURE_NAMES, COLLECTIVE_NAMES, InputFileError

from ._output import OutputPathError, _fsync_dir, check_output_file

__all__ = [
    "RECOMMENDATION_WORDS",
    "is_recommendation",
    "SCHEMA_VERSION",
    "KINDS",
    "TIME_STATISTICS",
    "validate_record",
    "read_records",
    "iter_records",
    "parse_record_line",
    "json_depth_ok",
    "MAX_MESSAGE_BYTES",
    "MIN_TIME_S",
    "MAX_TIME_S",
    "MAX_JSON_DEPTH",
    "MAX_LINE_BYTES",
    "record_key",
    "RecordWriter",
    "record_origin",
    "describe_origin",
    "emulated_spec",
    "collective_algorithm",
    "cost_algorithm",
    "atomic_write_text",
    "provenance",
    "host_fingerprint",
    "time_statistics",
    "compute_contention",
    "core_sharing",
]

SCHEMA_VERSION = 1
KINDS = ("collective", "compute", "step")
TIME_STATISTICS = ("min", "p10", "median", "mean", "p90", "iqr", "max", "count")
_CENTRAL = ("min", "p10", "median", "mean")


#: Physical bounds checked at read time (issue 18): a message is at most 2^50 B
#: (1 PiB), a measured time lies in [1 ns, 10^6 s], a rank or worker count is at
#: most 2^24, a compute call at most 10^24 FLOP. Outside them a number is a typo
#: or junk, and the fit would fail later with an error that names no line.
MAX_MESSAGE_BYTES = 2**50
MIN_TIME_S = 1e-9
MAX_TIME_S = 1e6
MAX_RANKS = 2**24
MAX_FLOPS = 1e24
MAX_BATCH = 2**31
#: Input limits: one record line at most 4 MiB, JSON nesting at most 64 levels.
MAX_LINE_BYTES = 4 * 1024**2
MAX_JSON_DEPTH = 64


def _is_pos_int(v, minimum: int = 1, maximum: int | None = None) -> bool:
    return (
        isinstance(v, int)
        and not isinstance(v, bool)
        and v >= minimum
        and (maximum is None or v <= maximum)
    )


def _is_pos_finite(v) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v > 0


def _is_time(v) -> bool:
    """A measured time in seconds within [MIN_TIME_S, MAX_TIME_S]."""
    return _is_pos_finite(v) and MIN_TIME_S <= v <= MAX_TIME_S


def json_depth_ok(obj, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether a decoded JSON value nests at most ``limit`` levels of arrays/objects.

    Iterative (no recursion), so any decoded value can be checked.
    """
    stack = [(obj, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict | list):
            if d > limit:
                return False
            stack.extend((c, d + 1) for c in (v.values() if isinstance(v, dict) else v))
    return True


def validate_record(rec: object) -> None:
    """Check one record against schema v1.

    Args:
        rec: a decoded JSON object.

    Raises:
        ValueError: naming the first field that is missing or invalid (the
            caller adds the file and line).

    Example:
        >>> validate_record({"schema": 1, "kind": "collective", "collective": "all_reduce",
        ...     "message_bytes": 1024, "num_ranks": 2, "ranks_per_node": 2, "dtype": "float32",
        ...     "time_s": {"p10": 1e-5}, "samples_s": [1e-5], "backend": "cpu",
        ...     "device_kind": "cpu", "versions": {}, "host_fingerprint": "x",
        ...     "timestamp": "2026-01-01T00:00:00Z", "source": "test"})
    """
    if not isinstance(rec, dict):
        raise ValueError(f"expected a JSON object, got {type(rec).__name__}")
    if "schema" not in rec:
        raise ValueError("missing field 'schema'")
    if rec["schema"] != SCHEMA_VERSION:
        raise ValueError(
            f"unknown schema version {rec['schema']!r}; this ddltune reads schema {SCHEMA_VERSION}"
        )
    kind = rec.get("kind")
    if kind not in KINDS:
        raise ValueError(f"field 'kind' must be one of {', '.join(KINDS)}, got {kind!r}")
    for f in ("backend", "device_kind", "source", "timestamp"):
        if not isinstance(rec.get(f), str):
            raise ValueError(f"missing or non-string field {f!r}")
    _check_times(rec)
    _KIND_CHECKS[kind](rec)


def _check_times(rec: dict) -> None:
    """``time_s`` (statistics in seconds) and ``samples_s`` of a record."""
    ts = rec.get("time_s")
    if not isinstance(ts, dict):
        raise ValueError("missing field 'time_s' (an object of statistics in seconds)")
    if not any(k in ts for k in _CENTRAL):
        raise ValueError(f"'time_s' needs at least one of {', '.join(_CENTRAL)}")
    for k, v in ts.items():
        if k not in TIME_STATISTICS:
            raise ValueError(f"'time_s' has unknown statistic {k!r}")
        if k == "count":
            if not _is_pos_int(v):
                raise ValueError(f"'time_s.count' must be an integer ≥ 1, got {v!r}")
        elif k == "iqr":
            if not (
                isinstance(v, int | float)
                and not isinstance(v, bool)
                and math.isfinite(v)
                and 0 <= v <= MAX_TIME_S
            ):
                raise ValueError(
                    f"'time_s.iqr' must be finite, ≥ 0 and ≤ {MAX_TIME_S:g} s, got {v!r}"
                )
        elif not _is_time(v):
            raise ValueError(
                f"'time_s.{k}' must be a finite time in [{MIN_TIME_S:g}, {MAX_TIME_S:g}] s, "
                f"got {v!r}"
            )
    samples = rec.get("samples_s")
    if samples is not None:
        if not isinstance(samples, list) or not samples:
            raise ValueError("'samples_s' must be a non-empty list of times in seconds")
        for v in samples:
            if not _is_time(v):
                raise ValueError(
                    f"'samples_s' holds {v!r}; every sample must be a finite time in "
                    f"[{MIN_TIME_S:g}, {MAX_TIME_S:g}] s"
                )


def _check_collective(rec: dict) -> None:
    """The fields of a ``kind: "collective"`` record."""
    name = rec.get("collective")
    if name is None:
        looks_like_step = "architecture" in rec or "workers" in rec
        raise ValueError(
            "a 'collective' record needs the field 'collective' naming one of "
            f"{', '.join(COLLECTIVE_NAMES)}"
            + ("; this one has a training step's fields: its kind is 'step'"
               if looks_like_step else "")
        )  # fmt: skip
    if name not in COLLECTIVE_NAMES:
        raise ValueError(f"unknown collective {name!r}; valid: {', '.join(COLLECTIVE_NAMES)}")
    if not _is_pos_int(rec.get("message_bytes"), 1, MAX_MESSAGE_BYTES):
        raise ValueError(
            f"'message_bytes' must be an integer in [1, 2^50 = {MAX_MESSAGE_BYTES}] B, "
            f"got {_short(rec.get('message_bytes', MISSING))}"
        )
    _check_ranks(rec)
    if not isinstance(rec.get("dtype"), str):
        raise ValueError("missing field 'dtype'")
    if "wrong" in rec and not _is_pos_int(rec["wrong"], 0):
        raise ValueError(f"'wrong' must be an integer ≥ 0, got {rec['wrong']!r}")
    if "ranks_per_machine" in rec:
        m, g = rec["ranks_per_machine"], rec["ranks_per_node"]
        if not (_is_pos_int(m, 1, MAX_RANKS) and m >= g):
            raise ValueError(
                f"'ranks_per_machine' (the job's ranks sharing one machine's cores) must be an "
                f"integer in [ranks_per_node = {g}, 2^24], got {_short(m)}"
            )
    _check_sync(rec)
    if "nodes_at_once" in rec:
        k = rec["nodes_at_once"]
        if not _is_pos_int(k, 2, MAX_RANKS) or rec["num_ranks"] != rec["ranks_per_node"]:
            raise ValueError(
                "'nodes_at_once' (a collective timed within each node, on this many nodes at "
                f"once) must be an integer ≥ 2 on a record of one node (num_ranks = "
                f"ranks_per_node), got {_short(k)} with {rec['num_ranks']} ranks, "
                f"{rec['ranks_per_node']} per node"
            )
    algo = rec.get("algorithm")
    if algo is not None and name != "all_reduce":
        raise ValueError(
            f"'algorithm' is given only for all_reduce ({', '.join(ALL_REDUCE_ALGORITHMS)}); "
            f"{name} has one algorithm: leave the field out (got {_short(algo)})"
        )
    if algo is not None and algo not in ALL_REDUCE_ALGORITHMS:
        raise ValueError(
            f"'algorithm' {_short(algo)} is not an all_reduce algorithm; valid: "
            f"{', '.join(ALL_REDUCE_ALGORITHMS)}"
        )


def collective_algorithm(rec: dict) -> str | None:
    """A collective record's algorithm where it is not its collective's default, else ``None``.

    ``"algorithm"`` (optional, all_reduce only: ``ring``, the default, ``tree``,
    ``hierarchical``) says which all-reduce was timed; ``ddltune collect``
    writes ``hierarchical`` for the three-phase all-reduce of a job over
    several nodes of several ranks each.
    """
    algo = rec.get("algorithm")
    return None if algo in (None, "ring") else str(algo)


def cost_algorithm(rec: dict) -> str | None:
    """The algorithm the cost model times a collective record with, ``None`` for the default.

    The record's own (:func:`collective_algorithm`), else, for a reduce_scatter
    measured on CPU (``backend`` ``"cpu"``: XLA:CPU's gloo ``psum_scatter``, what
    ``ddltune collect`` times there), ``"halving_doubling"``
    (:class:`costmodel.collectives.HalvingDoublingReduceScatter`; gloo runs no
    ring for it). The record's key (:func:`record_key`) is unchanged by it.

    Example:
        >>> cost_algorithm({"collective": "reduce_scatter", "backend": "cpu"})
        'halving_doubling'
        >>> cost_algorithm({"collective": "reduce_scatter", "backend": "gpu"}) is None
        True
    """
    algo = collective_algorithm(rec)
    if algo is None and rec.get("collective") == "reduce_scatter" and rec.get("backend") == "cpu":
        return "halving_doubling"
    return algo


def _check_compute(rec: dict) -> None:
    """The fields of a ``kind: "compute"`` record."""
    if not isinstance(rec.get("op"), str):
        raise ValueError("missing field 'op'")
    flops = rec.get("flops", MISSING)
    if not (_is_pos_finite(flops) and flops <= MAX_FLOPS):
        raise ValueError(f"'flops' must be finite, > 0 and ≤ {MAX_FLOPS:g}, got {_short(flops)}")
    _check_ranks(rec)


def _check_step(rec: dict) -> None:
    """The fields of a ``kind: "step"`` record (a measured training iteration)."""
    arch = rec.get("architecture")
    if arch not in ARCHITECTURE_NAMES:
        raise ValueError(f"unknown architecture {arch!r}; valid: {', '.join(ARCHITECTURE_NAMES)}")
    if not _is_pos_int(rec.get("workers"), 1, MAX_RANKS):
        raise ValueError(
            f"'workers' must be an integer in [1, {MAX_RANKS}], got {_short(rec.get('workers', MISSING))}"
        )
    if not _is_pos_int(rec.get("servers", 0), 0, MAX_RANKS):
        raise ValueError(
            f"'servers' must be an integer in [0, {MAX_RANKS}], got {_short(rec.get('servers', MISSING))}"
        )
    if not _is_pos_int(rec.get("bucket_bytes", 0), 0, MAX_MESSAGE_BYTES):
        raise ValueError(
            f"'bucket_bytes' must be an integer in [0, 2^50] B, "
            f"got {_short(rec.get('bucket_bytes', MISSING))}"
        )
    if not _is_pos_int(rec.get("batch_size"), 1, MAX_BATCH):
        raise ValueError(
            f"'batch_size' must be an integer in [1, 2^31], got {_short(rec.get('batch_size', MISSING))}"
        )
    if not isinstance(rec.get("model"), str):
        raise ValueError("missing field 'model'")
    same = rec.get("same_buckets_at", [])
    if not isinstance(same, list) or not all(_is_pos_int(b, 0, MAX_MESSAGE_BYTES) for b in same):
        raise ValueError(
            f"'same_buckets_at' must be a list of integers in [0, 2^50] B, got {_short(same)}"
        )
    _check_sync(rec)


def _check_sync(rec: dict) -> None:
    """The optional ``sync`` of a step or collective record (see the module doc)."""
    sync = rec.get("sync")
    if sync is not None and not (
        isinstance(sync, dict)
        and _is_pos_int(sync.get("allreduces"), 1, 2**31)
        and _is_pos_int(sync.get("message_bytes"), 1, MAX_MESSAGE_BYTES)
        and _is_pos_int(sync.get("num_ranks"), 1, MAX_RANKS)
        and _is_pos_int(sync.get("ranks_per_node", 1), 1, MAX_RANKS)
    ):
        raise ValueError(
            '\'sync\' must be {"allreduces": int ≥ 1, "message_bytes": int ≥ 1, '
            f'"num_ranks": int ≥ 1, "ranks_per_node": int ≥ 1}}, got {_short(sync)}'
        )


#: What ddltune calls a recommendation file given where another kind of file belongs.
RECOMMENDATION_WORDS = "a recommendation ('ddltune run' writes it, as 'recommend --json' prints it)"


def is_recommendation(doc) -> bool:
    """Whether a JSON document is a recommendation (``recommendation.json``, ``recommend --json``):
    an object with ``iteration_time_s`` and ``architecture``."""
    return isinstance(doc, dict) and "iteration_time_s" in doc and "architecture" in doc


class _Missing:
    """The value of a field the record lacks (``rec.get(key, MISSING)``)."""

    def __repr__(self) -> str:
        return "nothing (the field is missing)"


MISSING = _Missing()


def _short(v) -> str:
    """``repr(v)`` cut to 40 characters (a 10^308 integer has 309 digits); a missing field reads
    "nothing (the field is missing)", a JSON ``null`` reads null (not Python's None), and
    true/false, lists and objects read as JSON (``[true]``, not ``[True]``)."""
    r = "null" if v is None else repr(v)
    if isinstance(v, bool | list | dict):  # as the file spells it: true, [1, true], {"a": 1}
        with contextlib.suppress(TypeError, ValueError):
            r = json.dumps(v)
    return r if len(r) <= 40 else f"{r[:20]}…({len(r)} characters)"


_KIND_CHECKS = {"collective": _check_collective, "compute": _check_compute, "step": _check_step}
assert tuple(_KIND_CHECKS) == KINDS


def _check_ranks(rec: dict) -> None:
    n, g = rec.get("num_ranks", MISSING), rec.get("ranks_per_node", MISSING)
    if not _is_pos_int(n, 1, MAX_RANKS):
        raise ValueError(f"'num_ranks' must be an integer in [1, 2^24], got {_short(n)}")
    if not _is_pos_int(g, 1, MAX_RANKS):
        raise ValueError(f"'ranks_per_node' must be an integer in [1, 2^24], got {_short(g)}")
    if g > n:
        raise ValueError(f"'ranks_per_node' ({g}) cannot exceed 'num_ranks' ({n})")
    if "num_hosts" in rec:
        # g ranks on the busiest host: at least ⌈n/g⌉ hosts, at most n − g + 1
        h, lo, hi = rec["num_hosts"], -(-n // g), n - g + 1
        if not (_is_pos_int(h, 1, MAX_RANKS) and lo <= h <= hi):
            raise ValueError(
                f"'num_hosts' must be an integer in [{lo}, {hi}] for {n} ranks with at most {g} "
                f"per host, got {_short(h)}"
            )


def iter_records(path: str | os.PathLike) -> Iterator[tuple[int, dict]]:
    """Yield ``(line_number, record)`` for every valid line of a JSON Lines file.

    Blank lines are skipped. A final line without a newline that does not parse
    (a write cut short by a crash) is reported like any other bad line.

    Limits, checked while streaming (so a large junk file fails at once, not
    after being read whole): the first non-blank character must be ``{``
    (checked on the first 4 KiB), a line is at most :data:`MAX_LINE_BYTES`
    bytes of UTF-8, a record nests at most :data:`MAX_JSON_DEPTH` levels, and
    its numbers lie within the physical bounds of :func:`validate_record`.

    Raises:
        FileNotFoundError: if the file does not exist.
        InputFileError: naming the file and line of the first malformed,
            truncated, oversized or invalid record.
    """
    path = Path(path)
    with open(path, "rb") as fh:
        _precheck(fh, path)
        lineno = 0
        while True:
            raw = fh.readline(MAX_LINE_BYTES + 1)
            if not raw:
                break
            lineno += 1
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                raise InputFileError(
                    str(path),
                    lineno,
                    f"line longer than {MAX_LINE_BYTES // 1024**2} MiB; a measurement record "
                    "is one short JSON object per line (is this a measurement file?)",
                )
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise InputFileError(
                    str(path), lineno, f"not UTF-8 text (byte {e.start + 1} of the line)"
                ) from None
            if not line.strip():
                continue
            yield lineno, parse_record_line(line, str(path), lineno)


def _precheck(fh, path: Path) -> None:
    """Refuse a file that cannot be JSON Lines from its first 4 KiB (then rewind)."""
    head = fh.read(4096)
    fh.seek(0)
    stripped = head.lstrip(b" \t\r\n\xef\xbb\xbf")
    if b"\0" in head:
        raise InputFileError(str(path), 1, "binary data (a NUL byte in the first 4 KiB)")
    if b'"kind": "ddltune-profile"' in head or b'"kind":"ddltune-profile"' in head:
        raise InputFileError(
            str(path),
            None,
            "this is a ddltune profile (the output of 'ddltune calibrate'), not measurements: "
            "give it as --profile to recommend, predict or report; calibrate reads the "
            "JSON Lines records that 'ddltune collect' or 'ddltune import-nccl-tests' write",
        )
    if stripped.split(b"\n", 1)[0].strip() == b"{":  # a record's line is the whole record
        what = (
            RECOMMENDATION_WORDS
            if b'"iteration_time_s"' in head  # is_recommendation, from the head alone
            else "one JSON document over several lines"
        )
        raise InputFileError(
            str(path),
            None,
            f"this is {what}, not JSON Lines measurement records (one record per line, as "
            "'ddltune collect' and 'ddltune import-nccl-tests' write them)",
        )
    if stripped and not stripped.startswith(b"{"):
        line = head[: head.find(stripped[:1])].count(b"\n") + 1
        first = stripped.splitlines()[0][:20].decode("utf-8", "replace")  # that line only
        raise InputFileError(
            str(path),
            line,
            f"not a JSON Lines measurement file: a record starts with '{{', this line with "
            f"{first!r}",
        )


def parse_record_line(line: str, path: str, lineno: int) -> dict:
    """Decode and validate one JSON Lines record.

    Args:
        line: the text of the line (with or without its newline).
        path, lineno: where it came from, for the error.

    Returns:
        The validated record.

    Raises:
        InputFileError: ``path:lineno`` and what is wrong (not JSON, nested
            deeper than :data:`MAX_JSON_DEPTH`, out of the physical bounds).
    """
    text = line.rstrip("\r\n")  # a column past the newline read "column 1" (of the next line)
    try:
        rec = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as e:
        hint = (
            ""
            if line.endswith("\n")
            else " (the line is truncated: was the run cut short? The lines before it are "
            "whole: delete this one, or rerun 'ddltune collect' with --resume, which drops it)"
        )
        if not hint and not text.rstrip().endswith("}"):  # a record line ends with }
            hint = " (the line ends before its record does: it was cut short)"
        raise InputFileError(
            path, lineno, f"not valid JSON: {e.msg} (column {e.colno}){hint}"
        ) from None
    except RecursionError:
        raise InputFileError(
            path, lineno, f"JSON nested deeper than {MAX_JSON_DEPTH} levels"
        ) from None
    except ValueError as e:  # parse_constant, or an integer of over 4300 digits
        raise InputFileError(path, lineno, str(e)) from None
    if not json_depth_ok(rec):
        raise InputFileError(path, lineno, f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        validate_record(rec)
    except ValueError as e:
        raise InputFileError(path, lineno, str(e)) from None
    return rec


def _reject_constant(name: str):
    raise ValueError(f"{name} is not a valid time; times must be finite numbers > 0 s")


def read_records(paths: str | os.PathLike | Iterable[str | os.PathLike]) -> list[dict]:
    """Read and validate every record of one or more JSON Lines files.

    Args:
        paths: one path or several.

    Returns:
        The records in file order; each gains ``"_file"`` and ``"_line"`` keys
        (where it came from), which writers drop. Records that are exactly
        equal (the same file given twice, or imported twice) are all kept and
        one :class:`DuplicateRecordWarning` names the first repeat.

    Raises:
        FileNotFoundError, InputFileError: see :func:`iter_records`; also if a
            file holds no record at all.
    """
    if isinstance(paths, str | os.PathLike):
        paths = [paths]
    out = []
    seen: dict[str, tuple[str, int]] = {}
    repeats = []
    for p in paths:
        n0 = len(out)
        for lineno, rec in iter_records(p):
            digest = hashlib.sha256(json.dumps(rec, sort_keys=True).encode()).hexdigest()
            if digest in seen:
                repeats.append((str(p), lineno, *seen[digest]))
            else:
                seen[digest] = (str(p), lineno)
            rec["_file"] = str(p)
            rec["_line"] = lineno
            out.append(rec)
        if len(out) == n0:
            raise InputFileError(str(p), None, "holds no measurement records")
    if repeats:
        f, line, f0, line0 = repeats[0]
        more = f" (and {len(repeats) - 1} more)" if len(repeats) > 1 else ""
        warnings.warn(
            f"{f}:{line} repeats {f0}:{line0} exactly{more}: the same measurement read twice "
            "(a file given or imported twice?) counts twice in the fit",
            DuplicateRecordWarning,
            stacklevel=2,
        )
    return out


def record_key(rec: dict) -> tuple:
    """The identity of a measured point, used by ``--resume`` to skip it.

    Two records with the same key measured the same thing with the same settings.
    """
    kind = rec["kind"]
    if kind == "collective":
        algo = collective_algorithm(rec)  # the default's keys as before the field
        return (
            kind,
            rec["collective"],
            rec["message_bytes"],
            rec["num_ranks"],
            rec["ranks_per_node"],
            rec.get("dtype"),
        ) + ((algo,) if algo else ())
    if kind == "compute":
        return (
            kind,
            rec["op"],
            json.dumps(rec.get("shape"), sort_keys=True),
            rec["num_ranks"],
            rec["ranks_per_node"],
            rec.get("dtype"),
        )
    return (
        kind,
        rec["architecture"],
        rec.get("servers", 0),
        bool(rec.get("colocated", False)),
        rec["workers"],
        rec.get("ranks_per_node", 1),
        rec.get("bucket_bytes", 0),
        rec["model"],
        rec["batch_size"],
        rec.get("p2p_exchange"),  # all_to_all or reduce-scatter runs of p2p differ
    )


#: The provenance fields that say where a record was measured; ``--resume``
#: continues only a file measured where it runs (see :func:`record_origin`).
ORIGIN_FIELDS = ("backend", "device_kind", "host_fingerprint", "emulated")


def record_origin(rec: dict) -> tuple:
    """Where a record was measured: ``(backend, device_kind, host_fingerprint, emulated)``.

    ``emulated`` is the emulated cluster's shape (nodes, ranks per node, NIC
    rate in bit/s) as a tuple, or ``None`` for a real machine; the self-check
    goodput, which varies run to run, is left out.

    Together with :func:`record_key` this is the identity ``--resume`` uses: a
    point counts as measured only if a record with the same key was measured
    with the same origin.
    """
    emu = rec.get("emulated")
    if isinstance(emu, dict):
        emu = (emu.get("nodes"), emu.get("ranks_per_node"), emu.get("rate_bits_per_s"))
    return (rec.get("backend"), rec.get("device_kind"), rec.get("host_fingerprint"), emu)


def emulated_spec(emulated) -> str | None:
    """A record's ``emulated`` field as the ``--emulate`` spec that made it (``"2x1@100mbit"``).

    Returns ``None`` when the field is absent or lacks ``nodes``,
    ``ranks_per_node`` or ``rate_bits_per_s`` (a real machine's record).
    """
    if not isinstance(emulated, dict):
        return None
    try:
        nodes, per, rate = (emulated[k] for k in ("nodes", "ranks_per_node", "rate_bits_per_s"))
        return f"{nodes}x{per}@{float(rate) / 1e6:g}mbit"
    except (KeyError, TypeError, ValueError):
        return None


def describe_origin(origin: tuple) -> str:
    """``origin`` (from :func:`record_origin`) in words, for messages."""
    backend, device, host, emu = origin
    where = f"backend {backend}, device {device!r}, host {host}"
    if emu is not None:
        where += f", emulated cluster {emu[0]} nodes × {emu[1]} ranks at {emu[2]:g} bit/s"
    return where


class RecordWriter:
    """Append-only JSON Lines writer: one validated record per line, flushed.

    A crash loses at most the record being written. An existing file is never
    rewritten in place, and never emptied before a new record exists.

    ``"overwrite"``: records go to a temporary sibling file
    (``.<name>.<random>.tmp``); the first record, once fsynced, is renamed over
    ``path`` and later records are appended to it (same file, so each is on
    disk as soon as it is written and ``--resume`` can continue an interrupted
    run). A run interrupted before its first record (or one that writes none)
    leaves the previous file byte-identical and removes the temporary file; in the
    other modes a file the writer created and wrote nothing to is removed on close.

    ``"resume"``: appends to ``path`` with flush + fsync per record; the file's
    records must come from this machine (host fingerprint, and the emulated
    cluster shape ``emulated`` when given) — a file from elsewhere is refused,
    the message naming its backend, device and host; the first record written
    must also match the file's backend and device kind.

    Symbolic links are refused (dangling or not): ddltune does not write
    through a link to a place the user may not have meant.

    Args:
        path: output file.
        mode: ``"new"`` (refuse an existing non-empty file), ``"resume"``
            (append; :attr:`existing_keys` holds the points already there) or
            ``"overwrite"`` (replace the file, see above).
        emulated: the provenance of the emulated cluster this run measures on
            (``EmulatedCluster.provenance()``), or ``None`` for a real machine;
            only used by ``"resume"``.

    Raises:
        FileExistsError: in ``"new"`` mode when the file exists and is not
            empty; the message suggests ``--resume`` or ``--overwrite``.
        OutputPathError: ``path`` is a symbolic link.
        InputFileError: in ``"resume"`` mode when the existing file is
            malformed or was measured on another machine (file:line named).
        ValueError: on an unknown mode, or (from :meth:`write`) an invalid
            record or, on resume, one from another backend/device than the file.
    """

    def __init__(self, path: str | os.PathLike, mode: str = "new", *, emulated=None):

        if mode not in ("new", "resume", "overwrite"):
            raise ValueError(f"mode must be 'new', 'resume' or 'overwrite', got {mode!r}")
        self.path = check_output_file(path, what="the measurement file")
        self.mode = mode
        self.existing_keys: set[tuple] = set()
        self._origin: tuple | None = None  # the resumed file's origin
        self._origin_line = None
        exists = self.path.exists() and self.path.stat().st_size > 0
        if exists and mode == "new":
            raise FileExistsError(
                f"{self.path} already exists; pass --resume to add the missing points to it "
                "or --overwrite to replace it"
            )
        if exists and mode == "resume":
            self._repair_tail()
            here = {host_fingerprint(), _legacy_host_fingerprint()}
            emu_here = record_origin({"emulated": emulated})[3]
            for lineno, rec in iter_records(self.path):
                origin = record_origin(rec)
                if origin[2] not in here or origin[3] != emu_here:
                    now = "this machine" + (
                        "" if emu_here is None else f" (emulated {emu_here[0]}×{emu_here[1]})"
                    )
                    raise InputFileError(
                        str(self.path),
                        lineno,
                        f"measured elsewhere ({describe_origin(origin)}), not on {now} "
                        f"(host {host_fingerprint()}); --resume continues a file measured "
                        "here: write a new file (-o) or --overwrite",
                    )
                if self._origin is None:
                    self._origin, self._origin_line = origin, lineno
                self.existing_keys.add(record_key(rec))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._tmp: Path | None = None
        # a file this writer creates and never writes a record to is removed on close: a
        # collect interrupted before its first point was complete left an empty
        # measurements.jsonl (a new user's trial)
        self._created = mode != "overwrite" and not self.path.exists()
        self.written = 0
        if mode == "overwrite":
            fd, tmp = tempfile.mkstemp(
                prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent
            )
            os.fchmod(fd, 0o666 & ~_umask())
            self._tmp = Path(tmp)
            self._fh = os.fdopen(fd, "w", encoding="utf-8")
        else:
            self._fh = open(self.path, "a", encoding="utf-8")

    def _repair_tail(self) -> None:
        # A run killed mid-write can leave a last line without newline; drop it
        # so that appending does not glue a new record onto it.
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):
            cut = data.rfind(b"\n") + 1
            line = data[:cut].count(b"\n") + 1
            with open(self.path, "r+b") as fh:
                fh.truncate(cut)
            warnings.warn(
                f"{self.path}:{line}: dropped a truncated last line ({len(data) - cut} bytes, "
                "left by a run cut short while writing); that point is measured again",
                RecordRepairWarning,
                stacklevel=3,
            )

    def write(self, rec: dict) -> None:
        """Validate ``rec`` and append it as one line; flush and fsync.

        In ``"overwrite"`` mode the first record's file replaces ``path`` (rename).

        Raises:
            ValueError: ``rec`` is invalid, or (resume) measured on another
                backend or device than the file being continued.
        """
        rec = {k: v for k, v in rec.items() if not k.startswith("_")}
        validate_record(rec)
        if self._origin is not None:
            mine, theirs = record_origin(rec)[:2], self._origin[:2]
            if mine != theirs:
                raise ValueError(
                    f"{self.path}:{self._origin_line} was measured with backend {theirs[0]}, "
                    f"device {theirs[1]!r}; this run measures backend {mine[0]}, device "
                    f"{mine[1]!r}: --resume continues a file from the same device; write a new "
                    "file (-o) or --overwrite"
                )
            self._origin = None  # checked once: the rest of the run is on the same device
        self._fh.write(json.dumps(rec, allow_nan=False) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())
        if self._tmp is not None:  # the first new record exists: now replace the old file
            os.replace(self._tmp, self.path)
            self._tmp = None
            _fsync_dir(self.path.parent)
        self.written += 1
        self.existing_keys.add(record_key(rec))

    def close(self) -> None:
        """Close the file; in ``"overwrite"`` mode with no record written, keep the old one;
        a file this writer created and wrote no record to is removed (nothing half-made
        stays behind an interrupted run)."""
        if not self._fh.closed:
            self._fh.close()
        if self._created and not self.written:
            with contextlib.suppress(FileNotFoundError):
                if self.path.stat().st_size == 0:
                    self.path.unlink()
            self._created = False
        if self._tmp is not None:
            with contextlib.suppress(FileNotFoundError):
                self._tmp.unlink()
            self._tmp = None

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def atomic_write_text(path: str | os.PathLike, text: str, *, overwrite: bool = True) -> Path:
    """Write ``text`` to ``path`` atomically (temporary file + rename).

    A reader sees the old content or the new, never half a file.

    The output must be a regular file or a new name
    (:func:`calibration.check_output_file`: links, device nodes and FIFOs are
    refused, whatever ``overwrite`` says).

    Raises:
        FileExistsError: if the file exists and ``overwrite`` is false.
        OutputPathError: a link or a special file; or the disk is full or
            read-only (the message names ``path``; an old file is unchanged).
    """
    path = check_output_file(path, overwrite=overwrite)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as e:
        raise OutputPathError(path, f"could not be written ({e.strerror})") from None
    try:
        # mkstemp makes the file private (0600); give it the mode a plain open()
        # would (0666 less the umask), so that a shared report stays readable.
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(e, OSError) and not isinstance(e, InputFileError):
            raise OutputPathError(
                path, f"could not be written ({e.strerror or e}); an old file there is unchanged"
            ) from e
        raise
    return path


class DuplicateRecordWarning(UserWarning):
    """:func:`read_records` read the same record (every field equal) more than once."""


class RecordRepairWarning(UserWarning):
    """A measurement file was repaired on ``--resume`` (a truncated last line dropped)."""


def _umask() -> int:
    """The process's umask (read by setting and restoring it)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def host_fingerprint() -> str:
    """A short hash of the host name with a per-machine random salt (16 hex digits).

    The salt (32 random bytes, made once) is kept in
    ``$XDG_CACHE_HOME/ddltune/host-salt`` (default ``~/.cache/ddltune``), so the
    fingerprint tells this machine's records from others' but cannot be guessed
    back from a list of host names. Where that folder cannot be written, the
    fixed-salt hash of earlier versions is used (:func:`_legacy_host_fingerprint`).
    """
    salt = _host_salt()
    if salt is None:
        return _legacy_host_fingerprint()
    return hashlib.sha256(salt + socket.gethostname().encode()).hexdigest()[:16]


def _legacy_host_fingerprint() -> str:
    """The fixed-salt fingerprint of ddltune before the per-machine salt (still this host's)."""
    return hashlib.sha256(("ddltune:" + socket.gethostname()).encode()).hexdigest()[:16]


def _host_salt() -> bytes | None:
    """This machine's random salt, created on first use; ``None`` if it cannot be stored."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    path = Path(base) / "ddltune" / "host-salt"
    try:
        data = path.read_bytes()
        if len(data) >= 16:
            return data
    except OSError:
        pass
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(os.urandom(32))
    except FileExistsError:
        pass  # another process made it first
    except OSError:
        return None
    try:
        data = path.read_bytes()
    except OSError:
        return None
    return data if len(data) >= 16 else None


def time_statistics(samples_s) -> dict:
    """Statistics of raw sample times (seconds): min, p10, median, mean, p90, IQR, max, count.

    Raises:
        ValueError: if there is no sample, or a sample is not finite and > 0.

    Example:
        >>> time_statistics([1.0, 2.0, 3.0])["median"]
        2.0
    """
    import numpy as np

    x = np.asarray(list(samples_s), dtype=float)
    if x.size == 0:
        raise ValueError("no samples")
    if not np.all(np.isfinite(x)) or np.any(x <= 0):
        raise ValueError("every sample must be a finite time > 0 s")
    q10, q25, q50, q75, q90 = np.quantile(x, [0.1, 0.25, 0.5, 0.75, 0.9])
    return {
        "min": float(x.min()),
        "p10": float(q10),
        "median": float(q50),
        "mean": float(x.mean()),
        "p90": float(q90),
        "iqr": float(q75 - q25),
        "max": float(x.max()),
        "count": int(x.size),
    }


def provenance(source: str, *, backend: str | None = None, device_kind: str | None = None) -> dict:
    """Provenance fields of a record measured here: backend, device, versions, host, time.

    Args:
        source: what produced the record (``"ddltune collect"``, a file path).
        backend, device_kind: override what jax reports (e.g. for imports).
    """
    versions = package_versions(("jax", "jaxlib", "ddltune"))
    if backend is None or device_kind is None:
        import jax

        dev = jax.devices()[0]
        backend = backend or dev.platform
        device_kind = device_kind or dev.device_kind
    return {
        "backend": backend,
        "device_kind": device_kind,
        "versions": versions,
        "host_fingerprint": host_fingerprint(),
        "timestamp": utc_timestamp(),
        "source": source,
    }


#: Packages whose versions a calibration profile records.
PROFILE_PACKAGES = ("ddltune", "jax", "jaxlib", "optax", "equinox", "numpy", "scipy")


def package_versions(packages=PROFILE_PACKAGES) -> dict:
    """``{"python": …, package: version}`` for the installed ones among ``packages``.

    Example:
        >>> sorted(package_versions(("numpy",)))
        ['numpy', 'python']
    """
    out = {"python": platform.python_version()}
    for mod in packages:
        try:
            out[mod] = version(mod)
        except PackageNotFoundError:
            pass
    return out


def utc_timestamp() -> str:
    """The current time as ISO 8601 UTC to the second (``2026-01-01T00:00:00Z``)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def file_entry(path: Path) -> dict:
    """``{"path", "sha256"}`` of an input file, for provenance.

    Raises:
        OSError: if the file cannot be read.
    """
    return {"path": str(path), "sha256": hashlib.sha256(Path(path).read_bytes()).hexdigest()}


def compute_contention(rec: dict) -> float:
    """How many times emulated nodes sharing a worker's CPU slow its compute and the cores'
    part of its communication (≥ 1).

    An emulated cluster (``launch.EmulatedCluster``) with more nodes than the
    machine has CPUs pins node i to CPU i mod C (``node_cpus``), so the nodes
    of a job share cores that separate hosts would not: the P processes of a
    step record fill ⌈P / R⌉ nodes (R ranks per node, block placement), the
    busiest CPU runs ⌈⌈P / R⌉ / C⌉ of them, and a synchronous step waits for
    the slowest worker. The single-worker baseline ran alone (1). Ranks
    within one node are the cost model's (``ClusterParams.core_share``).

    Measured on the emulated 4 × 1 cluster of a 2-CPU machine (issue 22): the
    CNN's compute (5.6 ms alone) made 3- and 4-worker steps 45–52% slower
    than predicted without this, about half of it this.

    Args:
        rec: a step or collective record; its ``emulated`` provenance
            (``nodes``, ``ranks_per_node``, ``nodes_per_cpu``, and ``cpus``, the
            machine's usable CPUs, where recorded; else ⌈nodes / nodes_per_cpu⌉)
            and ``processes`` (default ``workers``, or a collective's
            ``num_ranks``). A collective's latency, reductions and call overhead
            wait on the busiest CPU as a step does (calibration fits them under
            this factor, ``costmodel.collectives.evaluate``'s ``contention``).

    Returns:
        1.0 for a record of real hosts or of an emulated cluster whose nodes
        have CPUs of their own; else the factor above.

    Raises:
        ValueError: naming the field, where ``emulated`` is not an object or
            one of the fields above is not a whole number ≥ 1.
    """
    emu = rec.get("emulated")
    if emu is None:
        return 1.0
    if not isinstance(emu, dict):
        raise ValueError(f"emulated: expected the emulated cluster's object, got {emu!r}")

    def whole(where: dict, key: str, default, name: str) -> int:
        v = where.get(key, default)
        if isinstance(v, bool) or not isinstance(v, int | float) or v != v or v < 1 or v != int(v):
            raise ValueError(f"{name}: expected a whole number ≥ 1, got {v!r}")
        return int(v)

    nodes = whole(emu, "nodes", None, "emulated.nodes")
    per_node = whole(emu, "ranks_per_node", 1, "emulated.ranks_per_node")
    npc = whole(emu, "nodes_per_cpu", 1, "emulated.nodes_per_cpu")  # older records: unknown
    cpus = whole(emu, "cpus", -(-nodes // npc), "emulated.cpus")
    procs = whole(rec, "processes", rec.get("workers", rec.get("num_ranks")), "processes")
    if npc <= 1:
        return 1.0
    used = min(-(-procs // per_node), nodes)
    return float(max(-(-used // cpus), 1))


def core_sharing(rec: dict) -> tuple[int, float]:
    """How a collective record's ranks share cores, as calibration fits it.

    Returns ``(share_ranks, contention)`` for :func:`costmodel.collective_batch`:
    the ranks sharing one node's cores (``min(ranks_per_node, num_ranks)``; or,
    for ranks of several hosts on one machine that is not an emulated cluster,
    the record's ``ranks_per_machine``) and the contention of emulated nodes
    that share the machine's CPUs (:func:`compute_contention`; 1 elsewhere).

    Raises:
        ValueError: a malformed ``emulated`` provenance (:func:`compute_contention`).
    """
    n, g = int(rec["num_ranks"]), int(rec["ranks_per_node"])
    if rec.get("emulated") is not None:
        return min(g, n), compute_contention(rec)
    return int(rec.get("ranks_per_machine", min(g, n))), 1.0


def sync_batch(syncs, share_ranks=None, contention=None):
    """The small all-reduces N records declare (``"sync"``), as rows for the model.

    A record's ``sync`` (a training step's, or a collector's swap pattern's:
    :func:`launch.start_together` inside the timed program) says how many
    all-reduces ran, of how many bytes, over how many ranks; their cost is
    the model's own all-reduce (ring, :func:`costmodel.collective_batch_time`),
    with the record's core sharing, and a prediction of the record adds
    ``counts × time``. Batched rows for the fit's objective and the report's
    fit figure; a step prediction costs the same all-reduce directly
    (``calibration.sync_time``, numpy without building a batch).

    Args:
        syncs: N entries, each a record's ``sync`` dict or None.
        share_ranks, contention: None or N values as :func:`core_sharing`
            gives them per record (default: a node's ranks have its cores, 1).

    Returns:
        ``(batch, counts)``: a :class:`costmodel.CollectiveBatch` of N
        all_reduce rows (4 bytes on 2 ranks where a record declares none) and
        the (N,) all-reduce count of each record (0 where none).

    Example:
        >>> from costmodel import ClusterParams, collective_batch_time, collective_time
        >>> p = ClusterParams.create()
        >>> s = {"allreduces": 2, "message_bytes": 64, "num_ranks": 2, "ranks_per_node": 1}
        >>> b, c = sync_batch([s, None])
        >>> t = c * collective_batch_time(p, b)
        >>> bool(abs(t[0] - 2 * collective_time(p, "all_reduce", 64, 2, 1)) < 1e-12), float(t[1])
        (True, 0.0)
    """
    import numpy as np

    from costmodel import collective_batch

    syncs = list(syncs)
    # a record without: a real all-reduce (4 bytes on 2 ranks) counted 0 times. On one
    # rank the model's time is exactly 0, and its gradient NaN in float32, which
    # 0 × NaN keeps: the fit stopped before its first step (calibration's default dtype)
    n = np.array([2.0 if s is None else float(s["num_ranks"]) for s in syncs])
    g = np.array([1.0 if s is None else float(s.get("ranks_per_node", 1)) for s in syncs])
    g = np.minimum(g, n)
    share = g if share_ranks is None else np.maximum(np.asarray(share_ranks, float), g)
    share = np.where([s is None for s in syncs], g, share) if syncs else share
    batch = collective_batch(
        ["all_reduce"] * len(syncs),
        [4.0 if s is None else float(s["message_bytes"]) for s in syncs],
        n,
        g,
        share_ranks=share,
        contention=None if contention is None else np.asarray(contention, float),
    )
    counts = np.array([0.0 if s is None else float(s["allreduces"]) for s in syncs])
    return batch, counts
