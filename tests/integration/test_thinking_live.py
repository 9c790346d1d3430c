"""Reasoning live, through real workers, the real SDKs against the fakes and a real `baton serve`: the SSE stream's
`reasoning.delta` messages carry the fields of `text.delta` and are fenced the same way (a discarded attempt's
reasoning comes before the event that discards it, so the stream folded the way a client must says exactly the
reasoning the transcript keeps), and the history route returns the kept thinking as reasoning parts."""

from __future__ import annotations

import pytest

from tests.conftest import PROVIDERS, Stack
from tests.support.fake_anthropic import Fault, Script, failing, text, thought, tool_call
from tests.support.live_text import assistant_reasoning, assistant_texts, fold

pytestmark = pytest.mark.integration

THINKING = {"BATON_AGENTS": "tests.support.agents_thinking:AGENTS"}
DOOMED = "SENTINEL reasoning of an attempt that breaks before its call."


def _done(m) -> bool:
    return m.event in ("turn.completed", "turn.failed", "turn.stopped")


@pytest.mark.parametrize("provider", PROVIDERS)
def test_reasoning_streams_live_and_a_discarded_attempts_reasoning_goes_with_it(stack: Stack, serve, provider):
    """A thinking tool loop whose first attempt streams its whole reasoning and breaks before its call: the browser's
    stream carries that reasoning (attempt 1), then the `turn.retry` discarding it, then the replay's; folded, the
    reasoning and the text of every step equal the transcript's thinking and text blocks, message by message."""
    first = thought(DOOMED, tool_call("lookup", {"key": "r"}))
    stack.fake_api.set_handler(Script([
        failing(Fault("drop", after_events=8), like=first),  # start, ping, thinking start, 3 deltas, signature, stop
        thought("Look r up.", tool_call("lookup", {"key": "r"})),
        thought("Now answer.", text("R is found.")),
    ]))  # fmt: skip
    stack.worker("w1", **THINKING)
    api = serve(**THINKING)
    with api.stream("/api/chats/live-think/stream") as s:
        assert api.post("/api/chats/live-think/messages", {"text": "what is r?"})[0] == 202
        messages = s.read_until(_done)
    assert messages[-1].event == "turn.completed"
    reasoning = [m for m in messages if m.event == "reasoning.delta"]
    assert reasoning and all(
        m.data["type"] == "reasoning.delta" and set(m.data) >= {"id", "turn_id", "message_id", "attempt", "index",
                                                                "text", "chat_id", "at"}
        for m in reasoning
    )  # fmt: skip
    events = [m.event for m in messages]
    doomed = [i for i, m in enumerate(messages) if m.event == "reasoning.delta" and m.data["attempt"] == 1
              and m.data["message_id"].endswith(":m0")]  # fmt: skip
    assert "".join(messages[i].data["text"] for i in doomed) == DOOMED
    assert max(doomed) < events.index("turn.retry")
    folded = fold([m.data for m in messages])
    assert folded.breaches == []
    transcript = stack.client().transcript("live-think")
    assert folded.reasoning == assistant_reasoning(transcript)
    assert list(folded.reasoning.values()) == ["Look r up.", "Now answer."]
    assert {k: v for k, v in folded.texts.items() if v} == {k: v for k, v in assistant_texts(transcript).items() if v}
    assert stack.client().events("live-think") and all(
        e.type != "reasoning.delta" for e in stack.client().events("live-think")
    )  # live text is the stream's, not an event


def test_the_history_route_returns_kept_thinking_as_reasoning_parts(stack: Stack, serve):
    """`GET /api/chat/{id}/messages` of a settled thinking turn: a reasoning part (with the thinking's words) before
    each step's call or text, as its stream assembled them."""
    stack.fake_api.set_handler(Script([thought("Look h up.", tool_call("lookup", {"key": "h"})), text("H.")]))
    stack.worker("w1", **THINKING)
    api = serve(**THINKING)
    client = stack.client()
    assert client.wait(client.send_message("hist-think", "what is h?"), timeout=60).status == "completed"
    status, history = api.get("/api/chat/hist-think/messages")
    assert status == 200
    parts = history[1]["parts"]
    assert [p["type"] for p in parts] == ["step-start", "reasoning", "tool-lookup", "step-start", "text"]
    assert (parts[1]["text"], parts[1]["state"]) == ("Look h up.", "done")
