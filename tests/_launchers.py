"""Real cluster launchers for tests/test_launchers.py, and a fake simple-PMI server.

* :class:`SlurmCluster`: a single-host SLURM (munged, slurmctld, slurmd) from a
  generated ``slurm.conf`` in a temporary folder: its own munge key and socket,
  non-default ports, state in the folder, no cgroups; every daemon runs in the
  foreground as a child of the test process and is stopped by PID.
* :func:`find_openmpi` / :func:`find_mpich`: Open MPI's ``mpirun`` and MPICH's
  ``mpiexec`` under whichever name Debian gives them (``mpirun.openmpi``,
  ``mpiexec.mpich``; either may be the default ``mpirun``/``mpiexec``).
* :func:`run_job`: run one launcher command bounded by a timeout, note the PID
  of every process it started (each carries a unique variable in its
  environment), and say which of them are still alive afterwards.
* :class:`FakePMIServer`: the server side of the simple PMI v1 wire protocol
  (as MPICH's Hydra answers it), over socket pairs (``PMI_FD``) or TCP
  (``PMI_PORT``), recording what each rank sent.

Each finder returns ``(None, reason)`` where its packages are missing, so that
the tests skip with the reason. Not a conftest: test_launchers.py loads it by path.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path

APT_HINT = "apt-get install -y slurm-wlm munge openmpi-bin mpich"

# Variables a launcher sets that must not leak from an outer job into the tests' jobs.
_LAUNCHER_PREFIXES = ("SLURM_", "OMPI_", "PMI_", "PMIX_", "PRTE_", "HYDRA_", "MPIR_", "MPI_LOCAL")


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without any launcher's variables, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_LAUNCHER_PREFIXES)}
    for k in ("JAX_COORDINATOR_ADDRESS", "DDLTUNE_COLLECT_FAULT", "SLURM_CONF"):
        env.pop(k, None)
    env.update(extra)
    return env


def free_port() -> int:
    """A TCP port free on every interface right now."""
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def _version_text(path: str) -> str:
    try:
        out = subprocess.run(
            [path, "--version"],
            capture_output=True,
            text=True,
            timeout=20,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout + out.stderr


def find_openmpi() -> tuple[list[str] | None, str]:
    """``(argv prefix for 2 ranks, version)`` of Open MPI's mpirun, or ``(None, reason)``."""
    for name in ("mpirun.openmpi", "mpirun", "mpiexec"):
        path = shutil.which(name)
        if path is None:
            continue
        text = _version_text(path)
        if "Open MPI" in text or "OpenRTE" in text:
            version = text.strip().splitlines()[0]
            argv = [path, "--oversubscribe"]
            if os.geteuid() == 0:
                argv.append("--allow-run-as-root")
            return [*argv, "-np", "2"], version
    return None, f"Open MPI's mpirun not found ({APT_HINT})"


def find_mpich() -> tuple[list[str] | None, str]:
    """``(argv prefix for 2 ranks, version)`` of MPICH's Hydra mpiexec, or ``(None, reason)``."""
    for name in ("mpiexec.mpich", "mpiexec.hydra", "mpiexec", "mpirun"):
        path = shutil.which(name)
        if path is None:
            continue
        text = _version_text(path)
        if "HYDRA" in text:
            version = next(
                (ln.split(":", 1)[1].strip() for ln in text.splitlines() if "Version:" in ln), "?"
            )
            return [path, "-n", "2"], f"MPICH Hydra {version}"
    return None, f"MPICH's mpiexec (Hydra) not found ({APT_HINT})"


def openmpi_major(version: str) -> int:
    """The major version in ``mpirun --version``'s first line (0 if unreadable)."""
    for word in version.replace("v", " ").split():
        head = word.split(".")[0]
        if head.isdigit() and "." in word:
            return int(head)
    return 0


# --------------------------------------------------------------------------- processes


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie is dead)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


def tagged_pids(tag: str) -> set[int]:
    """PIDs of live processes whose environment holds ``DDLTUNE_TEST_JOB=tag``."""
    needle = f"DDLTUNE_TEST_JOB={tag}".encode()
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                if needle in fh.read().split(b"\0"):
                    found.add(int(entry))
        except OSError:
            continue
    return found


