"""`GET /api/chat/{id}/messages` through real workers and `baton serve`, read by the AI SDK's own package (`ai`
7.x): tests/js/history.test.mjs, run by `node --test`. It checks each answer with `validateUIMessages`, compares
its assistant messages with the ones the package assembled from the same turns' streams, and hands a history to
a Chat that resumes the running turn, as a reload with `useChat({messages, resume: true})` does.

`npm ci` in tests/js installs the pinned package (.ci/run does); without Node, or without the install, this
test is skipped and says which.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.integration.test_usechat import TOKEN, node_or_skip
from tests.support.fake_anthropic import ByConversation, Fault, Reply, failing, text, thought, tool_call
from tests.support.processes import REPO

pytestmark = pytest.mark.integration

JS = REPO / "tests" / "js"
NODE_TIMEOUT = 90  # within the per-test timeout, so a hung case reports its log
CASE_TIMEOUT_MS = 45_000


def slow(said: str) -> Reply:
    return Reply([{"type": "text", "text": said}], pace=0.15, parts=20)


def scripts(run: str) -> ByConversation:
    """Each case's replies, keyed by its chat id (the text of its first message)."""
    doomed = Reply([{"type": "text", "text": "SENTINEL words that vanish with the attempt"}], parts=6, pace=0.05)
    return ByConversation(
        {
            f"{run}-two-turns": [
                tool_call("lookup", {"key": "k1"}, text="Let me look that up."),
                text("It is k1."),
                failing(Fault("drop", after_events=7), doomed),
                text("The second answer, replayed whole."),
            ],
            f"{run}-thinking": [
                thought("Look k3 up.", tool_call("lookup", {"key": "k3"})),
                thought("Answer.", text("It is k3.")),
            ],
            f"{run}-running": [slow("An answer that streams slowly enough to reload in the middle.")],
            f"{run}-approval": [tool_call("deploy", {"env": "prod"}), text("Deployed to prod.")],
            f"{run}-stopped": [slow("An answer that is stopped long before its end, so its notice shows.")],
            f"{run}-failure": [Reply([], fault=Fault("http", status=400, message="a request the provider refuses"))],
        }
    )


def test_the_history_as_the_ai_sdk_reads_it(stack, serve, tmp_path: Path):
    node = node_or_skip()
    run = f"h{uuid.uuid4().hex[:6]}"
    stack.fake_api.set_handler(scripts(run))
    stack.worker("w1", concurrency=4)
    api = serve(BATON_API_TOKEN=TOKEN)
    env = {**os.environ, "BATON_URL": api.url, "BATON_TOKEN": TOKEN, "BATON_RUN": run}
    log_path = tmp_path / "node.log"
    with open(log_path, "w") as log:
        done = subprocess.run(
            [node, "--test", f"--test-timeout={CASE_TIMEOUT_MS}", "--test-reporter=spec", "history.test.mjs"],
            cwd=JS, env=env, stdout=log, stderr=subprocess.STDOUT, text=True, timeout=NODE_TIMEOUT,
        )  # fmt: skip
    report = log_path.read_text()
    assert done.returncode == 0, report[-6000:] + "\n--- baton serve ---\n" + api.log()[-3000:]
    assert " fail 0\n" in report and " pass 7\n" in report, report[-2000:]  # every case ran
