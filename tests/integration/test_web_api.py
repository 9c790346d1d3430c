"""The HTTP API and its live stream, through a real `baton serve` process and a raw SSE client.

Real redis-server, real celery workers, the real SDK against the fake Messages API.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import redis

from tests.support import counting_tools
from tests.support.fake_anthropic import Fault, Script, failing, text, tool_call
from tests.support.ports import free_port
from tests.support.processes import REPO, wait_until
from tests.support.web_server import ApiServer

pytestmark = pytest.mark.integration

# The contract's fields of `baton send --json`.
SEND_FIELDS = {"chat_id", "turn_id", "task_id", "status", "waiting_reason", "reply", "resumed", "failure", "usage",
               "agent", "agent_version", "model"}
RUN_FIELDS = {"run_id", "status", "interruptions", "waiting_reason", "steps", "reply", "failure", "usage", "agent",
              "agent_version", "model"}
TOKEN = "test-token-0123456789"


def _key(stream_id: str) -> tuple[int, int]:
    ms, seq = stream_id.split("-")
    return int(ms), int(seq)


def _well_formed(messages) -> None:
    """Every SSE message has an id; its event is the data's type; the data carries that id; ids increase."""
    for m in messages:
        assert m.id and m.event == m.data["type"] and m.data["id"] == m.id
    ids = [_key(m.id) for m in messages]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)


def _completed(m) -> bool:
    return m.event == "turn.completed"


def test_a_message_sent_over_http_streams_to_completion_and_the_transcript_matches(stack, serve):
    """POST a message (202, `baton send --json` fields), read the chat's stream from the start to
    turn.completed, then the HTTP transcript equals the client's and the turn reads completed."""
    stack.fake_api.set_handler(Script([tool_call("lookup", {"key": "a"}), text("The answer is A.")]))
    stack.worker()
    api = serve()
    with api.stream("/api/chats/c1/stream") as live:  # opened before the chat's first message
        assert live.status == 200
        assert live.response.getheader("content-type").startswith("text/event-stream")
        assert live.response.getheader("cache-control") == "no-cache"
        assert live.response.getheader("x-accel-buffering") == "no"
        status, sent = api.post("/api/chats/c1/messages", {"text": "what is a?"})
        assert status == 202, sent
        assert set(sent) == SEND_FIELDS and sent["chat_id"] == "c1" and sent["status"] in ("queued", "running")
        messages = live.read_until(_completed)
    _well_formed(messages)
    types = [m.event for m in messages]
    assert types[0] == "turn.queued" and types[-1] == "turn.completed"
    assert {"turn.started", "tool.called", "tool.result"} <= set(types)
    assert all(m.data.get("turn_id") == sent["turn_id"] for m in messages if m.event.startswith("turn."))

    status, turn = api.get(f"/api/chats/c1/turns/{sent['turn_id']}")
    assert status == 200 and set(turn) == SEND_FIELDS
    assert turn["status"] == "completed" and turn["reply"] == "The answer is A."
    status, transcript = api.get("/api/chats/c1/transcript")
    assert status == 200 and transcript["id"] == "c1"
    expected = [m.model_dump(mode="json") for m in stack.client().transcript("c1")]
    assert transcript["messages"] == expected
    assert transcript["messages"][-1]["role"] == "assistant"


@pytest.mark.parametrize("resume", ["last_event_id", "after"])
def test_a_stream_dropped_mid_turn_resumes_with_exactly_the_rest(stack, serve, resume):
    """A stream dropped while the turn is inside a tool, reopened with Last-Event-ID (or ?after=), gets
    exactly what came after: the two parts together equal one full read, nothing repeated or skipped.
    The drop does not stop the turn (a stop is only ever POST .../stop)."""
    stack.fake_api.set_handler(
        Script([tool_call("blocking_write", {"note": "n1"}, text="Writing it down."), text("Written.")])
    )
    stack.worker()
    api = serve()
    r = redis.Redis.from_url(stack.redis_server.url, socket_timeout=None)
    first = api.stream("/api/chats/c2/stream")
    status, sent = api.post("/api/chats/c2/messages", {"text": "write n1"})
    assert status == 202
    before = first.read_until(lambda m: m.event == "turn.started")
    assert r.blpop([counting_tools.STARTED_KEY], timeout=30) is not None  # the turn is inside its tool
    first.close()
    r.rpush(counting_tools.RELEASE_KEY, "go")
    last = before[-1].id
    if resume == "last_event_id":
        second = api.stream("/api/chats/c2/stream", last_event_id=last)
    else:
        second = api.stream(f"/api/chats/c2/stream?after={last}")
    with second:
        after = second.read_until(_completed)
    with api.stream("/api/chats/c2/stream") as full_stream:
        full = full_stream.read_until(_completed)
    _well_formed(full)
    assert [(m.id, m.raw_data) for m in before + after] == [(m.id, m.raw_data) for m in full]
    assert "tool.result" in [m.event for m in after]
    status, turn = api.get(f"/api/chats/c2/turns/{sent['turn_id']}")
    assert turn["status"] == "completed" and turn["reply"] == "Written."


