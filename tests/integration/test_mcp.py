"""MCP tools through real workers and real MCP server processes (tests/support/mcp_server.py, on the `mcp` SDK).

The servers count their calls in the test's Redis, so "ran once" holds across worker processes and restarts.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from agent.messages import INTERRUPTED_RESULT
from agent.tools.commands import probe
from agent.tools.sandbox import SandboxPolicy
from tests.conftest import FAKE_KEY
from tests.integration.test_sandbox import NOBODY
from tests.support.fake_anthropic import Fault, Reply, Script, failing, text, tool_call
from tests.support.mcp_server import key
from tests.support.ports import free_port
from tests.support.processes import REPO, wait_until

pytestmark = pytest.mark.integration

STALL = failing(Fault(kind="stall", seconds=60, after_events=2), like=text("thinking about it for a long time"))


def _stdio(name: str, redis_url: str, **env: str) -> dict:
    return {
        "command": sys.executable,
        "args": ["-m", "tests.support.mcp_server"],
        "env": {"MCP_TEST_REDIS": redis_url, "MCP_TEST_NAME": name, "PYTHONPATH": str(REPO), **env},
    }


def _servers_file(stack, servers: dict) -> str:
    path = stack.tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": servers}))
    return str(path)


def _redis(stack) -> redis.Redis:
    # redis-py 8 reads with a 5 s socket timeout by default; the BLPOPs below wait up to 45 s.
    return redis.Redis.from_url(stack.redis_server.url, socket_timeout=60)


def _calls(r: redis.Redis, server: str, tool: str) -> int:
    return int(r.get(key(server, f"calls:{tool}")) or 0)


def _pids(r: redis.Redis, server: str, what: str = "pids") -> list[int]:
    return [int(p) for p in r.lrange(key(server, what), 0, -1)]


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie is gone as a server; its parent (a killed worker) may not have reaped it yet.
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().split(") ", 1)[1].startswith("Z")


def _kill_servers(r: redis.Redis, *servers: str) -> None:
    for server in servers:
        for pid in _pids(r, server):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def http_server(stack):
    """The same server over streamable HTTP on a free port (its own process, stopped at teardown)."""
    port = free_port()  # this xdist worker's own slice: nobody else's server takes it before ours binds
    env = {**os.environ, "MCP_TEST_REDIS": stack.redis_server.url, "MCP_TEST_NAME": "web", "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.mcp_server", "http", str(port)], cwd=REPO, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )

    def up() -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return True
        except OSError:
            return False

    wait_until(up, 30, what="the HTTP MCP server")
    yield f"http://127.0.0.1:{port}/mcp"
    proc.kill()
    proc.wait(10)


def _events(client, ident: str, kind: str) -> list[dict]:
    return [e.model_extra for e in client.events(ident) if e.type == kind]


def test_a_turn_calls_read_and_write_tools_of_a_stdio_and_an_http_server_each_once(stack, http_server):
    """One answer calls a stdio server's read and write and an HTTP server's write: each runs once, the events
    name the server, the write gets the call's idempotency key in `_meta`, and `baton tools` lists them all."""
    r = _redis(stack)
    path = _servers_file(
        stack, {"notes": _stdio("notes", stack.redis_server.url), "web": {"url": http_server, "headers": {}}}
    )
    calls = Reply([
        {"type": "tool_use", "id": "toolu_r", "name": "notes__lookup", "input": {"key_name": "k"}},
        {"type": "tool_use", "id": "toolu_w", "name": "notes__put_note", "input": {"note": "n"}},
        {"type": "tool_use", "id": "toolu_h", "name": "web__record_note", "input": {"note": "h"}},
    ])
    stack.fake_api.set_handler(Script([calls, text("All done.")]))
    stack.worker("w1", BATON_MCP_SERVERS=path)
    client = stack.client()
    result = client.wait(client.send_message("m1", "use the tools"), timeout=60)
    assert result.status == "completed" and result.reply == "All done.", result
    assert (_calls(r, "notes", "lookup"), _calls(r, "notes", "put_note"), _calls(r, "web", "record_note")) == (1, 1, 1)
    offered = {t["name"] for t in stack.fake_api.requests[0]["tools"]}
    assert {"notes__lookup", "notes__put_note", "web__record_note", "lookup"} <= offered
    results = {b.tool_use_id: b for m in client.transcript("m1") for b in m.tool_results}
    assert results["toolu_r"].content == "value-of-k (call 1)" and not results["toolu_r"].is_error
    assert results["toolu_h"].content == "recorded 'h' (call 1)"
    assert [k.decode() for k in r.lrange(key("notes", "keys"), 0, -1)] == ["chat:m1:toolu_w"]
    called = {e["tool_use_id"]: e.get("server") for e in _events(client, "m1", "tool.called")}
    done = {e["tool_use_id"]: e.get("server") for e in _events(client, "m1", "tool.result")}
    assert called == done == {"toolu_r": "notes", "toolu_w": "notes", "toolu_h": "web"}

    listed = subprocess.run(
        [sys.executable, "-m", "tasks.cli", "tools", "--json"], cwd=REPO, capture_output=True, text=True, timeout=60,
        env={**stack.env, "BATON_MCP_SERVERS": path, "BATON_MCP_APPROVAL": "destructive"},
    )
    assert listed.returncode == 0, listed.stderr
    tools = {t["name"]: t for t in json.loads(listed.stdout)["tools"]}
    assert tools["notes__lookup"] | {"description": ""} == {
        "name": "notes__lookup", "effect": "read", "idempotent": False, "approval": False, "source": "mcp:notes",
        "description": "",
    }
    assert (tools["notes__put_note"]["effect"], tools["notes__put_note"]["idempotent"]) == ("write", True)
    assert tools["notes__delete_note"]["approval"] is True and tools["web__delete_note"]["source"] == "mcp:web"
    assert tools["record_note"]["source"] == "python:tests.support.counting_tools"


