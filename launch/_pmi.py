"""A client for the simple PMI v1 wire protocol, so that MPICH jobs need no hand-made coordinator.

MPICH's process manager Hydra (``mpiexec``/``mpirun`` of MPICH and Intel MPI)
gives every rank a connection to its PMI server: an inherited socket in
``PMI_FD``, or ``HOST:PORT`` in ``PMI_PORT`` (with ``PMI_ID``) under
``mpiexec -pmi-port``. Through it ranks put strings into a key-value space
shared by the job, wait in a barrier, and get what others put — which is all
``jax.distributed`` needs: rank 0 picks a free port on its host and publishes
``HOST:PORT``; after the barrier every rank reads it
(:func:`exchange_coordinator`).

The protocol (MPICH ``src/pmi/maint/pmi-1.1.txt``, client ``src/pmi/simple``
/ ``src/pmi/src/pmi_v1.c``; Flux RFC 13 "Simple Process Manager Interface
v1"): one request per line, ``cmd=NAME key=value ...`` separated by single
spaces and ended by ``\\n``; the server answers each with one line.

====================================================  ===========================================
client                                                server
====================================================  ===========================================
``cmd=initack pmiid=ID`` (``PMI_PORT`` only)           ``cmd=initack`` then ``cmd=set size=N``,
                                                      ``cmd=set rank=R``, ``cmd=set debug=D``
``cmd=init pmi_version=1 pmi_subversion=1``           ``cmd=response_to_init ... rc=0``
``cmd=get_maxes``                                     ``cmd=maxes kvsname_max= keylen_max=
                                                      vallen_max=``
``cmd=get_my_kvsname``                                ``cmd=my_kvsname kvsname=K``
``cmd=put kvsname=K key=KEY value=V``                 ``cmd=put_result rc=0``
``cmd=barrier_in``                                    ``cmd=barrier_out`` (once every rank is in)
``cmd=get kvsname=K key=KEY``                         ``cmd=get_result rc=0 value=V``
``cmd=finalize``                                      ``cmd=finalize_ack``
====================================================  ===========================================

Keys and values may not contain spaces, ``=`` (keys) or newlines: the wire
format has no escapes.

Hydra (4.0.2, measured) treats a rank that closes its PMI connection
without ``finalize`` as failed and at once kills the job's other ranks on that
node — even when it exited with status 0, and ``mpiexec`` then still returns
0. A rank that finalized and later exits non-zero does not stop the others.
:func:`exchange_coordinator` therefore keeps the connection open and
finalizes it when the process exits normally (``atexit``): a rank that dies
(killed, ``os._exit``) takes the job down at once, as an MPI job would, and
one that ends normally does not.
"""

from __future__ import annotations

import atexit
import os
import socket
import time
from collections.abc import Mapping

__all__ = [
    "COORDINATOR_KEY",
    "PMIError",
    "SimplePMIClient",
    "exchange_coordinator",
    "format_command",
    "parse_command",
    "pmi_available",
    "port_rank_size",
]

#: The key rank 0's ``HOST:PORT`` is published under.
COORDINATOR_KEY = "ddltune_coordinator"

_MAX_LINE = 64 * 1024


class PMIError(RuntimeError):
    """The PMI server refused a request, answered out of protocol, or did not answer in time."""


def parse_command(line: str) -> dict[str, str]:
    """Split one wire line ``cmd=NAME k=v ...`` into a dict.

    Args:
        line: one line, with or without its ``\\n``.

    Returns:
        ``{"cmd": NAME, k: v, ...}``; a value keeps any ``=`` after the first.

    Raises:
        PMIError: the line has a word without ``=`` or no ``cmd``.

    Example:
        >>> parse_command("cmd=get_result rc=0 value=node1:61234\\n")
        {'cmd': 'get_result', 'rc': '0', 'value': 'node1:61234'}
    """
    out: dict[str, str] = {}
    for word in line.strip().split(" "):
        if not word:
            continue
        key, eq, value = word.partition("=")
        if not eq:
            raise PMIError(f"PMI: malformed reply {line.strip()!r}: {word!r} is not key=value")
        out[key] = value
    if "cmd" not in out:
        raise PMIError(f"PMI: malformed reply {line.strip()!r}: no cmd=")
    return out


def format_command(cmd: str, **attrs: object) -> str:
    """One wire line: ``cmd=CMD k=v ...\\n`` (attributes in the order given).

    Raises:
        ValueError: a name or value contains a space, a newline, or (names) ``=``.

    Example:
        >>> format_command("put", kvsname="kvs_1_0", key="k", value="h:1")
        'cmd=put kvsname=kvs_1_0 key=k value=h:1\\n'
    """
    words = [f"cmd={cmd}"]
    for key, value in attrs.items():
        text = str(value)
        if any(c in key for c in " \n=") or any(c in text for c in " \n"):
            raise ValueError(
                f"PMI {key}={text!r}: the simple PMI wire format allows no spaces or newlines"
            )
        words.append(f"{key}={text}")
    return " ".join(words) + "\n"


