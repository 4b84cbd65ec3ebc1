"""The report: an HTML page and a Markdown file with PNG figures, from a profile and a recommendation.

:func:`write_report` writes ``DIR/index.html`` (opens from disk: no server, no
network, no CDN; images are PNG files beside it, referenced by relative
paths), ``DIR/report.md`` (the same content for a repository or a chat) and
``DIR/figures/*.png``. The data behind each figure is computed here in numpy
from the public APIs (:mod:`costmodel`, the profile, the recommendation) and
drawn by :mod:`tuner._figures`.

The iteration timeline (:func:`iteration_timeline`) is
:func:`costmodel.bucket_schedule`: the cost model's own evaluation of one
configuration with each bucket's ready, start and end time kept

    start_b = max(r_b, end_{b−1}),   end_b = start_b + c_b,
    T = T_fwd + max(T_bwd', end_K) + T_update + Σ_b c2_b + T_overhead

(costmodel/_timeline.py; DESIGN.md "Iteration timeline"), so the figure and
:func:`costmodel.iteration_time` cannot disagree.

References:
    Li et al., "PyTorch Distributed", VLDB 2020 (buckets in reverse order);
    Zhang et al., "Poseidon", USENIX ATC 2017 (wait-free backpropagation).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import math
import os
import platform
from collections.abc import Iterable, Mapping, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from calibration import (
    RELIABLE_P90_LIMIT,
    OutputPathError,
    atomic_replace_dir,
    atomic_write_text,
    core_sharing,
    cost_algorithm,
    holdout_mask,
    refuse_current_folder,
    refuse_symlink,
    sync_batch,
    systematic_note,
)
from costmodel import (
    DEFAULT_BUCKET_BYTES,
    PARAMETER_NONE,
    PARAMETER_UNITS,
    bucket_schedule,
    collective_batch,
    collective_batch_time,
    format_bytes,
    format_seconds,
    get_architecture,
    iteration_time,
)

from ._figures import (
    CollectiveSeries,
    ScalingCurve,
    Timeline,
    plot_bucket_sweep,
    plot_busbw,
    plot_collective_fit,
    plot_scaling,
    plot_sensitivity,
    plot_timeline,
    plot_validation,
)
from ._format import NO_ACTIVATIONS, format_percent, series_label
from ._search import central_differences
from ._sensitivity import sensitivity
from ._text import markdown_escape
from ._uncertainty import takes_batched

__all__ = [
    "iteration_timeline",
    "collective_series",
    "fit_statistic",
    "write_report",
    "ReportFiles",
    "FIGURES",
    "OPTIONAL_FIGURES",
    "REPORT_FILES",
    "check_report_dir",
    "report_owns",
]

#: The report's figures: file name → what it shows (the report's captions).
FIGURES = {
    "collectives.png": "Measured vs predicted time per collective and rank count, with residuals",
    "busbw.png": "Bus bandwidth vs message size, measured and predicted",
    "scaling.png": "Iteration time, throughput and scaling efficiency vs workers per architecture",
    "buckets.png": "Iteration time vs bucket size for the recommended architecture and workers",
    "timeline.png": (
        "One iteration as a timeline: the recommendation, then the best configuration of the"
        " four fastest other architectures"
    ),
    "sensitivity.png": "Sensitivity of the iteration time to each hardware parameter",
    "validation.png": "Real training: measured vs predicted iteration time vs workers per architecture",
}

#: Figures drawn only when their data is given (validation: real training runs).
OPTIONAL_FIGURES = ("validation.png",)


# --------------------------------------------------------------------------- timeline


def iteration_timeline(
    params,
    workload,
    architecture,
    workers: int,
    *,
    ranks_per_node: int = 1,
    servers: int = 1,
    bucket_bytes: float = DEFAULT_BUCKET_BYTES,
    first_bucket_bytes: int | None = None,
    batch_size: int | None = None,
    colocated: bool = False,
    label: str | None = None,
) -> Timeline:
    """One iteration of one configuration, bucket by bucket, for the timeline figure.

    The times are :func:`costmodel.bucket_schedule`'s: the cost model's own
    evaluation of the configuration, with each bucket's ready, start and end
    time (start_b = max(r_b, end_{b−1})) kept, so the drawing and
    :func:`costmodel.iteration_time` cannot disagree.

    Args:
        params: :class:`costmodel.ClusterParams`.
        workload: :class:`costmodel.Workload`.
        architecture: a name in :data:`costmodel.ARCHITECTURE_NAMES`.
        workers: n ≥ 1.
        ranks_per_node: g ≥ 1.
        servers: k ≥ 1 (parameter-server architectures).
        bucket_bytes: bucket cap, bytes ≥ 0 (0 = one collective per tensor).
        first_bucket_bytes: cap of the first bucket (``None``: as the others).
        batch_size: per worker (default: the workload's).
        colocated: ``ps`` servers run on workers.
        label: the configuration's name in the figure (default: built from the above).

    Returns:
        A :class:`tuner._figures.Timeline`, times in seconds from the iteration's start.

    Raises:
        ValueError: as :func:`costmodel.bucket_schedule` (unknown architecture,
            workers < 1, negative bucket size, ...).

    Example:
        >>> from costmodel import preset, get_workload
        >>> p, w = preset("ethernet-10g", "v100"), get_workload("resnet50", 64)
        >>> tl = iteration_timeline(p, w, "ring", 8, bucket_bytes=25 * 2**20)
        >>> len(tl.start_s) == len(tl.bucket_bytes), bool(tl.end_s[-1] <= tl.iteration_s)
        (True, True)

    (Long for its documentation: the body is 37 lines.)
    """
    arch = get_architecture(str(architecture), colocated=colocated)
    if hasattr(arch, "schedule"):  # fsdp, hsdp: per-unit gathers and reductions
        bd = iteration_time(
            params,
            workload,
            arch,
            workers,
            ranks_per_node=ranks_per_node,
            servers=servers,
            bucket_bytes=bucket_bytes,
            first_bucket_bytes=first_bucket_bytes,
            batch_size=batch_size,
            colocated=False,
        ).to_dict()
        return _unit_timeline(
            params, workload, arch, workers, ranks_per_node, bucket_bytes, bd, label
        )
    s = bucket_schedule(
        params,
        workload,
        arch,
        workers,
        ranks_per_node=ranks_per_node,
        servers=servers,
        bucket_bytes=bucket_bytes,
        first_bucket_bytes=first_bucket_bytes,
        batch_size=batch_size,
    )
    if label is None:
        label = _config_label(
            arch.label if architecture == "ps" else str(architecture),
            workers,
            servers if arch.uses_servers else None,
            bucket_bytes,
        )
    fields = (f.name for f in dataclasses.fields(Timeline) if f.name != "label")
    return Timeline(label=label, **{f: getattr(s, f) for f in fields})


def _unit_timeline(params, workload, arch, workers, g, bucket_bytes, bd, label) -> Timeline:
    """The timeline of fsdp/hsdp: its units' reduce-scatters in the place of the buckets.

    From the architecture's own recursion (``schedule``): ``forward_s`` and
    ``backward_s`` span the compute with its waits for parameter gathers; each
    unit's reduction starts once its backward has ended; nothing follows the
    update (the next forward gathers the updated shards).
    """

    table = arch.bucket_table(workload, [float(bucket_bytes)])
    K = int(table.counts[0])
    s = np.asarray(table.sizes[0, :K], dtype=np.float64)
    r = np.asarray(table.ready_frac[0, :K], dtype=np.float64)

    def full(v):
        return np.asarray(float(v), dtype=np.float64)

    out = _unit_schedule(
        arch,
        params.to_numpy(),
        full(bd["forward_s"]),
        full(bd["backward_s"]),
        s,
        np.ones_like(s),
        r,
        full(workers),
        full(g),
        full(1.0),
        arch.keeps_root(workload),
    )
    out = {key: np.asarray(v, dtype=np.float64) for key, v in out.items()}
    update, overhead = float(bd["update_s"]), float(bd["overhead_s"])
    t_fwd = float(out["forward_end_s"])
    span = float(out["span_s"])
    total = span + update + overhead
    exposed = max(total - float(bd["forward_s"]) - float(bd["backward_s"]) - update - overhead, 0.0)
    if label is None:
        units = "per-block units" if arch.wrap == "block" else None
        label = _config_label(arch.name, workers, None, bucket_bytes)
        if units:
            label = label.rsplit(", bucket", 1)[0] + f", {units}"
    return Timeline(
        label=label,
        overlaps=bool(arch.overlaps),
        forward_s=t_fwd,
        backward_s=float(out["backward_end_s"][-1]) - t_fwd,
        bucket_bytes=np.asarray(table.sizes[0, :K], dtype=np.float64),
        ready_s=out["backward_end_s"],
        start_s=out["reduce_start_s"],
        end_s=out["reduce_end_s"],
        update_start_s=span,
        update_s=update,
        phase2_start_s=np.full(K, span + update),
        phase2_s=np.zeros(K),
        overhead_start_s=span + update,
        overhead_s=overhead,
        iteration_s=total,
        exposed_s=exposed,
    )


@eqx.filter_jit
def _unit_schedule(arch, params, fwd, bwd, s, w, r, n, g, k, root):
    return arch.schedule(params, fwd, bwd, s, w, r, n, g, k, root)


def _config_label(arch_label: str, workers, servers, bucket_bytes) -> str:
    srv = f", {int(servers)} server{'s' if int(servers) != 1 else ''}" if servers else ""
    bb = "per tensor" if float(bucket_bytes) == 0 else format_bytes(bucket_bytes)
    return f"{arch_label}, {int(workers)} workers{srv}, bucket {bb}"


# --------------------------------------------------------------------------- measurements


def fit_statistic(records: Sequence[Mapping]) -> str:
    """The time statistic calibration fits for these records (DESIGN.md "Calibration").

    ``p10`` for CPU timings (noisy, bimodal), ``median`` for GPU timings, and
    ``mean`` when that is all the records have (nccl-tests imports).

    Example:
        >>> fit_statistic([{"backend": "cpu", "time_s": {"p10": 1e-5, "median": 2e-5}}])
        'p10'
    """
    backends = {r.get("backend") for r in records}
    want = "p10" if backends <= {"cpu"} else "median"
    if all(want in r.get("time_s", {}) for r in records):
        return want
    for alt in ("median", "mean", "min"):
        if all(alt in r.get("time_s", {}) for r in records):
            return alt
    return "mean"


def _stat(rec: Mapping, statistic: str) -> float:
    ts = rec["time_s"]
    for k in (statistic, "median", "mean", "p10", "min"):
        if k in ts:
            return float(ts[k])
    raise ValueError(f"record has no time statistic: {rec!r}")


def collective_series(
    params,
    records: Iterable[Mapping],
    *,
    statistic: str | None = None,
    heldout: Iterable[tuple] | None = None,
) -> list[CollectiveSeries]:
    """Measured and predicted times per (collective, n, g), for the fit figures.

    Out-of-place and in-place rows of one size (nccl-tests imports) are
    merged by keeping the lower time, as calibration does.

    Args:
        params: :class:`costmodel.ClusterParams` (the fitted profile's).
        records: measurement records (schema v1); those not of kind
            ``collective`` are ignored.
        statistic: the time statistic to show (default :func:`fit_statistic`).
        heldout: ``(collective, num_ranks, ranks_per_node, message_bytes)``
            tuples of the points the fit held out (default: none).

    Returns:
        One :class:`tuner._figures.CollectiveSeries` per (collective, n, g),
        sorted by collective and n; empty if there is no collective record.
    """
    recs = [r for r in records if r.get("kind") == "collective"]
    if not recs:
        return []
    stat = statistic or fit_statistic(recs)
    # (collective, n, g, bytes[, algorithm]): the counts as ints, the names as they are
    held = {tuple(int(v) if 1 <= i <= 3 else v for i, v in enumerate(h)) for h in (heldout or ())}
    groups: dict[tuple, dict[int, float]] = {}
    syncs: dict[tuple, dict[int, dict | None]] = {}
    shares: dict[tuple, int] = {}
    for r in recs:
        algo = cost_algorithm(r) or ""  # as the fit times it (gloo's reduce_scatter on CPU)
        n, g = int(r["num_ranks"]), int(r["ranks_per_node"])
        key = (r["collective"], algo, n, g)
        t = _stat(r, stat)
        sizes = groups.setdefault(key, {})
        b = int(r["message_bytes"])
        if t < sizes.get(b, math.inf):
            sizes[b] = t
            syncs.setdefault(key, {})[b] = r.get("sync")  # the kept record's own
        # the ranks sharing the cores and the emulated CPUs' contention, as the fit had them
        share, contention = core_sharing(r)
        old = shares.get(key, (0, 1.0))
        shares[key] = (max(old[0], share), max(old[1], contention))
    out = []
    for (name, algo, n, g), pts in sorted(groups.items()):
        x = np.array(sorted(pts), dtype=np.float64)
        meas = np.array([pts[int(b)] for b in x])
        share, contention = shares[(name, algo, n, g)]
        batch = collective_batch(
            [name] * x.size, x, float(n), float(g), [algo or None] * x.size,
            np.full(x.size, float(share)), np.full(x.size, float(contention)),
        )  # fmt: skip
        pred = np.asarray(collective_batch_time(params, batch), dtype=np.float64)
        sync = [syncs.get((name, algo, n, g), {}).get(int(b)) for b in x]
        if any(sync):  # a swap's two small all-reduces, in its timed call as in the fit
            sb, counts = sync_batch(
                sync, np.full(x.size, float(share)), np.full(x.size, float(contention))
            )
            pred = pred + counts * np.asarray(collective_batch_time(params, sb), np.float64)
        tag = (algo,) if algo else ()
        mask = np.array([(name, n, g, int(b), *tag) in held for b in x], dtype=bool)
        out.append(CollectiveSeries(name, n, g, x, meas, pred, mask, algo or None))
    return out


# --------------------------------------------------------------------------- report files


@dataclasses.dataclass(frozen=True)
class ReportFiles:
    """Where :func:`write_report` put things.

    Attributes:
        directory: the report folder.
        html: ``index.html``.
        markdown: ``report.md``.
        figures: ``{file name: path}`` of every PNG written.
        skipped: ``{file name: reason}`` of figures not drawn (e.g. no
            collective measurements for the fit figures).
    """

    directory: Path
    html: Path
    markdown: Path
    figures: dict
    skipped: dict


def _human_rows(table: Sequence[Mapping]) -> list[list[str]]:
    """Rows of a profile's parameter table in human units (µs, GB/s, GFLOP/s, GiB)."""
    rows = []
    for p in table:
        name = str(p["name"])
        unit = str(p.get("unit") or PARAMETER_UNITS.get(name.split("[")[0], ""))
        value = float(p["value"])
        lo, hi = float(p.get("low", math.nan)), float(p.get("high", math.nan))
        none = PARAMETER_NONE.get(name.split("[")[0])
        if none is not None and not p.get("identified") and math.isclose(value, none, rel_tol=1e-6):
            rows.append([name, "none", "", "—", "prior" if p.get("at_prior") else "no"])
            continue
        if unit == "s/byte":  # show bandwidth: the interval's ends swap
            lo, hi = hi, lo
        v, u = _fmt_value(value, unit)
        lo_s, _ = _fmt_value(lo, unit, like=value)  # the interval in the value's unit
        hi_s, _ = _fmt_value(hi, unit, like=value)
        ident = p.get("identified")
        rows.append(
            [
                name,
                v,
                u,
                f"{lo_s} – {hi_s}" if math.isfinite(lo) and math.isfinite(hi) else "—",
                "yes"
                if ident
                else "prior"  # the prior preset's datasheet value: no measurement moved it
                if p.get("at_prior")
                else ("no" if ident is not None else "—"),
            ]
        )
    return rows


#: Bandwidth units of a parameter table, largest first: a link below 1 GB/s (an
#: emulated 200 Mbit/s NIC) reads 22.4 MB/s, not 0.0224 GB/s.
_BANDWIDTH_UNITS = ((1e9, "GB/s"), (1e6, "MB/s"), (1e3, "kB/s"))
#: Byte units, largest first: 16 GiB of device memory, a 2.2 KiB head start, and the
#: default head start of 9e-14 B.
_BYTE_UNITS = ((1024.0**3, "GiB"), (1024.0**2, "MiB"), (1024.0, "KiB"), (1.0, "B"))


def _fmt_value(value: float, unit: str, like: float | None = None) -> tuple[str, str]:
    """``value`` in a human unit; ``like``: format in the unit ``like`` would get."""
    if not math.isfinite(value):
        return "—", unit
    if unit == "s":
        return f"{value * 1e6:.4g}", "µs"
    if unit == "s/byte":
        ref = value if like is None or not like > 0 else like
        scale, name = next(
            ((k, n) for k, n in _BANDWIDTH_UNITS if ref > 0 and 1.0 / ref >= k),
            _BANDWIDTH_UNITS[-1],
        )
        return (f"{1.0 / value / scale:.4g}", name) if value > 0 else ("∞", name)
    if unit == "FLOP/s":
        return f"{value / 1e9:.4g}", "GFLOP/s"
    if unit == "bytes":  # device memory in GiB, a shaper's head start in KiB or B
        ref = value if like is None or not like > 0 else like
        scale, name = next(((k, n) for k, n in _BYTE_UNITS if ref >= k), _BYTE_UNITS[-1])
        return f"{value / scale:.4g}", name
    if unit == "1" and 0 < abs(value) < 5e-5:  # a share fitted to 5e-14 reads 0, not 5e-14
        return "0", ""
    return f"{value:.4g}", "" if unit == "1" else unit


def _params_table_from_params(params) -> list[dict]:
    """A parameter table (no intervals) straight from ClusterParams, for preset-only reports."""
    d = params.to_dict()
    rows = []
    for key in (
        "alpha_s",
        "beta_s_per_byte",
        "node_beta_s_per_byte",
        "gamma_s_per_byte",
        "call_overhead_s",
        "fanin_exponent",
        "all_to_all_exponent",
        "node_compute_slots",
        "flops_per_s",
        "conv_efficiency",
        "conv_backward_efficiency",
        "gemm_half_dim",
        "step_overhead_s",
        "update_s_per_byte",
        "overlap_interference",
        "memory_bytes",
    ):
        v = d[key]
        if isinstance(v, list):
            for level, x in zip(d["levels"], v, strict=True):
                rows.append({"name": f"{key}[{level}]", "value": x, "unit": PARAMETER_UNITS[key]})
        else:
            rows.append({"name": key, "value": v, "unit": PARAMETER_UNITS[key]})
    return rows


def _sha256(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:16]


def _versions() -> str:
    out = [f"python {platform.python_version()}"]
    for mod in ("ddltune", "jax", "jaxlib", "equinox", "optax", "numpy", "matplotlib"):
        try:
            out.append(f"{mod} {version(mod)}")
        except Exception:
            pass
    return ", ".join(out)


#: The files a report writes in its folder, besides ``figures/<FIGURES>``.
REPORT_FILES = ("index.html", "report.md")


def report_owns(rel: str) -> bool:
    """Whether a report folder's entry (relative POSIX path) is the report's own.

    ``index.html``, ``report.md`` and ``figures/<name>`` for the names of
    :data:`FIGURES`: what ``--overwrite`` replaces. Everything else in the folder
    (a user's ``figures/fig1.pdf``, ``figures/sub/``, a run's data files) is kept.

    Example:
        >>> [report_owns(p) for p in ("index.html", "figures/scaling.png", "figures/fig1.pdf")]
        [True, True, False]
    """
    head, _, name = rel.partition("/")
    return rel in REPORT_FILES or (head == "figures" and name in FIGURES)


def check_report_dir(out_dir: str | os.PathLike, overwrite: bool, keep: Iterable[str] = ()) -> Path:
    """Refuse, before anything is computed, a report folder that cannot be written.

    Args:
        out_dir: the report folder.
        overwrite: a non-empty folder is accepted (its report replaced).
        keep: names in ``out_dir`` that do not make it "non-empty".

    Returns:
        ``out_dir`` as a :class:`~pathlib.Path`.

    Raises:
        calibration.OutputPathError: a symbolic link, or a file, where the folder belongs;
            the current folder or one holding it.
        FileExistsError: the folder holds other entries and ``overwrite`` is false.
    """
    out = refuse_symlink(refuse_current_folder(out_dir, "the report folder"), "the report folder")
    if out.exists() and not out.is_dir():
        raise OutputPathError(out, "exists and is not a folder; choose another -o")
    if out.exists() and not overwrite:
        extra = sorted(p.name for p in out.iterdir() if p.name not in set(keep))
        if extra:
            raise FileExistsError(
                f"{out} is not empty ({', '.join(extra[:3])}{', ...' if len(extra) > 3 else ''}); "
                "pass --overwrite to replace the report there (other files are kept), or "
                "choose another -o folder"
            )
    return out


def write_report(
    out_dir: str | os.PathLike,
    context: Mapping,
    *,
    collectives: Sequence[CollectiveSeries] = (),
    curves: Sequence[ScalingCurve] = (),
    recommended: tuple[str, int] | None = None,
    bucket_sweep: Mapping | None = None,
    timelines: Sequence[Timeline] = (),
    sensitivity: Mapping[str, float] | None = None,
    validation: Sequence = (),
    overwrite: bool = False,
    keep: Iterable[str] = (),
) -> ReportFiles:
    """Draw the figures and write ``index.html`` and ``report.md`` into ``out_dir``.

    This is the rendering half; :func:`build_report` assembles its inputs from a
    profile, a workload and a recommendation.

    Args:
        out_dir: the report folder; created if missing.
        context: the text of the report: ``title``, ``subtitle``, ``rec``
            (``headline``, ``facts`` [(label, value)], ``reliable``),
            ``unreliable`` (None or ``reason``, ``rows``, ``advice``),
            ``rationale``, ``warnings`` [str], ``alternatives`` (``head``,
            ``rows``), ``tables`` ({section id: [table]}, a table being
            ``title``, ``head``, ``rows``, ``note``), ``notes`` ({section id:
            [str]}), ``provenance`` [(label, value)].
        collectives: series for the collective-fit and busbw figures (none:
            those figures are skipped, and the report says why).
        curves: one scaling curve per architecture variant.
        recommended: ``(curve label, workers)`` of the recommendation.
        bucket_sweep: ``bucket_bytes``, ``iteration_s``, optional
            ``low_s``/``high_s``, ``chosen_bytes``, ``title``.
        timelines: the recommended configuration's first.
        sensitivity: ``{parameter: elasticity}``.
        validation: ``tuner.validation.ValidationResult`` per model (real
            training against the model; the validation figure).
        overwrite: replace a non-empty folder's report (files in ``keep`` are
            never counted as content, e.g. the data files the run just wrote).
        keep: names in ``out_dir`` that do not make it "non-empty".

    Returns:
        :class:`ReportFiles`.

    Raises:
        FileExistsError: ``out_dir`` holds other files and ``overwrite`` is false.
        calibration.OutputPathError: ``out_dir`` is a file or a symbolic link,
            or the disk is full or read-only (naming ``out_dir``; the old folder
            is unchanged).

    The folder is written through :func:`calibration.atomic_replace_dir`: built
    beside ``out_dir`` and swapped in when complete, so an interruption leaves
    the old folder whole; ``overwrite`` replaces only the report's own files
    (:func:`report_owns`) and keeps every other entry, the user's
    ``figures/fig1.pdf`` or ``figures/sub/`` included.
    """
    import jinja2  # the report's optional extra: checked before anything is written

    out = check_report_dir(out_dir, overwrite, keep)
    result = {}

    def build(folder: Path) -> None:
        figs, skipped = _draw_figures(
            folder / "figures",
            collectives=collectives,
            curves=curves,
            recommended=recommended,
            bucket_sweep=bucket_sweep,
            timelines=timelines,
            sensitivity=sensitivity,
            validation=validation,
        )
        try:
            ver = version("ddltune")
        except PackageNotFoundError:  # pragma: no cover - not installed
            ver = "unknown"
        doc = {"warnings": [], "rationale": "", "unreliable": None, **context}
        doc.update(
            sections=_sections(context, figs, skipped),
            version=ver,
            generated=_dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        )
        _render(jinja2, folder, doc)
        result.update(figs={n: out / "figures" / n for n in figs}, skipped=skipped)

    atomic_replace_dir(out, build, overwrite=True, replaces=report_owns)
    return ReportFiles(
        out, out / "index.html", out / "report.md", result["figs"], result["skipped"]
    )


def _draw_figures(
    figdir: Path,
    *,
    collectives,
    curves,
    recommended,
    bucket_sweep,
    timelines,
    sensitivity,
    validation=(),
) -> tuple[dict[str, Path], dict[str, str]]:
    """Draw every figure there is data for: ``({name: path}, {name: why not drawn})``."""
    figs: dict[str, Path] = {}
    skipped: dict[str, str] = {}

    def draw(name, fn, *args, **kw):
        figs[name] = fn(*args, figdir / name, **kw)

    if collectives:
        draw("collectives.png", plot_collective_fit, collectives)
        draw("busbw.png", plot_busbw, collectives)
    else:
        why = "no collective measurements were given (a preset or a profile without its data)"
        skipped["collectives.png"] = skipped["busbw.png"] = why
    if curves:
        draw("scaling.png", plot_scaling, curves, recommended=recommended)
    else:
        skipped["scaling.png"] = "no scaling curves"
    if bucket_sweep is not None:
        bs = dict(bucket_sweep)
        draw("buckets.png", plot_bucket_sweep, bs.pop("bucket_bytes"), bs.pop("iteration_s"), **bs)
    else:
        skipped["buckets.png"] = "no bucket sweep"
    if timelines:
        draw("timeline.png", plot_timeline, timelines)
    else:
        skipped["timeline.png"] = "no timeline"
    if sensitivity:
        draw("sensitivity.png", plot_sensitivity, sensitivity)
    else:
        skipped["sensitivity.png"] = "no sensitivity analysis"
    if any(v.rows for v in validation):
        draw("validation.png", plot_validation, validation)
    return figs, skipped


#: The report's sections in order: (id, title, text, figure files); the
#: calibration section's text comes from the context.
_SECTIONS = (
    (
        "scaling",
        "Scaling: architectures and worker counts",
        "Each line is the best configuration of one architecture at each worker "
        "count (bucket size and servers chosen per point); bands are 90% prediction "
        "intervals.",
        ("scaling.png",),
    ),
    (
        "buckets",
        "Gradient bucket size",
        "Small buckets pay the per-collective latency many times; large ones start "
        "communicating late and hide less of it behind the backward pass.",
        ("buckets.png",),
    ),
    (
        "timeline",
        "One iteration, step by step",
        "Forward, backward (one shade per bucket), each bucket's communication as "
        "soon as it is ready and the network is free, the update; the hatched part is "
        "communication not hidden behind the backward pass.",
        ("timeline.png",),
    ),
    (
        "sensitivity",
        "What limits it: sensitivity to the hardware",
        "Elasticity of the recommended configuration's iteration time: +1% of a "
        "parameter changes the time by this many %. β is an inverse bandwidth: a positive "
        "elasticity on β means a faster link helps.",
        ("sensitivity.png",),
    ),
    (
        "calibration",
        "Calibration: the fitted model against the measurements",
        None,
        ("collectives.png", "busbw.png"),
    ),
)

_VALIDATION_SECTION = (
    "validation",
    "Validation: real training against the predictions",
    "Each configuration was trained for real (synchronous SGD on processes joined "
    "by jax.distributed, where the table says) and its measured step compared with the "
    "profile's prediction.",
    ("validation.png",),
)


def _sections(context: Mapping, figs: Mapping, skipped: Mapping) -> list[dict]:
    """The sections with their figures, tables and notes (a note for each figure not drawn)."""
    tables = context.get("tables", {})
    notes = context.get("notes", {})
    specs = list(_SECTIONS) + ([_VALIDATION_SECTION] if tables.get("validation") else [])
    sections = []
    for sid, title, text, names in specs:
        sec_notes = list(notes.get(sid, []))
        # busbw.png shares the collectives' reason: one note for both
        sec_notes += [
            f"Figure not drawn: {skipped[n]}." for n in names if n in skipped and n != "busbw.png"
        ]
        sections.append(
            {
                "id": sid,
                "title": title,
                "text": context.get("calibration_text", "") if text is None else text,
                "figures": [
                    {"src": f"figures/{n}", "caption": FIGURES[n]} for n in names if n in figs
                ],
                "tables": tables.get(sid, []),
                "notes": sec_notes,
            }
        )
    return sections


def _render(jinja2, out: Path, doc: Mapping) -> tuple[Path, Path]:
    """Write ``index.html`` and ``report.md`` from the templates."""
    loader = jinja2.FileSystemLoader(str(Path(__file__).parent / "templates"))
    html_env = jinja2.Environment(
        loader=loader, autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True
    )
    md_env = jinja2.Environment(  # no trim_blocks: Markdown needs its blank lines
        loader=loader,
        autoescape=False,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    html_path = atomic_write_text(
        out / "index.html", html_env.get_template("report.html.j2").render(doc)
    )
    md_path = atomic_write_text(
        out / "report.md", md_env.get_template("report.md.j2").render(_md_escape(doc))
    )
    return html_path, md_path


def _md_escape(obj):
    """User text as literal Markdown (no HTML, link, code span or table cell from it), recursively.

    :func:`tuner.markdown_escape` with ``minimal=True``: model, layer and device
    names, paths and notes come from files anyone may have written.
    """
    if isinstance(obj, str):
        return markdown_escape(obj, inline=False, minimal=True)
    if isinstance(obj, Mapping):
        return {k: (_md_escape(v) if k != "sections" else _md_sections(v)) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return (
            type(obj)(_md_escape(v) for v in obj)
            if isinstance(obj, list)
            else tuple(_md_escape(v) for v in obj)
        )
    return obj


def _md_sections(sections):
    out = []
    for sec in sections:
        s = dict(sec)
        s["tables"] = _md_escape(sec["tables"])
        s["notes"] = _md_escape(sec["notes"])
        out.append(s)
    return out


# --------------------------------------------------------------------------- profile text


def profile_summary(profile) -> dict:
    """A JSON-ready summary of a :class:`calibration.Profile` (for ``show`` and the report).

    Keys: ``reliable``, ``heldout_p90`` (fraction or None), ``limit`` (the
    tuner's held-out p90 limit), ``prior`` (str), ``statistic``,
    ``measured_ranges``, ``parameters`` (``profile.parameter_table()``),
    ``series`` (per series: name, train/held-out points, median and p90
    absolute errors as fractions), ``worst`` (the worst points), ``warnings``,
    ``notes``, ``provenance``.
    """
    validation = getattr(profile, "validation", None) or {}
    series = []
    for s in validation.get("series", []):
        tr, ho = s.get("train", {}), s.get("heldout", {})
        series.append(
            {
                "series": series_label(s, always_ranks_per_node=True),
                "kind": s.get("kind"),
                "train_points": tr.get("points"),
                "train_median": tr.get("median"),
                "train_p90": tr.get("p90"),
                "heldout_points": ho.get("points"),
                "heldout_median": ho.get("median"),
                "heldout_p90": ho.get("p90"),
            }
        )
    prior = getattr(profile, "prior", None) or {}
    fit = getattr(profile, "fit", None) or {}
    p90 = float(getattr(profile, "heldout_p90", math.nan))
    return {
        "reliable": bool(profile.reliable),
        "heldout_p90": p90 if math.isfinite(p90) else None,
        "limit": float(RELIABLE_P90_LIMIT),
        "prior": prior.get("preset") if isinstance(prior, Mapping) else str(prior),
        "statistic": fit.get("statistic"),
        "n_regimes": fit.get("n_regimes"),
        "host_links": int(getattr(profile.params, "host_links", 1)),
        "measured_ranges": dict(profile.measured_ranges or {}),
        "parameters": [dict(r) for r in profile.parameter_table()],
        "series": series,
        "worst": list(validation.get("worst", [])),
        "systematic": list(validation.get("systematic", [])),
        "warnings": list(getattr(profile, "warnings", []) or []),
        "notes": list(getattr(profile, "notes", []) or []),
        "provenance": dict(getattr(profile, "provenance", {}) or {}),
    }


#: What ``cache_bytes`` and ``cache_excess`` mean, for ``show``, ``calibrate`` and the report.
CACHE_NOTE = (
    "cache_bytes C, cache_excess k: of the bytes a call moves through one link (for a "
    "2-rank sendrecv or ps_push the message, for a ring all-reduce 2(n−1)/n of it), "
    "those beyond C cost (1 + k) times β (k = 1: twice), as a CPU's caches make its "
    "copies; 'none' where the data show no such knee"
)


def format_parameter_rows(table: Sequence[Mapping]) -> list[list[str]]:
    """Parameter-table rows in human units: name, value, unit, 90% interval, identified.

    Times in µs, inverse bandwidths as bandwidths in GB/s (10⁹ bytes/s; MB/s or
    kB/s below 1 GB/s, the interval in the value's unit; the interval's ends
    swapped accordingly), FLOP/s in GFLOP/s, bytes in GiB, MiB, KiB or B by size.

    Example:
        >>> format_parameter_rows([{"name": "beta_s_per_byte[inter]", "value": 1e-10,
        ...     "unit": "s/byte", "low": 8e-11, "high": 1.25e-10, "identified": True}])
        [['beta_s_per_byte[inter]', '10', 'GB/s', '8 – 12.5', 'yes']]
    """
    return _human_rows(table)


# --------------------------------------------------------------------------- assembling


def _heldout_keys(profile, series: Sequence[CollectiveSeries]) -> list[tuple]:
    """(collective, n, g, bytes) of the points the profile's fit held out, where knowable.

    Recomputed with ``calibration.holdout_mask`` (deterministic, per series)
    and the profile's holdout fraction; empty when either is unavailable.
    """
    frac = (getattr(profile, "validation", None) or {}).get("holdout")
    if not frac:
        return []
    keys, sizes, pts = [], [], []
    for s in series:
        for b in s.message_bytes:
            tag = (s.algorithm,) if s.algorithm else ()
            keys.append(("collective", s.collective, s.num_ranks, s.ranks_per_node, *tag))
            sizes.append(float(b))
            pts.append((s.collective, s.num_ranks, s.ranks_per_node, int(b), *tag))
    mask = np.asarray(holdout_mask(keys, np.asarray(sizes), float(frac)), dtype=bool)
    return [p for p, m in zip(pts, mask, strict=True) if m]


def _fit_series(profile, params, records: list) -> list[CollectiveSeries]:
    """:func:`collective_series` of the profile's fitted statistic, held-out points marked."""
    statistic = (getattr(profile, "fit", None) or {}).get("statistic")
    series = collective_series(params, records, statistic=statistic)
    held = _heldout_keys(profile, series) if series else []
    if held:
        series = collective_series(params, records, statistic=statistic, heldout=held)
    return series


def _scaling_curves(rec, level: float = 0.9) -> list[ScalingCurve]:
    """Per architecture variant, :meth:`tuner.Recommendation.curve`: the fastest configuration
    at each worker count with its ``level`` interval (the tuner evaluates the intervals with
    central differences of one compiled program; measured faster here than one combined
    ``Profile.interval`` call over every variant)."""
    out = []
    for label, sw in rec.sweeps.items():
        c = rec.curve(label, level=level)
        if len(c.workers) == 0:
            continue
        out.append(
            ScalingCurve(
                label,
                sw.variant.name,
                np.asarray(c.workers),
                np.asarray(c.iteration_s),
                np.asarray(c.low_s),
                np.asarray(c.high_s),
                np.asarray(c.throughput),
                np.asarray(c.throughput_low),
                np.asarray(c.throughput_high),
                np.asarray(c.efficiency),
            )
        )
    return out


def _bucket_sweep(profile, params, workload, rec) -> dict:
    bc = rec.bucket_curve()
    caps = np.asarray(bc["bucket_bytes"], dtype=np.float64)
    times = np.asarray(bc["iteration_s"], dtype=np.float64)
    servers = np.maximum(np.asarray(bc["servers"], dtype=np.float64), 1.0)
    cfg = rec.config
    if cfg.bucket_bytes > 0 and not np.any(caps == cfg.bucket_bytes):
        # the refined cap lies between grid points, where the curve may dip: draw it
        # there (else the star, interpolated between its neighbours, sits above it)
        at = int(np.searchsorted(caps, cfg.bucket_bytes))
        caps = np.insert(caps, at, float(cfg.bucket_bytes))
        times = np.insert(times, at, float(cfg.iteration_time_s))
        servers = np.insert(servers, at, float(max(cfg.servers, 1)))
    arch = get_architecture(cfg.architecture, colocated=cfg.colocated)
    out = {
        "bucket_bytes": caps,
        "iteration_s": times,
        "chosen_bytes": float(cfg.bucket_bytes),
        "defaults": {"PyTorch DDP 25 MiB": 25 * 2**20, "Horovod 64 MiB": 64 * 2**20},
        "title": f"Iteration time vs bucket size: {cfg.label}, {cfg.workers} workers",
    }
    if hasattr(profile, "interval"):

        def fn(p):
            return np.asarray(
                iteration_time(
                    p,
                    workload,
                    arch,
                    cfg.workers,
                    ranks_per_node=cfg.ranks_per_node,
                    servers=servers,
                    bucket_bytes=caps,
                    batch_size=cfg.batch_size,
                ).iteration_s
            )

        if takes_batched(profile):  # every perturbed parameter set in one numpy call
            lo, hi = profile.interval(fn, batched=True)
        else:
            lo, hi = profile.interval(central_differences(lambda p: jnp.asarray(fn(p))))
        out["low_s"], out["high_s"] = np.asarray(lo, np.float64), np.asarray(hi, np.float64)
    return out


def _timelines(params, workload, rec, limit: int = 5) -> list[Timeline]:
    """The recommendation's timeline, then the best configuration of each other
    architecture, fastest first (highest best throughput), ``limit`` in all: the
    runner-up's architecture is always among them."""
    cfg = rec.config

    def one(arch, colocated, n, k, b, batch, label):
        return iteration_timeline(
            params,
            workload,
            arch,
            int(n),
            ranks_per_node=cfg.ranks_per_node,
            servers=max(int(k), 1),
            bucket_bytes=float(b),
            batch_size=batch,
            colocated=colocated,
            label=label,
        )

    out = [
        one(
            cfg.architecture,
            cfg.colocated,
            cfg.workers,
            cfg.servers,
            cfg.bucket_bytes,
            cfg.batch_size,
            "recommended: " + cfg.describe(),
        )
    ]
    # each other architecture's best: the runner-ups as recommend refined them (the
    # alternatives table's, whose bucket a new user found different from the figure's
    # grid point), then the sweeps' bests of the others
    alts = {c.label: c for c in rec.alternatives}
    best = []  # (throughput, label, architecture, colocated, n, k, bucket, batch, per block)
    for label, sw in rec.sweeps.items():
        if label == cfg.label:
            continue
        per_block = not getattr(sw.variant.arch, "uses_bucket_bytes", True)
        if label in alts:
            c = alts[label]
            best.append(
                (c.throughput_samples_per_s, label, c.architecture, c.colocated, c.workers,
                 c.servers, c.bucket_bytes, c.batch_size, per_block)
            )  # fmt: skip
            continue
        ok = np.flatnonzero(sw.feasible & np.isfinite(sw.iteration_s))
        if ok.size:
            i = int(ok[np.argmax(sw.throughput[ok])])
            best.append(
                (float(sw.throughput[i]), label, sw.variant.name, sw.variant.colocated,
                 int(sw.workers[i]), int(sw.servers[i]), int(sw.bucket_bytes[i]),
                 float(sw.batch_size[i]), per_block)
            )  # fmt: skip
    best.sort(key=lambda b: -b[0])
    for _, label, arch, colocated, n, k, b, batch, per_block in best[: max(limit - 1, 0)]:
        srv = f", {k} server{'s' if k != 1 else ''}" if k else ""
        what = _bucket_text(b, not per_block)
        what = what if per_block else f"bucket {what}"
        out.append(one(arch, colocated, n, k, b, batch, f"best {label}: {n} workers{srv}, {what}"))
    return out


def _bucket_text(bucket_bytes: int, uses_bucket_bytes: bool) -> str:
    """A configuration's bucket as recommend prints it: fsdp/hsdp gather and scatter per
    wrapped block, and their bucket_bytes is not a setting (the report said "128 MiB"
    where recommend said "per block"; from a new user's trial)."""
    if not uses_bucket_bytes:
        return "per block"
    return "per tensor" if bucket_bytes == 0 else format_bytes(bucket_bytes)


def _interval_text(lo, hi) -> str:
    return f"{format_seconds(lo)} – {format_seconds(hi)}"


def _config_row(i: int, c) -> list[str]:
    lo, hi = c.interval_s
    return [
        str(i),
        c.label,
        str(c.servers) if c.servers else "—",
        str(c.workers),
        _bucket_text(c.bucket_bytes, getattr(c, "uses_bucket_bytes", True)),
        format_seconds(c.iteration_time_s),
        _interval_text(lo, hi),
        f"{c.throughput_samples_per_s:.4g}",
        format_percent(c.scaling_efficiency),
        "—" if c.memory_bytes_per_rank is None else format_bytes(c.memory_bytes_per_rank),
    ]


def _context(profile, params, workload, rec, *, records, inputs, timings, refusal, command):
    """The report's text (see :func:`write_report`'s ``context``), section by section."""
    summary = profile_summary(profile) if hasattr(profile, "parameter_table") else None
    tables, notes = _calibration_tables(summary, params)
    return {
        "title": f"ddltune report: {workload.name}",
        "subtitle": _subtitle(summary, workload, rec),
        "rec": {
            "headline": rec.config.describe(),
            "facts": _facts(rec),
            "reliable": bool(rec.reliable),
        },
        "unreliable": None if rec.reliable else _unreliable(summary, refusal),
        "rationale": rec.rationale,
        "warnings": list(rec.warnings),
        "alternatives": _alternatives_table(rec, workload),
        "tables": {"calibration": tables},
        "notes": {"calibration": notes},
        "calibration_text": "Each point is a measured time (the fitted statistic); lines are "
        "the fitted model. The residual panels show model/measured − 1.",
        "provenance": _provenance(summary, workload, records, inputs, timings, command),
    }


def _placement(cfg) -> str:
    """`` (on one node)`` for a job smaller than a node, `` (G per node)``, or nothing."""
    if cfg.workers < cfg.ranks_per_node:
        return " (on one node)"
    return f" ({cfg.ranks_per_node} per node)" if cfg.ranks_per_node > 1 else ""


def _facts(rec) -> list[tuple[str, str]]:
    """The recommendation's (label, value) lines."""
    cfg = rec.config
    lo, hi = cfg.interval_s
    bd = cfg.breakdown
    facts = [
        ("architecture", cfg.label + (f", {cfg.servers} servers" if cfg.servers else "")),
        (
            "workers",
            f"{cfg.workers}" + _placement(cfg),
        ),
        (
            "gradient bucket",
            "one collective per tensor"
            if cfg.bucket_bytes == 0
            else format_bytes(cfg.bucket_bytes),
        ),
        (
            "iteration time",
            f"{format_seconds(cfg.iteration_time_s)} (90% interval {_interval_text(lo, hi)})",
        ),
        (
            "throughput",
            f"{cfg.throughput_samples_per_s:.4g} samples/s "
            f"({cfg.batch_size:g} per worker per step)",
        ),
        ("scaling efficiency", format_percent(cfg.scaling_efficiency)),
        (
            "P(beats the best other architecture)",
            "—" if not math.isfinite(rec.p_best) else format_percent(rec.p_best),
        ),
        (
            "where the time goes",
            ", ".join(
                f"{k} {format_seconds(bd[f])}"
                for k, f in (
                    ("forward", "forward_s"),
                    ("backward", "backward_s"),
                    ("exposed communication", "exposed_communication_s"),
                    ("update", "update_s"),
                    ("overhead", "overhead_s"),
                )
                if f in bd
            ),
        ),
        ("objective", rec.objective),
    ]
    return facts


def _unreliable(summary, refusal) -> dict:
    """Why the profile is unreliable, its worst held-out series, and what to do."""
    limit = summary["limit"] if summary else RELIABLE_P90_LIMIT
    rows = [
        [
            s["series"],
            format_percent(s["heldout_median"] or math.nan),
            format_percent(s["heldout_p90"]),
        ]
        for s in (summary["series"] if summary else [])
        if s["heldout_points"] and (s["heldout_p90"] or 0) > limit
    ]
    p90 = summary["heldout_p90"] if summary else None
    if p90 is not None:
        reason = (
            f"The profile's error on held-out measurements is {format_percent(p90)} (p90), over the "
            f"tuner's {100 * limit:.0f}% limit, so the tuner refuses to recommend from it; the "
            "recommendation above was forced to show what the model would pick."
        )
    else:
        reason = (refusal[:1].upper() + refusal[1:]) if refusal else "The profile is unreliable."
    systematic = (summary or {}).get("systematic") or []
    if systematic:  # the model's shape, not noise: more repetitions would not help
        advice = (
            "The model does not predict held-out measurements of this cluster well enough "
            f"to trust its ranking, and not because of noise: {systematic_note(systematic)}. "
            "'ddltune recommend' refuses such a profile unless --force is given."
        )
    else:
        advice = (
            "The model does not predict held-out measurements of this cluster well "
            "enough to trust its ranking. Measure again with more repetitions (a larger "
            "--budget-s), on a quieter machine, or over the sizes you care about, and "
            "recalibrate; 'ddltune recommend' refuses such a profile unless --force is given."
        )
    return {"reason": reason, "rows": rows, "advice": advice}


def _alternatives_table(rec, workload=None) -> dict:
    """The chosen configuration and the runner-ups, one row each.

    The memory column counts activations for transformers only
    (:func:`costmodel.activation_bytes`); for other models its head says so.
    """
    head = [
        "#",
        "architecture",
        "servers",
        "workers",
        "bucket",
        "iteration",
        "90% interval",
        "samples/s",
        "efficiency",
        "memory per rank",  # costmodel.memory_per_rank: model states + buffers
    ]
    if workload is not None and getattr(workload, "transformer", None) is None:
        head[-1] = f"memory per rank ({NO_ACTIVATIONS})"
    alt_rows = [_config_row(0, rec.config)] + [
        _config_row(i + 1, a) for i, a in enumerate(rec.alternatives)
    ]
    alt_rows[0][0] = "chosen"
    return {"head": head, "rows": alt_rows}


_PARAMETER_HEAD = ["parameter", "value", "unit", "90% interval", "identified"]


def _calibration_tables(summary, params) -> tuple[list, list]:
    """The calibration section's tables and notes (a preset's parameters when nothing was fitted)."""
    if not summary:
        preset_table = {
            "title": "Cluster parameters (a preset: nothing was fitted)",
            "head": _PARAMETER_HEAD,
            "rows": format_parameter_rows(_params_table_from_params(params)),
            "note": "",
        }
        return [preset_table], []
    tables = _parameter_tables(summary)
    if summary["series"]:
        tables.append(_series_error_table(summary))
    if summary["worst"]:
        tables.append(_worst_points_table(summary))
    return tables, summary["warnings"] + summary["notes"]


def _parameter_tables(summary) -> list[dict]:
    """The fitted parameters, and the protocol regimes the data identified."""
    main = [r for r in summary["parameters"] if not str(r["name"]).startswith("regime_")]
    regimes = [
        r
        for r in summary["parameters"]
        if str(r["name"]).startswith("regime_") and r.get("identified")
    ]
    tables = [
        {
            "title": "Fitted parameters",
            "head": _PARAMETER_HEAD,
            "rows": format_parameter_rows(main),
            "note": "β (s/byte) is shown as a bandwidth, 1/β. conv_efficiency: a convolution's "
            "FLOP rate / flops_per_s (1 = a matmul's rate); conv_backward_efficiency: its backward "
            "rate / its forward rate; gemm_half_dim: the smallest GEMM dimension at which a "
            f"matrix product runs at half of flops_per_s. {CACHE_NOTE}. 'no' (not identified): the measurements "
            "do not pin it down (its 90% interval is wider than about ±16%); it may have "
            f"moved from the prior preset ({summary['prior'] or 'none'}) but not far enough "
            "to trust, and predictions that depend on it extrapolate.",
        }
    ]
    if regimes:
        tables.append(
            {
                "title": "Protocol regimes the data identified (α, 1/β per collective, level, regime)",
                "head": _PARAMETER_HEAD,
                "rows": format_parameter_rows(regimes),
                "note": "",
            }
        )
    return tables


def _series_error_table(summary) -> dict:
    """Train and held-out errors per fit series."""
    return {
        "title": "Fit error per series (absolute error of the fitted "
        f"{summary['statistic'] or 'time'})",
        "head": [
            "series",
            "train points",
            "train median",
            "train p90",
            "held-out points",
            "held-out median",
            "held-out p90",
        ],
        "rows": [
            [
                s["series"],
                str(s["train_points"]),
                format_percent(s["train_median"] or math.nan),
                format_percent(s["train_p90"] or math.nan),
                str(s["heldout_points"]),
                format_percent(s["heldout_median"]),
                format_percent(s["heldout_p90"]),
            ]
            for s in summary["series"]
        ],
        "note": f"Held-out points were not used by the fit. Overall held-out p90: "
        f"{format_percent(summary['heldout_p90'])}"
        f" (limit {format_percent(summary['limit'])}).",
    }


def _worst_points_table(summary) -> dict:
    """The points the fit predicts worst, with their file and line."""
    return {
        "title": "Worst points",
        "head": [
            "series",
            "size",
            "measured",
            "predicted",
            "error",
            "held out",
            "where",
        ],
        "rows": [
            [
                series_label(w, always_ranks_per_node=True),
                _size_or_flops(w),
                format_seconds(w["measured_s"]),
                format_seconds(w["predicted_s"]),
                f"{100 * w['error']:+.1f}%",
                "yes" if w.get("heldout") else "no",
                f"{Path(str(w.get('file'))).name}:{w.get('line')}" if w.get("file") else "—",
            ]
            for w in summary["worst"]
        ],
        "note": "",
    }


def _emulated_cores(em: dict) -> str:
    """How an emulated cluster's nodes share this machine's cores, for the provenance table."""
    per_node, per_cpu = em.get("cpus_per_node"), em.get("nodes_per_cpu")
    if not per_node:  # records from before the nodes were pinned
        return ", sharing its cores"
    if per_cpu and per_cpu > 1:
        return f", {per_cpu} nodes on each CPU"
    return f", each node on {per_node} CPU{'' if per_node == 1 else 's'} of its own"


def _provenance(summary, workload, records, inputs, timings, command) -> list[tuple[str, str]]:
    """Inputs (with sha256), measured ranges, prior, workload, command, timings, versions, date."""
    prov = []
    for f in inputs:
        shown, p = (f[0], Path(f[1])) if isinstance(f, tuple) else (str(f), Path(f))
        prov.append(("input", f"{shown} (sha256 {_sha256(p)})" if p.is_file() else shown))
    if summary:
        mr = summary["measured_ranges"]
        if mr.get("message_bytes"):
            prov.append(
                ("measured sizes", " – ".join(format_bytes(b) for b in mr["message_bytes"]))
            )
            prov.append(("measured ranks", " – ".join(str(v) for v in mr.get("num_ranks", []))))
        prov.append(("prior", str(summary["prior"])))
        for em in summary["provenance"].get("emulated") or []:  # launch.EmulatedCluster
            good = em.get("goodput_bytes_per_s")
            prov.append(
                (
                    "emulated cluster",
                    f"{em.get('nodes')} nodes × {em.get('ranks_per_node')} rank{'' if em.get('ranks_per_node') == 1 else 's'} per node, NICs at "
                    f"{float(em.get('rate_bits_per_s', 0)) / 1e6:g} Mbit/s"
                    + (f" (TCP goodput {good * 8 / 1e6:.1f} Mbit/s)" if good else "")
                    + ": network namespaces on one machine"
                    + _emulated_cores(em),
                )
            )
        prov.append(("fitted statistic", str(summary["statistic"])))
        if summary["n_regimes"]:
            prov.append(("regimes per collective", str(summary["n_regimes"])))
        created = summary["provenance"].get("created")
        if created:
            prov.append(("profile created", str(created)))
    prov.append(
        (
            "workload",
            f"{workload.name}: {workload.total_params:,} parameters "
            f"({format_bytes(workload.total_param_bytes)} of gradients), "
            f"batch {workload.batch_size} per worker"
            + (f"; {workload.source}" if workload.source else ""),
        )
    )
    n_rec = sum(1 for _ in records)
    if n_rec:
        prov.append(("measurements", f"{n_rec} records"))
    if command:
        prov.append(("command", command))
    for phase, secs in (timings or {}).items():
        prov.append((f"time: {phase}", f"{float(secs):.1f} s"))
    prov.append(("versions", _versions()))
    prov.append(("date", _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")))
    return prov


def _subtitle(summary, workload, rec) -> str:
    max_n = max((int(np.max(sw.workers)) for sw in rec.sweeps.values()), default=rec.config.workers)
    where = "preset parameters (no measurements)"
    if summary:
        dev = ", ".join(summary["provenance"].get("device_kinds") or []) or "?"
        where = (
            f"a profile fitted on {summary['provenance'].get('records', '?')} measurements "
            f"(backend {summary['provenance'].get('backend', '?')}, device {dev})"
            + (" on an emulated cluster" if summary["provenance"].get("emulated") else "")
        )
    return (
        f"{workload.name}, batch {workload.batch_size} per worker, up to {max_n} "
        f"workers, objective {rec.objective}; from {where}."
    )


def _where_trained(em) -> str:
    """Where validation's steps ran: ``in an emulated cluster of 2 nodes × 1 rank at 200 Mbit/s``."""
    if not isinstance(em, dict):
        return "on local processes"
    g = em.get("ranks_per_node")
    return (
        f"in an emulated cluster of {em.get('nodes')} nodes × {g} rank{'' if g == 1 else 's'} "
        f"per node, NICs at {float(em.get('rate_bits_per_s', 0)) / 1e6:g} Mbit/s"
    )


def _validation_tables(v) -> list[dict]:
    def band(r) -> str:
        lo, hi = r.interval_low_s, r.interval_high_s
        if not (math.isfinite(lo) and math.isfinite(hi)):
            return "—"
        return f"{format_seconds(lo)} – {format_seconds(hi)}"

    rows = [
        [
            r.label,
            str(r.workers),
            r.bucket_label,
            format_seconds(r.measured_s),
            format_seconds(r.predicted_s),
            band(r),
            f"{100 * r.error:+.1f}%",
        ]
        for r in v.rows
    ]
    tau = "—" if not math.isfinite(v.kendall_tau) else f"{v.kendall_tau:.2f}"
    how = getattr(v, "step_fit_note", "")
    how = f"Predictions: {how}. " if how else ""
    cov = getattr(v, "interval_coverage", float("nan"))
    coverage = (
        f"The 90% interval holds {format_percent(cov)} of the measured steps (median "
        f"half-width {format_percent(v.interval_half_width)} of the prediction). "
        if math.isfinite(cov)
        else ""
    )
    return [
        {
            "title": f"Real training ({v.rows[0].model if v.rows else 'model'}) "
            + _where_trained(getattr(v, "emulated", None))
            + ": measured vs predicted step",
            "head": [
                "architecture",
                "workers",
                "bucket",
                "measured",
                "predicted",
                "90% interval",
                "error",
            ],
            "rows": rows,
            "note": f"MAPE {format_percent(v.mape)}; Kendall τ of the ranking {tau} (over "
            f"{v.tau_pairs[0]} of {v.tau_pairs[1]} pairs whose measured times differ by more "
            f"than their spread); regret of the predicted-best configuration {format_percent(v.regret)}. "
            + coverage
            + how
            + "Compute comes from the measured single-worker step "
            f"({format_seconds(v.baseline_step_s)}); statistic {v.statistic}.",
        }
    ]


def _size_or_flops(w: Mapping) -> str:
    size = w.get("size")
    if size is None:
        return "—"
    return format_bytes(size) if w.get("kind", "collective") == "collective" else f"{size:.3g} FLOP"


def build_report(
    out_dir: str | os.PathLike,
    *,
    profile,
    workload,
    recommendation,
    records: Sequence[Mapping] = (),
    inputs: Sequence[str | os.PathLike] = (),
    timings: Mapping[str, float] | None = None,
    refusal: str | None = None,
    command: str | None = None,
    validation=None,
    overwrite: bool = False,
    keep: Iterable[str] = (),
    progress=None,
) -> ReportFiles:
    """Compute every figure's data and write the report (the whole of ``ddltune report``).

    (Long for its documentation only: the body computes each figure's data
    by a named step, then calls :func:`write_report`.)

    Args:
        out_dir: the report folder (created; see :func:`write_report` for
            ``overwrite`` and ``keep``).
        profile: a :class:`calibration.Profile` (intervals, fit errors,
            parameter table) or a bare :class:`costmodel.ClusterParams`.
        workload: the :class:`costmodel.Workload` the recommendation is for.
        recommendation: the :class:`tuner.Recommendation` (its sweeps give the
            scaling curves, its chosen configuration the bucket sweep, timeline
            and sensitivity).
        records: the measurement records the profile was fitted on (for the
            measured-vs-predicted figures); none: those figures are skipped.
        inputs: input files to list (with their sha256) under provenance; an
            entry may be a ``(name shown, path read)`` pair (a file in a staging
            folder listed under its final name).
        timings: ``{phase: seconds}`` to list under provenance.
        refusal: the tuner's refusal message when the recommendation was forced
            on an unreliable profile (shown prominently).
        command: the command line that made the report.
        validation: a ``tuner.validation.ValidationResult`` (real training
            runs measured against the profile's predictions), or a list of
            them (one per model), each shown as a table with its MAPE, Kendall
            τ and regret; ``None``: no such section.
        overwrite, keep: see :func:`write_report`.
        progress: optional ``callable(str)`` told what is being computed.

    Returns:
        :class:`ReportFiles`.

    Raises:
        FileExistsError: a non-empty ``out_dir`` without ``overwrite``.
        calibration.OutputPathError: see :func:`write_report`.
    """
    say = progress or (lambda _msg: None)
    out = check_report_dir(out_dir, overwrite, keep)  # fail before the slow part
    params = (profile.params if hasattr(profile, "params") else profile).to_numpy()
    records = list(records)
    say("collective fit")
    series = _fit_series(profile, params, records)
    say("scaling curves with intervals")
    curves = _scaling_curves(recommendation)
    say("bucket sweep")
    buckets = _bucket_sweep(profile, params, workload, recommendation)
    say("timelines")
    timelines = _timelines(params, workload, recommendation)
    say("sensitivity")
    elasticity = sensitivity(profile, workload, recommendation)
    say("context")
    context = _context(
        profile,
        params,
        workload,
        recommendation,
        records=records,
        inputs=inputs,
        timings=timings,
        refusal=refusal,
        command=command,
    )
    results = []
    if validation is not None:
        results = list(validation) if isinstance(validation, list | tuple) else [validation]
        context["tables"]["validation"] = [t for v in results for t in _validation_tables(v)]
    say("figures")
    return write_report(
        out,
        context,
        collectives=series,
        curves=curves,
        recommended=(recommendation.config.label, recommendation.config.workers),
        bucket_sweep=buckets,
        timelines=timelines,
        sensitivity=elasticity,
        validation=results,
        overwrite=overwrite,
        keep=keep,
    )