def test_sigkill_mid_write_the_second_worker_never_repeats_it(stack):
    """SIGKILL the worker (and so its server's stdin) inside a non-idempotent MCP write: the second worker's
    resume finds the `committing` entry and answers the placeholder; the write ran once, the turn completes."""
    r = _redis(stack)
    path = _servers_file(stack, {"notes": _stdio("notes", stack.redis_server.url)})
    stack.fake_api.set_handler(
        Script([tool_call("notes__blocking_write", {"note": "once"}, id="toolu_b"), text("recovered")])
    )
    w1 = stack.worker("w1", BATON_MCP_SERVERS=path, BATON_LEASE_TTL="3")
    client = stack.client()
    try:
        ref = client.send_message("m2", "write once")
        assert r.blpop([key("notes", "started")], timeout=45) is not None
        w1.kill9()
        stack.worker("w2", BATON_MCP_SERVERS=path, BATON_LEASE_TTL="3")
        result = client.wait(ref, timeout=60)
        assert result.status == "completed" and result.reply == "recovered", result
        assert _calls(r, "notes", "blocking_write") == 1
        (block,) = [b for m in client.transcript("m2") for b in m.tool_results]
        assert block.content == INTERRUPTED_RESULT
        assert [e["status"] for e in _events(client, "m2", "tool.result")] == ["interrupted"]
    finally:
        r.rpush(key("notes", "release"), "go")
        _kill_servers(r, "notes")


