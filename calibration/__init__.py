"""ddltune calibration: measure collectives on a cluster, import nccl-tests
outputs, and fit the cost model's hardware parameters to them."""

# The public face is lazy (PEP 562): each name is imported from its module on
# first use, so that ``ddltune COMMAND --help`` (which needs STATISTICS and
# COLLECT_PATTERNS) does not import jax, equinox and optax. ``from calibration
# import X`` and ``calibration.X`` give the same objects as eager imports did;
# ``__all__`` and ``dir()`` list every name.
import importlib as _importlib

#: Public name -> the module that defines it (relative to this package).
_EXPORTS = {
    "COLLECT_PATTERNS": "._names",
    "COLLECT_SUITES": "._names",
    "CollectError": "._collect",
    "CollectResult": "._collect",
    "check_local_bounds": "._collect",
    "known_wrong_cause": "._collect",
    "mem_available_bytes": "._collect",
    "collect": "._collect",
    "summary_rows": "._collect",
    "STATISTICS": "._names",
    "CalibrationWarning": "._fit",
    "calibrate": "._fit",
    "STEP_TERMS": "._steps",
    "compute_contention": "._records",
    "core_sharing": "._records",
    "sync_batch": "._records",
    "contended": "._steps",
    "fit_steps": "._steps",
    "read_steps": "._steps",
    "read_step_records": "._steps",
    "read_steps_csv": "._steps",
    "run_architecture": "._steps",
    "step_record_run": "._steps",
    "step_time": "._steps",
    "sync_time": "._steps",
    "default_prior_preset": "._fit",
    "parse_prior_preset": "._fit",
    "import_nccl_tests": "._nccl_tests",
    "parse_nccl_tests": "._nccl_tests",
    "MANIFEST_NAME": "._output",
    "OutputPathError": "._output",
    "atomic_replace_dir": "._output",
    "check_output_file": "._output",
    "read_manifest": "._output",
    "refuse_symlink": "._output",
    "refuse_current_folder": "._output",
    "Profile": "._profile",
    "PRESET_FLOPS_SD": "._profile",
    "jsonable": "._profile",
    "preset_sd": "._profile",
    "ParamLayout": "._layout",
    "PRIOR_SD": "._layout",
    "STEPS_ONLY_PARAMETERS": "._layout",
    "KINDS": "._records",
    "MAX_JSON_DEPTH": "._records",
    "RECOMMENDATION_WORDS": "._records",
    "SCHEMA_VERSION": "._records",
    "DuplicateRecordWarning": "._records",
    "RecordRepairWarning": "._records",
    "RecordWriter": "._records",
    "atomic_write_text": "._records",
    "file_entry": "._records",
    "describe_origin": "._records",
    "emulated_spec": "._records",
    "collective_algorithm": "._records",
    "cost_algorithm": "._records",
    "host_fingerprint": "._records",
    "iter_records": "._records",
    "json_depth_ok": "._records",
    "is_recommendation": "._records",
    "provenance": "._records",
    "read_records": "._records",
    "record_key": "._records",
    "record_origin": "._records",
    "time_statistics": "._records",
    "validate_record": "._records",
    "summarize_measurements": "._summary",
    "RELIABLE_P90_LIMIT": "._validation",
    "holdout_mask": "._validation",
    "systematic_note": "._validation",
    "series_label": "._validation",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    try:
        module = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(_importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted({*globals(), *_EXPORTS})
