"""ddltune collect under real cluster launchers, and the simple-PMI client MPICH jobs use.

* Unit tests of :mod:`launch._pmi` against a fake PMI server (socket pairs
  for ``PMI_FD``, TCP for ``PMI_PORT``): what each rank sends, in order.
* Under a single-host SLURM (``srun``), Open MPI's ``mpirun`` and MPICH's
  ``mpiexec``: a 2-rank collect writes the same records as ``--workers 2``;
  a rank that crashes or hangs ends the job within the collector's timeout,
  named in the output with its point; the records written stay valid and
  ``--resume`` measures only the rest; no process of the job survives it.
  Each launcher's tests skip, with the reason, where its packages are absent
  (``apt-get install -y slurm-wlm munge openmpi-bin mpich``).
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from calibration import read_records, record_key
from launch import ClusterEnv, PMIError, detect_cluster, exchange_coordinator, initialize_worker
from launch._pmi import (
    COORDINATOR_KEY,
    SimplePMIClient,
    _port_clients,
    format_command,
    parse_command,
    pmi_available,
)


def _load_helpers():
    spec = importlib.util.spec_from_file_location(
        "ddltune_test_launchers", Path(__file__).with_name("_launchers.py")
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


H = _load_helpers()

# Small and fast: 1 KiB … 64 KiB all_reduce (4 points), timed in one pass so that
# each record is written as soon as its point is done.
COLLECT = [
    "collect",
    "--max-bytes",
    "64K",
    "--collectives",
    "all_reduce",
    "--suite",
    "collectives",
    "--budget-s",
    "0.02",
    "--iters",
    "2",
    "--warmup-iters",
    "1",
    "--rounds",
    "1",
    "--no-progress",
]
SIZES = [1024, 4096, 16384, 65536]
JOB_TIMEOUT_S = 150  # a bound on one launcher run, far above its ~10-20 s


def _what(rec: dict) -> tuple:
    return (rec["collective"], rec["message_bytes"], rec["num_ranks"], rec["ranks_per_node"])


# =========================================================================== fake PMI server


@pytest.fixture
def fake_pmi():
    servers = []

    def make(size: int, **kw):
        servers.append(H.FakePMIServer(size, **kw))
        return servers[-1]

    yield make
    for s in servers:
        s.close()
    _port_clients.clear()


def _in_threads(fn, n: int, timeout_s: float = 30.0) -> list:
    out: list = [None] * n

    def body(i):
        try:
            out[i] = fn(i)
        except BaseException as e:  # reported to the test below
            out[i] = e

    threads = [threading.Thread(target=body, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout_s)
    assert not any(t.is_alive() for t in threads), "a rank did not finish"
    return out


def test_wire_lines_parse_and_refuse_what_the_format_cannot_carry():
    assert parse_command("cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024\n") == {
        "cmd": "maxes",
        "kvsname_max": "256",
        "keylen_max": "64",
        "vallen_max": "1024",
    }
    assert parse_command("cmd=get_result rc=0 value=a=b")["value"] == "a=b"
    with pytest.raises(PMIError, match="not key=value"):
        parse_command("cmd=put_result oops")
    with pytest.raises(PMIError, match="no cmd"):
        parse_command("rc=0")
    assert format_command("barrier_in") == "cmd=barrier_in\n"
    with pytest.raises(ValueError, match="value='a b'"):
        format_command("put", key="k", value="a b")


def test_no_pmi_variables_means_no_pmi():
    assert not pmi_available({"PMI_RANK": "0", "PMI_SIZE": "2"})
    assert SimplePMIClient.from_environ({}) is None
    assert exchange_coordinator(0, environ={"PMI_RANK": "0"}) is None
    with pytest.raises(PMIError, match="PMI_FD='x'"):
        SimplePMIClient.from_environ({"PMI_FD": "x"})
    r, w = os.pipe()
    try:
        with pytest.raises(PMIError, match="not an open socket"):
            SimplePMIClient.from_environ({"PMI_FD": str(r)})
    finally:
        os.close(r)
        os.close(w)
    with pytest.raises(PMIError, match="expected HOST:PORT"):
        SimplePMIClient.from_environ({"PMI_PORT": "nohost"})


def test_ranks_agree_on_rank0_address_through_pmi_fd(fake_pmi):
    """Rank 0 puts HOST:PORT, all enter the barrier, the others get it: one address for all."""
    server = fake_pmi(3)
    socks = [server.socketpair(r) for r in range(3)]
    env = [
        {"PMI_FD": str(s.fileno()), "PMI_RANK": str(r), "MPIR_CVAR_CH3_INTERFACE_HOSTNAME": "node7"}
        for r, s in enumerate(socks)
    ]
    got = _in_threads(lambda r: exchange_coordinator(r, environ=env[r], hold=False), 3)
    for s in socks:
        s.close()
    assert not [g for g in got if isinstance(g, BaseException)], got
    assert len(set(got)) == 1
    host, port = got[0].rsplit(":", 1)
    assert host == "node7" and 0 < int(port) < 65536
    assert server.kvs == {COORDINATOR_KEY: got[0]}
    head = ["init", "get_maxes", "get_my_kvsname"]
    assert server.events[0] == [*head, "put", "barrier_in", "finalize"]
    for r in (1, 2):
        assert server.events[r] == [*head, "barrier_in", "get", "finalize"]


def test_pmi_port_handshake_gives_rank_and_size_and_is_done_once(fake_pmi):
    """mpiexec -pmi-port sets only PMI_PORT and PMI_ID: rank and size come from initack."""
    server = fake_pmi(2)
    address = server.listen()

    def rank(r):
        env = {"PMI_PORT": address, "PMI_ID": str(r)}
        found = detect_cluster(env)
        return found, exchange_coordinator(r, environ=env, hold=False)

    got = _in_threads(rank, 2)
    assert not [g for g in got if isinstance(g, BaseException)], got
    assert [g[0] for g in got] == [ClusterEnv("mpich", 2, 0, None), ClusterEnv("mpich", 2, 1, None)]
    assert got[0][1] == got[1][1]
    for r in (0, 1):
        assert server.events[r][:2] == ["initack", "init"]
        assert server.events[r].count("initack") == 1 and server.events[r][-1] == "finalize"


def test_refusals_and_missing_keys_raise_naming_them(fake_pmi):
    server = fake_pmi(1)
    sock = server.socketpair(0)
    client = SimplePMIClient.from_environ({"PMI_FD": str(sock.fileno())}, timeout_s=10)
    sock.close()
    client.init()
    client.get_maxes()
    assert client.maxes == {"kvsname_max": 256, "keylen_max": 64, "vallen_max": 1024}
    with pytest.raises(PMIError, match="'nokey': not found"):
        client.get("nokey")
    client.kvsname = "kvs_wrong"
    with pytest.raises(PMIError, match=r"put failed \(rc=-1\): unknown_kvsname"):
        client.put("k", "v")
    with pytest.raises(ValueError, match="longer than the server's 64"):
        client.put("k" * 65, "v")
    client.finalize()
    assert server.events[0][-1] == "finalize"


def test_a_rank_that_never_reaches_the_barrier_times_out_naming_the_step(fake_pmi):
    server = fake_pmi(2, answer_barrier=False)
    sock = server.socketpair(1)
    env = {"PMI_FD": str(sock.fileno())}
    with pytest.raises(PMIError, match=r"rank 1: PMI: no answer within 1 s \(at PMI barrier"):
        exchange_coordinator(1, environ=env, timeout_s=1)
    sock.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("ending", ["exit", "die"])
def test_the_pmi_connection_is_finalized_at_normal_exit_only(fake_pmi, ending):
    """Hydra stops a job whose rank closes PMI without finalize: a dying rank must, a clean one not."""
    server = fake_pmi(1)
    sock = server.socketpair(0)
    code = (
        "import os, sys\n"
        "from launch._pmi import exchange_coordinator\n"
        "print(exchange_coordinator(0, environ={'PMI_FD': sys.argv[1]}), flush=True)\n"
        "os._exit(3) if sys.argv[2] == 'die' else sys.exit(0)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(sock.fileno()), ending],
        pass_fds=(sock.fileno(),),
        capture_output=True,
        text=True,
        timeout=60,
    )
    sock.close()
    assert proc.returncode == (3 if ending == "die" else 0), proc.stderr
    assert proc.stdout.strip() == server.kvs[COORDINATOR_KEY]
    deadline = time.monotonic() + 10
    while server.events[0][-1] not in ("finalize", "EOF") and time.monotonic() < deadline:
        time.sleep(0.05)
    last = "finalize" if ending == "exit" else "EOF"
    assert server.events[0][-2:] == ["barrier_in", last]


def test_mpich_without_pmi_or_address_still_asks_for_a_coordinator(monkeypatch):
    for k in ("PMI_FD", "PMI_PORT", "JAX_COORDINATOR_ADDRESS", "DDLTUNE_PROCESS_ID"):
        monkeypatch.delenv(k, raising=False)
    for k in [k for k in os.environ if k.startswith(("SLURM_", "OMPI_"))]:
        monkeypatch.delenv(k)
    monkeypatch.setenv("PMI_RANK", "1")
    monkeypatch.setenv("PMI_SIZE", "2")
    with pytest.raises(RuntimeError, match="no coordinator address: pass --coordinator"):
        initialize_worker()


# =========================================================================== real launchers


class Launcher:
    """One launcher as the tests drive it: argv prefix for 2 ranks, environment, version."""

    def __init__(self, name, argv, env, version, extra=(), slurm=None):
        self.name, self.argv, self.env, self.version = name, argv, env, version
        self.extra = list(extra)  # arguments collect needs under this launcher
        self.slurm = slurm

    def run(self, tmp_path, args, *, fault=None, timeout_s=JOB_TIMEOUT_S):
        env = dict(self.env, JAX_PLATFORMS="cpu", PYTHONUNBUFFERED="1")
        if fault:
            env["DDLTUNE_COLLECT_FAULT"] = fault
        cmd = [*self.argv, sys.executable, "-m", "tuner.cli", *COLLECT, *self.extra, *args]
        mark = "injected fault:" if fault else None
        res = H.run_job(cmd, env, cwd=tmp_path, timeout_s=timeout_s, mark=mark)
        assert res.returncode is not None, f"{self.name} job did not end: {res.output[-3000:]}"
        assert res.pids, f"no process of the {self.name} job was seen"
        assert res.survivors == [], f"{self.name} left {res.survivors} running"
        if self.slurm is not None:
            assert self.slurm.jobs_left() == "", "SLURM still lists the job"
        return res


def _up_and_down(c):
    """Start a test cluster ``c`` (SLURM, emulated nodes), yield it, stop it: no daemon
    (by the PIDs it started) or namespace of it left."""
    try:
        c.start()
    except BaseException:
        c.stop()
        raise
    emu = getattr(c, "cluster", None)
    names = set() if emu is None else {n.netns for n in emu.nodes} | {emu.bridge_netns}
    yield c
    pids = [p.pid for p in getattr(c, "procs", {}).values()]
    c.stop()
    assert not [p for p in pids if H.alive(p)], "a daemon survived"
    assert not names & _netns_names(), "a namespace survived"


@pytest.fixture(scope="module")
def slurm():
    why = H.SlurmCluster.unavailable()
    if why:
        pytest.skip(why)
    yield from _up_and_down(H.SlurmCluster())


@pytest.fixture(scope="module", params=["srun", "openmpi", "mpich"])
def launcher(request):
    if request.param == "srun":
        cluster = request.getfixturevalue("slurm")
        return Launcher("srun", cluster.srun(2), cluster.env, cluster.version, slurm=cluster)
    argv, version = (H.find_openmpi if request.param == "openmpi" else H.find_mpich)()
    if argv is None:
        pytest.skip(version)
    extra = []
    if request.param == "openmpi" and H.openmpi_major(version) >= 5:
        # PRRTE sets no OMPI_MCA_orte_hnp_uri: jax cannot find a coordinator itself.
        extra = ["--coordinator", f"127.0.0.1:{H.free_port()}"]
    return Launcher(request.param, argv, H.clean_env(), version, extra)


@pytest.fixture(scope="module")
def local_records(tmp_path_factory):
    """What ``--workers 2`` writes locally: the reference for the launchers' records."""
    out = tmp_path_factory.mktemp("local") / "local.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "tuner.cli", *COLLECT, "--workers", "2", "-o", str(out)],
        env=H.clean_env(JAX_PLATFORMS="cpu"),
        capture_output=True,
        text=True,
        timeout=JOB_TIMEOUT_S,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return read_records(out)