def test_sigkill_mid_idempotent_write_the_second_worker_re_runs_it_under_the_same_key(stack):
    """SIGKILL the worker and its server inside an idempotent MCP write (`idempotentHint: true`): the second
    worker's resume runs the call again with the same key in `_meta`, so the server can tell the repeat; the turn
    completes with that call's real result."""
    r = _redis(stack)
    path = _servers_file(stack, {"notes": _stdio("notes", stack.redis_server.url)})
    stack.fake_api.set_handler(
        Script([tool_call("notes__blocking_put", {"note": "n"}, id="toolu_p"), text("stored")])
    )
    w1 = stack.worker("w1", concurrency=1, BATON_MCP_SERVERS=path, BATON_LEASE_TTL="3")
    client = stack.client()
    try:
        ref = client.send_message("m5", "store it")
        assert r.blpop([key("notes", "started")], timeout=45) is not None
        w1.kill9()
        _kill_servers(r, "notes")  # its server dies too, its call unanswered (it would take the release below)
        stack.worker("w2", concurrency=1, BATON_MCP_SERVERS=path, BATON_LEASE_TTL="3")
        assert r.blpop([key("notes", "started")], timeout=45) is not None
        r.rpush(key("notes", "release"), "go")
        result = client.wait(ref, timeout=60)
        assert result.status == "completed" and result.reply == "stored", result
        assert [k.decode() for k in r.lrange(key("notes", "keys"), 0, -1)] == ["chat:m5:toolu_p"] * 2
        (block,) = [b for m in client.transcript("m5") for b in m.tool_results]
        assert block.content == "put 'n' (call 2)" and not block.synthesized
        assert [e["status"] for e in _events(client, "m5", "tool.result")] == ["ok"]
    finally:
        r.rpush(key("notes", "release"), "go")
        _kill_servers(r, "notes")


def test_a_drain_mid_run_closes_the_server_and_the_run_resumes_elsewhere_without_repeats(stack, tmp_path: Path):
    """SIGTERM while a coding run's MCP write runs: the write gets its grace and its result is recorded, the
    worker's server is closed before the worker exits — even one that ignores its stdin closing (the SDK then
    kills it) — and the run resumes on another worker, nothing repeated. BATON_SANDBOX=none: the run uses the
    worker's own servers, as a chat turn does (this server needs the test's venv and Redis, which a sandbox hides)."""
    r = _redis(stack)
    path = _servers_file(stack, {"notes": _stdio("notes", stack.redis_server.url, MCP_TEST_LINGER="1")})
    stack.fake_api.set_handler(
        Script([tool_call("notes__blocking_write", {"note": "a"}), STALL, tool_call("notes__lookup", {"key_name": "x"}),
                text("done")])
    )
    worker_a = stack.worker("a", pool="prefork", concurrency=1, BATON_MCP_SERVERS=path, BATON_SANDBOX="none")
    client = stack.client()
    try:
        ref = client.start_run("write a note", workspace=tmp_path)
        assert r.blpop([key("notes", "started")], timeout=45) is not None
        (first,) = _pids(r, "notes")
        worker_a.terminate()
        r.rpush(key("notes", "release"), "go")  # the write finishes inside its drain grace
        assert worker_a.wait_exit(timeout=30) == 0
        assert _gone(first), "the worker exited and left its MCP server running"
        stack.worker("b", BATON_MCP_SERVERS=path, BATON_SANDBOX="none")
        status = client.wait(ref, timeout=60)
        assert status.status == "completed" and status.reply == "done", status
        assert _calls(r, "notes", "blocking_write") == 1 and _calls(r, "notes", "lookup") == 1
        causes = [e["cause"] for e in _events(client, ref.run_id, "run.interrupted")]
        assert causes == ["platform_deploy"]
        results = [b for m in client.transcript(ref.run_id) for b in m.tool_results]
        assert [b.content for b in results if b.synthesized] == []
    finally:
        _kill_servers(r, "notes")


