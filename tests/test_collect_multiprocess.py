"""ddltune collect and its launcher with real worker processes joined by jax.distributed.

Every test is bounded by a timeout and checks, by PID, that no worker survives.
Small sizes and tiny time budgets: these test logic, not speed.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import calibration._collect as collect_module
from calibration import (
    COLLECT_PATTERNS,
    CollectError,
    collect,
    read_records,
    record_key,
)
from launch import LaunchError, launch_local
from tuner.cli import main
from tuner.cli._collect import format_tables

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow, pytest.mark.timeout(180)]

FAST = dict(budget_s=0.02, iters=2, warmup_iters=1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead but not yet reaped
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture
def spawned(monkeypatch):
    """Record the PID of every worker collect() starts; afterwards, all must be gone."""
    pids: list[int] = []
    real = collect_module.launch_local

    def recording(*args, **kwargs):
        return real(*args, on_spawn=lambda rank, pid: pids.append(pid), **kwargs)

    monkeypatch.setattr(collect_module, "launch_local", recording)
    monkeypatch.delenv("DDLTUNE_COLLECT_FAULT", raising=False)
    yield pids
    assert pids, "no worker was started"
    assert [p for p in pids if _alive(p)] == []


def test_cli_two_workers_end_to_end(tmp_path, spawned, capsys):
    out = tmp_path / "m.jsonl"
    argv = [
        "collect",
        "--workers",
        "2",
        "--max-bytes",
        "4K",
        "--budget-s",
        "0.02",
        "--iters",
        "2",
        "--warmup-iters",
        "1",
        "--matmul-sizes",
        "32",
        "-o",
        str(out),
        "--json",
        "--no-progress",
    ]
    assert main(argv) == 0, capsys.readouterr().err
    doc = json.loads(capsys.readouterr().out)
    recs = read_records(out)  # validates every line against schema v1
    assert doc["written"] == len(recs) and doc["wrong"] == 0 and doc["skipped"] == 0
    coll = [r for r in recs if r["kind"] == "collective"]
    assert {(r["collective"], r["message_bytes"]) for r in coll} == {
        (c, s) for c in COLLECT_PATTERNS for s in (1024, 4096)
    }
    for r in coll:
        assert (r["num_ranks"], r["ranks_per_node"], r["wrong"]) == (2, 2, 0)
        assert r["backend"] == "cpu" and len(r["samples_s"]) >= 2
        assert "host_fingerprint" in r
        host = socket.gethostname()
        assert len(host) < 4 or host not in json.dumps(r)  # no host names in files
    comp = [r for r in recs if r["kind"] == "compute"]
    assert sorted(r["num_ranks"] for r in comp if r["op"] == "matmul") == [1, 2]
    assert {r["op"] for r in comp} == {"matmul", "forward", "backward"}
    assert all(r["num_ranks"] == 2 for r in comp if r["op"] != "matmul")
    assert len({record_key(r) for r in recs}) == len(recs)
    table = format_tables(doc["rows"])
    assert "busbw(GB/s)" in table and "#wrong" in table and "ps_push" in table


def test_crash_names_rank_and_point_then_resume_completes(tmp_path, spawned, monkeypatch):
    out = tmp_path / "m.jsonl"
    kw = dict(
        workers=[2],
        collectives=["all_reduce", "sendrecv"],
        max_bytes=4096,
        suite=["collectives"],
        timeout_s=20,
        **FAST,
    )
    monkeypatch.setenv("DDLTUNE_COLLECT_FAULT", "exit:1@2")  # rank 1 exits at its 3rd point
    t0 = time.monotonic()
    with pytest.raises(CollectError) as err:
        collect(out, **kw)
    assert time.monotonic() - t0 < 60
    msg = str(err.value)
    assert err.value.rank == 1 and "rank 1 exited with status 17" in msg
    assert "sendrecv 1 KiB" in msg and "point 3/4" in msg and "--resume" in msg
    first = read_records(out)  # what was written is intact and valid
    assert [(r["collective"], r["message_bytes"]) for r in first] == [
        ("all_reduce", 1024),
        ("all_reduce", 4096),
    ]
    monkeypatch.delenv("DDLTUNE_COLLECT_FAULT")
    res = collect(out, resume=True, **kw)
    assert (res.written, res.skipped) == (2, 2)
    recs = read_records(out)
    assert len(recs) == 4 and len({record_key(r) for r in recs}) == 4


def test_hung_worker_stops_run_within_timeout(tmp_path, spawned, monkeypatch):
    out = tmp_path / "m.jsonl"
    monkeypatch.setenv("DDLTUNE_COLLECT_FAULT", "hang:1@1")
    # The fault comes right after the first record is written (rank 1 hangs at its
    # second point): time from then, as the file sees it, polled every 50 ms.
    first = []
    done = threading.Event()

    def watch():
        while not done.is_set() and not first:
            if out.exists() and out.stat().st_size > 0:
                first.append(time.monotonic())
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        with pytest.raises(CollectError) as err:
            collect(
                out,
                workers=[2],
                collectives=["all_reduce"],
                max_bytes=4096,
                suite=["collectives"],
                timeout_s=6,
                **FAST,
            )
        ended = time.monotonic()
    finally:
        done.set()
        watcher.join(5)
    msg = str(err.value)
    assert err.value.rank == 1 and "stopped responding" in msg and "all_reduce 4 KiB" in msg
    assert first, "the first record was never written"
    # the 6 s timeout, then a few seconds to stop the workers
    assert 6 - 1 <= ended - first[0] <= 6 + 8, ended - first[0]
    assert len(read_records(out)) == 1


def test_stopped_worker_is_blamed_not_its_waiting_peer(tmp_path, spawned, monkeypatch):
    # SIGSTOP on rank 1 once the first record arrives: rank 0 then waits for it
    # inside a collective, as silent on the wire as the stopped rank. Rank 0's
    # "waiting" beats (launch.waiting) tell them apart: the run names rank 1.
    out = tmp_path / "m.jsonl"
    real = collect_module.launch_local

    def stop_rank1_when_it_measures(*args, **kwargs):
        user_on_message = kwargs.get("on_message")
        stopped = []

        def on_message(rank, msg):
            if not stopped and len(spawned) == 2:  # the first record: both ranks measure
                os.kill(spawned[1], signal.SIGSTOP)
                stopped.append(spawned[1])
            if user_on_message is not None:
                user_on_message(rank, msg)

        kwargs["on_message"] = on_message
        try:
            return real(*args, **kwargs)
        finally:
            for pid in stopped:  # let the launcher's SIGTERM/SIGKILL reach it
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)

    monkeypatch.setattr(collect_module, "launch_local", stop_rank1_when_it_measures)
    with pytest.raises(CollectError) as err:
        collect(
            out,
            workers=[2],
            collectives=["all_reduce"],
            max_bytes=64 * 1024,
            suite=["collectives"],
            timeout_s=6,
            **FAST,
        )
    assert err.value.rank == 1 and "stopped responding" in str(err.value)


# --------------------------------------------------------------------------- launcher

_WORKER = textwrap.dedent(
    """
    import os, sys, time
    from launch import initialize_worker, send_message
    def _policy(tid):  # a thread may end between the listing and the query
        try:
            return os.sched_getscheduler(int(tid))
        except ProcessLookupError:
            return None
    mode = sys.argv[1]
    info = initialize_worker()
    if mode == "affinity":
        send_message({"type": "msg", "where": "affinity", "rank": info.process_id,
                      "cores": os.environ.get("DDLTUNE_CPU_CORES"),
                      "affinity": sorted(os.sched_getaffinity(0)),
                      "xla_flags": os.environ.get("XLA_FLAGS", ""),
                      "batch_threads": sum(_policy(t) == os.SCHED_BATCH
                                           for t in os.listdir("/proc/self/task"))})
        sys.exit(0)
    send_message({"type": "msg", "where": "step 1", "rank": info.process_id,
                  "n": info.num_processes})
    if mode == "crash" and info.process_id == 1:
        sys.exit(7)
    if mode == "hang":
        time.sleep(1000)
    send_message({"type": "msg", "where": "step 2", "rank": info.process_id})
    """
)


@pytest.fixture
def worker_env(tmp_path):
    (tmp_path / "ddltune_test_worker.py").write_text(_WORKER)
    path = os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    return {"PYTHONPATH": path}


def test_launcher_relays_messages_and_reports_a_crash(worker_env):
    pids, msgs = [], []
    res = launch_local(
        "ddltune_test_worker",
        ["ok"],
        2,
        timeout_s=30,
        env=worker_env,
        on_message=lambda r, m: msgs.append((r, m["where"], m.get("n"))),
        on_spawn=lambda r, pid: pids.append(pid),
    )
    assert res.attempts == 1 and res.coordinator_address.startswith("127.0.0.1:")
    assert sorted(msgs) == [
        (0, "step 1", 2),
        (0, "step 2", None),
        (1, "step 1", 2),
        (1, "step 2", None),
    ]
    with pytest.raises(LaunchError) as err:
        launch_local(
            "ddltune_test_worker",
            ["crash"],
            2,
            timeout_s=30,
            env=worker_env,
            on_spawn=lambda r, pid: pids.append(pid),
        )
    e = err.value
    assert (e.rank, e.returncode, e.where, e.reason) == (1, 7, "step 1", "exited")
    assert "rank 1 exited with status 7 while step 1" in str(e)
    assert len(pids) == 4 and [p for p in pids if _alive(p)] == []


def _affinities(worker_env, n: int, bind) -> dict:
    """Each of ``n`` local ranks' message: its DDLTUNE_CPU_CORES, affinity, SCHED_BATCH threads."""
    msgs = {}
    launch_local(
        "ddltune_test_worker",
        ["affinity"],
        n,
        timeout_s=60,
        env=worker_env,
        bind_cores=bind,
        on_message=lambda r, m: msgs.__setitem__(r, m),
    )
    assert sorted(msgs) == list(range(n))
    return msgs


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="Linux CPU affinity")
@pytest.mark.parametrize("bind", [True, False])
def test_launcher_binds_each_rank_while_its_backend_starts_then_releases(worker_env, bind):
    # More ranks than cores: each bound to core r mod cores while the backend
    # starts (one compute thread), then free to run anywhere (what the parent may use).
    cores = sorted(os.sched_getaffinity(0))
    for r, m in _affinities(worker_env, len(cores) + 1, bind).items():
        assert m["cores"] == (str(cores[r % len(cores)]) if bind else None)
        assert m["affinity"] == cores
        # a backend started on one core computes on its calling thread (no spinning pool)
        assert ("--xla_cpu_multi_thread_eigen=false" in m["xla_flags"]) == (bind or len(cores) == 1)
        # gloo's TCP loop thread, and only it, never preempts on wakeup
        # (launch.gloo_io_threads_batch: else a 1 KiB psum waits a 4 ms tick).
        assert m["batch_threads"] == 1


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="Linux CPU affinity")
def test_ranks_with_a_core_each_keep_it(worker_env):
    # No more ranks than cores (2 at most here): each keeps its own core for good,
    # its threads stay there (launch.keeps_binding).
    cores = sorted(os.sched_getaffinity(0))
    for r, m in _affinities(worker_env, min(2, len(cores)), True).items():
        assert m["cores"] == str(cores[r]) and m["affinity"] == [cores[r]]
        assert m["batch_threads"] == 1
        assert m["xla_flags"].split().count("--xla_cpu_multi_thread_eigen=false") == 1


