"""A deploy seen from the browser: the worker writing an answer gets SIGTERM mid-answer, another worker
finishes it. Its own stack (it ends a worker); real redis-server, workers, the SDK against the fake API,
`baton serve` and Chromium.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import WORKER_ENV, Served, running_stack
from tests.support.fake_anthropic import text
from tests.support.held_stream import Gate, held

pytestmark = pytest.mark.integration

WAIT_MS = 60_000  # a drain, a second worker picking the turn up and its replay, on a busy machine


@pytest.fixture
def drained(tmp_path) -> Iterator[Served]:
    with running_stack(tmp_path) as s:
        yield s


def test_a_deploy_mid_answer_shows_its_notice_and_the_answer_once_from_the_next_worker(drained, page, shoot):
    """SIGTERM to the worker while the answer is half-written: the half-written text is cleared, the exact
    deploy notice shows as a calm note, and the answer another worker writes appears once, equal to the
    transcript's."""
    chat, message = "page-drain", "page-drain: tell me about deploys"
    full = "Deploys drain the worker; the turn moves on to the next one without losing a word."
    gate = Gate()  # the first worker's stream stays half-written until the drain cuts it
    drained.router.add(message, [held(text(full), gate, hold_after=4), text(full)])

    page.goto(f"{drained.url}/?chat={chat}")
    expect(page.get_by_test_id("connection")).to_have_attribute("data-state", "live", timeout=WAIT_MS)
    box = page.get_by_test_id("composer-input")
    box.fill(message)
    box.press("Enter")
    live = page.locator('[data-testid="live"] [data-testid="assistant-text"]')
    expect(live).to_contain_text("Deploys", timeout=WAIT_MS)
    assert gate.wait_reached(timeout=30)

    drained.stack.worker("w2", **WORKER_ENV)  # the worker that will finish the turn
    first = drained.stack.workers[0]
    first.terminate()  # a deploy: SIGTERM, warm shutdown, the drain requeues the turn
    first.wait_exit(timeout=30)

    note = page.locator('[data-testid="notice"][data-kind="interrupted"]')
    expect(note).to_have_text("Interrupted by a platform deploy; resuming (attempt 1 of 3).", timeout=WAIT_MS)
    final = page.locator('[data-testid="transcript"] [data-testid="assistant-text"]')
    expect(final).to_have_text(full, timeout=WAIT_MS)
    expect(live).to_have_count(0)
    assert [m.text for m in drained.client.transcript(chat) if m.role == "assistant"] == [full]
    assert page.get_by_test_id("messages").inner_text().count("Deploys drain") == 1
    expect(page.locator('[data-testid="timeline-event"][data-type="turn.retry"]').first).to_contain_text(
        "interruption 1 of 3"
    )
    # "Moved …" alone, or "Answered after 1 discarded attempt · moved …" when the drain cut a streaming attempt.
    expect(page.get_by_test_id("turn-meta")).to_contain_text(re.compile("moved to another worker by a deploy", re.I))
    shoot(page, "6-deploy-mid-answer")
