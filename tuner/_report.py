"""The report: an HTML page and a Markdown file with PNG figures, from a profile and a recommendation.

:func:`write_report` writes ``DIR/index.html`` (opens from disk: no server, no
network, no CDN; images are PNG files beside it, referenced by relative
paths), ``DIR/report.md`` (the same content for a repository or a chat) and
``DIR/figures/*.png``. The data behind each figure is computed here in numpy
from the public APIs (:mod:`costmodel`, the profile, the recommendation) and
drawn by :mod:`tuner._figures`.

The iteration timeline (:func:`iteration_timeline`) replays the cost model's
bucket recursion (costmodel/_timeline.py; DESIGN.md "Iteration timeline")

    start_b = max(r_b, end_{b−1}),   end_b = start_b + c_b,
    T = T_fwd + max(T_bwd', end_K) + T_update + Σ_b c2_b + T_overhead

sequentially in numpy, bucket by bucket, so that each bucket's start and end
can be drawn; its total equals :func:`costmodel.iteration_time` (a test checks
it).

References:
    Li et al., "PyTorch Distributed", VLDB 2020 (buckets in reverse order);
    Zhang et al., "Poseidon", USENIX ATC 2017 (wait-free backpropagation).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import math
import os
import platform
import shutil
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np

from costmodel import (
    DEFAULT_BUCKET_BYTES,
    PARAMETER_UNITS,
    bucketize,
    collective_time,
    format_bytes,
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
)

__all__ = [
    "iteration_timeline",
    "collective_series",
    "fit_statistic",
    "write_report",
    "ReportFiles",
    "FIGURES",
]

#: The report's figures: file name → what it shows (the report's captions).
FIGURES = {
    "collectives.png": "Measured vs predicted time per collective and rank count, with residuals",
    "busbw.png": "Bus bandwidth vs message size, measured and predicted",
    "scaling.png": "Iteration time, throughput and scaling efficiency vs workers per architecture",
    "buckets.png": "Iteration time vs bucket size for the recommended architecture and workers",
    "timeline.png": "One iteration as a timeline, recommended and best of each other architecture",
    "sensitivity.png": "Sensitivity of the iteration time to each hardware parameter",
}


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

    The compute and update times come from :func:`costmodel.iteration_time`
    (its :class:`~costmodel.Breakdown`); each bucket's communication from the
    architecture's ``phase1_s``/``phase2_s`` on the exact bucketing
    (:func:`costmodel.bucketize`); the recursion start_b = max(r_b, end_{b−1})
    runs sequentially here. Backward slows by the overlap interference
    (1 + ι·min(C₁/T_bwd, 1)) when the architecture overlaps, as in the model.

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
        ValueError: as :func:`costmodel.iteration_time` (unknown architecture,
            workers < 1, negative bucket size, ...).

    Example:
        >>> from costmodel import preset, get_workload
        >>> p, w = preset("ethernet-10g", "v100"), get_workload("resnet50", 64)
        >>> tl = iteration_timeline(p, w, "ring", 8, bucket_bytes=25 * 2**20)
        >>> len(tl.start_s) == len(tl.bucket_bytes), bool(tl.end_s[-1] <= tl.iteration_s)
        (True, True)
    """
    import jax.numpy as jnp

    arch = get_architecture(str(architecture), colocated=colocated)
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
    )
    fwd, bwd = float(bd.forward_s), float(bd.backward_s)
    update, overhead = float(bd.update_s), float(bd.overhead_s)
    sizes, ready_frac = bucketize(workload, bucket_bytes, first_bucket_bytes)
    K = len(sizes)
    dtype = jnp.asarray(params.alpha_s).dtype

    def full(v):
        return jnp.full((K,), float(v), dtype=dtype)

    s = jnp.asarray(sizes, dtype=dtype)
    n, g, k = full(workers), full(ranks_per_node), full(servers)
    c1 = np.asarray(arch.phase1_s(params, s, n, g, k), dtype=np.float64)
    c2 = np.asarray(arch.phase2_s(params, s, n, g, k), dtype=np.float64)
    C1 = float(c1.sum())
    if arch.overlaps:
        frac = min(C1 / max(bwd, 1e-30), 1.0)
        bwd_eff = bwd * (1.0 + float(params.overlap_interference) * frac)
        ready = fwd + np.asarray(ready_frac) * bwd_eff
    else:
        bwd_eff = bwd
        ready = np.full(K, fwd + bwd)
    start, end = np.zeros(K), np.zeros(K)
    prev = -math.inf
    for b in range(K):
        start[b] = max(ready[b], prev)
        end[b] = start[b] + c1[b]
        prev = end[b]
    core_end = max(fwd + bwd_eff, float(end[-1]) if K else fwd + bwd_eff)
    update_start = core_end
    p2_start = update_start + update + np.concatenate([[0.0], np.cumsum(c2)[:-1]])
    overhead_start = update_start + update + float(c2.sum())
    total = overhead_start + overhead
    exposed = max(total - fwd - bwd - update - overhead, 0.0)
    if label is None:
        label = _config_label(
            arch.label if architecture == "ps" else str(architecture),
            workers,
            servers if arch.uses_servers else None,
            bucket_bytes,
        )
    return Timeline(
        label=label,
        overlaps=bool(arch.overlaps),
        forward_s=fwd,
        backward_s=bwd_eff,
        bucket_bytes=np.asarray(sizes, dtype=np.float64),
        ready_s=ready,
        start_s=start,
        end_s=end,
        update_start_s=update_start,
        update_s=update,
        phase2_start_s=p2_start,
        phase2_s=c2,
        overhead_start_s=overhead_start,
        overhead_s=overhead,
        iteration_s=total,
        exposed_s=exposed,
    )


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
    held = {tuple(int(v) if i else v for i, v in enumerate(h)) for h in (heldout or ())}
    groups: dict[tuple, dict[int, float]] = {}
    for r in recs:
        key = (r["collective"], int(r["num_ranks"]), int(r["ranks_per_node"]))
        t = _stat(r, stat)
        sizes = groups.setdefault(key, {})
        b = int(r["message_bytes"])
        sizes[b] = min(t, sizes.get(b, math.inf))
    out = []
    for (name, n, g), pts in sorted(groups.items()):
        x = np.array(sorted(pts), dtype=np.float64)
        meas = np.array([pts[int(b)] for b in x])
        pred = np.asarray(collective_time(params, name, x, float(n), float(g)), dtype=np.float64)
        mask = np.array([(name, n, g, int(b)) in held for b in x], dtype=bool)
        out.append(CollectiveSeries(name, n, g, x, meas, pred, mask))
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


