"""The chat page in a real browser (Debian's Chromium, headless, driven by Playwright) against the real stack:
redis-server, a celery worker, the real anthropic SDK against the fake Messages API, and `baton serve`.

Each test waits on what the page shows (Playwright's auto-waiting `expect`), never on a sleep, and keeps a
screenshot of what a person would have seen (tests/artifacts/, gitignored; see conftest.ARTIFACTS).
"""

from __future__ import annotations

from urllib.parse import urlencode

import pytest
from playwright.sync_api import Page, expect

from tests.support.fake_anthropic import Fault, failing, text, thought, tool_call
from tests.support.fake_anthropic_sse import split_chunks
from tests.support.held_stream import Gate, held

pytestmark = pytest.mark.integration

WAIT_MS = 45_000  # a turn, a replay or a transcript refresh on a busy two-core machine; far above the need


def open_chat(page: Page, served, chat_id: str, *, by: str | None = None) -> None:
    page.goto(f"{served.url}/?chat={chat_id}" + (f"&{urlencode({'by': by})}" if by else ""))
    expect(page.get_by_test_id("connection")).to_have_attribute("data-state", "live", timeout=WAIT_MS)


def send(page: Page, message: str) -> None:
    box = page.get_by_test_id("composer-input")
    box.fill(message)
    box.press("Enter")  # Enter sends


def live_text(page: Page):
    return page.locator('[data-testid="live"] [data-testid="assistant-text"]')


def final_text(page: Page):
    return page.locator('[data-testid="transcript"] [data-testid="assistant-text"]')


def assistant_texts(served, chat_id: str) -> list[str]:
    return [m.text for m in served.client.transcript(chat_id) if m.role == "assistant"]


def test_a_stream_broken_mid_answer_shows_its_draft_then_only_the_replayed_answer(served, page, shoot):
    """A first stream that breaks after a sentinel word: the page shows the sentinel while the draft streams,
    clears it when the attempt is discarded, and ends with the replayed answer only; the timeline lists the
    discarded attempt with its failure class."""
    chat, message = "page-drop", "page-drop: what is the answer?"
    gate = Gate()
    draft = text("SENTINEL-7Q is a draft that will never finish")
    served.router.add(message, [held(draft, gate, then="drop"), text("The replayed answer, written exactly once.")])

    open_chat(page, served, chat)
    send(page, message)
    expect(live_text(page)).to_contain_text("SENTINEL-7Q", timeout=WAIT_MS)
    shoot(page, "1-drop-draft-streaming")

    gate.open()  # the fake cuts the connection: the SDK sees a truncated stream, the worker replays
    expect(final_text(page)).to_have_text("The replayed answer, written exactly once.", timeout=WAIT_MS)
    expect(page.get_by_test_id("messages")).not_to_contain_text("SENTINEL")
    retry = page.locator('[data-testid="timeline-event"][data-type="turn.retry"]')
    expect(retry).to_have_count(1)
    expect(retry.get_by_test_id("timeline-discarded")).to_be_visible()
    expect(retry.get_by_test_id("timeline-class")).to_have_text("infra_transient")
    expect(page.locator('[data-testid="timeline-event"][data-type="turn.completed"]')).to_have_count(1)
    assert assistant_texts(served, chat) == ["The replayed answer, written exactly once."]
    expect(page.get_by_test_id("turn-meta")).to_contain_text("Answered after 1 discarded attempt")
    # Which agent and model wrote the answer (the fleet's one `default` agent here), as its turn.started said.
    expect(final_text(page).locator("xpath=ancestor::*[@data-role='assistant']").get_by_test_id("answered-by")) \
        .to_have_text(" · default · claude-test")
    shoot(page, "1-drop-replayed")
    page.emulate_media(color_scheme="dark")
    shoot(page, "1-drop-replayed-dark")
    page.emulate_media(color_scheme="light")
    page.set_viewport_size({"width": 420, "height": 900})  # a phone: chat above, timeline below
    shoot(page, "1-drop-replayed-narrow")


def test_stop_on_a_slow_answer_says_stopped_by_user(served, page, shoot):
    """Stop while an answer is half-written (its stream held open): the turn stops, the page shows the exact
    words `Stopped by user.` as a calm note, and the Stop button goes away."""
    chat, message = "page-stop", "page-stop: write me something long"
    gate = Gate()  # never opened by the test: the answer stays half-written until Stop
    served.router.add(message, [held(text("A slow answer that keeps on going and going"), gate)])

    open_chat(page, served, chat)
    send(page, message)
    expect(live_text(page)).to_contain_text("A slow", timeout=WAIT_MS)
    stop = page.get_by_test_id("stop-button")
    expect(stop).to_be_visible()
    shoot(page, "2-stop-before")
    stop.click()

    note = page.locator('[data-testid="notice"][data-kind="stopped"]')
    expect(note).to_have_text("Stopped by user.", timeout=WAIT_MS)
    expect(stop).to_be_hidden()
    expect(page.locator('[data-testid="timeline-event"][data-type="turn.stopped"]')).to_have_count(1)
    shoot(page, "2-stop-after")