def test_a_backend_on_one_core_computes_on_its_calling_thread(monkeypatch):
    """launch.compute_on_calling_thread: one CPU adds XLA's flag (once, after the user's
    other flags); several CPUs, or the user's own setting of it, change nothing."""
    from launch import compute_on_calling_thread

    monkeypatch.setenv("XLA_FLAGS", "--xla_dump_to=/tmp/x")
    assert compute_on_calling_thread(1)
    assert os.environ["XLA_FLAGS"] == "--xla_dump_to=/tmp/x --xla_cpu_multi_thread_eigen=false"
    assert not compute_on_calling_thread(1)  # already there: not twice
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=true")
    assert not compute_on_calling_thread(1)  # the user's choice stays
    assert os.environ["XLA_FLAGS"] == "--xla_cpu_multi_thread_eigen=true"
    monkeypatch.delenv("XLA_FLAGS")
    assert not compute_on_calling_thread(2) and "XLA_FLAGS" not in os.environ
    assert compute_on_calling_thread(1)
    assert os.environ["XLA_FLAGS"] == "--xla_cpu_multi_thread_eigen=false"


def test_keeps_binding_only_where_no_core_is_shared():
    from launch import keeps_binding

    assert keeps_binding([[0], [1]]) and keeps_binding([[0, 1], [2, 3]])
    assert not keeps_binding([[0], [1], [0]])  # 3 ranks on 2 cores: released
    assert not keeps_binding([[0, 1], [1, 2]])
    assert not keeps_binding(None) and not keeps_binding([])


