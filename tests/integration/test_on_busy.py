"""A second message while a turn runs (`on_busy`), end to end: real redis-server, real celery workers, the real
SDK against the fake Messages API (which enforces tool_use/tool_result pairing), counting tool doubles."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest
import redis

from agent.messages import INTERRUPTED_NOTICE, INTERRUPTED_RESULT
from tasks.client import Busy
from tasks.store import keys
from tests.integration.test_stops import _assert_paired_placeholder, _redis, _wait_tool_started, _worker
from tests.support import counting_tools
from tests.support.fake_anthropic import Script, text, tool_call
from tests.support.processes import REPO

pytestmark = pytest.mark.integration


def _first_delta_after(r: redis.Redis, owner: str, turn_id: str, since: str, timeout: float = 30) -> float:
    """Block on the chat's events stream until the first `text.delta` of `turn_id`; when it was seen."""
    deadline, last = time.monotonic() + timeout, since
    while time.monotonic() < deadline:
        for _key, entries in r.xread({keys.events(owner): last}, block=1000) or []:
            for entry_id, fields in entries:
                last = entry_id
                body = json.loads(fields[b"e"])
                if body["type"] == "text.delta" and body.get("turn_id") == turn_id:
                    return time.monotonic()
    raise AssertionError(f"no text.delta of {turn_id}")


def test_interrupt_mid_write_stops_the_turn_with_its_notice_and_the_new_turn_runs_on_its_history(stack):
    """A new message with `on_busy="interrupt"` while a write tool blocks: the running turn ends `stopped`, its
    call answered by the placeholder and the notice `Interrupted by a new message.`; the write ran once; the new
    turn runs next and its request carries that history, paired. Prints the time from the request to the new
    turn's first delta."""
    stack.fake_api.set_handler(Script([tool_call("blocking_write", {"note": "n1"}), text("the second answer")]))
    _worker(stack)
    client, r = stack.client(), _redis(stack)
    first = client.send_message("i1", "first")
    _wait_tool_started(r)
    tail = r.xrevrange(keys.events("chat:i1"), count=1)[0][0].decode()
    asked = time.monotonic()
    second = client.send_message("i1", "second", on_busy="interrupt")
    delta_at = _first_delta_after(r, "chat:i1", second.turn_id, tail)
    print(f"interrupt: request to the new turn's first delta {(delta_at - asked) * 1000:.0f} ms")
    assert client.wait(first, timeout=30).status == "stopped"
    result = client.wait(second, timeout=30)
    assert (result.status, result.reply) == ("completed", "the second answer")

    assert counting_tools.calls(r, "blocking_write") == 1
    transcript = client.transcript("i1")
    assert [m.role for m in transcript] == ["user", "assistant", "user", "notice", "user", "assistant"]
    assert transcript[3].text == INTERRUPTED_NOTICE
    stopped = [e for e in client.events("i1") if e.type == "turn.stopped"]
    assert len(stopped) == 1 and (stopped[0].model_extra or {}).get("reason") == "interrupt"
    request = stack.fake_api.requests[-1]
    tool_use_id = transcript[1].tool_uses[0].id
    _assert_paired_placeholder(request, tool_use_id)
    assert INTERRUPTED_RESULT in json.dumps(request) and "second" in json.dumps(request["messages"][-1])


def test_two_interrupts_at_once_leave_one_turn_running_the_last(stack):
    """Two interrupts sent at the same moment while a write tool blocks: the running turn and the first new turn
    stop (both with the interrupt's notice), the last one runs and completes; the write ran once; every user
    message is in the transcript, in order."""
    stack.fake_api.set_handler(Script([tool_call("blocking_write", {"note": "n1"}), text("last answer")]))
    _worker(stack)
    client, r = stack.client(), _redis(stack)
    first = client.send_message("i2", "first")
    _wait_tool_started(r)
    refs: list = []
    go = threading.Barrier(2)

    def interrupt(text_: str) -> None:
        go.wait()
        refs.append(client_for_thread().send_message("i2", text_, on_busy="interrupt"))

    client_for_thread = stack.client
    threads = [threading.Thread(target=interrupt, args=(t,)) for t in ("second", "third")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert client.wait(first, timeout=30).status == "stopped"
    results = [client.wait(ref, timeout=30) for ref in refs]
    assert sorted(r_.status for r_ in results) == ["completed", "stopped"]
    assert counting_tools.calls(r, "blocking_write") == 1
    transcript = client.transcript("i2")
    users = [m.text for m in transcript if m.role == "user" and m.text]
    assert users[0] == "first" and sorted(users[1:]) == ["second", "third"]
    assert [m.text for m in transcript if m.role == "notice"] == [INTERRUPTED_NOTICE, INTERRUPTED_NOTICE]
    assert transcript[-1].role == "assistant" and stack.fake_api.request_count == 2


def test_reject_refuses_a_busy_chat_in_the_client_the_cli_and_the_api(stack, serve):
    """`reject` while a turn runs: the client raises `Busy` naming it, `baton send --on-busy reject --json` exits 1
    with `{"error": "busy", "turn_id"}`, the API answers 409 with the same fields; nothing is enqueued."""
    stack.fake_api.set_handler(Script([tool_call("blocking_write", {"note": "n1"}), text("done"), text("fifth")]))
    _worker(stack)
    client, r = stack.client(), _redis(stack)
    first = client.send_message("j1", "first")
    _wait_tool_started(r)
    with pytest.raises(Busy) as busy:
        client.send_message("j1", "second", on_busy="reject")
    assert busy.value.turn_id == first.turn_id
    cli = subprocess.run(
        [sys.executable, "-m", "tasks.cli", "send", "j1", "third", "--on-busy", "reject", "--json"],
        cwd=REPO, env=stack.env, capture_output=True, text=True, timeout=60,
    )
    assert cli.returncode == 1 and json.loads(cli.stdout) == {"error": "busy", "turn_id": first.turn_id}
    status, body = serve().post("/api/chats/j1/messages", {"text": "fourth", "on_busy": "reject"})
    assert status == 409 and (body["error"], body["turn_id"]) == ("busy", first.turn_id)
    assert r.llen(keys.turns("chat:j1")) == 1
    r.rpush(counting_tools.RELEASE_KEY, "go")
    assert client.wait(first, timeout=30).status == "completed"
    assert client.wait(client.send_message("j1", "fifth", on_busy="reject"), timeout=30).status == "completed"