def test_sending_while_an_answer_streams_interrupts_it(served, page, shoot):
    """While an answer is half-written (held open), the send button reads "Interrupt and send"; a message sent
    then goes with on_busy=interrupt: the half-written turn ends with the calm note `Interrupted by a new
    message.`, the new message is answered, and nothing is shown twice."""
    chat, message = "page-interrupt", "page-interrupt: tell me a long story"
    gate = Gate()  # never opened: the first answer stays half-written until the interrupt
    first = "Once upon a time there was a story that never got to its end"
    served.router.add(message, [held(text(first), gate)])
    # The fake routes by the request's first user text: the interrupted turn left no answer, so the new turn's
    # request opens with both messages, as the history stood.
    served.router.add(f"{message}\njust the short version", [text("Here is the short version instead.")])

    open_chat(page, served, chat)
    send_button = page.get_by_test_id("send-button")
    expect(send_button).to_have_text("Send", timeout=WAIT_MS)
    send(page, message)
    expect(live_text(page)).to_contain_text("Once upon", timeout=WAIT_MS)
    expect(send_button).to_have_text("Interrupt and send")
    expect(send_button).to_have_attribute("title", "Stops the answer being written and sends this message instead")
    page.get_by_test_id("composer-input").fill("just the short version")
    shoot(page, "6-interrupt-before")
    with page.expect_request(lambda r: r.method == "POST" and r.url.endswith("/messages")) as sent:
        page.get_by_test_id("composer-input").press("Enter")
    assert sent.value.post_data_json == {"text": "just the short version", "on_busy": "interrupt"}

    note = page.locator('[data-testid="notice"]')
    expect(note).to_have_text(["Interrupted by a new message."], timeout=WAIT_MS)
    expect(final_text(page).last).to_have_text("Here is the short version instead.", timeout=WAIT_MS)
    expect(live_text(page)).to_have_count(0)
    expect(send_button).to_have_text("Send")
    stopped = page.locator('[data-testid="timeline-event"][data-type="turn.stopped"]')
    expect(stopped).to_have_count(1)
    expect(stopped).to_contain_text("Interrupted by a new message")
    expect(page.locator('[data-testid="timeline-event"][data-type="turn.completed"]')).to_have_count(1)
    expect(page.get_by_test_id("user-text")).to_have_text([message, "just the short version"])
    shown = page.get_by_test_id("messages").inner_text()
    assert shown.count("Here is the short version instead.") == 1 and shown.count("Once upon") <= 1, shown
    assert assistant_texts(served, chat)[-1] == "Here is the short version instead."
    shoot(page, "6-interrupt-after")


def test_reloading_mid_answer_continues_without_doubled_text(served, page, shoot):
    """Reload while the answer is half-written: the reloaded page shows the same partial text once (not
    twice), then the rest as it streams, and ends with exactly the transcript's text."""
    chat, message = "page-reload", "page-reload: spell the alphabet"
    gate = Gate()
    full = "Alpha bravo charlie delta echo foxtrot golf hotel india juliett"
    # Event 5 is the second text delta: two of the three chunks are out when the stream is held.
    served.router.add(message, [held(text(full), gate, hold_after=5)])
    partial = "".join(split_chunks(full)[:2])

    open_chat(page, served, chat)
    send(page, message)
    expect(live_text(page)).to_have_text(partial, timeout=WAIT_MS)

    page.reload()
    expect(page.get_by_test_id("connection")).to_have_attribute("data-state", "live", timeout=WAIT_MS)
    expect(live_text(page)).to_have_text(partial, timeout=WAIT_MS)  # once, not doubled
    expect(page.get_by_test_id("user-text")).to_have_text(message)
    shoot(page, "3-reload-mid-answer")

    gate.open()
    expect(final_text(page)).to_have_text(full, timeout=WAIT_MS)
    expect(live_text(page)).to_have_count(0)
    assert assistant_texts(served, chat) == [full]
    assert page.get_by_test_id("messages").inner_text().count("Alpha") == 1
    shoot(page, "3-reload-finished")


def test_a_failure_shows_its_class_and_retry_finishes_the_turn(served, page, shoot):
    """A turn whose every attempt is overloaded fails: the page shows an error with its failure class and a
    Retry button, the timeline shows each discarded attempt; Retry runs the turn again to its answer."""
    chat, message = "page-fail", "page-fail: are you there?"
    served.router.add(message, [*[failing(Fault("overloaded"))] * 4, text("Back again, answered after a retry.")])

    open_chat(page, served, chat)
    send(page, message)
    failure = page.get_by_test_id("failure")
    expect(failure).to_be_visible(timeout=WAIT_MS)
    expect(failure.get_by_test_id("failure-class")).to_have_text("provider_overloaded")
    expect(page.locator('[data-testid="timeline-event"][data-type="turn.failed"]')).to_have_count(1)
    expect(page.locator('[data-testid="timeline-event"][data-type="turn.failed"]')).to_contain_text(
        "provider_overloaded"
    )
    shoot(page, "4-failure-timeline")

    failure.get_by_test_id("retry-button").click()
    expect(final_text(page)).to_have_text("Back again, answered after a retry.", timeout=WAIT_MS)
    expect(page.get_by_test_id("retry-button")).to_have_count(0)
    shoot(page, "4-failure-retried")


