"""`create_app(authorize=...)` over real HTTP: uvicorn serving tests/support/authorized_app.py (a sync and an async
rule, side by side) against a real redis-server, a real celery worker and the fake Messages API.

Bob asks for every route of alice's chat and run, before they exist and after (a turn parked for approval, a
finished run): each answer is a 404 with exactly the body an unknown id gets, the same before and after, so ids
cannot be probed; nothing bob sends is written. Alice, on the same routes, is served.
"""

from __future__ import annotations

import json
import sys

import pytest
import redis

from tasks.client import RunRef, TurnRef
from tasks.store import keys
from tests.support import counting_tools
from tests.support.fake_anthropic import Script, text, tool_call
from tests.support.processes import REPO
from tests.support.sse_client import SseStream
from tests.support.web_server import ApiServer

pytestmark = pytest.mark.integration

TOKEN = "test-token-authorize-0123456789"
CHAT, RUN, CALL = "alice-c", "alice-r", "toolu_deploy"
RUN_OWNER = keys.owner("run", RUN)
DEPLOY = tool_call("deploy", {"env": "prod"}, id=CALL)


def routes(turn_id: str, workspace: str) -> list[tuple[str, str, dict | None]]:
    """Every method and path that names a chat or run (the README's HTTP table), for alice's ids."""
    c, r = f"/api/chats/{CHAT}", f"/api/runs/{RUN}"
    return [
        ("POST", f"{c}/messages", {"text": "hello from bob"}),
        ("GET", f"{c}/turns/{turn_id}", None),
        ("POST", f"{c}/retry", None),
        ("POST", f"{c}/stop", None),
        ("GET", f"{c}/transcript", None),
        ("GET", f"{c}/stream", None),
        ("GET", f"/api/chat/{CHAT}/messages", None),  # useChat's history
        ("POST", f"{c}/approvals/{CALL}", {"approve": True, "by": "alice"}),
        ("POST", "/api/runs", {"goal": "bob's run", "workspace": workspace, "run_id": RUN}),
        ("GET", r, None),
        ("GET", f"{r}/transcript", None),
        ("GET", f"{r}/stream", None),
        ("POST", f"{r}/retry", None),
        ("POST", f"{r}/stop", None),
        ("POST", f"{r}/approvals/{CALL}", {"approve": True}),
    ]


def ask(api: ApiServer, user: str, method: str, path: str, body: dict | None) -> tuple[int, object]:
    """(status, JSON answer) as `user`; a stream that opens is `(200, "stream")`, left unread."""
    if path.endswith("/stream"):
        headers = {"X-User": user, "Authorization": f"Bearer {TOKEN}"}
        with SseStream(api.url + path, headers=headers, timeout=10) as s:
            return (200, "stream") if s.status == 200 else (s.status, json.loads(s.response.read()))
    return api.request(method, path, body, headers={"X-User": user})


def unknown_answer(path: str, turn_id: str) -> dict:
    """The 404 body each route gives an id it does not know (the chat routes where an unknown chat is no 404
    say `no chat ID`)."""
    if "/turns/" in path:
        return {"detail": f"no turn {turn_id} in chat {CHAT}"}
    if path.startswith("/api/chats/") and "/approvals/" in path:
        return {"detail": f"no call {CALL} waits for approval in {CHAT}"}
    if path.startswith("/api/runs"):
        return {"detail": f"no run {RUN}"}
    return {"detail": f"no chat {CHAT}"}


def test_a_foreign_chat_or_run_answers_every_route_exactly_as_an_unknown_one(stack, tmp_path):
    stack.fake_api.set_handler(Script([DEPLOY, text("run done."), text("Deployed to prod.")]))
    env = {**stack.env, "BATON_API_TOKEN": TOKEN}
    servers = {
        style: ApiServer(env, tmp_path, command=[
            sys.executable, "-m", "uvicorn", "--factory", f"tests.support.authorized_app:{style}_app",
            "--app-dir", str(REPO),
        ])
        for style in ("sync", "async")
    }
    try:
        for api in servers.values():
            api.start()
        _check(stack, servers, tmp_path)
    finally:
        for api in servers.values():
            api.stop()


