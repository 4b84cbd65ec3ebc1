"""Small text helpers shared by the tuner, its report and its CLI: percentages, tables, labels, JSON.

Each exists once here (the report, the pipeline and ``tuner.cli`` import
them from :mod:`tuner`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from calibration import jsonable, series_label  # their home: calibration writes profiles

__all__ = [
    "NO_ACTIVATIONS",
    "format_percent",
    "format_range",
    "format_table",
    "series_label",
    "jsonable",
]

#: What a memory per rank leaves out for a model that is not a transformer:
#: :func:`costmodel.activation_bytes` knows a transformer's activations only (a new
#: user read ResNet-50's 292 MiB at batch 64 as what a real run needs).
NO_ACTIVATIONS = "model states and buffers; activations are counted for transformers only"


def format_percent(x, digits: int = 1) -> str:
    """A fraction as a percentage, ``—`` for ``None``, NaN or ±inf.

    Args:
        x: a fraction (0.153 → 15.3%), or ``None``.
        digits: digits after the decimal point, ≥ 0.

    Example:
        >>> format_percent(0.1534), format_percent(0.15, 0), format_percent(float("nan"))
        ('15.3%', '15%', '—')
    """
    if x is None:
        return "—"
    x = float(x)
    return "—" if not math.isfinite(x) else f"{100.0 * x:.{int(digits)}f}%"


def format_range(lo, hi) -> str:
    """A measured span as text: ``"2–4"``, or ``"2"`` when both ends are one value.

    Args:
        lo, hi: the span's ends (numbers; printed with ``:g``).

    Example:
        >>> format_range(2, 4), format_range(2, 2), format_range(1.5, 8)
        ('2–4', '2', '1.5–8')
    """
    return f"{lo:g}" if lo == hi else f"{lo:g}–{hi:g}"


def format_table(
    rows: Iterable[Sequence], head: Sequence | None = None, right: Iterable[int] = ()
) -> list[str]:
    """Rows as lines of aligned plain-text columns (two spaces apart, no trailing blanks).

    Args:
        rows: the cells, row by row (converted with ``str``); every row as
            long as ``head`` (or the first row).
        head: column titles, or ``None`` for none.
        right: indices of right-aligned columns (the others are left-aligned).

    Returns:
        The lines, the head's first.

    Example:
        >>> format_table([["ring", 8], ["p2p", 16]], head=["arch", "n"], right={1})
        ['arch   n', 'ring   8', 'p2p   16']
    """
    body = [[str(c) for c in r] for r in rows]
    lines = ([[str(h) for h in head]] if head is not None else []) + body
    if not lines:
        return []
    right = set(right)
    widths = [max(len(r[i]) for r in lines) for i in range(len(lines[0]))]
    return [
        "  ".join(
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        ).rstrip()
        for r in lines
    ]
