"""A bounded bulk TCP transfer, run inside emulated nodes by :meth:`EmulatedCluster.self_check`.

``python -m launch._netcheck recv --bind ADDR --port P --seconds S`` listens,
prints ``{"listening": true}`` once it does, accepts one connection, reads
until the sender closes or ``S`` + 5 s pass, and prints one JSON line:
``bytes`` (payload received), ``elapsed_s`` (first to last byte) and the
steady-state ``goodput_bytes_per_s`` (bytes after the first ``--skip-s`` of
the transfer, over the time they took: TCP's start-up and the shaper's
initial burst left out).

``python -m launch._netcheck send --to ADDR --port P --seconds S --max-bytes B``
connects (retrying for up to 10 s), sends for ``S`` seconds or ``B`` bytes,
whichever comes first, closes, and prints ``{"sent": bytes}``.

``python -m launch._netcheck echo --bind ADDR --port P --seconds S`` and
``python -m launch._netcheck ping --to ADDR --port P --sizes 1024,65536 --repeats K
--gap-s G`` time single messages: for each size, K times, the client waits ``G``
seconds (the link idle, its token bucket full), sends an 8-byte length and the
message, and waits for the echo server's 1-byte acknowledgement, sent when the
last byte arrived. It prints ``{"sizes": [...], "times_s": [[K times], ...]}``:
one message's crossing plus the acknowledgement's return, as a collective's
point-to-point step sees it.

Only the standard library; every wait is bounded.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time

_CHUNK = 1 << 16


def _accept_one(bind: str, port: int, seconds: float):
    """Listen on ``bind:port``, say ``{"listening": true}``, accept one connection."""
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((bind, port))
    srv.listen(1)
    srv.settimeout(seconds + 15.0)
    print(json.dumps({"listening": True}), flush=True)
    conn, _ = srv.accept()
    return srv, conn


def _connect(to: str, port: int) -> socket.socket:
    """Connect to ``to:port``, retrying for up to 10 s (the server may still be starting)."""
    deadline = time.monotonic() + 10.0
    while True:
        try:
            return socket.create_connection((to, port), timeout=5.0)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _recv(bind: str, port: int, seconds: float, skip_s: float) -> dict:
    srv, conn = _accept_one(bind, port, seconds)
    conn.settimeout(5.0)
    deadline = time.monotonic() + seconds + 5.0
    total = 0
    t_first = t_last = None
    t_mark = None
    bytes_mark = 0
    buf = bytearray(_CHUNK)
    view = memoryview(buf)
    while time.monotonic() < deadline:
        try:
            k = conn.recv_into(view)
        except TimeoutError:
            break
        now = time.monotonic()
        if k == 0:
            break
        if t_first is None:
            t_first = now
        total += k
        t_last = now
        if t_mark is None and now - t_first >= skip_s:
            t_mark, bytes_mark = now, total
    conn.close()
    srv.close()
    elapsed = (t_last - t_first) if t_first is not None else 0.0
    if t_mark is not None and t_last > t_mark:
        goodput = (total - bytes_mark) / (t_last - t_mark)
    else:
        goodput = total / elapsed if elapsed > 0 else 0.0
    return {"bytes": total, "elapsed_s": elapsed, "goodput_bytes_per_s": goodput}


def _send(to: str, port: int, seconds: float, max_bytes: int) -> dict:
    sock = _connect(to, port)
    payload = b"\0" * _CHUNK
    sent = 0
    t0 = time.monotonic()
    while sent < max_bytes and time.monotonic() - t0 < seconds:
        sent += sock.send(payload[: min(_CHUNK, max_bytes - sent)])
    sock.shutdown(socket.SHUT_WR)
    # Wait for the receiver to close, so that everything sent has arrived.
    sock.settimeout(10.0)
    try:
        while sock.recv(_CHUNK):
            pass
    except OSError:
        pass
    sock.close()
    return {"sent": sent}


def _read_exact(conn: socket.socket, n: int, view: memoryview) -> bool:
    got = 0
    while got < n:
        k = conn.recv_into(view[: min(len(view), n - got)])
        if k == 0:
            return False
        got += k
    return True


def _echo(bind: str, port: int, seconds: float) -> dict:
    srv, conn = _accept_one(bind, port, seconds)
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    conn.settimeout(seconds + 5.0)
    buf = memoryview(bytearray(_CHUNK))
    count = 0
    try:
        while _read_exact(conn, 8, buf):
            n = int.from_bytes(buf[:8], "big")
            if not _read_exact(conn, n, buf):
                break
            conn.sendall(b"\1")
            count += 1
    except (TimeoutError, OSError):
        pass
    conn.close()
    srv.close()
    return {"messages": count}


def _ping(to: str, port: int, sizes: list[int], repeats: int, gap_s: float) -> dict:
    sock = _connect(to, port)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.settimeout(60.0)
    payload = b"\0" * max(sizes)
    ack = memoryview(bytearray(1))
    times = []
    # one unmeasured exchange first: the connection's start-up is not a message's
    for size in [min(sizes), *sizes]:
        row = []
        for _ in range(repeats):
            time.sleep(gap_s)
            t0 = time.perf_counter()
            sock.sendall(size.to_bytes(8, "big") + payload[:size])
            if not _read_exact(sock, 1, ack):
                raise OSError("the echo server closed the connection")
            row.append(time.perf_counter() - t0)
        times.append(row)
    sock.close()
    return {"sizes": sizes, "times_s": times[1:]}


def main(argv: list[str] | None = None) -> int:
    """Command line of the transfer helpers (see the module docstring)."""
    p = argparse.ArgumentParser(prog="python -m launch._netcheck")
    sub = p.add_subparsers(dest="role", required=True)
    r = sub.add_parser("recv")
    r.add_argument("--bind", required=True)
    r.add_argument("--port", type=int, required=True)
    r.add_argument("--seconds", type=float, required=True)
    r.add_argument("--skip-s", type=float, default=0.25)
    s = sub.add_parser("send")
    s.add_argument("--to", required=True)
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--seconds", type=float, required=True)
    s.add_argument("--max-bytes", type=int, required=True)
    e = sub.add_parser("echo")
    e.add_argument("--bind", required=True)
    e.add_argument("--port", type=int, required=True)
    e.add_argument("--seconds", type=float, required=True)
    g = sub.add_parser("ping")
    g.add_argument("--to", required=True)
    g.add_argument("--port", type=int, required=True)
    g.add_argument("--sizes", required=True, help="message sizes, bytes, comma-separated")
    g.add_argument("--repeats", type=int, default=7)
    g.add_argument("--gap-s", type=float, default=0.02)
    a = p.parse_args(argv)
    if a.role == "recv":
        out = _recv(a.bind, a.port, a.seconds, a.skip_s)
    elif a.role == "send":
        out = _send(a.to, a.port, a.seconds, a.max_bytes)
    elif a.role == "echo":
        out = _echo(a.bind, a.port, a.seconds)
    else:
        sizes = [int(x) for x in a.sizes.split(",")]
        out = _ping(a.to, a.port, sizes, a.repeats, a.gap_s)
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
