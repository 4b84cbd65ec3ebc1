"""Import nccl-tests outputs (``all_reduce_perf`` & co.) as ddltune measurement records.

nccl-tests (https://github.com/NVIDIA/nccl-tests) prints one table per run: one
row per message size, with the size in bytes, the element count, the data type,
the reduction and root where they apply, and for the out-of-place and the
in-place variant the average time of one operation in µs, the algorithm and bus
bandwidths in GB/s and the number of wrong elements. What that table means is
documented in nccl-tests ``doc/PERFORMANCE.md``: ``algbw = size / time`` and
``busbw = algbw × factor`` with factor 2(n−1)/n for all_reduce, (n−1)/n for
all_gather, reduce_scatter and alltoall, and 1 for broadcast, reduce and
sendrecv (also :func:`costmodel.BUSBW_FACTOR`).

Real outputs vary, and this module reads all the variants ddltune has seen
(``src/common.cu`` and ``src/util.cu`` of nccl-tests print them):

* old and new column layouts: ``size count type [redop] [root] time algbw busbw
  #wrong|error`` twice (out-of-place, in-place), the per-iteration layout
  (``-p``-style ``i_min i_max i_p99 i_cv%`` columns) and a trailing timestamp;
* ``#wrong`` counts, ``N/A`` (validation off, or in-place alltoall/sendrecv
  that nccl-tests does not check) and the old ``error`` column (largest
  numerical error, not a count);
* the ``# nThread … nGpus …`` header and the ``#  Rank … on HOST device …``
  lines, present or missing, with or without the leading ``#``;
* tables inside shell sessions, launcher logs (``[1,0]<stdout>:`` and ``0:``
  prefixes) and ``NCCL INFO`` lines; size-0 rows (skipped).

What the table cannot say is taken from elsewhere in the file, and every value
says where it came from (:attr:`ParsedTable.sources`):

* **collective**: the test binary named in an echoed command line, the
  ``# Collective test starting: all_reduce_perf`` header or the ``Collective
  test concluded`` footer; else the ``collective`` argument.
* **num_ranks** (n): the ``#  Rank`` device lines (one per rank); an echoed
  ``mpirun -np P``/``srun -n P`` launcher line × nThread × nGpus; the count
  column (nccl-tests prints size = n × count × element size for all_gather,
  reduce_scatter and alltoall); the ratio busbw/algbw = factor(n), when the
  printed digits pin n to one integer; else the ``num_ranks`` argument.
* **ranks_per_node** (g): ranks per host name in the device lines (they must be
  equal); an echoed launcher's per-node count; one process holding all ranks;
  else the ``ranks_per_node`` argument.

Every source found must agree with every other and with the arguments; a
disagreement is an error naming both. When a value cannot be told, the error
names the argument (CLI flag) to pass.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import warnings
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import NamedTuple

from costmodel import InputFileError

from ._output import refuse_input
from ._records import SCHEMA_VERSION, RecordWriter, provenance, validate_record

__all__ = [
    "NCCL_TESTS_COLLECTIVES",
    "NCCL_TESTS_DTYPES",
    "NcclTestsTiming",
    "NcclTestsRow",
    "ParsedTable",
    "parse_nccl_tests",
    "import_nccl_tests",
]

#: nccl-tests binary stem (``<stem>_perf``) → ddltune collective name.
NCCL_TESTS_COLLECTIVES = {
    "all_reduce": "all_reduce",
    "all_gather": "all_gather",
    "alltoall": "all_to_all",
    "reduce_scatter": "reduce_scatter",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "sendrecv": "sendrecv",
}
# nccl-tests binaries that measure operations ddltune does not model.
_UNSUPPORTED_BINARIES = ("alltoallv", "gather", "scatter", "hypercube")
_IMPORTABLE = tuple(dict.fromkeys(NCCL_TESTS_COLLECTIVES.values()))
_ALIASES = {
    **{stem: name for stem, name in NCCL_TESTS_COLLECTIVES.items()},
    "allreduce": "all_reduce",
    "allgather": "all_gather",
    "all_to_all": "all_to_all",
    "reducescatter": "reduce_scatter",
}

#: nccl-tests ``type`` column → (ddltune/numpy dtype name, bytes per element).
NCCL_TESTS_DTYPES = {
    "int8": ("int8", 1),
    "char": ("int8", 1),
    "uint8": ("uint8", 1),
    "int32": ("int32", 4),
    "int": ("int32", 4),
    "uint32": ("uint32", 4),
    "int64": ("int64", 8),
    "uint64": ("uint64", 8),
    "half": ("float16", 2),
    "float16": ("float16", 2),
    "float": ("float32", 4),
    "float32": ("float32", 4),
    "double": ("float64", 8),
    "float64": ("float64", 8),
    "bfloat16": ("bfloat16", 2),
    "f8e4m3": ("float8_e4m3fn", 1),
    "fp8_e4m3": ("float8_e4m3fn", 1),
    "f8e5m2": ("float8_e5m2", 1),
    "fp8_e5m2": ("float8_e5m2", 1),
}

# Collectives whose ``count`` column is per rank: size = n × count × element size.
_PER_RANK_COUNT = frozenset({"all_gather", "reduce_scatter", "all_to_all"})
# Collectives that print a reduction operation (never ``none``).
_REDUCING = frozenset({"all_reduce", "reduce_scatter", "reduce"})
# Collectives that print a root ≥ 0 (every other prints -1).
_ROOTED = frozenset({"broadcast", "reduce"})

_BINARY_RE = re.compile(
    r"(?<![\w.-])(all_reduce|all_gather|alltoallv|alltoall|reduce_scatter|broadcast|reduce"
    r"|sendrecv|gather|scatter|hypercube)_perf\w*"
)
_CURATOR_RE = re.compile(r"^\s*#\s*(source|note|hardware)\s*:", re.IGNORECASE)
_HARDWARE_RE = re.compile(r"^\s*#\s*hardware\s*:\s*(.*)$", re.IGNORECASE)
_GPU_NAME_RE = re.compile(
    r"NVIDIA\s+(?:(?:GeForce|Tesla|Quadro|RTX)\s+)*[A-Za-z]*\d+[\w-]*(?:\s+Ti\b)?"
    r"|AMD\s+Instinct\s+MI\w+"
)
# Open MPI --tag-output, srun -l and pdsh-style line prefixes.
_PREFIX_RE = re.compile(r"^(?:\[\d+,\d+\]<std(?:out|err)>:|\s*\d+:\s|[A-Za-z][\w.-]*:\s)")
_DEVICE_RE = re.compile(
    r"(?:^|[#\s])Rank\s+(\d+)\s+(?:Group\s+(\d+)\s+)?Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)"
    r"\s+\[([^\]]*)\]\s*(.*?)\s*$"
)
_NTHREAD_RE = re.compile(r"nThread\s+(\d+)\s+nGpus\s+(\d+)")
_FOOTER_RE = re.compile(r"(Out of bounds values|Avg bus bandwidth)\s*:")
_TESTS_VERSION_RE = re.compile(r"nccl-tests version\s+(\S+)")
_NCCL_CODE_RE = re.compile(r"nccl-library=(\d+)")
_NCCL_VERSION_RE = re.compile(r"NCCL version\s+(\d+\.\d+\.\d+)")
_DATE_RE = re.compile(r"\d{4}-\d{2}-\d{2}")
_CLOCK_RE = re.compile(r"\d{2}:\d{2}:\d{2}")
_LAUNCHERS = frozenset({"mpirun", "mpiexec", "mpiexec.hydra", "orterun", "prterun", "srun"})


@dataclass(frozen=True)
class NcclTestsTiming:
    """One timed variant (out-of-place or in-place) of one table row.

    Attributes:
        time_s: average time of one operation over nccl-tests' timed iterations, s.
        algbw_bytes_per_s: printed algbw (size / time), bytes/s (GB/s × 10⁹).
        busbw_bytes_per_s: printed busbw (algbw × nccl-tests' factor), bytes/s.
        wrong: the ``#wrong`` count, or ``None`` where the file printed ``N/A``
            or uses the old ``error`` column.
        max_error: the old ``error`` column (largest numerical error), else ``None``.
        min_s, max_s: per-iteration minimum and maximum (s) where the file has
            nccl-tests' per-iteration columns, else ``None``.
    """

    time_s: float
    algbw_bytes_per_s: float
    busbw_bytes_per_s: float
    wrong: int | None = None
    max_error: float | None = None
    min_s: float | None = None
    max_s: float | None = None


@dataclass(frozen=True)
class NcclTestsRow:
    """One row of an nccl-tests table (size > 0).

    Attributes:
        line: 1-based line number in the file.
        message_bytes: the ``size`` column, bytes (nccl-tests convention: the
            full array for all_gather/reduce_scatter/alltoall).
        count: the ``count`` column, elements (per rank for all_gather,
            reduce_scatter and alltoall).
        dtype: ddltune dtype name (``float32``, ``float16``, ``bfloat16``, …).
        nccl_type: the ``type`` column as printed (``float``, ``half``, …).
        redop: the ``redop`` column (``sum``, ``none``, …) or ``None`` if absent.
        root: the ``root`` column or ``None`` if absent.
        out_of_place, in_place: the two timings.
    """

    line: int
    message_bytes: int
    count: int
    dtype: str
    nccl_type: str
    redop: str | None
    root: int | None
    out_of_place: NcclTestsTiming
    in_place: NcclTestsTiming


@dataclass(frozen=True)
class ParsedTable:
    """One nccl-tests table and what was detected about it.

    Attributes:
        path: the file, as given.
        collective: ddltune collective name (``all_to_all`` for nccl-tests' alltoall).
        num_ranks: n, ranks in the collective.
        ranks_per_node: g, ranks per node.
        device_kind: GPU name from the device lines, else from a ``# hardware:``
            comment, else ``"unknown"``.
        rows: the rows with size > 0, in file order.
        sources: for ``collective``, ``num_ranks``, ``ranks_per_node`` and
            ``device_kind``: where the value came from, in words.
        layout: the column layout, in words.
        skipped_zero_size: rows of size 0 skipped.
        skipped_truncated: a last row cut short and skipped (0 or 1).
        notes: things the reader should know (N/A columns, skipped rows, …).
        versions: ``nccl`` and ``nccl-tests`` versions where the file prints them.
        hosts: host names from the device lines (empty without them).
    """

    path: str
    collective: str
    num_ranks: int
    ranks_per_node: int
    device_kind: str
    rows: tuple[NcclTestsRow, ...]
    sources: dict[str, str]
    layout: str
    skipped_zero_size: int = 0
    skipped_truncated: int = 0
    notes: tuple[str, ...] = ()
    versions: dict[str, str] = field(default_factory=dict)
    hosts: tuple[str, ...] = ()

    @property
    def dtypes(self) -> tuple[str, ...]:
        """The dtypes of the rows, in order of first appearance."""
        return tuple(dict.fromkeys(r.dtype for r in self.rows))

    def to_records(self) -> list[dict]:
        """Measurement records (schema v1) for this table: one per row and variant.

        Each row gives two ``kind: "collective"`` records, ``in_place: false``
        and ``in_place: true``. ``time_s`` holds ``{"mean": t}`` (nccl-tests
        reports the average over its iterations; with per-iteration columns
        also ``min`` and ``max``); there is no ``samples_s``. ``wrong`` is the
        ``#wrong`` count, 0 where the file printed ``N/A`` or the old ``error``
        column (see :attr:`notes`). ``source`` is the file path, ``backend``
        ``"gpu"``; ``versions`` holds the importing tool's versions plus
        ``nccl``/``nccl-tests`` when the file prints them; ``host_fingerprint``
        hashes the host names of the device lines (``"unknown"`` without them).

        Raises:
            InputFileError: if a record fails schema validation (names the row's line).
        """
        prov = provenance(self.path, backend="gpu", device_kind=self.device_kind)
        prov["versions"] = {**prov["versions"], **self.versions}
        prov["host_fingerprint"] = _hosts_fingerprint(self.hosts)
        out = []
        for row in self.rows:
            for in_place, timing in ((False, row.out_of_place), (True, row.in_place)):
                time_s = {"mean": timing.time_s}
                if timing.min_s is not None and timing.min_s > 0:
                    time_s["min"] = timing.min_s
                if timing.max_s is not None and timing.max_s > 0:
                    time_s["max"] = timing.max_s
                rec = {
                    "schema": SCHEMA_VERSION,
                    "kind": "collective",
                    "collective": self.collective,
                    "message_bytes": row.message_bytes,
                    "num_ranks": self.num_ranks,
                    "ranks_per_node": self.ranks_per_node,
                    "dtype": row.dtype,
                    "time_s": time_s,
                    "wrong": timing.wrong if timing.wrong is not None else 0,
                    "in_place": in_place,
                    **prov,
                }
                try:
                    validate_record(rec)
                except ValueError as e:
                    raise InputFileError(self.path, row.line, str(e)) from None
                out.append(rec)
        return out


def _hosts_fingerprint(hosts) -> str:
    if not hosts:
        return "unknown"
    text = "ddltune:" + ",".join(sorted(hosts))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _normalize_collective(name: str) -> str:
    """Map a collective name as users or nccl-tests write it to ddltune's name.

    Accepts ddltune names (``all_to_all``), nccl-tests binary stems
    (``alltoall``), binary names (``all_reduce_perf``) and ``allreduce``-style
    spellings.

    Raises:
        ValueError: on a name nccl-tests has no table for (or ddltune does not model).

    Example:
        >>> _normalize_collective("alltoall"), _normalize_collective("all_reduce_perf")
        ('all_to_all', 'all_reduce')
    """
    key = str(name).strip().lower().replace("-", "_")
    key = re.sub(r"_perf\w*$", "", key)
    if key in _ALIASES:
        return _ALIASES[key]
    raise ValueError(
        f"collective: expected one of {', '.join(_IMPORTABLE)} (nccl-tests' alltoall is "
        f"all_to_all), got {name!r}"
    )


# --------------------------------------------------------------------------- scanning


@dataclass
class _Table:
    header_line: int | None = None
    header: list[str] | None = None
    rows: list[tuple[int, list[str]]] = field(default_factory=list)


@dataclass
class _Device:
    line: int
    rank: int
    pid: int
    host: str
    name: str


@dataclass
class _Command:
    line: int
    stem: str = ""
    procs: int | None = None
    per_node: int | None = None
    nodes: int | None = None
    ranks_per_process: int | None = None
    cputime: bool = False


@dataclass
class _Scan:
    tables: list[_Table] = field(default_factory=list)
    names: list[tuple[str, int, str]] = field(default_factory=list)  # (stem, line, where)
    devices: list[_Device] = field(default_factory=list)
    devices_cut: bool = False
    nthread: tuple[int, int, int] | None = None  # (nThread, nGpus, line)
    commands: list[_Command] = field(default_factory=list)
    hardware: str | None = None
    versions: dict[str, str] = field(default_factory=dict)


def _strip_prefix(line: str) -> str:
    m = _PREFIX_RE.match(line)
    return line[m.end() :] if m else line


def _is_header(tokens: list[str]) -> bool:
    t = [x.lstrip("#") for x in tokens]
    t = [x for x in t if x]
    return len(t) >= 4 and t[:3] == ["size", "count", "type"]


def _scan(text: str) -> _Scan:
    sc = _Scan()
    current: _Table | None = None
    last_device_line = -10
    for lineno, raw in enumerate(text.splitlines(), start=1):
        s = _strip_prefix(raw)
        tokens = s.split()
        if not tokens:
            continue
        if _CURATOR_RE.match(s):
            hw = _HARDWARE_RE.match(s)
            if hw and sc.hardware is None:
                sc.hardware = hw.group(1).strip()
            continue
        dev = _DEVICE_RE.search(s)
        if dev:
            sc.devices.append(
                _Device(lineno, int(dev.group(1)), int(dev.group(3)), dev.group(4), dev.group(7))
            )
            last_device_line = lineno
            if dev.group(7).endswith("..."):
                sc.devices_cut = True
            continue
        if lineno == last_device_line + 1 and s.rstrip().endswith("..."):
            sc.devices_cut = True  # nccl-tests cut a long device list with "..."
        if _is_header(tokens):
            if current is None or current.rows:
                current = _Table()
                sc.tables.append(current)
            current.header_line = lineno
            current.header = [x for x in (t.lstrip("#") for t in tokens) if x]
            continue
        if _FOOTER_RE.search(s):
            current = None
            continue
        if tokens[0].isdigit():
            full = len(tokens) >= 3 and tokens[1].isdigit() and tokens[2] in NCCL_TESTS_DTYPES
            partial = (
                current is not None
                and (len(tokens) < 2 or tokens[1].isdigit())
                and (len(tokens) < 3 or re.fullmatch(r"[A-Za-z_]\w*", tokens[2]) is not None)
            )
            if full or partial:
                if current is None:
                    current = _Table()
                    sc.tables.append(current)
                current.rows.append((lineno, tokens))
                continue
        _scan_metadata(sc, s, lineno)
    return sc


def _scan_metadata(sc: _Scan, s: str, lineno: int) -> None:
    m = _NTHREAD_RE.search(s)
    if m and sc.nthread is None:
        sc.nthread = (int(m.group(1)), int(m.group(2)), lineno)
    m = _TESTS_VERSION_RE.search(s)
    if m:
        sc.versions.setdefault("nccl-tests", m.group(1))
    m = _NCCL_CODE_RE.search(s)
    if m:
        sc.versions.setdefault("nccl", _decode_nccl_version(int(m.group(1))))
    m = _NCCL_VERSION_RE.search(s)
    if m:
        sc.versions.setdefault("nccl", m.group(1))
    for m in _BINARY_RE.finditer(s):
        if "Collective test starting" in s:
            where = f"'# Collective test starting' header, line {lineno}"
        elif "Collective test concluded" in s:
            where = f"'Collective test concluded' footer, line {lineno}"
        else:
            where = f"command line, line {lineno}"
        sc.names.append((m.group(1), lineno, where))
    if _BINARY_RE.search(s) and "Collective test" not in s:
        cmd = _parse_command(s, lineno)
        if cmd is not None:
            sc.commands.append(cmd)


def _decode_nccl_version(code: int) -> str:
    # NCCL_VERSION_CODE: major*10000 + minor*100 + patch since 2.9, major*1000 + … before.
    if code >= 20900:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


def _opt_ints(opts: list[str], names: tuple[str, ...]) -> list[int]:
    out = []
    for i, tok in enumerate(opts):
        for name in names:
            val = None
            if tok == name and i + 1 < len(opts):
                val = opts[i + 1]
            elif name.startswith("--") and tok.startswith(name + "="):
                val = tok[len(name) + 1 :]
            elif len(name) == 2 and tok.startswith(name) and tok[2:].isdigit():
                val = tok[2:]
            if val is not None and val.isdigit() and int(val) > 0:
                out.append(int(val))
    return out


def _parse_command(s: str, lineno: int) -> _Command | None:
    """An echoed ``[launcher …] …/<coll>_perf [options]`` line."""
    tokens = s.split()
    idx = next((i for i, t in enumerate(tokens) if _BINARY_RE.search(t)), None)
    if idx is None:
        return None
    cmd = _Command(lineno, _BINARY_RE.search(tokens[idx]).group(1))
    test = tokens[idx + 1 :]
    g = _opt_ints(test, ("-g", "--ngpus"))
    t = _opt_ints(test, ("-t", "--nthreads"))
    cmd.ranks_per_process = (g[-1] if g else 1) * (t[-1] if t else 1)
    c = _opt_ints(test, ("-C", "--report_cputime"))
    cmd.cputime = bool(c and c[-1])
    launch = tokens[:idx]
    li = next((i for i, x in enumerate(launch) if os.path.basename(x) in _LAUNCHERS), None)
    if li is None:
        return cmd
    opts = launch[li + 1 :]
    if os.path.basename(launch[li]) == "srun":
        procs = _opt_ints(opts, ("-n", "--ntasks"))
        nodes = _opt_ints(opts, ("-N", "--nodes"))
        per_node = _opt_ints(opts, ("--ntasks-per-node",))
    else:
        procs = _opt_ints(opts, ("-np", "-n", "--np", "-c"))
        nodes = []
        per_node = _opt_ints(opts, ("-N", "--npernode", "-npernode", "-ppn", "--ppn", "-perhost"))
        for i, tok in enumerate(opts):
            if tok == "--map-by" and i + 1 < len(opts):
                m = re.match(r"ppr:(\d+):node", opts[i + 1])
                if m:
                    per_node.append(int(m.group(1)))
    cmd.procs = procs[-1] if procs else None
    cmd.nodes = nodes[-1] if nodes else None
    cmd.per_node = per_node[-1] if per_node else None
    return cmd


# --------------------------------------------------------------------------- table rows


@dataclass
class _Raw:
    """Printed strings of one timing, kept for the busbw/algbw consistency check."""

    algbw: str
    busbw: str


def _number(path: str, lineno: int, tok: str, what: str) -> float:
    try:
        v = float(tok)
    except ValueError:
        raise InputFileError(path, lineno, f"{what} {tok!r} is not a number") from None
    if math.isnan(v):
        raise InputFileError(path, lineno, f"{what} is NaN")
    if math.isinf(v):
        raise InputFileError(path, lineno, f"{what} is infinite ({tok!r})")
    return v


def _scaled(tok: str, exp10: int, value: float) -> float:
    """``value`` × 10**exp10, rounded once from the printed decimal (so 34.73 µs → 3.473e-05 s)."""
    try:
        return float(Decimal(tok).scaleb(exp10))
    except InvalidOperation:
        return value * 10.0**exp10


class _Shape(NamedTuple):
    """A table's column layout, inferred from its header (if any) and its rows."""

    rows: list  # [(lineno, tokens)] without the optional timestamp column
    expected: int  # fields per complete row
    per_iter: bool  # per-iteration columns (i_min i_max i_p99 i_cv%) per variant
    block: int  # fields per variant (4 or 8)
    middle: int  # redop / root fields between type and the first variant
    error_col: bool  # old 'error' column instead of #wrong


def _table_shape(path: str, table: _Table) -> _Shape:
    """The layout of a table's rows (InputFileError when no known layout fits)."""
    header = table.header
    per_iter = bool(header and "i_min" in header)
    error_col = bool(header and "error" in header and "#wrong" not in header)
    rows_tok = []
    for lineno, tokens in table.rows:
        if len(tokens) >= 2 and _DATE_RE.fullmatch(tokens[-2]) and _CLOCK_RE.fullmatch(tokens[-1]):
            tokens = tokens[:-2]  # nccl-tests' optional timestamp column
        rows_tok.append((lineno, tokens))
    counts = Counter(len(t) for _, t in rows_tok if len(t) >= 3 and t[2] in NCCL_TESTS_DTYPES)
    if not counts:
        raise InputFileError(path, rows_tok[0][0], "no complete nccl-tests table row")
    expected = max(counts, key=lambda k: (counts[k], k))
    if header is None:
        per_iter = expected >= 19
    block = 8 if per_iter else 4
    middle = expected - 3 - 2 * block
    if not 0 <= middle <= 2:
        first = next(ln for ln, t in rows_tok if len(t) == expected)
        raise InputFileError(
            path,
            first,
            f"rows have {expected} fields, which is no nccl-tests layout ddltune knows "
            "(size count type [redop] [root], then time algbw busbw #wrong for out-of-place "
            "and for in-place)",
        )
    return _Shape(rows_tok, expected, per_iter, block, middle, error_col)


@dataclass
class _RowStats:
    """What the rows' check columns said, for the import's notes."""

    skipped0: int = 0
    skipped_cut: int = 0
    na_count: int = 0
    max_err: float | None = None
    notes: list[str] = field(default_factory=list)


def _parse_rows(path: str, table: _Table, sc: _Scan):
    """Parse a table's rows; returns (rows, raws, layout, notes, skipped0, skipped_cut)."""
    shape = _table_shape(path, table)
    rows, raws, st = [], [], _RowStats()
    for i, (lineno, tokens) in enumerate(shape.rows):
        if not _row_complete(path, lineno, tokens, shape, last=i == len(shape.rows) - 1, st=st):
            continue
        parsed = _parse_row(path, lineno, tokens, shape, table.header is None, st)
        if parsed is not None:
            rows.append(parsed[0])
            raws.append(parsed[1])
    notes = st.notes + _row_notes(rows, st, table.header, sc)
    return rows, raws, _layout_text(shape, table.header), notes, st.skipped0, st.skipped_cut


def _row_complete(path, lineno, tokens, shape: _Shape, *, last: bool, st: _RowStats) -> bool:
    """Whether a row has the table's field count; a cut-short last row is skipped with a
    warning, any other wrong count is an InputFileError."""
    expected = shape.expected
    if len(tokens) < expected:
        if last:  # a file cut short, or a run killed mid-row
            msg = (
                f"{path}:{lineno}: the last table row is cut short ({len(tokens)} of "
                f"{expected} fields); skipped it"
            )
            warnings.warn(msg, stacklevel=4)  # the caller of parse_nccl_tests
            st.notes.append(f"skipped the last row (line {lineno}): cut short")
            st.skipped_cut += 1
            return False
        raise InputFileError(
            path,
            lineno,
            f"table row is cut short: {len(tokens)} of {expected} fields "
            "(size count type … time algbw busbw #wrong …)",
        )
    if len(tokens) > expected:
        raise InputFileError(
            path,
            lineno,
            f"table row has {len(tokens)} fields; the table's rows have {expected}",
        )
    return True


def _parse_row(path, lineno, tokens, shape: _Shape, headerless: bool, st: _RowStats):
    """(NcclTestsRow, [_Raw, _Raw]) of one complete row, or None for a size-0 row."""
    nccl_type = tokens[2]
    if nccl_type not in NCCL_TESTS_DTYPES:
        raise InputFileError(
            path,
            lineno,
            f"unknown nccl-tests data type {nccl_type!r}; known: "
            f"{', '.join(sorted(NCCL_TESTS_DTYPES))}",
        )
    size, count = int(tokens[0]), int(tokens[1])
    redop = root = None
    for tok in tokens[3 : 3 + shape.middle]:
        if re.fullmatch(r"-?\d+", tok):
            root = int(tok)
        else:
            redop = tok
    if size == 0:
        st.skipped0 += 1
        return None
    timings, raw = [], []
    for b, kind in enumerate(("out-of-place", "in-place")):
        start = 3 + shape.middle + b * shape.block
        f = tokens[start : start + shape.block]
        timings.append(_parse_timing(path, lineno, f, kind, size, shape, headerless, st))
        raw.append(_Raw(f[1], f[2]))
    dtype = NCCL_TESTS_DTYPES[nccl_type][0]
    return NcclTestsRow(lineno, size, count, dtype, nccl_type, redop, root, *timings), raw


def _parse_timing(path, lineno, f, kind, size, shape: _Shape, headerless, st: _RowStats):
    """One variant's fields (time algbw busbw #wrong [i_min i_max …]) in SI units."""
    t_us = _number(path, lineno, f[0], f"{kind} time")
    if t_us <= 0:
        raise InputFileError(
            path, lineno, f"{kind} time is {f[0]} µs; times must be > 0 for size {size}"
        )
    algbw = _number(path, lineno, f[1], f"{kind} algbw")
    busbw = _number(path, lineno, f[2], f"{kind} busbw")
    if algbw < 0 or busbw < 0:
        raise InputFileError(path, lineno, f"{kind} bandwidth is negative")
    wrong = err = None
    if f[3] == "N/A":
        st.na_count += 1
    elif shape.error_col or (headerless and re.search(r"[.eE]", f[3])):
        err = _number(path, lineno, f[3], f"{kind} error")
        st.max_err = err if st.max_err is None else max(st.max_err, err)
    else:
        w = _number(path, lineno, f[3], f"{kind} #wrong")
        if w < 0 or w != int(w):
            raise InputFileError(path, lineno, f"{kind} #wrong must be a count ≥ 0, got {f[3]!r}")
        wrong = int(w)
    mn = mx = None
    if shape.per_iter:
        mn = _scaled(f[4], -6, _number(path, lineno, f[4], f"{kind} i_min"))
        mx = _scaled(f[5], -6, _number(path, lineno, f[5], f"{kind} i_max"))
    return NcclTestsTiming(
        _scaled(f[0], -6, t_us),  # µs → s
        _scaled(f[1], 9, algbw),  # GB/s → bytes/s
        _scaled(f[2], 9, busbw),
        wrong,
        err,
        mn,
        mx,
    )


def _row_notes(rows, st: _RowStats, header, sc: _Scan) -> list[str]:
    """Notes on skipped rows, unchecked or wrong results, and CPU times."""
    notes = []
    if st.skipped0:
        notes.append(f"skipped {st.skipped0} row(s) of size 0")
    if st.na_count:
        notes.append(
            f"#wrong is N/A in {st.na_count} timing(s) (validation off, or an in-place variant "
            "nccl-tests does not check); recorded as wrong = 0"
        )
    if st.max_err is not None:
        notes.append(
            f"old 'error' column: the largest numerical error (max {st.max_err:g}), not a count "
            "of wrong elements; recorded as wrong = 0"
        )
    n_wrong = sum(1 for r in rows for t in (r.out_of_place, r.in_place) if t.wrong)
    if n_wrong:
        notes.append(f"{n_wrong} timing(s) report wrong results (#wrong > 0)")
    if bool(header and "cputime" in header) or any(c.cputime for c in sc.commands):
        notes.append("times are CPU times (nccl-tests -C 1), not GPU completion times")
    return notes


def _layout_text(shape: _Shape, header) -> str:
    """The table's layout in words (``size count type redop, then time algbw …``)."""
    first = next(t for _, t in shape.rows if len(t) == shape.expected)
    middle = first[3 : 3 + shape.middle]
    middle_names = ["root" if re.fullmatch(r"-?\d+", x) else "redop" for x in middle]
    per_variant = ["time", "algbw", "busbw", "error" if shape.error_col else "#wrong"]
    if shape.per_iter:
        per_variant += ["i_min", "i_max", "i_p99", "i_cv%"]
    return (
        " ".join(["size", "count", "type", *middle_names])
        + f", then {' '.join(per_variant)} out-of-place and in-place"
        + ("" if header else " (no column header in the file)")
    )


# --------------------------------------------------------------------------- detection


def _busbw_ranks(collective: str, raws) -> tuple[float, float] | None:
    """The interval of n that every row's printed busbw/algbw allows, or None.

    nccl-tests ``doc/PERFORMANCE.md``: busbw = algbw × factor(n), with factor
    2(n−1)/n for all_reduce (so n = 2/(2 − f)) and (n−1)/n for all_gather,
    reduce_scatter and alltoall (n = 1/(1 − f)). Each printed value is rounded
    to its last digit, so each row bounds f and hence n. ``None`` where the
    factor does not depend on n or no row bounds it.
    """
    if collective != "all_reduce" and collective not in _PER_RANK_COUNT:
        return None
    top = 2.0 if collective == "all_reduce" else 1.0
    lo, hi = 1.0, math.inf
    for raw in raws:
        for r in raw:
            a, b = _value_and_halfulp(r.algbw), _value_and_halfulp(r.busbw)
            if a is None or b is None or b[0] <= 0 or a[0] - a[1] <= 0:
                continue
            f_lo = max(b[0] - b[1], 0.0) / (a[0] + a[1])
            f_hi = (b[0] + b[1]) / (a[0] - a[1])
            lo = max(lo, top / (top - f_lo) if f_lo < top else math.inf)
            hi = min(hi, top / (top - f_hi) if f_hi < top else math.inf)
    if lo == 1.0 and hi == math.inf:
        return None
    return lo, hi


def _value_and_halfulp(tok: str) -> tuple[float, float] | None:
    try:
        d = Decimal(tok)
    except InvalidOperation:
        return None
    v = float(d)
    exp = d.as_tuple().exponent
    if not isinstance(exp, int):
        return None
    # half a unit of the last printed digit, plus float32 rounding in old versions
    return v, 0.5 * 10.0**exp + 1e-6 * abs(v)


def _integers_in(lo: float, hi: float) -> tuple[int, int | None]:
    """Smallest and largest integer ≥ 1 in [lo, hi] (largest None when unbounded).

    An empty range (lo = ∞: no rank count fits) gives (1, 0), smallest > largest.
    """
    if lo == math.inf:
        return 1, 0
    a = max(1, math.ceil(lo - 1e-9))
    return a, (None if hi == math.inf else math.floor(hi + 1e-9))


def _fmt_lines(lines: list[int]) -> str:
    if len(lines) == 1:
        return f"line {lines[0]}"
    return f"lines {min(lines)}–{max(lines)}"


@dataclass
class _Evidence:
    value: int
    where: str
    line: int | None


def _agree(
    path: str, what: str, evidence: list[_Evidence], flag_name: str, flag
) -> _Evidence | None:
    """Check every source of one value agrees; the flag must agree with the file."""
    for e in evidence[1:]:
        if e.value != evidence[0].value:
            a, b = evidence[0], e
            raise InputFileError(
                path,
                b.line,
                f"the file contradicts itself on {what}: {a.where} gives {a.value}, "
                f"{b.where} gives {b.value}",
            )
    if flag is not None:
        if evidence and evidence[0].value != flag:
            e = evidence[0]
            raise InputFileError(
                path,
                e.line,
                f"{flag_name} {flag} contradicts the file: {e.where} gives {what} = {e.value}",
            )
        return evidence[0] if evidence else _Evidence(flag, f"{flag_name} flag", None)
    return evidence[0] if evidence else None


def _compatible(rows, ratio: int | None, n: int | None, raws) -> list[str]:
    """Collectives the table's columns allow (for hints only)."""
    out = []
    redops = {r.redop for r in rows if r.redop is not None}
    roots = {r.root for r in rows if r.root is not None}
    for c in _IMPORTABLE:
        if ratio is not None:
            if ratio > 1 and c not in _PER_RANK_COUNT:
                continue
            if ratio == 1 and c in _PER_RANK_COUNT and (n is None or n > 1):
                continue
        if "none" in redops and c in _REDUCING:
            continue
        if roots and max(roots) >= 0 and c not in _ROOTED:
            continue
        if roots and max(roots) < 0 and c in _ROOTED:
            continue
        if n is not None and raws and not _busbw_fits(c, n, raws):
            continue
        out.append(c)
    return out


def _busbw_fits(collective: str, n: int, raws) -> bool:
    if collective in _PER_RANK_COUNT or collective == "all_reduce":
        iv = _busbw_ranks(collective, raws)
        return iv is None or iv[0] - 1e-9 <= n <= iv[1] + 1e-9
    # factor 1: busbw == algbw up to rounding
    for raw in raws:
        for r in raw:
            a, b = _value_and_halfulp(r.algbw), _value_and_halfulp(r.busbw)
            if a and b and abs(a[0] - b[0]) > a[1] + b[1] + 1e-9:
                return False
    return True


def _join(names, word: str = "or") -> str:
    names = list(names)
    if len(names) <= 1:
        return "".join(names)
    return ", ".join(names[:-1]) + f" {word} " + names[-1]


def _check_args(collective, num_ranks, ranks_per_node) -> str | None:
    for name, v in (("num_ranks", num_ranks), ("ranks_per_node", ranks_per_node)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise ValueError(f"{name} must be an integer ≥ 1, got {v!r}")
    return None if collective is None else _normalize_collective(collective)


def _detect_collective(
    path: str, sc: _Scan, flag: str | None, sources: dict, notes: list
) -> str | None:
    """The collective named in the file: nccl-tests' own header/footer first, then command lines.

    Header and footer are printed by nccl-tests itself and must agree. Echoed
    command lines are weaker: one that disagrees with the header is noted and
    ignored; command lines that disagree among themselves (without a header)
    need ``--collective`` to choose.
    """
    own = [x for x in sc.names if not x[2].startswith("command line")]
    echoed = [x for x in sc.names if x[2].startswith("command line")]

    def distinct(found):
        out: dict[str, tuple[int, str]] = {}
        for stem, lineno, where in found:
            out.setdefault(stem, (lineno, where))
        return out

    stems = distinct(own)
    if len(stems) > 1:
        (s1, (_, w1)), (s2, (l2, w2)) = list(stems.items())[:2]
        raise InputFileError(
            path, l2, f"names two different tests: {s1}_perf ({w1}) and {s2}_perf ({w2})"
        )
    others = distinct(echoed)
    if stems:
        for stem, (_, where) in others.items():
            if stem not in stems:
                notes.append(
                    f"ignored {stem}_perf on the {where}: nccl-tests' header names another"
                )
    elif len(others) > 1:
        named = {NCCL_TESTS_COLLECTIVES.get(stem): (stem, v) for stem, v in others.items()}
        if flag is None or flag not in named:
            (s1, (_, w1)), (s2, (l2, w2)) = list(others.items())[:2]
            raise InputFileError(
                path,
                l2,
                f"names two different tests, {s1}_perf ({w1}) and {s2}_perf ({w2}), and has no "
                "'# Collective test starting' header; pass --collective NAME to choose",
            )
        stems = {named[flag][0]: named[flag][1]}
    else:
        stems = others
    if not stems:
        if flag is not None:
            sources["collective"] = "--collective flag"
        return flag
    stem, (lineno, where) = next(iter(stems.items()))
    if stem in _UNSUPPORTED_BINARIES:
        raise InputFileError(
            path,
            lineno,
            f"is a {stem}_perf run ({where}); ddltune imports "
            f"{', '.join(f'{s}_perf' for s in NCCL_TESTS_COLLECTIVES)} only",
        )
    name = NCCL_TESTS_COLLECTIVES[stem]
    if flag is not None and flag != name:
        raise InputFileError(
            path,
            lineno,
            f"--collective {flag} contradicts the file: {where} names {stem}_perf ({name})",
        )
    sources["collective"] = where
    return name


def _count_ratio(path: str, rows) -> tuple[int, int]:
    """(size / (count × element size), line): n for all_gather/reduce_scatter/alltoall, else 1."""
    ratios: dict[int | None, int] = {}
    for r in rows:
        if r.count > 0:
            q, rem = divmod(r.message_bytes, r.count * NCCL_TESTS_DTYPES[r.nccl_type][1])
            ratios.setdefault(q if rem == 0 and q > 0 else None, r.line)
    if None in ratios or len(ratios) != 1:
        raise InputFileError(
            path,
            ratios.get(None) or max(ratios.values(), default=None),
            "the count column does not follow nccl-tests' rule consistently (size = count × "
            "element size, × n for all_gather, reduce_scatter and alltoall)",
        )
    return next(iter(ratios.items()))


def _check_shape(path: str, collective: str, who: str, rows, ratio: int, ratio_line: int) -> None:
    """The collective must fit the columns nccl-tests prints for it."""
    if ratio > 1 and collective not in _PER_RANK_COUNT:
        raise InputFileError(
            path,
            ratio_line,
            f"{who} contradicts the table: its size column is {ratio} × count × element size, "
            "which nccl-tests prints only for all_gather, reduce_scatter and alltoall",
        )
    bad = next((r for r in rows if r.redop == "none"), None)
    if bad is not None and collective in _REDUCING:
        raise InputFileError(
            path,
            bad.line,
            f"{who} contradicts the table: its redop column says 'none', which nccl-tests "
            "prints only for collectives without a reduction",
        )
    bad = next((r for r in rows if r.root is not None and r.root >= 0), None)
    if bad is not None and collective not in _ROOTED:
        raise InputFileError(
            path,
            bad.line,
            f"{who} contradicts the table: its root column is {bad.root}, which nccl-tests "
            "prints only for broadcast and reduce",
        )


def _device_evidence(path: str, sc: _Scan, notes: list) -> bool:
    """Whether the device lines are complete (one per rank 0…n−1)."""
    if not sc.devices:
        return False
    ranks = [d.rank for d in sc.devices]
    dup = [k for k, c in Counter(ranks).items() if c > 1]
    if dup:
        lines = [d.line for d in sc.devices if d.rank == dup[0]]
        raise InputFileError(
            path,
            lines[1],
            f"device lines list rank {dup[0]} more than once (lines "
            f"{', '.join(map(str, lines))}): was an nccl-tests built without MPI started as "
            "several processes? Each then ran alone",
        )
    if sc.devices_cut or sorted(ranks) != list(range(len(ranks))):
        notes.append("device lines are incomplete; not used to count ranks or hosts")
        return False
    return True


def _detect_num_ranks(
    path, sc, collective, who, flag, rows, raws, ratio, ratio_line, dev_ok, sources
):
    ev: list[_Evidence] = []
    if dev_ok:
        lines = [d.line for d in sc.devices]
        ev.append(_Evidence(len(lines), f"device lines ({_fmt_lines(lines)})", lines[0]))
    p = sc.nthread[0] * sc.nthread[1] if sc.nthread else None
    for cmd in sc.commands:
        rpp = p if p is not None else cmd.ranks_per_process
        procs = cmd.procs
        if procs is None and cmd.nodes is not None and cmd.per_node is not None:
            procs = cmd.nodes * cmd.per_node
        if procs is not None:
            ev.append(_Evidence(procs * rpp, f"launcher command (line {cmd.line})", cmd.line))
    if collective in _PER_RANK_COUNT or (collective is None and ratio > 1):
        read = f", read as {collective}" if collective else ""
        ev.append(_Evidence(ratio, f"the count column (line {ratio_line}{read})", ratio_line))
    bounds = _busbw_ranks(collective, raws) if collective else None
    if bounds is not None:
        a, b = _integers_in(*bounds)
        line0 = rows[-1].line
        if b is not None and b < a:
            raise InputFileError(
                path,
                line0,
                f"{who} contradicts the table: its busbw/algbw ratio fits no number of ranks "
                f"for {collective} (nccl-tests doc/PERFORMANCE.md)",
            )
        if a == b:
            ev.append(_Evidence(a, f"the busbw/algbw ratio (read as {collective})", line0))
        else:  # not pinned, but still bounds n
            flag_ev = [_Evidence(flag, "--num-ranks", None)] if flag is not None else []
            for e in ev + flag_ev:
                if e.value < a or (b is not None and e.value > b):
                    allowed = f"between {a} and {b}" if b is not None else f"at least {a}"
                    raise InputFileError(
                        path,
                        line0,
                        f"{e.where} gives {e.value} ranks, but the table's busbw/algbw ratio "
                        f"for {collective} needs {allowed}",
                    )
    elif collective is not None and not _busbw_fits(collective, 1, raws):
        raise InputFileError(
            path,
            rows[-1].line,
            f"{who} contradicts the table: busbw ≠ algbw, but nccl-tests' bus-bandwidth "
            "factor for it is 1 (doc/PERFORMANCE.md)",
        )
    chosen = _agree(path, "the number of ranks", ev, "--num-ranks", flag)
    if chosen is None:
        return None
    sources["num_ranks"] = chosen.where
    n = chosen.value
    if p is not None and n % p:
        raise InputFileError(
            path,
            sc.nthread[2],
            f"the header says nThread × nGpus = {p} ranks per process, which does not divide "
            f"{n} ranks ({chosen.where})",
        )
    return n


def _detect_ranks_per_node(path, sc, n, flag, dev_ok, sources):
    ev: list[_Evidence] = []
    if dev_ok:
        per_host = Counter(d.host for d in sc.devices)
        if len(set(per_host.values())) > 1:
            detail = ", ".join(f"{h}: {c}" for h, c in per_host.items())
            raise InputFileError(
                path,
                sc.devices[0].line,
                f"device lines show unequal ranks per host ({detail}); ddltune models nodes "
                "with equal numbers of ranks",
            )
        hosts = "1 host" if len(per_host) == 1 else f"{len(per_host)} hosts"
        ev.append(
            _Evidence(next(iter(per_host.values())), f"device lines ({hosts})", sc.devices[0].line)
        )
    p = sc.nthread[0] * sc.nthread[1] if sc.nthread else None
    for cmd in sc.commands:
        rpp = p if p is not None else cmd.ranks_per_process
        if cmd.per_node is not None:
            ev.append(
                _Evidence(cmd.per_node * rpp, f"launcher command (line {cmd.line})", cmd.line)
            )
        elif cmd.nodes is not None and n is not None and n % cmd.nodes == 0:
            ev.append(_Evidence(n // cmd.nodes, f"launcher command (line {cmd.line})", cmd.line))
    if not ev and n is not None and p == n:
        line = sc.nthread[2]
        ev.append(_Evidence(n, f"header (line {line}): one process holds all ranks", line))
    if not ev and n == 1:
        ev.append(_Evidence(1, "a single rank", None))
    chosen = _agree(path, "the ranks per node", ev, "--ranks-per-node", flag)
    if chosen is None:
        return None
    sources["ranks_per_node"] = chosen.where
    return chosen.value


def _device_kind(sc: _Scan, sources: dict, notes: list) -> str:
    names = list(dict.fromkeys(d.name for d in sc.devices if d.name))
    if names:
        sources["device_kind"] = "device lines"
        if len(names) > 1:
            notes.append(f"mixed devices: {', '.join(names)}")
        return " + ".join(names)
    m = _GPU_NAME_RE.search(sc.hardware or "")
    if m:
        sources["device_kind"] = "'# hardware:' comment"
        return re.sub(r"\s+", " ", m.group(0))
    sources["device_kind"] = "not in the file"
    notes.append("no device name in the file; device_kind recorded as 'unknown'")
    return "unknown"


def parse_nccl_tests(
    path: str | os.PathLike,
    *,
    collective: str | None = None,
    num_ranks: int | None = None,
    ranks_per_node: int | None = None,
) -> ParsedTable:
    """Parse one nccl-tests output file (the text a ``*_perf`` binary printed).

    Args:
        path: the file. Anything around the table (shell prompts, launcher
            logs, ``NCCL INFO`` lines) is ignored; the file must hold exactly
            one result table.
        collective: the collective, for files that do not name their test
            binary (ddltune or nccl-tests spelling: ``all_reduce``,
            ``alltoall``/``all_to_all``, …). Must agree with the file if it says.
        num_ranks: n ≥ 1, ranks in the collective, for files that cannot tell.
            Must agree with the file if it says.
        ranks_per_node: g ≥ 1 dividing n, for files without device lines.
            Must agree with the file if it says.

    Returns:
        The :class:`ParsedTable`: rows with size > 0 (times in s, bandwidths in
        bytes/s), the detected collective, n, g and device, and where each came from.

    Raises:
        FileNotFoundError: if ``path`` does not exist.
        ValueError: on an invalid argument (unknown collective, n or g < 1).
        InputFileError: naming the file (and the line where there is one) when
            the file is not nccl-tests output, holds several tables, has a row
            cut short (other than the very last row, which is skipped with a
            warning and counted in ``skipped_truncated``), a non-numeric, NaN,
            zero or negative time, or contradicts itself or an argument; and
            when the collective, n or g cannot be told — the message then names
            the flag to pass (``--collective``, ``--num-ranks``,
            ``--ranks-per-node``).

    References:
        nccl-tests ``src/common.cu`` and ``src/util.cu`` (output format);
        nccl-tests ``doc/PERFORMANCE.md`` (algbw, busbw, bus-bandwidth factors).

    Example:
        >>> import pathlib, tempfile
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "ar.txt"
        >>> _ = p.write_text(
        ...     "# Collective test starting: all_reduce_perf\\n"
        ...     "# nThread 1 nGpus 2 minBytes 8 maxBytes 16 step: 2(factor) warmup iters: 5\\n"
        ...     "#  Rank  0 Group  0 Pid  17 on  node1 device  0 [0000:07:00] NVIDIA H100\\n"
        ...     "#  Rank  1 Group  0 Pid  17 on  node1 device  1 [0000:08:00] NVIDIA H100\\n"
        ...     "        8   2  float  sum  -1  12.25  0.00  0.00  0  12.00  0.00  0.00  0\\n"
        ...     "       16   4  float  sum  -1  11.77  0.00  0.00  0  11.69  0.00  0.00  0\\n")
        >>> t = parse_nccl_tests(p)
        >>> t.collective, t.num_ranks, t.ranks_per_node, t.device_kind
        ('all_reduce', 2, 2, 'NVIDIA H100')
        >>> t.rows[1].message_bytes, t.rows[1].in_place.time_s
        (16, 1.169e-05)
        >>> t.sources["num_ranks"]
        'device lines (lines 3–4)'

    (Long for its documentation: the body is 27 lines.)
    """
    path_s = str(path)
    collective = _check_args(collective, num_ranks, ranks_per_node)
    sc, table = _read_table(path_s, path)
    rows, raws, layout, notes, skipped0, skipped_cut = _parse_rows(path_s, table, sc)
    if not rows:
        raise InputFileError(path_s, table.rows[0][0], "the table has no row with size > 0")
    sources: dict[str, str] = {}
    collective, n, g, dev_ok = _detect_run(
        path_s, sc, rows, raws, collective, num_ranks, ranks_per_node, sources, notes
    )
    device_kind = _device_kind(sc, sources, notes)
    hosts = tuple(dict.fromkeys(d.host for d in sc.devices)) if dev_ok else ()
    return ParsedTable(
        path=path_s,
        collective=collective,
        num_ranks=n,
        ranks_per_node=g,
        device_kind=device_kind,
        rows=tuple(rows),
        sources=sources,
        layout=layout,
        skipped_zero_size=skipped0,
        skipped_truncated=skipped_cut,
        notes=tuple(notes),
        versions=dict(sc.versions),
        hosts=hosts,
    )


#: The largest nccl-tests output read (a run prints ~1 KiB per size, a few
#: thousand lines with per-rank device lines): larger is not nccl-tests output.
MAX_NCCL_TESTS_BYTES = 16 * 1024**2


def _read_table(path_s: str, path) -> tuple[_Scan, _Table]:
    """The scanned file and its one result table (InputFileError: empty, none, several)."""
    size = Path(path).stat().st_size
    if size > MAX_NCCL_TESTS_BYTES:
        raise InputFileError(
            path_s,
            None,
            f"{size / 1024**2:.0f} MiB, more than the {MAX_NCCL_TESTS_BYTES // 1024**2} MiB an "
            "nccl-tests output can be (one line per size); is this the right file?",
        )
    data = Path(path).read_bytes()
    if b"\0" in data[:4096]:
        raise InputFileError(
            path_s, None, "is not nccl-tests output: binary data (a NUL byte in the first 4 KiB)"
        )
    if not data.strip():
        raise InputFileError(path_s, None, "is empty; expected the output of an nccl-tests run")
    sc = _scan(data.decode("utf-8", errors="replace"))
    tables = [t for t in sc.tables if t.rows]
    if not tables:
        raise InputFileError(
            path_s,
            None,
            "is not nccl-tests output: found no result table (rows such as "
            "'1048576  262144  float  sum  -1  156.5  6.70  10.05  0  155.0  6.77  10.15  0')",
        )
    if len(tables) > 1:
        starts = [t.header_line or t.rows[0][0] for t in tables]
        raise InputFileError(
            path_s,
            starts[1],
            f"holds {len(tables)} nccl-tests result tables (at lines "
            f"{', '.join(map(str, starts))}); import one run per file (an nccl-tests built "
            "without MPI but started as several processes prints one table per process)",
        )
    return sc, tables[0]


def _detect_run(path_s, sc, rows, raws, collective, num_ranks, ranks_per_node, sources, notes):
    """(collective, n, g, device lines usable) from the file and the flags; fills ``sources``.

    Raises:
        InputFileError: when the file contradicts itself or a flag, or cannot tell
            the collective, n or g (naming the flag to pass).
    """
    collective = _detect_collective(path_s, sc, collective, sources, notes)
    ratio, ratio_line = _count_ratio(path_s, rows)
    who = None
    if collective is not None:
        where = sources["collective"]
        who = f"--collective {collective}" if where.endswith("flag") else f"{collective} ({where})"
        _check_shape(path_s, collective, who, rows, ratio, ratio_line)
        # launcher lines of another test say nothing about this one
        sc.commands = [c for c in sc.commands if NCCL_TESTS_COLLECTIVES.get(c.stem) == collective]
    dev_ok = _device_evidence(path_s, sc, notes)
    n = _detect_num_ranks(
        path_s, sc, collective, who, num_ranks, rows, raws, ratio, ratio_line, dev_ok, sources
    )
    g = _detect_ranks_per_node(path_s, sc, n, ranks_per_node, dev_ok, sources)
    _require_detected(path_s, rows, raws, ratio, collective, n, g)
    if g > n or n % g:
        raise InputFileError(
            path_s,
            None,
            f"ranks per node {g} ({sources['ranks_per_node']}) must divide the number of ranks "
            f"{n} ({sources['num_ranks']})",
        )
    return collective, n, g, dev_ok


def _require_detected(path_s, rows, raws, ratio, collective, n, g) -> None:
    """InputFileError naming the flags to pass for whatever could not be told."""
    missing = []
    if collective is None:
        fits = _compatible(rows, ratio, n, raws)
        hint = f"; its columns fit {_join(fits)}" if fits else ""
        missing.append(
            (
                "the collective",
                f"--collective NAME (no echoed *_perf command line or '# Collective test "
                f"starting' header{hint})",
            )
        )
    if n is None:
        missing.append(
            (
                "the number of ranks",
                "--num-ranks N (no '#  Rank … device …' lines or launcher command, and the "
                "columns do not pin it)",
            )
        )
    if g is None:
        missing.append(
            ("the ranks per node", "--ranks-per-node G (no '#  Rank … on HOST …' lines)")
        )
    if missing:
        whats = _join([m[0] for m in missing], "and")
        flags = " and ".join(m[1] for m in missing)
        raise InputFileError(path_s, None, f"cannot tell {whats} from the file; pass {flags}")


def _summary(t: ParsedTable) -> dict:
    sizes = [r.message_bytes for r in t.rows]
    return {
        "path": t.path,
        "collective": t.collective,
        "num_ranks": t.num_ranks,
        "ranks_per_node": t.ranks_per_node,
        "device_kind": t.device_kind,
        "dtypes": list(t.dtypes),
        "rows": len(t.rows),
        "records": 2 * len(t.rows),
        "min_bytes": min(sizes),
        "max_bytes": max(sizes),
        "sources": dict(t.sources),
        "layout": t.layout,
        "skipped_zero_size": t.skipped_zero_size,
        "skipped_truncated": t.skipped_truncated,
        "notes": list(t.notes),
        "versions": dict(t.versions),
    }


def import_nccl_tests(
    paths: str | os.PathLike | Iterable[str | os.PathLike],
    output: str | os.PathLike,
    *,
    collective: str | None = None,
    num_ranks: int | None = None,
    ranks_per_node: int | None = None,
    mode: str = "new",
) -> dict:
    """Import nccl-tests output files into one measurement file (JSON Lines, schema v1).

    Every file is parsed (:func:`parse_nccl_tests`, with the same
    ``collective``/``num_ranks``/``ranks_per_node`` for all of them) before
    anything is written; the records go to a temporary file next to
    ``output`` (through :class:`~calibration.RecordWriter`, which validates
    each) that is renamed onto ``output`` only when complete, so no output is
    ever left half-written. Each row gives two records (out-of-place,
    in-place); see :meth:`ParsedTable.to_records`.

    Args:
        paths: one nccl-tests output file or several.
        output: the measurement file to write.
        collective, num_ranks, ranks_per_node: for files that cannot tell
            (see :func:`parse_nccl_tests`); they apply to every file.
        mode: ``"new"`` (refuse an existing non-empty ``output``) or
            ``"overwrite"`` (replace it).

    Returns:
        A summary: ``{"output", "mode", "records", "files": [per file: path,
        collective, num_ranks, ranks_per_node, device_kind, dtypes, rows,
        records, min_bytes, max_bytes, sources, layout, skipped_zero_size,
        skipped_truncated, notes, versions]}``.

    Raises:
        ValueError: on an invalid argument or mode, or no input file.
        FileExistsError: in ``"new"`` mode if ``output`` exists and is not
            empty (checked before parsing and again before the rename).
        FileNotFoundError: if an input file does not exist.
        InputFileError: see :func:`parse_nccl_tests`.

    Example:
        >>> import pathlib, tempfile
        >>> d = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (d / "ag.txt").write_text(
        ...     "$ mpirun -np 2 ./build/all_gather_perf -b 8 -e 16 -f 2 -g 1\\n"
        ...     "       8   1  float  none  -1  10.52  0.00  0.00  0  10.01  0.00  0.00  0\\n"
        ...     "      16   2  float  none  -1  10.01  0.00  0.00  0  10.07  0.00  0.00  0\\n")
        >>> s = import_nccl_tests(d / "ag.txt", d / "m.jsonl", ranks_per_node=2)
        >>> s["records"], s["files"][0]["num_ranks"], s["files"][0]["sources"]["num_ranks"]
        (4, 2, 'launcher command (line 1)')
    """
    if mode not in ("new", "overwrite"):
        raise ValueError(f"mode must be 'new' or 'overwrite', got {mode!r}")
    _check_args(collective, num_ranks, ranks_per_node)
    if isinstance(paths, str | os.PathLike):
        paths = [paths]
    paths = list(paths)
    if not paths:
        raise ValueError("paths: expected at least one nccl-tests output file")
    out = Path(output)
    refuse_input(out, paths, "output")
    _refuse_existing(out, mode)
    tables = [
        parse_nccl_tests(
            p, collective=collective, num_ranks=num_ranks, ranks_per_node=ranks_per_node
        )
        for p in paths
    ]
    records = [rec for t in tables for rec in t.to_records()]
    _write_records(out, records, mode)
    return {
        "output": str(out),
        "mode": mode,
        "records": len(records),
        "files": [_summary(t) for t in tables],
    }


def _write_records(out: Path, records: list[dict], mode: str) -> None:
    """Write ``records`` to a temporary file beside ``out``, then rename it onto ``out``."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.stem}.{os.getpid()}{out.suffix}.tmp"
    try:
        with RecordWriter(tmp, mode="overwrite") as w:
            for rec in records:
                w.write(rec)
        _refuse_existing(out, mode)
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            tmp.unlink()


def _refuse_existing(out: Path, mode: str) -> None:
    if mode == "new" and out.exists() and (out.is_dir() or out.stat().st_size > 0):
        raise FileExistsError(
            f"{out} already exists; pass mode='overwrite' (CLI: --overwrite) to replace it, "
            "or choose another output file"
        )
