"""Real training against the model: the harness that trains and the comparison.

:func:`measure_configurations` / :func:`run_training` train a real model with
parameter servers, peer-to-peer and ring all-reduce on processes joined by
``jax.distributed`` (through :mod:`launch`) and record each step;
:func:`validate` and :func:`compare_steps` hold those steps against a
profile's predictions (MAPE, Kendall τ, regret, interval coverage).
"""

from ._harness import StepConfig as StepConfig
from ._harness import StepMeasurement as StepMeasurement
from ._harness import TrainingRun as TrainingRun
from ._harness import measure_configurations as measure_configurations
from ._harness import model_name as model_name
from ._harness import model_workload as model_workload
from ._harness import processes_needed as processes_needed
from ._harness import run_training as run_training
from ._validate import DEFAULT_VALIDATE_BUCKETS as DEFAULT_VALIDATE_BUCKETS
from ._validate import ValidationResult as ValidationResult
from ._validate import ValidationRow as ValidationRow
from ._validate import compare_steps as compare_steps
from ._validate import load_params as load_params
from ._validate import predict_records as predict_records
from ._validate import rank_agreement as rank_agreement
from ._validate import regret as regret
from ._validate import validate as validate
