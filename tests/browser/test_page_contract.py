"""The page against the contract's stream, entry by entry: real redis-server and `baton serve`, no worker.

The test writes a chat's events stream and transcript itself, exactly as the contract lays them out
(text.delta entries, a `turn.retry` with `discarded: true` after every delta of the attempt it discards, the
replayed attempt's deltas after it with a higher `attempt`), so each step of what the page must do can be
checked at the moment it matters: a discarded attempt's text cleared, a reload mid-answer rebuilt without
doubling, the contract's notices, an approval. The end-to-end tests (test_page.py) prove the same through
real workers and the fake Messages API.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from playwright.sync_api import Page, expect

from tests.conftest import Stack
from tests.support.processes import RedisServer
from tests.support.web_server import ApiServer

pytestmark = pytest.mark.integration

WAIT_MS = 20_000
TOKEN = "page-test-token-0123456789"


class Feed:
    """Writes one chat's events and transcript the way workers do (the stream id is the event's id)."""

    def __init__(self, r: redis.Redis, chat_id: str) -> None:
        from tasks.store import keys

        self.r = r
        self.chat_id = chat_id
        self.owner = keys.owner("chat", chat_id)
        self.events_key = keys.events(self.owner)
        self.transcript_key = keys.transcript(self.owner)

    def event(self, kind: str, **data: Any) -> str:
        body = {"type": kind, "at": time.time(), "chat_id": self.chat_id, **data}
        return self.r.xadd(self.events_key, {"e": json.dumps(body)}).decode()

    def delta(self, turn_id: str, message_id: str, attempt: int, index: int, text: str) -> str:
        return self.event("text.delta", turn_id=turn_id, message_id=message_id, attempt=attempt, index=index, text=text)

    def message(self, role: str, content: list[dict[str, Any]], turn_id: str, **extra: Any) -> None:
        self.r.rpush(self.transcript_key, json.dumps({"role": role, "content": content, "turn_id": turn_id, **extra}))

    def user(self, turn_id: str, text: str) -> None:
        self.message("user", [{"type": "text", "text": text}], turn_id)

    def notice(self, turn_id: str, kind: str, text: str) -> None:
        self.message("notice", [{"type": "notice", "kind": kind, "text": text}], turn_id)


class Bare:
    def __init__(self, api: ApiServer, guarded: ApiServer, r: redis.Redis, env: dict[str, str]) -> None:
        self.env = env
        self.api = api
        self.guarded = guarded  # the same store behind BATON_API_TOKEN
        self.r = r

    def feed(self, chat_id: str) -> Feed:
        return Feed(self.r, chat_id)


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bare]:
    tmp = tmp_path_factory.mktemp("page-contract")
    redis_server = RedisServer(tmp / "redis").start()
    servers: list[ApiServer] = []
    r = redis.Redis.from_url(redis_server.url)
    try:
        env = Stack(redis_server, None, tmp).env
        servers.append(ApiServer(env, tmp).start())
        servers.append(ApiServer({**env, "BATON_API_TOKEN": TOKEN}, tmp).start())
        yield Bare(servers[0], servers[1], r, env)
    finally:
        r.close()
        for server in servers:
            server.stop()
        redis_server.stop()


def open_chat(page: Page, bare: Bare, chat_id: str, query: str = "") -> None:
    page.goto(f"{bare.api.url}/?chat={chat_id}{query}")
    expect(page.get_by_test_id("connection")).to_have_attribute("data-state", "live", timeout=WAIT_MS)


def live(page: Page):
    return page.locator('[data-testid="live"] [data-testid="assistant-text"]')


def test_a_discarded_attempt_is_cleared_and_a_reload_rebuilds_the_answer_once(bare, page, shoot):
    """Deltas of attempt 1 show; its `turn.retry` (discarded) clears them; attempt 2 streams in; a reload in
    the middle of attempt 2 shows attempt 2's text once, without attempt 1's; the rest arrives after the
    reload; on `turn.completed` the transcript's text is what stays."""
    feed = bare.feed("contract-replay")
    turn, mid = "t-replay1", "t-replay1:m0"
    feed.event("turn.queued", turn_id=turn)
    feed.user(turn, "Tell me something true.")
    feed.event("turn.started", turn_id=turn, generation=0)
    feed.delta(turn, mid, 1, 0, "SENTINEL ")
    feed.delta(turn, mid, 1, 1, "draft")

    open_chat(page, bare, feed.chat_id)
    expect(live(page)).to_have_text("SENTINEL draft", timeout=WAIT_MS)

    feed.event(
        "turn.retry",
        turn_id=turn,
        message_id=mid,
        attempt=1,
        discarded=True,
        **{"class": "infra_transient", "reason": "stream dropped", "had_output": True},
    )
    expect(live(page)).to_have_count(0)
    feed.delta(turn, mid, 2, 0, "Water ")
    feed.delta(turn, mid, 2, 1, "is wet")
    expect(live(page)).to_have_text("Water is wet", timeout=WAIT_MS)

    page.reload()
    expect(page.get_by_test_id("connection")).to_have_attribute("data-state", "live", timeout=WAIT_MS)
    expect(live(page)).to_have_text("Water is wet", timeout=WAIT_MS)
    shoot(page, "c1-reload-mid-replay")

    feed.delta(turn, mid, 2, 2, ", mostly.")
    expect(live(page)).to_have_text("Water is wet, mostly.", timeout=WAIT_MS)
    feed.message("assistant", [{"type": "text", "text": "Water is wet, mostly."}], turn, message_id=mid)
    feed.event(
        "turn.completed",
        turn_id=turn,
        resumed=False,
        usage={"input_tokens": 20, "output_tokens": 10, "attempts": 2, "discarded_attempts": 1, "cost_usd": 0.00021},
    )
    final = page.locator('[data-testid="transcript"] [data-testid="assistant-text"]')
    expect(final).to_have_text("Water is wet, mostly.", timeout=WAIT_MS)
    expect(live(page)).to_have_count(0)
    expect(page.get_by_test_id("messages")).not_to_contain_text("SENTINEL")
    assert page.get_by_test_id("messages").inner_text().count("Water is wet") == 1
    streamed = page.locator('[data-testid="timeline-event"][data-type="text.delta"]')
    expect(streamed).to_have_count(2)
    expect(streamed.first.get_by_test_id("timeline-discarded")).to_be_visible()
    ended = page.locator('[data-testid="timeline-event"][data-type="turn.completed"]')
    expect(ended).to_contain_text("20 in / 10 out tokens · $0.0002")  # an agent with a price: what the turn cost
    shoot(page, "c1-replay-completed")

    # Reloading a finished chat whose deltas are still retained: the transcript's copy, once.
    page.reload()
    expect(final).to_have_text("Water is wet, mostly.", timeout=WAIT_MS)
    expect(page.locator('[data-testid="timeline-event"][data-type="turn.completed"]')).to_have_count(1)
    expect(live(page)).to_have_count(0)
    assert page.get_by_test_id("messages").inner_text().count("Water is wet") == 1


