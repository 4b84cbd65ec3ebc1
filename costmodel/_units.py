"""Units: parsing and formatting of sizes, times and bandwidths.

Inside ddltune every quantity is SI: seconds, bytes, bytes/second. These helpers
convert only at the edges (command line, reports).

Sizes follow nccl-tests' convention for ``-b/-e`` arguments: the suffixes
``K``, ``M``, ``G`` (and ``T``) are powers of 1024 (``64M`` = 64 × 1024² bytes).
``KiB``/``MiB``/``GiB`` are accepted as the same, and ``KB``/``MB``/``GB`` as
powers of 1000 (SI), so that nothing the user types is silently misread.
"""

from __future__ import annotations

import math
import re

__all__ = [
    "parse_bytes",
    "parse_bytes_list",
    "format_bytes",
    "format_seconds",
    "format_bandwidth",
    "format_first",
]

_SUFFIX = {
    "": 1,
    "B": 1,
    "K": 1024,
    "M": 1024**2,
    "G": 1024**3,
    "T": 1024**4,
    "KIB": 1024,
    "MIB": 1024**2,
    "GIB": 1024**3,
    "TIB": 1024**4,
    "KB": 1000,
    "MB": 1000**2,
    "GB": 1000**3,
    "TB": 1000**4,
}
#: The largest size :func:`parse_bytes` accepts, bytes (1 PiB): a larger bucket cap,
#: message or memory is a typo (1e30 was read and printed as 9.3e20 GiB).
MAX_BYTES = 1 << 50
_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")


def parse_bytes(text: str | int | float, *, name: str = "size", allow_zero: bool = True) -> int:
    """Parse a byte count such as ``"64M"``, ``"1K"``, ``"1.5G"`` or ``4096``.

    Args:
        text: the size. Suffixes K, M, G, T (and KiB, MiB, GiB, TiB) are powers
            of 1024, as in nccl-tests' ``-b``/``-e``; KB, MB, GB, TB are powers
            of 1000. Case-insensitive, except that a lowercase final ``b``
            after K/M/G/T (``Mb``, ``kb``) is refused: it reads as bits, as
            network rates are written (200Mbit). A bare number is bytes; at
            most :data:`MAX_BYTES` (1 PiB).
        name: the argument's name, used in error messages.
        allow_zero: whether 0 is valid.

    Returns:
        The size in bytes (int, ≥ 0).

    Raises:
        ValueError: on an unknown or bit suffix, a negative, non-finite or
            larger than 1 PiB number, a fractional byte count, or zero when
            ``allow_zero`` is false.

    Example:
        >>> parse_bytes("64M")
        67108864
        >>> parse_bytes("1K"), parse_bytes("1KB"), parse_bytes(512)
        (1024, 1000, 512)
    """
    if isinstance(text, bool):
        raise ValueError(f"{name}: expected a size in bytes such as 1K, 64M or 1G, got {text!r}")
    if isinstance(text, int | float):
        value = float(text)
        mult = 1
    else:
        m = _SIZE_RE.match(str(text))
        if not m:
            raise ValueError(
                f"{name}: expected a size in bytes such as 4096, 1K, 64M or 1G "
                f"(K/M/G are powers of 1024, as in nccl-tests), got {text!r}"
            )
        value = float(m.group(1))
        suffix = m.group(2).upper()
        if len(m.group(2)) == 2 and m.group(2)[1] == "b" and suffix in _SUFFIX:
            raise ValueError(
                f"{name}: {text!r} reads as bits (a lowercase b); a size is in bytes: "
                f"write {m.group(1)}{m.group(2)[0].upper()}B (powers of 1000) or "
                f"{m.group(1)}{m.group(2)[0].upper()} (powers of 1024)"
            )
        if suffix not in _SUFFIX:
            raise ValueError(
                f"{name}: unknown size suffix {m.group(2)!r} in {text!r}; "
                "use K, M, G, T (powers of 1024) or KB, MB, GB, TB (powers of 1000)"
            )
        mult = _SUFFIX[suffix]
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name}: a size must be a finite number ≥ 0, got {text!r}")
    nbytes = value * mult
    if nbytes > MAX_BYTES:
        raise ValueError(
            f"{name}: {text!r} is more than 1 PiB; no message, bucket or memory is that large"
        )
    if abs(nbytes - round(nbytes)) > 1e-6 * max(1.0, nbytes):
        raise ValueError(f"{name}: {text!r} is not a whole number of bytes")
    nbytes = int(round(nbytes))
    if nbytes == 0 and not allow_zero:
        raise ValueError(f"{name}: must be > 0 bytes, got {text!r}")
    return nbytes