def test_core_binding_round_robin_and_auto(monkeypatch):
    from launch import _launch, core_binding

    if not hasattr(os, "sched_getaffinity"):
        assert core_binding(2, True) is None
        return
    cores = sorted(os.sched_getaffinity(0))
    want = [[cores[r % len(cores)]] for r in range(len(cores) + 1)]
    assert core_binding(len(cores) + 1, True) == want
    assert core_binding(2, False) is None
    monkeypatch.setattr(_launch, "_accelerator_present", lambda: True)
    monkeypatch.delenv("JAX_PLATFORMS", raising=False)
    assert core_binding(2, "auto") is None  # GPU/TPU workers: leave them alone
    assert core_binding(2, "auto", {"JAX_PLATFORMS": "cpu"}) == want[:2]
    monkeypatch.setattr(_launch, "_accelerator_present", lambda: False)
    assert core_binding(2, "auto") == want[:2]
    with pytest.raises(ValueError, match="bind_cores"):
        core_binding(2, "yes")


def test_launcher_retries_a_taken_port(worker_env):
    pids = []
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        taken = s.getsockname()[1]
        res = launch_local(
            "ddltune_test_worker",
            ["ok"],
            2,
            timeout_s=30,
            env=worker_env,
            port=taken,
            on_spawn=lambda r, pid: pids.append(pid),
        )
    assert res.attempts == 2 and not res.coordinator_address.endswith(f":{taken}")
    assert [p for p in pids if _alive(p)] == []


