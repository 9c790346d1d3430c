"""A fake Messages API whose streams can be held open mid-answer until the test lets them go.

The browser tests need an answer that is *visibly* half-written while they act (press Stop, reload the
page, check that a sentinel word was shown before its attempt is discarded). A timed stall would race the
browser; a `Gate` does not: the fake sends the first `hold_after` SSE events of a `HeldReply`, reports that
it got there, and waits until the test opens the gate. Then it either finishes the stream normally
(`then="finish"`) or cuts the connection (`then="drop"`, the client sees a truncated body, as with
`Fault("drop")`). Everything else behaves exactly as `FakeMessagesServer`.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass, field
from typing import Any, Literal

from . import fake_anthropic_sse as sse
from .fake_anthropic import FakeMessagesServer, Reply, _RequestHandler

HOLD_LIMIT = 90.0  # a gate nobody opens lets go by itself, so a broken test cannot hang its fixture


class Gate:
    """Where a held stream waits: `wait_reached()` until the fake got there, `open()` to let it go on."""

    def __init__(self) -> None:
        self._reached = threading.Event()
        self._open = threading.Event()

    def wait_reached(self, timeout: float = 30.0) -> bool:
        """True once the fake has sent the events before the hold (False on timeout)."""
        return self._reached.wait(timeout)

    def open(self) -> None:
        """Let the held stream continue (or drop, as its reply says)."""
        self._open.set()


@dataclass(frozen=True)
class HeldReply(Reply):
    """A streamed reply that stops after `hold_after` SSE events until `gate` opens, then `then`s."""

    gate: Gate = field(default_factory=Gate)
    hold_after: int = 4
    then: Literal["finish", "drop"] = "finish"


def held(reply: Reply, gate: Gate, *, hold_after: int = 4, then: Literal["finish", "drop"] = "finish") -> HeldReply:
    """`reply`, held at event `hold_after` (event 4 is the first text delta of a one-block text reply)."""
    fields = {f.name: getattr(reply, f.name) for f in dataclasses.fields(Reply)}
    return HeldReply(**fields, gate=gate, hold_after=hold_after, then=then)


class _HoldingHandler(_RequestHandler):
    def _deliver(self, body: dict[str, Any], reply: Reply) -> None:
        if not isinstance(reply, HeldReply) or not body.get("stream"):
            super()._deliver(body, reply)
            return
        fake = self.server.fake
        assert isinstance(fake, HoldingMessagesServer)
        fake.gates.append(reply.gate)
        content = sse.normalize_content(reply.content)
        stop_reason = reply.stop_reason or sse.default_stop_reason(content)
        events = sse.stream_events(
            sse.new_id("msg"),
            str(body.get("model", "claude-fake")),
            content,
            stop_reason,
            reply.input_tokens,
            reply.output_tokens,
            parts=reply.parts,
        )
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("cache-control", "no-cache")
        self.send_header("request-id", sse.new_id("req"))
        self.send_header("transfer-encoding", "chunked")
        self.send_header("Connection", "close")
        self.end_headers()
        for name, data in events[: reply.hold_after]:
            self.wfile.write(sse.chunk(sse.encode_event(name, data)))
        self.wfile.flush()
        reply.gate._reached.set()
        reply.gate._open.wait(HOLD_LIMIT)
        if reply.then == "drop" or fake.stopping:
            self._abort()
            return
        for name, data in events[reply.hold_after :]:
            self.wfile.write(sse.chunk(sse.encode_event(name, data)))
        self.wfile.write(sse.LAST_CHUNK)


class HoldingMessagesServer(FakeMessagesServer):
    """`FakeMessagesServer` that understands `HeldReply`; `stop()` lets every held stream go first."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.gates: list[Gate] = []
        self.stopping = False

    def start(self) -> HoldingMessagesServer:
        """Serve as the base class does, with the handler that can hold a stream."""
        super().start()
        # No request can have arrived yet: nobody knows the URL before start() returns.
        assert self._httpd is not None
        self._httpd.RequestHandlerClass = _HoldingHandler
        return self

    def stop(self) -> None:
        """Open every gate (held connections are then cut), then stop as the base class does."""
        self.stopping = True
        for gate in list(self.gates):
            gate.open()
        super().stop()