def test_the_contract_notices_show_as_calm_notes_and_a_deploy_replay_clears_its_text(bare, page, shoot):
    """A deploy interruption mid-answer: its partial text is cleared, the exact deploy notice shows as a note,
    the answer is replayed on another worker; a resumed turn shows `Continued from the tool results already
    fetched.`"""
    feed = bare.feed("contract-notices")
    turn, mid = "t-notice1", "t-notice1:m0"
    feed.event("turn.queued", turn_id=turn)
    feed.user(turn, "Summarise the incident.")
    feed.event("turn.started", turn_id=turn, generation=0)
    feed.delta(turn, mid, 1, 0, "The incident began when")

    open_chat(page, bare, feed.chat_id)
    expect(live(page)).to_have_text("The incident began when", timeout=WAIT_MS)
    deploy = "Interrupted by a platform deploy; resuming (attempt 1 of 3)."
    feed.notice(turn, "interrupted", deploy)
    feed.event(
        "turn.retry",
        turn_id=turn,
        message_id=mid,
        attempt=1,
        discarded=True,
        reason="platform interrupt",
        cause="drain",
        max_attempts=3,
    )
    expect(page.locator('[data-testid="notice"][data-kind="interrupted"]')).to_have_text(deploy, timeout=WAIT_MS)
    expect(live(page)).to_have_count(0)
    feed.event("turn.started", turn_id=turn, after_interruptions=1)
    feed.delta(turn, mid, 2, 0, "The incident began at 09:12 when a deploy")
    expect(live(page)).to_have_text("The incident began at 09:12 when a deploy", timeout=WAIT_MS)
    shoot(page, "c2-deploy-replay")

    resumed = "Continued from the tool results already fetched."
    feed.notice(turn, "resumed", resumed)
    feed.event("turn.resumed", turn_id=turn, **{"from": "stored_round"})
    expect(page.locator('[data-testid="notice"][data-kind="resumed"]')).to_have_text(resumed, timeout=WAIT_MS)
    timeline = page.get_by_test_id("timeline")
    expect(timeline.locator('[data-type="turn.retry"]')).to_contain_text("attempt 1 of 3")


