"""A coding run whose model tries everything a prompt injection would, through real workers and the fake API.

The fake Messages API scripts hostile `run_command` calls one by one; the worker runs them in the sandbox.
Then: the key is nowhere (tool results, provider requests, Redis, the worker's log), Redis was not reached,
nothing outside the workspace changed, nothing the run started survives it, the legitimate work inside the
workspace succeeded, and the same worker serves the next run. Also the two ends of fail-closed: a worker
without bwrap refuses every command (and says so at start); BATON_SANDBOX=none runs them, loudly.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.conftest import FAKE_KEY
from tests.integration.test_sandbox import _count_uid, redis_writer
from tests.integration.test_secrets import _everything_in_redis
from tests.support.fake_anthropic import Script, text, tool_call
from tests.support.processes import wait_until
from tests.unit.test_workspace import _gone

# Both files run commands as the uid nobody and count its processes machine-wide (the fork-bomb limit, "nothing
# of the run is left"): one xdist worker runs them, one after the other.
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("uid-nobody")]

SURVIVOR = ["sleep", "3600.25"]
# The runs' sandbox uid (BATON_SANDBOX_UID) when the worker is root: no user's, so "nothing of the run is left" counts
# this file's processes only, whatever other tests run as nobody beside it.
RUN_UID = 64_998


@pytest.fixture
def workspace() -> Iterator[Path]:
    """A workspace the sandbox's uid can write: owned by RUN_UID when the worker is root (see BATON_SANDBOX_UID)."""
    root = Path(tempfile.mkdtemp(prefix="baton-run-ws-"))
    root.chmod(0o755)
    if os.geteuid() == 0:
        os.chown(root, RUN_UID, RUN_UID)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _results(requests: list[dict]) -> dict[str, dict]:
    """Every tool_result the provider was sent, by tool_use_id."""
    found: dict[str, dict] = {}
    for body in requests:
        for message in body["messages"]:
            if message["role"] == "user" and isinstance(message["content"], list):
                for block in message["content"]:
                    if block.get("type") == "tool_result":
                        found[block["tool_use_id"]] = block
    return found


def _content(block: dict) -> str:
    content = block["content"]
    return content if isinstance(content, str) else "".join(part.get("text", "") for part in content)


