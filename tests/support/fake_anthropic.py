"""A local fake of the Anthropic Messages API (``POST /v1/messages``) that the real SDK talks to over HTTP.

Why a real HTTP server rather than mocking the SDK: Baton's guarantees (no lost work, no corrupted chat
history) hinge on what the *real* ``anthropic`` client does when the network misbehaves: which exception a
dropped stream raises, how a stall times out, how an in-stream ``overloaded_error`` surfaces. Only real
bytes on a real socket exercise that code. The server also validates histories the way the API does
(tool_use/tool_result pairing), so a worker that would corrupt a conversation fails a test, not production.

Usage::

    with FakeMessagesServer(Script([tool_call("bash", {"cmd": "ls"}), text("done")])) as server:
        client = anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0)

Standalone (benchmarks): ``python -m tests.support.fake_anthropic --port 0 --script replies.json``
prints the URL on the first line of stdout and serves until interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

from . import fake_anthropic_sse as sse
from .fake_anthropic_sse import first_user_text, validate_request
from .fake_files import received
from .fake_prompt_cache import MAX_BREAKPOINTS, PromptCache, breakpoint_count, prompt_tokens
from .fake_rate_limit import FixedWindow, Taken, anthropic_headers

__all__ = [
    "ByConversation",
    "FakeMessagesServer",
    "Fault",
    "Handler",
    "Reply",
    "Script",
    "failing",
    "text",
    "thought",
    "tool_call",
]


@dataclass(frozen=True)
class Fault:
    """A way for one reply to go wrong, so tests can prove recovery from each real failure mode.

    ``after_events`` counts SSE events sent before the fault (``message_start`` is event 1, ``ping`` is 2);
    at or past the event count the whole stream is sent but its body is never terminated, so a drop still
    raises in the client. Non-streaming requests: drop/stall happen before any response byte, and
    ``overloaded`` becomes HTTP 529. ``message`` (an addition to the agreed API) sets the ``http`` error text.
    """

    kind: Literal["drop", "stall", "overloaded", "http"]
    after_events: int = 0
    seconds: float = 30.0
    status: int = 500
    retry_after: float | None = None
    message: str | None = None


@dataclass(frozen=True)
class Reply:
    """One scripted assistant turn; with ``fault`` set it is cut short instead of delivered whole."""

    content: list[dict[str, Any]]
    stop_reason: str | None = None
    fault: Fault | None = None
    input_tokens: int = 10
    output_tokens: int = 5
    pace: float = 0.0  # seconds between SSE events, for answers that stream visibly (live text, mid-answer faults)
    parts: int = 3  # text deltas a text block is split into
    # Input tokens read from the provider's prompt cache (besides `input_tokens`): the Anthropic fake reports them as
    # `cache_read_input_tokens`, the OpenAI fake as `prompt_tokens_details.cached_tokens` within `prompt_tokens`.
    cached_tokens: int = 0

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Reply:
        """Build from the JSON form (``fault`` as a nested dict) used by ``--script`` files."""
        fault = data.get("fault")
        return cls(**{**data, "fault": Fault(**fault) if fault else None})


Handler = Callable[[dict[str, Any], int], Reply]


def text(s: str) -> Reply:
    """A plain text answer that ends the turn."""
    return Reply([{"type": "text", "text": s}])


def tool_call(name: str, input: dict[str, Any], *, text: str | None = None, id: str | None = None) -> Reply:
    """A turn that calls tool `name` (optionally after some text); the client must answer it."""
    block: dict[str, Any] = {"type": "tool_use", "name": name, "input": input}
    if id is not None:
        block["id"] = id
    return Reply([*([{"type": "text", "text": text}] if text is not None else []), block])


def thought(thinking: str, then: Reply) -> Reply:
    """`then`, the model having thought `thinking` first (a thinking block, signed by the fake as it streams)."""
    return dataclasses.replace(then, content=[{"type": "thinking", "thinking": thinking}, *then.content])


def failing(fault: Fault, like: Reply | None = None) -> Reply:
    """A reply that breaks with `fault`; the part of `like` before ``fault.after_events`` is streamed."""
    base = like if like is not None else Reply([{"type": "text", "text": "This reply never completes."}])
    return dataclasses.replace(base, fault=fault)


def _error_reply(message: str) -> Reply:
    """An HTTP 500 whose message says what went wrong in the test setup (shows up in the SDK error)."""
    return Reply([], fault=Fault("http", status=500, message=f"fake_anthropic: {message}"))


class Script:
    """Sequential replies: the Nth call gets the Nth reply.

    Past the end every call gets an HTTP 500 with a clear message and ``exhausted`` becomes True, so an
    unexpected extra request fails loudly instead of hanging or replaying. Counts its own calls (not the
    global request index), which is what lets ByConversation give each conversation its own Script.
    """

    def __init__(self, replies: Iterable[Reply]) -> None:
        self.replies: list[Reply] = list(replies)
        self.calls = 0
        self.exhausted = False
        self._lock = threading.Lock()

    @property
    def remaining(self) -> int:
        """Replies not yet handed out (0 once the script was fully consumed)."""
        return max(0, len(self.replies) - self.calls)

    def __call__(self, body: dict[str, Any], index: int) -> Reply:
        with self._lock:
            n = self.calls
            self.calls += 1
            if n >= len(self.replies):
                self.exhausted = True
        if n < len(self.replies):
            return self.replies[n]
        return _error_reply(
            f"Script exhausted: call #{n + 1} (global request {index}) "
            f"but only {len(self.replies)} replies were scripted"
        )


class ByConversation:
    """Routes each request to its conversation's own Script, keyed by the FIRST user message's text.

    Lets many concurrent conversations (chat ids, run goals) each follow their own script however the
    worker interleaves them. Default key: the longest mapping key contained in that text (so "chat-10" is
    not routed to "chat-1"); or pass ``key(body) -> str`` returning the mapping key directly.
    """

    def __init__(
        self, scripts: Mapping[str, Iterable[Reply]], key: Callable[[dict[str, Any]], str] | None = None
    ) -> None:
        self.scripts: dict[str, Script] = {k: v if isinstance(v, Script) else Script(v) for k, v in scripts.items()}
        self._key = key

    @property
    def exhausted(self) -> bool:
        """True once any conversation asked for more replies than it was scripted."""
        return any(s.exhausted for s in self.scripts.values())

    def __call__(self, body: dict[str, Any], index: int) -> Reply:
        if self._key is not None:
            found: str | None = self._key(body)
        else:
            first = first_user_text(body)
            found = max((k for k in self.scripts if k in first), key=len, default=None)
        script = self.scripts.get(found) if found is not None else None
        if script is None:
            return _error_reply(
                f"ByConversation: no script for key {found!r} (first user text "
                f"{first_user_text(body)[:80]!r}; keys {sorted(self.scripts)})"
            )
        return script(body, index)


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    # socketserver's default backlog is 5: hundreds of turns connecting at once would see dropped SYNs and
    # the kernel's 1 s retransmit, a delay no real API adds.
    request_queue_size = 1024
    fake: FakeMessagesServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Stay quiet about vanished clients (expected in fault tests), but never hide a bug in the fake."""
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