@pytest.mark.multiprocess
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_two_ranks_write_the_records_of_two_local_workers(launcher, local_records, tmp_path):
    """`LAUNCHER ddltune collect ...` with nothing else set: num_ranks/ranks_per_node from the job."""
    assert "JAX_COORDINATOR_ADDRESS" not in launcher.env
    out = tmp_path / "job.jsonl"
    res = launcher.run(tmp_path, ["-o", str(out)])
    assert res.returncode == 0, res.output[-3000:]
    recs = read_records(out)  # valid schema-v1 lines
    assert sorted(map(_what, recs)) == sorted(map(_what, local_records))
    assert sorted(map(_what, recs)) == [("all_reduce", s, 2, 2) for s in SIZES]
    assert all(r["wrong"] == 0 and r["dtype"] == "float32" for r in recs)
    assert {r["num_hosts"] for r in recs} == {r["num_hosts"] for r in local_records} == {1}
    assert "# wrote 4 records" in res.output  # rank 0's summary, once
    assert res.output.count("# wrote ") == 1


@pytest.mark.multiprocess
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_crashing_rank_ends_the_job_and_resume_completes(launcher, tmp_path):
    out = tmp_path / "job.jsonl"
    timeout_s = 20
    args = ["-o", str(out), "--timeout-s", str(timeout_s)]
    res = launcher.run(tmp_path, args, fault="exit:1@2")  # rank 1 exits at its 3rd point
    assert res.returncode not in (0, None), res.output[-3000:]
    assert "injected fault: rank 1 exits at point 2" in res.output
    if launcher.name == "srun":  # what each launcher adds about the failed rank
        assert "task 1: Exited with exit code 17" in res.output
    elif launcher.name == "openmpi":
        assert "Exit code:    17" in res.output and res.returncode == 17
    # MPICH: Hydra stops the job silently (rank 1 closed PMI without finalize);
    # it exited 17 each time measured, which is not asserted.
    # The launcher, not the peers' watchdogs (after --timeout-s), stopped the others.
    assert "saw no progress" not in res.output
    # From the fault to the launcher's exit: the launcher ends the job, before the peers'
    # watchdogs would (timeout_s after their last progress).
    assert res.after_mark_s is not None and res.after_mark_s < timeout_s, res.after_mark_s
    first = read_records(out)  # what rank 0 wrote before it was stopped: valid
    assert 1 <= len(first) <= 2
    assert [r["message_bytes"] for r in first] == SIZES[: len(first)]
    again = launcher.run(tmp_path, [*args, "--resume"])
    assert again.returncode == 0, again.output[-3000:]
    recs = read_records(out)
    assert [r["message_bytes"] for r in recs[: len(first)]] == SIZES[: len(first)]
    assert sorted(r["message_bytes"] for r in recs) == SIZES
    assert len({record_key(r) for r in recs}) == 4