def _pct(x) -> str:
    x = float(x)
    return "—" if not math.isfinite(x) else f"{100.0 * x:.1f}%"


def _human_rows(table: Sequence[Mapping]) -> list[list[str]]:
    """Rows of a profile's parameter table in human units (µs, GB/s, GFLOP/s, GiB)."""
    rows = []
    for p in table:
        name = str(p["name"])
        unit = str(p.get("unit") or PARAMETER_UNITS.get(name.split("[")[0], ""))
        value = float(p["value"])
        lo, hi = float(p.get("low", math.nan)), float(p.get("high", math.nan))
        if unit == "s/byte":  # show bandwidth: the interval's ends swap
            lo, hi = hi, lo
        v, u = _fmt_value(value, unit)
        lo_s, _ = _fmt_value(lo, unit)
        hi_s, _ = _fmt_value(hi, unit)
        ident = p.get("identified")
        rows.append(
            [
                name,
                v,
                u,
                f"{lo_s} – {hi_s}" if math.isfinite(lo) and math.isfinite(hi) else "—",
                "yes" if ident else ("no (prior)" if ident is not None else "—"),
            ]
        )
    return rows


def _fmt_value(value: float, unit: str) -> tuple[str, str]:
    if not math.isfinite(value):
        return "—", unit
    if unit == "s":
        return f"{value * 1e6:.4g}", "µs"
    if unit == "s/byte":
        return (f"{1.0 / value / 1e9:.4g}", "GB/s") if value > 0 else ("∞", "GB/s")
    if unit == "FLOP/s":
        return f"{value / 1e9:.4g}", "GFLOP/s"
    if unit == "bytes":
        return f"{value / 1024**3:.4g}", "GiB"
    return f"{value:.4g}", unit


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
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:16]


