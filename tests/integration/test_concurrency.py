"""Many units in one worker process (the threads pool): one poller for all of them, pools sized for them."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.support.fake_anthropic import Reply

pytestmark = pytest.mark.integration

TURNS = 200


def _slow_answer(body: dict[str, Any], index: int) -> Reply:
    # ~3 s of streamed text per call: long enough for all the turns to be in flight together.
    return Reply(content=[{"type": "text", "text": "a slow answer, streamed"}], pace=0.3, parts=3)


@pytest.mark.timeout(240)
def test_a_threads_worker_runs_two_hundred_turns_at_once_in_one_process(stack):
    """200 chat turns sent at once to one `-P threads -c 200` worker all complete, each with its reply and one
    `turn.completed`, with no connection error in the worker's log. With redis-py's default pool (100
    connections, failing past them) and a watcher thread per unit, 7 to 73 of them failed with
    `MaxConnectionsError: Too many connections`."""
    stack.fake_api.set_handler(_slow_answer)
    worker = stack.worker("w1", concurrency=TURNS, pool="threads")
    client = stack.client()
    refs = [client.send_message(f"many-{i}", f"turn {i}") for i in range(TURNS)]
    with ThreadPoolExecutor(32) as waiters:
        results = list(waiters.map(lambda ref: client.wait(ref, timeout=180), refs))
    failed = [(r.status, r.failure) for r in results if r.status != "completed"]
    assert failed == [], f"{len(failed)} of {TURNS} turns did not complete, e.g. {failed[:3]}"
    assert {r.reply for r in results} == {"a slow answer, streamed"}
    assert all([e.type for e in client.events(ref.chat_id)].count("turn.completed") == 1 for ref in refs[:20])
    log = worker.log()
    assert "MaxConnectionsError" not in log and "Too many connections" not in log
