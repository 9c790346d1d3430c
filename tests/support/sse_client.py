"""A raw Server-Sent Events client over http.client: reads lines, parses id/event/data, sends Last-Event-ID.

Deliberately not a library: the tests check the bytes `baton serve` puts on the wire (every message has
an `id:`, comments arrive as pings), which a forgiving client would hide.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit


@dataclass
class Message:
    """One dispatched SSE message; `data` parsed as JSON."""

    id: str | None
    event: str | None
    data: Any
    raw_data: str


@dataclass
class SseStream:
    """An open stream. Iterate `messages()`; `comments` collects comment lines (pings) as they pass."""

    url: str
    headers: dict[str, str] = field(default_factory=dict)
    timeout: float = 30.0
    comments: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        parts = urlsplit(self.url)
        self._conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=self.timeout)
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        self._conn.request("GET", path, headers={"Accept": "text/event-stream", **self.headers})
        self.response = self._conn.getresponse()
        self.status = self.response.status

    def close(self) -> None:
        """Drop the connection (what a closed browser tab does)."""
        self._conn.close()

    def __enter__(self) -> SseStream:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def events(self) -> Iterator[Message | str]:
        """Messages and comments in wire order (a comment as its text, a message as a Message)."""
        ident: str | None = None
        event: str | None = None
        data: list[str] = []
        seen_field = False
        while True:
            raw = self.response.readline()
            if not raw:
                return  # the server ended the stream
            line = raw.decode("utf-8").rstrip("\r\n")
            if line == "":
                if seen_field and data:
                    text = "\n".join(data)
                    yield Message(ident, event, json.loads(text), text)
                ident, event, data, seen_field = None, None, [], False
                continue
            if line.startswith(":"):
                comment = line[1:].lstrip(" ")
                self.comments.append(comment)
                yield comment
                continue
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            seen_field = True
            if name == "id":
                ident = value
            elif name == "event":
                event = value
            elif name == "data":
                data.append(value)

    def messages(self) -> Iterator[Message]:
        for item in self.events():
            if isinstance(item, Message):
                yield item

    def read_until(self, stop: Callable[[Message], bool], limit: int = 10_000) -> list[Message]:
        """Messages up to and including the first one `stop` accepts (bounded by `limit`)."""
        out: list[Message] = []
        for message in self.messages():
            out.append(message)
            if stop(message) or len(out) >= limit:
                return out
        raise AssertionError(f"stream ended before the awaited message; got {[m.event for m in out]}")