def test_approval_by_annotation_and_a_crashing_server_restarted(stack):
    """BATON_MCP_APPROVAL=destructive: a write with `destructiveHint: false` runs, a destructive one waits for a
    person and runs once approved. A server that dies mid-call answers `is_error` naming it, is started again,
    and the next call works; a server that cannot start is logged and the worker serves the rest."""
    r = _redis(stack)
    path = _servers_file(
        stack, {"notes": _stdio("notes", stack.redis_server.url), "broken": {"command": "/nonexistent/mcp-server"}}
    )
    both = Reply([
        {"type": "tool_use", "id": "toolu_rec", "name": "notes__record_note", "input": {"note": "keep"}},
        {"type": "tool_use", "id": "toolu_del", "name": "notes__delete_note", "input": {"note": "old"}},
    ])
    stack.fake_api.set_handler(Script([
        both, text("Deleted."),
        tool_call("notes__crash", {"reason": "boom"}, id="toolu_crash"),
        tool_call("notes__lookup", {"key_name": "after"}, id="toolu_after"), text("Recovered."),
    ]))
    w1 = stack.worker("w1", BATON_MCP_SERVERS=path, BATON_MCP_APPROVAL="destructive")
    client = stack.client()
    try:
        ref = client.send_message("m4", "record and delete")
        parked = client.wait(ref, timeout=60)
        assert (parked.status, parked.waiting_reason) == ("waiting", "approval"), parked
        (asked,) = _events(client, "m4", "tool.approval_requested")
        assert asked["name"] == "notes__delete_note"
        assert (_calls(r, "notes", "record_note"), _calls(r, "notes", "delete_note")) == (1, 0)
        client.approve("m4", "toolu_del")
        result = client.wait(ref, timeout=60)
        assert result.status == "completed" and result.reply == "Deleted.", result
        assert (_calls(r, "notes", "record_note"), _calls(r, "notes", "delete_note")) == (1, 1)

        result = client.wait(client.send_message("m4", "crash it"), timeout=60)
        assert result.status == "completed" and result.reply == "Recovered.", result
        blocks = {b.tool_use_id: b for m in client.transcript("m4") for b in m.tool_results}
        assert blocks["toolu_crash"].is_error and "MCP server 'notes' died" in blocks["toolu_crash"].content
        assert not blocks["toolu_after"].is_error and blocks["toolu_after"].content.startswith("value-of-after")
        assert len(_pids(r, "notes")) >= 2  # started again after the crash
        assert "mcp: server broken cannot start" in w1.log()
    finally:
        _kill_servers(r, "notes")


BANNERS = ["Starting default (STDIO) server...", "Secure MCP Filesystem Server running on stdio"]


def _records(worker, logger: str) -> list[dict]:
    """The JSON records of `logger` in a worker's log (BATON_LOG_JSON)."""
    out = []
    for line in worker.log().splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if isinstance(record, dict) and record.get("logger") == logger:
                out.append(record)
    return out


def test_a_stdio_servers_stderr_reaches_the_workers_log_one_record_per_line_named(stack):
    """A real server writing banners to its stderr at start and a line mid-call: each line is one INFO record of
    the logger `baton.mcp` in the worker's log, `notes: LINE`, once per server process started (one per prefork
    child), and no line of the worker's log carries them bare (they came out raw, outside any record)."""
    r = _redis(stack)
    path = _servers_file(stack, {"notes": _stdio("notes", stack.redis_server.url, MCP_TEST_STDERR="|".join(BANNERS))})
    stack.fake_api.set_handler(Script([tool_call("notes__say_on_stderr", {"line": "mid-call, to stderr"}),
                                       text("said it")]))
    worker = stack.worker("w1", BATON_MCP_SERVERS=path, BATON_LOG_JSON="true")
    client = stack.client()
    result = client.wait(client.send_message("m-stderr", "speak up"), timeout=60)
    assert result.status == "completed" and result.reply == "said it", result

    def said(line: str) -> list[dict]:
        return [x for x in _records(worker, "baton.mcp") if x["message"] == f"notes: {line}"]

    wait_until(lambda: len(_pids(r, "notes")) == 2 and all(len(said(b)) == 2 for b in BANNERS), 30,
               what="each child's server to start and its banners to be logged")
    assert [x["level"] for b in BANNERS for x in said(b)] == ["INFO"] * 4
    wait_until(lambda: len(said("mid-call, to stderr")) == 1, 10, what="the mid-call line")
    bare = [x for x in worker.log().splitlines() if any(b in x for b in BANNERS) and not x.startswith("{")]
    assert bare == [], bare


def test_a_bad_servers_file_fails_worker_start_naming_the_variable(stack):
    path = stack.tmp_path / "bad.json"
    path.write_text(json.dumps({"mcpServers": {"a__b": {"command": "x"}}}))
    with pytest.raises(RuntimeError, match="BATON_MCP_SERVERS"):
        stack.worker("bad", BATON_MCP_SERVERS=str(path))


