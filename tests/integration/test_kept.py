"""Chats and runs a product keeps, lists and deletes, with real workers on a real redis-server.

After every delete the whole store is scanned: no key whose name holds the id, and no member of any sorted set
or set (the indexes) that names it, is left.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time

import pytest
import redis

from tasks.client import Busy
from tasks.store.records import TurnRef
from tests.support import counting_tools
from tests.support.fake_anthropic import Script, text, tool_call
from tests.support.processes import REPO, wait_until
from tests.support.web_server import ApiServer

pytestmark = pytest.mark.integration


def leftovers(r: redis.Redis, ident: str) -> list[str]:
    """Every trace of `ident` in the whole store: key names, and members of sorted sets and sets."""
    found = []
    for key in r.scan_iter(count=1000):
        name = key.decode()
        if name.startswith("test:"):
            continue  # the counting tools' own keys
        if ident in name:
            found.append(name)
            continue
        kind = r.type(key)
        members = r.zrange(key, 0, -1) if kind == b"zset" else r.smembers(key) if kind == b"set" else []
        found += [f"{name} ∋ {m.decode()}" for m in members if ident in m.decode()]
    return found


def _r(stack) -> redis.Redis:
    return redis.Redis.from_url(stack.redis_server.url)


def test_listing_pages_newest_activity_first_for_everyone_and_per_user(stack, tmp_path):
    """Five chats and two runs by two users: pages of two, in order of last activity, each a summary; a user's
    listing holds only what their first message or start named; the async client answers the same pages."""
    stack.fake_api.set_handler(Script([text(f"answer {i}") for i in range(9)]))
    stack.worker()
    c = stack.client()
    for i in range(5):
        c.wait(c.send_message(f"c{i}", f"Question\n{i}", user="alice" if i % 2 else "bob"), timeout=30)
    c.wait(c.send_message("c0", "again", user="carol"), timeout=30)  # c0 moves to the top, and stays bob's
    ids, before = [], None
    while True:
        page = c.chats(limit=2, before=before)
        assert len(page.items) <= 2
        ids += [item["id"] for item in page.items]
        if page.next is None:
            break
        before = page.next
    assert ids == ["c0", "c4", "c3", "c2", "c1"]
    top = c.chats(limit=1).items[0]
    assert {k: top[k] for k in ("id", "user", "agent", "title", "status", "turns")} == {
        "id": "c0", "user": "bob", "agent": "default", "title": "Question 0", "status": "completed", "turns": 2}
    assert top["last_at"] >= top["created_at"] > 0
    assert [i["id"] for i in c.chats(user="alice").items] == ["c3", "c1"]
    assert [i["id"] for i in c.chats(user="carol").items] == []
    for n in range(2):
        c.wait(c.start_run(f"goal {n}", tmp_path, run_id=f"r{n}", user="alice"), timeout=30)
    assert [i["id"] for i in c.runs().items] == ["r1", "r0"]
    assert c.runs(user="alice").items[1]["title"] == "goal 0" and c.runs(user="bob").items == []

    async def pages() -> list[list[str]]:
        ac = stack.async_client()
        try:
            first = await ac.chats(limit=3)
            second = await ac.chats(limit=3, before=first.next)
            return [[i["id"] for i in first.items], [i["id"] for i in second.items], [second.next]]
        finally:
            await ac.aclose()

    assert asyncio.run(pages()) == [["c0", "c4", "c3"], ["c2", "c1"], [None]]


def test_deleting_settled_running_parked_and_unknown_units_leaves_nothing(stack, tmp_path):
    """A settled chat with a tool round, a running one (refused, then stopped and deleted), one parked for approval
    (the same), a settled run and an unknown id: each deleted leaves no trace in the whole store, the same id then
    starts a new, empty chat, and an unknown id answers deleted false."""
    stack.fake_api.set_handler(Script([
        tool_call("lookup", {"key": "k"}), text("settled."),
        tool_call("blocking_write", {"note": "busy"}),
        tool_call("deploy", {"env": "prod"}, id="toolu_deploy"),
        text("run done."),
    ]))
    stack.worker(BATON_STOP_GRACE="0.2")
    c, r = stack.client(), _r(stack)
    assert c.wait(c.send_message("gone-done", "look k up"), timeout=30).status == "completed"
    busy = c.send_message("gone-busy", "write it")
    wait_until(lambda: r.llen(counting_tools.STARTED_KEY) == 1, 30, what="the blocking write to start")
    parked = c.wait(c.send_message("gone-park", "deploy"), timeout=30)
    assert (parked.status, parked.waiting_reason) == ("waiting", "approval")
    run = c.wait(c.start_run("a run", tmp_path, run_id="gone-run"), timeout=30)
    assert run.status == "completed"

    assert c.delete("gone-done") == {"id": "gone-done", "deleted": True}
    assert leftovers(r, "gone-done") == []
    assert c.delete("gone-run") == {"id": "gone-run", "deleted": True} and leftovers(r, "gone-run") == []
    for chat, unit in (("gone-busy", busy.turn_id), ("gone-park", parked.turn_id)):
        with pytest.raises(Busy) as refused:
            c.delete(chat)
        assert refused.value.turn_id == unit
        assert c.transcript(chat)  # refused: nothing was deleted
    r.rpush(counting_tools.RELEASE_KEY, "go")  # the stop waits for the write in flight (it is not cut)
    assert c.delete("gone-busy", stop=True) == {"id": "gone-busy", "deleted": True}
    assert c.delete("gone-park", stop=True) == {"id": "gone-park", "deleted": True}
    time.sleep(1.0)  # anything a worker still had to write lands now, and must create nothing
    for ident in ("gone-done", "gone-busy", "gone-park", "gone-run"):
        assert leftovers(r, ident) == [], ident
    assert counting_tools.calls(r, "deploy") == 0 and counting_tools.calls(r, "blocking_write") == 1
    assert c.delete("gone-never") == {"id": "gone-never", "deleted": False}
    assert c.delete("gone-done") == {"id": "gone-done", "deleted": False}  # idempotent
    # the busy chat, released before its stop landed, may have asked the model once more: the new chat's answer is
    # its own script, not the next line of a shared one
    stack.fake_api.set_handler(Script([text("a new chat.")]))
    again = c.wait(c.send_message("gone-done", "hello again"), timeout=30)
    assert again.reply == "a new chat." and len(c.transcript("gone-done")) == 2
    assert [i["id"] for i in c.chats().items] == ["gone-done"]


def test_a_stale_workers_late_write_creates_nothing(stack):
    """A worker frozen in a tool call loses its lease; another finishes the turn; the chat is deleted; then the
    frozen worker wakes, its tool returns, and its writes (the result, events, the transcript: an XADD or an
    RPUSH would create a key) find no lease: nothing of the chat comes back."""
    stack.fake_api.set_handler(Script([tool_call("blocking_write", {"note": "late"}), text("finished by b.")]))
    fast = {"BATON_LEASE_TTL": "4"}
    a = stack.worker("a", **fast)
    c, r = stack.client(), _r(stack)
    ref = c.send_message("gone-stale", "write it")
    wait_until(lambda: r.llen(counting_tools.STARTED_KEY) == 1, 30, what="a's blocking write to start")
    assert a.proc is not None
    os.killpg(a.proc.pid, signal.SIGSTOP)
    try:
        stack.worker("b", **fast)
        result = c.wait(ref, timeout=60)
        assert result.status == "completed" and result.reply == "finished by b."
        assert c.delete("gone-stale") == {"id": "gone-stale", "deleted": True}
        assert leftovers(r, "gone-stale") == []
    finally:
        os.killpg(a.proc.pid, signal.SIGCONT)
    r.rpush(counting_tools.RELEASE_KEY, "go")  # a's tool returns now, and a tries to record it
    wait_until(lambda: r.llen(counting_tools.RELEASE_KEY) == 0, 30, what="a's tool to return")
    time.sleep(3.0)  # a's writes, its heartbeat and its settle attempt, and b's next sweeps
    assert leftovers(r, "gone-stale") == []
    assert counting_tools.calls(r, "blocking_write") == 1


def test_retention_deletes_the_idle_and_keeps_the_busy(stack):
    """With BATON_RETENTION=2 the workers' sweep deletes a settled chat once idle that long, and keeps one parked
    for approval (waiting) however old; once that one is decided and settled, it goes too."""
    stack.fake_api.set_handler(Script([
        text("idle."), tool_call("deploy", {"env": "prod"}, id="toolu_deploy"), text("deployed."),
    ]))
    stack.worker(BATON_RETENTION="2", BATON_LEASE_TTL="4")
    c, r = stack.client(), _r(stack)
    assert c.wait(c.send_message("gone-idle", "hi"), timeout=30).status == "completed"
    ref = c.send_message("gone-wait", "deploy")
    assert c.wait(ref, timeout=30).status == "waiting"
    wait_until(lambda: not leftovers(r, "gone-idle"), 20, interval=0.2, what="retention to delete the idle chat")
    time.sleep(3.0)  # several sweeps past the retention
    assert c.turn("gone-wait", ref.turn_id).status == "waiting" and leftovers(r, "gone-wait")
    c.approve("gone-wait", "toolu_deploy")
    assert c.wait(ref, timeout=30).status == "completed"
    wait_until(lambda: not leftovers(r, "gone-wait"), 20, interval=0.2, what="retention to delete the settled chat")


def test_http_lists_only_the_signed_in_users_and_deletes_as_authorized(stack, tmp_path):
    """Behind `create_app(authorize=..., user=...)`: a message posted is the signed-in user's whatever the body
    says; `GET /api/chats` lists only theirs; DELETE of a chat `authorize` refuses answers as an unknown id does
    and deletes nothing; DELETE of their own deletes it."""
    stack.fake_api.set_handler(Script([text("a1."), text("b1."), text("a2.")]))
    stack.worker()
    api = ApiServer(stack.env, tmp_path, command=[
        sys.executable, "-m", "uvicorn", "--factory", "tests.support.authorized_app:async_app", "--app-dir", str(REPO),
    ]).start()
    c, r = stack.client(), _r(stack)
    try:
        for user, chat in (("alice", "alice-1"), ("bob", "bob-1"), ("alice", "alice-2")):
            status, body = api.request("POST", f"/api/chats/{chat}/messages", {"text": f"from {user}"},
                                       headers={"X-User": user})
            assert status == 202, body
            c.wait(TurnRef(chat_id=chat, turn_id=body["turn_id"], task_id=body["task_id"]), timeout=30)
        status, body = api.request("GET", "/api/chats?limit=1", headers={"X-User": "alice"})
        assert status == 200 and [i["id"] for i in body["chats"]] == ["alice-2"] and body["next"]
        status, body = api.request("GET", f"/api/chats?limit=5&before={body['next']}", headers={"X-User": "alice"})
        assert [(i["id"], i["user"]) for i in body["chats"]] == [("alice-1", "alice")] and body["next"] is None
        assert api.request("GET", "/api/chats", headers={"X-User": "admin"})[1]["chats"] == []  # admin owns none
        assert api.request("GET", "/api/chats?before=nonsense", headers={"X-User": "alice"})[0] == 422
        assert api.request("DELETE", "/api/chats/bob-1", headers={"X-User": "alice"}) == (
            200, {"id": "bob-1", "deleted": False})
        assert c.transcript("bob-1")  # refused: nothing deleted
        assert api.request("DELETE", "/api/chats/alice-1", headers={"X-User": "alice"}) == (
            200, {"id": "alice-1", "deleted": True})
        assert leftovers(r, "alice-1") == []
        assert api.request("DELETE", "/api/runs/alice-r", headers={"X-User": "alice"}) == (
            200, {"id": "alice-r", "deleted": False})
    finally:
        api.stop()



def test_a_settled_turn_is_slimmed_and_keeps_its_events_ids_and_result(stack):
    """Once a settled turn's live text is trimmed, the sweep deletes the chat's settled signal, rewrites its events
    stream at its used size and drops the record's default fields: the events (and their ids), the transcript and
    the turn's result read exactly as before, the stream takes less memory, and a next turn (and `wait`) works."""
    stack.fake_api.set_handler(Script([tool_call("lookup", {"key": "k"}), text("first."), text("second.")]))
    stack.worker(BATON_LIVE_TEXT_RETENTION="0", BATON_LEASE_TTL="4")
    c, r = stack.client(), _r(stack)
    ref = c.send_message("slim", "look k up")
    assert c.wait(ref, timeout=30).status == "completed"
    owner = "chat:slim"
    events_key, settled_key = f"baton:{{{owner}}}:events", f"baton:{{{owner}}}:settled"
    wait_until(lambda: not r.exists(settled_key), 20, interval=0.2, what="the sweep to slim the settled turn")
    time.sleep(0.5)
    events, transcript, result = c.events("slim"), c.transcript("slim"), c.turn("slim", ref.turn_id)
    assert [e.type for e in events][-1] == "turn.completed" and "text.delta" not in [e.type for e in events]
    assert int(r.memory_usage(events_key, samples=0)) < 4096  # no 4 KB preallocated node
    assert not r.hexists(f"baton:{{{owner}}}:rec:{ref.turn_id}", "approvals")
    assert result.reply == "first." and result.usage.attempts == 2
    second = c.wait(c.send_message("slim", "and again"), timeout=30)
    assert second.reply == "second."
    assert [e.id for e in c.events("slim")][: len(events)] == [e.id for e in events]
    assert c.transcript("slim")[: len(transcript)] == transcript