def _check(stack, servers: dict[str, ApiServer], tmp_path) -> None:
    r = redis.Redis.from_url(stack.redis_server.url)
    ws = tmp_path / "ws"
    ws.mkdir()
    probe_turn = "t-0123456789abcdef"
    before: dict[str, list] = {}
    for style, api in servers.items():
        # The token comes first: without it, a 401 whoever the user is.
        assert api.request("GET", f"/api/chats/{CHAT}/transcript", token=None, headers={"X-User": "alice"})[0] == 401
        # Nothing exists yet: bob's answers, and (where a route has one) the genuine unknown-id 404 admin gets.
        answers = before[style] = [ask(api, "bob", *route) for route in routes(probe_turn, str(ws))]
        for (method, path, _), got in zip(routes(probe_turn, str(ws)), answers, strict=True):
            assert got == (404, unknown_answer(path, probe_turn)), (style, method, path, got)
            if path.startswith("/api/runs/") or "/turns/" in path or "/approvals/" in path:
                assert ask(api, "admin", method, path, _) == got, (style, method, path)
    # bob wrote nothing:
    assert r.xlen(keys.events(keys.owner("chat", CHAT))) == 0 and not r.sismember(keys.runs(RUN_OWNER), RUN)

    # Alice's chat parks on an approval, her run completes: both exist now.
    alice = servers["sync"]
    status, sent = ask(alice, "alice", "POST", f"/api/chats/{CHAT}/messages", {"text": "deploy"})
    assert status == 202, sent
    client = stack.client()
    stack.worker()
    parked = client.wait(client_ref(sent), timeout=30)
    assert (parked.status, parked.waiting_reason) == ("waiting", "approval"), parked
    start = {"goal": "g", "workspace": str(ws), "run_id": RUN}
    status, started = ask(servers["async"], "alice", "POST", "/api/runs", start)
    assert status == 202, started
    assert client.wait(RunRef(run_id=RUN, task_id=started["task_id"]), timeout=30).status == "completed"
    assert counting_tools.calls(r, "deploy") == 0

    # Bob again, the same requests: the same answers, byte for byte, as when nothing existed.
    for style, api in servers.items():
        again = [ask(api, "bob", *route) for route in routes(probe_turn, str(ws))]
        assert again == before[style], style
        status, answer = ask(api, "bob", "GET", f"/api/chats/{CHAT}/turns/{sent['turn_id']}", None)
        assert (status, answer) == (404, unknown_answer("/turns/", sent["turn_id"])), style
        # A run id bob lets the server draw is authorized as drawn (run-…, not his): refused, nothing written.
        status, answer = ask(api, "bob", "POST", "/api/runs", {"goal": "g", "workspace": str(ws)})
        assert status == 404 and answer["detail"].startswith("no run run-"), answer
        made = answer["detail"].removeprefix("no run ")
        assert not r.sismember(keys.runs(keys.owner("run", made)), made)
        # Alice is served on both apps, her stream included.
        assert ask(api, "alice", "GET", f"/api/chats/{CHAT}/transcript", None)[0] == 200
        status, answer = ask(api, "alice", "GET", f"/api/chat/{CHAT}/messages", None)
        assert status == 200 and [m["role"] for m in answer] == ["user", "assistant"], answer  # type: ignore[union-attr]
        assert ask(api, "alice", "GET", f"/api/runs/{RUN}", None)[1]["status"] == "completed"
        headers = {"X-User": "alice", "Authorization": f"Bearer {TOKEN}"}
        with SseStream(api.url + f"/api/chats/{CHAT}/stream", headers=headers) as live:
            assert live.status == 200
            assert live.read_until(lambda m: m.event == "tool.approval_requested")
    assert counting_tools.calls(r, "deploy") == 0  # bob's approvals (twice per app) approved nothing

    # Alice approves; who decided is the app's signed-in user, whatever the body says.
    status, decided = ask(servers["async"], "alice", "POST", f"/api/chats/{CHAT}/approvals/{CALL}",
                          {"approve": True, "by": "mallory"})
    assert (status, decided) == (200, {"id": CHAT, "tool_use_id": CALL, "decision": "approved"})
    assert client.wait(client_ref(sent), timeout=30).reply == "Deployed to prod."
    approved = [e for e in client.events(CHAT) if e.type == "tool.approved"]
    assert len(approved) == 1 and approved[0].model_extra["by"] == "alice"
    assert counting_tools.calls(r, "deploy") == 1


def client_ref(sent: dict) -> TurnRef:
    return TurnRef(chat_id=sent["chat_id"], turn_id=sent["turn_id"], task_id=sent["task_id"])