def parse_bytes_list(text: str, *, name: str = "sizes", allow_zero: bool = True) -> list[int]:
    """Parse a comma-separated list of sizes (``"1K,64M,1G"``) into bytes.

    Raises:
        ValueError: if the list is empty, has an empty item (``"1K,,2K"``: a doubled
            or stray comma) or any element is invalid (see :func:`parse_bytes`).

    Example:
        >>> parse_bytes_list("1K, 4K,1M")
        [1024, 4096, 1048576]
    """
    parts = [p for p in str(text).split(",") if p.strip()]
    if not parts:
        raise ValueError(f"{name}: expected a comma-separated list of sizes, got {text!r}")
    if len(parts) != len(str(text).split(",")):
        raise ValueError(f"{name}: an empty item in {text!r} (a doubled or stray comma?)")
    return [parse_bytes(p, name=name, allow_zero=allow_zero) for p in parts]


def format_bytes(nbytes: float) -> str:
    """Format a byte count with binary prefixes, nccl-tests style.

    Example:
        >>> format_bytes(67108864), format_bytes(1536), format_bytes(100)
        ('64 MiB', '1.5 KiB', '100 B')
        >>> format_bytes(1000.2 * 2**20)  # 1000–1023 of a unit: digits, not 1e+03
        '1000 MiB'
    """
    nbytes = float(nbytes)
    for unit, mult in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if abs(nbytes) >= mult:
            v = nbytes / mult
            return f"{v:.0f} {unit}" if v == int(v) or abs(v) >= 100 else f"{v:.3g} {unit}"
    return f"{nbytes:.0f} B"


def format_first(items, limit: int, sep: str = ", ") -> str:
    """The first ``limit`` strings of ``items`` joined by ``sep``, and how many more.

    Example:
        >>> format_first(["a", "b", "c"], 2), format_first(["a"], 2), format_first("abc", 1, "; ")
        ('a, b and 1 more', 'a', 'a; and 2 more')
    """
    items = list(items)
    more = len(items) - limit
    joint = " " if sep.strip() == "," else sep  # "a, b and 1 more"; "a; b; and 1 more"
    tail = "" if more <= 0 else f"{joint}and {more} more"
    return sep.join(items[:limit]) + tail


def format_seconds(seconds: float, digits: int = 3) -> str:
    """Format a duration with a sensible unit (ns, µs, ms, s) and ``digits`` significant digits.

    Example:
        >>> format_seconds(2.5e-5), format_seconds(0.0123), format_seconds(3.0)
        ('25 µs', '12.3 ms', '3 s')
        >>> format_seconds(23.4567, digits=4)
        '23.46 s'
        >>> format_seconds(999.6e-6)  # rounded first, so it reads 1 ms, not 1e+03 µs
        '1 ms'
    """
    s = float(seconds)
    if not math.isfinite(s):
        return str(s)
    s = float(f"{s:.{digits}g}")
    for unit, mult in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if abs(s) >= mult:
            return f"{s / mult:.{digits}g} {unit}"
    return f"{s / 1e-9:.{digits}g} ns"


def format_bandwidth(bytes_per_s: float) -> str:
    """Format a bandwidth in GB/s (10⁹ bytes/s, as nccl-tests prints algbw/busbw).

    Example:
        >>> format_bandwidth(12.5e9)
        '12.5 GB/s'
    """
    return f"{float(bytes_per_s) / 1e9:.3g} GB/s"