@dataclasses.dataclass
class JobResult:
    """What :func:`run_job` saw.

    Attributes:
        returncode: the launcher's exit status (``None``: it was killed at the timeout).
        output: its stdout and stderr together.
        elapsed_s: from start to the launcher's exit, seconds.
        pids: every process seen with the job's tag (the ranks, and what they started).
        survivors: those still alive after the launcher exited and a grace period.
        mark_s: from start to the first poll that found ``mark`` in the output,
            seconds (``None``: never seen, or no mark asked for); polls are 0.2 s
            apart, so it is late by at most that.
    """

    returncode: int | None
    output: str
    elapsed_s: float
    pids: set[int]
    survivors: list[int]
    mark_s: float | None = None

    @property
    def after_mark_s(self) -> float | None:
        """Seconds from the mark (a fault, say) to the launcher's exit."""
        return None if self.mark_s is None else self.elapsed_s - self.mark_s


def run_job(
    argv: list[str],
    env: dict[str, str],
    *,
    cwd: str | os.PathLike,
    timeout_s: float,
    grace_s: float = 15.0,
    mark: str | None = None,
) -> JobResult:
    """Run one launcher command to its end, at most ``timeout_s`` seconds, and reap everything.

    Every process started inherits ``DDLTUNE_TEST_JOB=<unique tag>`` (srun,
    mpirun and mpiexec pass the environment on), by which the PIDs of the
    ranks are found while the job runs and checked after it ends. After a
    timeout the launcher's process group and every tagged process are killed
    by PID; survivors are reported (and then killed, so that no test leaks).
    ``mark``: a text whose first appearance in the output is timed
    (:attr:`JobResult.mark_s`), so that a test can bound what follows a fault.
    """
    tag = uuid.uuid4().hex
    env = dict(env, DDLTUNE_TEST_JOB=tag)
    log_path = Path(cwd) / f"job-{tag[:8]}.log"
    seen: set[int] = set()
    t0 = time.monotonic()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            argv,
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    returncode = None
    mark_s = None
    needle = None if mark is None else mark.encode()
    try:
        while time.monotonic() - t0 < timeout_s:
            seen |= tagged_pids(tag)
            if needle is not None and mark_s is None and needle in log_path.read_bytes():
                mark_s = time.monotonic() - t0
            returncode = proc.poll()
            if returncode is not None:
                break
            time.sleep(0.2)
    finally:
        elapsed = time.monotonic() - t0
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        seen.discard(proc.pid)
        # The launcher is gone; its ranks must follow within the grace period.
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(alive(p) for p in seen | tagged_pids(tag)):
            time.sleep(0.2)
        left = sorted(p for p in seen | tagged_pids(tag) if alive(p))
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
    output = log_path.read_text(encoding="utf-8", errors="replace")
    return JobResult(returncode, output, elapsed, seen, left, mark_s)


# --------------------------------------------------------------------------- SLURM


