"""The AI SDK's own client (`ai` 7.x, what `useChat` runs) against a live `baton serve`, real workers and the
fake provider: tests/js/usechat.test.mjs, run by `node --test` (one Node process for every case).

Its last case is a drain: the client's request is open while its turn's worker gets SIGTERM (from here, once
the turn's first words are in the stream) and the other worker answers it.

`npm ci` in tests/js installs the pinned package (.ci/run does); without Node, or without the install, this
test is skipped and says which.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import redis

from tasks.store import keys
from tasks.store.lease import holder_node
from tests.support.fake_anthropic import ByConversation, Fault, Reply, failing, text, thought, tool_call
from tests.support.processes import REPO, Worker

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
            # Its first attempt streams a whole thinking block and breaks before its call (start, ping, the block's
            # start, three deltas, its signature, its stop: 8 events).
            f"{run}-thinking": [
                failing(Fault("drop", after_events=8), thought("SENTINEL thoughts", tool_call("lookup", {"key": "k"}))),
                thought("Look k2 up.", tool_call("lookup", {"key": "k2"})),
                thought("Answer now.", text("It is k2.")),
            ],
            f"{run}-aborted": [slow("An answer long enough to abort midway through.")],
            f"{run}-last-event-id": [slow("Resumed after the last id it had seen.")],
            f"{run}-approval": [tool_call("deploy", {"env": "prod"}), text("Deployed to prod.")],
            f"{run}-failure": [
                Reply([], fault=Fault("http", status=400, message="a request the provider refuses")),
                text("Answered on the retry."),
            ],
            # Three words, then a stall only the drain ends; the other worker's request gets the answer.
            f"{run}-drain": [failing(Fault("stall", seconds=60, after_events=6), doomed), text(AFTER_DRAIN)],
        }
    )


AFTER_DRAIN = "The one reply, from the worker that took over."


def first_words(r: redis.Redis, chat_id: str, node: subprocess.Popen[str], timeout: float) -> None:
    """Block until the chat's stream holds a text delta (read from the stream, not polled), or Node exits."""
    key, last = keys.events(keys.owner("chat", chat_id)), "0-0"
    deadline = time.monotonic() + timeout
    while node.poll() is None and time.monotonic() < deadline:
        for stream_id, fields in (r.xread({key: last}, block=1000, count=100) or [(key, [])])[0][1]:
            last = stream_id.decode()
            if json.loads(fields[b"e"])["type"] == "text.delta":
                return
    raise AssertionError(f"no text of {chat_id} in its stream (Node exited with {node.poll()})")


def drain_its_worker(r: redis.Redis, chat_id: str, workers: list[Worker]) -> None:
    """SIGTERM the worker holding the chat's lease: a deploy's drain."""
    node = holder_node((r.get(keys.lease(keys.owner("chat", chat_id))) or b"").decode())
    (holding,) = [w for w in workers if w.hostname == node]
    holding.terminate()


def test_the_ai_sdk_client_against_baton_serve(stack, serve, tmp_path: Path):
    node = node_or_skip()
    run = f"r{uuid.uuid4().hex[:6]}"
    stack.fake_api.set_handler(scripts(run))
    workers = [stack.worker("w1", concurrency=4)]
    api = serve(BATON_API_TOKEN=TOKEN)
    env = {**os.environ, "BATON_URL": api.url, "BATON_TOKEN": TOKEN, "BATON_RUN": run}
    log_path = tmp_path / "node.log"
    with open(log_path, "w") as log:
        node_test = subprocess.Popen(
            [node, "--test", "--test-reporter=spec", "usechat.test.mjs"],
            cwd=JS, env=env, stdout=log, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        try:
            workers.append(stack.worker("w2"))  # started while the first cases run; the drain's taker
            r = redis.Redis.from_url(stack.redis_server.url)
            first_words(r, f"{run}-drain", node_test, NODE_TIMEOUT)  # the drain case runs after every other
            drain_its_worker(r, f"{run}-drain", workers)  # its exit is test_drain's; teardown kills it
            node_test.wait(NODE_TIMEOUT)
        finally:
            if node_test.poll() is None:
                node_test.kill()
                node_test.wait()
    report = log_path.read_text()
    assert node_test.returncode == 0, report[-6000:] + "\n--- baton serve ---\n" + api.log()[-3000:]
    drains = [e for e in stack.client().events(f"{run}-drain") if e.model_extra.get("cause") == "platform_deploy"]
    assert len(drains) == 1, "the drain cut the turn once (and the other worker finished it)"
