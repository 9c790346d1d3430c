"""Live text through `baton serve`: what a browser's raw SSE stream assembles equals the transcript.

Each test reads the chat's SSE stream from a real `baton serve`, folds it the way a client must (every
discarded attempt's deltas dropped) and compares with the transcript, whatever broke in between: the
provider's stream, the worker (SIGTERM, SIGKILL), or the browser's own connection.
"""

from __future__ import annotations

import pytest
import redis

from tasks.store import keys
from tasks.store.lease import holder_node
from tests.support.fake_anthropic import Fault, Reply, Script, failing, text
from tests.support.live_text import assistant_texts, fold

pytestmark = pytest.mark.integration

SLOW = {"pace": 0.2, "parts": 20}


def _done(m) -> bool:
    return m.event in ("turn.completed", "turn.failed", "turn.stopped")


def _is_delta(m) -> bool:
    return m.event == "text.delta"


def _assert_matches_transcript(stack, chat: str, messages) -> dict[str, str]:
    """The folded SSE messages equal the transcript's assistant texts, message by message."""
    folded = fold([m.data for m in messages])
    assert folded.breaches == []
    kept = assistant_texts(stack.client().transcript(chat))
    assert kept
    for message_id, said in kept.items():
        assert folded.texts.get(message_id, "") == said, (message_id, folded.texts)
    return kept


@pytest.mark.parametrize("fault", ["drop", "overloaded"])
def test_a_provider_fault_mid_answer_leaves_only_the_final_answer_on_the_wire(stack, serve, fault):
    """The broken attempt's deltas (with the sentinel) reach the browser, then its turn.retry, then the
    replay's; folded, the stream says exactly the transcript's answer."""
    doomed = Reply([{"type": "text", "text": "SENTINEL words that vanish"}], parts=4)
    stack.fake_api.set_handler(Script([failing(Fault(fault, after_events=5), doomed), text("The final answer.")]))
    stack.worker()
    api = serve()
    with api.stream(f"/api/chats/{fault}/stream") as s:
        assert api.post(f"/api/chats/{fault}/messages", {"text": "hi"})[0] == 202
        messages = s.read_until(_done)
    assert messages[-1].event == "turn.completed"
    cut = "".join(m.data["text"] for m in messages if _is_delta(m) and m.data["attempt"] == 1)
    assert cut.startswith("SENTINEL")
    assert "turn.retry" in [m.event for m in messages]
    assert list(_assert_matches_transcript(stack, fault, messages).values()) == ["The final answer."]


def test_a_browser_reconnecting_mid_answer_loses_and_repeats_nothing(stack, serve):
    """The SSE connection drops after the first delta; a reconnect with Last-Event-ID gets the rest: the two
    parts are one full read, id for id, and fold to the transcript's text."""
    slow = Reply([{"type": "text", "text": "A slow answer that streams in many small parts."}], **SLOW)
    stack.fake_api.set_handler(Script([slow]))
    stack.worker()
    api = serve()
    first = api.stream("/api/chats/reconnect/stream")
    assert api.post("/api/chats/reconnect/messages", {"text": "hi"})[0] == 202
    before = first.read_until(_is_delta)
    first.close()
    with api.stream("/api/chats/reconnect/stream", last_event_id=before[-1].id) as second:
        after = second.read_until(_done)
    assert any(_is_delta(m) for m in after), "the reconnect happened mid-answer"
    with api.stream("/api/chats/reconnect/stream") as again:
        full = again.read_until(_done)
    assert [(m.id, m.raw_data) for m in before + after] == [(m.id, m.raw_data) for m in full]
    assert list(_assert_matches_transcript(stack, "reconnect", before + after).values()) == [
        "A slow answer that streams in many small parts."
    ]


def test_sigterm_mid_answer_finished_by_another_worker(stack, serve):
    """A deploy drains the streaming worker; the other worker replays the step; the browser's stream folds
    to the answer the transcript keeps."""
    slow = Reply([{"type": "text", "text": "A slow answer that the deploy will cut in the middle."}], **SLOW)
    stack.fake_api.set_handler(Script([slow, text("Answered after the deploy.")]))
    workers = [stack.worker("w1"), stack.worker("w2")]
    api = serve()
    r = redis.Redis.from_url(stack.redis_server.url)
    with api.stream("/api/chats/drain/stream") as s:
        assert api.post("/api/chats/drain/messages", {"text": "hi"})[0] == 202
        before = s.read_until(_is_delta)
        node = holder_node((r.get(keys.lease(keys.owner("chat", "drain"))) or b"").decode())
        (streaming,) = [w for w in workers if w.hostname == node]
        streaming.terminate()
        messages = before + s.read_until(_done)
    assert messages[-1].event == "turn.completed"
    attempts = {m.data["attempt"] for m in messages if _is_delta(m)}
    assert len(attempts) >= 2
    assert list(_assert_matches_transcript(stack, "drain", messages).values()) == ["Answered after the deploy."]


def test_sigkill_mid_answer(stack, serve):
    """The streaming worker is killed; the survivor voids the dead attempt before its own text; the stream
    a browser held open the whole time folds to the transcript."""
    slow = Reply([{"type": "text", "text": "Text from a worker that is about to die mid sentence."}], **SLOW)
    stack.fake_api.set_handler(Script([slow, text("Answered by the survivor.")]))
    env = {"BATON_LEASE_TTL": "3"}
    w1 = stack.worker("w1", **env)
    api = serve()
    with api.stream("/api/chats/kill/stream", timeout=90) as s:
        assert api.post("/api/chats/kill/messages", {"text": "hi"})[0] == 202
        before = s.read_until(_is_delta)
        w1.kill9()
        stack.worker("w2", **env)
        messages = before + s.read_until(_done)
    assert messages[-1].event == "turn.completed"
    voided = [m for m in messages if m.event == "turn.retry" and m.data.get("attempt") == before[-1].data["attempt"]]
    assert voided
    assert list(_assert_matches_transcript(stack, "kill", messages).values()) == ["Answered by the survivor."]


def test_stop_mid_answer_over_http(stack, serve):
    """POST .../stop mid-answer: the stream shows turn.stopped naming the attempt it cut, so nothing of the
    cut text remains when folded; the turn reads stopped."""
    slow = Reply([{"type": "text", "text": "An answer the user will stop before it is done."}], **SLOW)
    stack.fake_api.set_handler(Script([slow]))
    stack.worker()
    api = serve()
    with api.stream("/api/chats/halt/stream") as s:
        status, sent = api.post("/api/chats/halt/messages", {"text": "hi"})
        assert status == 202
        s.read_until(_is_delta)
        assert api.post("/api/chats/halt/stop") == (200, {"id": "halt", "stopped": True})
        messages = s.read_until(_done)
    assert messages[-1].event == "turn.stopped"
    everything = api.stream("/api/chats/halt/stream")
    with everything:
        full = everything.read_until(_done)
    assert fold([m.data for m in full]).texts == {}
    assert api.get(f"/api/chats/halt/turns/{sent['turn_id']}")[1]["status"] == "stopped"
