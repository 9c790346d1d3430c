"""`create_app(authorize=...)`'s pure parts: what a route names, what a refusal answers, and that every /api
route of the app is covered by the one dependency (a route added without a `{chat_id}`/`{run_id}` would not be)."""

from __future__ import annotations

import asyncio
import json

import pytest

from config.settings import Settings
from tasks.client.core import no_file, no_run, no_turn, no_waiting_call
from web import access
from web.app import create_app


def test_a_route_names_a_chat_or_a_run_by_its_path_parameters():
    assert access.named({"chat_id": "c1", "turn_id": "t1"}) == ("chat", "c1")
    assert access.named({"run_id": "r1", "tool_use_id": "x"}) == ("run", "r1")
    assert access.named({"rest": "anything"}) is None
    assert access.named({}) is None


def test_a_refusal_is_word_for_word_the_routes_unknown_id():
    """The refused 404 is the clients' own NotFound for that route (the one an unknown id raises)."""
    assert str(access.unknown("run", {"run_id": "r1"})) == str(no_run("r1")) == "no run r1"
    assert str(access.unknown("run", {"run_id": "r1", "tool_use_id": "x"})) == str(no_run("r1"))
    assert str(access.unknown("chat", {"chat_id": "c", "turn_id": "t"})) == str(no_turn("c", "t"))
    # A refused chat's file reads as a file the chat does not have, word for word.
    assert str(access.unknown("chat", {"chat_id": "c", "sha256": "ab"})) == str(no_file("c", "ab"))
    assert str(access.unknown("chat", {"chat_id": "c", "tool_use_id": "x"})) == str(no_waiting_call("c", "x"))
    assert str(access.unknown("chat", {"chat_id": "c"})) == "no chat c"


async def _call(app, method: str, path: str, body: bytes) -> tuple[int, dict]:
    """One request straight into the ASGI app (no server, no httpx): status and JSON answer."""
    sent: list[dict] = []
    received = False

    async def receive() -> dict:
        nonlocal received
        if received:
            return {"type": "http.disconnect"}
        received = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
        "path": path, "raw_path": path.encode(), "root_path": "", "query_string": b"",
        "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json")],
        "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80),
    }
    await app(scope, receive, send)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    raw = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return status, json.loads(raw) if raw.startswith(b"{") else raw.decode()


@pytest.mark.parametrize("style", ["sync", "async"])
def test_every_api_route_that_names_a_chat_or_run_asks_authorize_before_anything(style):
    """Every path of the app's schema, called with ids the app refuses, answers the refusal's 404 without touching
    the store (there is none: port 1), and `authorize` was asked with the id the path names. A route left
    uncovered would reach the store and answer 503, or answer 200/202."""
    asked: list[tuple[str, str]] = []

    def refuse(_request, kind, ident):
        asked.append((kind, ident))
        return False

    async def refuse_async(_request, kind, ident):
        return refuse(_request, kind, ident)

    app = create_app(Settings(redis_url="redis://127.0.0.1:1/0"), authorize=refuse if style == "sync" else refuse_async)
    ids = {"chat_id": "c-them", "run_id": "r-them", "turn_id": "t-1", "tool_use_id": "toolu_1", "sha256": "ab" * 32}
    covered = 0
    for template, ops in app.openapi()["paths"].items():
        if not template.startswith("/api"):
            continue
        for method in ops:
            asked.clear()
            if method == "get" and template in ("/api/chats", "/api/runs"):
                continue  # the listings name no id: each item is filtered through authorize (test_listing_http.py)
            if "{ident}" in template:  # DELETE: a refused id answers what an unknown one does, not a 404
                kind = "run" if template.startswith("/api/runs") else "chat"
                status, answer = asyncio.run(_call(app, method.upper(), template.format(ident="x-them"), b""))
                assert asked == [(kind, "x-them")], (method, template, asked)
                assert (status, answer) == (200, {"id": "x-them", "deleted": False}), (template, answer)
                covered += 1
                continue
            body = {
                "/api/runs": b'{"goal": "g", "workspace": "/tmp", "run_id": "r-new"}',
                "/api/chat": b'{"id": "c-them", "messages": [], "trigger": "submit-message"}',  # its chat: in the body
            }.get(template, b"{}")
            status, answer = asyncio.run(_call(app, method.upper(), template.format(**ids), body))
            kind = "run" if "{run_id}" in template or template == "/api/runs" else "chat"
            ident = "r-new" if template == "/api/runs" else ids[f"{kind}_id"]
            assert asked == [(kind, ident)], (method, template, asked)
            assert status == 404, (method, template, status, answer)
            covered += 1
    # 8 chat routes (files included), 7 run routes (POST /api/runs, the DELETEs), 2 approvals, 3 useChat
    assert covered == 20, covered