def test_a_hostile_run_is_contained_and_its_legitimate_work_succeeds(stack, workspace):
    """One run, one hostile command per step, then real work; see the module docstring for what is asserted."""
    port = stack.redis_server.port
    host_file = Path("/tmp") / f"baton-host-{uuid.uuid4().hex}"
    outside = workspace.parent / f"{workspace.name}-outside.txt"
    outside.write_text("outside, untouched")
    steps = {
        "environ": "sh -c 'grep -a -o \"sk-ant-[A-Za-z0-9_-]*\" /proc/$PPID/environ /proc/*/environ; "
        "tr \"\\0\" \"\\n\" < /proc/1/environ; echo probed'",
        "redis": redis_writer(port, "written-by-the-run"),
        "host_tmp": f"sh -c 'echo pwned > {host_file} && echo wrote; echo x > {outside}; echo done'",
        "bomb": "bash -c ':(){ :|:& };:'",
        # The bomb's PID namespace is torn down by the kernel after its call returns, asynchronously: its processes,
        # still counted against the uid's limit for a moment, once made bomb_held's very first fork fail (load ~7).
        "settle": "sleep 1",
        # The shell that says "held" forks nothing once its bomb runs: a fork of its own after the bomb's first would
        # race the bomb for the last slot under the limit, and dash exits 2 on "Cannot fork" (1 in 20 at load 6).
        "bomb_held": "sh -c 'sleep 2 & s=$!; (b(){ b|b& }; b); wait $s; echo held'",
        "flood": "head -c 1000000000 /dev/zero",
        "survivor": f"sh -c '{' '.join(SURVIVOR)} > /dev/null 2>&1 & echo started'",
        "symlink": "ln -s .. up",
        "python": "python3 -c \"open('made.txt', 'w').write(str(6 * 7))\"",
        "run_it": "python3 hello.py",
    }
    script = [tool_call("run_command", {"command": command}, id=f"toolu_{name}") for name, command in steps.items()]
    script.insert(9, tool_call("read_file", {"path": f"up/{outside.name}"}, id="toolu_read_up"))
    script.insert(10, tool_call("write_file", {"path": "hello.py", "content": "print(6 * 7)\n"}, id="toolu_write"))
    stack.fake_api.set_handler(Script([*script, text("contained"), text("second run fine")]))
    env = {"BATON_SANDBOX_UID": str(RUN_UID)} if os.geteuid() == 0 else {}
    worker = stack.worker(**env)
    client = stack.client()

    status = client.wait(client.start_run("try to escape", workspace=workspace), timeout=180)
    assert status.status == "completed" and status.reply == "contained", status
    results = {k.removeprefix("toolu_"): v for k, v in _results(stack.fake_api.requests).items()}
    out = {name: _content(block) for name, block in results.items()}

    assert "probed" in out["environ"] and FAKE_KEY not in out["environ"] and "sk-ant" not in out["environ"]
    assert "exit code 1" in out["redis"] and "Connection refused" in out["redis"]
    assert redis.Redis.from_url(stack.redis_server.url).exists("written-by-the-run") == 0
    assert "wrote" in out["host_tmp"] and not host_file.exists()  # its own /tmp, not the host's
    assert outside.read_text() == "outside, untouched"
    assert not results["bomb"].get("is_error") and "Cannot fork" in out["bomb_held"] and "held" in out["bomb_held"]
    assert out["flood"].startswith("exit code 0") and "characters cut" in out["flood"] and len(out["flood"]) < 17_000
    assert "started" in out["survivor"] and _gone(SURVIVOR)
    assert results["read_up"].get("is_error") and "outside the workspace" in out["read_up"]
    assert out["run_it"] == "exit code 0\n--- stdout ---\n42\n"
    assert (workspace / "made.txt").read_text() == "42"
    if os.geteuid() == 0:  # nothing of the run is left running (the kernel tears a PID namespace down async)
        wait_until(lambda: _count_uid(RUN_UID) == 0, 10, what="the run's processes to be gone")

    assert worker.alive
    second = client.wait(client.start_run("and now something normal", workspace=workspace), timeout=60)
    assert second.status == "completed" and second.reply == "second run fine"

    assert FAKE_KEY not in json.dumps(stack.fake_api.requests)
    assert FAKE_KEY.encode() not in _everything_in_redis(redis.Redis.from_url(stack.redis_server.url))
    assert FAKE_KEY not in worker.log()


def test_without_bwrap_every_command_is_refused_and_the_worker_says_so(stack, workspace):
    """A worker whose PATH has no bwrap warns once at start, and its run_command calls come back as is_error
    results naming the fix; nothing ran. The run itself goes on (the model is told, not the run failed)."""
    stack.fake_api.set_handler(
        Script([tool_call("run_command", {"command": "touch ran.txt"}, id="toolu_touch"), text("told")])
    )
    worker = stack.worker(PATH=os.path.dirname(sys.executable))
    assert "run_command will refuse every command" in worker.log()
    assert "`bwrap` is not installed" in worker.log()
    client = stack.client()
    status = client.wait(client.start_run("touch a file", workspace=workspace), timeout=60)
    assert status.status == "completed" and status.reply == "told"
    refused = _results(stack.fake_api.requests)["toolu_touch"]
    assert refused.get("is_error") is True
    assert "sandbox is unavailable" in _content(refused) and "BATON_SANDBOX=none" in _content(refused)
    assert not (workspace / "ran.txt").exists()


def test_sandbox_none_runs_commands_unconfined_and_warns(stack, workspace):
    """BATON_SANDBOX=none, set on purpose: the worker logs a loud warning and the command runs on the host."""
    marker = Path("/tmp") / f"baton-unconfined-{uuid.uuid4().hex}"
    stack.fake_api.set_handler(
        Script([tool_call("run_command", {"command": f"touch {marker}"}, id="toolu_touch"), text("ran")])
    )
    try:
        worker = stack.worker(BATON_SANDBOX="none")
        assert "WARNING" in worker.log() and "run_command runs model-chosen commands UNCONFINED" in worker.log()
        client = stack.client()
        status = client.wait(client.start_run("touch a host file", workspace=workspace), timeout=60)
        assert status.status == "completed"
        assert _results(stack.fake_api.requests)["toolu_touch"].get("is_error") is not True
        assert marker.exists()
    finally:
        marker.unlink(missing_ok=True)