def test_an_approval_request_offers_approve_and_deny_and_posts_the_decision(bare, page, shoot):
    """`tool.approval_requested` shows the call with Approve and Deny; Approve posts `{"approve": true}` to
    .../approvals/{tool_use_id}, with `"by"` the name the page was given (`&by=`, as the app names its
    signed-in user); `tool.approved` marks it decided and the timeline says by whom."""
    feed = bare.feed("contract-approval")
    turn = "t-approve1"
    feed.event("turn.queued", turn_id=turn)
    feed.user(turn, "Delete the old build artefacts.")
    feed.event("turn.started", turn_id=turn, generation=0)
    feed.event("tool.called", turn_id=turn, tool_use_id="toolu_rm1", name="remove_files", input={"glob": "build/*"})
    feed.event(
        "tool.approval_requested", turn_id=turn, tool_use_id="toolu_rm1", name="remove_files", input={"glob": "build/*"}
    )

    # The decision endpoint is the web branch's (and the worker's); here only what the page sends is checked.
    page.route(
        "**/approvals/**",
        lambda route: route.fulfill(
            status=200,
            content_type="application/json",
            body=json.dumps({"id": feed.chat_id, "tool_use_id": "toolu_rm1", "decision": "approved"}),
        ),
    )
    open_chat(page, bare, feed.chat_id, query="&by=Grace%20Hopper")
    card = page.get_by_test_id("approval")
    expect(card).to_be_visible(timeout=WAIT_MS)
    expect(card).to_contain_text("remove_files")
    expect(card.get_by_test_id("deny-button")).to_be_visible()
    expect(page.get_by_test_id("working")).to_contain_text("approval")
    shoot(page, "c3-approval")
    with page.expect_request("**/approvals/**") as sent:
        card.get_by_test_id("approve-button").click()
    assert sent.value.method == "POST"
    assert sent.value.url.endswith(f"/api/chats/{feed.chat_id}/approvals/toolu_rm1")
    assert sent.value.post_data_json == {"approve": True, "by": "Grace Hopper"}
    feed.event("tool.approved", turn_id=turn, tool_use_id="toolu_rm1", by="Grace Hopper")
    expect(card).to_have_attribute("data-decision", "approved", timeout=WAIT_MS)
    approved = page.locator('[data-testid="timeline-event"][data-type="tool.approved"]')
    expect(approved.locator(".tl-detail")).to_have_text("by Grace Hopper")


def test_the_token_in_the_page_address_goes_on_every_api_call(bare, page):
    """`/?chat=ID&token=T` on a server with BATON_API_TOKEN: every fetch carries `Authorization: Bearer T`,
    the EventSource (which cannot send headers) carries `?token=T`, and the page works."""
    feed = bare.feed("contract-token")
    feed.event("turn.queued", turn_id="t-token1")
    feed.user("t-token1", "Is this thing on?")
    calls: list[Any] = []
    page.on("request", lambda request: calls.append(request) if "/api/" in request.url else None)

    page.goto(f"{bare.guarded.url}/?chat={feed.chat_id}&token={TOKEN}")
    expect(page.get_by_test_id("connection")).to_have_attribute("data-state", "live", timeout=WAIT_MS)
    expect(page.get_by_test_id("user-text")).to_have_text("Is this thing on?", timeout=WAIT_MS)
    box = page.get_by_test_id("composer-input")
    box.fill("A second question.")
    with page.expect_response("**/messages") as answered:
        box.press("Enter")
    assert answered.value.status == 202

    streams = [c for c in calls if "/stream" in c.url]
    others = [c for c in calls if "/stream" not in c.url]
    assert streams and others
    assert all(f"token={TOKEN}" in c.url for c in streams)
    assert all(c.headers.get("authorization") == f"Bearer {TOKEN}" for c in others)


