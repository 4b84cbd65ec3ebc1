"""ddltune's cost model: a pure, differentiable JAX model of one synchronous
data-parallel training iteration (compute + collective communication with
bucketed overlap), per gradient-exchange architecture.

Nothing here touches files, processes or the network.
"""

# The public face is lazy (PEP 562): each name is imported from its module on
# first use, so that ``ddltune COMMAND --help`` (which needs a few names, such
# as WORKLOAD_NAMES) does not import jax and equinox. ``from costmodel import X``
# and ``costmodel.X`` give the same objects as eager imports did; ``__all__``
# and ``dir()`` list every name.
import importlib as _importlib

#: Public name -> the module that defines it (relative to this package).
_EXPORTS = {
    "InputFileError": "._errors",
    "format_choices": "._errors",
    "read_text_bounded": "._errors",
    "OPTIMIZER_WORDS": "._memory",
    "MemoryBreakdown": "._memory",
    "memory_per_rank": "._memory",
    "optimizer_bytes_per_param": "._memory",
    "ALL_REDUCE_ALGORITHMS": "._names",
    "ARCHITECTURE_NAMES": "._names",
    "BUSBW_FACTOR": "._names",
    "COLLECTIVE_NAMES": "._names",
    "LEVELS": "._params",
    "PARAMETER_UNITS": "._params",
    "PARAMETER_NONE": "._params",
    "ClusterParams": "._params",
    "GRAD_DTYPES": "._precision",
    "accumulate": "._precision",
    "accumulated_iteration_time": "._precision",
    "accumulated_workload": "._precision",
    "grad_dtype_bytes": "._precision",
    "with_grad_dtype": "._precision",
    "DEFAULT_NICS_PER_NODE": "._presets",
    "DEVICE_PRESETS": "._presets",
    "INTRA_PRESETS": "._presets",
    "NETWORK_PRESETS": "._presets",
    "describe_preset": "._presets",
    "activation_bytes": "._memory",
    "with_activation_checkpointing": "._memory",
    "device_flops_per_s": "._presets",
    "COMPUTE_DTYPES": "._presets",
    "preset": "._presets",
    "DEFAULT_BUCKET_BYTES": "._timeline",
    "Breakdown": "._timeline",
    "BucketSchedule": "._timeline",
    "BucketTable": "._timeline",
    "WorkloadTerms": "._timeline",
    "bucket_schedule": "._timeline",
    "bucket_table": "._timeline",
    "bucketize": "._timeline",
    "fluid_iteration_time": "._timeline",
    "iteration_time": "._timeline",
    "format_bandwidth": "._units",
    "format_bytes": "._units",
    "format_seconds": "._units",
    "format_first": "._units",
    "parse_bytes": "._units",
    "parse_bytes_list": "._units",
    "AbstractArchitecture": ".architectures",
    "get_architecture": ".architectures",
    "with_overlap": ".architectures",
    "COLLECTIVES": ".collectives",
    "AbstractCollective": ".collectives",
    "CollectiveBatch": ".collectives",
    "busbw": ".collectives",
    "collective_batch": ".collectives",
    "collective_batch_time": ".collectives",
    "collective_time": ".collectives",
    "get_collective": ".collectives",
    "WORKLOAD_NAMES": ".workloads",
    "Workload": ".workloads",
    "TransformerShape": ".workloads",
    "get_workload": ".workloads",
    "load_layers": ".workloads",
    "workload_from_hf_config": ".workloads",
    "workload_from_pytree": ".workloads",
}

#: Subpackages, imported on first attribute access (``costmodel.workloads``).
_SUBPACKAGES = ("architectures", "collectives", "workloads")

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
