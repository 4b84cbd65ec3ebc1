"""Real training against the model: the harness that trains and the comparison.

:func:`measure_configurations` / :func:`run_training` train a real model with
parameter servers, peer-to-peer and ring all-reduce on processes joined by
``jax.distributed`` (through :mod:`launch`) and record each step;
:func:`validate` and :func:`compare_steps` hold those steps against a
profile's predictions (MAPE, Kendall τ, regret, interval coverage).
"""

# The public face is lazy (PEP 562): each name is imported from its module on
# first use, so that ``ddltune validate --help`` (DEFAULT_VALIDATE_BUCKETS) does
# not import jax. ``from tuner.validation import X`` gives the same objects as
# eager imports did; ``__all__`` and ``dir()`` list every name.
import importlib as _importlib

#: Public name -> the module that defines it (relative to this package).
_EXPORTS = {
    "StepConfig": "._harness",
    "StepMeasurement": "._harness",
    "TrainingRun": "._harness",
    "launch_groups": "._harness",
    "measure_configurations": "._harness",
    "model_name": "._harness",
    "model_workload": "._harness",
    "processes_needed": "._harness",
    "program_key": "._harness",
    "same_programs": "._harness",
    "run_training": "._harness",
    "start_together": "._train_worker",
    "DEFAULT_VALIDATE_BUCKETS": ".._defaults",
    "ValidationResult": "._validate",
    "ValidationRow": "._validate",
    "bucket_text": "._validate",
    "check_validation_plan": "._validate",
    "can_fit_step_records": "._validate",
    "compare_steps": "._validate",
    "fit_step_records": "._validate",
    "load_params": "._validate",
    "pool_same_programs": "._validate",
    "predict_records": "._validate",
    "rank_agreement": "._validate",
    "regret": "._validate",
    "seed_configurations": "._validate",
    "seed_experiment": "._validate",
    "validate": "._validate",
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
