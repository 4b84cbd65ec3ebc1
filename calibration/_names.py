"""Names of calibration's choices, in a pure-Python module of their own.

``ddltune calibrate --help`` and ``ddltune collect --help`` list them; their
defining modules (the fit, the measuring worker) import jax.
"""

#: Time statistics calibrate can fit.
STATISTICS = ("p10", "median", "mean", "min")

#: The patterns ``ddltune collect`` measures, in the order it measures them.
COLLECT_PATTERNS = (
    "all_reduce",
    "reduce_scatter",
    "all_gather",
    "all_to_all",
    "sendrecv",
    "ps_push",
    "ps_pull",
)

#: The measurement suites (``calibration.COLLECT_SUITES``; ``SUITES`` in the collector).
COLLECT_SUITES = ("collectives", "compute")