def test_launcher_names_a_worker_that_never_starts(worker_env):
    pids = []
    t0 = time.monotonic()
    with pytest.raises(LaunchError) as err:
        launch_local(
            "ddltune_test_worker",
            ["ok"],
            2,
            timeout_s=30,
            start_timeout_s=8,
            env=dict(worker_env, DDLTUNE_LAUNCH_FAULT="nostart:1"),
            on_spawn=lambda r, pid: pids.append(pid),
        )
    assert (err.value.rank, err.value.reason) == (1, "no-start")
    assert "rank 1 did not start" in str(err.value)
    assert time.monotonic() - t0 < 8 + 10
    assert [p for p in pids if _alive(p)] == []


def test_ctrl_c_stops_every_worker(worker_env, tmp_path):
    script = textwrap.dedent(
        """
        import sys
        from launch import launch_local
        def spawned(rank, pid):
            print("PID", pid, flush=True)
        launch_local("ddltune_test_worker", ["hang"], 2, timeout_s=60, on_spawn=spawned,
                     on_message=lambda r, m: print("MSG", r, flush=True))
        """
    )
    env = dict(os.environ, **worker_env)
    p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env)
    pids, msgs = [], 0
    try:
        deadline = time.monotonic() + 60
        while msgs < 2 and time.monotonic() < deadline:  # both workers are up and hanging
            line = p.stdout.readline()
            if line.startswith("PID"):
                pids.append(int(line.split()[1]))
            elif line.startswith("MSG"):
                msgs += 1
        assert len(pids) == 2 and msgs == 2
        p.send_signal(signal.SIGINT)
        assert p.wait(timeout=30) != 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert [q for q in pids if _alive(q)] == []


def test_auto_launcher_joins_an_mpich_style_job(tmp_path):
    """Two `ddltune collect` processes with MPICH's PMI_* variables form one job; rank 0 writes."""
    out = tmp_path / "job.jsonl"
    port = socket.socket()
    port.bind(("127.0.0.1", 0))
    address = f"127.0.0.1:{port.getsockname()[1]}"
    port.close()
    argv = [
        sys.executable,
        "-c",
        "import sys; from tuner.cli import main; sys.exit(main())",
        "collect",
        "--coordinator",
        address,
        "--max-bytes",
        "1K",
        "--collectives",
        "all_reduce,ps_push",
        "--suite",
        "collectives",
        "--budget-s",
        "0.02",
        "--iters",
        "2",
        "--timeout-s",
        "60",
        "-o",
        str(out),
        "--json",
    ]
    procs = []
    for rank in (0, 1):
        env = dict(os.environ, PMI_RANK=str(rank), PMI_SIZE="2", MPI_LOCALRANKID=str(rank))
        env.pop("DDLTUNE_COLLECT_FAULT", None)
        procs.append(
            subprocess.Popen(
                argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        )
    try:
        outs = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert [p.returncode for p in procs] == [0, 0], outs[0][1][-2000:] + outs[1][1][-2000:]
    doc = json.loads(outs[0][0])  # rank 0: exactly one JSON document on stdout
    assert doc["written"] == 2 and doc["launches"][0]["num_ranks"] == 2
    assert outs[1][0] == ""  # other ranks print nothing
    recs = read_records(out)
    assert {(r["collective"], r["num_ranks"], r["ranks_per_node"]) for r in recs} == {
        ("all_reduce", 2, 2),
        ("ps_push", 2, 2),
    }
