"""A `useChat` page in a real browser, the small one (the README's whole Next.js app is tests/browser/
test_nextjs_app.py's): a page built with `useChat` from `@ai-sdk/react` (bundled by
esbuild from tests/js's pinned packages), served with a proxy route like the README's (tests/js/page/serve.mjs) in
front of `baton serve` with a token, driven by headless Chromium: type, watch the answer stream, reload
mid-answer, and see `resume: true` pick the answer up again with no text doubled.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import Served, running_stack
from tests.support.fake_anthropic import Reply
from tests.support.held_stream import Gate, held
from tests.support.processes import REPO
from tests.support.web_server import ApiServer

pytestmark = pytest.mark.integration

JS = REPO / "tests" / "js"
TOKEN = "usechat-page-token"
WAIT_MS = 30_000


def node_or_skip() -> str:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the useChat page needs Node.js 20+ (and `npm ci` in tests/js)")
    for package in ("@ai-sdk/react", "react-dom", "esbuild"):
        if not (JS / "node_modules" / package / "package.json").exists():
            pytest.skip(f"tests/js has no {package}: run `npm ci` in tests/js (.ci/run does) for the useChat page")
    return node


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, ApiServer]]:
    """`baton serve` with a token, and the page's app (its bundle built once, the README's route to Baton)."""
    node = node_or_skip()
    tmp: Path = tmp_path_factory.mktemp("usechat-page")
    with running_stack(tmp, BATON_API_TOKEN=TOKEN) as served:
        env = {**os.environ, "BATON_URL": served.url, "BATON_API_TOKEN": TOKEN}
        front = ApiServer(env, tmp, command=[node, str(JS / "page" / "serve.mjs")]).start()
        try:
            yield served, front
        finally:
            front.stop()


def test_type_watch_it_stream_reload_mid_answer_and_see_it_resume_once(app, page):
    served, front = app
    chat, message = "usechat-page", "usechat-page: say something long"
    full = "A resumed answer arrives once, whatever the reload cut, because Baton replays the turn."
    gate = Gate()  # the answer stays half-written until the page has been reloaded
    served.router.add(message, [held(Reply([{"type": "text", "text": full}], parts=8), gate, hold_after=6)])

    page.goto(f"{front.url}/?chat={chat}")
    box = page.get_by_test_id("input")
    box.fill(message)
    box.press("Enter")
    answer = page.locator('[data-testid="message"][data-role="assistant"]')
    expect(answer).to_contain_text("A resumed", timeout=WAIT_MS)  # streaming: the first words, held there
    assert gate.wait_reached(timeout=30)
    partial = answer.inner_text()
    assert partial and full.startswith(partial) and partial != full
    expect(page.get_by_test_id("status")).to_have_text("streaming")

    page.reload()  # mid-answer: useChat({resume: true}) reconnects on mount
    expect(answer).to_have_text(partial, timeout=WAIT_MS)  # the running turn again, from its start
    expect(page.get_by_test_id("status")).to_have_text("streaming")
    gate.open()
    expect(page.get_by_test_id("status")).to_have_text("ready", timeout=WAIT_MS)
    expect(answer).to_have_count(1)
    expect(answer).to_have_text(full)  # nothing doubled
    assert [m.text for m in served.client.transcript(chat) if m.role == "assistant"] == [full]
