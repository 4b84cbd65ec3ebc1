"""Processes joined by ``jax.distributed``: the bottom layer beside :mod:`costmodel`.

Everything that starts ranks goes through here: :func:`launch_local` starts
worker processes on this machine and watches them; :func:`detect_cluster`
reads what ``srun``/``mpirun``/``mpiexec`` set; :func:`initialize_worker`,
:func:`send_message` and :func:`heartbeat` are the worker side of the
protocol. :class:`EmulatedCluster` builds an emulated cluster on this machine
(network namespaces joined by shaped veth links) that :func:`launch_local`
starts ranks into (``emulate=``). The collector (:mod:`calibration`) and the training harness
(:mod:`tuner.validation`) both use it; it imports no other ddltune package.
"""

from ._devices import SYNC_FLOATS_PER_RANK as SYNC_FLOATS_PER_RANK
from ._devices import Ranks as Ranks
from ._devices import hierarchical_psum as hierarchical_psum
from ._devices import start_together as start_together
from ._emulate import STOLEN_FRACTION as STOLEN_FRACTION
from ._emulate import STOLEN_RETRIES as STOLEN_RETRIES
from ._emulate import EmulatedCluster as EmulatedCluster
from ._emulate import EmulateSpec as EmulateSpec
from ._emulate import EmulationError as EmulationError
from ._emulate import EmulationUnavailable as EmulationUnavailable
from ._emulate import LinkCheck as LinkCheck
from ._emulate import SizeCheck as SizeCheck
from ._emulate import clean_stale as clean_stale
from ._emulate import emulation_unavailable_reason as emulation_unavailable_reason
from ._emulate import parse_emulate as parse_emulate
from ._emulate import wire_bytes as wire_bytes
from ._launch import ClusterEnv as ClusterEnv
from ._launch import LaunchError as LaunchError
from ._launch import LaunchResult as LaunchResult
from ._launch import WorkerInfo as WorkerInfo
from ._launch import announce_alive as announce_alive
from ._launch import compute_on_calling_thread as compute_on_calling_thread
from ._launch import core_binding as core_binding
from ._launch import describe_silent as describe_silent
from ._launch import detect_cluster as detect_cluster
from ._launch import free_port as free_port
from ._launch import gloo_io_threads_batch as gloo_io_threads_batch
from ._launch import heartbeat as heartbeat
from ._launch import initialize_worker as initialize_worker
from ._launch import keeps_binding as keeps_binding
from ._launch import launch_local as launch_local
from ._launch import rank_hosts as rank_hosts
from ._launch import rank_processes as rank_processes
from ._launch import send_message as send_message
from ._launch import set_message_handler as set_message_handler
from ._launch import silent_ranks as silent_ranks
from ._launch import waiting as waiting
from ._launch import worker_main as worker_main
from ._pmi import PMIError as PMIError
from ._pmi import exchange_coordinator as exchange_coordinator