class _RequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # needed for chunked transfer coding
    # Each header line and chunk is its own small write: with Nagle's algorithm on, a kept-alive connection waits
    # for the client's delayed ACK (~40 ms) before the next one, as no real API server does.
    disable_nagle_algorithm = True
    server_version = "fake-anthropic"
    server: _HTTPServer
    _index = -1  # the request being delivered (its index in `FakeMessagesServer.requests`)
    _rate: tuple[Taken, float] | None = None  # the rate limit's verdict on the request being answered, and when

    def log_message(self, format: str, *args: Any) -> None:
        """No per-request access log on stderr."""

    def handle(self) -> None:
        """Track the connection so stop() can cut it; swallow socket errors from broken clients."""
        fake = self.server.fake
        fake._track(self.connection, add=True)
        try:
            super().handle()
        except OSError:
            pass
        finally:
            fake._track(self.connection, add=False)

    def _not_found(self) -> None:
        self._send_json(404, sse.error_body(404, f"Not found: {self.command} {self.path}"))

    do_GET = do_PUT = do_DELETE = do_PATCH = _not_found

    def do_POST(self) -> None:
        if self.path.split("?", 1)[0].rstrip("/") != "/v1/messages":
            self._not_found()
            return
        fake = self.server.fake
        self._rate = None
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length)
        if len(raw) < length:
            # The client went away mid-body (a worker SIGKILLed while sending): no request reached the API, as
            # none would reach the real one; nothing to record, no one to answer.
            self.close_connection = True
            return
        try:
            body = json.loads(raw)
            problem = None if isinstance(body, dict) else "request body must be a JSON object"
        except ValueError as exc:
            body, problem = None, f"request body is not valid JSON: {exc}"
        authorized = fake.api_key is None or fake.api_key in (
            self.headers.get("x-api-key"),
            self.headers.get("authorization", "").removeprefix("Bearer "),
        )
        if problem is None and authorized:
            problem = validate_request(body, fake.enforce_tool_pairing, self.headers.get("anthropic-beta", ""))
        if problem is None and authorized and (marks := breakpoint_count(body)) > MAX_BREAKPOINTS:
            problem = f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. Found {marks}."
        index = fake._record(body if isinstance(body, dict) else None, problem if authorized else None)
        size = prompt_tokens(body) if problem is None and authorized and fake.context_limit is not None else 0
        if not authorized:
            self._send_json(401, sse.error_body(401, "invalid x-api-key / bearer token"))
        elif problem is not None:
            self._send_json(400, sse.error_body(400, problem))
        elif fake.context_limit is not None and size > fake.context_limit:
            with fake._cond:
                fake.too_long.append(index)
            refusal = f"prompt is too long: {size} tokens > {fake.context_limit} maximum"
            self._send_json(400, sse.error_body(400, refusal))
        elif not self._rate_refused():
            try:
                reply = fake._handler(body, index)
            except Exception as exc:
                reply = _error_reply(f"handler raised {exc!r}")
            self._index = index
            self._deliver(body, reply)

    def _send_json(self, status: int, obj: Mapping[str, Any], retry_after: float | None = None) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.send_header("request-id", sse.new_id("req"))
        if retry_after is not None:
            self.send_header("retry-after", f"{retry_after:g}")
        self._rate_header_lines()
        self._connection_header()
        self.end_headers()
        self.wfile.write(data)

    def _rate_refused(self) -> bool:
        """With a rate limit: take the request from its window, or answer 429 with `retry-after` (True)."""
        fake, now = self.server.fake, time.time()
        taken = fake.limiter.take() if fake.limiter is not None else None
        self._rate = (taken, now) if taken is not None else None
        with fake._cond:
            (fake.rate_refused if taken is not None and not taken.admitted else fake.delivered_at).append(now)
        if taken is None or taken.admitted:
            return False
        self._send_json(429, self._rate_refusal(), taken.retry_after(now))
        return True

    def _rate_refusal(self) -> dict[str, Any]:
        return sse.error_body(429, "Number of requests has exceeded your per-minute rate limit")

    def _rate_headers(self, taken: Taken, now: float) -> dict[str, str]:
        return anthropic_headers(taken)

    def _rate_header_lines(self) -> None:
        """The limit's headers, on every answer of a server that has one (as the real APIs send them)."""
        if self._rate is not None:
            for name, value in self._rate_headers(*self._rate).items():
                self.send_header(name, value)

    def _connection_header(self) -> None:
        if not self.server.fake.keep_alive:
            self.send_header("Connection", "close")

    def _abort(self) -> None:
        """Cut the connection without finishing the response: the peer sees a truncated body."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)
        self.connection.close()

    def _deliver(self, body: dict[str, Any], reply: Reply) -> None:
        fault = reply.fault
        if fault is not None and fault.kind == "http":
            msg = fault.message or f"fake_anthropic: injected HTTP {fault.status}"
            self._send_json(fault.status, sse.error_body(fault.status, msg), fault.retry_after)
            return
        content = sse.normalize_content(reply.content)
        stop_reason = reply.stop_reason or sse.default_stop_reason(content)
        input_tokens = reply.input_tokens
        cache: dict[str, int] | None = {"cache_read_input_tokens": reply.cached_tokens} if reply.cached_tokens else None
        fake = self.server.fake
        if fake.prompt_cache:
            # The prompt was read (a stream that breaks later was still billed for it, and cached it).
            billed = fake.cache.account(body)
            input_tokens, cache = billed.input_tokens, billed.as_dict()
            cache.pop("input_tokens")
            with fake._cond:
                fake.billing.append({"index": self._index, **billed.as_dict(),
                                     "output_tokens": reply.output_tokens, "faulted": fault is not None})
        args = (
            sse.new_id("msg"),
            str(body.get("model", "claude-fake")),
            content,
            stop_reason,
            input_tokens,
            reply.output_tokens,
        )
        if not body.get("stream"):
            if fault is None:
                self._send_json(200, sse.message_json(*args, cache))
            elif fault.kind == "overloaded":
                self._send_json(529, sse.error_body(529, "Overloaded"))
            else:  # drop / stall before any byte of the response
                if fault.kind == "stall":
                    self.server.fake._release.wait(fault.seconds)
                self._abort()
            return
        # A model with preserved thinking binds the reply's thinking to everything this request holds.
        bound = sse.prefix_binding(body, len(body.get("messages") or [])) if sse.binds(body.get("model")) else None
        events = sse.stream_events(*args, parts=reply.parts, cache=cache, bound=bound)
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("cache-control", "no-cache")
        self.send_header("request-id", sse.new_id("req"))
        self.send_header("transfer-encoding", "chunked")
        self._rate_header_lines()
        self._connection_header()
        self.end_headers()
        for name, data in events if fault is None else events[: fault.after_events]:
            self.wfile.write(sse.chunk(sse.encode_event(name, data)))
            if name == "content_block_delta" and data["delta"].get("type") == "text_delta":
                self.wfile.flush()
                self.server.fake.text_sent.append((time.time(), data["delta"]["text"]))
            if reply.pace:
                self.wfile.flush()
                time.sleep(reply.pace)  # the pace of a real model's stream, not a wait for a condition
        if fault is None:
            self.wfile.write(sse.LAST_CHUNK)
        elif fault.kind == "overloaded":
            self.wfile.write(sse.chunk(sse.overloaded_event()) + sse.LAST_CHUNK)
        else:
            if fault.kind == "stall":
                self.server.fake._release.wait(fault.seconds)
            self._abort()


def _default_handler(body: dict[str, Any], index: int) -> Reply:
    return text("ok")


class FakeMessagesServer:
    """The fake API server: real sockets, one thread per connection, quiet on broken clients.

    Request bodies are recorded (headers are not: they carry the API key). Without a handler every
    request gets ``text("ok")``. ``api_key`` is checked against ``x-api-key`` or ``Authorization: Bearer``
    (anthropic 2.x sends the API key as a bearer token).
    """

    handler_class: type[BaseHTTPRequestHandler] = _RequestHandler  # the OpenAI fake serves its API with its own

    def __init__(
        self,
        handler: Handler | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        enforce_tool_pairing: bool = True,
        api_key: str | None = None,
        prompt_cache: bool = False,
        context_limit: int | None = None,
        keep_alive: bool = False,
        rate_limit: int | None = None,
        rate_window: float = 60.0,
    ) -> None:
        self._handler: Handler = handler or _default_handler
        # With `rate_limit`, at most that many requests reach the model in each `rate_window` seconds (the others get
        # a 429 with `retry-after`), and every answer carries the API's rate-limit headers. `delivered_at` and
        # `rate_refused` hold when each request was let through or refused (any server: a limit set elsewhere can
        # be checked against `delivered_at`).
        self.limiter = FixedWindow(rate_limit, rate_window) if rate_limit is not None else None
        self.delivered_at: list[float] = []
        self.rate_refused: list[float] = []
        # With `keep_alive`, a finished response leaves its connection open for the client's next request, as the
        # real API does; without it every response says `Connection: close` (a fault test then sees one connection
        # per request). `connections` counts the connections accepted, so a test can tell a client that reuses its
        # pool from one that opens a connection (in production, a TLS handshake) per request.
        self.keep_alive = keep_alive
        self.connections = 0
        # Cache semantics (tests/support/fake_prompt_cache.py): with `prompt_cache`, input usage is computed from
        # the request (its cached prefixes read, new marked prefixes written) instead of `Reply.input_tokens`.
        self.prompt_cache = prompt_cache
        self.cache = PromptCache()
        self.billing: list[dict[str, Any]] = []  # per delivered request, with `prompt_cache`: what it was billed
        # Over `context_limit` estimated tokens a request gets the API's 400 "prompt is too long: N tokens > M
        # maximum"; `too_long` lists those requests' indexes (kept apart from `rejections`, the validation 400s).
        self.context_limit = context_limit
        self.too_long: list[int] = []
        self.host, self.port = host, port
        self.enforce_tool_pairing = enforce_tool_pairing
        self.api_key = api_key
        self.requests: list[dict[str, Any]] = []
        self.rejections: list[str] = []
        # (time.time() just after the write, text) of every text delta sent: what a latency bench measures from
        self.text_sent: list[tuple[float, str]] = []
        self._cond = threading.Condition()
        self._release = threading.Event()
        self._active: dict[socket.socket, threading.Thread] = {}
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._url: str | None = None

    @property
    def url(self) -> str:
        """``http://HOST:PORT`` for ``base_url`` / ANTHROPIC_BASE_URL (the SDK appends ``/v1/messages``)."""
        if self._url is None:
            raise RuntimeError("FakeMessagesServer not started")
        return self._url

    def start(self) -> FakeMessagesServer:
        """Bind (port 0 = any free port) and serve in a background thread."""
        if self._httpd is not None:
            raise RuntimeError("FakeMessagesServer already started")
        self._release = threading.Event()
        httpd = _HTTPServer((self.host, self.port), self.handler_class)
        httpd.fake = self
        host, port = httpd.server_address[:2]
        self._url = f"http://{host}:{port}"
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, name=f"fake-anthropic:{port}", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, release stalled streams and cut open connections at once, join the threads."""
        httpd, thread = self._httpd, self._thread
        if httpd is None or thread is None:
            return
        self._release.set()
        httpd.shutdown()
        with self._cond:
            active = list(self._active.items())
        for conn, _ in active:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        for _, worker in active:
            worker.join(timeout=5)
        httpd.server_close()
        thread.join(timeout=5)
        self._httpd = self._thread = None

    def __enter__(self) -> FakeMessagesServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def set_handler(self, handler: Handler) -> None:
        """Swap the reply source mid-test (takes effect for the next request)."""
        self._handler = handler

    @property
    def request_count(self) -> int:
        """How many requests to /v1/messages arrived (including rejected ones)."""
        with self._cond:
            return len(self.requests)

    def images(self, index: int) -> list[str]:
        """The SHA-256 of each image request `index` carried (decoded from its base64), in order."""
        with self._cond:
            return sse.images_of(self.requests[index])

    def files_received(self) -> list[list[dict[str, str]]]:
        """Per request (in the Messages API's form), the files it carried: type, media type, SHA-256 of the bytes."""
        with self._cond:
            return [received(body) for body in self.requests]

    def wait_for_requests(self, n: int, timeout: float = 10.0) -> bool:
        """Block until at least `n` requests arrived; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: len(self.requests) >= n, timeout)

    def _record(self, body: dict[str, Any] | None, rejection: str | None) -> int:
        """Record a request (and its 400 message, first, so waiters see both) and return its index."""
        with self._cond:
            if rejection is not None:
                self.rejections.append(rejection)
            index = len(self.requests)
            if body is not None:
                self.requests.append(body)
                self._cond.notify_all()
            return index

    def _track(self, conn: socket.socket, *, add: bool) -> None:
        with self._cond:
            if add:
                self._active[conn] = threading.current_thread()
                self.connections += 1
            else:
                self._active.pop(conn, None)


def main(argv: list[str] | None = None) -> int:
    """Serve a JSON script of replies standalone; the URL is the first line of stdout."""
    parser = argparse.ArgumentParser(
        prog="python -m tests.support.fake_anthropic",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--script", help="JSON list of replies (dict form of Reply, fault as a dict)")
    parser.add_argument("--cycle", action="store_true", help="repeat the script forever (benchmarks)")
    parser.add_argument("--no-tool-pairing", action="store_true", help="do not validate tool pairing")
    parser.add_argument("--api-key", help="require this API key (x-api-key or bearer token)")
    args = parser.parse_args(argv)
    handler: Handler | None = None
    if args.script:
        with open(args.script, encoding="utf-8") as f:
            replies = [Reply.from_dict(d) for d in json.load(f)]
        handler = (lambda body, i: replies[i % len(replies)]) if args.cycle and replies else Script(replies)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with FakeMessagesServer(
        handler, host=args.host, port=args.port, api_key=args.api_key, enforce_tool_pairing=not args.no_tool_pairing
    ) as server:
        print(server.url, flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
