"""Files on the chat page in a real browser (headless Chromium): an image attached by the Attach button and a PDF
dropped on the composer show as thumbnails, are sent with the message, reach the provider byte for byte, and the
transcript shows the image inline (loaded from the files route) and the PDF as a link to it."""

from __future__ import annotations

import base64
import hashlib

import pytest
from playwright.sync_api import Page, expect

from tests.browser.test_page import WAIT_MS, final_text, open_chat, send
from tests.integration.test_files import PDF, png
from tests.support.fake_anthropic import text

pytestmark = pytest.mark.integration

PNG = png(40, 30, seed=7)


def drop_file(page: Page, selector: str, name: str, data: bytes, media_type: str) -> None:
    """Drop a file on an element as a person's drag would (a DataTransfer holding it)."""
    transfer = page.evaluate_handle(
        """([name, b64, type]) => {
            const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
            const dt = new DataTransfer();
            dt.items.add(new File([bytes], name, { type }));
            return dt;
        }""",
        [name, base64.b64encode(data).decode(), media_type],
    )
    page.dispatch_event(selector, "dragover", {"dataTransfer": transfer})
    page.dispatch_event(selector, "drop", {"dataTransfer": transfer})


def test_an_attached_image_and_a_dropped_pdf_are_sent_and_shown_in_the_transcript(served, page, shoot):
    chat, message = "page-files", "page-files: what do you see?"
    served.router.add(message, [text("A small red picture and a PDF.")])
    open_chat(page, served, chat)

    page.get_by_test_id("file-input").set_input_files(
        [{"name": "shot.png", "mimeType": "image/png", "buffer": PNG}]
    )
    drop_file(page, '[data-testid="composer"]', "spec.pdf", PDF, "application/pdf")
    expect(page.get_by_test_id("attachment")).to_have_count(2)
    expect(page.locator('[data-testid="attachment"] img')).to_have_count(1)  # the image's thumbnail
    shoot(page, "files-1-attached")

    send(page, message)
    expect(final_text(page)).to_have_text("A small red picture and a PDF.", timeout=WAIT_MS)
    expect(page.get_by_test_id("attachment")).to_have_count(0)  # the tray empties once sent
    image = page.locator('[data-testid="transcript"] [data-testid="message-image"]')
    expect(image).to_have_count(1)
    expect(image).to_have_js_property("naturalWidth", 40, timeout=WAIT_MS)  # loaded from the files route
    link = page.locator('[data-testid="transcript"] [data-testid="message-file"]')
    expect(link).to_contain_text("spec.pdf")
    served_pdf = page.request.get(link.evaluate("a => a.href"))
    assert served_pdf.ok and served_pdf.body() == PDF
    shoot(page, "files-2-transcript")

    [user] = [m for m in served.client.transcript(chat) if m.role == "user"]
    assert [(b.type, b.sha256) for b in user.content[1:]] == [
        ("image", hashlib.sha256(PNG).hexdigest()), ("document", hashlib.sha256(PDF).hexdigest()),
    ]
    got = served.stack.fake_api.files_received()
    assert [f["sha256"] for f in got[-1]] == [hashlib.sha256(PNG).hexdigest(), hashlib.sha256(PDF).hexdigest()]
