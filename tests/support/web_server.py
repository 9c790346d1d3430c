"""A real `python -m tasks.cli serve` subprocess on a free port, and a small JSON-over-HTTP helper."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from tests.support.ports import free_port
from tests.support.processes import REPO, wait_until
from tests.support.sse_client import SseStream


class ApiServer:
    """`baton serve` (or another ASGI server command) as its own process; `stop()` ends it (SIGTERM, then SIGKILL)."""

    def __init__(
        self, env: dict[str, str], logdir: Path, *, host: str = "127.0.0.1", command: list[str] | None = None
    ) -> None:
        """`command` replaces `baton serve` (e.g. uvicorn on an app that mounts create_app); it gets
        `--host H --port P` appended."""
        self.env = env
        self.host = host
        self.port = free_port()
        self.command = command or [sys.executable, "-m", "tasks.cli", "serve"]
        self.log_path = logdir / f"serve-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def token(self) -> str | None:
        return self.env.get("BATON_API_TOKEN")

    def start(self, timeout: float = 30) -> ApiServer:
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        cmd = [*self.command, "--host", self.host, "--port", str(self.port)]
        self.proc = subprocess.Popen(
            cmd, cwd=REPO, env=self.env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )
        wait_until(self._listening, timeout, what=f"baton serve on port {self.port}")
        return self

    def _listening(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"baton serve exited with {self.proc.returncode}:\n{self.log()[-3000:]}")
        with contextlib.suppress(OSError), socket.create_connection((self.host, self.port), timeout=0.5):
            return True
        return False

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        if hasattr(self, "_log"):
            self._log.close()

    # -- requests --------------------------------------------------------------------------------

    def _auth(self, token: str | bool | None) -> dict[str, str]:
        chosen = self.token if token is True else token
        return {"Authorization": f"Bearer {chosen}"} if isinstance(chosen, str) else {}

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        raw: bytes | None = None,
        token: str | bool | None = True,
        headers: dict[str, str] | None = None,
        query: dict[str, str] | None = None,
    ) -> tuple[int, Any]:
        """(status, parsed JSON or text). `token=True` sends the server's token as a Bearer header."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        try:
            sent = {**self._auth(token), **(headers or {})}
            payload = raw
            if body is not None:
                payload = json.dumps(body).encode()
                sent.setdefault("Content-Type", "application/json")
            conn.request(method, path + (f"?{urlencode(query)}" if query else ""), body=payload, headers=sent)
            response = conn.getresponse()
            data = response.read().decode("utf-8")
            kind = response.getheader("content-type", "")
            return response.status, json.loads(data) if "json" in kind and data else data
        finally:
            conn.close()

    def get(self, path: str, **kw: Any) -> tuple[int, Any]:
        return self.request("GET", path, **kw)

    def post(self, path: str, body: Any = None, **kw: Any) -> tuple[int, Any]:
        return self.request("POST", path, body, **kw)

    def stream(
        self, path: str, *, last_event_id: str | None = None, token: str | bool | None = True, timeout: float = 30
    ) -> SseStream:
        """Open an SSE stream (`Last-Event-ID` when given)."""
        headers = self._auth(token)
        if last_event_id is not None:
            headers["Last-Event-ID"] = last_event_id
        return SseStream(self.url + path, headers=headers, timeout=timeout)