def test_last_event_id_wins_over_after_and_a_resume_at_the_end_waits_for_new_entries(stack, serve):
    """With both given, the Last-Event-ID header (what an EventSource sends when it reconnects by itself)
    wins over ?after=; a stream resumed at the last id sends nothing old, then the next turn's events."""
    stack.fake_api.set_handler(Script([text("one"), text("two")]))
    stack.worker()
    api = serve()
    api.post("/api/chats/c3/messages", {"text": "first"})
    with api.stream("/api/chats/c3/stream") as s:
        full = s.read_until(_completed)
    assert len(full) >= 3
    with api.stream(f"/api/chats/c3/stream?after={full[0].id}", last_event_id=full[1].id) as s:
        assert next(s.messages()).id == full[2].id
    with api.stream("/api/chats/c3/stream", last_event_id=full[-1].id) as tail:
        status, second = api.post("/api/chats/c3/messages", {"text": "second"})
        assert status == 202
        nxt = tail.read_until(_completed)
    assert nxt[0].event == "turn.queued" and nxt[0].data["turn_id"] == second["turn_id"]
    assert _key(nxt[0].id) > _key(full[-1].id)


def test_the_token_rule(stack, serve):
    """With BATON_API_TOKEN set: /api answers 401 without the token or with a wrong one, 200 with the Bearer
    header or ?token= (streams too); the page, /static and /healthz stay open."""
    api = serve(BATON_API_TOKEN=TOKEN)
    assert api.get("/api/chats/c4/transcript", token=None)[0] == 401
    assert api.get("/api/chats/c4/transcript", token="wrong")[0] == 401
    assert api.get(f"/api/chats/c4/transcript?token={TOKEN}x", token=None)[0] == 401
    assert api.post("/api/chats/c4/messages", {"text": "hi"}, token=None)[0] == 401
    assert api.get("/api/runs/nope", token=None)[0] == 401  # 401 before 404: ids are not probed
    assert api.get("/api/chats/c4/transcript")[0] == 200
    assert api.get(f"/api/chats/c4/transcript?token={TOKEN}", token=None) == (200, {"id": "c4", "messages": []})
    with api.stream("/api/chats/c4/stream", token=None) as s:
        assert s.status == 401
    with api.stream(f"/api/chats/c4/stream?token={TOKEN}", token=None) as s:
        assert s.status == 200 and next(s.events()) == "open"
    assert api.get("/healthz", token=None)[0] == 200
    assert api.get("/openapi.json", token=None)[0] == 200
    assert api.get("/api/openapi.json", token=None)[0] == 401  # nothing under /api is open
    status, page = api.get("/", token=None)
    assert status == 200 and "<html" in page.lower()
    assert TOKEN not in api.log()  # the access log shows ?token=***


