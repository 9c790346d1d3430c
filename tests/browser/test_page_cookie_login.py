"""The page mounted behind an app's own cookie login (tests/support/cookie_app.py: SessionMiddleware, Baton at
`/baton` with `authorize` and `user` read from the session, as the README shows), in a real browser against
the real stack (redis-server, a celery worker, the fake Messages API), served by uvicorn.

One stack for the module; each browser context is one person with their own cookie jar. Alice uses her chat
from the page: the answer streams in, she approves a `deploy` call, and the decision is recorded as hers
(the session's user, not the `&by=` the page was opened with). Bob, signed in, and a visitor who is not,
open the same address and get nothing of it: every request of theirs answers the unknown-id 404.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import pytest
from playwright.sync_api import Page, Response, expect

from tests.browser.conftest import Served, running_stack
from tests.support import counting_tools
from tests.support.fake_anthropic import text, tool_call
from tests.support.held_stream import Gate, held
from tests.support.processes import REPO

pytestmark = pytest.mark.integration

WAIT_MS = 45_000  # a turn on a busy two-core machine; far above the need
CHAT = "alice-1"
PAGE = f"/baton/?chat={CHAT}"
UNKNOWN = {"detail": f"no chat {CHAT}"}  # what the chat's routes answer a refused (or unknown) caller


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    command = [sys.executable, "-m", "uvicorn", "tests.support.cookie_app:app", "--app-dir", str(REPO)]
    with running_stack(tmp_path_factory.mktemp("cookie"), command=command) as s:
        yield s


class Person:
    """One browser context (its own cookies) and its page; `errors` collects what the page raised."""

    def __init__(self, browser: Any, served: Served) -> None:
        self.served = served
        self.context = browser.new_context(viewport={"width": 1360, "height": 860})
        self.page: Page = self.context.new_page()
        self.errors: list[str] = []
        self.page.on("pageerror", lambda err: self.errors.append(str(err)))

    def login(self, user: str, next_path: str) -> None:
        """The app's login: sets the session cookie and redirects to `next_path`."""
        self.page.goto(f"{self.served.url}/login?{urlencode({'user': user, 'next': next_path})}")

    def close(self) -> None:
        self.context.close()
        assert not self.errors, f"the page raised: {self.errors}"


def chat_api(response: Response, tail: str) -> bool:
    return response.url.split("?")[0] == f"{_origin(response)}/baton/api/chats/{CHAT}/{tail}"


def _origin(response: Response) -> str:
    scheme, _, rest = response.url.partition("://")
    return f"{scheme}://{rest.split('/')[0]}"


def test_alice_uses_her_chat_behind_the_login_and_others_get_nothing(served, browser, shoot):
    message = "alice-1: deploy to staging please"
    gate = Gate()
    deploy = tool_call("deploy", {"env": "staging"}, text="Checking staging, then deploying.", id="toolu_ck")
    served.router.add(message, [held(deploy, gate), text("Deployed to staging, as approved.")])

    alice = Person(browser, served)
    try:
        # The page claims someone else approves (`&by=`); with `user=` given, the session decides.
        alice.login("alice", f"{PAGE}&by=Mallory")
        page = alice.page
        assert page.url == f"{served.url}{PAGE}&by=Mallory"
        expect(page.get_by_test_id("connection")).to_have_attribute("data-state", "live", timeout=WAIT_MS)
        box = page.get_by_test_id("composer-input")
        box.fill(message)
        box.press("Enter")
        live = page.locator('[data-testid="live"] [data-testid="assistant-text"]')
        expect(live).to_contain_text("Checking", timeout=WAIT_MS)  # streamed in while the fake holds the rest
        shoot(page, "cookie-1-alice-streaming")
        gate.open()

        card = page.get_by_test_id("approval")
        expect(card).to_be_visible(timeout=WAIT_MS)
        expect(card).to_contain_text("deploy")
        card.get_by_test_id("approve-button").click()
        final = page.locator('[data-testid="transcript"] [data-testid="assistant-text"]')
        expect(final.last).to_have_text("Deployed to staging, as approved.", timeout=WAIT_MS)
        approved = page.locator('[data-testid="timeline-event"][data-type="tool.approved"]')
        expect(approved).to_have_count(1)
        expect(approved).to_contain_text("by alice")
        shoot(page, "cookie-2-alice-approved")
    finally:
        alice.close()
    (event,) = [e for e in served.client.events(CHAT) if e.type == "tool.approved"]
    assert event.model_extra["by"] == "alice"
    assert counting_tools.calls(served.client.redis, "deploy") == 1
    stored = [(m.role, m.text) for m in served.client.transcript(CHAT)]

    for who in ("bob", None):  # bob is signed in (his own chats are bob-...); None never logged in
        other = Person(browser, served)
        try:
            page = other.page
            with (
                page.expect_response(lambda r: chat_api(r, "transcript"), timeout=WAIT_MS) as transcript,
                page.expect_response(lambda r: chat_api(r, "stream"), timeout=WAIT_MS) as stream,
            ):
                if who is None:
                    page.goto(f"{served.url}{PAGE}")
                else:
                    other.login(who, PAGE)
            assert (transcript.value.status, transcript.value.json()) == (404, UNKNOWN), who
            # Chromium keeps no body of an EventSource's response: its status here, its body asked again
            # with the same cookies (the context's own request API shares its cookie jar).
            assert stream.value.status == 404, who
            again = other.context.request.get(stream.value.url)
            assert (again.status, again.json()) == (404, UNKNOWN), who
            if who is not None:  # signed in for real: the cookie opens bob's own chats, not alice's
                assert [c["name"] for c in other.context.cookies()] == ["session"]
                assert other.context.request.get(f"{served.url}/baton/api/chats/bob-1/transcript").status == 200
            # The refused stream closes the EventSource; the page says so and shows nothing of alice's.
            expect(page.get_by_test_id("connection")).to_have_attribute("data-state", "offline", timeout=WAIT_MS)
            for shown in ("user-text", "assistant-text", "approval", "timeline-event"):
                expect(page.get_by_test_id(shown)).to_have_count(0)
            # Writing into it is refused the same way, and the page says only what an unknown chat gets.
            with page.expect_response(lambda r: chat_api(r, "messages"), timeout=WAIT_MS) as sent:
                page.get_by_test_id("composer-input").fill("let me in")
                page.get_by_test_id("composer-input").press("Enter")
            assert (sent.value.status, sent.value.json()) == (404, UNKNOWN), who
            expect(page.get_by_test_id("control-error")).to_have_text(UNKNOWN["detail"])
            shoot(page, f"cookie-3-{who or 'anonymous'}-refused")
        finally:
            other.close()
    assert [(m.role, m.text) for m in served.client.transcript(CHAT)] == stored  # nothing added by them
