"""Hostile commands through the real `run_command` tool, in the real bubblewrap sandbox.

Each test runs what a prompt-injected model would try and checks the host side: the secret is not readable,
the test's own redis-server on 127.0.0.1 cannot be reached, nothing appears outside the workspace, no host
process is visible, limits stop a fork bomb and a runaway write, and a sandbox that cannot start runs nothing.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from agent.tools import ToolOutcome, execute
from agent.tools.sandbox import Limits, SandboxPolicy
from agent.tools.workspace import workspace_tools
from tests.conftest import FAKE_KEY
from tests.support.processes import REPO

# Both files run commands as the uid nobody and count its processes machine-wide (the fork-bomb limit, "nothing
# of the run is left"): one xdist worker runs them, one after the other.
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("uid-nobody")]

NOBODY = 65534
BOMB_UID = 64_999  # no user's: the fork bomb's own, so nothing else counts against its process limit
# The bomb runs in a subshell and the shell that says "still-here" forks nothing after it: a fork of its own after
# the bomb's first would race the bomb for the last slot under the limit, and dash exits 2 on "Cannot fork".
HELD_BOMB = "sh -c 'sleep 2 & s=$!; (b(){ b|b& }; b); wait $s; echo still-here'"


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


SANDBOX = SandboxPolicy()


@pytest.fixture
def nobody_ws() -> Iterator[Path]:
    """A workspace owned by `nobody` on a path it can traverse (pytest's tmp dirs are root-only)."""
    root = _workspace_of(NOBODY)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _workspace_of(uid: int) -> Path:
    root = Path(tempfile.mkdtemp(prefix=f"baton-sandbox-{uid}-"))
    root.chmod(0o755)
    os.chown(root, uid, uid)
    return root


def run(ws: Path, command: str, policy: SandboxPolicy | None = SANDBOX, **kw) -> ToolOutcome:
    tools = {t.name: t for t in workspace_tools(ws, sandbox=policy, **kw)}
    return execute(tools["run_command"], {"command": command})


def stdout(outcome: ToolOutcome) -> str:
    """The command's stdout from a tool result (empty when it printed nothing)."""
    assert not outcome.is_error, outcome.content
    if "--- stdout ---\n" not in outcome.content:
        return ""
    return outcome.content.split("--- stdout ---\n", 1)[1].split("\n--- stderr ---", 1)[0]


# What the reporter ran, then every environ the command can reach.
ENVIRON_PROBE = """grep -a -o 'sk-ant-[A-Za-z0-9_-]*' /proc/$PPID/environ
echo "== pid 1"; tr '\\0' '\\n' < /proc/1/environ
for f in /proc/[0-9]*/environ; do echo "== $f"; tr '\\0' '\\n' < "$f"; done
"""
PARENT = """import sys
from agent.tools.sandbox import SandboxPolicy
from agent.tools import execute
from agent.tools.workspace import workspace_tools
policy = SandboxPolicy() if sys.argv[2] == "bwrap" else None
tools = {t.name: t for t in workspace_tools(sys.argv[1], sandbox=policy)}
print(execute(tools["run_command"], {"command": "sh probe.sh"}).content)
"""


def test_no_environ_in_the_sandbox_holds_the_secret(ws: Path, tmp_path: Path):
    """A parent process holding the API key in its real environment (as a worker does) runs the tool; the
    command reads its parent's, pid 1's and every other /proc/*/environ it can see: the key is in none. The
    same command unconfined prints it — why the sandbox exists, and proof that the probe sees a leak."""
    (ws / "probe.sh").write_text(ENVIRON_PROBE)
    (tmp_path / "parent.py").write_text(PARENT)
    env = {**os.environ, "ANTHROPIC_API_KEY": FAKE_KEY, "PYTHONPATH": str(REPO)}

    def through(mode: str) -> str:
        done = subprocess.run(
            [sys.executable, str(tmp_path / "parent.py"), str(ws), mode],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    sandboxed = through("bwrap")
    assert "== pid 1" in sandboxed and "== /proc/1/environ" in sandboxed
    assert FAKE_KEY not in sandboxed and "ANTHROPIC" not in sandboxed
    assert FAKE_KEY in through("none")


def redis_writer(port: int, key: str) -> str:
    """A command that connects to Redis on 127.0.0.1:port, SETs `key` and prints the reply."""
    command = f"SET {key} reached\\r\\n"
    return (
        f"python3 -c \"import socket; s = socket.create_connection(('127.0.0.1', {port}), timeout=3); "
        f"s.sendall(b'{command}'); print(s.recv(16))\""
    )


def test_the_hosts_redis_on_loopback_is_unreachable(ws: Path, redis_server):
    """A TCP connect to the test's redis-server on 127.0.0.1 fails in the sandbox and the key it tried to set
    does not exist; with BATON_SANDBOX_NETWORK=on the same command sets it (so the check can tell them apart)."""
    store = redis.Redis.from_url(redis_server.url)
    refused = run(ws, redis_writer(redis_server.port, "from-sandbox"))
    assert not refused.is_error and refused.content.startswith("exit code 1")
    assert "Connection refused" in refused.content and store.exists("from-sandbox") == 0
    allowed = run(ws, redis_writer(redis_server.port, "from-sandbox"), SandboxPolicy(network=True))
    assert "exit code 0" in allowed.content and "+OK" in allowed.content
    assert store.get("from-sandbox") == b"reached"


def test_writes_outside_the_workspace_fail_or_stay_private(ws: Path):
    """The host's /tmp, $HOME and /usr cannot be written: /tmp is a private tmpfs, the rest are not there or
    read-only. The host file never appears; a file in the workspace does."""
    marker = f"baton-sandbox-{uuid.uuid4().hex}"
    host_tmp, host_home = Path("/tmp") / marker, Path(os.path.expanduser("~")) / marker
    out = run(
        ws,
        f"sh -c 'echo x > /tmp/{marker}; echo tmp=$?; echo x > {host_home}; echo home=$?; "
        f"echo x > /usr/{marker}; echo usr=$?; echo x > /{marker}; echo root=$?; echo ok > inside.txt'",
    )
    text = stdout(out)
    assert "tmp=0" in text  # it may write its own /tmp ...
    assert not host_tmp.exists()  # ... which is not the host's
    assert "home=0" not in text and not host_home.exists()
    assert "usr=0" not in text and not Path(f"/usr/{marker}").exists()
    assert "root=0" not in text and not Path(f"/{marker}").exists()
    assert (ws / "inside.txt").read_text() == "ok\n"


def test_no_host_process_is_visible(ws: Path):
    """`ps -e` and `ls /proc` show only the sandbox's own few processes (its PID namespace), not this test."""
    ps = stdout(run(ws, "ps -e -o pid=,comm="))
    names = [line.split(None, 1)[1] for line in ps.strip().splitlines()]
    assert len(names) <= 3 and "ps" in names, ps
    assert not any("python" in name or "pytest" in name for name in names)
    pids = [int(p) for p in stdout(run(ws, "ls /proc")).split() if p.isdigit()]
    assert pids and max(pids) < 10 and os.getpid() not in pids


def _count_uid(uid: int) -> int:
    """Host processes whose real uid is `uid` (from status: /proc/PID's owner is root for non-dumpable ones)."""
    count = 0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                status = (entry / "status").read_text()
            except (FileNotFoundError, ProcessLookupError):
                continue
            uids = next((line.split()[1:] for line in status.splitlines() if line.startswith("Uid:")), [])
            if uids and int(uids[0]) == uid:
                count += 1
    return count


@pytest.mark.skipif(os.geteuid() != 0, reason="run_as needs a root worker; a non-root worker is limited as itself")
def test_a_fork_bomb_is_stopped_by_the_process_limit():
    """A fork bomb that keeps its sandbox alive for 2 s: as an unprivileged uid (run_as; the kernel never
    limits root's processes) it never gets past the process limit, it is told so (`Cannot fork`), the call
    returns, and afterwards the worker side still forks fine and nothing of the bomb is left."""
    # A uid of its own, not nobody's: other tests' sandboxes run as nobody, side by side with this one under xdist,
    # and the kernel's process limit and the counts below are per uid.
    ws = _workspace_of(BOMB_UID)
    assert _count_uid(BOMB_UID) == 0, "another process runs as the bomb's uid; the count below would be wrong"
    policy = SandboxPolicy(run_as=BOMB_UID, limits=Limits(processes=48))
    peak = 0
    done = threading.Event()

    def watch() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, _count_uid(BOMB_UID))
            time.sleep(0.01)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        started = time.monotonic()
        outcome = run(ws, HELD_BOMB, policy, command_timeout=30)
        elapsed = time.monotonic() - started
    finally:
        done.set()
        watcher.join()
    assert not outcome.is_error, outcome.content
    assert "Cannot fork" in outcome.content and "still-here" in outcome.content, outcome.content
    assert 0 < peak <= 48 + 2, peak  # +2: the watcher may see setpriv/bwrap in the middle of exec
    assert elapsed < 20
    assert stdout(run(ws, "echo alive")) == "alive\n"
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _count_uid(BOMB_UID):
        time.sleep(0.05)
    assert _count_uid(BOMB_UID) == 0
    shutil.rmtree(ws, ignore_errors=True)


def test_a_runaway_write_stops_at_the_file_size_limit(ws: Path):
    """Writing 50 MB into one file under a 5 MB limit: the writer is stopped (SIGXFSZ / EFBIG) at 5 MB.
    Filling the private /tmp stops at its size. The worker is untouched."""
    policy = SandboxPolicy(limits=Limits(file_bytes=5 << 20, tmp_bytes=2 << 20))
    out = run(ws, "sh -c 'head -c 50000000 /dev/zero > big; echo rc=$?'", policy)
    assert "rc=0" not in out.content
    assert (ws / "big").stat().st_size <= 5 << 20
    tmp = run(ws, "sh -c 'head -c 4000000 /dev/zero > /tmp/fill; echo rc=$?'", policy)
    assert "rc=0" not in tmp.content and "No space left" in tmp.content


def test_a_runaway_allocation_fails_inside(ws: Path):
    """An 8 GiB allocation under a 1 GiB memory limit raises MemoryError in the command."""
    policy = SandboxPolicy(limits=Limits(memory_bytes=1 << 30))
    out = run(ws, "python3 -c 'bytearray(8 << 30)'", policy)
    assert out.content.startswith("exit code 1") and "MemoryError" in out.content


@pytest.mark.skipif(shutil.which("node", path="/usr/bin:/bin") is None, reason="needs Debian's node in /usr/bin")
def test_the_memory_limit_leaves_reserved_address_space_alone(ws: Path):
    """Under the default limits a runtime that reserves far more address space than it uses still starts:
    node's WebAssembly memory reserves ~10 GiB of guard regions (it failed under a 4 GiB RLIMIT_AS)."""
    out = run(ws, "node -e 'new WebAssembly.Memory({initial: 1}); console.log(\"wasm ok\")'")
    assert out.content == "exit code 0\n--- stdout ---\nwasm ok\n", out.content


def test_a_missing_bwrap_refuses_and_runs_nothing(ws: Path):
    """bwrap not installed: an is_error result saying so and how to fix it; the command did not run."""
    policy = SandboxPolicy(bwrap=str(ws.parent / "no-such-bwrap"))
    out = run(ws, "touch ran.txt", policy)
    assert out.is_error
    assert "sandbox is unavailable" in out.content and "not installed" in out.content
    assert "apt-get install bubblewrap" in out.content and "BATON_SANDBOX=none" in out.content
    assert not (ws / "ran.txt").exists()


def test_a_sandbox_that_cannot_create_namespaces_refuses(ws: Path, tmp_path: Path):
    """A bwrap that fails before the sandbox is up (as in a container forbidding user namespaces) makes the
    call an is_error result quoting bwrap and saying how to fix it; nothing ran."""
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    out = run(ws, "touch ran.txt", dataclasses.replace(SandboxPolicy(), bwrap=str(fake)))
    assert out.is_error and "could not start" in out.content
    assert "No permissions to create new namespace" in out.content and "user namespaces" in out.content
    assert not (ws / "ran.txt").exists()


def test_a_symlink_planted_by_a_command_does_not_open_the_file_tools(ws: Path, tmp_path: Path):
    """Inside the sandbox a command can plant symlinks pointing out of the workspace; the file tools, which run
    in the worker, still refuse to follow them for reading, listing or writing."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("top secret")
    planted = run(ws, f"sh -c 'ln -s / root-link && ln -s .. up && ln -s {shlex.quote(str(outside))}/secret.txt s'")
    assert planted.content.startswith("exit code 0"), planted.content
    tools = {t.name: t for t in workspace_tools(ws)}
    for path in ("root-link/etc/passwd", "up/outside/secret.txt", "s"):
        refused = execute(tools["read_file"], {"path": path})
        assert refused.is_error and "outside the workspace" in refused.content
    assert execute(tools["list_files"], {"path": "up"}).is_error
    assert execute(tools["write_file"], {"path": "up/outside/new.txt", "content": "x"}).is_error
    assert execute(tools["write_file"], {"path": "s", "content": "pwned"}).is_error
    assert (outside / "secret.txt").read_text() == "top secret" and not (outside / "new.txt").exists()


HOLDER = """import sys
from agent.tools.sandbox import SandboxPolicy
from agent.tools import execute
from agent.tools.workspace import workspace_tools
policy = SandboxPolicy() if sys.argv[2] == "bwrap" else None
tools = {t.name: t for t in workspace_tools(sys.argv[1], sandbox=policy)}
execute(tools["run_command"], {"command": sys.argv[3]})
"""


def test_a_killed_worker_takes_its_sandboxed_command_with_it(ws: Path, tmp_path: Path):
    """SIGKILL the process running the tool mid-command (a worker lost to the OOM killer, say): the sandbox
    dies with it (--die-with-parent) instead of running on as an orphan, whatever it started included."""
    from tests.support.processes import wait_until
    from tests.unit.test_workspace import _gone, _host_pids

    (tmp_path / "holder.py").write_text(HOLDER)
    sleeper = ["sleep", "30.4713"]
    holder = subprocess.Popen(
        [sys.executable, str(tmp_path / "holder.py"), str(ws), "bwrap", f"sh -c '{shlex.join(sleeper)} & wait'"],
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        wait_until(lambda: bool(_host_pids(sleeper)), 30, what="the sandboxed sleep to start")
        holder.kill()
        holder.wait(10)
        assert _gone(sleeper)
    finally:
        holder.kill()
        holder.wait(10)
        for pid in _host_pids(sleeper):  # only when the test failed: leave no orphan behind
            os.kill(pid, signal.SIGKILL)