def test_bad_input_is_422_with_a_message(stack, serve):
    """Empty text, a malformed id, a body that is not JSON (or not an object, or of the wrong types), a
    missing workspace and a malformed resume id each answer 422 with a one-line `detail`."""
    api = serve()
    cases = [
        api.post("/api/chats/c5/messages", {"text": ""}),
        api.post("/api/chats/c5/messages", {"text": "   "}),
        api.post("/api/chats/bad%20id/messages", {"text": "hi"}),
        api.post("/api/chats/c5/messages", raw=b'{"text": ', headers={"Content-Type": "application/json"}),
        api.post("/api/chats/c5/messages", raw=b"[1]", headers={"Content-Type": "application/json"}),
        api.post("/api/chats/c5/messages", raw=b'{"text": "hi"}', headers={"Content-Type": "text/plain"}),
        api.post("/api/chats/c5/messages", {"text": 5}),
        api.post("/api/chats/c5/messages", {}),
        api.get("/api/chats/c5/turns/bad%20turn"),
        api.post("/api/runs", {"goal": "g", "workspace": "/no/such/dir"}),
        api.post("/api/runs", {"goal": "g", "workspace": "/tmp", "run_id": "bad id"}),
        api.post("/api/chats/c5/approvals/toolu_1", {"approve": "yes"}),
        api.post("/api/chats/c5/approvals/toolu_1", {"approve": True, "by": "x" * 201}),
        api.get("/api/chats/c5/stream?after=not-an-id"),
        api.get("/api/chats/bad%20id/stream"),
        api.get("/api/chats/c5/stream", headers={"Last-Event-ID": "12"}),
        api.get("/api/chats/c5/stream?after=99999999999999999999999-0"),
    ]
    for status, body in cases:
        assert status == 422, body
        assert isinstance(body["detail"], str) and body["detail"]
    assert cases[0][1]["detail"] == "text is empty"
    assert "chat_id must be" in cases[2][1]["detail"]
    assert "not valid JSON" in cases[3][1]["detail"]
    assert "Content-Type: application/json" in cases[5][1]["detail"]
    assert "workspace" in cases[9][1]["detail"]
    assert "by must be a name on one line of at most 200 characters" in cases[12][1]["detail"]


def test_unknown_ids_are_404(stack, serve):
    """An unknown turn or run is a 404 on every path that names it (a run never falls back to a chat)."""
    api = serve()
    assert api.get("/api/chats/c6/turns/t-nope")[0] == 404
    for path in ("/api/runs/r-nope", "/api/runs/r-nope/transcript"):
        assert api.get(path)[0] == 404, path
    for path in ("/api/runs/r-nope/retry", "/api/runs/r-nope/stop"):
        assert api.post(path)[0] == 404, path
    assert api.post("/api/runs/r-nope/approvals/toolu_1", {"approve": True})[0] == 404
    with api.stream("/api/runs/r-nope/stream") as s:
        assert s.status == 404


def test_chat_stop_retry_and_approvals(stack, serve):
    """Stop on an idle chat answers stopped=false; retry re-runs a failed last turn (202, send fields)
    and is 422 when there is none; a decision on a call that waits for nothing is 404."""
    stack.fake_api.set_handler(Script([failing(Fault(kind="http", status=400, message="refused")), text("ok now")]))
    stack.worker()
    api = serve()
    assert api.post("/api/chats/c7/stop") == (200, {"id": "c7", "stopped": False})
    status, body = api.post("/api/chats/c7/retry")
    assert status == 422 and "no failed last turn" in body["detail"]
    status, sent = api.post("/api/chats/c7/messages", {"text": "hello"})
    with api.stream("/api/chats/c7/stream") as s:
        failed = s.read_until(lambda m: m.event == "turn.failed")[-1]
        assert failed.data["class"] and "retryable" in failed.data
        status, retried = api.post("/api/chats/c7/retry")
        assert status == 202 and set(retried) == SEND_FIELDS and retried["turn_id"] == sent["turn_id"]
        s.read_until(_completed)
    assert api.get(f"/api/chats/c7/turns/{sent['turn_id']}")[1]["reply"] == "ok now"
    status, body = api.post("/api/chats/c7/approvals/toolu_1", {"approve": False, "reason": "no"})
    assert status == 404 and "toolu_1" in body["detail"]