def pmi_available(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this process was given a simple-PMI connection (``PMI_FD`` or ``PMI_PORT``).

    Example:
        >>> pmi_available({"PMI_RANK": "0", "PMI_SIZE": "2"})
        False
        >>> pmi_available({"PMI_FD": "6"})
        True
    """
    env = os.environ if environ is None else environ
    return bool(env.get("PMI_FD", "").strip() or env.get("PMI_PORT", "").strip())


class SimplePMIClient:
    """One rank's connection to a simple PMI v1 server (Hydra's proxy).

    Every request blocks until the server answers, at most ``timeout_s``
    seconds (a barrier waits for the slowest rank).

    Args:
        sock: a connected stream socket to the server.
        timeout_s: longest wait for one answer, seconds (> 0).

    Attributes:
        rank, size: this process's rank and the job's size, when the server
            told them (``PMI_PORT`` handshake), else ``None``.
        kvsname, maxes: filled by :meth:`get_my_kvsname` / :meth:`get_maxes`.

    Raises:
        ValueError: on ``timeout_s <= 0``.
    """

    def __init__(self, sock: socket.socket, *, timeout_s: float = 60.0):
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0 seconds, got {timeout_s!r}")
        self._sock = sock
        self._buf = b""
        self.timeout_s = float(timeout_s)
        self.rank: int | None = None
        self.size: int | None = None
        self.kvsname: str | None = None
        self.maxes: dict[str, int] = {}

    # ------------------------------------------------------------------ connecting

    @classmethod
    def from_environ(
        cls, environ: Mapping[str, str] | None = None, *, timeout_s: float = 60.0
    ) -> SimplePMIClient | None:
        """Connect as the launcher said: the socket in ``PMI_FD``, or ``PMI_PORT`` + ``PMI_ID``.

        Args:
            environ: the environment to read; default ``os.environ``.
            timeout_s: see the class.

        Returns:
            A client after the ``PMI_PORT`` handshake (not yet :meth:`init`-ed),
            or ``None`` when neither variable is set.

        Raises:
            PMIError: the variable is malformed, the descriptor is not a
                socket, or the server cannot be reached.
        """
        env = os.environ if environ is None else environ
        fd_text = env.get("PMI_FD", "").strip()
        port_text = env.get("PMI_PORT", "").strip()
        if fd_text:
            try:
                fd = int(fd_text)
            except ValueError:
                raise PMIError(f"PMI_FD={fd_text!r} is not a file descriptor number") from None
            try:
                # Duplicated: the launcher's descriptor stays open for whoever else uses it.
                sock = socket.socket(fileno=os.dup(fd))
            except OSError as e:
                raise PMIError(f"PMI_FD={fd}: not an open socket ({e})") from None
            sock.settimeout(timeout_s)
            return cls(sock, timeout_s=timeout_s)
        if port_text:
            held = _port_clients.pop((port_text, env.get("PMI_ID", "").strip()), None)
            if held is not None:  # connected by port_rank_size(): the handshake is done
                return held
            host, colon, port = port_text.rpartition(":")
            if not colon or not host or not port.isdigit():
                raise PMIError(f"PMI_PORT={port_text!r}: expected HOST:PORT")
            try:
                sock = socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s)
            except OSError as e:
                raise PMIError(f"PMI_PORT={port_text}: cannot connect ({e})") from None
            client = cls(sock, timeout_s=timeout_s)
            try:
                client._port_handshake(env.get("PMI_ID", "0").strip() or "0")
            except BaseException:
                client.close()
                raise
            return client
        return None

    def _port_handshake(self, pmiid: str) -> None:
        self._send(format_command("initack", pmiid=pmiid))
        self._expect(self._recv(), "initack")
        for name in ("size", "rank", "debug"):
            reply = self._expect(self._recv(), "set")
            if name not in reply:
                raise PMIError(f"PMI: expected 'cmd=set {name}=...' in the handshake, got {reply}")
            if name in ("size", "rank"):
                setattr(self, name, int(reply[name]))

    # ------------------------------------------------------------------ wire

    def _send(self, line: str) -> None:
        try:
            self._sock.sendall(line.encode("ascii"))
        except OSError as e:
            raise PMIError(
                f"PMI: cannot send {line.split()[0]} ({e}): did the launcher stop?"
            ) from None

    def _recv(self) -> dict[str, str]:
        deadline = time.monotonic() + self.timeout_s
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise PMIError(f"PMI: no answer within {self.timeout_s:g} s")
            self._sock.settimeout(left)
            try:
                chunk = self._sock.recv(4096)
            except TimeoutError:
                raise PMIError(f"PMI: no answer within {self.timeout_s:g} s") from None
            except OSError as e:
                raise PMIError(f"PMI: connection failed ({e})") from None
            if not chunk:
                raise PMIError("PMI: the server closed the connection")
            self._buf += chunk
            if len(self._buf) > _MAX_LINE:
                raise PMIError(f"PMI: reply longer than {_MAX_LINE} bytes")
        line, _, self._buf = self._buf.partition(b"\n")
        return parse_command(line.decode("ascii", errors="replace"))

    @staticmethod
    def _expect(reply: dict[str, str], cmd: str, request: str | None = None) -> dict[str, str]:
        if reply["cmd"] != cmd:
            raise PMIError(f"PMI: expected cmd={cmd}, got {reply}")
        rc = reply.get("rc", "0")
        if rc != "0":
            raise PMIError(
                f"PMI {request or cmd} failed (rc={rc}): "
                f"{reply.get('msg', reply.get('reason', ''))}".rstrip()
            )
        return reply

    def request(self, cmd: str, expect: str, **attrs: object) -> dict[str, str]:
        """Send ``cmd=CMD attrs...`` and return the reply, which must be ``cmd=EXPECT`` with rc 0.

        Raises:
            PMIError: an error reply, another command, or no reply in time.
            ValueError: an attribute the wire format cannot carry.
        """
        self._send(format_command(cmd, **attrs))
        return self._expect(self._recv(), expect, cmd)

    # ------------------------------------------------------------------ PMI-1 calls

    def init(self) -> None:
        """``PMI_Init``: agree on protocol version 1.1.

        Raises:
            PMIError: the server speaks another version or refuses.
        """
        reply = self.request("init", "response_to_init", pmi_version=1, pmi_subversion=1)
        if reply.get("pmi_version", "1") != "1":
            raise PMIError(f"PMI: the server speaks version {reply.get('pmi_version')}, not 1")

    def get_maxes(self) -> dict[str, int]:
        """Longest kvsname, key and value the server takes (characters)."""
        reply = self.request("get_maxes", "maxes")
        self.maxes = {
            k: int(reply[k]) for k in ("kvsname_max", "keylen_max", "vallen_max") if k in reply
        }
        return self.maxes

    def get_my_kvsname(self) -> str:
        """The name of this job's key-value space."""
        self.kvsname = self.request("get_my_kvsname", "my_kvsname")["kvsname"]
        return self.kvsname

    def _kvs(self) -> str:
        return self.kvsname if self.kvsname is not None else self.get_my_kvsname()

    def put(self, key: str, value: str) -> None:
        """Store ``value`` under ``key`` in this job's space (visible to all after a barrier).

        Raises:
            ValueError: ``key``/``value`` longer than the server's maxima or
                with characters the wire cannot carry.
            PMIError: the server refused.
        """
        for what, text, limit in (
            ("key", key, self.maxes.get("keylen_max")),
            ("value", value, self.maxes.get("vallen_max")),
        ):
            if limit is not None and len(text) > limit:
                raise ValueError(f"PMI {what} {text!r} is longer than the server's {limit}")
        self.request("put", "put_result", kvsname=self._kvs(), key=key, value=value)

    def barrier(self) -> None:
        """Wait until every rank of the job has entered the barrier (at most ``timeout_s``)."""
        self.request("barrier_in", "barrier_out")

    def get(self, key: str) -> str:
        """The value some rank put under ``key`` before the last barrier.

        Raises:
            PMIError: no such key (the message names it).
        """
        self._send(format_command("get", kvsname=self._kvs(), key=key))
        reply = self._recv()
        if reply["cmd"] != "get_result":
            raise PMIError(f"PMI: expected cmd=get_result, got {reply}")
        if reply.get("rc", "0") != "0" or reply.get("found", "TRUE").upper() == "FALSE":
            raise PMIError(f"PMI get {key!r}: not found ({reply.get('msg', 'no value')})")
        return reply.get("value", "")

    def finalize(self) -> None:
        """``PMI_Finalize``: tell the server this rank is done with PMI, then close."""
        try:
            self.request("finalize", "finalize_ack")
        finally:
            self.close()

    def close(self) -> None:
        """Close the connection (without finalizing)."""
        self._sock.close()

    def __enter__(self) -> SimplePMIClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# PMI_PORT connections opened by port_rank_size(), by (PMI_PORT, PMI_ID): Hydra