class _SlurmDaemons:
    """What both test SLURMs share: their daemons, each a process of its own session
    with its output in the cluster's folder, a munged of their own, ``sinfo``/``squeue``
    through :meth:`_cmd` (as is here; inside the login node across emulated nodes).

    Subclasses set :attr:`base` (the folder), :attr:`env` and provide ``_path``.
    """

    BINARIES = ("munged", "slurmctld", "slurmd", "srun", "sinfo", "squeue")

    def __init__(self):
        self.procs: dict[str, subprocess.Popen] = {}
        self.env: dict[str, str] = {}
        self.version = ""

    def _cmd(self, argv: list[str]) -> list[str]:
        return argv

    def _node_count(self) -> int:
        return 1

    def _spawn(self, name: str, argv: list[str]) -> None:
        with open(self._path(f"{name}.out"), "wb") as out:
            self.procs[name] = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
            )

    def logs(self) -> str:
        """The tails of every daemon's output and log file."""
        parts = []
        assert self.base is not None
        for f in sorted(self.base.glob("*.out")) + sorted(self.base.glob("*.log")):
            with contextlib.suppress(OSError):
                lines = f.read_text(errors="replace").splitlines()[-8:]
                parts.append(f"--- {f.name}\n" + "\n".join(lines))
        return "\n".join(parts)

    def _wait(self, what: str, ready, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for name, p in self.procs.items():
                if p.poll() is not None:
                    raise RuntimeError(f"{name} exited with {p.returncode}:\n{self.logs()}")
            if ready():
                return
            time.sleep(0.3)
        raise RuntimeError(f"{what} not within {timeout_s:g} s:\n{self.logs()}")

    def _start_munged(self) -> Path:
        """Write a fresh 1 KiB key, start munged on a socket in the folder; its path."""
        for sub in ("state", "spool"):
            self._path(sub).mkdir()
        self.env = clean_env(SLURM_CONF=str(self._path("slurm.conf")))
        self.version = _version_text("srun").strip()
        key = self._path("munge.key")
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        sock = self._path("munge.socket")
        self._spawn(
            "munged",
            [
                "munged",
                "--foreground",
                "--force",
                f"--key-file={key}",
                f"--socket={sock}",
                f"--pid-file={self._path('munged.pid')}",
                f"--log-file={self._path('munged.log')}",
                f"--seed-file={self._path('munged.seed')}",
            ],
        )
        self._wait("munged's socket", sock.exists, 20)
        return sock

    def _conf(self, sock: Path, head: str, tail: str, *, per_node: str = "") -> str:
        """slurm.conf: ``head`` (cluster and controller lines), the settings both
        share (munge on ``sock``, no cgroups, no accounting), then ``tail`` (nodes,
        partition); ``per_node`` goes into the names of slurmd's spool, pid and log."""
        p = self._path
        return f"""\
{head}
AuthType=auth/munge
AuthInfo=socket={sock}
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={p("state")}
SlurmdSpoolDir={p("spool")}{"/" + per_node if per_node else ""}
SlurmctldPidFile={p("slurmctld.pid")}
SlurmdPidFile={p("slurmd" + ("-" + per_node if per_node else "") + ".pid")}
SlurmctldLogFile={p("slurmctld.log")}
SlurmdLogFile={p("slurmd" + ("-" + per_node if per_node else "") + ".log")}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
SwitchType=switch/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
KillWait=5
MinJobAge=5
InactiveLimit=0
{tail}
"""

    def _idle(self) -> bool:
        try:
            out = subprocess.run(
                self._cmd(["sinfo", "-h", "-N", "-o", "%T"]),
                capture_output=True,
                text=True,
                timeout=10,
                env=self.env,
            ).stdout
        except subprocess.TimeoutExpired:
            return False
        states = out.split()
        return len(states) == self._node_count() and set(states) == {"idle"}

    def jobs_left(self, timeout_s: float = 20.0) -> str:
        """``squeue``'s lines once every job ended (empty), or what is still there after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        out = ""
        while time.monotonic() < deadline:
            out = subprocess.run(
                self._cmd(["squeue", "-h"]),
                capture_output=True,
                text=True,
                timeout=10,
                env=self.env,
            ).stdout.strip()
            if not out:
                return ""
            time.sleep(0.5)
        return out

    def _stop_daemons(self) -> None:
        """SIGTERM, then SIGKILL, by PID: the slurmds, slurmctld, then munged."""
        for name in sorted(self.procs, key=lambda n: (n != "munged", n), reverse=True):
            p = self.procs[name]
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        self.procs.clear()


class SlurmCluster(_SlurmDaemons):
    """A single-host SLURM for tests: munged, slurmctld and slurmd of this machine.

    Everything lives in a fresh folder under the system's temporary directory
    (munged wants every directory above its socket to be searchable by all,
    which pytest's 0700 ``tmp_path`` is not): a 1 KiB munge key, munged's
    socket, pid, log and seed files, ``slurm.conf`` with ports picked free,
    the state and spool folders and the daemons' logs. NodeName is this
    host's ``hostname -s`` with the CPU layout ``slurmd -C`` reports;
    ``select/cons_tres``, ``proctrack/linuxproc``, ``task/none``: no cgroups.

    Use :meth:`start` (raises :class:`RuntimeError` with the logs when a
    daemon fails) and :meth:`stop` (SIGTERM, then SIGKILL, by PID; removes the
    folder). :meth:`srun` gives the argv prefix and :attr:`env` the
    environment (``SLURM_CONF``) for ``srun``/``sinfo``.
    """

    def __init__(self):
        super().__init__()
        self.base: Path | None = None
        self.node = ""

    @classmethod
    def unavailable(cls) -> str | None:
        """Why a single-host SLURM cannot start here, or ``None``."""
        missing = [b for b in cls.BINARIES if shutil.which(b) is None]
        if missing:
            return f"SLURM not installed ({', '.join(missing)} missing; {APT_HINT})"
        if os.geteuid() != 0:
            return "the single-host SLURM runs slurmd and munged as root; not root here"
        return None

    def _path(self, *parts: str) -> Path:
        assert self.base is not None
        return self.base.joinpath(*parts)

    def start(self, timeout_s: float = 60.0) -> SlurmCluster:
        """Generate the files, start munged, slurmctld and slurmd, wait until the node is idle."""
        self.base = Path(tempfile.mkdtemp(prefix="ddltune-slurm-"))
        self.base.chmod(0o755)
        sock = self._start_munged()

        probe = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, timeout=30)
        words = dict(w.split("=", 1) for w in probe.stdout.split() if "=" in w)
        self.node = socket.gethostname().split(".")[0]
        layout = (
            " ".join(
                f"{k}={words[k]}"
                for k in ("CPUs", "Boards", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore")
                if k in words
            )
            or f"CPUs={os.cpu_count() or 1}"
        )
        ctld_port, slurmd_port = free_port(), free_port()
        while slurmd_port == ctld_port:
            slurmd_port = free_port()
        p = self._path
        conf = self._conf(
            sock,
            "# Generated by tests/_launchers.py: a single-host SLURM for the launcher tests.\n"
            f"ClusterName=ddltunetest\nSlurmctldHost={self.node}(127.0.0.1)\n"
            f"SlurmctldPort={ctld_port}\nSlurmdPort={slurmd_port}",
            f"NodeName={self.node} NodeAddr=127.0.0.1 {layout} RealMemory=500 State=UNKNOWN\n"
            f"PartitionName=test Nodes={self.node} Default=YES MaxTime=INFINITE State=UP "
            "OverSubscribe=FORCE:4",
        )
        p("slurm.conf").write_text(conf)
        self._spawn("slurmctld", ["slurmctld", "-D", "-f", str(p("slurm.conf"))])
        self._spawn("slurmd", ["slurmd", "-D", "-f", str(p("slurm.conf"))])
        self._wait("the node idle in sinfo", self._idle, timeout_s)
        return self

    def srun(self, ntasks: int = 2) -> list[str]:
        """The argv prefix for ``ntasks`` tasks (even on fewer CPUs) that all end when one fails."""
        return ["srun", "-n", str(ntasks), "--overcommit", "--kill-on-bad-exit=1", "-t", "5"]

    def stop(self) -> None:
        """Stop slurmd, slurmctld and munged by PID (SIGTERM, then SIGKILL) and remove the folder."""
        self._stop_daemons()
        if self.base is not None:
            shutil.rmtree(self.base, ignore_errors=True)
            self.base = None


# --------------------------------------------------------------------------- launchers across emulated nodes

#: Open MPI's ``plm_rsh_agent`` and Hydra's ``-launcher-exec``: called as ``AGENT [OPTIONS]
#: HOST COMMAND…`` (as ``ssh`` would be), it runs COMMAND with a shell inside HOST's
#: namespaces; an emulated node's host name is its network namespace's name.
RSH_AGENT = """#!/bin/sh
# Generated by tests/_launchers.py: "ssh" into an emulated node (its namespaces), no ssh.
while [ "${1#-}" != "$1" ]; do shift; done
host="$1"; shift
exec nsenter --net=/run/netns/"$host" unshare --uts --mount --propagation private -- \\
    sh -c 'hostname "$0" && mount --bind /etc/netns/"$0"/hosts /etc/hosts && exec sh -c "$1"' \\
    "$host" "$*"
"""


def node_command(node, argv: list[str]) -> list[str]:
    """``argv`` run inside an emulated node (a :class:`launch.Node`).

    Like ``EmulatedCluster.wrap`` (the node's network namespace, host name and
    hosts file) but entered with ``nsenter`` and a private mount namespace of
    its own instead of ``ip netns exec``, which mounts a fresh ``/sys`` without
    ``/sys/fs/cgroup``: slurmd (22.05) will not start without its cgroup
    hierarchy, even with ``proctrack/linuxproc``.
    """
    return [
        "nsenter", f"--net=/run/netns/{node.netns}", "unshare", "--uts", "--mount",
        "--propagation", "private", "--", "sh", "-c",
        'hostname "$0" && mount --bind "$1" /etc/hosts && shift && exec "$@"',
        node.hostname, f"/etc/netns/{node.netns}/hosts", *argv,
    ]  # fmt: skip


class EmulatedNodes:
    """The nodes of a :class:`launch.EmulatedCluster` as a launcher sees hosts.

    Each node has its own host name, address and ``/etc/hosts`` (every node's
    name → its address); node 0 is the login node, where a launcher runs
    (:meth:`command`); :attr:`agent` is an ``ssh`` stand-in (:data:`RSH_AGENT`)
    for launchers that start their daemons on the other hosts: Open MPI
    (``--mca plm_rsh_agent``, :meth:`openmpi`) and MPICH's Hydra (``-launcher
    rsh -launcher-exec``, :meth:`mpich`). Nothing is in the host's network
    namespace; :meth:`stop` removes the namespaces (killing what still runs
    in them) and the folder.

    Args:
        spec: the emulated cluster, ``NODESx1@RATE`` (the ranks per node are
            the launcher's).
    """

    def __init__(self, spec: str = "4x1@200mbit"):
        self.spec = spec
        self.cluster = None
        self.base: Path | None = None
        self.agent = ""

    @classmethod
    def unavailable(cls) -> str | None:
        """Why emulated nodes cannot be built here, or ``None``."""
        from launch import emulation_unavailable_reason

        return emulation_unavailable_reason() or (
            None if shutil.which("nsenter") else "nsenter (util-linux) not found"
        )

    @property
    def hostnames(self) -> list[str]:
        """The node names, node 0 first (the nodes' host names inside their namespaces)."""
        return [n.hostname for n in self.cluster.nodes]

    def _path(self, *parts: str) -> Path:
        assert self.base is not None
        return self.base.joinpath(*parts)

    def start(self) -> EmulatedNodes:
        """Build the emulated network and write the agent."""
        from launch import EmulatedCluster

        self.base = Path(tempfile.mkdtemp(prefix="ddltune-enodes-"))
        self.base.chmod(0o755)
        self.cluster = EmulatedCluster(self.spec)
        self.cluster.start()
        agent = self._path("rsh-agent.sh")
        agent.write_text(RSH_AGENT)
        agent.chmod(0o755)
        self.agent = str(agent)
        return self

    def command(self, argv: list[str], node: int = 0) -> list[str]:
        """``argv`` run inside emulated node ``node`` (default the login node, 0)."""
        return node_command(self.cluster.nodes[node], argv)

    def _hosts(self, nodes: int, per_node: int) -> str:
        return ",".join(f"{h}:{per_node}" for h in self.hostnames[:nodes])

    def openmpi(self, mpirun: str, nodes: int, per_node: int) -> list[str]:
        """Open MPI's ``mpirun`` over ``nodes`` × ``per_node`` slots, from the login node."""
        root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
        return self.command(
            [mpirun, *root, "--oversubscribe", "-np", str(nodes * per_node),
             "--host", self._hosts(nodes, per_node), "--mca", "plm_rsh_agent", self.agent]
        )  # fmt: skip

    def mpich(self, mpiexec: str, nodes: int, per_node: int) -> list[str]:
        """MPICH's Hydra ``mpiexec`` over ``nodes`` × ``per_node`` slots, from the login node."""
        return self.command(
            [mpiexec, "-launcher", "rsh", "-launcher-exec", self.agent,
             "-hosts", self._hosts(nodes, per_node), "-n", str(nodes * per_node)]
        )  # fmt: skip

    def stop(self) -> None:
        """Remove the namespaces (and what still runs in them) and the folder."""
        if self.cluster is not None:
            self.cluster.close()
        if self.base is not None:
            shutil.rmtree(self.base, ignore_errors=True)
            self.base = None


# --------------------------------------------------------------------------- SLURM across emulated nodes


class EmulatedSlurmCluster(EmulatedNodes, _SlurmDaemons):
    """SLURM across the nodes of a :class:`launch.EmulatedCluster`, as on a real cluster.

    One slurmd per emulated node, started inside that node's network and UTS
    namespaces (:func:`node_command`: its own host name, its address on the
    bridge, ``/etc/hosts`` mapping every node's name to its address);
    slurmctld in node 0's namespace (node 0 is also the login node: ``srun``
    runs there, :meth:`command`); one munged in the host's namespace, whose
    socket every namespace reaches by its path (network namespaces do not
    separate path-bound unix sockets). ``NodeAddr`` gives slurmctld each
    node's address, so the daemons need no name service; the ranks resolve
    node names through the hosts file. Every slurmd listens on the same port,
    each in its own namespace. Nothing is in the host's network namespace.

    :meth:`stop` ends the daemons by PID (SIGTERM, then SIGKILL) and removes
    the namespaces (which kills whatever else still runs in them) and the folder.

    Args:
        spec: the emulated cluster, ``NODESx1@RATE`` (one slurmd per node; the
            ranks per node are srun's ``--ntasks-per-node``).
    """

    def __init__(self, spec: str = "4x1@200mbit"):
        EmulatedNodes.__init__(self, spec)
        _SlurmDaemons.__init__(self)

    def _cmd(self, argv: list[str]) -> list[str]:
        return self.command(argv)

    def _node_count(self) -> int:
        return len(self.cluster.nodes)

    @classmethod
    def unavailable(cls) -> str | None:
        """Why SLURM across emulated nodes cannot start here, or ``None``."""
        return SlurmCluster.unavailable() or EmulatedNodes.unavailable()

    def start(self, timeout_s: float = 60.0) -> EmulatedSlurmCluster:
        """Build the emulated network, write the files, start the daemons, wait until idle."""
        super().start()
        sock = self._start_munged()
        cpus = os.cpu_count() or 1
        p = self._path
        n0 = self.cluster.nodes[0]
        nodes = "\n".join(
            f"NodeName={n.hostname} NodeAddr={n.address} CPUs={cpus} RealMemory=500 State=UNKNOWN"
            for n in self.cluster.nodes
        )
        names = ",".join(self.hostnames)
        conf = self._conf(
            sock,
            "# Generated by tests/_launchers.py: SLURM across the nodes of an emulated cluster.\n"
            f"ClusterName=ddltuneemu\nSlurmctldHost={n0.hostname}({n0.address})\n"
            "SlurmctldPort=6817\nSlurmdPort=6818",
            f"{nodes}\nPartitionName=emu Nodes={names} Default=YES MaxTime=INFINITE State=UP "
            "OverSubscribe=FORCE:4",
            per_node="%n",
        )
        p("slurm.conf").write_text(conf)
        conf_path = str(p("slurm.conf"))
        self._spawn("slurmctld", self.command(["slurmctld", "-D", "-f", conf_path]))
        for n in self.cluster.nodes:
            self._path("spool", n.hostname).mkdir()
            self._spawn(
                f"slurmd-{n.index}",
                self.command(["slurmd", "-D", "-f", conf_path, "-N", n.hostname], n.index),
            )
        self._wait("every node idle in sinfo", self._idle, timeout_s)
        return self

    def srun(self, nodes: int, ntasks_per_node: int) -> list[str]:
        """``srun`` on ``nodes`` nodes × ``ntasks_per_node``, run from the login node."""
        return self.command(
            [
                "srun",
                "-N",
                str(nodes),
                "--ntasks-per-node",
                str(ntasks_per_node),
                "--overcommit",
                "--kill-on-bad-exit=1",
                "-t",
                "5",
            ]
        )

    def stop(self) -> None:
        """Stop every daemon by PID, remove the namespaces and the folder."""
        self._stop_daemons()
        EmulatedNodes.stop(self)


# --------------------------------------------------------------------------- fake PMI server


class FakePMIServer:
    """The server side of simple PMI v1, as Hydra's proxy answers it (MPICH 4.0.2).

    One thread per rank connection. ``events[rank]`` lists the ``cmd`` of
    every request in order, and ``"EOF"`` when the rank closed without
    ``finalize``.

    Args:
        size: ranks in the job (the barrier waits for all of them).
        answer_barrier: ``False`` makes the server never answer ``barrier_in``
            (a rank that never arrives).
    """

    def __init__(self, size: int, *, answer_barrier: bool = True, kvsname: str = "kvs_42_0"):
        self.size = size
        self.kvsname = kvsname
        self.answer_barrier = answer_barrier
        self.kvs: dict[str, str] = {}
        self.events: dict[int, list[str]] = {r: [] for r in range(size)}
        self._barrier = threading.Barrier(size)
        self._threads: list[threading.Thread] = []
        self._socks: list[socket.socket] = []
        self._listener: socket.socket | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def socketpair(self, rank: int) -> socket.socket:
        """A connected socket for ``rank`` (its fileno goes into ``PMI_FD``)."""
        mine, theirs = socket.socketpair()
        self._socks.append(mine)
        self._serve(mine, rank)
        return theirs

    def listen(self) -> str:
        """Accept ``size`` TCP connections that start with ``initack``; return ``127.0.0.1:PORT``."""
        lst = socket.socket()
        lst.bind(("127.0.0.1", 0))
        lst.listen(self.size)
        self._listener = lst

        def accept() -> None:
            for _ in range(self.size):
                try:
                    conn, _ = lst.accept()
                except OSError:
                    return
                self._socks.append(conn)
                self._serve(conn, None)

        t = threading.Thread(target=accept, daemon=True)
        t.start()
        self._threads.append(t)
        return f"127.0.0.1:{lst.getsockname()[1]}"

    def _serve(self, conn: socket.socket, rank: int | None) -> None:
        t = threading.Thread(target=self._loop, args=(conn, rank), daemon=True)
        t.start()
        self._threads.append(t)

    def _loop(self, conn: socket.socket, rank: int | None) -> None:
        f = conn.makefile("rwb", buffering=0)
        while not self._stop.is_set():
            try:
                line = f.readline()
            except OSError:
                line = b""
            if not line:
                if rank is not None:
                    self.events[rank].append("EOF")
                return
            words = dict(w.split("=", 1) for w in line.decode().split())
            cmd = words.get("cmd", "?")
            if cmd == "initack":
                rank = int(words["pmiid"])
            if rank is not None:
                self.events[rank].append(cmd)
            reply = self._reply(cmd, words, rank)
            if reply is None:
                continue
            try:
                f.write(reply.encode())
            except OSError:
                return
            if cmd == "finalize":
                conn.close()
                return

    def _reply(self, cmd: str, w: dict[str, str], rank: int | None) -> str | None:
        if cmd == "initack":
            return f"cmd=initack\ncmd=set size={self.size}\ncmd=set rank={rank}\ncmd=set debug=0\n"
        if cmd == "init":
            return "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n"
        if cmd == "get_maxes":
            return "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024\n"
        if cmd == "get_my_kvsname":
            return f"cmd=my_kvsname kvsname={self.kvsname}\n"
        if cmd == "put":
            if w.get("kvsname") != self.kvsname:
                return "cmd=put_result rc=-1 msg=unknown_kvsname\n"
            with self._lock:
                self.kvs[w["key"]] = w["value"]
            return "cmd=put_result rc=0 msg=success\n"
        if cmd == "barrier_in":
            if not self.answer_barrier:
                return None
            try:
                self._barrier.wait(timeout=30)
            except threading.BrokenBarrierError:
                return None
            return "cmd=barrier_out\n"
        if cmd == "get":
            with self._lock:
                value = self.kvs.get(w.get("key", ""))
            if value is None:
                return f"cmd=get_result rc=-1 msg=key_{w.get('key')}_not_found\n"
            return f"cmd=get_result rc=0 msg=success value={value}\n"
        if cmd == "finalize":
            return "cmd=finalize_ack\n"
        return f"cmd={cmd}_result rc=-1 msg=unknown_command\n"

    def close(self) -> None:
        """Stop serving and close every socket."""
        self._stop.set()
        self._barrier.abort()
        for s in [*self._socks, *([self._listener] if self._listener else [])]:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                s.close()
        for t in self._threads:
            t.join(timeout=5)
