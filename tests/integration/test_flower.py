"""Flower shows why things retried: behind basic auth, with the retry's reason, and /metrics open."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from tasks.demo.embedded_redis import free_port
from tests.support.fake_anthropic import Fault, Script, failing, text, tool_call
from tests.support.processes import REPO, wait_until

pytestmark = pytest.mark.integration


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


def test_flower_lists_an_automatic_resume_as_a_retry_with_its_reason(stack, tmp_path):
    """With Flower behind --basic-auth, an automatic resume is recorded on the task as a retry with a reason a
    person understands; the API refuses requests without credentials; /metrics answers for Prometheus."""
    port = free_port()
    log = open(tmp_path / "flower.log", "wb")  # noqa: SIM115 - closed below
    flower = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "tasks", "flower", f"--port={port}", "--address=127.0.0.1",
         "--basic-auth=ops:s3cret"],
        cwd=REPO, env=stack.env, stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        wait_until(lambda: _get(f"{base}/healthcheck")[0] == 200, 30, 0.2, "flower up")
        assert _get(f"{base}/api/tasks")[0] == 401
        stack.fake_api.set_handler(
            Script([tool_call("lookup", {"key": "f"}), failing(Fault(kind="http", status=529)), text("ok")])
        )
        stack.worker(BATON_RETRY_BUDGET="1")
        client = stack.client()
        ref = client.send_message("flower-chat", "hello")
        assert client.wait(ref, timeout=60).status == "completed"

        seen: dict = {}

        def reason_recorded() -> bool:
            # The task is in state RETRY only until the resumed attempt finishes; its task record keeps
            # the retry's exception (the reason) after that, so we wait for the reason, not the state.
            status, body = _get(f"{base}/api/task/info/{ref.task_id}", "ops:s3cret")
            if status == 200:
                seen.update(json.loads(body))
            return "AutoResume" in str(seen.get("exception"))

        wait_until(reason_recorded, 30, 0.2, "the retry's reason to reach Flower")
        assert seen["name"] == "baton.chat_turn"
        assert "resuming from the stored round" in seen["exception"]
        status, metrics = _get(f"{base}/metrics")
        assert status == 200 and b"flower_events_total" in metrics
    finally:
        flower.terminate()
        flower.wait(20)
        log.close()
