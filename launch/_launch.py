"""Start, watch and reap the worker processes of a multi-process JAX program.

Two halves, one protocol:

* **Parent side** — :func:`launch_local` starts ``num_processes`` copies of
  ``python -m MODULE ARGS…`` on this machine, joined by ``jax.distributed`` on a
  free coordinator port bound to loopback (retried on another port if it turns
  out to be taken), relays the JSON messages the workers send, and *always*
  reaps every child by PID: on success, on error, on Ctrl-C, on SIGTERM and on
  timeout. A worker that exits with an error, or that sends nothing for
  ``timeout_s`` (hung, or never started), stops the whole run with a
  :class:`LaunchError` that names the rank and what it was doing.
* **Worker side** — :func:`initialize_worker` joins the run (from the variables
  :func:`launch_local` set, or from SLURM / Open MPI / MPICH when started by
  ``srun`` / ``mpirun``), and :func:`send_message` / :func:`heartbeat` talk to the
  parent. A worker started by hand, outside any launcher, is a single process.

The protocol: each worker gets a private pipe (its file descriptor in
``DDLTUNE_MESSAGE_FD``) and writes one JSON object per line to it. Every
message counts as a sign of life. A message may carry ``"where"`` (what the rank
is doing, in words); the launcher remembers the latest per rank and names it in
fault messages. The types ``"ready"`` (sent by :func:`initialize_worker`) and
``"beat"`` (:func:`heartbeat`) are the launcher's; every other message is
handed to the caller's ``on_message(rank, message)``. A worker must send
something at least every ``timeout_s`` while it is healthy — call
:func:`heartbeat` inside long loops; it is throttled and cheap.

Example (parent):
    >>> from launch import launch_local
    >>> def show(rank, msg):
    ...     print(rank, msg)
    >>> launch_local("my_package.my_worker", ["--steps", "10"], num_processes=2,
    ...              timeout_s=60, on_message=show)  # doctest: +SKIP

Example (``my_package/my_worker.py``):
    >>> from launch import initialize_worker, send_message, heartbeat
    >>> info = initialize_worker()  # doctest: +SKIP
    >>> send_message({"type": "result", "where": "step 3", "loss": 0.1})  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from ._emulate import EmulatedCluster

__all__ = [
    "ClusterEnv",
    "LaunchError",
    "LaunchResult",
    "WorkerInfo",
    "detect_cluster",
    "core_binding",
    "keeps_binding",
    "compute_on_calling_thread",
    "free_port",
    "heartbeat",
    "initialize_worker",
    "launch_local",
    "send_message",
    "worker_main",
    "set_message_handler",
]

# Variables launch_local sets for its workers.
ENV_COORDINATOR = "DDLTUNE_COORDINATOR_ADDRESS"
ENV_NUM_PROCESSES = "DDLTUNE_NUM_PROCESSES"
ENV_PROCESS_ID = "DDLTUNE_PROCESS_ID"
ENV_MESSAGE_FD = "DDLTUNE_MESSAGE_FD"
ENV_PARENT_PID = "DDLTUNE_PARENT_PID"
ENV_TIMEOUT = "DDLTUNE_TIMEOUT_S"
ENV_CPU_CORES = "DDLTUNE_CPU_CORES"
#: Set ("1") where every local rank has a core of its own: the rank keeps its binding.
ENV_CPU_KEEP = "DDLTUNE_CPU_KEEP"

_PORT_TAKEN_SIGNS = ("Failed to add port", "Address already in use", "address already in use")


# --------------------------------------------------------------------------- errors/results


class LaunchError(RuntimeError):
    """A multi-process run failed: a rank crashed, hung, or never started.

    Attributes:
        rank: the rank at fault (``None`` when no single rank is to blame).
        where: what that rank was doing (its latest ``"where"``), or ``None``.
        returncode: its exit status (negative: killed by that signal), or
            ``None`` when it was still running (hung) and had to be killed.
        reason: ``"exited"``, ``"hung"``, ``"no-start"`` or ``"interrupted"``.
        log_tail: the last lines the rank wrote on stdout/stderr.
    """

    def __init__(
        self,
        message: str,
        *,
        rank: int | None = None,
        where: str | None = None,
        returncode: int | None = None,
        reason: str = "exited",
        log_tail: str = "",
    ):
        super().__init__(message)
        self.rank = rank
        self.where = where
        self.returncode = returncode
        self.reason = reason
        self.log_tail = log_tail


@dataclasses.dataclass(frozen=True)
class LaunchResult:
    """What :func:`launch_local` returns after every worker exited with status 0.

    Attributes:
        num_processes: workers started.
        coordinator_address: ``"127.0.0.1:PORT"`` (``"198.18.0.1:PORT"`` in an
            emulated cluster) of the attempt that ran.
        attempts: launches made (> 1 when a taken port was retried).
        elapsed_s: wall time from the first start to the last exit, seconds.
    """

    num_processes: int
    coordinator_address: str
    attempts: int
    elapsed_s: float


@dataclasses.dataclass(frozen=True)
class ClusterEnv:
    """A process started by a cluster launcher, as read from its environment.

    Attributes:
        kind: ``"slurm"``, ``"openmpi"`` (≤ 4, detected by jax itself),
            ``"openmpi5"`` or ``"mpich"`` (these two need a coordinator address).
        num_processes: processes in the job (≥ 1).
        process_id: this process's rank, 0 ≤ rank < num_processes.
        local_process_id: its rank on its node, or ``None`` if not given.
    """

    kind: str
    num_processes: int
    process_id: int
    local_process_id: int | None

    @property
    def jax_detects(self) -> bool:
        """Whether ``jax.distributed.initialize()`` finds everything by itself."""
        return self.kind in ("slurm", "openmpi")


@dataclasses.dataclass(frozen=True)
class WorkerInfo:
    """What :func:`initialize_worker` returns.

    Attributes:
        process_id: this process's rank.
        num_processes: processes in the run (1 when started by hand).
        mode: ``"local"`` (started by :func:`launch_local`), a
            :attr:`ClusterEnv.kind`, or ``"single"``.
    """

    process_id: int
    num_processes: int
    mode: str


# --------------------------------------------------------------------------- helpers


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` right now (the OS picks it).

    Another program may take it before it is used; :func:`launch_local`
    retries on another port when that happens.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def _int_env(environ: Mapping[str, str], name: str) -> int | None:
    v = environ.get(name)
    if v is None or not v.strip():
        return None
    try:
        return int(v)
    except ValueError:
        return None


def detect_cluster(environ: Mapping[str, str] | None = None) -> ClusterEnv | None:
    """Recognise a process started by ``srun``, Open MPI's or MPICH's ``mpirun``.

    Args:
        environ: the environment to read; default ``os.environ``.

    Returns:
        A :class:`ClusterEnv`, or ``None`` outside a cluster launcher (an
        ``salloc`` shell without ``srun`` is outside: it has no task rank).

    Sources: jax's own detection (``jax/_src/clusters/slurm_cluster.py``,
    ``ompi_cluster.py``: Open MPI ≤ 4 sets ``OMPI_MCA_orte_hnp_uri``); Open MPI 5
    documents ``OMPI_COMM_WORLD_{SIZE,RANK,LOCAL_RANK}`` ("Environment variables
    set for MPI applications"); MPICH's Hydra sets ``PMI_RANK``, ``PMI_SIZE`` and
    ``MPI_LOCALRANKID``.

    Example:
        >>> detect_cluster({"PMI_RANK": "1", "PMI_SIZE": "4"})
        ClusterEnv(kind='mpich', num_processes=4, process_id=1, local_process_id=None)
        >>> detect_cluster({}) is None
        True
    """
    env = os.environ if environ is None else environ
    slurm = ("SLURM_JOB_ID", "SLURM_STEP_NODELIST", "SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID")
    if all(k in env for k in slurm):
        n, r = _int_env(env, "SLURM_NTASKS"), _int_env(env, "SLURM_PROCID")
        if n is not None and r is not None:
            return ClusterEnv("slurm", n, r, _int_env(env, "SLURM_LOCALID"))
    n, r = _int_env(env, "OMPI_COMM_WORLD_SIZE"), _int_env(env, "OMPI_COMM_WORLD_RANK")
    if n is not None and r is not None:
        kind = "openmpi" if "OMPI_MCA_orte_hnp_uri" in env else "openmpi5"
        return ClusterEnv(kind, n, r, _int_env(env, "OMPI_COMM_WORLD_LOCAL_RANK"))
    n, r = _int_env(env, "PMI_SIZE"), _int_env(env, "PMI_RANK")
    if n is not None and r is not None:
        return ClusterEnv("mpich", n, r, _int_env(env, "MPI_LOCALRANKID"))
    if env.get("PMI_PORT") and env.get("PMI_ID"):  # mpiexec -pmi-port: ask its PMI server
        from ._pmi import port_rank_size

        r_n = port_rank_size(env)
        if r_n is not None:
            return ClusterEnv("mpich", r_n[1], r_n[0], _int_env(env, "MPI_LOCALRANKID"))
    return None


# --------------------------------------------------------------------------- worker side

_msg_lock = threading.Lock()
_msg_file = None
_msg_handler: Callable[[dict], None] | None = None
_last_beat = 0.0
_beat_interval_s = 1.0


def set_message_handler(handler: Callable[[dict], None] | None) -> None:
    """Route :func:`send_message` to ``handler`` in this process instead of a parent.

    For programs that run in-process under ``srun``/``mpirun`` (no parent
    launcher), e.g. so that rank 0 writes its own results. ``None`` restores
    the default (the parent's pipe if there is one, else nothing).
    """
    global _msg_handler
    _msg_handler = handler


def send_message(message: dict) -> None:
    """Send one JSON-serialisable dict to the parent launcher (thread-safe).

    Without a parent (and without a handler, see :func:`set_message_handler`)
    the message is dropped. If the parent has gone away the worker exits
    (status 3): there is nobody left to report to.

    Raises:
        TypeError: if ``message`` is not a dict or is not JSON-serialisable.
    """
    global _msg_file, _last_where
    if not isinstance(message, dict):
        raise TypeError(f"send_message() takes a dict, got {type(message).__name__}")
    if isinstance(message.get("where"), str):
        _last_where = message["where"]
    if _msg_handler is not None:
        _msg_handler(message)
        return
    fd = os.environ.get(ENV_MESSAGE_FD)
    if fd is None:
        return
    line = json.dumps(message, allow_nan=False) + "\n"
    with _msg_lock:
        if _msg_file is None:
            _msg_file = os.fdopen(int(fd), "w", encoding="utf-8", buffering=1)
        try:
            _msg_file.write(line)
            _msg_file.flush()
        except (BrokenPipeError, OSError):
            os._exit(3)


def heartbeat(where: str | None = None, *, force: bool = False) -> None:
    """Tell the parent this worker is alive; throttled to about one per second.

    Call it inside any loop that can run longer than the launcher's
    ``timeout_s`` without other messages.

    Args:
        where: optional description of the current activity.
        force: send even if one was sent less than a second ago.
    """
    global _last_beat
    now = time.monotonic()
    if not force and now - _last_beat < _beat_interval_s:
        return
    _last_beat = now
    msg = {"type": "beat"}
    if where is not None:
        msg["where"] = where
    send_message(msg)


#: Key prefix of the ranks' liveness beats in jax's coordination service.
_ALIVE_PREFIX = "ddltune/alive/"


def _coordination_client():
    """jax's distributed client (``jax._src.distributed.global_state.client``, jax 0.10.2), or None."""
    try:
        from jax._src import distributed as _dist

        return _dist.global_state.client
    except Exception:  # noqa: BLE001 - a private API: no liveness where it is missing
        return None


def announce_alive(rank: int) -> None:
    """Publish that rank ``rank`` of a ``jax.distributed`` job is alive, now, and on which host.

    One key per rank in jax's coordination service (rank 0's process holds it):
    ``wall-clock seconds``, ``socket.gethostname()`` and the process id (what
    a launcher names a dead rank by: MPICH's Hydra prints only "PID … RUNNING
    AT host"). Call it about once a
    second from a thread that runs while the rank measures (the collector's
    watchdog does); :func:`silent_ranks` reads them. Does nothing outside a
    multi-process job or when the service does not answer (never raises).
    """
    client = _coordination_client()
    if client is None:
        return
    with contextlib.suppress(Exception):
        client.key_value_set(
            f"{_ALIVE_PREFIX}{int(rank)}",
            f"{time.time():.3f} {socket.gethostname()} {os.getpid()}",
            True,
        )


def _alive_table(timeout_s: float):
    """``[(rank, host, age_s, pid or None)]`` of every beat in the coordination service, or None."""
    client = _coordination_client()
    if client is None:
        return None
    out: list = []

    def read():
        out.append(client.key_value_dir_get(_ALIVE_PREFIX))

    t = threading.Thread(target=read, name="ddltune-liveness", daemon=True)
    t.start()
    t.join(timeout_s)
    if not out:
        return None
    now = time.time()
    table = []
    for key, value in out[0]:
        try:
            rank = int(key.rsplit("/", 1)[1])
            stamp, host, *pid = value.split(" ")
            table.append((rank, host, now - float(stamp), int(pid[0]) if pid else None))
        except (ValueError, IndexError):
            continue
    return sorted(table)


def rank_hosts(*, timeout_s: float = 5.0) -> dict[int, str] | None:
    """Rank → host name of every rank that called :func:`announce_alive` (None: no service)."""
    table = _alive_table(timeout_s)
    return None if table is None else {r: host for r, host, _, _ in table}


def rank_processes(*, timeout_s: float = 5.0) -> dict[int, tuple[str, int | None]] | None:
    """Rank → (host name, process id) of every rank that called :func:`announce_alive`.

    None when there is no coordination service (or it does not answer within
    ``timeout_s``); the id is None for a beat without one.
    """
    table = _alive_table(timeout_s)
    return None if table is None else {r: (host, pid) for r, host, _, pid in table}


def silent_ranks(silent_for_s: float, *, timeout_s: float = 5.0):
    """The ranks whose :func:`announce_alive` stopped ``silent_for_s`` seconds ago or more.

    Returns:
        A list of ``(rank, host, seconds since its last beat)``, rank order; an
        empty list when every rank that ever beat is still beating; ``None``
        when the coordination service does not answer within ``timeout_s``
        (it lives in rank 0's process: rank 0 is then the likely casualty) or
        this is not a multi-process job. Ages use this host's clock against
        the beating host's (the same clock on one machine; NTP-close on a
        cluster).
    """
    table = _alive_table(timeout_s)
    if table is None:
        return None
    return [(r, host, age) for r, host, age, _ in table if age >= silent_for_s]


def describe_silent(silent) -> str:
    """Words for :func:`silent_ranks`' answer: who stopped first, on which host, how long ago.

    The ranks silent longest (within 1.5 s of the longest, the beats' resolution)
    stopped first: the likely cause; the others (peers that failed after it) are
    listed after them.
    """
    if silent is None:
        return "rank 0's coordination service does not answer (rank 0 stopped?)"
    if not silent:
        return "every rank still beats (one of them is stuck)"
    longest = max(age for _, _, age in silent)
    first = [(r, h) for r, h, age in silent if age >= longest - 1.5]
    later = [r for r, _, age in silent if age < longest - 1.5]
    text = " and ".join(f"rank {r} on {h}" for r, h in first)
    text += f" stopped first, {longest:.0f} s ago"
    if later:
        text += f"; silent since: rank{'s' if len(later) > 1 else ''} {', '.join(map(str, later))}"
    return text


@dataclasses.dataclass
class _Wait:
    where: str
    since: float
    last_sent: float = 0.0
    announced: bool = False


_wait_lock = threading.Lock()
_last_where: str | None = None  # the latest 'where' this rank sent
_wait: _Wait | None = None  # what this rank's main thread waits in, if anything
_waiter_started = False


def _waiter_loop() -> None:
    """Daemon thread: beat ``"waiting"`` about once a second while the main thread waits long."""
    while True:
        time.sleep(0.25)
        now = time.monotonic()
        with _wait_lock:  # held while sending, so no stale beat follows the wait's end
            w = _wait
            if w is not None and now - max(w.since, w.last_sent) >= _beat_interval_s:
                send_message({"type": "beat", "where": w.where, "waiting": True})
                w.last_sent, w.announced = now, True


@contextlib.contextmanager
def waiting(where: str | None = None):
    """Mark this rank as blocked in a collective with its peers while the block runs.

    A rank that waits for a peer inside a collective is as silent as the peer
    that hangs; without this the launcher cannot tell them apart. Once the
    block has lasted about a second, a daemon thread sends a ``"waiting"``
    beat about once a second (the main thread may be blocked in C++ with the
    GIL released), so the launcher knows this rank is alive and waiting for
    its peers and names the rank that stopped sending instead (see
    :func:`launch_local`). A rank that waits for longer than the launcher's
    ``timeout_s`` (plus a grace) still counts as hung. Short waits send
    nothing (cheap enough for a barrier per timed call). It does nothing
    outside :func:`launch_local`'s workers (no message pipe): under
    ``srun``/``mpirun`` each rank watches itself.

    Args:
        where: what this rank is waiting in, in words (e.g. ``"all_reduce
            1 MiB"``); default: the last ``where`` this rank reported.

    Example:
        >>> from launch import waiting
        >>> with waiting("barrier"):
        ...     pass
    """
    global _waiter_started, _wait
    if os.environ.get(ENV_MESSAGE_FD) is None:
        yield
        return
    if not _waiter_started:
        threading.Thread(target=_waiter_loop, name="ddltune-waiting", daemon=True).start()
        _waiter_started = True
    where = where if where is not None else (_last_where or "a collective")
    with _wait_lock:
        prev, mine = _wait, _Wait(where, time.monotonic())
        _wait = mine
    try:
        yield
    finally:
        with _wait_lock:
            _wait = prev
        if mine.announced:  # the launcher thinks we wait: say we no longer do
            send_message({"type": "beat", "where": where})


def _guard_parent(parent_pid: int) -> None:
    """Exit if the launcher dies (Linux PR_SET_PDEATHSIG, plus a polling thread)."""
    with contextlib.suppress(Exception):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    if os.getppid() != parent_pid:
        os._exit(3)

    def watch() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != parent_pid:
                os._exit(3)

    threading.Thread(target=watch, name="ddltune-parent-watch", daemon=True).start()


def initialize_worker(
    *,
    coordinator_address: str | None = None,
    timeout_s: float | None = None,
    single_ok: bool = True,
) -> WorkerInfo:
    """Join the multi-process run this process belongs to (call before any JAX computation).

    Started by :func:`launch_local`: joins its loopback coordinator, exits if
    the launcher dies, and tells it ``"ready"``. Started by ``srun`` or Open
    MPI ≤ 4's ``mpirun``: ``jax.distributed.initialize()`` detects everything.
    Open MPI 5 and MPICH: ranks come from their variables (see
    :func:`detect_cluster`); the coordinator from ``coordinator_address`` or
    ``JAX_COORDINATOR_ADDRESS`` (``HOST:PORT`` of rank 0's node; it must be the
    same on every rank). Started by hand: nothing to join (one process).

    Args:
        coordinator_address: ``HOST:PORT`` for Open MPI 5 / MPICH (ignored when
            the launcher or jax provides one).
        timeout_s: seconds to wait for every process to join (default: the
            launcher's ``timeout_s``, else 300 s).
        single_ok: when false, running outside any launcher is an error.

    Returns:
        This process's :class:`WorkerInfo`.

    Raises:
        RuntimeError: Open MPI 5 / MPICH without a coordinator address, or
            outside a launcher with ``single_ok=False``.
    """
    import jax

    env_timeout = os.environ.get(ENV_TIMEOUT)
    if timeout_s is None:
        # Under launch_local, wait longer than the parent does, so that the parent
        # (which knows which rank is missing) reports the fault, not this rank.
        timeout_s = float(env_timeout) + 60 if env_timeout else 300.0
    init_timeout = max(int(timeout_s), 10)
    released = None
    if os.environ.get(ENV_CPU_CORES) and hasattr(os, "sched_setaffinity"):
        # Before the backend starts: its compute thread pool is sized by the
        # affinity mask (one thread per core in it); released once it exists.
        released = os.sched_getaffinity(0)
        _bind_this_process([int(c) for c in os.environ[ENV_CPU_CORES].split(",")])
    if hasattr(os, "sched_getaffinity"):
        compute_on_calling_thread(len(os.sched_getaffinity(0)))
    if ENV_COORDINATOR in os.environ:
        address = os.environ[ENV_COORDINATOR]
        n = int(os.environ[ENV_NUM_PROCESSES])
        rank = int(os.environ[ENV_PROCESS_ID])
        if ENV_PARENT_PID in os.environ:
            _guard_parent(int(os.environ[ENV_PARENT_PID]))
        _fault_nostart(rank)
        send_message({"type": "hello", "rank": rank, "where": "joining"})
        if n > 1:
            jax.distributed.initialize(
                coordinator_address=address,
                num_processes=n,
                process_id=rank,
                coordinator_bind_address=address,  # loopback only
                initialization_timeout=init_timeout,
                heartbeat_timeout_seconds=max(init_timeout, 30),
            )
        if released is not None and not os.environ.get(ENV_CPU_KEEP):
            jax.devices()  # start the backend with the compute pool of the bound cores
            _bind_this_process(sorted(released))
        if n > 1:
            gloo_io_threads_batch()
        send_message({"type": "ready", "rank": rank, "where": "started"})
        return WorkerInfo(rank, n, "local")
    cluster = detect_cluster()
    if cluster is not None and cluster.num_processes > 1:
        if cluster.jax_detects:
            jax.distributed.initialize(
                **_detected_params(init_timeout), initialization_timeout=init_timeout
            )
        else:
            address = coordinator_address or os.environ.get("JAX_COORDINATOR_ADDRESS")
            if not address and cluster.kind == "mpich":
                # Hydra's PMI_FD/PMI_PORT: rank 0 publishes HOST:PORT (launch/_pmi.py).
                from ._pmi import exchange_coordinator

                address = exchange_coordinator(cluster.process_id, timeout_s=init_timeout)
            if not address:
                raise RuntimeError(
                    f"started by {cluster.kind} ({cluster.num_processes} processes) but no "
                    "coordinator address: pass --coordinator HOST:PORT (rank 0's host and a free "
                    "port) or set JAX_COORDINATOR_ADDRESS on every rank"
                )
            local = [cluster.local_process_id] if cluster.local_process_id is not None else None
            jax.distributed.initialize(
                coordinator_address=address,
                num_processes=cluster.num_processes,
                process_id=cluster.process_id,
                local_device_ids=local,
                coordinator_bind_address=coordinator_bind_address(address),
                initialization_timeout=init_timeout,
            )
        gloo_io_threads_batch()
        return WorkerInfo(jax.process_index(), jax.process_count(), cluster.kind)
    if not single_ok:
        raise RuntimeError(
            "not started by a launcher: run under srun or mpirun, or through launch_local()"
        )
    return WorkerInfo(0, 1, "single")


def coordinator_bind_address(address: str) -> str | None:
    """Where rank 0's coordinator listens: ``address`` itself, the one the ranks dial.

    ``jax.distributed.initialize`` (jax 0.10.2, ``jax/_src/distributed.py``)
    binds its coordinator to ``[::]:PORT`` — every interface of rank 0's node,
    unauthenticated, for the whole job — unless ``coordinator_bind_address``
    (or ``JAX_COORDINATOR_BIND_ADDRESS``) says otherwise. Binding to
    ``HOST:PORT`` of the address the ranks use exposes the port on that one
    network only.

    Exception: a host name that resolves on this node to loopback only (the
    ``127.0.1.1 hostname`` line of Debian's ``/etc/hosts``) would make the
    coordinator unreachable from other nodes; then ``None`` is returned (jax's
    default, every interface) and a one-line warning says why. An explicit
    ``JAX_COORDINATOR_BIND_ADDRESS`` always wins (``None`` lets jax read it).

    Args:
        address: ``HOST:PORT`` (``[v6]:PORT`` for IPv6) of rank 0.

    Returns:
        The bind address, or ``None`` for jax's default.
    """
    if os.environ.get("JAX_COORDINATOR_BIND_ADDRESS"):
        return None
    host = address.rsplit(":", 1)[0].strip("[]")
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return address  # jax fails on it the same way, naming it
    ips = {i[4][0] for i in infos}
    if (
        ips
        and all(ip.startswith("127.") or ip == "::1" for ip in ips)
        and host
        not in (
            "localhost",
            "127.0.0.1",
            "::1",
        )
    ):
        print(
            f"ddltune: warning: coordinator host {host!r} resolves to loopback only "
            f"({', '.join(sorted(ips))}) on rank 0's node; listening on every interface so that "
            "other nodes can join (give --coordinator with the node's network address to "
            "restrict it)",
            file=sys.stderr,
            flush=True,
        )
        return None
    return address


def _detected_params(init_timeout: int) -> dict:
    """The arguments jax would detect under srun / Open MPI ≤ 4, with the bind address.

    Uses jax's own detection (``jax._src.clusters.ClusterEnv``, jax 0.10.2) so
    the values are exactly those ``initialize()`` would pick; on a jax without
    it, returns ``{}`` (jax then detects, and binds every interface).
    """
    try:
        from jax._src.clusters import ClusterEnv as _JaxClusterEnv

        address, n, rank, local = _JaxClusterEnv.auto_detect_unset_distributed_params(
            None, None, None, None, None, init_timeout
        )
    except Exception:  # noqa: BLE001 - a private API: fall back to jax's detection
        return {}
    if address is None:
        return {}
    return {
        "coordinator_address": address,
        "num_processes": n,
        "process_id": rank,
        "local_device_ids": local,
        "coordinator_bind_address": coordinator_bind_address(address),
    }


def _fault_nostart(rank: int) -> None:
    # Test hook: DDLTUNE_LAUNCH_FAULT="nostart:R" makes rank R hang before joining.
    spec = os.environ.get("DDLTUNE_LAUNCH_FAULT", "")
    for part in spec.split(","):
        if part.strip() == f"nostart:{rank}":
            time.sleep(10**6)


# --------------------------------------------------------------------------- parent side


@dataclasses.dataclass
class _Rank:
    rank: int
    proc: subprocess.Popen
    fd: int
    log_path: Path
    buf: bytes = b""
    last_seen: float = 0.0
    ready: bool = False
    where: str | None = None
    returncode: int | None = None
    eof: bool = False
    waiting_since: float | None = None  # inside a collective with its peers since (monotonic s)


class _PortTaken(Exception):
    pass


def _tail(path: Path, lines: int = 4) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    keep = [ln.strip() for ln in text.splitlines() if ln.strip()]
    # Skip the absl/glog banner lines jax prints; keep what explains the failure.
    keep = [ln for ln in keep if not ln.startswith(("WARNING: All log messages", "[Gloo]"))]
    return " | ".join(keep[-lines:])


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def _terminate(ranks: Sequence[_Rank], grace_s: float = 3.0) -> None:
    """SIGTERM then SIGKILL each worker's process group (its own session), then reap by PID."""
    alive = [r for r in ranks if r.proc.poll() is None]
    for r in alive:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(r.proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for r in alive:
        with contextlib.suppress(subprocess.TimeoutExpired):
            r.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    for r in ranks:
        if r.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(r.proc.pid, signal.SIGKILL)
    for r in ranks:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            # The group may hold grandchildren even after the leader exited.
            os.killpg(r.proc.pid, signal.SIGKILL)
        r.proc.wait()
        with contextlib.suppress(OSError):
            os.close(r.fd)


def _describe(r: _Rank) -> str:
    return f" while {r.where}" if r.where and r.where != "started" else ""


def _run_once(
    module: str,
    args: Sequence[str],
    num_processes: int,
    port: int,
    timeout_s: float,
    start_timeout_s: float,
    on_message: Callable[[int, dict], None] | None,
    env: Mapping[str, str] | None,
    log_dir: Path,
    python: str,
    cwd: str | os.PathLike | None,
    poll_s: float,
    on_spawn: Callable[[int, int], None] | None,
    cores: list[list[int]] | None = None,
    emulate: EmulatedCluster | None = None,
) -> None:
    host = "127.0.0.1" if emulate is None else emulate.coordinator_host
    address = f"{host}:{port}"
    base_env = dict(os.environ)
    if emulate is not None:  # nothing in the emulated network is behind a proxy
        for k in list(base_env):
            if k.lower() in ("http_proxy", "https_proxy", "all_proxy", "grpc_proxy"):
                del base_env[k]
    if env:
        base_env.update(env)
    base_env.update(
        {
            ENV_COORDINATOR: address,
            ENV_NUM_PROCESSES: str(num_processes),
            ENV_PARENT_PID: str(os.getpid()),
            ENV_TIMEOUT: str(start_timeout_s),
            "PYTHONUNBUFFERED": "1",
        }
    )
    ranks: list[_Rank] = []
    try:
        for rank in range(num_processes):
            rfd, wfd = os.pipe()
            os.set_inheritable(wfd, True)
            child_env = dict(base_env, **{ENV_PROCESS_ID: str(rank), ENV_MESSAGE_FD: str(wfd)})
            if cores is not None:
                child_env[ENV_CPU_CORES] = ",".join(map(str, cores[rank]))
                if keeps_binding(cores):
                    child_env[ENV_CPU_KEEP] = "1"
            log_path = log_dir / f"rank{rank}.log"
            argv = [python, "-m", module, *args]
            if emulate is not None:  # same process after each exec: PID and pipe kept
                argv = emulate.wrap(emulate.node_of_rank(rank), argv)
            with open(log_path, "wb") as log:
                proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=child_env,
                    cwd=cwd,
                    pass_fds=(wfd,),
                    start_new_session=True,  # own process group: killed as a unit, no stray Ctrl-C
                )
            os.close(wfd)
            ranks.append(_Rank(rank, proc, rfd, log_path, last_seen=time.monotonic()))
            if on_spawn is not None:
                on_spawn(rank, proc.pid)
        _watch(ranks, timeout_s, start_timeout_s, on_message, port, poll_s)
    finally:
        _terminate(ranks)


def _dispatch(r: _Rank, chunk: bytes, now: float, on_message) -> None:
    r.last_seen = now
    r.buf += chunk
    *lines, r.buf = r.buf.split(b"\n")
    for line in lines:
        if not line.strip():
            continue
        try:
            msg = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(msg, dict):
            continue
        if isinstance(msg.get("where"), str):
            r.where = msg["where"]
        if msg.get("waiting") is True:
            if r.waiting_since is None:
                r.waiting_since = now
        else:
            r.waiting_since = None
        kind = msg.get("type")
        if kind == "ready":
            r.ready = True
        elif kind not in ("beat", "hello") and on_message is not None:
            on_message(r.rank, msg)


def _pump(ranks: list[_Rank], wait_s: float, on_message) -> None:
    """Read what the workers sent within ``wait_s`` seconds and dispatch it."""
    by_fd = {r.fd: r for r in ranks if not r.eof}
    if not by_fd:
        time.sleep(wait_s)
        return
    readable = select.select(list(by_fd), [], [], wait_s)[0]
    now = time.monotonic()
    for fd in readable:
        r = by_fd[fd]
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            r.eof = True
        else:
            _dispatch(r, chunk, now, on_message)


def _drain(ranks: list[_Rank], on_message, limit_s: float = 2.0, quiet_s: float = 0.5) -> None:
    """Dispatch what is still in the pipes or on its way (results sent around a failure).

    Waits until the pipes have been quiet for ``quiet_s`` (at most ``limit_s`` in all):
    a rank that finished a point as its peer died may still be writing that point's
    result (a test caught rank 0's last record lost when the drain did not wait).
    """
    deadline = time.monotonic() + limit_s
    while (left := deadline - time.monotonic()) > 0:
        live = [r for r in ranks if not r.eof]
        if not live or not select.select([r.fd for r in live], [], [], min(quiet_s, left))[0]:
            return
        _pump(live, 0, on_message)


def _watch(
    ranks: list[_Rank],
    timeout_s: float,
    start_timeout_s: float,
    on_message: Callable[[int, dict], None] | None,
    port: int,
    poll_s: float,
) -> None:
    while True:
        _pump(ranks, poll_s, on_message)
        now = time.monotonic()
        # Exits: the first non-zero exit stops the run.
        for r in ranks:
            if r.returncode is None:
                r.returncode = r.proc.poll()
        failed = [r for r in ranks if r.returncode not in (None, 0)]
        if failed:
            _drain(ranks, on_message)
            r = _pick_culprit(failed)
            tail = _tail(r.log_path)
            rank0 = ranks[0]
            if (
                not all(x.ready for x in ranks)
                and rank0.returncode not in (None, 0)
                and not rank0.ready
                and (
                    any(s in _tail(rank0.log_path, 50) for s in _PORT_TAKEN_SIGNS)
                    or _port_in_use(port)
                )
            ):
                raise _PortTaken()
            code = r.returncode
            how = (
                f"was killed by {_signal_name(code)}" if code < 0 else f"exited with status {code}"
            )
            raise LaunchError(
                f"rank {r.rank} {how}{_describe(r)}"
                + (f"; its last output: {tail}" if tail else ""),
                rank=r.rank,
                where=r.where,
                returncode=code,
                reason="exited",
                log_tail=tail,
            )
        if all(r.returncode == 0 and r.eof for r in ranks):
            return
        # Silence: hung, or never started.
        late = _late_ranks(ranks, now, timeout_s, start_timeout_s)
        if late:
            _drain(ranks, on_message)
            r = _pick_hung(late)
            tail = _tail(r.log_path)
            if not r.ready:
                raise LaunchError(
                    f"rank {r.rank} did not start: not ready within {start_timeout_s:g} s"
                    + (f"; its last output: {tail}" if tail else ""),
                    rank=r.rank,
                    where="starting",
                    reason="no-start",
                    log_tail=tail,
                )
            raise LaunchError(
                f"rank {r.rank} stopped responding{_describe(r)}: nothing received for "
                f"{now - r.last_seen:.0f} s (timeout {timeout_s:g} s); all workers were stopped",
                rank=r.rank,
                where=r.where,
                reason="hung",
                log_tail=tail,
            )


def _late_ranks(
    ranks: list[_Rank], now: float, timeout_s: float, start_timeout_s: float
) -> list[_Rank]:
    """Running ranks past their limit: silent for it, or waiting in one collective for longer.

    A rank blocked inside a collective keeps sending ``"waiting"`` beats (see
    :func:`waiting`), so it is not silent; it still counts as late once it
    has waited ``timeout_s`` plus a grace of a quarter of it (at least 2 s),
    so that ranks all stuck in one collective stop the run too, after the
    silent one would have.
    """
    late = []
    for r in ranks:
        if r.returncode is not None:
            continue
        limit = timeout_s if r.ready else start_timeout_s
        silent = now - r.last_seen > limit
        stuck = r.waiting_since is not None and now - r.waiting_since > limit + max(
            2.0, 0.25 * limit
        )
        if silent or stuck:
            late.append(r)
    return late


def _pick_hung(late: list[_Rank]) -> _Rank:
    """The rank to blame among late ones: one not waiting for its peers, silent the longest.

    A rank that hangs (or is stopped) outside a collective falls silent while
    its peers wait for it inside one, beating; when every late rank is
    waiting, the one silent the longest (then the lowest) is named.
    """
    not_waiting = [r for r in late if r.waiting_since is None]
    return min(not_waiting or late, key=lambda x: (x.last_seen, x.rank))


def _pick_culprit(failed: list[_Rank]) -> _Rank:
    def score(r: _Rank) -> tuple:
        tail = _tail(r.log_path, 20).lower()
        peer_noise = any(
            s in tail for s in ("connection reset", "connection closed", "heartbeat", "unavailable")
        )
        return (peer_noise, r.rank)

    return min(failed, key=score)


class _Sigterm(BaseException):
    pass


def _accelerator_present() -> bool:
    """Whether this machine shows a GPU or TPU device file (no JAX backend is started)."""
    import glob

    return bool(
        glob.glob("/dev/nvidia[0-9]*") or glob.glob("/dev/accel[0-9]*") or glob.glob("/dev/kfd")
    )


def core_binding(
    num_processes: int, bind: bool | str = "auto", env: Mapping[str, str] | None = None
) -> list[list[int]] | None:
    """The CPU core each local rank starts its JAX backend on, or ``None``.

    One compute thread per rank, as torchrun's ``OMP_NUM_THREADS=1`` default
    for several ranks per host: rank r is bound to core r (mod the cores this
    process may use, ``os.sched_getaffinity``) while its backend starts, so
    that XLA:CPU sizes its compute thread pool to one thread; then the binding
    is released (:func:`initialize_worker`), so that the rank's threads may
    run on any core — unless every rank has a core of its own
    (:func:`keeps_binding`), which it then keeps. A rank computes alike alone
    (the single-worker step) and beside others, as the cost model's per-rank
    compute assumes.

    Measured on 2 cores (``ddltune validate`` diagnosis, 2026-11-30, MLP step,
    p10): unbound, each rank's pool spans every core, so 2 ranks took 2.2× the
    single-rank step and the in-step all-reduce 1.9× its microbenchmark; with
    one compute thread per rank, 1.2× and about 1×. Binding a rank to one core
    for good instead stalls small collectives (2–3 ms per call: gloo's threads
    wait for the compute thread's time slice; measured before gloo's I/O thread
    ran under ``SCHED_BATCH``, and on shared cores).

    Args:
        num_processes: ranks to start on this machine, ≥ 1.
        bind: ``True``, ``False``, or ``"auto"``: bind when the workers run JAX
            on CPU (``JAX_PLATFORMS=cpu`` in ``env`` or the environment, or no
            GPU/TPU device file on this machine).
        env: the workers' extra environment (for ``JAX_PLATFORMS``).

    Returns:
        One list of core ids per rank, or ``None``.

    Raises:
        ValueError: on a ``bind`` that is not ``True``, ``False`` or ``"auto"``.

    Example:
        >>> core_binding(2, False) is None
        True
    """
    if bind not in (True, False, "auto"):
        raise ValueError(f"bind_cores must be True, False or 'auto', got {bind!r}")
    if bind is False or not hasattr(os, "sched_getaffinity"):
        return None
    avail = sorted(os.sched_getaffinity(0))
    if bind == "auto":
        platforms = (
            dict(env or {}).get("JAX_PLATFORMS") or os.environ.get("JAX_PLATFORMS", "")
        ).lower()
        on_cpu = platforms.strip() == "cpu" or not _accelerator_present()
        if not on_cpu:
            return None
    return [[avail[r % len(avail)]] for r in range(num_processes)]


def keeps_binding(cores: Sequence[Sequence[int]] | None) -> bool:
    """Whether the ranks of a :func:`core_binding` keep their cores for good.

    They do where every rank has cores no other rank shares (ranks ≤ cores):
    a rank's threads (its compute thread, gloo's I/O thread under
    ``SCHED_BATCH``, :func:`gloo_io_threads_batch`) then stay on its own core
    instead of being moved between cores by the scheduler. Measured with the
    main job's 2 processes on 2 cores (1 KiB – 64 KiB, 7 collectives, two
    collections each): the p10 of a size differed between two collections by a
    median 4.3% (p90 19%) kept, 9.5% (p90 35%) released, and the second
    difference of log p10 along the sizes, the roughness a smooth curve cannot
    follow, was 0.06–0.07 (median) kept against 0.15–0.17 released; the main
    job's held-out p90 was 15.7% and 16.6% kept, 18.1–23.9% released.
    With more ranks than cores they share cores, and keeping them there would
    let one rank's compute delay another's communication by a time slice: the
    binding is released as before.

    Args:
        cores: :func:`core_binding`'s result (one list of core ids per rank), or ``None``.

    Returns:
        ``True`` when no core is in two ranks' lists; ``False`` for ``None``.
    """
    if not cores:
        return False
    flat = [c for rank in cores for c in rank]
    return len(flat) == len(set(flat))


#: XLA:CPU's flag that runs Eigen's matrix products and convolutions on the thread that runs
#: the program instead of Eigen's own pool (xla/debug_options_flags.cc).
XLA_EIGEN_FLAG = "xla_cpu_multi_thread_eigen"


def compute_on_calling_thread(cpus: int) -> bool:
    """Before this process's JAX backend starts on ``cpus`` CPUs: where that is one, run
    XLA:CPU's Eigen work on the calling thread (``XLA_FLAGS`` gains
    ``--xla_cpu_multi_thread_eigen=false``); returns whether it did.

    Why: a pool sized to one core computes no faster than the calling thread,
    but its thread spins for work after every matrix product. Right after a
    step's backward, that spinning holds the core while gloo's I/O thread,
    under ``SCHED_BATCH`` (:func:`gloo_io_threads_batch`), waits for the
    scheduler's tick before it may handle the arriving gradients. Measured
    on an emulated 4x1@200mbit cluster (``ddltune validate --emulate
    4x1@200mbit --model cnn --arch ring,p2p --bucket-bytes 16M --workers
    2,3,4 --steps 10 --repeats 2``, p10 of 20 steps): ring at 2 / 3 / 4
    workers took 16.5 / 26.3 / 32.2 ms with the pool and 12.8 / 25.7 / 27.3 ms
    without it, where the profile predicted 12.9 / 25.3 / 27.1 ms; the
    single-worker step 8.55 and 8.28 ms. The in-step all-reduce had taken
    twice its microbenchmark (which no compute precedes).

    A user's own ``XLA_FLAGS`` setting of the flag is kept.

    Args:
        cpus: the CPUs the backend will start with (``os.sched_getaffinity``
            at that moment), ≥ 1.

    Returns:
        ``True`` when the flag was added, ``False`` (nothing changed) with
        several CPUs or a flag the user set.
    """
    flags = os.environ.get("XLA_FLAGS", "")
    if cpus != 1 or XLA_EIGEN_FLAG in flags:
        return False
    os.environ["XLA_FLAGS"] = f"{flags} --{XLA_EIGEN_FLAG}=false".strip()
    return True


GLOO_LOOP_EPOLL = (64, 10)
"""``epoll_wait``'s ``maxevents`` and timeout (ms) in gloo's TCP device loop
(``gloo/transport/tcp/loop.cc``: ``capacity_`` = 64, a 10 ms tick); the
coordination service's gRPC pollers wait with ``maxevents`` = 100."""


def gloo_io_threads_batch() -> list[int]:
    """Put gloo's TCP I/O thread of this process under ``SCHED_BATCH``; returns its thread ids.

    Why: gloo's loop thread handles a readable socket only if it can take the
    pair's lock (``Pair::handleEvents``, ``std::try_to_lock``: "skip handling
    the events until the next tick"); otherwise it returns to a level-triggered
    ``epoll_wait`` that fires again at once. When the data's arrival wakes that
    thread on the core where the rank's main thread is inside ``Pair::send``
    (holding the lock), the woken thread preempts it and spins until the
    scheduler's tick (4 ms at ``CONFIG_HZ=250``): measured on an emulated 2x1
    cluster at 100 Mbit/s with one core per node, a 1 KiB ``psum`` took a
    median 4.00 ms (p90 4.08 ms) instead of 0.20 ms (0.22 ms) with the thread
    under ``SCHED_BATCH``, which keeps its fair share of the CPU but never
    preempts on wakeup (sched(7)). Unpinned on 2 cores: median 0.31, p90 4.02 ms.

    Call after ``jax.distributed.initialize`` (it starts the CPU backend, whose
    gloo device starts the thread). The thread is found by its ``epoll_wait``
    arguments (:data:`GLOO_LOOP_EPOLL`) in ``/proc/self/task/*/syscall``: idle,
    it sleeps there. Finding none (another transport, another gloo, no
    ``/proc``) changes nothing.
    """
    import jax

    jax.devices()  # the backend, and with it gloo's device loop
    found: list[int] = []
    if not hasattr(os, "SCHED_BATCH"):
        return found
    for attempt in range(5):  # awake between ticks for a few µs: look again
        if attempt:
            time.sleep(0.003)
        with contextlib.suppress(OSError):
            for t in os.listdir("/proc/self/task"):
                try:
                    with open(f"/proc/self/task/{t}/syscall") as f:
                        fields = f.read().split()
                    if len(fields) < 5 or fields[0] != "232":  # x86-64 epoll_wait
                        continue
                    if (int(fields[3], 16), int(fields[4], 16)) != GLOO_LOOP_EPOLL:
                        continue
                    os.sched_setscheduler(int(t), os.SCHED_BATCH, os.sched_param(0))
                    found.append(int(t))
                except (OSError, ValueError, IndexError):
                    continue
        if found:
            break
    return found


def _bind_this_process(cores: Sequence[int]) -> None:
    """Pin every thread of this process to ``cores`` (threads created later inherit it)."""
    ids = set(cores)
    tids = [0]
    with contextlib.suppress(OSError):
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    for tid in tids:
        with contextlib.suppress(OSError):
            os.sched_setaffinity(tid, ids)


def launch_local(
    module: str,
    args: Sequence[str] = (),
    num_processes: int = 2,
    *,
    timeout_s: float = 60.0,
    start_timeout_s: float | None = None,
    on_message: Callable[[int, dict], None] | None = None,
    env: Mapping[str, str] | None = None,
    port: int | None = None,
    port_attempts: int = 3,
    log_dir: str | os.PathLike | None = None,
    python: str | None = None,
    cwd: str | os.PathLike | None = None,
    poll_s: float = 0.05,
    on_spawn: Callable[[int, int], None] | None = None,
    bind_cores: bool | str = "auto",
    emulate: EmulatedCluster | None = None,
) -> LaunchResult:
    """Run ``python -m module *args`` in ``num_processes`` local worker processes.

    The workers join each other with ``jax.distributed`` on a coordinator at
    ``127.0.0.1:PORT`` (a free port; the service binds loopback only) once they
    call :func:`initialize_worker`. Each gets ``DDLTUNE_PROCESS_ID`` (its rank),
    ``DDLTUNE_NUM_PROCESSES`` and a message pipe (see the module docstring).
    Each runs in its own session, so a Ctrl-C in the terminal reaches only
    this parent, which then stops them. Every child is reaped by PID before
    this function returns or raises, whatever happens.

    Args:
        module: the worker's module, run as ``python -m module``.
        args: its command-line arguments.
        num_processes: workers to start, ≥ 1.
        timeout_s: a running worker that sends nothing for this long (seconds,
            > 0) is declared hung and the run stopped.
        start_timeout_s: how long a worker may take to import and join before
            it is declared "did not start" (seconds; default ``timeout_s``).
        on_message: called as ``on_message(rank, message)`` in this thread for
            every message a worker sends (except ``"ready"``/``"beat"``). An
            exception it raises stops the run and propagates.
        env: extra environment variables for the workers.
        port: coordinator port to try first (default: a free one).
        port_attempts: launches to try when the port turns out to be taken, ≥ 1.
        log_dir: where each rank's stdout+stderr go (``rank{r}.log``, kept);
            default a temporary folder removed afterwards.
        python: interpreter (default ``sys.executable``).
        cwd: the workers' working directory (default: this one).
        poll_s: how often exits are checked, seconds.
        on_spawn: called as ``on_spawn(rank, pid)`` after each worker starts
            (e.g. to check afterwards that every PID is gone).
        bind_cores: start each rank's backend with one compute thread (bound
            to core r while it starts, then released unless every rank has a
            core of its own, :func:`keeps_binding`): ``True``, ``False`` or
            ``"auto"`` (when the workers run JAX on CPU); see :func:`core_binding`.
        emulate: a started :class:`launch.EmulatedCluster`: rank r runs inside
            node ``r // ranks_per_node``'s network namespace under that node's
            host name, and the coordinator listens on node 0's address
            (``198.18.0.1:PORT``) instead of loopback; ``num_processes`` must
            not exceed the cluster's ranks. Default: all on this host.

    Returns:
        A :class:`LaunchResult` once every worker exited with status 0.

    Raises:
        ValueError: on ``num_processes < 1``, ``timeout_s <= 0`` or
            ``port_attempts < 1``; more processes than ``emulate`` holds, or
            an ``emulate`` cluster that is not started.
        LaunchError: a worker exited with an error, hung, or never started
            (the message names its rank and latest ``where``); or every port
            tried was taken.
        KeyboardInterrupt: on Ctrl-C (after stopping every worker).
    """
    if not isinstance(num_processes, int) or num_processes < 1:
        raise ValueError(f"num_processes must be an integer ≥ 1, got {num_processes!r}")
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be > 0 seconds, got {timeout_s!r}")
    if port_attempts < 1:
        raise ValueError(f"port_attempts must be ≥ 1, got {port_attempts!r}")
    if emulate is not None:
        if not emulate.active:
            raise ValueError("emulate: the EmulatedCluster is not started (use it in a 'with')")
        if num_processes > emulate.spec.num_ranks:
            raise ValueError(
                f"num_processes {num_processes} exceeds the emulated cluster {emulate.spec.text} "
                f"({emulate.spec.num_ranks} ranks)"
            )
    host = "127.0.0.1" if emulate is None else emulate.coordinator_host
    start_timeout_s = timeout_s if start_timeout_s is None else start_timeout_s
    python = python or sys.executable
    cores = core_binding(num_processes, bind_cores, env)

    # SIGTERM to the parent must also stop the workers: turn it into an exception
    # so that the cleanup below runs (only possible from the main thread).
    old_handler = None
    if threading.current_thread() is threading.main_thread():

        def on_sigterm(signum, frame):
            raise _Sigterm()

        old_handler = signal.signal(signal.SIGTERM, on_sigterm)

    own_dir = log_dir is None
    logs = Path(tempfile.mkdtemp(prefix="ddltune-launch-")) if own_dir else Path(log_dir)
    logs.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    tried = []
    try:
        for attempt in range(1, port_attempts + 1):
            p = port if (attempt == 1 and port) else free_port()
            tried.append(p)
            try:
                _run_once(
                    module,
                    args,
                    num_processes,
                    p,
                    timeout_s,
                    start_timeout_s,
                    on_message,
                    env,
                    logs,
                    python,
                    cwd,
                    poll_s,
                    on_spawn,
                    cores,
                    emulate,
                )
            except _PortTaken:
                continue
            return LaunchResult(num_processes, f"{host}:{p}", attempt, time.monotonic() - t0)
        raise LaunchError(
            f"could not start the coordinator: ports {', '.join(map(str, tried))} were all taken",
            reason="no-start",
        )
    except _Sigterm:
        raise LaunchError(
            "terminated by SIGTERM; all workers were stopped", reason="interrupted"
        ) from None
    finally:
        if old_handler is not None:
            signal.signal(signal.SIGTERM, old_handler)
        if own_dir:
            shutil.rmtree(logs, ignore_errors=True)


def worker_main(prog: str, run: Callable[[dict, Callable[[dict], None]], object], argv=None) -> int:
    """The ``main`` of a worker module: ``python -m MODULE --config FILE``.

    Reads the JSON config the parent wrote, joins the run
    (:func:`initialize_worker`), calls ``run(config, send_message)`` and tells the
    parent it is done.

    Args:
        prog: the program name for ``--help``.
        run: the worker's body.
        argv: arguments (default ``sys.argv[1:]``).

    Returns:
        0 (a failure raises, and the non-zero exit tells the launcher).
    """
    import argparse

    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("--config", required=True, help="JSON file written by the parent")
    args = parser.parse_args(argv)
    with open(args.config, encoding="utf-8") as fh:
        config = json.load(fh)
    initialize_worker()
    run(config, send_message)
    send_message({"type": "done", "where": "finished"})
    return 0
