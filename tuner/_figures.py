"""The report's figures: matplotlib, Agg, PNG files; plain data in, a file out.

Every function takes the data it draws as plain numbers and arrays (the
dataclasses below), writes one PNG and returns its path, so each figure can be
tested on data built from :func:`costmodel.preset` and
:func:`costmodel.iteration_time` alone. matplotlib is imported inside the
functions through :class:`matplotlib.figure.Figure` and its Agg canvas: no
``pyplot``, no global backend switch, nothing left open (an interactive
session that calls these keeps its own backend).

Units: inputs are SI (seconds, bytes, bytes/s); axes show the units people
read (µs/ms, MiB, GB/s, samples/s) and say so in their labels.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from costmodel import BUSBW_FACTOR, format_seconds

__all__ = [
    "CollectiveSeries",
    "ScalingCurve",
    "Timeline",
    "plot_collective_fit",
    "plot_busbw",
    "plot_scaling",
    "plot_bucket_sweep",
    "plot_timeline",
    "plot_sensitivity",
    "plot_validation",
]

#: Colours per architecture family (stable across figures).
_ARCH_COLOURS = {
    "ring": "#1f77b4",
    "tree": "#17becf",
    "hierarchical": "#9467bd",
    "p2p": "#2ca02c",
    "ps": "#d62728",
    "ps_host": "#ff7f0e",
    "hybrid": "#8c564b",
    # the sharded ones had the cycle's colours, which repeat ps' and p2p's (a new user's
    # trial: "ps (dedicated) and hsdp both red, p2p and fsdp both green")
    "zero1": "#bcbd22",
    "zero2": "#7f7f7f",
    "fsdp": "#393b79",
    "hsdp": "#e7ba52",
}
_CYCLE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")
_DPI = 110


@dataclasses.dataclass(frozen=True)
class CollectiveSeries:
    """Measured and predicted times of one collective at one (n, g), over message sizes.

    Attributes:
        collective: a name in :data:`costmodel.COLLECTIVE_NAMES`.
        num_ranks: n ≥ 1.
        ranks_per_node: g ≥ 1.
        message_bytes: (P,) sizes, bytes > 0 (nccl-tests' convention).
        measured_s: (P,) measured times (the fitted statistic), s > 0.
        predicted_s: (P,) model times, s > 0.
        heldout: (P,) bool, points the fit did not see.
        algorithm: the all-reduce timed where not the collective's default
            (``"hierarchical"``), else ``None``.
    """

    collective: str
    num_ranks: int
    ranks_per_node: int
    message_bytes: np.ndarray
    measured_s: np.ndarray
    predicted_s: np.ndarray
    heldout: np.ndarray
    algorithm: str | None = None

    @property
    def label(self) -> str:
        """``n=4``, ``n=16 (8/node)`` or ``n=8 (2/node) hierarchical``."""
        g = int(self.ranks_per_node)
        return (
            f"n={int(self.num_ranks)}"
            + ("" if g in (1, int(self.num_ranks)) else f" ({g}/node)")
            + (f" {self.algorithm}" if self.algorithm else "")
        )


@dataclasses.dataclass(frozen=True)
class ScalingCurve:
    """The best configuration of one architecture at each worker count.

    Attributes:
        label: the architecture's label (``ring``, ``ps (dedicated)``, ...).
        architecture: its JSON name (selects the colour).
        workers: (W,) worker counts ≥ 1, increasing.
        iteration_s: (W,) predicted iteration time, s.
        low_s, high_s: (W,) 90% interval of the iteration time, s (equal to
            ``iteration_s`` when there is no uncertainty).
        throughput, throughput_low, throughput_high: (W,) samples/s and its
            90% interval (n·B/T with B the per-worker batch at that point).
        efficiency: (W,) scaling efficiency in (0, 1].
    """

    label: str
    architecture: str
    workers: np.ndarray
    iteration_s: np.ndarray
    low_s: np.ndarray
    high_s: np.ndarray
    throughput: np.ndarray
    throughput_low: np.ndarray
    throughput_high: np.ndarray
    efficiency: np.ndarray


@dataclasses.dataclass(frozen=True)
class Timeline:
    """One iteration, phase by phase, for one configuration (all times in s from its start).

    Order (costmodel/_timeline.py): forward; backward with each bucket's first
    communication phase starting once the bucket is ready and the previous
    bucket is done (or, for architectures that do not overlap, after the
    backward pass); the optimizer update; each bucket's second phase (PS pull,
    peer-to-peer all-gather); the fixed per-iteration overhead.

    Attributes:
        label: configuration in words.
        overlaps: whether phase 1 overlaps backward.
        forward_s: forward compute time.
        backward_s: backward compute time, including the slowdown by overlap.
        bucket_bytes: (K,) bytes per bucket in communication order.
        ready_s: (K,) when each bucket's gradients exist (from iteration start).
        start_s, end_s: (K,) each bucket's first communication phase.
        update_start_s, update_s: the optimizer update on the critical path.
        phase2_start_s: (K,) start of each bucket's second phase; ``phase2_s`` (K,) its length.
        overhead_start_s, overhead_s: the fixed per-iteration overhead.
        iteration_s: the total, s.
        exposed_s: communication on the critical path (not hidden behind
            backward), plus the backward slowdown by overlap, s.
    """

    label: str
    overlaps: bool
    forward_s: float
    backward_s: float
    bucket_bytes: np.ndarray
    ready_s: np.ndarray
    start_s: np.ndarray
    end_s: np.ndarray
    update_start_s: float
    update_s: float
    phase2_start_s: np.ndarray
    phase2_s: np.ndarray
    overhead_start_s: float
    overhead_s: float
    iteration_s: float
    exposed_s: float


# --------------------------------------------------------------------------- helpers


def _figure(width: float, height: float):
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=_DPI, layout="constrained")


def _grid_figure(
    width: float,
    height: float,
    nrows: int,
    ncols: int,
    title: str,
    *,
    left: float = 0.9,
    right: float = 0.2,
    bottom: float = 0.55,
    top: float = 0.65,
    wspace: float = 1.0,
    hspace: float = 0.9,
    **gridspec_kw,
):
    """A figure of ``width`` × ``height`` inches and its grid, every margin and gap in inches.

    The grid figures (collectives, busbw, scaling: 7–20 axes) are laid out by
    these fixed margins instead of constrained layout, which measures every
    tick label of every axis in an extra pass: half their drawing time (the
    three grids of a 2-node emulated run's report, 5.3 s → 2.6 s to save, on
    the 2-core test machine). The
    defaults leave room for a y tick label of about six characters and its axis
    label (left, ``wspace``), an x tick row and its label under each row
    (``bottom``, ``hspace``) and a title above each axis and the figure's
    suptitle (``top``). ``title``, the suptitle, is wrapped to the figure's
    width (about 8.5 characters an inch at its 12 pt) and ``top`` grows by
    0.22 in a line beyond the first.

    Returns:
        ``(figure, gridspec)``.
    """
    import textwrap

    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=_DPI)
    lines = textwrap.wrap(title, width=max(20, int(8.5 * width)))
    fig.suptitle("\n".join(lines))
    top += 0.22 * (len(lines) - 1)
    inner_w = width - left - right
    inner_h = height - top - bottom
    axis_w = (inner_w - (ncols - 1) * wspace) / ncols
    axis_h = (inner_h - (nrows - 1) * hspace) / nrows
    gs = fig.add_gridspec(
        nrows,
        ncols,
        left=left / width,
        right=1.0 - right / width,
        bottom=bottom / height,
        top=1.0 - top / height,
        wspace=wspace / axis_w,
        hspace=hspace / axis_h,
        **gridspec_kw,
    )
    return fig, gs


def _save(fig, path: str | os.PathLike) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", dpi=_DPI)
    return path


def _time_unit(seconds: np.ndarray) -> tuple[float, str]:
    """A scale and unit for times spanning ``seconds``: (1e-6, 'µs'), (1e-3, 'ms') or (1, 's')."""
    finite = np.asarray(seconds, dtype=float)
    finite = finite[np.isfinite(finite) & (finite > 0)]
    top = float(np.median(finite)) if finite.size else 1.0
    if top < 1e-3:
        return 1e-6, "µs"
    if top < 1.0:
        return 1e-3, "ms"
    return 1.0, "s"


def _size_formatter():
    from matplotlib.ticker import FuncFormatter

    def fmt(x, _pos):
        if x <= 0 or not math.isfinite(x):
            return ""
        for unit, mult in (("G", 1024**3), ("M", 1024**2), ("K", 1024)):
            if x >= mult:
                v = x / mult
                return f"{v:.0f}{unit}" if abs(v - round(v)) < 1e-9 else f"{v:.2g}{unit}"
        return f"{x:.0f}"

    return FuncFormatter(fmt)


def _int_formatter():
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda x, _pos: f"{x:.0f}" if x >= 1 else f"{x:.2g}")


def _plain_log_labels(ax) -> None:
    """Plain numbers (28, 30, 40) on a log y axis, not 2.8×10¹: major ticks always, minor
    ones where the axis spans under a decade (else they would crowd)."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    def plain(v, _pos):
        if not v > 0:
            return ""
        return f"{v:.3g}" if v < 1000 else f"{v:,.0f}"  # 1,000 not 1e+03

    ax.yaxis.set_major_formatter(FuncFormatter(plain))
    lo, hi = ax.get_ylim()
    narrow = lo > 0 and hi / lo < 10.0
    ax.yaxis.set_minor_formatter(FuncFormatter(plain) if narrow else NullFormatter())


