"""The README's "Use it from Next.js" app, as Next.js builds and serves it: tests/js/next-app (the README's files,
tests/unit/test_readme_nextjs.py keeps them equal) built with `next build` and served by `next start` in front
of `baton serve` with a token, driven by headless Chromium through one chat: an answer after a tool round, an
approval (a reload while it waits, then Approve), a reload mid-answer (the history, then the running answer
resumed once) and a reload after it (the whole chat from the history route).

`npm ci` in tests/js/next-app installs Next.js and the AI SDK (.ci/run does); the module builds the app once
(`next build`, ~25 s on 2 cores). Without Node, or without the install, it is skipped and says which.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import Served, running_stack
from tests.support.fake_anthropic import Reply, text, tool_call
from tests.support.held_stream import Gate, held
from tests.support.processes import REPO
from tests.support.web_server import ApiServer

pytestmark = pytest.mark.integration

APP = REPO / "tests" / "js" / "next-app"
NEXT = APP / "node_modules" / "next" / "dist" / "bin" / "next"
TOKEN = "nextjs-app-token"
WAIT_MS = 30_000
BUILD_TIMEOUT = 300


def node_or_skip() -> str:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the Next.js example needs Node.js (and `npm ci` in tests/js/next-app)")
    for package in ("next", "ai", "@ai-sdk/react"):
        if not (APP / "node_modules" / package / "package.json").exists():
            pytest.skip(f"tests/js/next-app has no {package}: run `npm ci` there (.ci/run does) for its test")
    return node


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, ApiServer]]:
    """`baton serve` with a token, and the example app built by `next build` and served by `next start`."""
    node = node_or_skip()
    tmp: Path = tmp_path_factory.mktemp("nextjs-app")
    env = {**os.environ, "NEXT_TELEMETRY_DISABLED": "1"}
    built = subprocess.run([node, str(NEXT), "build"], cwd=APP, env=env, capture_output=True, text=True,
                           timeout=BUILD_TIMEOUT)  # fmt: skip
    assert built.returncode == 0, (built.stdout + built.stderr)[-4000:]
    with running_stack(tmp, BATON_API_TOKEN=TOKEN) as served:
        # What the README says to set: where baton serve is, and its token (kept on the server).
        env = {**env, "BATON_URL": served.url, "BATON_API_TOKEN": TOKEN}
        # ApiServer appends `--host H --port P`; next start spells them -H and -p.
        start = f'exec "{node}" "{NEXT}" start "{APP}" -H "$2" -p "$4"'
        front = ApiServer(env, tmp, command=["sh", "-c", start, "next"]).start()
        try:
            yield served, front
        finally:
            front.stop()


@pytest.mark.timeout(360)  # the module's `next build` (~25 s alone, more beside 2 other pytest workers) counts here
def test_a_chat_in_next_js_tool_round_approval_reload_mid_answer_and_the_whole_history(app, page, shoot):
    served, front = app
    chat, first = "nextjs-chat", "nextjs: look k1 up"
    story = "Once upon a time a long answer streamed, was reloaded in its middle, and arrived exactly once."
    gate = Gate()  # the story stays half-written until the page has been reloaded
    served.router.add(first, [
        tool_call("lookup", {"key": "k1"}, text="Let me look that up."),
        text("It is k1."),
        tool_call("deploy", {"env": "prod"}),
        text("Deployed to prod."),
        held(Reply([{"type": "text", "text": story}], parts=8), gate, hold_after=6),
    ])  # fmt: skip
    assistant = page.locator('section[data-role="assistant"]')
    status = page.locator("output")

    def send(words: str) -> None:
        box = page.get_by_placeholder("Message")
        box.fill(words)
        box.press("Enter")

    page.goto(f"{front.url}/chat/{chat}")
    expect(status).to_have_text("ready", timeout=WAIT_MS)  # hydrated, and resume found nothing running
    send(first)
    expect(page.locator('[data-tool="lookup"][data-state="output-available"]')).to_be_visible(timeout=WAIT_MS)
    expect(assistant.nth(0)).to_contain_text("It is k1.", timeout=WAIT_MS)
    expect(status).to_have_text("ready", timeout=WAIT_MS)

    send("Now deploy it to prod.")
    approve = page.get_by_role("button", name="Approve")
    expect(approve).to_be_visible(timeout=WAIT_MS)
    expect(page.locator('[data-tool="deploy"]')).to_have_attribute("data-state", "approval-requested")
    page.reload()  # while the call waits: the history holds it, the resume replays the parked turn over it
    expect(approve).to_have_count(1, timeout=WAIT_MS)
    expect(status).to_have_text("ready", timeout=WAIT_MS)
    approve.click()
    expect(assistant.nth(1)).to_contain_text("Deployed to prod.", timeout=WAIT_MS)
    expect(page.locator('[data-tool="deploy"]')).to_have_attribute("data-state", "output-available")
    expect(status).to_have_text("ready", timeout=WAIT_MS)

    send("Tell me a story.")
    expect(assistant.nth(2)).to_contain_text("Once upon", timeout=WAIT_MS)
    assert gate.wait_reached(timeout=30)
    partial = assistant.nth(2).inner_text()
    assert partial and story.startswith(partial) and partial != story

    page.reload()  # mid-answer: the history (server-side), then useChat({resume: true}) replays the running turn
    expect(assistant).to_have_count(3, timeout=WAIT_MS)  # the running answer once, not its history copy besides
    expect(assistant.nth(2)).to_have_text(partial, timeout=WAIT_MS)
    expect(assistant.nth(0)).to_contain_text("It is k1.")
    expect(status).to_have_text("streaming", timeout=WAIT_MS)
    gate.open()
    expect(status).to_have_text("ready", timeout=WAIT_MS)
    expect(assistant.nth(2)).to_have_text(story)
    expect(assistant).to_have_count(3)

    page.reload()  # after the answer: the whole chat from GET /api/chat/ID/messages
    expect(page.locator('section[data-role="user"]')).to_have_text(
        [first, "Now deploy it to prod.", "Tell me a story."], timeout=WAIT_MS
    )
    expect(assistant).to_have_count(3)
    expect(assistant.nth(0)).to_contain_text("Let me look that up.")
    expect(assistant.nth(0)).to_contain_text("It is k1.")
    expect(page.locator('[data-tool="lookup"][data-state="output-available"]')).to_be_visible()
    expect(page.locator('[data-tool="deploy"][data-state="output-available"]')).to_be_visible()
    expect(assistant.nth(1)).to_contain_text("Deployed to prod.")
    expect(assistant.nth(2)).to_have_text(story)
    expect(status).to_have_text("ready")
    shoot(page, "nextjs-after-reload")  # the whole chat after a reload (in tests/artifacts/)
    said = [m.text for m in served.client.transcript(chat) if m.role == "assistant"]
    assert said.count(story) == 1
