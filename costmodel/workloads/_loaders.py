"""Workloads for your own model: from a layer file (JSON or CSV) or from a parameter pytree.

Layer file formats (one entry per parameter tensor, in FORWARD order):

JSON::

    {"name": "my_cnn",
     "source": "optional: where the shapes come from",
     "layers": [
        {"name": "conv1.weight", "params": 9408, "fwd_flops": 236027904},
        {"name": "bn1.weight", "params": 64},
        {"name": "bn1.bias", "params": 64, "fwd_flops": 5619712, "bwd_flops": 11239424}
     ]}

CSV (header required; ``#`` lines and blank lines are ignored)::

    name,params,fwd_flops,bwd_flops
    conv1.weight,9408,236027904,
    bn1.weight,64,0,
    bn1.bias,64,5619712,11239424

Fields: ``name`` (unique, non-empty), ``params`` (element count, integer >= 1),
``fwd_flops`` (forward FLOPs PER SAMPLE attributed to the tensor, FLOPs = 2 ×
MACs, finite >= 0; optional, default 0 — then give the workload a measured
step time with :meth:`Workload.with_step_time`), ``bwd_flops`` (optional,
default 2 × fwd_flops), ``gemm_rows`` and ``gemm_width`` (optional, both or
neither, each ≥ 1, only on a tensor with ``fwd_flops``; absent: no GEMM known:
the matrix product of the layer whose FLOPs the tensor carries, as rows per
sample — 1 for a dense layer on one vector, the tokens of a sequence, a
convolution's output pixels H·W — and the smaller of its other two dimensions —
min(in, out), or min(C_out, C_in·k_h·k_w) —, which say how far below the full
FLOP rate a small GEMM runs: ``Workload.gemm_dims``). Attribute each layer's
FLOPs to its last tensor (see :class:`Workload`). Reading is the only file access in ``costmodel``; nothing
is written.
"""

from __future__ import annotations

import bisect
import collections
import csv
import dataclasses
import io
import json
import math
import numbers
import os
import re

import equinox as eqx
import jax
import numpy as np

from .._errors import InputFileError, read_text_bounded
from ._hf import looks_like_hf_config, workload_from_hf_config
from ._workload import WORKLOAD_KINDS, TransformerShape, Workload

__all__ = ["load_layers", "workload_from_pytree", "workload_to_layers"]

_FIELDS = ("name", "params", "fwd_flops", "bwd_flops", "gemm_rows", "gemm_width")
_GEMM_FIELDS = ("gemm_rows", "gemm_width")
#: The largest GEMM dimension a layer file may give (elements).
MAX_GEMM_DIM = 1e12
_TOP_KEYS = ("name", "source", "kind", "transformer", "layers")


class _Layer:
    __slots__ = ("name", "params", "fwd", "bwd", "line", "gemm")

    def __init__(self, name, params, fwd, bwd, line, gemm=(0.0, 0.0)):
        self.name, self.params, self.fwd, self.bwd, self.line = name, params, fwd, bwd, line
        self.gemm = gemm


# -- value checks shared by JSON and CSV -------------------------------------------------


#: Input bounds (issue 18): a tensor holds at most 10^13 elements (40 TB in
#: fp32, beyond any model's single tensor), a layer's FLOPs per sample are at
#: most 10^20; a layer file is at most 64 MiB and nests at most 64 levels.
MAX_PARAMS = 10**13
MAX_FLOPS = 1e20
MAX_LAYER_FILE_BYTES = 64 * 1024**2
MAX_JSON_DEPTH = 64
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


def json_depth(text: str) -> int:
    """The deepest nesting of arrays/objects in JSON ``text`` (0 for a scalar), without recursion.

    Strings are removed first, then brackets are counted with a running sum
    (numpy), so a 64 MiB text takes well under a second. On malformed text the
    number is approximate, which is all the limit needs.

    Example:
        >>> json_depth('{"a": [1, {"b": "[[["}]}')
        3
    """
    stripped = _JSON_STRING.sub("", text).encode("utf-8", "replace")
    b = np.frombuffer(stripped, dtype=np.uint8)
    step = np.zeros(b.shape, dtype=np.int64)
    step[(b == ord("[")) | (b == ord("{"))] = 1
    step[(b == ord("]")) | (b == ord("}"))] = -1
    return int(np.cumsum(step).max(initial=0))