def test_without_the_token_the_page_says_how_to_open_it(bare, page):
    """The same server without `&token=`: the API answers 401 and the page says what is missing."""
    page.goto(f"{bare.guarded.url}/?chat=contract-token")
    expect(page.get_by_test_id("control-error")).to_contain_text("needs its API token", timeout=WAIT_MS)
    expect(page.get_by_test_id("connection")).not_to_have_attribute("data-state", "live")


MOUNTING_APP = """
from fastapi import FastAPI
from web.app import create_app

app = FastAPI()
app.mount("/baton", create_app())
"""


def test_the_page_works_when_baton_is_mounted_under_a_prefix(bare, page, tmp_path):
    """An app that mounts create_app() at /baton: /baton/?chat=ID loads its styles and script from /baton/static
    and talks to /baton/api (the page's URLs are relative to itself)."""
    feed = bare.feed("contract-mounted")
    feed.event("turn.queued", turn_id="t-mount1")
    feed.user("t-mount1", "Hello from under a prefix.")
    (tmp_path / "mounting_app.py").write_text(MOUNTING_APP)
    command = [sys.executable, "-m", "uvicorn", "mounting_app:app", "--app-dir", str(tmp_path)]
    server = ApiServer(bare.env, tmp_path, command=command).start()
    try:
        page.goto(f"{server.url}/baton/?chat={feed.chat_id}")
        expect(page.get_by_test_id("connection")).to_have_attribute("data-state", "live", timeout=WAIT_MS)
        expect(page.get_by_test_id("user-text")).to_have_text("Hello from under a prefix.", timeout=WAIT_MS)
        assert page.evaluate("getComputedStyle(document.body).display") == "flex"  # style.css was found
    finally:
        server.stop()


def test_a_reconnect_after_the_server_restarts_continues_the_answer_without_repeating_it(bare, page, tmp_path):
    """`baton serve` restarts mid-answer: the page's EventSource reconnects by itself (with Last-Event-ID, or
    the page with `?after=`), gets what was written meanwhile, and shows each delta once."""
    feed = bare.feed("contract-reconnect")
    turn, mid = "t-reconnect1", "t-reconnect1:m0"
    feed.event("turn.queued", turn_id=turn)
    feed.user(turn, "Count to three.")
    feed.event("turn.started", turn_id=turn, generation=0)
    feed.delta(turn, mid, 1, 0, "One, ")
    streams: list[Any] = []
    page.on("request", lambda request: streams.append(request) if "/stream" in request.url else None)

    server = ApiServer(bare.env, tmp_path).start()
    try:
        page.goto(f"{server.url}/?chat={feed.chat_id}")
        expect(live(page)).to_have_text("One, ", timeout=WAIT_MS)
    finally:
        server.stop()
    expect(page.get_by_test_id("connection")).not_to_have_attribute("data-state", "live", timeout=WAIT_MS)
    feed.delta(turn, mid, 1, 1, "two, ")  # written while the page was cut off

    again = ApiServer(bare.env, tmp_path)
    again.port = server.port  # the same address, as after a restart
    again.start()
    try:
        expect(page.get_by_test_id("connection")).to_have_attribute("data-state", "live", timeout=WAIT_MS)
        expect(live(page)).to_have_text("One, two, ", timeout=WAIT_MS)
        feed.delta(turn, mid, 1, 2, "three.")
        expect(live(page)).to_have_text("One, two, three.", timeout=WAIT_MS)
    finally:
        again.stop()
    # Reconnects that reached a server (attempts while it was down were refused before any byte was sent).
    resumed = [r for r in streams[1:] if r.failure != "net::ERR_CONNECTION_REFUSED"]
    assert resumed, "the page never reconnected"
    assert all(r.header_value("last-event-id") or "after=" in r.url for r in resumed), [r.url for r in resumed]
