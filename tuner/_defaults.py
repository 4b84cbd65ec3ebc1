"""Defaults of the main job and of validation, in a pure-Python module of their own.

``ddltune run --help`` and ``ddltune validate --help`` print them; the modules
that use them (:mod:`tuner._run`, :mod:`tuner.validation`) import jax.
"""

#: The main job's collector settings: sized to finish in about a minute with 2
#: local processes on a 2-core machine (7 collectives × 15 sizes from 1 KiB to
#: 16 MiB, ×2 apart, plus the compute kernels; at least 5 timed repetitions
#: and 0.5 s per point). ×2, not ×4: the fit predicts the sizes it did not measure
#: (a quarter are held out) across a 4× gap instead of a 16× one; on one
#: emulated 4 × 1 collection the held-out p90 was 10.6% at ×2 and 25.0% on
#: its ×4 subset (issue 22, benchmarks/README.md).
RUN_DEFAULTS = {
    "workers": 2,
    "min_bytes": 1024,
    "max_bytes": 16 * 1024**2,
    "step_factor": 2,
    "iters": 5,
    "budget_s": 0.5,
    "rounds": 3,
    "model": "resnet50",
    "batch_size": 64,
    "max_workers": 64,
}

#: Default bucket caps of ``ddltune validate``: one bucket per tensor, 1.5 MiB, 16 MiB.
DEFAULT_VALIDATE_BUCKETS = (0, 3 * 2**19, 16 * 2**20)
