"""A private RabbitMQ node for integration tests: its own node name, ports, epmd, cookie and data directory.

Nothing here touches the machine's own RabbitMQ on 5672 (nor its epmd on 4369 or its cookie): the node gets
a free AMQP port, a free distribution port, a private epmd port, and a HOME (hence an Erlang cookie) in the
test's tmp directory. `advanced.config` can lower `consumer_timeout` and `channel_tick_interval` so the
consumer-timeout tests take seconds instead of the default 30 min + 60 s tick.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

from tests.support.ports import free_port

RABBITMQ_BIN = Path("/usr/lib/rabbitmq/bin")


def find_rabbitmq_server() -> Path | None:
    """The real start script (not Debian's wrapper, which switches to the rabbitmq user), if installed."""
    direct = RABBITMQ_BIN / "rabbitmq-server"
    if direct.exists():
        return direct
    found = shutil.which("rabbitmq-server")
    return Path(found) if found else None


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


class RabbitMQNode:
    """A rabbitmq-server node on free loopback ports, stopped (and its epmd with it) by `stop()`."""

    def __init__(
        self, workdir: Path, *, consumer_timeout_ms: int | None = None, channel_tick_ms: int | None = None
    ) -> None:
        server = find_rabbitmq_server()
        if server is None:
            raise RuntimeError("rabbitmq-server is not installed (Debian: apt-get install rabbitmq-server)")
        self.server = server
        self.ctl = server.parent / "rabbitmqctl"
        self.dir = workdir
        self.name = f"baton-{uuid.uuid4().hex[:8]}@localhost"
        self.port = free_port()
        self.dist_port = free_port()
        self.epmd_port = free_port()
        self.consumer_timeout_ms = consumer_timeout_ms
        self.channel_tick_ms = channel_tick_ms
        self.proc: subprocess.Popen[bytes] | None = None
        self.epmd: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}//"

    @property
    def env(self) -> dict[str, str]:
        d = self.dir
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(d),  # the Erlang cookie lives here: private to this node and its rabbitmqctl
            "LANG": "C.UTF-8",
            "RABBITMQ_CONF_ENV_FILE": str(d / "rabbitmq-env.conf"),  # not the machine's /etc/rabbitmq one
            "RABBITMQ_CONFIG_FILE": str(d / "rabbitmq.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(d / "advanced.config"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(d / "enabled_plugins"),
            "RABBITMQ_NODENAME": self.name,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "ERL_EPMD_PORT": str(self.epmd_port),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
            "RABBITMQ_MNESIA_BASE": str(d / "mnesia"),
            "RABBITMQ_LOG_BASE": str(d / "log"),
            "RABBITMQ_PID_FILE": str(d / "node.pid"),
        }

    def _write_config(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "rabbitmq-env.conf").write_text("")
        (self.dir / "enabled_plugins").write_text("[].\n")
        (self.dir / "rabbitmq.conf").write_text(
            f"listeners.tcp.default = 127.0.0.1:{self.port}\nloopback_users = none\n"
        )
        rabbit: list[str] = []
        if self.consumer_timeout_ms is not None:
            rabbit.append(f"{{consumer_timeout, {self.consumer_timeout_ms}}}")
        if self.channel_tick_ms is not None:
            # The consumer timeout is checked on each channel's tick (60 s by default on 3.10).
            rabbit.append(f"{{channel_tick_interval, {self.channel_tick_ms}}}")
        (self.dir / "advanced.config").write_text(f"[{{rabbit, [{', '.join(rabbit)}]}}].\n")

    def start(self, timeout: float = 90) -> RabbitMQNode:
        self._write_config()
        self._log = open(self.dir / "server.out", "ab")  # noqa: SIM115 - closed in stop()
        # Our own epmd in the foreground, so we hold its pid (Erlang would otherwise daemonize one we cannot
        # tell apart from others); the node registers with it through ERL_EPMD_PORT.
        self.epmd = subprocess.Popen(
            ["epmd", "-port", str(self.epmd_port), "-address", "127.0.0.1"],
            stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        deadline = time.monotonic() + 10
        while not _port_open(self.epmd_port):
            if self.epmd.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"epmd did not start on port {self.epmd_port}")
            time.sleep(0.05)
        self.proc = subprocess.Popen(
            [str(self.server)], env=self.env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"rabbitmq-server exited with {self.proc.returncode}: {self.output()[-3000:]}")
            # The AMQP listener opens only once the node has booted (after its queues and vhosts).
            if _port_open(self.port) and self.ctl_call("await_startup", timeout=30).returncode == 0:
                return self
            if time.monotonic() > deadline:
                raise RuntimeError(f"rabbitmq-server did not start within {timeout}s: {self.output()[-3000:]}")
            time.sleep(0.25)

    def output(self) -> str:
        path = self.dir / "server.out"
        return path.read_text(errors="replace") if path.exists() else ""

    def ctl_call(self, *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
        """`rabbitmqctl -n NODE ARGS...` against this node (its own cookie, its own epmd). Each call boots an Erlang
        VM: on two cores shared with the suite and two busy loops, one `list_queues` took over 30 s."""
        return subprocess.run(
            [str(self.ctl), "-n", self.name, *args], env=self.env, capture_output=True, text=True, timeout=timeout
        )

    def eval(self, expr: str) -> str:
        done = self.ctl_call("eval", expr)
        if done.returncode != 0:
            raise RuntimeError(f"rabbitmqctl eval failed: {done.stderr or done.stdout}")
        return done.stdout.strip()

    def queues(self) -> dict[str, dict[str, Any]]:
        """Every queue of the default vhost: name -> {messages, type, arguments, policy}."""
        done = self.ctl_call("list_queues", "-q", "--formatter", "json", "name", "messages", "type", "arguments",
                             "policy")
        if done.returncode != 0:
            raise RuntimeError(f"rabbitmqctl list_queues failed: {done.stderr}")
        listed = json.loads(done.stdout or "[]")
        for q in listed:  # arguments come as [name, type, value] triples
            q["arguments"] = {name: value for name, _type, value in q.get("arguments") or []}
        return {q["name"]: q for q in listed}

    def wait_for_messages(self, queue: str, count: int, timeout: float = 15) -> None:
        """Wait until `queue` holds `count` messages (ready + unacknowledged). A quorum queue's count is
        published on the node's statistics tick: measured here, it still showed a message 4 s after its ack."""
        deadline = time.monotonic() + timeout
        while (held := int(self.queues()[queue]["messages"])) != count:
            if time.monotonic() > deadline:
                raise AssertionError(f"{queue} holds {held} messages after {timeout}s, not {count}")
            time.sleep(0.25)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(30)
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)  # beam and erl_child_setup
            self.proc.wait(10)
            self.proc = None
        if self.epmd is not None:
            self.epmd.kill()
            self.epmd.wait(10)
            self.epmd = None
        if hasattr(self, "_log"):
            self._log.close()