def test_a_coding_run_over_http(stack, serve, tmp_path):
    """POST /api/runs (202 run_id/task_id), its stream to run.completed, its status and transcript; the same
    run_id again is 422; stop on a finished run answers stopped=false."""
    stack.fake_api.set_handler(Script([tool_call("list_files", {"path": "."}), text("The workspace is empty.")]))
    stack.worker()
    api = serve()
    ws = tmp_path / "ws"
    ws.mkdir()
    status, ref = api.post("/api/runs", {"goal": "look around", "workspace": str(ws), "run_id": "r1"})
    assert status == 202 and ref["run_id"] == "r1" and set(ref) == {"run_id", "task_id"}
    with api.stream("/api/runs/r1/stream") as s:
        messages = s.read_until(lambda m: m.event in ("run.completed", "run.failed"))
    _well_formed(messages)
    assert messages[-1].event == "run.completed" and all(m.data["run_id"] == "r1" for m in messages)
    status, run = api.get("/api/runs/r1")
    assert status == 200 and set(run) == RUN_FIELDS and run["status"] == "completed"
    assert run["reply"] == "The workspace is empty."
    status, transcript = api.get("/api/runs/r1/transcript")
    assert status == 200 and transcript["id"] == "r1"
    assert transcript["messages"] == [m.model_dump(mode="json") for m in stack.client().transcript("r1")]
    assert api.post("/api/runs", {"goal": "again", "workspace": str(ws), "run_id": "r1"})[0] == 422
    assert api.post("/api/runs/r1/stop") == (200, {"id": "r1", "stopped": False})
    assert api.post("/api/runs/r1/retry")[0] == 422  # it has not failed


def test_healthz_follows_redis(stack, serve):
    """/healthz is 200 while Redis answers and 503 once it is gone."""
    api = serve()
    assert api.get("/healthz") == (200, {"status": "ok"})
    stack.redis_server.stop()
    status, body = api.get("/healthz")
    assert status == 503 and body["status"] == "unavailable"


def test_pings_arrive_on_an_idle_stream(stack, serve):
    """An idle stream carries a comment line every BATON_API_PING_INTERVAL seconds (15 at most)."""
    api = serve(BATON_API_PING_INTERVAL="0.2")
    with api.stream("/api/chats/idle/stream") as s:
        seen = []
        for item in s.events():
            assert isinstance(item, str), item  # nothing but comments on a chat nobody writes to
            seen.append(item)
            if sum(c.startswith("ping") for c in seen) >= 3:
                break
    assert seen[0] == "open"


def _blocked_stream_readers(r: redis.Redis) -> int:
    """The server's connections parked in a blocking XREAD (flag `b`), i.e. streams still reading Redis."""
    return sum(1 for c in r.client_list() if c.get("name") == "baton-web" and "b" in c.get("flags", ""))


def test_an_abandoned_stream_stops_reading_redis(stack, serve):
    """When the client goes away, the server notices: its blocked XREAD connection to Redis goes too."""
    api = serve()
    r = redis.Redis.from_url(stack.redis_server.url, decode_responses=True)
    streams = [api.stream(f"/api/chats/gone{i}/stream") for i in range(3)]
    wait_until(lambda: _blocked_stream_readers(r) == 3, 20, what="three blocked stream readers")
    streams[0].close()
    streams[1].close()
    wait_until(lambda: _blocked_stream_readers(r) == 1, 20, what="the abandoned readers to leave Redis")
    streams[2].close()
    wait_until(lambda: _blocked_stream_readers(r) == 0, 20, what="the last reader to leave Redis")


