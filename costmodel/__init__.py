"""ddltune's cost model: a pure, differentiable JAX model of one synchronous
data-parallel training iteration (compute + collective communication with
bucketed overlap), per gradient-exchange architecture.

Nothing here touches files, processes or the network.
"""

from ._errors import InputFileError as InputFileError
from ._errors import format_choices as format_choices
from ._names import ALL_REDUCE_ALGORITHMS as ALL_REDUCE_ALGORITHMS
from ._names import ARCHITECTURE_NAMES as ARCHITECTURE_NAMES
from ._names import BUSBW_FACTOR as BUSBW_FACTOR
from ._names import COLLECTIVE_NAMES as COLLECTIVE_NAMES
from ._units import format_bandwidth as format_bandwidth
from ._units import format_bytes as format_bytes
from ._units import format_seconds as format_seconds
from ._units import parse_bytes as parse_bytes
from ._units import parse_bytes_list as parse_bytes_list