# answers one handshake per rank, so the connection is kept for the exchange.
_port_clients: dict[tuple[str, str], SimplePMIClient] = {}


def port_rank_size(
    environ: Mapping[str, str] | None = None, *, timeout_s: float = 60.0
) -> tuple[int, int] | None:
    """This rank and the job's size under ``mpiexec -pmi-port`` (``PMI_PORT`` + ``PMI_ID``).

    Hydra's port model sets neither ``PMI_RANK`` nor ``PMI_SIZE`` (MPICH
    4.0.2, measured): rank and size come from the ``initack`` handshake. The
    connection stays open (once per process) for :func:`exchange_coordinator`.

    Args:
        environ: the environment to read; default ``os.environ``.
        timeout_s: longest wait for the server, seconds (> 0).

    Returns:
        ``(rank, size)``, or ``None`` without ``PMI_PORT``/``PMI_ID`` (or with ``PMI_FD``).

    Raises:
        PMIError: the server cannot be reached or answers out of protocol.
    """
    env = os.environ if environ is None else environ
    port_text = env.get("PMI_PORT", "").strip()
    pmiid = env.get("PMI_ID", "").strip()
    if not port_text or not pmiid or env.get("PMI_FD", "").strip():
        return None
    key = (port_text, pmiid)
    client = _port_clients.get(key)
    if client is None:
        client = SimplePMIClient.from_environ(env, timeout_s=timeout_s)
        if client is None or client.rank is None or client.size is None:
            raise PMIError(f"PMI_PORT={port_text}: the handshake gave no rank and size")
        _port_clients[key] = client
    return client.rank, client.size