@pytest.mark.multiprocess
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_hung_rank_ends_the_job_within_the_timeout(launcher, tmp_path):
    out = tmp_path / "job.jsonl"
    timeout_s = 5  # the points take well under a second each (8 s cost the suite 9 s more)
    args = ["-o", str(out), "--timeout-s", str(timeout_s)]
    res = launcher.run(tmp_path, args, fault="hang:1@1")  # rank 1 sleeps at its 2nd point
    assert res.returncode not in (0, None), res.output[-3000:]
    assert "injected fault: rank 1 hangs at point 1" in res.output
    # The ranks' watchdogs name themselves, how long and the point they waited at.
    assert f"saw no progress for {timeout_s} s while measuring all_reduce 4 KiB" in res.output
    assert "(point 2/4)" in res.output
    # From the hang to the launcher's exit: the watchdog's timeout, and a few seconds to stop
    # (the mark is seen up to 0.2 s late; the last progress came just before the hang).
    assert res.after_mark_s is not None, res.output[-3000:]
    assert timeout_s - 1.0 <= res.after_mark_s <= timeout_s + 8, res.after_mark_s
    assert [r["message_bytes"] for r in read_records(out)] == [1024]
    again = launcher.run(tmp_path, [*args, "--resume"])
    assert again.returncode == 0, again.output[-3000:]
    assert sorted(r["message_bytes"] for r in read_records(out)) == SIZES


