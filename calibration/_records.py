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
    ``in_place`` (bool, optional).

``kind: "compute"``:
    ``op`` (str, e.g. ``"matmul"``, ``"forward"``, ``"backward"``); ``flops``
    (float > 0, floating-point operations of one timed call; a multiply-add
    counts 2); ``num_ranks`` (processes running it at once on the node, ≥ 1);
    ``ranks_per_node`` (≥ 1); ``dtype``; ``shape`` (object, optional).

``kind: "step"``:
    ``architecture`` (``ps``, ``ps_host``, ``hybrid``, ``p2p``, ``ring``,
    ``tree``, ``hierarchical``); ``servers`` (int ≥ 0); ``colocated`` (bool);
    ``workers`` (int ≥ 1); ``ranks_per_node`` (int ≥ 1); ``bucket_bytes``
    (int ≥ 0); ``model`` (str); ``batch_size`` (int ≥ 1, per worker).
"""

from __future__ import annotations

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

from costmodel import ARCHITECTURE_NAMES, COLLECTIVE_NAMES, InputFileError

__all__ = [
    "SCHEMA_VERSION",
    "KINDS",
    "TIME_STATISTICS",
    "validate_record",
    "read_records",
    "iter_records",
    "record_key",
    "RecordWriter",
    "atomic_write_text",
    "provenance",
    "host_fingerprint",
    "time_statistics",
]

SCHEMA_VERSION = 1
KINDS = ("collective", "compute", "step")
TIME_STATISTICS = ("min", "p10", "median", "mean", "p90", "iqr", "max", "count")
_CENTRAL = ("min", "p10", "median", "mean")


def _is_pos_int(v, minimum: int = 1) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= minimum


def _is_pos_finite(v) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v > 0


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
            if not (isinstance(v, int | float) and math.isfinite(v) and v >= 0):
                raise ValueError(f"'time_s.iqr' must be finite and ≥ 0, got {v!r}")
        elif not _is_pos_finite(v):
            raise ValueError(f"'time_s.{k}' must be a finite time > 0 s, got {v!r}")
    samples = rec.get("samples_s")
    if samples is not None:
        if not isinstance(samples, list) or not samples:
            raise ValueError("'samples_s' must be a non-empty list of times in seconds")
        for v in samples:
            if not _is_pos_finite(v):
                raise ValueError(f"'samples_s' holds {v!r}; every sample must be finite and > 0 s")


def _check_collective(rec: dict) -> None:
    """The fields of a ``kind: "collective"`` record."""
    name = rec.get("collective")
    if name not in COLLECTIVE_NAMES:
        raise ValueError(f"unknown collective {name!r}; valid: {', '.join(COLLECTIVE_NAMES)}")
    if not _is_pos_int(rec.get("message_bytes")):
        raise ValueError(
            f"'message_bytes' must be an integer > 0, got {rec.get('message_bytes')!r}"
        )
    _check_ranks(rec)
    if not isinstance(rec.get("dtype"), str):
        raise ValueError("missing field 'dtype'")
    if "wrong" in rec and not _is_pos_int(rec["wrong"], 0):
        raise ValueError(f"'wrong' must be an integer ≥ 0, got {rec['wrong']!r}")


def _check_compute(rec: dict) -> None:
    """The fields of a ``kind: "compute"`` record."""
    if not isinstance(rec.get("op"), str):
        raise ValueError("missing field 'op'")
    if not _is_pos_finite(rec.get("flops")):
        raise ValueError(f"'flops' must be finite and > 0, got {rec.get('flops')!r}")
    _check_ranks(rec)


def _check_step(rec: dict) -> None:
    """The fields of a ``kind: "step"`` record (a measured training iteration)."""
    arch = rec.get("architecture")
    if arch not in ARCHITECTURE_NAMES:
        raise ValueError(f"unknown architecture {arch!r}; valid: {', '.join(ARCHITECTURE_NAMES)}")
    if not _is_pos_int(rec.get("workers")):
        raise ValueError(f"'workers' must be an integer ≥ 1, got {rec.get('workers')!r}")
    if not _is_pos_int(rec.get("servers", 0), 0):
        raise ValueError(f"'servers' must be an integer ≥ 0, got {rec.get('servers')!r}")
    if not _is_pos_int(rec.get("bucket_bytes", 0), 0):
        raise ValueError(f"'bucket_bytes' must be an integer ≥ 0, got {rec.get('bucket_bytes')!r}")
    if not _is_pos_int(rec.get("batch_size")):
        raise ValueError(f"'batch_size' must be an integer ≥ 1, got {rec.get('batch_size')!r}")
    if not isinstance(rec.get("model"), str):
        raise ValueError("missing field 'model'")


_KIND_CHECKS = {"collective": _check_collective, "compute": _check_compute, "step": _check_step}
assert tuple(_KIND_CHECKS) == KINDS


def _check_ranks(rec: dict) -> None:
    n, g = rec.get("num_ranks"), rec.get("ranks_per_node")
    if not _is_pos_int(n):
        raise ValueError(f"'num_ranks' must be an integer ≥ 1, got {n!r}")
    if not _is_pos_int(g):
        raise ValueError(f"'ranks_per_node' must be an integer ≥ 1, got {g!r}")
    if g > n:
        raise ValueError(f"'ranks_per_node' ({g}) cannot exceed 'num_ranks' ({n})")


def iter_records(path: str | os.PathLike) -> Iterator[tuple[int, dict]]:
    """Yield ``(line_number, record)`` for every valid line of a JSON Lines file.

    Blank lines are skipped. A final line without a newline that does not parse
    (a write cut short by a crash) is reported like any other bad line.

    Raises:
        FileNotFoundError: if the file does not exist.
        InputFileError: naming the file and line of the first malformed,
            truncated or invalid record.
    """
    path = Path(path)
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line, parse_constant=_reject_constant)
            except json.JSONDecodeError as e:
                hint = (
                    ""
                    if line.endswith("\n")
                    else " (the line is truncated: was the run cut short?)"
                )
                raise InputFileError(str(path), lineno, f"not valid JSON: {e.msg}{hint}") from None
            except ValueError as e:
                raise InputFileError(str(path), lineno, str(e)) from None
            try:
                validate_record(rec)
            except ValueError as e:
                raise InputFileError(str(path), lineno, str(e)) from None
            yield lineno, rec


def _reject_constant(name: str):
    raise ValueError(f"{name} is not a valid time; times must be finite numbers > 0 s")


def read_records(paths: str | os.PathLike | Iterable[str | os.PathLike]) -> list[dict]:
    """Read and validate every record of one or more JSON Lines files.

    Args:
        paths: one path or several.

    Returns:
        The records in file order; each gains ``"_file"`` and ``"_line"`` keys
        (where it came from), which writers drop.

    Raises:
        FileNotFoundError, InputFileError: see :func:`iter_records`; also if a
            file holds no record at all.
    """
    if isinstance(paths, str | os.PathLike):
        paths = [paths]
    out = []
    for p in paths:
        n0 = len(out)
        for lineno, rec in iter_records(p):
            rec["_file"] = str(p)
            rec["_line"] = lineno
            out.append(rec)
        if len(out) == n0:
            raise InputFileError(str(p), None, "holds no measurement records")
    return out


def record_key(rec: dict) -> tuple:
    """The identity of a measured point, used by ``--resume`` to skip it.

    Two records with the same key measured the same thing with the same settings.
    """
    kind = rec["kind"]
    if kind == "collective":
        return (
            kind,
            rec["collective"],
            rec["message_bytes"],
            rec["num_ranks"],
            rec["ranks_per_node"],
            rec.get("dtype"),
        )
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


class RecordWriter:
    """Append-only JSON Lines writer: one validated record per line, flushed.

    A crash loses at most the record being written. An existing file is never
    rewritten in place unless the caller asked for it.

    Args:
        path: output file.
        mode: ``"new"`` (refuse an existing non-empty file), ``"resume"``
            (append; :attr:`existing_keys` holds the points already there) or
            ``"overwrite"`` (start the file afresh).

    Raises:
        FileExistsError: in ``"new"`` mode when the file exists and is not
            empty; the message suggests ``--resume`` or ``--overwrite``.
        InputFileError: in ``"resume"`` mode when the existing file is malformed.
        ValueError: on an unknown mode, or (from :meth:`write`) an invalid record.
    """

    def __init__(self, path: str | os.PathLike, mode: str = "new"):
        if mode not in ("new", "resume", "overwrite"):
            raise ValueError(f"mode must be 'new', 'resume' or 'overwrite', got {mode!r}")
        self.path = Path(path)
        self.existing_keys: set[tuple] = set()
        exists = self.path.exists() and self.path.stat().st_size > 0
        if exists and mode == "new":
            raise FileExistsError(
                f"{self.path} already exists; pass --resume to add the missing points to it "
                "or --overwrite to replace it"
            )
        if exists and mode == "resume":
            self._repair_tail()
            for _, rec in iter_records(self.path):
                self.existing_keys.add(record_key(rec))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(self.path, "w" if mode == "overwrite" else "a", encoding="utf-8")

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
        """Validate ``rec`` and append it as one line; flush and fsync."""
        rec = {k: v for k, v in rec.items() if not k.startswith("_")}
        validate_record(rec)
        self._fh.write(json.dumps(rec, allow_nan=False) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self.existing_keys.add(record_key(rec))

    def close(self) -> None:
        """Close the file."""
        if not self._fh.closed:
            self._fh.close()

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def atomic_write_text(path: str | os.PathLike, text: str, *, overwrite: bool = True) -> Path:
    """Write ``text`` to ``path`` atomically (temporary file + rename).

    A reader sees the old content or the new, never half a file.

    Raises:
        FileExistsError: if the file exists and ``overwrite`` is false.
    """
    path = Path(path)
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} already exists; pass --overwrite to replace it")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        # mkstemp makes the file private (0600); give it the mode a plain open()
        # would (0666 less the umask), so that a shared report stays readable.
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


class RecordRepairWarning(UserWarning):
    """A measurement file was repaired on ``--resume`` (a truncated last line dropped)."""


def _umask() -> int:
    """The process's umask (read by setting and restoring it)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def host_fingerprint() -> str:
    """A short, salted hash of the host name: tells hosts apart without naming them."""
    return hashlib.sha256(("ddltune:" + socket.gethostname()).encode()).hexdigest()[:16]


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
