"""Test configuration: float64 and strict dtype promotion, once for the session."""

import jax

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_dtype_promotion", "strict")