def arch_colour(architecture: str, i: int = 0, label: str = "") -> str:
    """The colour of an architecture (a stable palette), else the i-th cycle colour.

    ``ps`` with colocated servers (label ``ps (colocated)``) gets its own colour.
    """
    if architecture == "ps" and "colocated" in label:
        return "#e377c2"
    return _ARCH_COLOURS.get(architecture, _CYCLE[i % len(_CYCLE)])


def _check_nonempty(name: str, items) -> None:
    if len(items) == 0:
        raise ValueError(f"{name} is empty: nothing to plot")


# --------------------------------------------------------------------------- collectives


def _by_collective(series: Sequence[CollectiveSeries]) -> dict[str, list[CollectiveSeries]]:
    out: dict[str, list[CollectiveSeries]] = {}
    for s in series:
        out.setdefault(s.collective, []).append(s)
    for v in out.values():
        v.sort(key=lambda s: (s.num_ranks, s.ranks_per_node))
    return out


def plot_collective_fit(series: Sequence[CollectiveSeries], path: str | os.PathLike) -> Path:
    """Measured vs predicted time per collective and rank count (log–log), with residuals.

    One panel per collective: measured points (filled: fitted, open: held out)
    and the model's line per rank count; below it the residual
    (predicted / measured − 1, %) of every point.

    Args:
        series: one :class:`CollectiveSeries` per (collective, n, g), ≥ 1.
        path: PNG file to write.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        ValueError: if ``series`` is empty.
    """
    _check_nonempty("series", series)
    groups = _by_collective(series)
    ncol = min(3, len(groups))
    nrow = math.ceil(len(groups) / ncol)
    title = "Collectives: measured (● fitted, ○ held out) and model; residual = model/measured − 1"
    fig, outer = _grid_figure(4.2 * ncol, 4.0 * nrow, nrow, ncol, title, top=0.75)
    all_t = np.concatenate([np.asarray(s.measured_s, float) for s in series])
    scale, unit = _time_unit(all_t)
    for i, (name, group) in enumerate(groups.items()):
        inner = outer[i // ncol, i % ncol].subgridspec(2, 1, height_ratios=(3, 1), hspace=0.12)
        ax = fig.add_subplot(inner[0])
        res = fig.add_subplot(inner[1], sharex=ax)
        for j, s in enumerate(group):
            c = _CYCLE[j % len(_CYCLE)]
            x = np.asarray(s.message_bytes, float)
            order = np.argsort(x)
            x = x[order]
            meas = np.asarray(s.measured_s, float)[order]
            pred = np.asarray(s.predicted_s, float)[order]
            held = np.asarray(s.heldout, bool)[order]
            ax.plot(x, pred / scale, "-", color=c, lw=1.5, label=f"{s.label} model")
            ax.plot(x[~held], meas[~held] / scale, "o", color=c, ms=4, label=f"{s.label} measured")
            if held.any():
                ax.plot(x[held], meas[held] / scale, "o", mfc="none", color=c, ms=5)
            r = 100.0 * (pred / meas - 1.0)
            res.plot(x[~held], r[~held], "o", color=c, ms=3)
            if held.any():
                res.plot(x[held], r[held], "o", mfc="none", color=c, ms=4)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(f"{name}: measured vs model")
        ax.set_ylabel(f"time ({unit})")
        ax.tick_params(labelbottom=False)
        _plain_log_labels(ax)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=7, loc="upper left", ncol=1 if len(group) < 3 else 2)
        res.axhline(0.0, color="k", lw=0.8)
        res.margins(y=0.2)  # the extreme residuals' markers whole, not cut by the frame
        res.set_ylabel("error (%)")
        res.set_xlabel("message size (bytes)")
        res.xaxis.set_major_formatter(_size_formatter())
        res.grid(True, alpha=0.3)
    return _save(fig, path)


