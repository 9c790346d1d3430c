"""Flower shows why things retried: behind basic auth, retries and their reason at a glance, /metrics open."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request

import pytest

from tests.support.fake_anthropic import Fault, Script, failing, text, tool_call
from tests.support.ports import free_port
from tests.support.processes import REPO, wait_until

pytestmark = pytest.mark.integration

AUTH = "ops:s3cret"
STALL = failing(Fault(kind="stall", seconds=60, after_events=2), like=text("thinking about it for a long time"))


def _get(url: str, auth: str | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url)
    if auth:
        request.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as err:
        return err.code, b""
    except OSError:
        return 0, b""


def _tasks(base: str, **query: str) -> dict:
    """Flower's task list API (`/api/tasks`), as the README tells an operator to query it."""
    status, body = _get(f"{base}/api/tasks?{urllib.parse.urlencode(query)}", AUTH)
    return json.loads(body) if status == 200 else {}


def _retried_events(metrics: str, task: str) -> float:
    """The `flower_events_total` sample for `task-retried` events of one task name, summed over workers."""
    total = 0.0
    for labels, value in re.findall(r"^flower_events_total\{([^}]*)\} (\S+)$", metrics, re.M):
        if 'type="task-retried"' in labels and f'task="{task}"' in labels:
            total += float(value)
    return total


@pytest.mark.timeout(240)
def test_flower_shows_an_auto_resume_and_a_drain_as_retries_with_their_reason(stack, tmp_path):
    """Flower started from the repository (so it reads flowerconfig.py, as `celery -A tasks flower` does) lists
    tasks with Retries and Exception columns; after a turn auto-resumes and a run is drained and finished by
    another worker, searching by args (the chat id, the run id) finds each with its retry count, its reason and
    its completed result; the API refuses requests without credentials; /metrics counts the task-retried events."""
    port = free_port()
    log = open(tmp_path / "flower.log", "wb")  # noqa: SIM115 - closed below
    flower = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "tasks", "flower", f"--port={port}", "--address=127.0.0.1",
         f"--basic-auth={AUTH}"],
        cwd=REPO, env=stack.env, stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        wait_until(lambda: _get(f"{base}/healthcheck")[0] == 200, 30, 0.2, "flower up")
        assert _get(f"{base}/api/tasks")[0] == 401
        # The columns come from flowerconfig.py: Flower's default list has neither.
        status, page = _get(f"{base}/tasks", AUTH)
        assert status == 200
        columns = re.findall(rb'<th data-column="([a-z_]+)"', page)
        assert {b"retries", b"exception", b"result"} <= set(columns), columns

        # A chat turn fails at the provider after its tool round and resumes automatically (a Celery retry).
        stack.fake_api.set_handler(
            Script([tool_call("lookup", {"key": "f"}), failing(Fault(kind="http", status=529)), text("ok")])
        )
        worker_a = stack.worker("a", BATON_RETRY_BUDGET="1")
        client = stack.client()
        turn = client.send_message("flower-chat", "hello")
        assert client.wait(turn, timeout=60).status == "completed"

        # A coding run drained off worker a mid-stream, finished by worker b (a retry of the same task).
        stack.fake_api.set_handler(Script([tool_call("record_note", {"note": "a"}), STALL, text("all done")]))
        run = client.start_run("write a note", workspace=tmp_path)
        assert stack.fake_api.wait_for_requests(5, timeout=30)  # 3 for the turn; the run is mid-stream
        stack.worker("b")
        worker_a.terminate()
        worker_a.wait_exit(timeout=15)
        assert client.wait(run, timeout=60).status == "completed"

        found: dict[str, dict] = {}

        def both_recorded() -> bool:
            # The retry count and reason stay on the task after the retry succeeds, beside the unit's result.
            for ident, reason in (("flower-chat", "AutoResume"), (run.run_id, "PlatformInterrupt")):
                for task in _tasks(base, search=f"args:{ident}").values():
                    found[ident] = task
                task = found.get(ident, {})
                if reason not in str(task.get("exception")) or "completed" not in str(task.get("result")):
                    return False
            return True

        wait_until(both_recorded, 30, 0.2, "both tasks to reach Flower with their reason and result")
        chat_task, run_task = found["flower-chat"], found[run.run_id]
        assert chat_task["uuid"] == turn.task_id and chat_task["name"] == "baton.chat_turn"
        assert run_task["uuid"] == run.task_id and run_task["name"] == "baton.coding_run"
        assert chat_task["retries"] == 1 and run_task["retries"] == 1
        assert "resuming from the stored round" in chat_task["exception"]
        assert "Interrupted by a platform deploy" in run_task["exception"]
        # Usually SUCCESS; but when the drained worker's task-retried event reaches Flower after the other
        # worker's task-succeeded, Celery's event state applies the late RETRY anyway (RETRY skips its
        # happens-before check), so a finished unit can read RETRY: its result still says completed.
        assert {chat_task["state"], run_task["state"]} <= {"SUCCESS", "RETRY"}
        assert {turn.task_id, run.task_id} <= set(_tasks(base, search="result:completed"))
        assert set(_tasks(base, taskname="baton.coding_run")) == {run.task_id}

        status, metrics = _get(f"{base}/metrics")
        assert status == 200
        assert _retried_events(metrics.decode(), "baton.chat_turn") >= 1
        assert _retried_events(metrics.decode(), "baton.coding_run") >= 1
    finally:
        flower.terminate()
        flower.wait(20)
        log.close()
