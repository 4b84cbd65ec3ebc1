"""Workloads: what one data-parallel worker computes and exchanges per training step.

- :class:`Workload`: parameter tensors in forward order with their sizes and the
  FLOPs per sample attributed to each (FLOPs = 2 × MACs; each layer's FLOPs on
  its last tensor).
- The model zoo: :func:`get_workload` / :data:`WORKLOAD_NAMES`, built layer by
  layer from published shapes (torchvision, Hugging Face) and checked against
  published parameter counts and FLOPs.
- Your own model: :func:`load_layers` (JSON or CSV layer list),
  :func:`workload_from_pytree` (equinox module or flax params), and
  :func:`workload_to_layers` (the JSON document ``load_layers`` reads).
- A Hugging Face transformer: :func:`workload_from_hf_config` (its ``config.json``
  alone; ``load_layers`` also accepts one).
"""

# The public face is lazy (PEP 562): each name is imported from its module on
# first use, so that the zoo's names (WORKLOAD_NAMES) do not import jax and
# equinox. ``from costmodel.workloads import X`` gives the same objects as eager
# imports did; ``__all__`` and ``dir()`` list every name.
import importlib as _importlib

#: Public name -> the module that defines it (relative to this package).
_EXPORTS = {
    "HF_MODEL_TYPES": "._hf",
    "workload_from_hf_config": "._hf",
    "load_layers": "._loaders",
    "workload_from_pytree": "._loaders",
    "workload_to_layers": "._loaders",
    "Workload": "._workload",
    "TransformerShape": "._workload",
    "CHECKPOINTING": "._workload",
    "gemm_groups": "._workload",
    "dense_gemm": "._builder",
    "conv_gemm": "._builder",
    "small_gemm_at": "._workload",
    "WORKLOAD_NAMES": "._names",
    "get_workload": "._zoo",
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