def plot_busbw(series: Sequence[CollectiveSeries], path: str | os.PathLike) -> Path:
    """Bus bandwidth vs message size per collective: measured points, model lines.

    busbw = S / t × factor (nccl-tests doc/PERFORMANCE.md: all_reduce 2(n−1)/n;
    reduce_scatter, all_gather, all_to_all (n−1)/n; others 1).

    Args:
        series: as :func:`plot_collective_fit`.
        path: PNG file to write.

    Raises:
        ValueError: if ``series`` is empty.
    """
    _check_nonempty("series", series)
    groups = _by_collective(series)
    ncol = min(3, len(groups))
    nrow = math.ceil(len(groups) / ncol)
    title = "Bus bandwidth (nccl-tests convention) vs message size"
    fig, gs = _grid_figure(4.2 * ncol, 3.2 * nrow, nrow, ncol, title)
    for i, (name, group) in enumerate(groups.items()):
        ax = fig.add_subplot(gs[i // ncol, i % ncol])
        for j, s in enumerate(group):
            c = _CYCLE[j % len(_CYCLE)]
            x = np.asarray(s.message_bytes, float)
            order = np.argsort(x)
            x = x[order]
            f = float(BUSBW_FACTOR(name, float(s.num_ranks)))
            if f == 0.0:  # n = 1: no bus traffic
                f = 1.0
            meas = x / np.asarray(s.measured_s, float)[order] * f / 1e9
            pred = x / np.asarray(s.predicted_s, float)[order] * f / 1e9
            ax.plot(x, pred, "-", color=c, lw=1.5, label=f"{s.label} model")
            ax.plot(x, meas, "o", color=c, ms=4, label=f"{s.label} measured")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.xaxis.set_major_formatter(_size_formatter())
        ax.set_title(f"{name}: bus bandwidth")
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel("busbw (GB/s)")
        _plain_log_labels(ax)  # 0.01, 0.1, 1 as the other figures read, not 10⁻²
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")
    return _save(fig, path)


# --------------------------------------------------------------------------- scaling


def plot_scaling(
    curves: Sequence[ScalingCurve],
    path: str | os.PathLike,
    *,
    recommended: tuple[str, int] | None = None,
) -> Path:
    """Iteration time, throughput and scaling efficiency vs workers, with 90% bands.

    Top row: every architecture together (lines; the band of the recommended
    one), so they can be compared. Bottom row: one small panel per
    architecture with its own 90% throughput band and, for reference, the
    recommended architecture's line — overlapping bands of several
    architectures would hide each other.

    Args:
        curves: one :class:`ScalingCurve` per architecture variant, ≥ 1.
        path: PNG file to write.
        recommended: ``(label, workers)`` of the recommendation, marked with a star.

    Raises:
        ValueError: if ``curves`` is empty.
    """
    _check_nonempty("curves", curves)
    ncol = min(4, len(curves))
    nsmall = math.ceil(len(curves) / ncol)
    title = (
        "Scaling per architecture: each point is that architecture's best "
        "configuration at that worker count"
    )
    # the top row's legend has a row of its own under it: inside the panels it
    # covered the curves (a new user's report: ps and tree under the efficiency's)
    entries = len(curves) + 3  # the curves, the band, the star, linear scaling
    legend_rows = math.ceil(entries / 6)
    fig, gs = _grid_figure(
        13.0,
        4.2 + 2.6 * nsmall + 0.25 * legend_rows,
        2 + nsmall,
        12,
        title,
        top=0.8,
        hspace=0.7,
        height_ratios=[1.6, 0.12 * legend_rows] + [1.0] * nsmall,
    )
    top = [fig.add_subplot(gs[0, 4 * i : 4 * i + 4]) for i in range(3)]
    colours = [arch_colour(c.architecture, i, c.label) for i, c in enumerate(curves)]
    rec_curve = next((c for c in curves if recommended and c.label == recommended[0]), None)
    _scaling_overview(top, curves, colours, rec_curve, recommended)
    key = fig.add_subplot(gs[1, :])
    key.axis("off")
    handles, labels = top[1].get_legend_handles_labels()
    key.legend(handles, labels, loc="center", ncol=6, fontsize=8, frameon=False)
    panels = []
    width = 12 // ncol
    for i, (c, col) in enumerate(zip(curves, colours, strict=True)):
        r, q = divmod(i, ncol)
        share = panels[0] if panels else None
        panels.append(fig.add_subplot(gs[2 + r, q * width : (q + 1) * width], sharey=share))
        _scaling_panel(panels[-1], c, col, rec_curve)
    from matplotlib.ticker import NullLocator

    for ax in top + panels:
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(_int_formatter())
        ax.set_xlabel("workers", fontsize=8 if ax in panels else None)
        ax.grid(True, alpha=0.3)
    for ax in panels:  # small panels: decades only (minor ticks cost most of the drawing)
        ax.yaxis.set_minor_locator(NullLocator())
    for ax in [*top[:2], *panels]:  # log axes read as plain numbers
        _plain_log_labels(ax)
    return _save(fig, path)


def _scaling_overview(axes, curves, colours, rec_curve, recommended) -> None:
    """The top row: iteration time, throughput and efficiency of every curve together
    (their legend is the throughput panel's handles, drawn by the caller)."""
    ax_t, ax_x, ax_e = axes
    scale, unit = _time_unit(np.concatenate([np.asarray(c.iteration_s, float) for c in curves]))
    for c, col in zip(curves, colours, strict=True):
        n = np.asarray(c.workers, float)
        lw = 2.4 if c is rec_curve else 1.4
        ys = (
            np.asarray(c.iteration_s, float) / scale,
            np.asarray(c.throughput, float),
            100.0 * np.asarray(c.efficiency, float),
        )
        for ax, y in zip(axes, ys, strict=True):
            ax.plot(n, y, "-", color=col, lw=lw, label=c.label, zorder=3)
        if c is rec_curve:
            bands = (
                (ax_t, np.asarray(c.low_s, float) / scale, np.asarray(c.high_s, float) / scale),
                (ax_x, np.asarray(c.throughput_low, float), np.asarray(c.throughput_high, float)),
            )
            for ax, lo, hi in bands:
                ax.fill_between(
                    n, lo, hi, color=col, alpha=0.15, lw=0, label=f"90% interval ({c.label})"
                )
            k = int(np.argmin(np.abs(n - recommended[1])))
            kw = dict(
                marker="*", ms=15, color=col, mec="k", zorder=5, ls="none", label="recommended"
            )
            for ax, y in zip(axes, ys, strict=True):
                ax.plot(n[k], float(y[k]), **kw)
    n_all = np.unique(np.concatenate([np.asarray(c.workers, float) for c in curves]))
    base = max(
        (float(np.asarray(c.throughput)[0]) for c in curves if c.workers[0] == 1),
        default=None,
    )
    if base is not None:
        ax_x.plot(n_all, n_all * base, ":", color="grey", lw=1, label="linear scaling")
    ax_t.set_yscale("log")
    ax_x.set_yscale("log")
    ax_t.set_ylabel(f"iteration time ({unit})")
    ax_t.set_title("Iteration time")
    ax_x.set_ylabel("throughput (samples/s)")
    ax_x.set_title("Throughput")
    ax_e.set_ylabel("scaling efficiency (%)")
    ax_e.set_ylim(0, 105)
    ax_e.set_title("Scaling efficiency")


def _scaling_panel(ax, c: ScalingCurve, col: str, rec_curve) -> None:
    """One architecture's throughput with its own band, and the recommended line for reference."""
    n = np.asarray(c.workers, float)
    ax.fill_between(
        n,
        np.asarray(c.throughput_low, float),
        np.asarray(c.throughput_high, float),
        color=col,
        alpha=0.25,
        lw=0,
        label="90% interval",
    )
    ax.plot(n, np.asarray(c.throughput, float), "-", color=col, lw=1.8, label=c.label)
    if rec_curve is not None and c is not rec_curve:
        ax.plot(
            np.asarray(rec_curve.workers, float),
            np.asarray(rec_curve.throughput, float),
            "--",
            color="k",
            lw=0.9,
            label=f"{rec_curve.label} (recommended)",
        )
    ax.set_yscale("log")
    ax.set_title(f"{c.label}: throughput", fontsize=9)
    ax.set_ylabel("samples/s", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=6, loc="upper left")


def plot_bucket_sweep(
    bucket_bytes: np.ndarray,
    iteration_s: np.ndarray,
    path: str | os.PathLike,
    *,
    low_s: np.ndarray | None = None,
    high_s: np.ndarray | None = None,
    chosen_bytes: float | None = None,
    defaults: Mapping[str, float] | None = None,
    title: str = "Iteration time vs gradient bucket size",
) -> Path:
    """Iteration time vs bucket size for one architecture and worker count.

    Args:
        bucket_bytes: (U,) bucket caps, bytes > 0 (a cap of 0 — one collective
            per tensor — is drawn as a horizontal line when present).
        iteration_s: (U,) iteration time, s.
        path: PNG file to write.
        low_s, high_s: (U,) optional 90% interval, s.
        chosen_bytes: the recommended cap, marked with a star.
        defaults: ``{label: bytes}`` reference caps drawn as vertical lines
            (e.g. PyTorch DDP's 25 MiB).
        title: the figure's title.

    Raises:
        ValueError: if the arrays are empty or of different lengths.
    """
    b = np.asarray(bucket_bytes, float)
    t = np.asarray(iteration_s, float)
    _check_nonempty("bucket_bytes", b)
    if b.shape != t.shape:
        raise ValueError(
            f"bucket_bytes and iteration_s must have one shape, got {b.shape} and {t.shape}"
        )
    order = np.argsort(b)
    b, t = b[order], t[order]
    scale, unit = _time_unit(t)
    fig = _figure(6.4, 4.6)
    ax = fig.add_subplot()
    pos = b > 0
    ax.plot(b[pos], t[pos] / scale, "o-", color=_CYCLE[0], ms=3, lw=1.5, label="model")
    if low_s is not None and high_s is not None:
        lo = np.asarray(low_s, float)[order]
        hi = np.asarray(high_s, float)[order]
        ax.fill_between(
            b[pos],
            lo[pos] / scale,
            hi[pos] / scale,
            color=_CYCLE[0],
            alpha=0.18,
            lw=0,
            label="90% interval",
        )
    if (~pos).any():
        ax.axhline(
            t[~pos][0] / scale, color=_CYCLE[2], ls="--", lw=1, label="one collective per tensor"
        )
    for i, (label, v) in enumerate((defaults or {}).items()):
        ax.axvline(v, color=_CYCLE[3 + i], ls=":", lw=1, label=label)
    if chosen_bytes is not None and chosen_bytes > 0:
        tc = float(np.interp(np.log(chosen_bytes), np.log(b[pos]), t[pos]))
        ax.plot(
            [chosen_bytes],
            [tc / scale],
            "*",
            ms=15,
            color=_CYCLE[1],
            mec="k",
            zorder=5,
            label="recommended",
        )
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(_size_formatter())
    ax.set_xlabel("bucket size (bytes)")
    ax.set_ylabel(f"iteration time ({unit})")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    fig.legend(loc="outside lower center", ncol=3, fontsize=8)
    return _save(fig, path)


# --------------------------------------------------------------------------- timeline


def plot_timeline(timelines: Sequence[Timeline], path: str | os.PathLike) -> Path:
    """One iteration of each configuration as a Gantt chart (compute lane, network lane).

    Compute lane: forward, backward split at each bucket's ready time,
    the update and the overhead. Network lane: each bucket's first phase
    (alternating shades), each bucket's second phase. The exposed part — from
    the end of backward to the end of the last bucket's first phase — is
    hatched.

    Args:
        timelines: one :class:`Timeline` per configuration, ≥ 1 (the first is
            drawn at the top: put the recommendation first).
        path: PNG file to write.

    Raises:
        ValueError: if ``timelines`` is empty.
    """
    from matplotlib.patches import Patch

    _check_nonempty("timelines", timelines)
    scale, unit = _time_unit(np.array([t.iteration_s for t in timelines]))
    fig = _figure(11.0, 1.1 + 1.15 * len(timelines))
    ax = fig.add_subplot()
    yticks, ylabels = [], []
    for i, tl in enumerate(timelines):
        y0 = (len(timelines) - 1 - i) * 1.2
        yc, yn = y0 + 0.45, y0
        yticks += [yc + _LANE / 2, yn + _LANE / 2]
        ylabels += [f"{tl.label}\ncompute", "network"]
        _compute_lane(ax, tl, yc, 1.0 / scale)
        _network_lane(ax, tl, yn, 1.0 / scale)
        ax.text(
            tl.iteration_s / scale,
            yc + _LANE / 2,
            f"  {format_seconds(tl.iteration_s)}\n  exposed {format_seconds(tl.exposed_s)}",
            fontsize=7,
            va="center",
            ha="left",
        )
    ax.set_yticks(yticks)
    ax.set_yticklabels(ylabels, fontsize=7)
    ax.set_xlabel(f"time from the start of the iteration ({unit})")
    ax.set_title("One iteration: compute and communication per bucket")
    ax.grid(True, axis="x", alpha=0.3)
    ax.set_xlim(0, max(t.iteration_s for t in timelines) * 1.15 / scale)
    c = _TIMELINE_COLOURS

    def drawn(field: str) -> bool:  # some timeline has this part: its entry in the legend
        return any(float(np.sum(getattr(t, field))) > 0 for t in timelines)

    # only what some row draws (a new user's ring-only figure listed a second phase and
    # a hatch that it did not have)
    handles = [
        Patch(color=c["forward"], label="forward"),
        Patch(color=c["backward"][0], label="backward (per bucket)"),
        Patch(color=c["comm"][0], label="bucket communication"),
    ]
    if drawn("phase2_s"):
        handles.append(Patch(color=c["phase2"], label="second phase (pull / all-gather)"))
    if drawn("update_s"):
        handles.append(Patch(color=c["update"], label="update"))
    if drawn("overhead_s"):
        handles.append(Patch(color=c["overhead"], label="fixed overhead"))
    if drawn("exposed_s"):
        handles.append(
            Patch(facecolor="none", edgecolor="k", hatch="///", label="exposed communication")
        )
    fig.legend(handles=handles, loc="outside lower center", ncol=4, fontsize=7)
    return _save(fig, path)


#: The timeline's colours (pairs alternate from bucket to bucket).
_TIMELINE_COLOURS = {
    "forward": "#4c72b0",
    "backward": ("#55a868", "#8cc99a"),
    "comm": ("#c44e52", "#e38d8f"),
    "phase2": "#dd8452",
    "update": "#8172b3",
    "overhead": "#937860",
}
_LANE = 0.38  # height of a lane


def _compute_lane(ax, tl: Timeline, y: float, s: float) -> None:
    """Forward, backward split at each bucket's ready time, update, overhead (``s``: 1/unit)."""
    c, h, f = _TIMELINE_COLOURS, _LANE, tl.forward_s
    ax.broken_barh([(0, f * s)], (y, h), color=c["forward"])
    edges = np.concatenate([[0.0], np.asarray(tl.ready_s, float) - f])
    edges = np.clip(edges, 0.0, tl.backward_s)
    edges[-1] = tl.backward_s
    for b in range(len(edges) - 1):
        w = edges[b + 1] - edges[b]
        if w > 0:
            ax.broken_barh([((f + edges[b]) * s, w * s)], (y, h), color=c["backward"][b % 2])
    ax.broken_barh([(tl.update_start_s * s, tl.update_s * s)], (y, h), color=c["update"])
    ax.broken_barh([(tl.overhead_start_s * s, tl.overhead_s * s)], (y, h), color=c["overhead"])


def _network_lane(ax, tl: Timeline, y: float, s: float) -> None:
    """Each bucket's phases 1 and 2, the exposed part hatched (``s``: 1/unit)."""
    c, h = _TIMELINE_COLOURS, _LANE
    for b in range(len(tl.start_s)):
        ax.broken_barh(
            [(tl.start_s[b] * s, (tl.end_s[b] - tl.start_s[b]) * s)],
            (y, h),
            color=c["comm"][b % 2],
            lw=0,
        )
        if tl.phase2_s[b] > 0:
            ax.broken_barh(
                [(tl.phase2_start_s[b] * s, tl.phase2_s[b] * s)], (y, h), color=c["phase2"], lw=0
            )
    bwd_end = tl.forward_s + tl.backward_s
    last = float(np.max(tl.end_s)) if len(tl.end_s) else bwd_end
    hatch = dict(facecolor="none", edgecolor="k", hatch="///", lw=0.6)
    if last > bwd_end:  # phase 1 past the end of backward: on the critical path
        ax.broken_barh([(bwd_end * s, (last - bwd_end) * s)], (y, h), **hatch)
    p2 = float(np.sum(tl.phase2_s))
    if p2 > 0:  # phase 2 never overlaps compute
        ax.broken_barh([(float(tl.phase2_start_s[0]) * s, p2 * s)], (y, h), **hatch)


# --------------------------------------------------------------------------- sensitivity


def plot_sensitivity(
    elasticities: Mapping[str, float],
    path: str | os.PathLike,
    *,
    title: str = "Sensitivity of the iteration time",
    threshold: float = 1e-3,
) -> Path:
    """Horizontal bars of ∂ log T / ∂ log θ per hardware parameter, largest first.

    An elasticity of 0.5 means: 1% more of θ (e.g. β, the inverse bandwidth)
    makes the iteration 0.5% slower. Parameters with |elasticity| below
    ``threshold`` are listed under the axis instead of drawn as empty bars.

    Args:
        elasticities: ``{parameter: elasticity}``, finite values, ≥ 1 entry.
        path: PNG file to write.
        title: the figure's title.
        threshold: smallest |elasticity| drawn as a bar (≥ 0).

    Raises:
        ValueError: if empty.
    """
    items = [(k, float(v)) for k, v in elasticities.items() if math.isfinite(float(v))]
    _check_nonempty("elasticities", items)
    shown = [(k, v) for k, v in items if abs(v) >= threshold] or items
    hidden = [k for k, v in items if (k, v) not in shown]
    shown.sort(key=lambda kv: abs(kv[1]))
    fig = _figure(6.8, 1.5 + 0.32 * len(shown))
    ax = fig.add_subplot()
    vals = np.array([v for _, v in shown])
    ax.barh([k for k, _ in shown], vals, color=np.where(vals >= 0, "#c44e52", "#4c72b0"))
    for y, v in enumerate(vals):
        ax.annotate(
            f"{v:+.3g}",
            (v, y),
            xytext=(4 if v >= 0 else -4, 0),
            textcoords="offset points",
            va="center",
            ha="left" if v >= 0 else "right",
            fontsize=7,
        )
    lim = max(float(np.max(np.abs(vals))), 1e-6) * 1.3
    ax.set_xlim(-lim if np.any(vals < 0) else -0.05 * lim, lim if np.any(vals > 0) else 0.05 * lim)
    ax.axvline(0.0, color="k", lw=0.8)
    xlabel = "elasticity ∂log T / ∂log θ (% change in T per 1% change in θ)"
    if hidden:
        xlabel += f"\n|elasticity| < {threshold:g}: " + ", ".join(hidden)
    ax.set_xlabel(xlabel, fontsize=8, wrap=True)
    ax.set_title(title)
    ax.grid(True, axis="x", alpha=0.3)
    ax.tick_params(axis="y", labelsize=8)
    return _save(fig, path)


def plot_validation(results: Sequence, path: str | os.PathLike) -> Path:
    """Real training against the model: iteration time vs workers per architecture (the seed paper's figure).

    One panel per model (``tuner.validation.ValidationResult``); in each, per
    architecture label (``ps k=1 (colocated)``, ``p2p``, ``ring``, …) at its
    largest bucket cap: the measured steps (markers), the predicted ones (line)
    and their 90% prediction interval (band, where the profile gives one,
    clipped at 1.25× the largest point).

    Args:
        results: ≥ 1 validation results, each with rows.
        path: PNG file to write.

    Raises:
        ValueError: if ``results`` is empty or has no rows.
    """
    results = [r for r in results if r.rows]
    _check_nonempty("results", results)
    fig = _figure(5.2 * len(results), 4.0)
    axes = [fig.add_subplot(1, len(results), i + 1) for i in range(len(results))]
    for ax, res in zip(axes, results, strict=True):
        allt = np.asarray([t for r in res.rows for t in (r.measured_s, r.predicted_s)], float)
        scale, unit = _time_unit(allt)
        labels = list(dict.fromkeys(r.label for r in res.rows))
        for i, lab in enumerate(labels):
            rows = [r for r in res.rows if r.label == lab]
            cap = max(r.bucket_bytes for r in rows)
            rows = sorted((r for r in rows if r.bucket_bytes == cap), key=lambda r: r.workers)
            n = np.asarray([r.workers for r in rows], float)
            first = rows[0]
            col = arch_colour(first.architecture, i, lab)
            # parameter-server variants share the ps colour: told apart by line and marker
            dedicated = first.architecture == "ps" and not first.colocated
            style, marker = (
                (":", "^") if dedicated else ("--", "s") if first.servers > 1 else ("-", "o")
            )
            lo = np.asarray([r.interval_low_s for r in rows], float) / scale
            hi = np.asarray([r.interval_high_s for r in rows], float) / scale
            if np.all(np.isfinite(lo)) and np.all(np.isfinite(hi)):
                ax.fill_between(n, lo, hi, color=col, alpha=0.08, lw=0)
            # the prediction: a line, and a small cross so that a single worker count shows
            ax.plot(n, [r.predicted_s / scale for r in rows], style, color=col, lw=1.4)
            ax.plot(n, [r.predicted_s / scale for r in rows], "x", color=col, ms=5)
            ax.plot(
                n,
                [r.measured_s / scale for r in rows],
                marker,
                color=col,
                ms=5,
                label=lab,
                zorder=3,
            )
        # the points decide the scale: a wide band is clipped, not the data squeezed
        ax.set_ylim(0.0, 1.25 * float(np.max(allt)) / scale)
        ax.set_xlabel("workers")
        ax.set_ylabel(f"iteration time ({unit})")
        ax.xaxis.set_major_formatter(_int_formatter())
        ax.set_xticks(sorted({r.workers for r in res.rows}))
        ax.grid(True, alpha=0.3)
        ax.set_title(f"{res.rows[0].model}: MAPE {100 * res.mape:.1f}%", fontsize=10)
        ax.legend(fontsize=7, loc="best")
    fig.suptitle(
        "Real training: measured (points) vs predicted (lines and crosses, 90% band), "
        "largest bucket cap"
    )
    return _save(fig, path)