def test_serve_refuses_a_non_loopback_host_without_a_token(tmp_path):
    """`baton serve --host 0.0.0.0` without BATON_API_TOKEN exits 2 saying why, before listening."""
    env = {k: v for k, v in os.environ.items() if k != "BATON_API_TOKEN"}
    env["PYTHONPATH"] = str(REPO)
    out = subprocess.run(
        [sys.executable, "-m", "tasks.cli", "serve", "--host", "0.0.0.0", "--port", str(free_port())],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert "BATON_API_TOKEN" in out.stderr and "0.0.0.0" in out.stderr


MOUNTING_APP = '''
from fastapi import FastAPI

from web.app import create_app

app = FastAPI()


@app.get("/")
def home() -> dict:
    return {"app": "mine"}


app.mount("/baton", create_app())
'''


def test_create_app_mounts_in_an_existing_fastapi_app(stack, tmp_path):
    """The README's integration, run by uvicorn: the host app keeps its routes, Baton's API, stream and
    page answer under the prefix, and the token rule holds there too."""
    stack.fake_api.set_handler(Script([text("mounted")]))
    stack.worker()
    (tmp_path / "myapp.py").write_text(MOUNTING_APP)
    command = [sys.executable, "-m", "uvicorn", "myapp:app", "--app-dir", str(tmp_path)]
    api = ApiServer({**stack.env, "BATON_API_TOKEN": TOKEN}, tmp_path, command=command).start()
    try:
        assert api.get("/") == (200, {"app": "mine"})
        assert api.get("/baton/healthz", token=None) == (200, {"status": "ok"})
        assert api.get("/baton/", token=None)[0] == 200
        assert api.get("/baton/api/chats/m1/transcript", token=None)[0] == 401
        status, sent = api.post("/baton/api/chats/m1/messages", {"text": "hi"})
        assert status == 202
        with api.stream("/baton/api/chats/m1/stream") as s:
            messages = s.read_until(_completed)
        _well_formed(messages)
        assert api.get(f"/baton/api/chats/m1/turns/{sent['turn_id']}")[1]["reply"] == "mounted"
    finally:
        api.stop()


def test_without_a_token_only_loopback_hosts_are_served(stack, serve):
    """DNS rebinding guard: a token-less `baton serve` answers 400 to a request whose Host is a foreign
    name (a page that re-resolved its own name to 127.0.0.1); with a token the token decides instead."""
    open_api = serve()
    foreign = {"Host": f"rebound.example:{open_api.port}"}
    status, body = open_api.get("/api/chats/h1/transcript", headers=foreign)
    assert status == 400 and "BATON_API_TOKEN" in body["detail"]
    assert open_api.post("/api/chats/h1/messages", {"text": "hi"}, headers=foreign)[0] == 400
    assert open_api.get("/api/chats/h1/transcript", headers={"Host": f"localhost:{open_api.port}"})[0] == 200
    guarded = serve(BATON_API_TOKEN=TOKEN)
    foreign = {"Host": f"api.example:{guarded.port}"}
    assert guarded.get("/api/chats/h1/transcript", headers=foreign)[0] == 200
    assert guarded.get("/api/chats/h1/transcript", headers=foreign, token=None)[0] == 401


def test_a_long_backlog_is_paged_without_a_gap_and_live_entries_follow(stack, serve):
    """1,234 stored entries (more than two XRANGE pages), one of them unreadable: a read from the start and
    one resumed at the page boundary get every readable entry once, in order; then a live one arrives."""
    import json

    from tasks.store import keys

    r = redis.Redis.from_url(stack.redis_server.url)
    key = keys.events(keys.owner("chat", "long"))
    ids = []
    for i in range(1234):
        raw = "not json" if i == 700 else json.dumps({"type": "text.delta", "chat_id": "long", "index": i, "text": "x"})
        ids.append(r.xadd(key, {"e": raw}).decode())
    readable = [sid for i, sid in enumerate(ids) if i != 700]
    api = serve()
    with api.stream("/api/chats/long/stream") as s:
        got = s.read_until(lambda m: m.id == readable[-1])
    assert [m.id for m in got] == readable
    assert [m.data["index"] for m in got] == [i for i in range(1234) if i != 700]
    with api.stream("/api/chats/long/stream", last_event_id=ids[499]) as s:
        rest = s.read_until(lambda m: m.id == readable[-1])
        assert [m.id for m in rest] == readable[500:]  # exclusive: ids[499] itself is not sent again
        live = r.xadd(key, {"e": json.dumps({"type": "turn.queued", "chat_id": "long"})}).decode()
        assert next(s.messages()).id == live


def test_concurrent_posts_through_the_threadpool_each_enqueue_one_turn(stack, serve):
    """Twenty messages posted at once (the sync client shared by the server's threadpool): twenty 202s,
    twenty distinct turns, each completed once."""
    from concurrent.futures import ThreadPoolExecutor

    from tasks.client import TurnRef

    n = 20
    stack.fake_api.set_handler(Script([text("ok")] * n))
    stack.worker()
    api = serve()
    with ThreadPoolExecutor(max_workers=n) as pool:
        answers = list(pool.map(lambda i: api.post(f"/api/chats/many{i}/messages", {"text": f"hi {i}"}), range(n)))
    assert [status for status, _ in answers] == [202] * n
    assert len({body["turn_id"] for _, body in answers}) == n
    client = stack.client()
    for _, body in answers:
        ref = TurnRef(chat_id=body["chat_id"], turn_id=body["turn_id"], task_id=body["task_id"])
        assert client.wait(ref, timeout=60).status == "completed"
    assert stack.fake_api.request_count == n
