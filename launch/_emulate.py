"""An emulated cluster on one machine: network namespaces joined by shaped veth links.

:class:`EmulatedCluster` builds, for a spec ``NODESxRANKS@RATE`` (e.g.
``4x1@200mbit``), a real TCP network of known bandwidth on this machine:

* one network namespace per node (``ddlt<PID>n<i>``) and one holding a bridge
  (``ddlt<PID>br``); the PID is this process's, so two runs do not clash and
  :func:`clean_stale` can tell what a killed run left;
* one veth pair per node, created directly inside the namespaces: ``eth0`` in
  the node's namespace, ``n<i>`` in the bridge's, enslaved to the bridge;
  nothing is ever created in the host's namespace;
* addresses from 198.18.0.0/15 only (RFC 2544's range for benchmarking
  network devices): node ``i`` is ``198.18.0.<i+1>/24``; no default route, so
  nothing can leave the emulated network; loopback up in every node (the
  ranks of a node talk over it, as GPUs of a node do over NVLink);
* both directions of every NIC shaped by a token bucket (``tc qdisc … tbf``)
  on the node end's egress (uplink) and the bridge end's egress (downlink);
* every node its own host name (a UTS namespace per rank process, ``unshare
  --uts`` + ``hostname``) and an ``/etc/netns/<ns>/hosts`` that maps every
  node's name to its address: ``ip netns exec`` bind-mounts it over
  ``/etc/hosts``. gloo's TCP transport (the default device XLA creates for
  ``jax_cpu_collectives_implementation=gloo``) resolves this machine's host
  name and binds the address it gets, so each rank binds its node's NIC, and
  ranks sharing a host name are read as one node (``ranks_per_node``).

Everything is removed when the ``with`` block ends, whatever ends it: normal
exit, an exception, ``KeyboardInterrupt``, ``SIGTERM`` (turned into
``KeyboardInterrupt`` while the cluster is up, from the main thread) or a
crashed rank (:func:`launch.launch_local` raises, the block unwinds). A run
killed with ``SIGKILL`` leaves its namespaces; ``ddltune lab clean``
(:func:`clean_stale`) removes those whose PID no longer runs.

Needs root, or CAP_NET_ADMIN and CAP_SYS_ADMIN (``ip netns add`` mounts,
``unshare --uts`` needs SYS_ADMIN), and ``ip``/``tc``/``unshare`` (iproute2,
util-linux). Without them: :class:`EmulationUnavailable`, one line that says
what is missing and how to get it.

Example:
    >>> from launch import EmulatedCluster, launch_local, parse_emulate
    >>> spec = parse_emulate("2x1@200mbit")
    >>> spec.num_ranks, spec.rate_bits_per_s
    (2, 200000000.0)
    >>> with EmulatedCluster(spec) as cluster:  # doctest: +SKIP
    ...     cluster.self_check()
    ...     launch_local("my.worker", [], 2, emulate=cluster)
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

__all__ = [
    "EmulateSpec",
    "EmulatedCluster",
    "EmulationError",
    "EmulationUnavailable",
    "LinkCheck",
    "Node",
    "SizeCheck",
    "clean_stale",
    "emulation_unavailable_reason",
    "parse_emulate",
    "wire_bytes",
]

#: Prefix of every namespace this module creates (followed by the PID).
PREFIX = "ddlt"
_NS_RE = re.compile(rf"^{PREFIX}(\d+)(n\d+|br)$")
#: RFC 2544 benchmarking range; nodes get 198.18.0.1, .2, … (/24).
SUBNET = "198.18.0.0/15"
_MAX_NODES = 250
_RATE_UNITS = {"bit": 1.0, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12}
#: The slowest NIC an emulated cluster takes, bit/s: at 1 and 20 kbit the
#: self-check's TCP connections timed out (a new user's trial, 2026-12-06).
MIN_RATE_BITS_PER_S = 1e6
_SPEC_RE = re.compile(
    r"^\s*(\d+)\s*x\s*(\d+)\s*@\s*([0-9]*\.?[0-9]+(?:[eE][+-]?\d+)?)\s*([a-z]+)\s*$"
)
_NETNS_ETC = Path("/etc/netns")
_CAP_NET_ADMIN = 12
_CAP_SYS_ADMIN = 21
_HOW_TO_GET = (
    "run as root, or in a container started with --cap-add NET_ADMIN --cap-add SYS_ADMIN "
    "(docker/podman) and iproute2 + util-linux installed"
)


class EmulationError(RuntimeError):
    """Building, checking or removing the emulated cluster failed (the message says why)."""


class EmulationUnavailable(EmulationError):
    """This machine or user cannot build an emulated cluster (no capability, no ``ip``/``tc``)."""


# --------------------------------------------------------------------------- spec


@dataclasses.dataclass(frozen=True)
class EmulateSpec:
    """What to emulate: ``nodes`` × ``ranks_per_node`` ranks, each NIC at ``rate_bits_per_s``.

    Attributes:
        nodes: emulated nodes, 1 ≤ nodes ≤ 250.
        ranks_per_node: ranks sharing each node's namespace and NIC, ≥ 1.
        rate_bits_per_s: each NIC's rate, each direction, bits/s (> 0), as
            ``tc`` counts it (link-layer bytes: Ethernet + IP + TCP headers
            included, so TCP goodput is about 95% of it at MTU 1500).
        text: the spec as given, for messages.
    """

    nodes: int
    ranks_per_node: int
    rate_bits_per_s: float
    text: str

    @property
    def num_ranks(self) -> int:
        """Ranks the cluster holds: ``nodes × ranks_per_node``."""
        return self.nodes * self.ranks_per_node


def parse_emulate(text: str, option: str = "--emulate") -> EmulateSpec:
    """Parse ``NODESxRANKS@RATE``, e.g. ``4x1@200mbit`` (4 nodes, 1 rank each, 200 Mbit/s NICs).

    Args:
        text: the spec. ``RATE`` is a number and one of ``tc``'s bit-rate
            units ``bit``, ``kbit``, ``mbit``, ``gbit``, ``tbit`` (SI: 1 mbit
            = 10⁶ bit/s); between 1 mbit and 100 gbit.
        option: the option's name, for error messages.

    Returns:
        An :class:`EmulateSpec`.

    Raises:
        ValueError: on anything else; the message names ``option``, shows the
            text and an example.

    Example:
        >>> parse_emulate("4x2@1.5gbit")
        EmulateSpec(nodes=4, ranks_per_node=2, rate_bits_per_s=1500000000.0, text='4x2@1.5gbit')
        >>> parse_emulate("4@200mbit")
        Traceback (most recent call last):
        ...
        ValueError: --emulate: expected NODESxRANKS@RATE such as 4x1@200mbit (rate units: bit, kbit, mbit, gbit, tbit), got '4@200mbit'
    """
    shape = (
        f"{option}: expected NODESxRANKS@RATE such as 4x1@200mbit "
        f"(rate units: {', '.join(_RATE_UNITS)}), got {text!r}"
    )
    if not isinstance(text, str):
        raise ValueError(shape)
    m = _SPEC_RE.match(text.lower())
    if not m:
        raise ValueError(shape)
    nodes, rpn, number, unit = int(m[1]), int(m[2]), float(m[3]), m[4]
    if unit not in _RATE_UNITS:
        raise ValueError(
            f"{option}: unknown rate unit {unit!r} in {text!r}; use one of "
            f"{', '.join(_RATE_UNITS)} (bits per second, as tc counts them)"
        )
    if not 1 <= nodes <= _MAX_NODES:
        raise ValueError(
            f"{option}: nodes must be between 1 and {_MAX_NODES}, got {nodes} in {text!r}"
        )
    if rpn < 1:
        raise ValueError(f"{option}: ranks per node must be ≥ 1, got {rpn} in {text!r}")
    rate = number * _RATE_UNITS[unit]
    if not MIN_RATE_BITS_PER_S <= rate <= 1e11:
        raise ValueError(
            f"{option}: rate must be between 1mbit and 100gbit, got {text!r} (below 1 Mbit/s "
            "a frame takes over 12 ms to cross and the self-check's connections time out)"
        )
    return EmulateSpec(nodes, rpn, rate, text)


# --------------------------------------------------------------------------- capability


def _cap_effective() -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    except (OSError, ValueError):
        return None
    return None


def emulation_unavailable_reason() -> str | None:
    """Why this process cannot build an emulated cluster, in one line; ``None`` if it can.

    Checks that ``ip``, ``tc`` and ``unshare`` are on ``PATH`` and that this
    process holds CAP_NET_ADMIN and CAP_SYS_ADMIN (``/proc/self/status``).
    It does not try to create anything.
    """
    if not sys.platform.startswith("linux"):
        return f"an emulated cluster needs Linux network namespaces (this is {sys.platform})"
    missing = [t for t in ("ip", "tc", "unshare") if shutil.which(t) is None]
    if missing:
        return (
            f"an emulated cluster needs {', '.join(missing)} (iproute2, util-linux), not found "
            f"on PATH; install them, and {_HOW_TO_GET}"
        )
    caps = _cap_effective()
    if caps is None:
        return "cannot read this process's capabilities (/proc/self/status); " + _HOW_TO_GET
    lacking = [
        name
        for name, bit in (("CAP_NET_ADMIN", _CAP_NET_ADMIN), ("CAP_SYS_ADMIN", _CAP_SYS_ADMIN))
        if not caps >> bit & 1
    ]
    if lacking:
        return (
            f"an emulated cluster needs {' and '.join(lacking)} (to create network namespaces "
            f"and shape links) and this process lacks {'them' if len(lacking) > 1 else 'it'}: "
            f"{_HOW_TO_GET}"
        )
    return None


def _require() -> None:
    reason = emulation_unavailable_reason()
    if reason is not None:
        raise EmulationUnavailable(reason)


def _run(cmd: Sequence[str], *, check: bool = True, timeout: float = 30.0) -> str:
    """Run an iproute2 command; a permission failure becomes :class:`EmulationUnavailable`."""
    try:
        p = subprocess.run(
            list(cmd), capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
        )
    except FileNotFoundError as e:
        raise EmulationUnavailable(f"{cmd[0]} not found: {_HOW_TO_GET}") from e
    except subprocess.TimeoutExpired as e:
        raise EmulationError(f"'{' '.join(cmd)}' did not finish within {timeout:g} s") from e
    if check and p.returncode != 0:
        err = (p.stderr or p.stdout).strip().replace("\n", " ")
        if "not permitted" in err.lower() or "permission denied" in err.lower():
            raise EmulationUnavailable(
                f"'{' '.join(cmd)}' failed: {err}; an emulated cluster needs CAP_NET_ADMIN "
                f"and CAP_SYS_ADMIN: {_HOW_TO_GET}"
            )
        raise EmulationError(f"'{' '.join(cmd)}' failed: {err}")
    return p.stdout


# --------------------------------------------------------------------------- cluster


@dataclasses.dataclass(frozen=True)
class Node:
    """One emulated node.

    Attributes:
        index: 0 ≤ index < nodes.
        netns: its network namespace (``ddlt<PID>n<index>``).
        hostname: the host name its ranks see (same as ``netns``).
        address: its NIC's IPv4 address (``198.18.0.<index+1>``).
    """

    index: int
    netns: str
    hostname: str
    address: str


@dataclasses.dataclass(frozen=True)
class LinkCheck:
    """One bulk transfer of :meth:`EmulatedCluster.self_check`.

    Attributes:
        sender, receiver: node indices (the transfer crosses the sender's
            uplink and the receiver's downlink).
        payload_bytes: TCP payload received.
        elapsed_s: first to last byte, seconds.
        goodput_bytes_per_s: steady-state payload rate (start-up left out), bytes/s.
        wire_bits_per_s: the link-layer rate the receiver's downlink shaper
            sent, bits/s: its ``tc -s`` byte counter sampled every 0.1 s while
            the transfer runs, its first and last 5% of bytes left out. This counts what
            crossed the shaper when it crossed, so a receiver that was
            descheduled and then read its socket buffer at once does not
            inflate it (goodput can, by up to a buffer over the window).
    """

    sender: int
    receiver: int
    payload_bytes: int
    elapsed_s: float
    goodput_bytes_per_s: float
    wire_bits_per_s: float

    def as_dict(self) -> dict:
        """JSON-ready fields."""
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class SizeCheck:
    """One message size of :meth:`EmulatedCluster.size_check`.

    Attributes:
        message_bytes: payload of one message, bytes.
        wire_bytes: what the shaper counts for it: payload, the 8-byte length
            header and 66 bytes of Ethernet/IP/TCP headers per segment.
        median_s: median time from the first byte sent to the 1-byte
            acknowledgement received, seconds.
        expected_s: α + wire_bytes / rate, with α (the stack's latency, the
            acknowledgement's return included) the median over the sizes of
            ``median_s − wire_bytes / rate``.
        ratio: ``median_s / expected_s`` (1.0: the link is α + S/R at this size).
    """

    message_bytes: int
    wire_bytes: int
    median_s: float
    expected_s: float
    ratio: float

    def as_dict(self) -> dict:
        """JSON-ready fields."""
        return dataclasses.asdict(self)


def wire_bytes(message_bytes: int, mtu: int = 1500) -> int:
    """Bytes a token bucket counts for one TCP message of ``message_bytes`` (+ 8-byte header).

    Segments of MSS = mtu − 52 payload bytes (IPv4 20 + TCP 20 + timestamps 12),
    each with 66 bytes of headers as the qdisc sees them (Ethernet 14, IP 20,
    TCP 32; preamble and FCS are not counted by tc). At MTU 1500: 1514 wire
    bytes per 1448 payload bytes.

    Raises:
        ValueError: ``message_bytes`` < 0 or ``mtu`` outside 576…9000.
    """
    if message_bytes < 0 or not 576 <= mtu <= 9000:
        raise ValueError(
            f"wire_bytes: message_bytes ≥ 0 and mtu 576…9000, got {message_bytes}, {mtu}"
        )
    payload = int(message_bytes) + 8
    return payload + 66 * max(1, math.ceil(payload / (mtu - 52)))


def _nice_floor(bits_per_s: float) -> str:
    """A round tc rate at or below ``bits_per_s`` (two significant digits), e.g. '150mbit'."""
    for unit, scale in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3)):
        if bits_per_s >= scale:
            v = bits_per_s / scale
            digits = 1 - int(math.floor(math.log10(v)))
            q = math.floor(round(v * 10.0**digits, 9)) / 10.0**digits
            return f"{q:g}{unit}"
    return f"{max(1, int(bits_per_s))}bit"


class EmulatedCluster:
    """An emulated cluster of ``spec.nodes`` namespaces; a context manager (see the module doc).

    Args:
        spec: an :class:`EmulateSpec` or its text (``"2x1@200mbit"``).
        mtu: the NICs' MTU, bytes (576…9000; default 1500, Ethernet's).
        burst_frames: the token bucket's depth in full frames (``mtu`` + 14
            bytes), an integer 1…64; default 2. A full bucket lets that many
            bytes through at veth speed, so a message after an idle gap crosses
            ``burst/R`` early: with 2 frames (3,028 B, 121 µs at 200 Mbit/s)
            every size from one frame up is α + S/R with one α; the old
            default of rate/HZ (100 kB at 200 Mbit/s, tc-tbf(8)'s rule for
            jiffy timers) let a 64 KiB message through in 0.12 of its S/R
            (:meth:`size_check`). One frame lost a third of the rate here
            (every packet waits for a timer; 72% at 200 Mbit/s on 2026-12-04),
            and tbf's ``peakrate`` 25–70%; a peakrate of 1.5–2× the rate keeps
            94–97% but leaves a 16 KiB message at 0.71–0.78 of α + S/R (the
            head start remains). A deficit-mode shaper without a head start
            (``cake``, or ``fq``'s pacing) is not in this machine's kernel
            (6.18: "Specified qdisc kind is unknown").
        burst_s: a deeper bucket, in seconds of the rate: the burst is
            ``max(rate × burst_s, burst_frames × (mtu + 14))`` bytes; default 0.
        queue_s: the bucket's queue, in seconds of the rate (``tc … limit``,
            plus the burst); default 50 ms.

    Attributes:
        spec: the :class:`EmulateSpec`.
        nodes: the :class:`Node` list (after entering).
        bridge_netns: the bridge's namespace name.
        checks: the :class:`LinkCheck` list of the last :meth:`self_check`.

    Raises (on entering):
        EmulationUnavailable: no CAP_NET_ADMIN/CAP_SYS_ADMIN or no ``ip``/``tc``.
        EmulationError: a command failed (everything created so far is removed).
    """

    def __init__(
        self,
        spec: EmulateSpec | str,
        *,
        mtu: int = 1500,
        burst_frames: int = 2,
        burst_s: float = 0.0,
        queue_s: float = 0.05,
    ):
        self.spec = parse_emulate(spec) if isinstance(spec, str) else spec
        if not 576 <= int(mtu) <= 9000:
            raise ValueError(f"mtu must be between 576 and 9000 bytes, got {mtu!r}")
        if not queue_s > 0:
            raise ValueError(f"queue_s must be > 0 seconds, got {queue_s!r}")
        self.mtu = int(mtu)
        if isinstance(burst_frames, bool) or not isinstance(burst_frames, int):
            raise ValueError(f"burst_frames must be an integer 1…64, got {burst_frames!r}")
        if not 1 <= burst_frames <= 64:
            raise ValueError(f"burst_frames must be an integer 1…64, got {burst_frames!r}")
        if not (math.isfinite(float(burst_s)) and 0 <= float(burst_s) <= 1):
            raise ValueError(f"burst_s must be between 0 and 1 s, got {burst_s!r}")
        self.burst_frames = int(burst_frames)
        self.burst_s = float(burst_s)
        self.queue_s = float(queue_s)
        pid = os.getpid()
        self.bridge_netns = f"{PREFIX}{pid}br"
        self.nodes = [
            Node(i, f"{PREFIX}{pid}n{i}", f"{PREFIX}{pid}n{i}", f"198.18.0.{i + 1}")
            for i in range(self.spec.nodes)
        ]
        self.checks: list[LinkCheck] = []
        self.check_steal_fraction: float | None = None
        self.size_check_steal_fraction: float | None = None
        self.size_checks: list[SizeCheck] = []
        self.setup_s: float | None = None
        self._created: list[str] = []
        self._made_etc = False
        self._active = False
        self._old_sigterm = None
        self._owner_pid = pid

    # ------------------------------------------------------------------ shaping

    @property
    def burst_bytes(self) -> int:
        """The token bucket's depth, bytes (see the class docstring)."""
        rate = self.spec.rate_bits_per_s / 8
        return int(math.ceil(max(rate * self.burst_s, self.burst_frames * (self.mtu + 14))))

    @property
    def limit_bytes(self) -> int:
        """The bucket's queue limit, bytes: burst + ``queue_s`` of the rate."""
        return self.burst_bytes + int(math.ceil(self.spec.rate_bits_per_s / 8 * self.queue_s))

    def _tbf(self) -> list[str]:
        return [
            "tbf",
            "rate",
            f"{int(round(self.spec.rate_bits_per_s))}bit",
            "burst",
            str(self.burst_bytes),
            "limit",
            str(self.limit_bytes),
        ]

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> EmulatedCluster:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> None:
        """Build the namespaces, links and shapers (see the module docstring).

        Raises:
            EmulationUnavailable, EmulationError: as the class says; whatever
                was created is removed before raising.
        """
        if self._active:
            return
        _require()
        if any(ns in _current_netns() for ns in (self.bridge_netns, self.nodes[0].netns)):
            raise EmulationError(
                f"namespace {self.bridge_netns} exists: this process already runs an emulated "
                "cluster (one at a time per process); close it first"
            )
        t0 = time.monotonic()
        self._install_sigterm()
        self._active = True
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        self.setup_s = time.monotonic() - t0

    def _build(self) -> None:
        br = self.bridge_netns
        self._add_netns(br)
        _run(["ip", "-n", br, "link", "add", "br0", "type", "bridge"])
        _run(["ip", "-n", br, "link", "set", "br0", "up"])
        if not _NETNS_ETC.exists():
            _NETNS_ETC.mkdir(parents=True, exist_ok=True)
            self._made_etc = True
        hosts = "".join(f"{n.address}\t{n.hostname}\n" for n in self.nodes)
        for n in self.nodes:
            ns, peer = n.netns, f"n{n.index}"
            self._add_netns(ns)
            etc = _NETNS_ETC / ns
            etc.mkdir(exist_ok=True)
            (etc / "hosts").write_text(
                "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost\n" + hosts, encoding="utf-8"
            )
            _run(
                [
                    "ip", "link", "add", "eth0", "netns", ns, "mtu", str(self.mtu),
                    "type", "veth", "peer", "name", peer, "netns", br, "mtu", str(self.mtu),
                ]
            )  # fmt: skip
            _run(["ip", "-n", br, "link", "set", peer, "master", "br0"])
            _run(["ip", "-n", br, "link", "set", peer, "up"])
            _run(["ip", "-n", ns, "link", "set", "lo", "up"])
            _run(["ip", "-n", ns, "addr", "add", f"{n.address}/24", "dev", "eth0"])
            _run(["ip", "-n", ns, "link", "set", "eth0", "up"])
            _run(["tc", "-n", ns, "qdisc", "add", "dev", "eth0", "root", *self._tbf()])
            _run(["tc", "-n", br, "qdisc", "add", "dev", peer, "root", *self._tbf()])

    def _add_netns(self, name: str) -> None:
        _run(["ip", "netns", "add", name])
        self._created.append(name)

    def close(self) -> None:
        """Remove everything :meth:`start` created: processes in it, namespaces, hosts files.

        Idempotent; signals are held off while it runs. Safe to call after a
        partial :meth:`start`.
        """
        if not self._active or os.getpid() != self._owner_pid:
            return
        blocked = False
        if threading.current_thread() is threading.main_thread():
            with contextlib.suppress(Exception):
                signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
                blocked = True
        try:
            _remove_namespaces(list(reversed(self._created)))
            self._created.clear()
            if self._made_etc:
                with contextlib.suppress(OSError):
                    _NETNS_ETC.rmdir()  # only when empty
            self._active = False
            self._restore_sigterm()
        finally:
            if blocked:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})

    def _install_sigterm(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return

        def on_sigterm(signum, frame):
            raise KeyboardInterrupt("SIGTERM")

        self._old_sigterm = signal.signal(signal.SIGTERM, on_sigterm)

    def _restore_sigterm(self) -> None:
        if self._old_sigterm is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._old_sigterm)
            self._old_sigterm = None

    @property
    def active(self) -> bool:
        """Whether the namespaces exist (between :meth:`start` and :meth:`close`)."""
        return self._active

    # ------------------------------------------------------------------ ranks

    @property
    def coordinator_host(self) -> str:
        """Node 0's address, where ``jax.distributed``'s coordinator listens."""
        return self.nodes[0].address

    def node_of_rank(self, rank: int, num_processes: int | None = None) -> Node:
        """The node rank ``rank`` runs on: block placement, ``rank // ranks_per_node``.

        Raises:
            ValueError: rank outside ``0 … nodes × ranks_per_node − 1``.
        """
        if not 0 <= rank < self.spec.num_ranks:
            raise ValueError(
                f"rank {rank} does not fit the emulated cluster {self.spec.text} "
                f"({self.spec.num_ranks} ranks)"
            )
        return self.nodes[rank // self.spec.ranks_per_node]

    def wrap(self, node: Node | int, argv: Sequence[str]) -> list[str]:
        """The command line that runs ``argv`` inside ``node``'s namespace under its host name.

        ``ip netns exec NS unshare --uts sh -c 'hostname H && exec "$@"' …``:
        every step ``exec``s, so the process started is the program itself
        (same PID, same inherited file descriptors).
        """
        n = self.nodes[node] if isinstance(node, int) else node
        return [
            "ip", "netns", "exec", n.netns, "unshare", "--uts", "--",
            "sh", "-c", 'hostname "$0" && exec "$@"', n.hostname, *self._pin(n), *argv,
        ]  # fmt: skip

    def node_cpus(self, node: Node | int) -> list[int]:
        """The CPUs ``node``'s processes are pinned to (``taskset``), so that nodes do not
        share cores where the machine has enough: with C usable CPUs and N nodes, node i
        gets CPUs i·⌊C/N⌋ … (i+1)·⌊C/N⌋ − 1 when N ≤ C, else CPU i mod C (nodes then
        share cores, and :meth:`provenance` says so).

        Example: 2 nodes on a 2-CPU machine: node 0 runs on CPU 0, node 1 on CPU 1 —
        two hosts of one core each, as the cost model sees two nodes.
        """
        i = node if isinstance(node, int) else node.index
        cpus = sorted(os.sched_getaffinity(0))
        k = len(cpus) // self.spec.nodes
        if k >= 1:
            return cpus[i * k : (i + 1) * k]
        return [cpus[i % len(cpus)]]

    def _pin(self, node: Node | int) -> list[str]:
        return ["taskset", "-c", ",".join(map(str, self.node_cpus(node)))]

    def provenance(self) -> dict:
        """``{"nodes", "ranks_per_node", "rate_bits_per_s", "goodput_bytes_per_s",
        "cpus_per_node", "nodes_per_cpu", "cpus"}`` for records.

        ``goodput_bytes_per_s`` is the lowest steady-state goodput of the last
        :meth:`self_check` (``None`` before one, or with one node);
        ``cpus_per_node`` the CPUs each node is pinned to (:meth:`node_cpus`),
        ``nodes_per_cpu`` how many nodes share each (1: no two nodes share a core),
        ``cpus`` the machine's usable CPUs (node i runs on CPU i mod ``cpus`` when
        they share: ``calibration.compute_contention``).
        """
        good = min((c.goodput_bytes_per_s for c in self.checks), default=None)
        ncpu = len(os.sched_getaffinity(0))
        return {
            "nodes": self.spec.nodes,
            "ranks_per_node": self.spec.ranks_per_node,
            "rate_bits_per_s": self.spec.rate_bits_per_s,
            "goodput_bytes_per_s": good,
            "cpus_per_node": len(self.node_cpus(0)),
            "nodes_per_cpu": max(1, math.ceil(self.spec.nodes / ncpu)),
            "cpus": ncpu,
        }

    # ------------------------------------------------------------------ self-check

    def self_check(
        self,
        seconds: float = 1.0,
        min_fraction: float = 0.9,
        *,
        attempts: int = 3,
        raise_on_fail: bool = True,
    ) -> list[LinkCheck]:
        """One bulk TCP transfer per link, all at once (node i → node i+1, a ring).

        Every NIC carries one flow up and one down, as in a ring all-reduce,
        so the check also shows whether this machine's cores keep up with all
        links busy at once. Each transfer runs ``seconds`` (at most
        1.5 × rate × seconds bytes); its steady-state goodput leaves out the
        first 0.25 s (TCP start-up, the bucket's initial burst).

        Args:
            seconds: transfer time per link, 0.3 … 30 s.
            min_fraction: pass when every link's wire rate (what the shaper
                counts: payload + TCP/IP/Ethernet headers) reaches this
                fraction of the set rate (0 < f ≤ 1). A machine that keeps up
                reaches about 1.0; its TCP goodput is then about 0.956 of the
                rate at MTU 1500 (1448 payload bytes per 1514-byte frame).
            attempts: failed checks to make before giving up (≥ 1): a shared
                machine can stall one transfer (on a loaded 2-core machine one 1 s
                check read 68–110% of a 50 Mbit/s rate, 2 s checks 95–100%). A
                check during which the hypervisor took ≥ :data:`STOLEN_FRACTION`
                of the CPUs' time (``steal`` in ``/proc/stat``, kept in
                :attr:`check_steal_fraction`) does not count, up to
                :data:`STOLEN_RETRIES` extra checks; the last check's figures are
                kept.
            raise_on_fail: raise (default) or only return when a link is slow.

        Returns:
            One :class:`LinkCheck` per link (none with a single node); also
            kept in :attr:`checks`.

        Raises:
            EmulationError: a link below ``min_fraction`` of the rate (the
                message gives the rate this machine can emulate with this many
                links busy, and the hypervisor's steal when it was the cause), or
                a transfer that did not finish.
        """
        if not self._active:
            raise EmulationError("self_check() needs a started cluster (use it inside 'with')")
        if not 0.3 <= seconds <= 30:
            raise ValueError(f"seconds must be between 0.3 and 30, got {seconds!r}")
        if not 0 < min_fraction <= 1:
            raise ValueError(f"min_fraction must be in (0, 1], got {min_fraction!r}")
        if not isinstance(attempts, int) or attempts < 1:
            raise ValueError(f"attempts must be an integer ≥ 1, got {attempts!r}")
        failed = tries = 0
        while failed < attempts and tries < attempts + STOLEN_RETRIES:
            tries += 1
            before = _cpu_times()
            checks = self._transfer(seconds)
            self.check_steal_fraction = _steal_fraction(before, _cpu_times())
            self.checks = checks
            worst = min(checks, key=lambda c: c.wire_bits_per_s, default=None)
            if worst is None or worst.wire_bits_per_s >= min_fraction * self.spec.rate_bits_per_s:
                return checks
            # A check the hypervisor stalled says nothing about this machine's
            # own cores: it is made again (at most STOLEN_RETRIES more times).
            if (self.check_steal_fraction or 0.0) < STOLEN_FRACTION:
                failed += 1
        if raise_on_fail:
            steal = self.check_steal_fraction or 0.0
            n = self.spec.nodes
            can = _nice_floor(0.8 * worst.wire_bits_per_s)
            head = (
                f"self-check failed: link {worst.sender}→{worst.receiver} carried "
                f"{worst.wire_bits_per_s / 1e6:.1f} Mbit/s, "
                f"{worst.wire_bits_per_s / self.spec.rate_bits_per_s:.1%} of the set "
                f"{self.spec.rate_bits_per_s / 1e6:g} Mbit/s (needs ≥ {min_fraction:.0%}; "
                f"{tries} attempts) with {len(checks)} links busy: "
            )
            if failed < attempts:  # every failed check was stolen
                raise EmulationError(
                    head + f"the hypervisor took {steal:.0%} of this machine's CPU time during "
                    f"the last check ('steal' in /proc/stat) and ≥ {STOLEN_FRACTION:.0%} in "
                    f"every failed one, which stalls the shapers' timers; try again when the "
                    f"host is quieter, or a lower rate "
                    f"(--emulate {n}x{self.spec.ranks_per_node}@{can})"
                )
            raise EmulationError(
                head + f"this machine's cores cannot keep up; it can emulate about {can} per "
                f"NIC with {n} nodes (try --emulate {n}x{self.spec.ranks_per_node}@{can})"
            )
        return checks

    def _transfer(self, seconds: float) -> list[LinkCheck]:
        """One round of concurrent transfers; see :meth:`self_check`."""
        n = self.spec.nodes
        if n < 2:
            return []
        pairs = [(i, (i + 1) % n) for i in range(n)] if n > 2 else [(0, 1), (1, 0)]
        rate_bytes = self.spec.rate_bits_per_s / 8
        max_bytes = int(1.5 * rate_bytes * seconds) + (1 << 20)
        port = 5201
        py = sys.executable
        env = _child_env()
        recv: list[subprocess.Popen] = []
        send: list[subprocess.Popen] = []
        try:
            for k, (_, dst) in enumerate(pairs):
                d = self.nodes[dst]
                cmd = [
                    "ip", "netns", "exec", d.netns, *self._pin(d), py, "-m", "launch._netcheck", "recv",
                    "--bind", d.address, "--port", str(port + k), "--seconds", str(seconds),
                ]  # fmt: skip
                recv.append(_popen(cmd, env))
            for p in recv:
                _expect_line(p, "listening", 60.0)
            before = [self._sent_bytes(src) for src, _ in pairs]
            for k, (src, dst) in enumerate(pairs):
                s = self.nodes[src]
                cmd = [
                    "ip", "netns", "exec", s.netns, *self._pin(s), py, "-m", "launch._netcheck", "send",
                    "--to", self.nodes[dst].address, "--port", str(port + k),
                    "--seconds", str(seconds), "--max-bytes", str(max_bytes),
                ]  # fmt: skip
                send.append(_popen(cmd, env))
            deadline = time.monotonic() + seconds + 60.0
            samples: list[list[tuple[float, int]]] = [[] for _ in pairs]
            while any(p.poll() is None for p in send) and time.monotonic() < deadline:
                for k, (_, dst) in enumerate(pairs):
                    t_a = time.monotonic()
                    b = self._downlink_sent_bytes(dst)
                    if b is not None:
                        samples[k].append((0.5 * (t_a + time.monotonic()), b))
                time.sleep(0.1)
            outs = []
            for p in [*send, *recv]:
                try:
                    out, err = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    raise EmulationError(
                        f"the self-check's transfer did not finish within {seconds + 60:g} s"
                    ) from None
                if p.returncode != 0:
                    # the error's own line, not the end of a traceback cut mid-line
                    lines = (err or out).strip().splitlines() or ["(no output)"]
                    raise EmulationError(f"the self-check's transfer failed: {lines[-1][-300:]}")
                outs.append(json.loads(out.strip().splitlines()[-1]))
            after = [self._sent_bytes(src) for src, _ in pairs]
            final = [self._downlink_sent_bytes(dst) for _, dst in pairs]
        finally:
            for p in [*send, *recv]:
                if p.poll() is None:
                    p.kill()
                with contextlib.suppress(Exception):
                    p.communicate(timeout=5)
        sent = outs[: len(pairs)]
        got = outs[len(pairs) :]
        checks = []
        for k, (src, dst) in enumerate(pairs):
            r = got[k]
            wire = _counter_rate(samples[k], final[k])
            if wire is None:  # no counters (or a transfer too short to sample)
                ratio = (
                    (after[k] - before[k]) / max(sent[k]["sent"], 1)
                    if before[k] is not None
                    else 1.0
                )
                wire = float(r["goodput_bytes_per_s"]) * max(ratio, 1.0)
            checks.append(
                LinkCheck(
                    src,
                    dst,
                    int(r["bytes"]),
                    float(r["elapsed_s"]),
                    float(r["goodput_bytes_per_s"]),
                    wire * 8,
                )
            )
        return checks

    def size_check(
        self,
        sizes: Sequence[int] | None = None,
        *,
        repeats: int = 5,
        gap_s: float = 0.02,
        budget_s: float = 10.0,
    ) -> list[SizeCheck]:
        """Time single messages over one link (node 0 → node 1, the others idle).

        A real NIC carries a message of S bytes in about α + S/R at every size;
        a token bucket deeper than a few frames lets a message after an idle
        gap through faster than R. This measures it: for each size, ``repeats``
        messages, each after ``gap_s`` of idle link, timed to a 1-byte
        acknowledgement (``launch._netcheck ping``/``echo``), and compares the
        median with α + :func:`wire_bytes`/R. α is the median time of the sizes
        whose wire bytes fit in the bucket (they cross in α alone), or, when none
        do, the smallest size's time beyond (its wire bytes − the bucket)/R.

        Args:
            sizes: message sizes, bytes ≥ 1, ascending; default 1 KiB, 4 KiB, …
                up to 16 MiB, stopping where ``repeats`` messages of the next
                size would pass ``budget_s`` at the rate.
            repeats: messages per size, 1…50.
            gap_s: idle time before each message, seconds, 0…1 (the bucket
                refills in burst/R: 121 µs for the default burst at 200 Mbit/s).
            budget_s: bound on the default sizes' total wire time, seconds.

        Returns:
            One :class:`SizeCheck` per size; also kept in :attr:`size_checks`
            (and the hypervisor's share of CPU time meanwhile, ``steal``, in
            :attr:`size_check_steal_fraction`, ``None`` off Linux).

        Raises:
            EmulationError: fewer than two nodes, a cluster not started, or
                a transfer that failed or did not finish.
            ValueError: a bad argument.
        """
        if not self._active:
            raise EmulationError("size_check() needs a started cluster (use it inside 'with')")
        if self.spec.nodes < 2:
            raise EmulationError("size_check() needs two nodes: it times node 0 → node 1")
        if not isinstance(repeats, int) or not 1 <= repeats <= 50:
            raise ValueError(f"repeats must be an integer 1…50, got {repeats!r}")
        if not 0 <= gap_s <= 1:
            raise ValueError(f"gap_s must be between 0 and 1 s, got {gap_s!r}")
        rate = self.spec.rate_bits_per_s / 8
        if sizes is None:
            sizes, total, s = [], 0.0, 1024
            while s <= 16 * 1024**2:
                total += repeats * wire_bytes(s, self.mtu) / rate
                if sizes and total > budget_s:
                    break
                sizes.append(s)
                s *= 4
        sizes = [int(x) for x in sizes]
        if not sizes or any(x < 1 for x in sizes) or sizes != sorted(sizes):
            raise ValueError(f"sizes must be ascending byte counts ≥ 1, got {sizes!r}")
        a, b = self.nodes[0], self.nodes[1]
        env = _child_env()
        py = sys.executable
        steal_before = _cpu_times()
        wire_s = sum(repeats * (wire_bytes(x, self.mtu) / rate + gap_s) for x in sizes)
        limit = 2.0 * wire_s + 30.0
        echo = _popen(
            ["ip", "netns", "exec", b.netns, *self._pin(b), py, "-m", "launch._netcheck", "echo",
             "--bind", b.address, "--port", "5301", "--seconds", f"{limit:.0f}"], env,
        )  # fmt: skip
        ping = None
        try:
            _expect_line(echo, "listening", 60.0)
            ping = _popen(
                ["ip", "netns", "exec", a.netns, *self._pin(a), py, "-m", "launch._netcheck", "ping",
                 "--to", b.address, "--port", "5301", "--sizes", ",".join(map(str, sizes)),
                 "--repeats", str(repeats), "--gap-s", str(gap_s)], env,
            )  # fmt: skip
            try:
                out, err = ping.communicate(timeout=limit)
            except subprocess.TimeoutExpired:
                raise EmulationError(
                    f"the size check did not finish within {limit:.0f} s"
                ) from None
            if ping.returncode != 0:
                raise EmulationError(f"the size check failed: {(err or out).strip()[-300:]}")
            times = json.loads(out.strip().splitlines()[-1])["times_s"]
        finally:
            for p in (ping, echo):
                if p is not None and p.poll() is None:
                    p.kill()
                if p is not None:
                    with contextlib.suppress(Exception):
                        p.communicate(timeout=5)
        self.size_check_steal_fraction = _steal_fraction(steal_before, _cpu_times())
        medians = [sorted(t)[len(t) // 2] for t in times]
        wires = [wire_bytes(x, self.mtu) for x in sizes]
        # The link's α, from the messages the full bucket passes at once (wire bytes ≤
        # burst: they take α alone), else from the smallest: its time beyond its wire
        # bytes past the bucket. Not the median excess over all sizes: that took in the
        # large sizes' shortfall on a busy machine (α 9.7–17.9 ms where 1 KiB took 0.5 ms).
        burst = self.burst_bytes
        within = sorted(m for m, w in zip(medians, wires, strict=True) if w <= burst)
        if within:
            alpha = within[len(within) // 2]
        else:
            alpha = max(medians[0] - (wires[0] - burst) / rate, 0.0)
        checks = []
        for size, w, m in zip(sizes, wires, medians, strict=True):
            expected = alpha + w / rate
            checks.append(SizeCheck(size, w, m, expected, m / expected))
        self.size_checks = checks
        return checks

    def _sent_bytes(self, node: int) -> int | None:
        """Bytes the node's uplink shaper has sent (``tc -s qdisc``), or ``None``."""
        out = _run(["tc", "-s", "-n", self.nodes[node].netns, "qdisc", "show", "dev", "eth0"])
        m = re.search(r"Sent (\d+) bytes", out)
        return int(m[1]) if m else None

    def _downlink_sent_bytes(self, node: int) -> int | None:
        """Bytes the shaper of ``node``'s downlink (the bridge's port) has sent, or ``None``."""
        out = _run(
            [
                "tc",
                "-s",
                "-n",
                self.bridge_netns,
                "qdisc",
                "show",
                "dev",
                f"n{self.nodes[node].index}",
            ],
            check=False,
        )
        m = re.search(r"Sent (\d+) bytes", out)
        return int(m[1]) if m else None

    def qdiscs(self) -> dict[str, str]:
        """``tc qdisc show`` of every shaped device, by ``netns/dev`` (for checks and reports)."""
        out = {}
        for n in self.nodes:
            out[f"{n.netns}/eth0"] = _run(["tc", "-n", n.netns, "qdisc", "show", "dev", "eth0"])
            out[f"{self.bridge_netns}/n{n.index}"] = _run(
                ["tc", "-n", self.bridge_netns, "qdisc", "show", "dev", f"n{n.index}"]
            )
        return out


def _child_env() -> dict:
    """This environment minus proxy variables (nothing in the emulated network is behind one)."""
    env = dict(os.environ)
    for k in list(env):
        if k.lower() in ("http_proxy", "https_proxy", "all_proxy", "grpc_proxy"):
            del env[k]
    return env


STOLEN_FRACTION = 0.02
"""A self-check during which the hypervisor took at least this share of the CPUs'
time (``steal``) is made again: on this project's 2-core VM a link's rate fell by
1.5–2.5× the steal share (steal 4% → 91%, 9% → 76% of a 50 Mbit/s rate; 0–1% →
95–101%), as the shapers' 2-frame buckets overflow while their timers wait."""

STOLEN_RETRIES = 3
"""At most this many checks beyond ``attempts``, made when checks were stolen."""


def _cpu_times() -> list[int] | None:
    """The aggregate ``cpu`` line of ``/proc/stat`` (USER_HZ ticks), or ``None`` off Linux."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    return [int(x) for x in fields[1:]]


def _steal_fraction(before: list[int] | None, after: list[int] | None) -> float | None:
    """The share of all CPU time between two :func:`_cpu_times` the hypervisor took
    (``steal``, the 8th field; proc(5)), 0…1, or ``None`` when unknown."""
    if before is None or after is None or len(before) < 8 or len(after) < 8:
        return None
    d = [b - a for a, b in zip(before, after, strict=False)]
    total = sum(d[:8])  # guest time is already in user/nice
    return d[7] / total if total > 0 else None


def _counter_rate(
    samples: Sequence[tuple[float, int]], final: int | None, *, edge: float = 0.05
) -> float | None:
    """A byte counter's rate while a transfer ran, bytes/s, from ``(time_s, bytes)`` samples.

    Of the bytes the counter moved from its first sample to ``final`` (its value
    once the transfer ended), the window holds the middle ``1 − 2·edge``: from
    the first sample past ``edge`` of them to the last sample short of
    ``1 − edge``. That leaves out TCP's start, the handshake's and the other
    flows' acknowledgements before and after (a few hundred bytes a sample, which
    a "has it moved" rule would count as the transfer). ``None`` when fewer than
    two samples fall in it or it spans under 0.2 s.
    """
    if final is None or len(samples) < 2:
        return None
    base = samples[0][1]
    moved = final - base
    if moved <= 0:
        return None
    window = [(t, b) for t, b in samples if edge * moved <= b - base <= (1 - edge) * moved]
    if len(window) < 2 or window[-1][0] - window[0][0] < 0.2:
        return None
    (t0, b0), (t1, b1) = window[0], window[-1]
    return (b1 - b0) / (t1 - t0)


def _popen(cmd: list[str], env: dict) -> subprocess.Popen:
    return subprocess.Popen(
        cmd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )


def _expect_line(p: subprocess.Popen, key: str, timeout_s: float) -> None:
    """Wait (bounded) for a JSON line holding ``key`` on ``p``'s stdout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not select.select([p.stdout], [], [], 0.2)[0]:
            if p.poll() is not None:
                break
            continue
        line = p.stdout.readline()
        if not line:
            break
        with contextlib.suppress(json.JSONDecodeError):
            if key in json.loads(line):
                return
    err = p.stderr.read() if p.poll() is not None else ""
    raise EmulationError(
        f"the self-check's receiver did not start within {timeout_s:g} s"
        + (f": {err.strip()[-300:]}" if err else "")
    )


# --------------------------------------------------------------------------- removal


def _current_netns() -> set[str]:
    out = _run(["ip", "netns", "list"], check=False)
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def _ns_pids(ns: str) -> list[int]:
    out = _run(["ip", "netns", "pids", ns], check=False)
    return [int(x) for x in out.split() if x.isdigit()]


def _remove_namespaces(names: Sequence[str]) -> None:
    """Kill what runs in each namespace, delete it and its ``/etc/netns`` folder."""
    for ns in names:
        for pid in _ns_pids(ns):
            if pid != os.getpid():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    for ns in names:
        while _ns_pids(ns) and time.monotonic() < deadline:
            time.sleep(0.05)
        _run(["ip", "netns", "delete", ns], check=False)
        shutil.rmtree(_NETNS_ETC / ns, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _our_namespaces() -> list[tuple[str, int]]:
    names = _current_netns()
    if _NETNS_ETC.is_dir():
        names.update(p.name for p in _NETNS_ETC.iterdir())
    found = []
    for name in sorted(names):
        m = _NS_RE.match(name)
        if m:
            found.append((name, int(m[1])))
    return found


def clean_stale(*, include_running: bool = False) -> list[str]:
    """Remove the namespaces (and ``/etc/netns`` folders) that killed runs left.

    A name ``ddlt<PID>n<i>`` / ``ddlt<PID>br`` is stale when no process ``PID``
    runs. Processes still inside a stale namespace are killed first.

    Args:
        include_running: also remove those of runs still alive (not this
            process's own).

    Returns:
        The names removed, sorted.

    Raises:
        EmulationUnavailable: without CAP_NET_ADMIN/CAP_SYS_ADMIN or ``ip``.
    """
    _require()
    me = os.getpid()
    stale = [
        name
        for name, pid in _our_namespaces()
        if pid != me and (include_running or not _alive(pid))
    ]
    _remove_namespaces(stale)
    with contextlib.suppress(OSError):
        if _NETNS_ETC.is_dir() and not any(_NETNS_ETC.iterdir()):
            _NETNS_ETC.rmdir()
    return stale
