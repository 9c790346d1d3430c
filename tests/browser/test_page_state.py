"""The page's state module (web/static/state.js) in Chromium, without a server: the files are served to the
browser by Playwright's request routing, and streams are fed to `PageState` directly.

What is proved here is the rule the page lives by: the shown answer is the concatenation of the deltas of
the attempts not discarded, whatever the chunking, however often an entry is delivered again, and a page
that starts over (a reload) from the same stream shows the same text, never more.
"""

from __future__ import annotations

import mimetypes
from itertools import pairwise
from typing import Any
from urllib.parse import urlparse

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.processes import REPO

pytestmark = pytest.mark.integration

STATIC = REPO / "web" / "static"
ORIGIN = "http://page.baton.test"

# Feed `stream` ([type, event] pairs) to a fresh PageState; return what the live area would show.
FEED = """
async ([stream, transcript, asOf]) => {
  const { PageState } = await import("/static/state.js");
  const s = new PageState(null);
  for (const [type, ev] of stream) s.receive(type, ev);
  if (transcript !== null) s.setTranscript(transcript, asOf ?? s.applied);
  return s.visibleLive().map((item) => item.kind === "text" ? item.text : item.kind);
}
"""


@pytest.fixture
def state_page(page):
    def serve(route: Any) -> None:
        path = urlparse(route.request.url).path
        if path == "/":
            route.fulfill(status=200, content_type="text/html", body="<!doctype html><title>state</title>")
            return
        file = STATIC / path.removeprefix("/static/")
        if not path.startswith("/static/") or not file.is_file():
            route.fulfill(status=404, body="")
            return
        kind = "text/javascript" if file.suffix == ".js" else mimetypes.guess_type(file.name)[0] or "text/plain"
        route.fulfill(status=200, content_type=kind, body=file.read_bytes())

    page.route(f"{ORIGIN}/**", serve)
    page.goto(f"{ORIGIN}/")
    return page


def feed(page, stream: list[tuple[str, dict[str, Any]]], transcript: list[dict[str, Any]] | None = None) -> list[str]:
    return page.evaluate(FEED, [[list(e) for e in stream], transcript, None])


