"""ddltune tuner: sweep architectures × worker counts × bucket sizes and recommend one.

Public API:

* :func:`predict_iterations`, :func:`predict_collective` — the model's
  numbers for a grid of configurations, with intervals from a profile;
* :func:`recommend` → :class:`Recommendation` (with :class:`Configuration`
  runner-ups, :class:`Curve` helpers and every :class:`Sweep`);
* :func:`sensitivity` — elasticities ∂log T/∂log θ per hardware parameter;
* :func:`what_if` — a recommendation under scaled hardware parameters;
* :func:`min_bandwidth_for_efficiency` → :class:`BandwidthResult` — the
  smallest link bandwidth reaching a target scaling efficiency;
* errors :class:`UnreliableProfileError` and :class:`InfeasibleError`
  (both ``ValueError``);
* the report (:func:`build_report`, :func:`write_report`,
  :func:`iteration_timeline`, :func:`profile_summary`) and the main job
  (:func:`run_main_job`);
* text helpers shared with the CLI: :func:`format_percent`,
  :func:`format_table`, :func:`series_label`, :func:`jsonable`.
"""

from calibration import RELIABLE_P90_LIMIT as RELIABLE_P90_LIMIT

from ._format import format_percent as format_percent
from ._format import format_table as format_table
from ._format import jsonable as jsonable
from ._format import series_label as series_label
from ._predict import PREDICTION_LEVEL as PREDICTION_LEVEL
from ._predict import measured_ranks_per_node as measured_ranks_per_node
from ._predict import predict_collective as predict_collective
from ._predict import predict_iterations as predict_iterations
from ._predict import topology_warnings as topology_warnings
from ._recommend import OBJECTIVES as OBJECTIVES
from ._recommend import Configuration as Configuration
from ._recommend import Curve as Curve
from ._recommend import InfeasibleError as InfeasibleError
from ._recommend import Recommendation as Recommendation
from ._recommend import UnreliableProfileError as UnreliableProfileError
from ._recommend import recommend as recommend
from ._report import ReportFiles as ReportFiles
from ._report import build_report as build_report
from ._report import format_parameter_rows as format_parameter_rows
from ._report import iteration_timeline as iteration_timeline
from ._report import profile_summary as profile_summary
from ._report import write_report as write_report
from ._run import RUN_DEFAULTS as RUN_DEFAULTS
from ._run import RunResult as RunResult
from ._run import run_main_job as run_main_job
from ._search import DEFAULT_BUCKET_GRID as DEFAULT_BUCKET_GRID
from ._search import HOROVOD_FUSION_BYTES as HOROVOD_FUSION_BYTES
from ._search import Sweep as Sweep
from ._search import Variant as Variant
from ._search import evaluate as evaluate
from ._search import resolve_variants as resolve_variants
from ._sensitivity import SENSITIVITY_NAMES as SENSITIVITY_NAMES
from ._sensitivity import sensitivity as sensitivity
from ._settings import format_framework_settings as format_framework_settings
from ._settings import framework_settings as framework_settings
from ._text import markdown_escape as markdown_escape
from ._whatif import BandwidthResult as BandwidthResult
from ._whatif import min_bandwidth_for_efficiency as min_bandwidth_for_efficiency
from ._whatif import what_if as what_if
from .validation import ValidationResult as ValidationResult
from .validation import ValidationRow as ValidationRow
from .validation import compare_steps as compare_steps
from .validation import validate as validate