def test_a_run_view_lists_its_steps(served, page, shoot, tmp_path):
    """`/?run=ID`: the run's goal, its status, its steps (a tool call and the model's answers) and timeline."""
    ws = tmp_path / "ws"
    ws.mkdir()
    goal = "page-run: add a greeting file"
    served.router.add(
        goal,
        [
            tool_call("write_file", {"path": "hello.txt", "content": "Hello!\n"}, id="toolu_page_w"),
            text("Wrote hello.txt with a greeting."),
        ],
    )
    ref = served.client.start_run(goal, workspace=ws)

    page.goto(f"{served.url}/?run={ref.run_id}")
    expect(page.get_by_test_id("run-status")).to_have_text("completed", timeout=WAIT_MS)
    expect(page.get_by_test_id("run-goal")).to_have_text(goal)
    expect(page.locator('[data-testid="run-step"][data-kind="tool"]')).to_have_count(1)
    expect(page.get_by_test_id("tool-call").first).to_contain_text("write_file")
    expect(final_text(page).last).to_have_text("Wrote hello.txt with a greeting.")
    expect(page.get_by_test_id("composer")).to_be_hidden()
    assert (ws / "hello.txt").read_text() == "Hello!\n"
    shoot(page, "5-run-view")


def test_an_approval_card_approves_and_the_answer_follows(served, page, shoot):
    """A write tool that needs approval parks the turn: the page shows the call with Approve / Deny; Approve
    runs it once on the worker and the model's answer streams in; the timeline shows the request and approval,
    and who approved: the name the page was given (`&by=`), recorded with the decision (issue 31)."""
    from tests.support import counting_tools

    chat, message = "page-approve", "page-approve: deploy to staging"
    served.router.add(
        message,
        [tool_call("deploy", {"env": "staging"}, id="toolu_page_deploy"), text("Deployed to staging, as approved.")],
    )
    open_chat(page, served, chat, by="Ada Lovelace")
    send(page, message)
    card = page.get_by_test_id("approval")
    expect(card).to_be_visible(timeout=WAIT_MS)
    expect(card).to_contain_text("deploy")
    expect(card).to_contain_text("staging")
    shoot(page, "6-approval-requested")
    card.get_by_test_id("approve-button").click()
    expect(final_text(page)).to_have_text("Deployed to staging, as approved.", timeout=WAIT_MS)
    approved = page.locator('[data-testid="timeline-event"][data-type="tool.approved"]')
    expect(approved).to_have_count(1)
    expect(approved).to_contain_text("by Ada Lovelace")
    (event,) = [e for e in served.client.events(chat) if e.type == "tool.approved"]
    assert event.model_extra["by"] == "Ada Lovelace"
    assert counting_tools.calls(served.client.redis, "deploy") == 1
    shoot(page, "6-approval-approved")


def test_thinking_streams_folded_and_stays_folded_before_the_answer(served, page, shoot):
    """A model that thinks first: while its reasoning streams, the live answer shows it folded (a closed `<details>`);
    that attempt breaks and its reasoning goes with it; the settled answer keeps the replay's folded before the
    answer's text, and opening it shows every word of it (and nothing of the broken attempt's)."""
    chat, message = "page-think", "page-think: think, then answer"
    thinking = "PLAN-3K first weigh the options, then pick the shortest one."
    gate = Gate()
    doomed = thought("SENTINEL-9T thoughts of an attempt that breaks", text("never said"))
    served.router.add(message, [held(doomed, gate, hold_after=5, then="drop"),
                                thought(thinking, text("The answer after thinking."))])  # fmt: skip

    open_chat(page, served, chat)
    send(page, message)
    live = page.locator('[data-testid="live"] [data-testid="thinking"]')
    expect(live).to_have_count(1, timeout=WAIT_MS)
    expect(live).not_to_have_attribute("open", "")
    expect(live.get_by_test_id("thinking-text")).to_be_hidden()
    assert "SENTINEL-9T" in live.get_by_test_id("thinking-text").text_content()
    shoot(page, "1-think-streaming-folded")
    gate.open()

    expect(final_text(page)).to_have_text("The answer after thinking.", timeout=WAIT_MS)
    kept = page.locator('[data-testid="transcript"] [data-testid="thinking"]')
    expect(kept).to_have_count(1)
    expect(kept.get_by_test_id("thinking-text")).to_be_hidden()
    body = page.locator('[data-testid="transcript"] [data-role="assistant"] .msg-body > *')
    assert body.nth(0).get_attribute("data-testid") == "thinking", "the reasoning comes before the answer"
    kept.locator("summary").click()
    expect(kept.get_by_test_id("thinking-text")).to_have_text(thinking)
    expect(page.get_by_text("SENTINEL-9T")).to_have_count(0)
    shoot(page, "2-think-settled-opened")