# --------------------------------------------------------------------------- across emulated nodes

EMULATED_NODES = 4
EMULATED_SPEC = f"{EMULATED_NODES}x1@200mbit"


def _netns_names() -> set[str]:
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in listed.splitlines() if line.strip()}


@pytest.fixture(scope="module")
def emulated_slurm():
    """SLURM over 4 emulated nodes (one slurmd in each node's namespaces), torn down after."""
    why = H.EmulatedSlurmCluster.unavailable()
    if why:
        pytest.skip(why)
    yield from _up_and_down(H.EmulatedSlurmCluster(EMULATED_SPEC))


@pytest.fixture(scope="module")
def emulated_nodes(request):
    """4 emulated nodes for mpirun/mpiexec (an ssh stand-in enters them), torn down after:
    the emulated SLURM's where it runs (one emulated cluster per process), else their own."""
    if H.EmulatedSlurmCluster.unavailable() is None:
        yield request.getfixturevalue("emulated_slurm")
        return
    why = H.EmulatedNodes.unavailable()
    if why:
        pytest.skip(why)
    yield from _up_and_down(H.EmulatedNodes(EMULATED_SPEC))


class EmulatedLauncher:
    """One launcher across the emulated nodes: how it is started, what it says of a failure."""

    def __init__(self, name, nodes, start, env, jobs_left=None):
        self.name, self.nodes, self.start, self.env = name, nodes, start, env
        self.jobs_left = jobs_left

    def run(self, tmp_path, argv, *, per_node=2, fault=None, timeout_s=JOB_TIMEOUT_S):
        env = dict(self.env, JAX_PLATFORMS="cpu", PYTHONUNBUFFERED="1")
        if fault:
            env["DDLTUNE_COLLECT_FAULT"] = fault
        mark = "injected fault:" if fault else None
        cmd = [*self.start(EMULATED_NODES, per_node), *argv]
        res = H.run_job(cmd, env, cwd=tmp_path, timeout_s=timeout_s, mark=mark)
        assert res.returncode is not None, f"the job did not end: {res.output[-3000:]}"
        assert res.survivors == [], f"the job left {res.survivors} running"
        if self.jobs_left is not None:
            assert self.jobs_left() == "", "SLURM still lists the job"
        return res


