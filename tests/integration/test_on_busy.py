"""A second message while a turn runs (`on_busy`), end to end: real redis-server, real celery workers, the real
SDK against the fake Messages API (which enforces tool_use/tool_result pairing), counting tool doubles."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest
import redis

from agent.messages import INTERRUPTED_NOTICE, INTERRUPTED_RESULT
from tasks.client import Busy, NotFound
from tasks.store import keys
from tests.conftest import Stack
from tests.integration.test_stops import _assert_paired_placeholder, _redis, _wait_tool_started, _worker
from tests.support import counting_tools
from tests.support.fake_anthropic import ByConversation, FakeMessagesServer, Reply, Script, text, tool_call
from tests.support.processes import REPO, RedisServer, Worker

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
    turn's first delta. Shown red once with the stopped call's write started again instead of only answered by
    the placeholder (agent/tools/round.py, `ran is None`): `blocking_write` counted 2."""
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


# -- races through real workers, on one stack shared by the cases below (each on its own chats) ----------------


def _last_user_text(body: dict) -> str:
    """The text of the request's last user message that has any (a tool-result message has none)."""
    for message in reversed(body.get("messages") or []):
        if message.get("role") == "user":
            found = "\n".join(b.get("text", "") for b in _blocks(message) if b.get("type") == "text")
            if found:
                return found
    return ""


def _blocks(message: dict) -> list[dict]:
    content = message.get("content")
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])