class Ids:
    """Stream ids in order, as Redis gives them."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self) -> str:
        self.n += 1
        return f"1700000000000-{self.n}"


def chunks(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts} | {0, len(text)})
    return [text[a:b] for a, b in pairwise(points) if b > a]


# An attempt: its text, where it is cut into deltas, and whether it is discarded afterwards.
attempt_st = st.tuples(
    st.text(alphabet="abcdefgh XYZ.,", min_size=1, max_size=24),
    st.lists(st.integers(0, 30), max_size=4),
    st.booleans(),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    attempts=st.lists(attempt_st, min_size=1, max_size=4),
    duplicates=st.lists(st.integers(0, 60), max_size=6),
    republished=st.lists(st.integers(0, 60), max_size=3),
)
def test_shown_text_is_the_non_discarded_deltas_however_chunked_or_redelivered(
    state_page, attempts, duplicates, republished
):
    """Random attempts, random chunking, random discards, random entries delivered twice (same id) and deltas
    published twice (a new id, the same message, attempt and index, before that attempt's discard): the live
    text is exactly the concatenation of the attempts not discarded; a fresh state fed the same stream (a
    reload) shows the same."""
    ids = Ids()
    stream: list[tuple[str, dict[str, Any]]] = [("turn.started", {"id": ids(), "turn_id": "t1"})]
    expected = ""
    for n, (text, cuts, discarded) in enumerate(attempts, start=1):
        for index, part in enumerate(chunks(text, cuts)):
            stream.append(
                (
                    "text.delta",
                    {"id": ids(), "turn_id": "t1", "message_id": "t1:m0", "attempt": n, "index": index, "text": part},
                )
            )
        if discarded:
            stream.append(
                ("turn.retry", {"id": ids(), "turn_id": "t1", "message_id": "t1:m0", "attempt": n, "discarded": True})
            )
        else:
            expected += text
    redelivered = list(stream)
    for d in duplicates:
        at = d % len(redelivered)
        redelivered.insert(at + 1, redelivered[at])  # the same entry again, right after itself
    for r in republished:
        at = r % len(redelivered)
        kind, ev = redelivered[at]
        if kind == "text.delta":  # the same delta again under a new id, right after the original
            redelivered.insert(at + 1, (kind, {**ev, "id": f"{ev['id']}9"}))
    shown = feed(state_page, redelivered)
    assert shown == ([expected] if expected else [])
    assert feed(state_page, stream) == shown


def test_an_entry_delivered_twice_is_applied_once(state_page):
    """A reconnect that delivered an entry again (the same stream id) changes nothing: one tool call, one text."""
    ids = Ids()
    called = ("tool.called", {"id": ids(), "turn_id": "t1", "tool_use_id": "tu1", "name": "lookup", "input": {}})
    stream = [
        ("turn.started", {"id": ids(), "turn_id": "t1"}),
        ("text.delta", {"id": ids(), "turn_id": "t1", "message_id": "t1:m0", "attempt": 1, "index": 0, "text": "A"}),
        called,
        called,
    ]
    assert feed(state_page, stream) == ["A", "tool"]


def test_a_settled_turn_shows_only_the_transcript_once_it_was_read_after_the_settle(state_page):
    """Live text stays until a transcript read after `turn.completed` is shown, then only the transcript's copy
    counts; a transcript holding the message_id hides the live copy at once."""
    ids = Ids()
    stream = [
        ("turn.started", {"id": ids(), "turn_id": "t1"}),
        ("text.delta", {"id": ids(), "turn_id": "t1", "message_id": "t1:m0", "attempt": 1, "index": 0, "text": "Hi"}),
        ("turn.completed", {"id": ids(), "turn_id": "t1"}),
    ]
    before = state_page.evaluate(FEED, [[list(e) for e in stream], [], 1])  # a transcript read before the settle
    assert before == ["Hi"]
    assert feed(state_page, stream, transcript=[]) == []
    recorded = [{"role": "assistant", "content": [{"type": "text", "text": "Hi"}], "message_id": "t1:m0"}]
    assert feed(state_page, stream[:2], transcript=recorded) == []


def test_a_discard_for_a_message_the_page_never_saw_clears_only_the_unfinished_answer(state_page):
    """The sweeper reports a lost worker under its own message id (`TURN:lost`): the turn's unfinished live
    text goes, a message whose step already asked for a tool stays."""
    ids = Ids()

    def delta(mid: str, text: str) -> tuple[str, dict[str, Any]]:
        return ("text.delta", {"id": ids(), "turn_id": "t1", "message_id": mid, "attempt": 1, "index": 0, "text": text})

    stream = [
        ("turn.started", {"id": ids(), "turn_id": "t1"}),
        delta("t1:m0", "Let me look."),
        ("tool.called", {"id": ids(), "turn_id": "t1", "tool_use_id": "tu1", "name": "lookup", "input": {}}),
        ("tool.result", {"id": ids(), "turn_id": "t1", "tool_use_id": "tu1", "status": "ok"}),
        delta("t1:m1", "Half an ans"),
        (
            "turn.retry",
            {"id": ids(), "turn_id": "t1", "message_id": "t1:lost", "discarded": True, "attempt": 1, "max_attempts": 3},
        ),
    ]
    assert feed(state_page, stream) == ["Let me look.", "tool"]
    # A failure before any output of the second step names a message with no deltas: nothing is cleared.
    early = [*stream[:4], ("turn.retry", {"id": ids(), "turn_id": "t1", "message_id": "t1:m1", "discarded": True})]
    assert feed(state_page, early) == ["Let me look.", "tool"]