@pytest.fixture(scope="module", params=["srun", "openmpi", "mpich"])
def emulated_launcher(request):
    if request.param == "srun":
        c = request.getfixturevalue("emulated_slurm")
        return EmulatedLauncher("srun", c, c.srun, c.env, c.jobs_left)
    argv, version = (H.find_openmpi if request.param == "openmpi" else H.find_mpich)()
    if argv is None:
        pytest.skip(version)
    if request.param == "openmpi" and H.openmpi_major(version) >= 5:
        pytest.skip(f"{version}: PRRTE sets no OMPI_MCA_orte_hnp_uri (coordinator)")
    c = request.getfixturevalue("emulated_nodes")
    start = c.openmpi if request.param == "openmpi" else c.mpich
    return EmulatedLauncher(
        request.param, c, lambda nodes, per, s=start, p=argv[0]: s(p, nodes, per), H.clean_env()
    )


#: Each rank's rank, host name and local rank, as each launcher names them.
_WHO = {
    "srun": 'echo "$SLURM_PROCID $(hostname) $SLURM_LOCALID"',
    "openmpi": 'echo "$OMPI_COMM_WORLD_RANK $(hostname) $OMPI_COMM_WORLD_LOCAL_RANK"',
    "mpich": 'echo "$PMI_RANK $(hostname) $MPI_LOCALRANKID"',
}


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_emulated_launcher_places_two_ranks_on_each_node_under_its_own_name(
    emulated_launcher, tmp_path
):
    """The host-to-rank mapping ddltune's records assume (block placement: ranks 2k and
    2k + 1 on node k), under each launcher, from what the ranks themselves see."""
    la = emulated_launcher
    res = la.run(tmp_path, ["sh", "-c", _WHO[la.name]], timeout_s=60)
    assert res.returncode == 0, res.output[-3000:]
    rows = sorted(
        (int(r), host, int(local))
        for r, host, local in (
            line.split() for line in res.output.splitlines() if line[:1].isdigit()
        )
    )
    hosts = la.nodes.hostnames
    assert rows == [(r, hosts[r // 2], r % 2) for r in range(2 * EMULATED_NODES)], res.output


def _check_eight_ranks_two_per_node(recs: list[dict]) -> None:
    """What `LAUNCHER ddltune collect` across 4 emulated nodes × 2 records: the ranks
    found rank 0's node by name, gloo bound each node's NIC, and the records say 8
    ranks, 2 per node."""
    # the whole job, and within each node with every node at once (a hierarchical
    # exchange's intra-node phases), checked for correct results like the rest
    # and the hierarchical all-reduce (reduce_scatter in the node, psum across, all_gather)
    assert sorted(map(_what, recs)) == sorted(
        [("all_reduce", s, 8, 2) for s in SIZES] * 2 + [("all_reduce", s, 2, 2) for s in SIZES]
    )
    assert all(r["wrong"] == 0 for r in recs)
    assert sorted(r["message_bytes"] for r in recs if r.get("algorithm") == "hierarchical") == SIZES
    whole = [r for r in recs if r["num_ranks"] == 8]
    within = [r for r in recs if r["num_ranks"] == 2]
    assert {r["num_hosts"] for r in whole} == {EMULATED_NODES}  # four host names
    assert {(r["num_hosts"], r["nodes_at_once"]) for r in within} == {(1, EMULATED_NODES)}
    # all 8 ranks share this machine's cores (one kernel boot id under four host names)
    assert {r["ranks_per_machine"] for r in recs} == {8}


def _names_the_failure(name: str, output: str, node) -> bool:
    """Whether the job's output names the rank killed (rank 3, MPICH: a rank of its node) and
    its ``node``.

    srun names the node and task ("srun: error: HOST: task 3: Killed"); Open MPI 4.1
    the rank and node ("… noticed that process rank 3 with PID … on node HOST exited on
    signal 9"); MPICH's Hydra the process id and node ("PID … RUNNING AT HOST"), which
    rank 0's "# ranks per host" line at the start ties to a rank of that node: rank 3,
    or its node-mate rank 2 when Hydra's proxy has already killed it in its clean-up
    (its report then names the first bad process of its list: seen once in CI,
    2026-12-06, "PID 24072 RUNNING AT …n1", rank 2's, exit code 9).
    """
    host = re.escape(node.hostname)
    if name == "srun":
        return f"srun: error: {node.hostname}: task 3: Killed" in output
    if name == "openmpi":
        return (
            re.search(rf"process rank 3 with PID \d+ on node {host} exited on signal 9", output)
            is not None
        )
    m = re.search(rf"PID (\d+) RUNNING AT {host}\b", output)
    pids = re.search(rf"# ranks per host: .*{host}: 2 \(pid (\d+)\), 3 \(pid (\d+)\)", output)
    return m is not None and pids is not None and m.group(1) in pids.groups()


@pytest.mark.multiprocess
@pytest.mark.slow
@pytest.mark.timeout(400)
def test_emulated_launcher_names_the_node_and_rank_that_died_and_resume_completes(
    emulated_launcher, tmp_path
):
    la = emulated_launcher
    out = tmp_path / "m.jsonl"
    timeout_s = 30
    argv = [sys.executable, "-m", "tuner.cli", *COLLECT, "-o", str(out), "--timeout-s", "30"]
    res = la.run(tmp_path, argv, fault="kill:3@2", timeout_s=240)  # node 1's second rank
    assert res.returncode not in (0, None), res.output[-3000:]
    assert "injected fault: rank 3 is killed at point 2" in res.output
    assert _names_the_failure(la.name, res.output, la.nodes.cluster.nodes[1]), res.output[-3000:]
    # every launcher ends the job itself, before the peers' watchdogs (timeout_s)
    assert res.after_mark_s is not None and res.after_mark_s < timeout_s, res.after_mark_s
    first = read_records(out)
    assert [r["message_bytes"] for r in first] == SIZES[: len(first)]
    again = la.run(tmp_path, [*argv, "--resume"], timeout_s=240)
    assert again.returncode == 0, again.output[-3000:]
    # the whole job's all_reduce, within each node at once, and the hierarchical one: the
    # records of a clean `LAUNCHER ddltune collect` across the nodes (that test's own job
    # took 13 s a launcher; the resumed one is such a job)
    _check_eight_ranks_two_per_node(read_records(out))


# --------------------------------------------------------------------------- MPICH's PMI for real


@pytest.fixture(scope="module")
def mpiexec():
    argv, version = H.find_mpich()
    if argv is None:
        pytest.skip(version)
    return argv[0]


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_hydra_ranks_agree_on_one_coordinator_address(mpiexec, tmp_path):
    code = (
        "import os\n"
        "from launch._pmi import exchange_coordinator\n"
        "r = os.environ['PMI_RANK']\n"
        "line = f'{r} {exchange_coordinator(int(r))}\\n'.encode()\n"
        "os.write(1, line)  # one write per line: the ranks' lines never interleave\n"
    )
    res = H.run_job(
        [mpiexec, "-n", "3", sys.executable, "-c", code], H.clean_env(), cwd=tmp_path, timeout_s=60
    )
    assert res.returncode == 0, res.output
    lines = sorted(ln.split() for ln in res.output.splitlines() if ln[:1].isdigit())
    assert [ln[0] for ln in lines] == ["0", "1", "2"]
    assert len({ln[1] for ln in lines}) == 1
    host, port = lines[0][1].rsplit(":", 1)
    assert host and port.isdigit()
    assert res.survivors == []


@pytest.mark.multiprocess
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_hydra_pmi_port_model_collects_two_rank_records(mpiexec, tmp_path):
    """`mpiexec -pmi-port` sets no PMI_RANK/PMI_SIZE: the PMI server tells rank and size."""
    out = tmp_path / "job.jsonl"
    launcher = Launcher("mpich", [mpiexec, "-pmi-port", "-n", "2"], H.clean_env(), "")
    res = launcher.run(tmp_path, ["-o", str(out)])
    assert res.returncode == 0, res.output[-3000:]
    assert sorted(map(_what, read_records(out))) == [("all_reduce", s, 2, 2) for s in SIZES]


def test_slurm_fixture_skips_with_a_reason_without_its_packages(monkeypatch):
    monkeypatch.setattr(H.shutil, "which", lambda name: None)
    assert "SLURM not installed" in H.SlurmCluster.unavailable()
    assert H.find_openmpi()[0] is None and "openmpi-bin" in H.find_openmpi()[1]
    assert H.find_mpich()[0] is None and "mpich" in H.find_mpich()[1]


def test_openmpi_major_version_is_read_from_mpirun_version():
    assert H.openmpi_major("mpirun.openmpi (OpenRTE) 4.1.4") == 4
    assert H.openmpi_major("mpirun (Open MPI) 5.0.3") == 5
    assert H.openmpi_major("") == 0


def test_the_silent_ranks_are_named_first_one_first():
    """describe_silent: the ranks silent longest (within the beats' 1.5 s) stopped first,
    the peers that failed after them follow; no service, no silent rank, each said."""
    from launch import describe_silent

    assert (
        describe_silent(None) == "rank 0's coordination service does not answer (rank 0 stopped?)"
    )
    assert describe_silent([]) == "every rank still beats (one of them is stuck)"
    got = describe_silent([(1, "n0", 28.2), (2, "n1", 30.6), (3, "n1", 31.0), (4, "n2", 27.9)])
    assert got == "rank 2 on n1 and rank 3 on n1 stopped first, 31 s ago; silent since: ranks 1, 4"
    assert describe_silent([(3, "n1", 4.2)]) == "rank 3 on n1 stopped first, 4 s ago"