def _check_params(path, line, where, value) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InputFileError(
            path,
            line,
            f"{where}: 'params' must be an integer element count >= 1, got {_short(value)}",
        )
    if value < 1 or value > MAX_PARAMS:
        raise InputFileError(
            path, line, f"{where}: 'params' must be >= 1 and <= 1e13 elements, got {_short(value)}"
        )
    return int(value)


def _short(v) -> str:
    """``repr(v)`` cut to 40 characters (a 10^30 integer has 31 digits)."""
    r = repr(v)
    return r if len(r) <= 40 else f"{r[:20]}…({len(r)} characters)"


def _check_amount(path, line, where, key, value, *, unit: str, limit: float, shown: str) -> float:
    """A layer's number ``value``: finite, >= 0 and <= ``limit`` (shown as ``shown``), in ``unit``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InputFileError(
            path, line, f"{where}: {key!r} must be a number of {unit}, got {value!r}"
        )
    try:
        value = float(value)
    except OverflowError:  # an integer beyond float range
        value = math.inf
    if not math.isfinite(value) or value < 0 or value > limit:
        raise InputFileError(
            path,
            line,
            f"{where}: {key!r} must be finite, >= 0 and <= {shown} ({unit}), got {value}",
        )
    return value


def _check_flops(path, line, where, key, value) -> float:
    return _check_amount(
        path, line, where, key, value, unit="FLOPs per sample", limit=MAX_FLOPS, shown="1e20"
    )


def _check_gemm(path, lines, where, given: dict, fwd: float) -> tuple[float, float]:
    """A layer's (gemm_rows, gemm_width): both or neither, each a dimension ≥ 1 element,
    and only on a tensor that carries FLOPs (its layer's matrix product).

    ``given``: key → value of the keys present (CSV: non-empty cells); ``lines``:
    key → line of each.
    """
    if not given:
        return 0.0, 0.0
    rows, width = (
        _check_amount(path, lines[k], where, k, given[k], unit="elements", limit=MAX_GEMM_DIM,
                      shown="1e12") if k in given else None
        for k in _GEMM_FIELDS
    )  # fmt: skip
    for k, v in zip(_GEMM_FIELDS, (rows, width), strict=True):
        if v is not None and v < 1:
            raise InputFileError(
                path, lines[k], f"{where}: {k!r} must be a matrix dimension >= 1 element, got {v}"
            )
    if rows is None or width is None:
        have, lack = (_GEMM_FIELDS[0], _GEMM_FIELDS[1]) if width is None else _GEMM_FIELDS[::-1]
        raise InputFileError(
            path,
            lines[have],
            f"{where}: {have!r} without {lack!r}: a layer's matrix product needs both (rows per "
            "sample and the smaller other dimension), or neither",
        )
    if fwd <= 0:
        raise InputFileError(
            path,
            lines[_GEMM_FIELDS[0]],
            f"{where}: gemm_rows and gemm_width belong on the tensor that carries the layer's "
            "FLOPs (this one has fwd_flops 0)",
        )
    return rows, width


def _check_name(path, line, where, value) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InputFileError(
            path, line, f"{where}: 'name' must be a non-empty string, got {value!r}"
        )
    return value.strip()


# -- JSON ---------------------------------------------------------------------------------


class _Lines:
    """Map character offsets of a text to 1-based line numbers."""

    def __init__(self, text: str):
        self._starts = [0] + [i + 1 for i, ch in enumerate(text) if ch == "\n"]

    def __call__(self, offset: int) -> int:
        return bisect.bisect_right(self._starts, offset)


def _skip_ws(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    return pos


def _scan_object(text, pos, decoder, lines) -> tuple[dict[str, int], int]:
    """Keys of the JSON object starting at ``pos`` with their lines; returns (keys, end)."""
    keys: dict[str, int] = {}
    pos = _skip_ws(text, pos + 1)
    while text[pos] != "}":
        key_line = lines(pos)
        key, pos = decoder.raw_decode(text, pos)
        pos = _skip_ws(text, pos)
        pos = _skip_ws(text, pos + 1)  # ':'
        keys[key] = key_line
        value_start = pos
        _, pos = decoder.raw_decode(text, pos)
        if key == "layers":
            keys["\0layers_start"] = value_start
        pos = _skip_ws(text, pos)
        if text[pos] == ",":
            pos = _skip_ws(text, pos + 1)
    return keys, pos + 1


def _json_positions(text: str):
    """Lines of the top-level keys and of each element (and its keys) of ``layers``.

    Only called on text that ``json.loads`` accepted, so the scan cannot fail on
    syntax; any surprise makes it give up (errors then carry fewer line numbers).
    """
    lines = _Lines(text)
    decoder = json.JSONDecoder()
    try:
        pos = _skip_ws(text, 0)
        if text[pos] != "{":
            return lines(pos), {}, []
        top_line = lines(pos)
        top_keys, _ = _scan_object(text, pos, decoder, lines)
        elements = []
        start = top_keys.pop("\0layers_start", None)
        if start is not None and text[start] == "[":
            pos = _skip_ws(text, start + 1)
            while text[pos] != "]":
                if text[pos] == "{":
                    keys, end = _scan_object(text, pos, decoder, lines)
                else:
                    keys, end = {}, decoder.raw_decode(text, pos)[1]
                elements.append((lines(pos), keys))
                pos = _skip_ws(text, end)
                if text[pos] == ",":
                    pos = _skip_ws(text, pos + 1)
        return top_line, top_keys, elements
    except (ValueError, IndexError):
        return 1, {}, []


def _parse_extras(path: str, doc: dict, top_keys: dict, top_line) -> dict:
    """The optional ``kind`` and ``transformer`` keys as Workload fields (checked)."""
    out = {}
    if "kind" in doc:
        kind = doc["kind"]
        if kind not in ("", *WORKLOAD_KINDS):
            raise InputFileError(
                path,
                top_keys.get("kind", top_line),
                f"'kind' must be one of {', '.join(WORKLOAD_KINDS)}, got {kind!r}",
            )
        out["kind"] = kind
    if doc.get("transformer") is not None:
        t = doc["transformer"]
        line = top_keys.get("transformer", top_line)
        fields = [f.name for f in dataclasses.fields(TransformerShape)]
        if not isinstance(t, dict) or set(t) - set(fields):
            raise InputFileError(
                path, line, f"'transformer' must be an object with keys {', '.join(fields)}"
            )
        try:
            out["transformer"] = TransformerShape(**t)
        except (TypeError, ValueError) as e:
            raise InputFileError(path, line, f"'transformer': {e}") from None
    return out


def _parse_json(path: str, text: str) -> tuple[str | None, str | None, list[_Layer]]:
    if not text.strip():  # as `ddltune show` says it, not "invalid JSON: Expecting value"
        raise InputFileError(path, 1, "the file is empty: expected a JSON layer file")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputFileError(path, e.lineno, f"invalid JSON: {e.msg} (column {e.colno})") from None
    top_line, top_keys, elements = _json_positions(text)
    if not isinstance(doc, dict):
        raise InputFileError(
            path,
            top_line,
            f'expected a JSON object {{"name": ..., "layers": [...]}}, got {type(doc).__name__}',
        )
    for key in doc:
        if key not in _TOP_KEYS:
            raise InputFileError(
                path,
                top_keys.get(key, top_line),
                f"unknown key {key!r} (expected {', '.join(_TOP_KEYS)})",
            )
    name = doc.get("name")
    if name is not None:
        name = _check_name(path, top_keys.get("name", top_line), "top level", name)
    source = doc.get("source")
    if source is not None and not isinstance(source, str):
        raise InputFileError(
            path, top_keys.get("source", top_line), f"'source' must be a string, got {source!r}"
        )
    if "layers" not in doc:
        raise InputFileError(
            path, top_line, "missing key 'layers' (a list of {name, params, fwd_flops} objects)"
        )
    layers_line = top_keys.get("layers", top_line)
    items = doc["layers"]
    if not isinstance(items, list):
        raise InputFileError(
            path, layers_line, f"'layers' must be a list, got {type(items).__name__}"
        )
    if not items:
        raise InputFileError(path, layers_line, "'layers' is empty: give at least one tensor")
    out = []
    for i, item in enumerate(items):
        line, keys = elements[i] if i < len(elements) else (layers_line, {})
        where = f"layer {i + 1}"
        if not isinstance(item, dict):
            raise InputFileError(
                path, line, f"{where}: expected an object with name and params, got {item!r}"
            )
        for key in item:
            if key not in _FIELDS:
                raise InputFileError(
                    path,
                    keys.get(key, line),
                    f"{where}: unknown key {key!r} (expected {', '.join(_FIELDS)})",
                )
        for key in ("name", "params"):
            if key not in item:
                raise InputFileError(path, line, f"{where}: missing key {key!r}")
        lname = _check_name(path, keys.get("name", line), where, item["name"])
        where = f"layer {i + 1} ({lname!r})"
        params = _check_params(path, keys.get("params", line), where, item["params"])
        fwd = item.get("fwd_flops")
        fwd = (
            0.0
            if fwd is None
            else _check_flops(path, keys.get("fwd_flops", line), where, "fwd_flops", fwd)
        )
        bwd = item.get("bwd_flops")
        if bwd is not None:
            bwd = _check_flops(path, keys.get("bwd_flops", line), where, "bwd_flops", bwd)
        given = {k: item[k] for k in _GEMM_FIELDS if k in item}
        lines = {k: keys.get(k, line) for k in _GEMM_FIELDS}
        gemm = _check_gemm(path, lines, where, given, fwd)
        out.append(_Layer(lname, params, fwd, bwd, line, gemm))
    return name, source, out, _parse_extras(path, doc, top_keys, top_line)


# -- CSV ----------------------------------------------------------------------------------


def _plain_number(raw: str) -> str:
    """``raw`` unchanged, or ValueError for a Python literal a number in a file is not
    (``5_12``, which ``int`` and ``float`` read as 512)."""
    if "_" in raw:
        raise ValueError(raw)
    return raw


def _csv_float(raw: str) -> float:
    """A CSV cell as a float, refusing what only Python reads as one (``5_12``)."""
    return float(_plain_number(raw))


def _parse_csv(path: str, text: str) -> list[_Layer]:
    reader = csv.reader(io.StringIO(text, newline=""))
    header = None
    header_line = 1
    columns: dict[str, int] = {}
    out = []
    for row in reader:
        line = reader.line_num
        if not row or all(not c.strip() for c in row) or row[0].lstrip().startswith("#"):
            continue
        cells = [c.strip() for c in row]
        if header is None:
            header, header_line = cells, line
            for j, col in enumerate(cells):
                if col not in _FIELDS:
                    raise InputFileError(
                        path,
                        line,
                        f"unknown column {col!r} in the header (expected "
                        "name,params,fwd_flops[,bwd_flops][,gemm_rows,gemm_width])",
                    )
                if col in columns:
                    raise InputFileError(path, line, f"column {col!r} appears twice in the header")
                columns[col] = j
            for col in ("name", "params", "fwd_flops"):
                if col not in columns:
                    raise InputFileError(
                        path,
                        line,
                        f"missing column {col!r} in the header {','.join(cells)!r} "
                        "(expected name,params,fwd_flops[,bwd_flops])",
                    )
            continue
        if len(cells) != len(header):
            raise InputFileError(
                path, line, f"expected {len(header)} fields ({','.join(header)}), got {len(cells)}"
            )
        where = f"row {len(out) + 1}"
        lname = _check_name(path, line, where, cells[columns["name"]])
        where = f"row {len(out) + 1} ({lname!r})"
        raw = cells[columns["params"]]
        try:
            params = int(_plain_number(raw))
        except ValueError:
            raise InputFileError(
                path, line, f"{where}: 'params' must be an integer element count >= 1, got {raw!r}"
            ) from None
        params = _check_params(path, line, where, params)
        flops = {}
        for col in ("fwd_flops", "bwd_flops"):
            raw = cells[columns[col]] if col in columns else ""
            if not raw:
                flops[col] = None
                continue
            try:
                value = _csv_float(raw)
            except ValueError:
                raise InputFileError(
                    path,
                    line,
                    f"{where}: {col!r} must be a number of FLOPs per sample, got {raw!r}",
                ) from None
            flops[col] = _check_flops(path, line, where, col, value)
        fwd = 0.0 if flops["fwd_flops"] is None else flops["fwd_flops"]
        given = {}
        for col in _GEMM_FIELDS:
            raw = cells[columns[col]] if col in columns else ""
            if not raw:
                continue
            try:
                given[col] = _csv_float(raw)
            except ValueError:
                raise InputFileError(
                    path, line, f"{where}: {col!r} must be a number of elements, got {raw!r}"
                ) from None
        gemm = _check_gemm(path, dict.fromkeys(_GEMM_FIELDS, line), where, given, fwd)
        out.append(_Layer(lname, params, fwd, flops["bwd_flops"], line, gemm))
    if header is None:
        raise InputFileError(
            path, 1, "empty file: expected a header line name,params,fwd_flops[,bwd_flops]"
        )
    if not out:
        raise InputFileError(path, header_line, "no layers after the header")
    return out


# -- public -------------------------------------------------------------------------------


def load_layers(
    path: str | os.PathLike,
    *,
    batch_size: int = 64,
    dtype_bytes: int = 4,
    name: str | None = None,
) -> Workload:
    """Read a workload from a JSON or CSV layer list (formats in this module's docstring).

    The format is chosen by the extension (``.json`` / ``.csv``), else by the
    first non-blank character (``{`` means JSON). A Hugging Face ``config.json``
    (a JSON object with ``model_type`` and no ``layers``) is read by
    :func:`workload_from_hf_config` (its default sequence length).

    Args:
        path: the layer file.
        batch_size: samples per worker per step, integer >= 1.
        dtype_bytes: bytes per gradient element, integer >= 1 (fp32 = 4, bf16 = 2).
        name: workload name; default: the JSON ``name`` key, else the file's stem.

    Returns:
        A :class:`Workload` with one tensor per entry, in file order;
        ``source`` is the JSON ``source`` key or ``"layer file <path>"``.

    Raises:
        InputFileError: (a ``ValueError``) naming the file and, where there is
            one, the 1-based line: missing or unreadable file, invalid JSON, a
            missing key or column, an unknown key or column, non-integer or
            < 1 ``params``, NaN/infinite/negative/non-numeric FLOPs, an empty
            layer list, duplicate tensor names.
        ValueError: on an invalid ``batch_size`` or ``dtype_bytes``.

    Example:
        >>> import pathlib, tempfile
        >>> d = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (d / "mlp.csv").write_text("name,params,fwd_flops\\nfc.weight,7840,0\\nfc.bias,10,15690\\n")
        >>> w = load_layers(d / "mlp.csv", batch_size=32)
        >>> w.name, w.total_params, w.total_bwd_flops
        ('mlp', 7850, 31380.0)

    (Long for its documentation: the body is 65 lines.)
    """
    path_str = os.fspath(path)
    text = read_text_bounded(path_str, MAX_LAYER_FILE_BYTES, "layer file")

    ext = os.path.splitext(path_str)[1].lower()
    is_json = ext == ".json" or (ext != ".csv" and text.lstrip().startswith("{"))
    file_name, source, extras = None, None, {}
    if is_json and json_depth(text) > MAX_JSON_DEPTH:
        raise InputFileError(path_str, None, f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
    if is_json and looks_like_hf_config(text):  # a Hugging Face config.json (--hf-config)
        return workload_from_hf_config(path_str, batch_size, dtype_bytes=dtype_bytes, name=name)
    if is_json:
        file_name, source, layers, extras = _parse_json(path_str, text)
    else:
        layers = _parse_csv(path_str, text)

    seen: dict[str, int | None] = {}
    for layer in layers:
        if layer.name in seen:
            first = seen[layer.name]
            also = f" (first on line {first})" if first is not None else ""
            raise InputFileError(
                path_str, layer.line, f"duplicate tensor name {layer.name!r}{also}"
            )
        seen[layer.name] = layer.line

    stem = os.path.splitext(os.path.basename(path_str))[0] or "custom"
    fwd = np.array([la.fwd for la in layers], dtype=np.float64)
    bwd = np.array([2.0 * la.fwd if la.bwd is None else la.bwd for la in layers], dtype=np.float64)
    gemm = np.array([la.gemm for la in layers], dtype=np.float64)
    return Workload(
        name=name or file_name or stem,
        tensor_names=tuple(la.name for la in layers),
        param_counts=np.array([la.params for la in layers], dtype=np.int64),
        fwd_flops=fwd,
        bwd_flops=bwd,
        batch_size=batch_size,
        dtype_bytes=dtype_bytes,
        source=source if source is not None else f"layer file {path_str}",
        gemm_dims=gemm if gemm.any() else None,
        **extras,
    )


def workload_to_layers(workload: Workload) -> dict:
    """The JSON document (a dict) that :func:`load_layers` reads back as ``workload``.

    Write it with ``json.dump``; ``batch_size``, ``dtype_bytes`` and
    ``step_time_s`` are not part of the file and are passed when loading.

    Example:
        >>> from costmodel.workloads import get_workload
        >>> doc = workload_to_layers(get_workload("alexnet"))
        >>> doc["layers"][0]
        {'name': 'features.0.weight', 'params': 23232, 'fwd_flops': 0.0, 'bwd_flops': 0.0}
    """
    extras = {"kind": workload.kind} if workload.kind else {}
    if workload.transformer is not None:
        extras["transformer"] = dataclasses.asdict(workload.transformer)
    return {
        "name": workload.name,
        "source": workload.source,
        **extras,
        "layers": [
            {
                "name": n,
                "params": int(p),
                "fwd_flops": float(f),
                "bwd_flops": float(b),
                **({"gemm_rows": float(g[0]), "gemm_width": float(g[1])} if any(g) else {}),
            }
            for n, p, f, b, g in zip(
                workload.tensor_names,
                workload.param_counts,
                workload.fwd_flops,
                workload.bwd_flops,
                np.zeros((workload.num_tensors, 2))
                if workload.gemm_dims is None
                else workload.gemm_dims,
                strict=True,
            )
        ],
    }


def _key_name(entry) -> str:
    for attr in ("key", "name", "idx"):
        if hasattr(entry, attr):
            return str(getattr(entry, attr))
    return str(entry)


def _is_array_like(x) -> bool:
    return eqx.is_array(x) or isinstance(x, jax.ShapeDtypeStruct)


def workload_from_pytree(
    params_tree,
    *,
    name: str = "custom",
    batch_size: int = 64,
    fwd_flops_per_sample: float | None = None,
    dtype_bytes: int | None = None,
) -> Workload:
    """A workload with one tensor per array leaf of a parameter pytree.

    Works with an equinox module (pass ``eqx.filter(model, eqx.is_array)``, or
    the model itself: non-array leaves are skipped), a flax ``params`` dict, or
    any pytree of ``jax.Array`` / ``numpy.ndarray`` / ``jax.ShapeDtypeStruct``
    leaves (so ``jax.eval_shape`` describes a model too large to materialise).
    Tensor names are the leaf paths joined with dots (``layers.0.weight``,
    ``params.Dense_0.kernel``). Zero-size leaves are skipped.

    Order: the flatten order of ``jax.tree_util`` is taken as the forward
    order. For equinox modules this is the field order; dicts (flax) are
    flattened in sorted key order, so ``Dense_10`` precedes ``Dense_2`` —
    use :func:`load_layers` when the bucket order matters.

    Args:
        params_tree: the parameter pytree.
        name: workload name, non-empty.
        batch_size: samples per worker per step, integer >= 1.
        fwd_flops_per_sample: total forward FLOPs per sample (FLOPs = 2 × MACs),
            finite >= 0, spread over the tensors in proportion to their
            parameter counts; ``None`` gives zero FLOPs (then set a measured
            step time with :meth:`Workload.with_step_time`). Backward = 2 × forward.
        dtype_bytes: bytes per gradient element; ``None`` takes the itemsize of
            the leaves' dtype (the one holding the most parameters).

    Returns:
        The :class:`Workload`.

    Raises:
        ValueError: when the tree has no non-empty array leaf, or an argument is
            out of range.

    Example:
        >>> import equinox as eqx, jax
        >>> mlp = eqx.nn.MLP(784, 10, width_size=128, depth=1, key=jax.random.key(0))
        >>> w = workload_from_pytree(eqx.filter(mlp, eqx.is_array), name="mlp")
        >>> w.tensor_names
        ('layers.0.weight', 'layers.0.bias', 'layers.1.weight', 'layers.1.bias')
        >>> w.total_params == 784 * 128 + 128 + 128 * 10 + 10
        True

    (Long for its documentation: the body is 52 lines.)
    """
    leaves, _ = jax.tree_util.tree_flatten_with_path(params_tree, is_leaf=_is_array_like)
    names, counts, itemsizes = [], [], collections.Counter()
    for path, leaf in leaves:
        if not _is_array_like(leaf):
            continue
        size = int(np.prod(leaf.shape, dtype=np.int64))
        if size == 0:
            continue
        names.append(".".join(_key_name(k) for k in path) or "param")
        counts.append(size)
        itemsizes[np.dtype(leaf.dtype).itemsize] += size
    if not names:
        raise ValueError(
            "workload_from_pytree: params_tree has no non-empty array leaf "
            f"(got {type(params_tree).__name__}); pass eqx.filter(model, eqx.is_array) "
            "or a flax params dict."
        )
    if len(set(names)) != len(names):  # e.g. a dict key containing a dot: use keystr paths
        names = [
            jax.tree_util.keystr(path)
            for path, leaf in leaves
            if _is_array_like(leaf) and int(np.prod(leaf.shape, dtype=np.int64)) > 0
        ]
    counts_arr = np.asarray(counts, dtype=np.int64)
    if fwd_flops_per_sample is None:
        fwd = np.zeros(len(names), dtype=np.float64)
    else:
        if (
            isinstance(fwd_flops_per_sample, bool)
            or not isinstance(fwd_flops_per_sample, numbers.Real)
            or not math.isfinite(fwd_flops_per_sample)
            or fwd_flops_per_sample < 0
        ):
            raise ValueError(
                "workload_from_pytree: fwd_flops_per_sample must be a finite number >= 0 "
                f"(FLOPs per sample) or None, got {fwd_flops_per_sample!r}."
            )
        fwd = float(fwd_flops_per_sample) * counts_arr / counts_arr.sum()
    if dtype_bytes is None:
        dtype_bytes = itemsizes.most_common(1)[0][0]
    return Workload(
        name=name,
        tensor_names=tuple(names),
        param_counts=counts_arr,
        fwd_flops=fwd,
        bwd_flops=2.0 * fwd,
        batch_size=batch_size,
        dtype_bytes=dtype_bytes,
        source="parameter pytree (FLOPs spread in proportion to parameter count)"
        if fwd_flops_per_sample is not None
        else "parameter pytree (no FLOPs: use a measured step time)",
    )
