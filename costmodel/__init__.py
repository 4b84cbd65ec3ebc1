"""ddltune's cost model: a pure, differentiable JAX model of one synchronous
data-parallel training iteration (compute + collective communication with
bucketed overlap), per gradient-exchange architecture.

Nothing here touches files, processes or the network.
"""

from ._errors import InputFileError as InputFileError
from ._errors import format_choices as format_choices
from ._memory import OPTIMIZER_WORDS as OPTIMIZER_WORDS
from ._memory import MemoryBreakdown as MemoryBreakdown
from ._memory import memory_per_rank as memory_per_rank
from ._memory import optimizer_bytes_per_param as optimizer_bytes_per_param
from ._names import ALL_REDUCE_ALGORITHMS as ALL_REDUCE_ALGORITHMS
from ._names import ARCHITECTURE_NAMES as ARCHITECTURE_NAMES
from ._names import BUSBW_FACTOR as BUSBW_FACTOR
from ._names import COLLECTIVE_NAMES as COLLECTIVE_NAMES
from ._params import LEVELS as LEVELS
from ._params import PARAMETER_UNITS as PARAMETER_UNITS
from ._params import ClusterParams as ClusterParams
from ._precision import GRAD_DTYPES as GRAD_DTYPES
from ._precision import accumulate as accumulate
from ._precision import accumulated_iteration_time as accumulated_iteration_time
from ._precision import accumulated_workload as accumulated_workload
from ._precision import grad_dtype_bytes as grad_dtype_bytes
from ._precision import with_grad_dtype as with_grad_dtype
from ._presets import DEFAULT_NICS_PER_NODE as DEFAULT_NICS_PER_NODE
from ._presets import DEVICE_PRESETS as DEVICE_PRESETS
from ._presets import INTRA_PRESETS as INTRA_PRESETS
from ._presets import NETWORK_PRESETS as NETWORK_PRESETS
from ._presets import describe_preset as describe_preset
from ._presets import preset as preset
from ._timeline import DEFAULT_BUCKET_BYTES as DEFAULT_BUCKET_BYTES
from ._timeline import Breakdown as Breakdown
from ._timeline import BucketSchedule as BucketSchedule
from ._timeline import BucketTable as BucketTable
from ._timeline import WorkloadTerms as WorkloadTerms
from ._timeline import bucket_schedule as bucket_schedule
from ._timeline import bucket_table as bucket_table
from ._timeline import bucketize as bucketize
from ._timeline import fluid_iteration_time as fluid_iteration_time
from ._timeline import iteration_time as iteration_time
from ._units import format_bandwidth as format_bandwidth
from ._units import format_bytes as format_bytes
from ._units import format_seconds as format_seconds
from ._units import parse_bytes as parse_bytes
from ._units import parse_bytes_list as parse_bytes_list
from .architectures import AbstractArchitecture as AbstractArchitecture
from .architectures import get_architecture as get_architecture
from .architectures import with_overlap as with_overlap
from .collectives import COLLECTIVES as COLLECTIVES
from .collectives import AbstractCollective as AbstractCollective
from .collectives import CollectiveBatch as CollectiveBatch
from .collectives import busbw as busbw
from .collectives import collective_batch as collective_batch
from .collectives import collective_batch_time as collective_batch_time
from .collectives import collective_time as collective_time
from .collectives import get_collective as get_collective
from .workloads import WORKLOAD_NAMES as WORKLOAD_NAMES
from .workloads import Workload as Workload
from .workloads import get_workload as get_workload
from .workloads import load_layers as load_layers
from .workloads import workload_from_hf_config as workload_from_hf_config
from .workloads import workload_from_pytree as workload_from_pytree
