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

from ._hf import HF_MODEL_TYPES as HF_MODEL_TYPES
from ._hf import workload_from_hf_config as workload_from_hf_config
from ._loaders import load_layers as load_layers
from ._loaders import workload_from_pytree as workload_from_pytree
from ._loaders import workload_to_layers as workload_to_layers
from ._workload import Workload as Workload
from ._zoo import WORKLOAD_NAMES as WORKLOAD_NAMES
from ._zoo import get_workload as get_workload

__all__ = [
    "HF_MODEL_TYPES",
    "WORKLOAD_NAMES",
    "Workload",
    "get_workload",
    "load_layers",
    "workload_from_hf_config",
    "workload_from_pytree",
    "workload_to_layers",
]
