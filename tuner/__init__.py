"""ddltune tuner: sweep architectures × worker counts × bucket sizes and recommend one.

Public API:

* :func:`predict_iterations`, :func:`predict_collective` — the model's
  numbers for a grid of configurations, with intervals from a profile;
* :func:`recommend` → :class:`Recommendation` (with :class:`Configuration`
  runner-ups, :class:`Curve` helpers and every :class:`Sweep`);
* :func:`sensitivity` — elasticities ∂log T/∂log θ per hardware parameter;
* :func:`what_if` — a recommendation under scaled hardware parameters;
* :func:`min_bandwidth_for_efficiency` → :class:`BandwidthResult` — the
  smallest link bandwidth reaching a target scaling efficiency;
* errors :class:`UnreliableProfileError` and :class:`InfeasibleError`
  (both ``ValueError``);
* the report (:func:`build_report`, :func:`write_report`,
  :func:`iteration_timeline`, :func:`profile_summary`) and the main job
  (:func:`run_main_job`);
* text helpers shared with the CLI: :func:`format_percent`,
  :func:`format_table`, :func:`series_label`, :func:`jsonable`, the
  memory caveat :data:`NO_ACTIVATIONS`.
"""

# The public face is lazy (PEP 562): each name is imported from its module on
# first use, so that ``ddltune --help`` (``tuner.cli``) does not import jax,
# equinox and the whole model before it prints anything. ``from tuner import
# recommend`` and ``tuner.recommend`` work as with eager imports.
import importlib as _importlib

#: Public name -> the module that defines it (relative to this package).
_EXPORTS = {
    "RELIABLE_P90_LIMIT": "calibration",
    "NO_ACTIVATIONS": "._format",
    "format_percent": "._format",
    "format_table": "._format",
    "jsonable": "._format",
    "series_label": "._format",
    "PREDICTION_LEVEL": "._predict",
    "measured_ranks_per_node": "._predict",
    "node_capacity_note": "._predict",
    "predict_collective": "._predict",
    "predict_iterations": "._predict",
    "size_warnings": "._predict",
    "topology_warnings": "._predict",
    "OBJECTIVES": "._recommend",
    "Configuration": "._recommend",
    "Curve": "._recommend",
    "InfeasibleError": "._recommend",
    "Recommendation": "._recommend",
    "UnreliableProfileError": "._recommend",
    "recommend": "._recommend",
    "ReportFiles": "._report",
    "build_report": "._report",
    "check_report_dir": "._report",
    "format_parameter_rows": "._report",
    "CACHE_NOTE": "._report",
    "iteration_timeline": "._report",
    "profile_summary": "._report",
    "report_owns": "._report",
    "write_report": "._report",
    "RUN_DEFAULTS": "._defaults",
    "RunResult": "._run",
    "run_main_job": "._run",
    "model_option": "._run",
    "recommend_command": "._run",
    "DEFAULT_BUCKET_GRID": "._search",
    "HOROVOD_FUSION_BYTES": "._search",
    "Sweep": "._search",
    "Variant": "._search",
    "evaluate": "._search",
    "resolve_variants": "._search",
    "SENSITIVITY_NAMES": "._sensitivity",
    "sensitivity": "._sensitivity",
    "ddp_bucket_cap_bytes": "._settings",
    "format_framework_settings": "._settings",
    "framework_settings": "._settings",
    "markdown_escape": "._text",
    "strip_controls": "._text",
    "BandwidthResult": "._whatif",
    "min_bandwidth_for_efficiency": "._whatif",
    "what_if": "._whatif",
    "ValidationResult": ".validation",
    "ValidationRow": ".validation",
    "compare_steps": ".validation",
    "validate": ".validation",
}

#: Subpackages, imported on first attribute access (``tuner.validation``).
_SUBPACKAGES = ("validation",)

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _SUBPACKAGES:
        return _importlib.import_module(f".{name}", __name__)
    try:
        module = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(_importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted({*globals(), *_EXPORTS, *_SUBPACKAGES})