def _rank0_address(environ: Mapping[str, str]) -> str:
    """``HOST:PORT`` for rank 0's coordinator: the host Hydra knows this node by, a free port."""
    host = (
        environ.get("MPIR_CVAR_CH3_INTERFACE_HOSTNAME", "").strip()  # set by Hydra per node
        or socket.gethostname()
    )
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))  # jax's coordinator service listens on every interface
        port = int(s.getsockname()[1])
    return f"{host}:{port}"


def exchange_coordinator(
    process_id: int,
    *,
    environ: Mapping[str, str] | None = None,
    timeout_s: float = 60.0,
    key: str = COORDINATOR_KEY,
    hold: bool = True,
) -> str | None:
    """Agree on the ``jax.distributed`` coordinator through the launcher's PMI.

    Rank 0 picks a free TCP port on its host and puts ``HOST:PORT`` (the host
    as Hydra names the node, ``MPIR_CVAR_CH3_INTERFACE_HOSTNAME``, else
    ``socket.gethostname()``); every rank enters the barrier; the others get
    the value. Call it on every rank of the job, once.

    Args:
        process_id: this rank (0 publishes), ≥ 0.
        environ: the environment to read; default ``os.environ``.
        timeout_s: longest wait for one PMI answer, seconds (> 0); the barrier
            waits for the slowest rank to get here.
        key: the key to publish under (≤ the server's key length).
        hold: keep the PMI connection open and finalize it when this process
            exits normally (``atexit``), so that the launcher stops the job's
            other ranks if this one dies (see the module docstring); ``False``
            finalizes at once.

    Returns:
        ``HOST:PORT``, the same on every rank, or ``None`` when this process
        has no PMI connection (:func:`pmi_available`).

    Raises:
        PMIError: the PMI server refused, went away, or a rank did not reach
            the barrier within ``timeout_s`` (the message says which step).
        ValueError: ``process_id < 0``.
    """
    if process_id < 0:
        raise ValueError(f"process_id must be ≥ 0, got {process_id!r}")
    env = os.environ if environ is None else environ
    client = SimplePMIClient.from_environ(env, timeout_s=timeout_s)
    if client is None:
        return None
    step = "init"
    try:
        client.init()
        step = "get_maxes"
        client.get_maxes()
        step = "get_my_kvsname"
        client.get_my_kvsname()
        address = None
        if process_id == 0:
            address = _rank0_address(env)
            step = f"put {key}"
            client.put(key, address)
        step = "barrier (waiting for every rank)"
        client.barrier()
        if address is None:
            step = f"get {key}"
            address = client.get(key)
        if hold:
            atexit.register(_finalize_quietly, client)
        else:
            step = "finalize"
            client.finalize()
    except PMIError as e:
        client.close()
        raise PMIError(f"rank {process_id}: {e} (at PMI {step})") from None
    except BaseException:
        client.close()
        raise
    return address


def _finalize_quietly(client: SimplePMIClient) -> None:
    """At exit: finalize, ignoring a launcher that already went away."""
    try:
        client.finalize()
    except (PMIError, OSError):
        pass
