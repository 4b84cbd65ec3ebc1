"""ddltune calibration: measure collectives on a cluster, import nccl-tests
outputs, and fit the cost model's hardware parameters to them."""

from ._collect import COLLECT_PATTERNS as COLLECT_PATTERNS
from ._collect import SUITES as COLLECT_SUITES  # noqa: F401 - public under this name
from ._collect import CollectError as CollectError
from ._collect import CollectResult as CollectResult
from ._collect import check_local_bounds as check_local_bounds
from ._collect import collect as collect
from ._collect import summary_rows as summary_rows
from ._fit import STATISTICS as STATISTICS
from ._fit import CalibrationWarning as CalibrationWarning
from ._fit import calibrate as calibrate
from ._fit import default_prior_preset as default_prior_preset
from ._fit import parse_prior_preset as parse_prior_preset
from ._nccl_tests import import_nccl_tests as import_nccl_tests
from ._nccl_tests import parse_nccl_tests as parse_nccl_tests
from ._output import MANIFEST_NAME as MANIFEST_NAME
from ._output import OutputPathError as OutputPathError
from ._output import atomic_replace_dir as atomic_replace_dir
from ._output import read_manifest as read_manifest
from ._output import refuse_symlink as refuse_symlink
from ._profile import Profile as Profile
from ._profile import jsonable as jsonable
from ._records import KINDS as KINDS
from ._records import MAX_JSON_DEPTH as MAX_JSON_DEPTH
from ._records import SCHEMA_VERSION as SCHEMA_VERSION
from ._records import DuplicateRecordWarning as DuplicateRecordWarning
from ._records import RecordRepairWarning as RecordRepairWarning
from ._records import RecordWriter as RecordWriter
from ._records import atomic_write_text as atomic_write_text
from ._records import describe_origin as describe_origin
from ._records import host_fingerprint as host_fingerprint
from ._records import iter_records as iter_records
from ._records import json_depth_ok as json_depth_ok
from ._records import provenance as provenance
from ._records import read_records as read_records
from ._records import record_key as record_key
from ._records import record_origin as record_origin
from ._records import time_statistics as time_statistics
from ._records import validate_record as validate_record
from ._summary import summarize_measurements as summarize_measurements
from ._validation import RELIABLE_P90_LIMIT as RELIABLE_P90_LIMIT
from ._validation import holdout_mask as holdout_mask
from ._validation import series_label as series_label