@pytest.fixture
def sandboxed_workspace() -> Iterator[Path]:
    """A run's workspace the sandbox's uid can write (owned by nobody under a root worker), holding the
    standard-library MCP server (what the sandbox shows of the host is /usr and the workspace, not the venv)."""
    run_as = NOBODY if os.geteuid() == 0 else None
    reason = probe(SandboxPolicy(run_as=run_as))
    if reason is not None:
        pytest.skip(f"bubblewrap cannot run here: {reason}")
    root = Path(tempfile.mkdtemp(prefix="baton-mcp-ws-"))
    root.chmod(0o755)
    shutil.copy(REPO / "tests" / "support" / "mcp_probe_server.py", root / "mcp_probe.py")
    if run_as is not None:
        os.chown(root, NOBODY, NOBODY)
    yield root
    shutil.rmtree(root, ignore_errors=True)


# Its server runs as the uid nobody, whose processes test_sandbox.py's fork bomb counts machine-wide: never beside it.
@pytest.mark.xdist_group("uid-nobody")
def test_a_coding_runs_stdio_server_runs_in_its_sandbox(stack, sandboxed_workspace: Path):
    """A coding run's stdio server starts inside the run's sandbox: its cwd the workspace, its environment the
    sandbox's minimal one plus the file's `env`; it cannot read the worker's key (its environment, /proc of the
    worker or of anything) nor reach the test's Redis; what it writes to stderr reaches the worker's log; it is
    stopped when the run settles."""
    ws = sandboxed_workspace
    path = _servers_file(stack, {"box": {"command": "python3", "args": [str(ws / "mcp_probe.py")],
                                         "env": {"FROM_THE_FILE": "yes"}}})
    env = {"BATON_SANDBOX_UID": str(NOBODY)} if os.geteuid() == 0 else {}
    worker = stack.worker("w1", concurrency=1, BATON_MCP_SERVERS=path, **env)
    assert worker.proc is not None
    probes = {
        "env": "env", "cwd": "cwd", "worker": f"read /proc/{worker.proc.pid}/environ", "secrets": "secrets",
        "redis": f"connect 127.0.0.1:{stack.redis_server.port}",
    }
    steps = [tool_call("box__probe", {"what": what}, id=f"toolu_{name}") for name, what in probes.items()]
    stack.fake_api.set_handler(Script([*steps, text("probed")]))
    client = stack.client()
    ref = client.start_run("probe the server", workspace=ws)
    status = client.wait(ref, timeout=90)
    assert status.status == "completed" and status.reply == "probed", status
    out = {b.tool_use_id.removeprefix("toolu_"): b for m in client.transcript(ref.run_id) for b in m.tool_results}
    assert not any(b.is_error for b in out.values()), {k: b.content for k, b in out.items()}
    seen = {name: out[name].content[:300] for name in ("worker", "secrets", "redis", "cwd", "env")}
    assert seen["worker"].startswith("unreadable") and FAKE_KEY not in seen["worker"], seen
    assert seen["secrets"] == "none found", seen
    assert seen["redis"].startswith("unreachable"), seen
    assert seen["cwd"] == os.path.realpath(ws), seen
    names = set(seen["env"].split())
    assert "FROM_THE_FILE" in names and names <= {"FROM_THE_FILE", "PATH", "HOME", "LANG", "PWD"}, names
    assert {e.get("server") for e in _events(client, ref.run_id, "tool.result")} == {"box"}
    # Its stderr, from inside the sandbox, reaches the worker's log as a record naming it.
    banner = f"box: probe server running on stdio in {os.path.realpath(ws)}"
    wait_until(lambda: banner in worker.log(), 10, what="the sandboxed server's stderr in the worker's log")
    if os.geteuid() == 0:  # the sandbox's processes run as nobody: none is left once the run has settled
        wait_until(lambda: _sandboxed(ws / "mcp_probe.py") == [], 10, what="the run's MCP server to stop")


def _sandboxed(program: Path) -> list[int]:
    """Host pids running `program` as nobody (the run's sandboxed server; the worker's own copy runs as root)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            status = (entry / "status").read_text().splitlines()
            uid = int(next(line for line in status if line.startswith("Uid:")).split()[1])
            cmdline = (entry / "cmdline").read_bytes()
        except (OSError, ValueError, StopIteration):
            continue
        if uid == NOBODY and str(program).encode() in cmdline:
            found.append(int(entry.name))
    return found
