"""The page's list of the chats it may see, in a real browser against the real stack."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.browser.test_page import WAIT_MS, open_chat
from tests.support.fake_anthropic import text

pytestmark = pytest.mark.integration


def test_the_page_lists_chats_newest_first_and_opens_one(served, page: Page):
    """Two chats answered; the page opened on the second lists both, newest activity first, titled by their
    first message (as text: markup a user typed is shown, not run), and a click opens the other."""
    served.router.add("list me <b>first</b>", [text("first.")])
    served.router.add("list me second", [text("second.")])
    for chat, message in (("list-a", "list me <b>first</b>"), ("list-b", "list me second")):
        assert served.client.wait(served.client.send_message(chat, message), timeout=30).status == "completed"
    open_chat(page, served, "list-b")
    links = page.get_by_test_id("chat-link")
    expect(links).to_have_text(["list me second", "list me <b>first</b>"], timeout=WAIT_MS)
    expect(links.first).to_have_attribute("aria-current", "page")
    links.nth(1).click()
    expect(page.get_by_test_id("owner-id")).to_have_text("list-a", timeout=WAIT_MS)