def _versions() -> str:
    from importlib.metadata import version

    out = [f"python {platform.python_version()}"]
    for mod in ("ddltune", "jax", "jaxlib", "equinox", "optax", "numpy", "matplotlib"):
        try:
            out.append(f"{mod} {version(mod)}")
        except Exception:
            pass
    return ", ".join(out)


def _prepare_dir(out_dir: Path, overwrite: bool, keep: Iterable[str] = ()) -> None:
    keep = set(keep)
    if out_dir.exists() and not out_dir.is_dir():
        raise NotADirectoryError(f"{out_dir} exists and is not a folder; choose another -o")
    if out_dir.exists():
        extra = [p.name for p in out_dir.iterdir() if p.name not in keep]
        if extra and not overwrite:
            raise FileExistsError(
                f"{out_dir} is not empty ({', '.join(sorted(extra)[:3])}"
                f"{', ...' if len(extra) > 3 else ''}); pass --overwrite to replace the report "
                "there, or choose another -o folder"
            )
    out_dir.mkdir(parents=True, exist_ok=True)
    figs = out_dir / "figures"
    if figs.exists():
        shutil.rmtree(figs)


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
        overwrite: replace a non-empty folder's report (files in ``keep`` are
            never counted as content, e.g. the data files the run just wrote).
        keep: names in ``out_dir`` that do not make it "non-empty".

    Returns:
        :class:`ReportFiles`.

    Raises:
        FileExistsError: ``out_dir`` holds other files and ``overwrite`` is false.
        NotADirectoryError: ``out_dir`` is a file.
    """
    import jinja2

    out = Path(out_dir)
    _prepare_dir(out, overwrite, keep)
    figdir = out / "figures"
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
        figs["buckets.png"] = plot_bucket_sweep(
            bs.pop("bucket_bytes"), bs.pop("iteration_s"), figdir / "buckets.png", **bs
        )
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

    def fig(name):
        return [{"src": f"figures/{name}", "caption": FIGURES[name]}] if name in figs else []

    tables = context.get("tables", {})
    notes = context.get("notes", {})
    sections = [
        {
            "id": "scaling",
            "title": "Scaling: architectures and worker counts",
            "text": "Each line is the best configuration of one architecture at each worker "
            "count (bucket size and servers chosen per point); bands are 90% prediction "
            "intervals.",
            "figures": fig("scaling.png"),
        },
        {
            "id": "buckets",
            "title": "Gradient bucket size",
            "text": "Small buckets pay the per-collective latency many times; large ones start "
            "communicating late and hide less of it behind the backward pass.",
            "figures": fig("buckets.png"),
        },
        {
            "id": "timeline",
            "title": "One iteration, step by step",
            "text": "Forward, backward (one shade per bucket), each bucket's communication as "
            "soon as it is ready and the network is free, the update; the hatched part is "
            "communication not hidden behind the backward pass.",
            "figures": fig("timeline.png"),
        },
        {
            "id": "sensitivity",
            "title": "What limits it: sensitivity to the hardware",
            "text": "Elasticity of the recommended configuration's iteration time: +1% of a "
            "parameter changes the time by this many %. β is an inverse bandwidth: a positive "
            "elasticity on β means a faster link helps.",
            "figures": fig("sensitivity.png"),
        },
        {
            "id": "calibration",
            "title": "Calibration: the fitted model against the measurements",
            "text": context.get("calibration_text", ""),
            "figures": fig("collectives.png") + fig("busbw.png"),
        },
    ]
    for sec in sections:
        sec["tables"] = tables.get(sec["id"], [])
        sec["notes"] = list(notes.get(sec["id"], []))
    for name, why in skipped.items():
        target = {
            "collectives.png": "calibration",
            "busbw.png": "calibration",
            "scaling.png": "scaling",
            "buckets.png": "buckets",
            "timeline.png": "timeline",
            "sensitivity.png": "sensitivity",
        }[name]
        for sec in sections:
            if sec["id"] == target and name != "busbw.png":
                sec["notes"].append(f"Figure not drawn: {why}.")
    from importlib.metadata import PackageNotFoundError, version

    try:
        ver = version("ddltune")
    except PackageNotFoundError:  # pragma: no cover - not installed
        ver = "unknown"
    doc = dict(context)
    doc.setdefault("warnings", [])
    doc.setdefault("rationale", "")
    doc.setdefault("unreliable", None)
    doc.update(
        sections=sections,
        version=ver,
        generated=_dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
    )
    here = Path(__file__).parent / "templates"
    loader = jinja2.FileSystemLoader(str(here))
    html_env = jinja2.Environment(
        loader=loader, autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True
    )
    md_env = jinja2.Environment(
        loader=loader, autoescape=False, undefined=jinja2.StrictUndefined, trim_blocks=True
    )
    md_doc = _md_escape(doc)
    from calibration import atomic_write_text

    html_path = atomic_write_text(
        out / "index.html", html_env.get_template("report.html.j2").render(doc)
    )
    md_path = atomic_write_text(
        out / "report.md", md_env.get_template("report.md.j2").render(md_doc)
    )
    return ReportFiles(out, html_path, md_path, figs, skipped)


def _md_escape(obj):
    """Escape ``|`` in table cells of the Markdown rendering (recursively)."""
    if isinstance(obj, str):
        return obj.replace("|", "\\|")
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


def _series_label(s: Mapping) -> str:
    what = s.get("collective") or s.get("op") or "?"
    n, g = s.get("num_ranks"), s.get("ranks_per_node")
    return f"{what} n={n}" + ("" if g in (None, 1, n) else f" g={g}")


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
                "series": _series_label(s),
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
    try:
        from calibration._validation import UNRELIABLE_P90 as limit
    except ImportError:  # pragma: no cover
        limit = 0.15
    return {
        "reliable": bool(profile.reliable),
        "heldout_p90": p90 if math.isfinite(p90) else None,
        "limit": float(limit),
        "prior": prior.get("preset") if isinstance(prior, Mapping) else str(prior),
        "statistic": fit.get("statistic"),
        "n_regimes": fit.get("n_regimes"),
        "measured_ranges": dict(profile.measured_ranges or {}),
        "parameters": [dict(r) for r in profile.parameter_table()],
        "series": series,
        "worst": list(validation.get("worst", [])),
        "warnings": list(getattr(profile, "warnings", []) or []),
        "notes": list(getattr(profile, "notes", []) or []),
        "provenance": dict(getattr(profile, "provenance", {}) or {}),
    }


def format_parameter_rows(table: Sequence[Mapping]) -> list[list[str]]:
    """Parameter-table rows in human units: name, value, unit, 90% interval, identified.

    Times in µs, inverse bandwidths as bandwidths in GB/s (10⁹ bytes/s, the
    interval's ends swapped accordingly), FLOP/s in GFLOP/s, memory in GiB.

    Example:
        >>> format_parameter_rows([{"name": "beta_s_per_byte[inter]", "value": 1e-10,
        ...     "unit": "s/byte", "low": 8e-11, "high": 1.25e-10, "identified": True}])
        [['beta_s_per_byte[inter]', '10', 'GB/s', '8 – 12.5', 'yes']]
    """
    return _human_rows(table)
