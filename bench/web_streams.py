"""One `baton serve` process holding 500 idle open SSE streams (each to its own chat): its memory and CPU.

A private redis-server; no workers (idle streams need none). Measured on the server process: RSS after a
warm-up (one request and one stream opened and closed), RSS with the 500 streams open and each parked in
its XREAD BLOCK (Redis shows 500 blocked clients), the CPU seconds it burns over 30 s with them open
(pings included: every 15 s each stream gets a comment), the time to open the 500 (sequentially, each
until its first byte), and how long until Redis sees the last reader leave once they are all closed.
Streams go to 127.0.0.1 only; every wait is bounded.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time

import psutil

from bench._common import Row, Stack, judge, print_rows, wait_for
from tests.support.web_server import ApiServer

STREAMS = 500
IDLE_SECONDS = 30.0
MIB = 1024 * 1024


def open_stream(port: int, chat: str, timeout: float = 30) -> socket.socket:
    """A raw SSE request; returns once the response headers and the stream's first comment arrived."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    sock.sendall(
        f"GET /api/chats/{chat}/stream HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n".encode()
    )
    seen = b""
    while b": open" not in seen:
        chunk = sock.recv(4096)
        if not chunk:
            raise ConnectionError(f"stream {chat} closed before its first comment: {seen[:200]!r}")
        seen += chunk
    if not seen.startswith(b"HTTP/1.1 200"):
        raise ConnectionError(f"stream {chat}: {seen[:200]!r}")
    return sock


def blocked_readers(stack: Stack) -> int:
    """The server's Redis connections parked in a blocking XREAD."""
    clients = stack.redis().client_list()
    return sum(1 for c in clients if _text(c.get("name")) == "baton-web" and "b" in _text(c.get("flags")))


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value or "")


def rss_mib(proc: psutil.Process) -> float:
    samples = []
    for _ in range(5):
        samples.append(proc.memory_info().rss / MIB)
        time.sleep(0.2)
    return sorted(samples)[len(samples) // 2]


def cpu_seconds(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return times.user + times.system


def main() -> list[Row]:
    with Stack("web-streams") as stack:
        api = ApiServer(stack.env, stack.tmp).start(timeout=60)
        sockets: list[socket.socket] = []
        try:
            proc = psutil.Process(api.pid)
            assert api.get("/healthz")[0] == 200
            open_stream(api.port, "warmup").close()
            wait_for(lambda: blocked_readers(stack) == 0, 30, what="the warm-up stream to leave Redis")
            idle = rss_mib(proc)

            started = time.perf_counter()
            for i in range(STREAMS):
                sockets.append(open_stream(api.port, f"idle-{i}"))
            open_seconds = time.perf_counter() - started
            wait_for(lambda: blocked_readers(stack) == STREAMS, 60, interval=0.2, what=f"{STREAMS} blocked readers")
            held = rss_mib(proc)

            cpu_before = cpu_seconds(proc)
            time.sleep(IDLE_SECONDS)  # the measurement itself: what idle streams cost while nothing happens
            cpu_idle = cpu_seconds(proc) - cpu_before
            still_open = sum(1 for s in sockets if _alive(s))
            clients = int(stack.redis().info("clients")["connected_clients"])

            closed_at = time.perf_counter()
            for sock in sockets:
                sock.close()
            sockets.clear()
            wait_for(lambda: blocked_readers(stack) == 0, 60, interval=0.1, what="every reader to leave Redis")
            release_seconds = time.perf_counter() - closed_at
        finally:
            for sock in sockets:
                with contextlib.suppress(OSError):
                    sock.close()
            api.stop()

    per_stream_kib = (held - idle) * 1024 / STREAMS
    rows = [
        Row("server RSS, idle (after warm-up)", idle, "MiB", "—", "info"),
        Row(f"server RSS with {STREAMS} idle streams open", held, "MiB", "—", "info"),
        Row("RSS per open stream", per_stream_kib, "KiB", "≤ 100 KiB", judge(per_stream_kib, at_most=100)),
        Row(f"server CPU over {IDLE_SECONDS:.0f} s with {STREAMS} idle streams", cpu_idle, "CPU-s", "≤ 1.5 (5 %)",
            judge(cpu_idle, at_most=1.5)),
        Row(f"time to open {STREAMS} streams (one after another)", open_seconds, "s", "—", "info"),
        Row("streams still open after the idle period", still_open, "streams", f"{STREAMS}",
            judge(still_open, at_least=STREAMS)),
        Row("Redis connected clients with the streams open", clients, "clients", "—", "info"),
        Row(f"time until Redis saw all {STREAMS} readers leave after the closes", release_seconds, "s", "—", "info"),
    ]  # fmt: skip
    print_rows(rows)
    return rows


def _alive(sock: socket.socket) -> bool:
    """True while the server has not closed the stream (pings may be waiting to be read: drain them)."""
    sock.setblocking(False)
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return False
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        sock.setblocking(True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
