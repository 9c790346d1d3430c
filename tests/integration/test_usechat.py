"""The AI SDK's own client (`ai` 7.x, what `useChat` runs) against a live `baton serve`, real workers and the
fake provider: tests/js/usechat.test.mjs, run by `node --test` (one Node process for every case).

`npm ci` in tests/js installs the pinned package (.ci/run does); without Node, or without the install, this
test is skipped and says which.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.support.fake_anthropic import ByConversation, Fault, Reply, failing, text, tool_call
from tests.support.processes import REPO

pytestmark = pytest.mark.integration

JS = REPO / "tests" / "js"
TOKEN = "usechat-test-token"
NODE_TIMEOUT = 120

SLOW: dict[str, float] = {"pace": 0.15, "parts": 20}


def node_or_skip() -> str:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the useChat client tests need Node.js 20+ (and `npm ci` in tests/js)")
    if not (JS / "node_modules" / "ai" / "package.json").exists():
        pytest.skip("tests/js has no node_modules: run `npm ci` in tests/js (.ci/run does) for the useChat tests")
    return node


def slow(said: str) -> Reply:
    return Reply([{"type": "text", "text": said}], **SLOW)  # type: ignore[arg-type]


def scripts(run: str) -> ByConversation:
    """Each case's replies, keyed by its chat id (the text of its first message)."""
    doomed = Reply([{"type": "text", "text": "SENTINEL words that vanish with the attempt"}], parts=6, pace=0.05)
    return ByConversation(
        {
            f"{run}-tool-round": [tool_call("lookup", {"key": "k1"}, text="Let me look that up."), text("It is k1.")],
            f"{run}-dropped": [failing(Fault("drop", after_events=7), doomed), text("The whole final answer.")],
            f"{run}-aborted": [slow("An answer long enough to abort midway through.")],
            f"{run}-last-event-id": [slow("Resumed after the last id it had seen.")],
            f"{run}-approval": [tool_call("deploy", {"env": "prod"}), text("Deployed to prod.")],
            f"{run}-failure": [
                Reply([], fault=Fault("http", status=400, message="a request the provider refuses")),
                text("Answered on the retry."),
            ],
        }
    )


def test_the_ai_sdk_client_against_baton_serve(stack, serve, tmp_path: Path):
    node = node_or_skip()
    run = f"r{uuid.uuid4().hex[:6]}"
    stack.fake_api.set_handler(scripts(run))
    stack.worker(concurrency=4)
    api = serve(BATON_API_TOKEN=TOKEN)
    env = {**os.environ, "BATON_URL": api.url, "BATON_TOKEN": TOKEN, "BATON_RUN": run}
    done = subprocess.run(
        [node, "--test", "--test-reporter=spec", "usechat.test.mjs"],
        cwd=JS,
        env=env,
        capture_output=True,
        text=True,
        timeout=NODE_TIMEOUT,
    )
    report = done.stdout + done.stderr
    (tmp_path / "node.log").write_text(report)
    assert done.returncode == 0, report[-6000:] + "\n--- baton serve ---\n" + api.log()[-3000:]
