"""The emulated cluster (launch.EmulatedCluster, ``ddltune lab``, ``collect --emulate``).

Tests that build namespaces need root (CAP_NET_ADMIN + CAP_SYS_ADMIN) and
iproute2; without them they skip with the reason the library gives. Each one
checks afterwards that no namespace, hosts folder or process of it is left.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import launch._emulate as emu
from launch import (
    EmulatedCluster,
    EmulationError,
    EmulationUnavailable,
    LaunchError,
    emulation_unavailable_reason,
    launch_local,
    parse_emulate,
)

REASON = emulation_unavailable_reason()
needs_net = pytest.mark.skipif(REASON is not None, reason=REASON or "")
ROOT = Path(__file__).resolve().parents[1]


def _netns() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {ln.split()[0] for ln in out.splitlines() if ln.strip()}


def _host_links() -> set[str]:
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    return {ln.split(":")[1].strip().split("@")[0] for ln in out.splitlines() if ln.strip()}


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie child of ours counts as gone once reaped by its parent; check state.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except OSError:
        return True


def _skip_if_stolen(p: subprocess.Popen, err: str) -> None:
    """Skip when the CLI's self-check failed because the hypervisor took the CPUs
    (its message names the steal share); any other failure is left to the test."""
    if p.returncode != 0 and "the hypervisor took" in err:
        pytest.skip(err.strip().splitlines()[-1][:300])


@contextlib.contextmanager
def _unless_stolen():
    """Turn a failed timing assertion into a skip when the hypervisor took at least
    ``STOLEN_FRACTION`` of the CPUs' time meanwhile ('steal'; the shapers then stall:
    a 50 Mbit/s link fell to 76% of its rate at 9% steal here); other failures stand."""
    before = emu._cpu_times()
    try:
        yield
    except AssertionError as e:
        steal = emu._steal_fraction(before, emu._cpu_times())
        if steal is not None and steal >= emu.STOLEN_FRACTION:
            first = str(e).splitlines()[0][:200]
            pytest.skip(f"hypervisor steal {steal:.0%} during a timing check: {first}")
        raise


def _assert_removed(pid: int) -> None:
    left = [n for n in _netns() if n.startswith(f"ddlt{pid}")]
    assert not left, f"namespaces left behind: {left}"
    etc = Path("/etc/netns")
    if etc.is_dir():
        assert not [p for p in etc.iterdir() if p.name.startswith(f"ddlt{pid}")]


def _env() -> dict:
    return dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu")


def _cli(args: list[str], timeout: float) -> tuple[subprocess.Popen, str, str]:
    """Run ``ddltune ARGS`` in a fresh process; (the finished process, stdout, stderr).

    A run past ``timeout`` is killed (and the communicate's TimeoutExpired raised);
    the process is returned for its PID, which names what it created.
    """
    p = subprocess.Popen(
        [sys.executable, "-m", "tuner.cli", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
    )  # fmt: skip
    try:
        out, err = p.communicate(timeout=timeout)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    return p, out, err


# --------------------------------------------------------------------------- spec


def test_parse_spec_units_and_errors():
    s = parse_emulate("4x1@200mbit")
    assert (s.nodes, s.ranks_per_node, s.num_ranks) == (4, 1, 4)
    assert s.rate_bits_per_s == 200e6
    assert parse_emulate("2x3@1.5gbit").rate_bits_per_s == 1.5e9
    assert parse_emulate("2X2@1500KBIT").rate_bits_per_s == 1.5e6  # tc is case-insensitive
    assert parse_emulate("2x1@1mbit").rate_bits_per_s == 1e6  # the slowest taken
    for bad, words in [
        ("4@200mbit", "NODESxRANKS@RATE"),
        ("2x1@200mbps", "unknown rate unit"),
        ("2x1@200MB", "unknown rate unit"),
        ("0x1@1mbit", "nodes"),
        ("2x0@1mbit", "ranks per node"),
        ("2x1@0.1bit", "rate"),
        ("2x1@200gbit", "rate"),
        # a new user's 1kbit: the self-check's connections timed out, a traceback shown
        ("2x1@1kbit", "between 1mbit and 100gbit"),
        ("2x1@999kbit", "between 1mbit and 100gbit"),
    ]:
        with pytest.raises(ValueError, match=words) as info:
            parse_emulate(bad, "--emulate")
        assert str(info.value).startswith("--emulate:"), str(info.value)


def test_bucket_depth_is_frames_and_checked():
    c = EmulatedCluster("2x1@200mbit")
    assert c.burst_bytes == 2 * 1514  # two full Ethernet frames (MTU 1500 + 14)
    assert EmulatedCluster("2x1@200mbit", mtu=9000).burst_bytes == 2 * 9014
    assert EmulatedCluster("2x1@200mbit", burst_frames=1).burst_bytes == 1514
    # a deeper bucket on request: 4 ms of 200 Mbit/s is 100 kB
    assert EmulatedCluster("2x1@200mbit", burst_s=0.004).burst_bytes == 100_000
    assert c.limit_bytes == 2 * 1514 + 1_250_000  # + 50 ms of the rate
    for bad in (0, 65, 2.0, True):
        with pytest.raises(ValueError, match="burst_frames must be an integer 1…64"):
            EmulatedCluster("2x1@200mbit", burst_frames=bad)
    with pytest.raises(ValueError, match="burst_s must be between 0 and 1 s"):
        EmulatedCluster("2x1@200mbit", burst_s=-1.0)


def test_wire_bytes_count_every_frame_header():
    # one segment carries 1448 payload bytes at MTU 1500 (1500 − 20 IP − 32 TCP)
    assert emu.wire_bytes(1440) == 1448 + 66  # 1440 + the 8-byte length: one full frame
    assert emu.wire_bytes(1441) == 1449 + 2 * 66  # one byte more: a second frame
    assert emu.wire_bytes(0) == 8 + 66
    assert emu.wire_bytes(1 << 20) == (1 << 20) + 8 + 66 * 725  # ceil(1048584 / 1448)
    assert emu.wire_bytes(8940, mtu=9000) == 8948 + 66
    with pytest.raises(ValueError):
        emu.wire_bytes(-1)


@needs_net
@pytest.mark.timeout(120)
def test_one_message_crosses_in_alpha_plus_s_over_r_at_every_size():
    """A NIC carries one message in α + S/R at every size. Here, median of 5 messages
    after an idle link, 1 KiB … 1 MiB over 50 Mbit/s (6.25 MB/s), α the time of 1 KiB
    (it fits in the bucket):

    * no message crosses faster than its wire bytes at the rate, less the 2-frame
      bucket: (W − 3028 B)/R — physics, whatever the machine's load;
    * from 64 KiB, where the wire time (≥ 10.8 ms) dwarfs the stack's jitter, the
      time is one α-β line within 15%; below, the α of a loaded 2-core machine
      jitters by ±50% and is not bounded. At 200 Mbit/s this VM carried 64–256 KiB
      single messages at 1.47–1.62× of α + S/R (3% steal): the bucket's refill
      every 121 µs waits on timers of a halted vCPU; a median-excess α had hidden it.

    The positive control: a 62.5 kB bucket (10 ms of the rate) lets a 64 KiB message
    through in a fraction of its wire time; the same bound catches it."""
    sizes = [1024, 4096, 16384, 65536, 262144, 1 << 20]
    rate = 50e6 / 8
    with _unless_stolen():
        with EmulatedCluster("2x1@50mbit") as c:
            burst = c.burst_bytes
            checks = c.size_check(sizes)
            ns = c.nodes[0].netns
        assert burst == 3028 and [x.message_bytes for x in checks] == sizes
        for x in checks:
            assert x.median_s >= (x.wire_bytes - burst) / rate, x
            if x.message_bytes >= 65536:
                assert 0.85 <= x.ratio <= 1.15, [round(y.ratio, 2) for y in checks]
        big = checks[-1]  # bandwidth-bound: the wire bytes at the rate
        assert big.median_s == pytest.approx(big.wire_bytes / rate, rel=0.15)
    with EmulatedCluster("2x1@50mbit", burst_s=0.01) as deep:
        loose = {x.message_bytes: x for x in deep.size_check(sizes)}
    m = loose[65536]
    assert m.median_s < 0.5 * (m.wire_bytes - burst) / rate, m
    assert ns not in _netns()


def test_permission_denied_is_one_line(monkeypatch):
    monkeypatch.setattr(emu, "_cap_effective", lambda: 0)
    monkeypatch.setattr(emu.shutil, "which", lambda name: f"/usr/sbin/{name}")
    reason = emulation_unavailable_reason()
    assert "\n" not in reason and reason.strip() == reason  # one line
    assert "needs CAP_NET_ADMIN and CAP_SYS_ADMIN" in reason  # both capabilities named
    assert "run as root" in reason and "--cap-add NET_ADMIN --cap-add SYS_ADMIN" in reason
    with pytest.raises(EmulationUnavailable) as info:
        with EmulatedCluster("2x1@100mbit"):
            pass
    assert str(info.value) == reason  # the same one line, nothing appended
    if shutil.which("ip"):
        assert not [n for n in _netns() if n.startswith(f"ddlt{os.getpid()}")]


def test_missing_tools_named(monkeypatch):
    monkeypatch.setattr(emu.shutil, "which", lambda name: None if name == "tc" else "/bin/x")
    reason = emulation_unavailable_reason()
    assert reason.startswith("an emulated cluster needs tc (iproute2, util-linux), not found")
    absent = {"tc", "unshare"}
    monkeypatch.setattr(emu.shutil, "which", lambda name: None if name in absent else "/bin/x")
    assert emulation_unavailable_reason().startswith("an emulated cluster needs tc, unshare (")
    monkeypatch.setattr(emu.shutil, "which", lambda name: "/bin/x")
    monkeypatch.setattr(emu, "_cap_effective", lambda: (1 << 12) | (1 << 21))
    assert emulation_unavailable_reason() is None  # all tools, both capabilities: no reason


def _cpu_clock(steal_per_check: list[float]):
    """A fake ``/proc/stat`` cpu line: each read after the first advances 1000 ticks,
    of which the next share in ``steal_per_check`` is steal (read twice per check)."""
    state = {"reads": 0, "t": [0] * 10}

    def read():
        k = state["reads"]
        state["reads"] += 1
        if k % 2 == 1:  # the read after a check
            steal = steal_per_check[min(k // 2, len(steal_per_check) - 1)]
            t = state["t"]
            t[7] += round(1000 * steal)
            t[0] += 1000 - round(1000 * steal)
        return list(state["t"])

    return read


def test_self_check_failure_names_the_rate_it_can(monkeypatch):
    c = EmulatedCluster("3x1@200mbit")
    c._active = True  # no namespaces: the transfer is simulated
    slow = [emu.LinkCheck(i, (i + 1) % 3, 10**7, 1.0, 12e6, 100e6) for i in range(3)]
    calls = []
    monkeypatch.setattr(c, "_transfer", lambda seconds: calls.append(seconds) or slow)
    monkeypatch.setattr(emu, "_cpu_times", _cpu_clock([0.0]))
    with pytest.raises(EmulationError) as info:
        c.self_check()
    msg = str(info.value)
    assert "50.0%" in msg and "80mbit" in msg and "--emulate 3x1@80mbit" in msg
    assert "cores cannot keep up" in msg and "3 attempts" in msg and len(calls) == 3
    assert c.check_steal_fraction == 0.0
    assert c.provenance()["goodput_bytes_per_s"] == 12e6
    c._active = False


def test_a_check_the_hypervisor_stalled_is_made_again_and_named(monkeypatch):
    # Steal of 20% in every check: none counts, so attempts + STOLEN_RETRIES checks are
    # made, and the message blames the host, with the figure, not this machine's cores.
    c = EmulatedCluster("2x1@50mbit")
    c._active = True
    slow = [emu.LinkCheck(0, 1, 10**6, 1.0, 3e6, 30e6), emu.LinkCheck(1, 0, 10**6, 1.0, 3e6, 30e6)]
    calls = []
    monkeypatch.setattr(c, "_transfer", lambda seconds: calls.append(seconds) or slow)
    monkeypatch.setattr(emu, "_cpu_times", _cpu_clock([0.2]))
    with pytest.raises(EmulationError) as info:
        c.self_check(attempts=2)
    msg = str(info.value)
    assert len(calls) == 2 + emu.STOLEN_RETRIES
    assert "hypervisor took 20%" in msg and "steal" in msg and "cores cannot" not in msg
    assert c.check_steal_fraction == pytest.approx(0.2)
    # stolen twice, then a quiet check at the rate: it passes on the third check
    ok = [
        emu.LinkCheck(0, 1, 10**6, 1.0, 5.9e6, 49.5e6),
        emu.LinkCheck(1, 0, 10**6, 1.0, 5.9e6, 49.8e6),
    ]
    seq = iter([slow, slow, ok])
    calls.clear()
    monkeypatch.setattr(c, "_transfer", lambda seconds: calls.append(seconds) or next(seq))
    monkeypatch.setattr(emu, "_cpu_times", _cpu_clock([0.2, 0.2, 0.0]))
    assert c.self_check(attempts=1) == ok and len(calls) == 3
    # a quiet failure counts: one attempt, one check
    calls.clear()
    monkeypatch.setattr(c, "_transfer", lambda seconds: calls.append(seconds) or slow)
    monkeypatch.setattr(emu, "_cpu_times", _cpu_clock([0.01]))
    with pytest.raises(EmulationError, match="cores cannot keep up"):
        c.self_check(attempts=1)
    assert len(calls) == 1
    c._active = False


def test_steal_share_and_counter_rate_closed_forms():
    # proc(5): user nice system idle iowait irq softirq steal guest guest_nice
    assert emu._steal_fraction([0] * 10, [600, 0, 100, 200, 0, 0, 0, 100, 50, 0]) == 0.1
    assert emu._steal_fraction(None, [1] * 10) is None
    assert emu._steal_fraction([5] * 10, [5] * 10) is None  # no time passed
    # A counter at 1 MB/s from t = 0.3 s to 1.3 s, sampled every 0.1 s; before it a
    # handshake's 160 B, after it the other flow's acknowledgements, 2 kB/s: the window
    # is the middle 90% of the bytes, so neither is counted as the transfer.
    samples = []
    for i in range(25):
        t = 0.05 + 0.1 * i
        b = 1000 + (160 if t > 0.1 else 0) + int(1e6 * min(max(t - 0.3, 0.0), 1.0))
        samples.append((t, b + int(2e3 * max(t - 1.3, 0.0))))
    final = samples[-1][1]
    assert emu._counter_rate(samples, final) == pytest.approx(1e6, rel=1e-3)
    assert emu._counter_rate(samples[:3], samples[2][1]) is None  # never moved much
    assert emu._counter_rate(samples, None) is None
    assert emu._counter_rate(samples[::9], final) is None  # one sample in the window


@pytest.mark.parametrize(
    ("spec", "cpus", "want", "per_cpu"),
    [
        ("2x1@100mbit", {0, 1}, [[0], [1]], 1),  # this machine: a core per node
        ("2x2@100mbit", {0, 1, 2, 3, 4, 5, 6, 7}, [[0, 1, 2, 3], [4, 5, 6, 7]], 1),
        ("3x1@100mbit", {2, 5, 7, 9}, [[2], [5], [7]], 1),  # the affinity's CPUs, not 0…
        ("4x1@100mbit", {0, 1}, [[0], [1], [0], [1]], 2),  # more nodes than cores: shared
    ],
)
def test_each_node_runs_on_its_own_cores_where_there_are_enough(
    monkeypatch, spec, cpus, want, per_cpu
):
    """Issue 22: nodes that share cores are not separate hosts (the two ranks' matmul
    records of a 2-node run differed by 27%). Each node's processes are pinned
    (taskset) to ⌊C/N⌋ CPUs of its own, or to CPU i mod C when N > C, and the records'
    provenance says how many CPUs a node has and how many nodes share one."""
    monkeypatch.setattr(emu.os, "sched_getaffinity", lambda pid: set(cpus))
    c = EmulatedCluster(spec)
    assert [c.node_cpus(i) for i in range(c.spec.nodes)] == want
    argv = c.wrap(1, ["python", "-m", "x"])
    i = argv.index("taskset")
    assert argv[i : i + 3] == ["taskset", "-c", ",".join(map(str, want[1]))]
    assert argv[i + 3 :] == ["python", "-m", "x"]
    prov = c.provenance()
    assert prov["cpus_per_node"] == len(want[0]) and prov["nodes_per_cpu"] == per_cpu
    assert prov["cpus"] == len(cpus)


# --------------------------------------------------------------------------- real namespaces


@needs_net
@pytest.mark.timeout(60)
def test_setup_and_teardown_leave_nothing():
    links_before = _host_links()
    with EmulatedCluster("2x2@100mbit") as c:
        names = _netns()
        assert {c.bridge_netns, *(n.netns for n in c.nodes)} <= names
        assert _host_links() == links_before  # nothing in the host's namespace
        for n in c.nodes:
            addr = subprocess.run(
                ["ip", "-n", n.netns, "-4", "-o", "addr", "show"], capture_output=True, text=True
            ).stdout
            assert f"{n.address}/24" in addr and "127.0.0.1" in addr  # NIC + loopback up
            assert n.address.startswith("198.18.")
            routes = subprocess.run(
                ["ip", "-n", n.netns, "route", "show"], capture_output=True, text=True
            ).stdout
            assert "default" not in routes
            hosts = (Path("/etc/netns") / n.netns / "hosts").read_text()
            assert re.search(rf"^{re.escape(n.address)}\s+{n.hostname}$", hosts, re.M)
        qd = c.qdiscs()
        assert len(qd) == 4  # both ends of both NICs
        assert all("tbf" in v and "rate 100Mbit" in v for v in qd.values())
        with pytest.raises(EmulationError, match="one at a time"):
            EmulatedCluster("3x1@1mbit").start()
        assert {c.bridge_netns, *(n.netns for n in c.nodes)} <= _netns()  # untouched
    _assert_removed(os.getpid())
    assert _host_links() == links_before


@needs_net
@pytest.mark.timeout(60)
def test_teardown_after_exception_and_rank_crash(tmp_path):
    with pytest.raises(ZeroDivisionError):
        with EmulatedCluster("2x1@100mbit"):
            1 / 0  # noqa: B018
    _assert_removed(os.getpid())
    pids = []
    with pytest.raises(LaunchError, match="rank"):
        with EmulatedCluster("2x1@100mbit") as c:
            # A rank that exits with status 2 at once (argparse error) stops the run.
            launch_local(
                "launch._netcheck",
                ["no-such-role"],
                2,
                timeout_s=20,
                emulate=c,
                on_spawn=lambda r, pid: pids.append(pid),
                env={"PYTHONPATH": str(ROOT)},
            )
    assert pids and all(_gone(p) for p in pids)
    _assert_removed(os.getpid())


_CHILD = textwrap.dedent(
    """
    import os, subprocess, sys, time
    from launch import EmulatedCluster
    with EmulatedCluster("2x1@100mbit") as c:
        p = subprocess.Popen(c.wrap(1, ["sleep", "600"]))
        print(os.getpid(), p.pid, flush=True)
        time.sleep(600)
    """
)


@needs_net
@pytest.mark.slow
@pytest.mark.timeout(90)
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_to_a_run_removes_everything(sig):
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD], stdout=subprocess.PIPE, text=True, env=_env()
    )
    try:
        pid, inner = map(int, child.stdout.readline().split())
        assert any(n.startswith(f"ddlt{pid}") for n in _netns())
        child.send_signal(sig)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode != 0
    _assert_removed(pid)
    deadline = time.monotonic() + 10
    while not _gone(inner) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _gone(inner), "the process inside the namespace survived"


@needs_net
@pytest.mark.timeout(60)
def test_lab_clean_removes_only_dead_runs():
    dead = subprocess.Popen(["true"])
    dead.wait()
    alive = subprocess.Popen(["sleep", "60"])
    stale, live = f"ddlt{dead.pid}n0", f"ddlt{alive.pid}br"
    try:
        for ns in (stale, live):
            subprocess.run(["ip", "netns", "add", ns], check=True)
        (Path("/etc/netns") / stale).mkdir(parents=True, exist_ok=True)
        out = subprocess.run(
            [sys.executable, "-m", "tuner.cli", "lab", "clean", "--json"],
            capture_output=True,
            text=True,
            env=_env(),
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        assert stale in json.loads(out.stdout)["removed"]
        names = _netns()
        assert stale not in names and live in names
        assert not (Path("/etc/netns") / stale).exists()
    finally:
        alive.kill()
        alive.wait()
        for ns in (stale, live):
            subprocess.run(["ip", "netns", "delete", ns], capture_output=True)
        shutil.rmtree(Path("/etc/netns") / stale, ignore_errors=True)


@needs_net
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_self_check_measures_the_set_rate():
    # One shaped link at a rate two loaded cores easily push: its wire rate
    # (what tbf counts) within 10% of the set rate in the best of 4 checks of 2 s,
    # and never above it by more than 5% (the shaper lets no more through).
    # The lower side depends on the machine's load: with a two-frame bucket the link
    # idles whenever the kernel refills it late (0.48 ms at 50 Mbit/s). Quiet, 2 s
    # checks read 95–100% of 50 Mbit/s here; clean-clone CI runs read 94.7% (best of
    # three 1 s checks) and 89.4% (best of four 2 s checks) at 50 Mbit/s. At 10 Mbit/s
    # a refill has 2.4 ms.
    # The wire rate is the downlink shaper's byte counter sampled during the transfer:
    # a receiver descheduled at the window's start read its socket buffer at once and
    # put a clean-clone CI run's goodput-based figure at 11.27 Mbit/s on this link.
    rate = 10e6
    best = 0.0
    steals = []
    with EmulatedCluster("2x1@10mbit") as c:
        for _ in range(4):
            checks = c.self_check(2.0, min_fraction=0.5, attempts=1, raise_on_fail=False)
            steals.append(c.check_steal_fraction or 0.0)
            assert len(checks) == 2
            for ch in checks:
                assert ch.wire_bits_per_s <= 1.02 * rate
                # payload over first to last byte: at most the rate, plus one bucket
                assert ch.payload_bytes * 8 / ch.elapsed_s <= rate * 1.02
            best = max(best, min(ch.wire_bits_per_s for ch in checks))
            if best >= 0.95 * rate:
                break
        prov = c.provenance()
    if best < 0.90 * rate and min(steals) >= emu.STOLEN_FRACTION:
        pytest.skip(f"the hypervisor took {min(steals):.0%}+ of the CPUs in every check")
    assert best >= 0.90 * rate, f"best wire rate {best / 1e6:.1f} Mbit/s of 10 (steal {steals})"
    assert prov["nodes"] == 2 and prov["rate_bits_per_s"] == rate
    assert 0 < prov["goodput_bytes_per_s"] <= rate / 8
    _assert_removed(os.getpid())


@needs_net
@pytest.mark.multiprocess
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_collect_emulate_two_nodes(tmp_path):
    # 50 Mbit/s: the collect's self-check needs 90% of the rate on every link; at
    # 200 Mbit/s a clean-clone CI run measured 88% (175.8 Mbit/s) on this 2-core machine,
    # and at 100 Mbit/s this machine on 2026-12-03 65–87% in 3 of 6 runs (idle)
    out = tmp_path / "emu.jsonl"
    rate = 50e6
    p, _, err = _cli(
        [
            "collect", "--emulate", "2x1@50mbit",
            "--collectives", "all_reduce", "--suite", "collectives", "--min-bytes", "256K",
            "--max-bytes", "1M", "--iters", "3", "--budget-s", "0.2", "--timeout-s", "60",
            "-o", str(out), "--json", "--no-progress",
        ],
        220,
    )  # fmt: skip
    _skip_if_stolen(p, err)
    assert p.returncode == 0, err
    recs = [json.loads(ln) for ln in out.read_text().splitlines()]
    assert [r["message_bytes"] for r in recs] == [256 * 1024, 1024 * 1024]
    burst = EmulatedCluster("2x1@50mbit").burst_bytes
    for r in recs:
        assert r["num_ranks"] == 2
        assert r["ranks_per_node"] == 1  # two host names: two nodes
        em = r["emulated"]
        assert em["nodes"] == 2 and em["ranks_per_node"] == 1 and em["rate_bits_per_s"] == rate
        assert 0 < em["goodput_bytes_per_s"] <= rate / 8
        # Ring all_reduce on 2 ranks: each NIC carries 2(n-1)/n·S = S bytes each way.
        # Through the shaper that takes at least (S - one bucket) / rate; over
        # loopback it would take a fraction of a millisecond.
        assert r["time_s"]["min"] >= (r["message_bytes"] - burst) / (rate / 8)
    _assert_removed(p.pid)


@needs_net
@pytest.mark.timeout(60)
@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv (util-linux)")
def test_lab_check_without_capability_says_how_to_get_it():
    drop = ["--bounding-set", "-net_admin,-sys_admin", "--inh-caps", "-net_admin,-sys_admin"]
    p = subprocess.Popen(
        ["setpriv", *drop, sys.executable, "-m", "tuner.cli", "lab", "check", "--emulate",
         "2x1@100mbit"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
    )  # fmt: skip
    try:
        _, err = p.communicate(timeout=50)
    finally:
        p.kill()
    assert p.returncode == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "CAP_NET_ADMIN" in lines[0] and "run as root" in lines[0] and "Traceback" not in err
    # setpriv execs: the PID is the CLI's, and it created no namespace of its own
    assert not [n for n in _netns() if n.startswith(f"ddlt{p.pid}")]


@needs_net
@pytest.mark.slow
@pytest.mark.timeout(150)
def test_lab_check_reports_each_size_against_alpha_plus_s_over_r():
    with _unless_stolen():  # a size checked while the hypervisor took the CPUs
        p, out, err = _cli(
            ["lab", "check", "--emulate", "2x1@50mbit",
             "--seconds", "0.5", "--min-fraction", "0.5", "--size-tolerance", "1", "--json"],
            140,
        )  # fmt: skip
        _skip_if_stolen(p, err)
        assert p.returncode == 0, err
        doc = json.loads(out)
        sizes = [s["message_bytes"] for s in doc["sizes"]]
        assert sizes == [1024 * 4**k for k in range(7)]  # 1 KiB … 4 MiB: 10 s budget
        rate, burst = 50e6 / 8, doc["burst_bytes"]
        alpha = doc["sizes"][0]["expected_s"] - doc["sizes"][0]["wire_bytes"] / rate
        # α is the time of the sizes the full bucket passes at once (1 KiB: 1,090 wire bytes
        # of 3,028), not the median excess over all sizes, which took in the large sizes'
        # shortfall on a busy machine (9.7–17.9 ms where 1 KiB took 0.5 ms)
        assert doc["alpha_s"] == pytest.approx(alpha, rel=1e-9)
        assert alpha == pytest.approx(doc["sizes"][0]["median_s"], rel=1e-6)
        for s in doc["sizes"]:
            assert s["wire_bytes"] == emu.wire_bytes(s["message_bytes"])
            assert s["expected_s"] == pytest.approx(alpha + s["wire_bytes"] / rate, rel=1e-9)
            assert s["ratio"] == pytest.approx(s["median_s"] / s["expected_s"], rel=1e-9)
            assert s["median_s"] >= (s["wire_bytes"] - burst) / rate
            # bandwidth-bound ones, where the bucket's head start is at most 1/8
            want = s["wire_bytes"] / rate >= 4 * alpha and s["wire_bytes"] >= 8 * burst
            assert s["judged"] == want
        assert doc["sizes"][-1]["judged"]  # 4 MiB: 0.7 s of wire time, ~1,400 buckets
        assert doc["size_tolerance"] == 1.0 and doc["passed"] is True
        assert len(doc["links"]) == 2


@needs_net
@pytest.mark.multiprocess
@pytest.mark.slow
@pytest.mark.timeout(420)
def test_run_emulate_validate_trains_in_the_emulated_cluster(tmp_path):
    """Issue 22, items 3 and 6: the main job on an emulated 2-node cluster with real
    training. It collects, calibrates, recommends, trains the MLP and the CNN with
    ps/p2p/ring in the same namespaces and reports (a table per model and the seed
    paper's figure); every step record was timed there (two nodes, one rank each, the set
    rate), an MLP step with a 3.6 MiB gradient over a 100 Mbit/s NIC takes at least
    its wire time, the report names the cluster, and no namespace is left."""
    out = tmp_path / "run"
    # 200 Mbit/s (the rate the main job suggests) failed its self-check once in the full
    # suite (87% with 2% steal: the test skipped), 50 Mbit/s made the MLP's steps 35 s longer
    rate = 100e6
    p, stdout, err = _cli(
        [
            "run", "--emulate", "2x1@100mbit", "--validate", "--validate-steps", "1",
            "--budget-s", "0.02", "--max-bytes", "16K", "--step-factor", "4", "-o", str(out),
            "--json",
            "--no-progress",
        ],
        400,
    )  # fmt: skip
    _skip_if_stolen(p, err)
    assert p.returncode == 0, err
    doc = json.loads(stdout)
    assert set(doc["timings_s"]) >= {
        "collect",
        "calibrate",
        "recommend",
        "validate",
        "fit steps",
        "report",
    }
    assert "in the emulated cluster 2x1@100mbit" in err
    steps = [json.loads(ln) for ln in (out / "validation.jsonl").read_text().splitlines()]
    archs = {r["architecture"] for r in steps if r["workers"] == 2}
    assert archs == {"ps", "p2p", "ring"}
    grad = 4 * (784 * 512 + 512 + 2 * (512 * 512 + 512) + 512 * 10 + 10)  # the default MLP
    for r in steps:
        em = r["emulated"]
        assert em["nodes"] == 2 and em["ranks_per_node"] == 1 and em["rate_bits_per_s"] == rate
        if r["workers"] == 2 and r["architecture"] == "ring":
            # each NIC carries 2(n-1)/n·G = G bytes each way per step
            assert r["time_s"]["min"] >= grad / (rate / 8)
    md = (out / "report.md").read_text()
    assert "in an emulated cluster of 2 nodes × 1 rank per node, NICs at 100 Mbit/s" in md
    # the seed paper's experiment for both models: the CNN's steps, its table, the figure
    cnn = [json.loads(ln) for ln in (out / "validation-cnn.jsonl").read_text().splitlines()]
    assert {r["model_spec"]["model"] for r in cnn} == {"cnn"}
    assert {r["architecture"] for r in cnn if r["workers"] == 2} == {"ps", "p2p", "ring"}
    by_model = doc["recommendation"] and json.loads((out / "recommendation.json").read_text())
    assert len(by_model["validation_by_model"]) == 2
    # the steps narrowed the recommendation's step terms, the MLP's then the CNN's
    from calibration import Profile

    fitted = Profile.load(out / "profile.json").fit["steps"]
    assert fitted["runs"] == len(cnn)
    assert "steps (MLP then CNN)" in err and "2 workers" in err and "2–2" not in err
    # the step files by their final paths (not the staging folder's), and the step terms
    # narrowed: the communication factor's posterior inside its prior
    assert fitted["files"] == [str(out / "validation-cnn.jsonl")]
    comm = fitted["terms"]["log_step_comm"]
    assert comm["posterior_sd"] < 0.9 * comm["prior_sd"]
    assert "[3c/4] recommending again with the step terms" in err
    assert "  with the steps: " in err and "; before them " in err  # what it changed
    assert "(predicted with the profile as it is: steps at one worker count (2)" in err
    v = by_model["validation"]
    assert {r["architecture"] for r in v["rows"]} == {"ps", "p2p", "ring"}
    for r in v["rows"]:
        assert r["error"] == pytest.approx(r["predicted_s"] / r["measured_s"] - 1.0)
    assert v["interval_half_width"] > 0 and 0 <= v["interval_coverage"] <= 1
    html = (out / "index.html").read_text()
    assert 'id="validation"' in html
    assert "<th>90% interval</th>" in html and "The 90% interval holds " in html
    assert (out / "figures" / "validation.png").stat().st_size > 0
    assert md.count("Real training (") == 2 and "figures/validation.png" in md
    _assert_removed(p.pid)


@needs_net
@pytest.mark.multiprocess
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_validate_emulate_trains_hierarchical_across_two_nodes_of_two(tmp_path):
    """Issue 25, item 4: real training with the ring and the hierarchical all-reduce on
    2 emulated nodes × 2 ranks (the hierarchical over a (node, local) mesh of the nodes'
    host names). Both steps cross the shaped NIC: the ring's 2(n−1)/n·G = 1.5 G through
    each node's NIC, the hierarchical's two rings of G/2 between the 2 nodes, G in all,
    so each takes at least that wire time, and the hierarchical is the faster; every
    record says 2 ranks per node; no namespace is left."""
    from calibration import Profile

    prof = tmp_path / "p.json"
    Profile.from_preset("ethernet-10g", "cpu").save(prof)
    steps = tmp_path / "steps.jsonl"
    rate = 100e6  # 50 Mbit/s only made the steps 4 s longer
    p, out, err = _cli(
        ["validate", "--emulate", "2x2@100mbit", "--profile", str(prof), "--workers", "4",
         "--arch", "ring,hierarchical", "--bucket-bytes", "16M", "--steps", "3",
         "--warmup-steps", "1", "--repeats", "1", "--measurements", str(steps), "--json",
         "--no-progress"],
        280,
    )  # fmt: skip
    _skip_if_stolen(p, err)
    assert p.returncode == 0, err
    recs = [json.loads(ln) for ln in steps.read_text().splitlines()]
    recs = {r["architecture"]: r for r in recs if r["workers"] == 4}
    assert set(recs) == {"ring", "hierarchical"}
    grad = 4 * (784 * 512 + 512 + 2 * (512 * 512 + 512) + 512 * 10 + 10)  # the default MLP
    for arch, wire in (("ring", 1.5 * grad), ("hierarchical", grad)):
        r = recs[arch]
        assert r["ranks_per_node"] == 2 and r["emulated"]["nodes"] == 2
        assert r["time_s"]["min"] >= wire / (rate / 8), arch
    assert recs["hierarchical"]["time_s"]["p10"] < recs["ring"]["time_s"]["p10"]
    doc = json.loads(out)
    assert {row["architecture"] for row in doc["rows"]} == {"ring", "hierarchical"}
    _assert_removed(p.pid)
