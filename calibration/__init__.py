"""ddltune calibration: measure collectives on a cluster, import nccl-tests
outputs, and fit the cost model's hardware parameters to them."""

from ._records import KINDS as KINDS
from ._records import SCHEMA_VERSION as SCHEMA_VERSION
from ._records import RecordWriter as RecordWriter
from ._records import atomic_write_text as atomic_write_text
from ._records import host_fingerprint as host_fingerprint
from ._records import iter_records as iter_records
from ._records import provenance as provenance
from ._records import read_records as read_records
from ._records import record_key as record_key
from ._records import time_statistics as time_statistics
from ._records import validate_record as validate_record
from ._nccl_tests import import_nccl_tests as import_nccl_tests
from ._nccl_tests import parse_nccl_tests as parse_nccl_tests
