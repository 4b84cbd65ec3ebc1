"""Defaults of the main job and of validation, in a pure-Python module of their own.

``ddltune run --help`` and ``ddltune validate --help`` print them; the modules
that use them (:mod:`tuner._run`, :mod:`tuner.validation`) import jax.
"""

#: The main job's collector settings: sized to finish in about a minute with 2
#: local processes on a 2-core machine (7 collectives × 8 sizes from 1 KiB to
#: 16 MiB, ×4 apart, plus the compute kernels; at least 5 timed repetitions
#: and 0.5 s per point).
RUN_DEFAULTS = {
    "workers": 2,
    "min_bytes": 1024,
    "max_bytes": 16 * 1024**2,
    "step_factor": 4,
    "iters": 5,
    "budget_s": 0.5,
    "rounds": 3,
    "model": "resnet50",
    "batch_size": 64,
    "max_workers": 64,
}

#: Default bucket caps of ``ddltune validate``: one bucket per tensor, 1.5 MiB, 16 MiB.
DEFAULT_VALIDATE_BUCKETS = (0, 3 * 2**19, 16 * 2**20)