class Races:
    """A redis-server, the fake API (each request routed by its last user text, so a turn's replies do not depend
    on how far the turn before it got), and a worker that a case may drain; `worker()` starts one if none lives."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.routes = ByConversation({}, key=self._key)
        stack.fake_api.set_handler(self.routes)
        self.r = _redis(stack)
        self.client = stack.client()
        self.current: Worker | None = None

    def _key(self, body: dict) -> str:
        last = _last_user_text(body)
        return max((k for k in self.routes.scripts if k in last), key=len, default="")

    def route(self, message: str, *replies: Reply) -> None:
        self.routes.scripts[message] = Script(replies)

    def worker(self, name: str = "w1") -> Worker:
        if self.current is None or not self.current.alive:
            self.current = _worker(self.stack, name)
        return self.current

    def runs(self, tool: str, note: str) -> int:
        """How many times `tool` ran with `note` (counting_tools logs every call, across processes)."""
        return sum(1 for c in self.r.lrange(counting_tools.CALLS_KEY, 0, -1) if c.decode() == f"{tool}:{note}")


@pytest.fixture(scope="module")
def races(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Races]:
    tmp = tmp_path_factory.mktemp("races")
    server = RedisServer(tmp / "redis").start()
    fake = FakeMessagesServer().start()
    stack = Stack(server, fake, tmp)
    try:
        yield Races(stack)
    finally:
        stack.stop()
        fake.stop()
        server.stop()


def _settled_as_one(races: Races, chat: str, first, second, *, first_answer: str, second_answer: str) -> str:
    """The invariants every race ends with: the first turn completed or stopped (by the interrupt, with its
    notice), the new turn completed with its answer, no turn left unfinished, both user messages in the transcript
    once, in order. Returns how the first turn ended."""
    client = races.client
    ended = client.wait(first, timeout=30)
    result = client.wait(second, timeout=30)
    assert (result.status, result.reply) == ("completed", second_answer), result
    assert ended.status in ("completed", "stopped"), ended
    transcript = client.transcript(chat)
    users = [m.text for m in transcript if m.role == "user" and m.text]
    assert users == [f"{chat} first", f"{chat} second"], users
    notices = [m.text for m in transcript if m.role == "notice"]
    assistant = [m.text for m in transcript if m.role == "assistant" and m.text]
    if ended.status == "stopped":
        assert notices == [INTERRUPTED_NOTICE] and assistant == [second_answer], (notices, assistant)
    else:
        assert notices == [] and assistant == [first_answer, second_answer], (notices, assistant)
    types = [e.type for e in client.events(chat)]
    assert types.count("turn.started") == 2 or ended.status == "stopped", types  # a stopped turn may not start
    assert types.count("turn.completed") + types.count("turn.stopped") == 2, types
    assert not races.r.llen(keys.queue(f"chat:{chat}")), "a turn is still queued"
    return ended.status


def _next_event(r: redis.Redis, owner: str, turn_id: str, kind: str, timeout: float = 30) -> None:
    """Block on the chat's events stream until `turn_id`'s first event of type `kind`."""
    deadline, last = time.monotonic() + timeout, "0-0"
    while time.monotonic() < deadline:
        for _key, entries in r.xread({keys.events(owner): last}, block=1000) or []:
            for entry_id, fields in entries:
                last = entry_id
                body = json.loads(fields[b"e"])
                if body["type"] == kind and body.get("turn_id") == turn_id:
                    return
    raise AssertionError(f"no {kind} of {turn_id}")


# Where in the first turn's end the interrupt is sent: after its write's `tool.result` (the last model step and
# the settle follow within milliseconds) at offsets across that window, and with the worker frozen (SIGSTOP) at
# that event or at the final answer's first text delta, so the interrupt lands squarely before the settle.
SETTLE_POINTS = [
    ("tool.result", "frozen"), ("tool.result", 0), ("tool.result", 2), ("tool.result", 5), ("tool.result", 10),
    ("tool.result", 20), ("tool.result", 40), ("text.delta", "frozen"), ("text.delta", 0),
]


def test_an_interrupt_as_the_running_turn_settles_leaves_one_turn_the_new_one(races):
    """The interrupt sent as the first turn finishes (its write done, its last model step and settle under way):
    whichever way each race goes, the first turn ends completed (its answer kept) or stopped (its notice), the
    new turn completes, the write ran once, and the fake API (which rejects unpaired tool calls) accepted every
    request. Prints where each point landed."""
    worker = races.worker()
    landed = []
    for i, (event, offset) in enumerate(SETTLE_POINTS):
        chat = f"settle-{i}"
        races.route(f"{chat} first", tool_call("record_note", {"note": chat}), text("the first answer"))
        races.route(f"{chat} second", text("the second answer"))
        first = races.client.send_message(chat, f"{chat} first")
        _next_event(races.r, f"chat:{chat}", first.turn_id, event)
        assert worker.proc is not None
        if offset == "frozen":
            os.killpg(worker.proc.pid, signal.SIGSTOP)
        else:
            time.sleep(offset / 1000)  # a position in the race window, not a wait for something
        try:
            second = races.client.send_message(chat, f"{chat} second", on_busy="interrupt")
        finally:
            if offset == "frozen":
                os.killpg(worker.proc.pid, signal.SIGCONT)
        ended = _settled_as_one(
            races, chat, first, second, first_answer="the first answer", second_answer="the second answer"
        )
        assert races.runs("record_note", chat) == 1
        landed.append(f"{event}+{offset}: {ended}")
    print("interrupt at the settle:", "; ".join(landed))
    assert not races.stack.fake_api.rejections, races.stack.fake_api.rejections


def test_an_interrupt_while_parked_for_approval_stops_it_and_the_call_never_runs(races):
    """A turn parked on an approval holds no worker; the interrupt wakes it to stop: the call waiting for approval
    is answered with the placeholder and never runs, the new turn completes, and the call can no longer be approved."""
    races.worker()
    chat = "parked-1"
    races.route(f"{chat} first", tool_call("deploy", {"env": chat}, id="toolu_parked"))
    races.route(f"{chat} second", text("not deploying, then"))
    first = races.client.send_message(chat, f"{chat} first")
    parked = races.client.wait(first, timeout=30)
    assert (parked.status, parked.waiting_reason) == ("waiting", "approval"), parked
    second = races.client.send_message(chat, f"{chat} second", on_busy="interrupt")
    ended = _settled_as_one(races, chat, first, second, first_answer="", second_answer="not deploying, then")
    assert ended == "stopped"
    assert races.runs("deploy", chat) == 0
    request = next(b for b in reversed(races.stack.fake_api.requests) if f"{chat} second" in json.dumps(b))
    _assert_paired_placeholder(request, "toolu_parked")
    with pytest.raises(NotFound):
        races.client.approve(chat, "toolu_parked")
    assert races.runs("deploy", chat) == 0


def test_an_interrupt_during_a_drain_ends_on_the_next_worker_with_the_write_run_once(races):
    """SIGTERM the worker while the turn is inside a write, interrupt, let the write finish inside its drain grace:
    the draining worker exits, a second worker finishes: the first turn stopped with the interrupt's notice (not
    completed: the stop is read between the write and the next model step, not left to the next 0.5 s poll), the
    write ran once and its call has one answer (its result, or the placeholder when the stop was read first), and
    the new turn completed on that history."""
    races.r.delete(counting_tools.STARTED_KEY, counting_tools.RELEASE_KEY)
    draining = races.worker()
    chat = "drain-1"
    races.route(f"{chat} first", tool_call("blocking_write", {"note": chat}, id="toolu_drained"), text("unreached"))
    races.route(f"{chat} second", text("the answer after the drain"))
    first = races.client.send_message(chat, f"{chat} first")
    _wait_tool_started(races.r)
    draining.terminate()
    second = races.client.send_message(chat, f"{chat} second", on_busy="interrupt")
    races.r.rpush(counting_tools.RELEASE_KEY, "go")  # the write finishes inside its drain grace
    assert draining.wait_exit(timeout=30) == 0
    races.worker("w2")
    ended = _settled_as_one(
        races, chat, first, second, first_answer="unreached", second_answer="the answer after the drain"
    )
    assert ended == "stopped", "\n".join(f"{e.type} {e.model_extra}" for e in races.client.events(chat))
    assert races.runs("blocking_write", chat) == 1
    results = [b for m in races.client.transcript(chat) for b in m.tool_results if b.tool_use_id == "toolu_drained"]
    assert len(results) == 1, results
