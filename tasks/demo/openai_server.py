"""`baton demo --provider openai`: the demo's scripted agent served over the Chat Completions wire format.

The demo's workers then run `BATON_PROVIDER=openai`: the official `openai` SDK and Baton's OpenAI edge (request
body, stream reducer, error classes, the abort a drain or stop does), pointed by `OPENAI_BASE_URL` at this server
on a loopback port, so the tour crosses the same wire a deployment on OpenAI, vLLM or Ollama does, with no key.

What it answers is the scripted provider's own script (`directive_script` with the demo's cues and its fault
counters in the demo's Redis), turned into what OpenAI streams: a role chunk, content deltas, tool-call deltas
(the arguments split across chunks), a chunk with `finish_reason`, the usage chunk and `data: [DONE]`, over
chunked HTTP/1.1 with keep-alive. A scripted `drop` sends its partial text and closes the connection mid-body;
`overloaded` is the 503 OpenAI answers when it is; `slow:S` is a model that takes S seconds after its first
chunk (so a drain or a stop cuts a live stream). It is the demo's stand-in for a model, not a fake that checks
requests: the tests' fake of the API (tests/support/fake_openai.py) is the one that enforces its rules.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import threading
import time
import uuid
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import redis

from agent.messages import TextBlock, ToolUseBlock
from agent.provider.base import ProviderRequest
from agent.provider.scripted import Cue, ScriptedReply, directive_script

# How a scripted fault is said over HTTP before any chunk: OpenAI's status and wording for each.
HTTP_FAULTS = {
    "overloaded": (503, "The server is overloaded or not ready yet."),
    "server_error": (500, "The server had an error while processing your request."),
    "rate_limited": (429, "Rate limit reached for requests."),
    "auth": (401, "Incorrect API key provided."),
}
_WORD = re.compile(r"\S+\s*|\s+")


def neutral_messages(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A Chat Completions body's messages in Baton's shape, as the scripted agent reads them: user text, assistant
    text and `tool_use` blocks, each `tool` message a user message with one `tool_result` block."""
    out: list[dict[str, Any]] = []
    for message in body.get("messages") or []:
        role = message.get("role")
        if role == "user":
            content = message.get("content")
            text = content if isinstance(content, str) else ""
            out.append({"role": "user", "content": [{"type": "text", "text": text}]})
        elif role == "assistant":
            said = message.get("content")
            blocks: list[dict[str, Any]] = [{"type": "text", "text": said}] if said else []
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                blocks.append({"type": "tool_use", "id": call.get("id"), "name": function.get("name"),
                               "input": json.loads(function.get("arguments") or "{}")})
            out.append({"role": "assistant", "content": blocks})
        elif role == "tool":
            result = {"type": "tool_result", "tool_use_id": message.get("tool_call_id"),
                      "content": str(message.get("content") or "")}
            out.append({"role": "user", "content": [result]})
    return out


def reply_chunks(reply: ScriptedReply, completion_id: str, model: str, created: int) -> list[dict[str, Any] | str]:
    """The chunks of a complete streamed answer (an entry is a chunk's JSON, or "[DONE]")."""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {"id": completion_id, "object": "chat.completion.chunk", "created": created, "model": model,
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

    out: list[dict[str, Any] | str] = [chunk({"role": "assistant", "content": ""})]
    calls = 0
    for block in reply.content:
        if isinstance(block, TextBlock):
            out += [chunk({"content": word}) for word in _WORD.findall(block.text)]
        elif isinstance(block, ToolUseBlock):
            arguments = json.dumps(block.input, separators=(",", ":"))
            half = len(arguments) // 2
            out.append(chunk({"tool_calls": [{"index": calls, "id": block.id, "type": "function",
                                              "function": {"name": block.name, "arguments": ""}}]}))
            out += [chunk({"tool_calls": [{"index": calls, "function": {"arguments": part}}]})
                    for part in (arguments[:half], arguments[half:]) if part]
            calls += 1
    out.append(chunk({}, "tool_calls" if calls else "stop"))
    usage = {"prompt_tokens": reply.input_tokens, "completion_tokens": reply.output_tokens,
             "total_tokens": reply.input_tokens + reply.output_tokens, "prompt_tokens_details": {"cached_tokens": 0}}
    out += [{"id": completion_id, "object": "chat.completion.chunk", "created": created, "model": model,
             "choices": [], "usage": usage}, "[DONE]"]
    return out


def partial_chunks(reply: ScriptedReply, completion_id: str, model: str, created: int) -> list[dict[str, Any]]:
    """What a broken attempt sends before the connection goes: the role chunk and its partial text."""
    partial = ScriptedReply(content=(TextBlock(text=reply.partial),) if reply.partial else ())
    return [c for c in reply_chunks(partial, completion_id, model, created)[:-3] if isinstance(c, dict)]


def _error(status: int, message: str) -> dict[str, Any]:
    kind = "server_error" if status >= 500 else "requests" if status == 429 else "invalid_request_error"
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive and chunked bodies, as the API serves them
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the demo prints its own account of what happened."""

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        if self.path.split("?", 1)[0].rstrip("/") != "/v1/chat/completions":
            self._json(404, _error(404, f"Invalid URL (POST {self.path})"))
            return
        try:
            body = json.loads(raw)
            request = ProviderRequest(
                model=str(body.get("model", "")),
                messages=neutral_messages(body),
                tools=[{"name": t["function"]["name"]} for t in body.get("tools") or []],
                system=next((m.get("content") for m in body.get("messages") or [] if m.get("role") == "system"), None),
            )
        except (ValueError, AttributeError, TypeError) as err:
            self._json(400, _error(400, f"could not read the request: {err}"))
            return
        with self.server.lock:
            index = self.server.requests
            self.server.requests += 1
        reply = self.server.script(request, index)
        if reply.fault in HTTP_FAULTS:
            status, message = HTTP_FAULTS[reply.fault]
            self._json(status, _error(status, message))
            return
        completion_id, created = f"chatcmpl-{uuid.uuid4().hex[:24]}", int(time.time())
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        try:
            if reply.fault is None:
                self._answer(reply, completion_id, request.model, created)
            else:  # drop or stall: the partial text, then the connection goes (or hangs until the server stops)
                for item in partial_chunks(reply, completion_id, request.model, created):
                    self._send(item)
                if reply.fault == "stall":
                    self.server.stopping.wait()
                self._cut()
        except OSError:  # the worker closed the stream (a stop or a drain): nothing more to say
            self.close_connection = True

    def _answer(self, reply: ScriptedReply, completion_id: str, model: str, created: int) -> None:
        chunks = reply_chunks(reply, completion_id, model, created)
        self._send(chunks[0])
        # The model's time to its answer, after the first chunk, so a stop or a drain cuts a live stream; ends
        # early when the demo stops.
        if reply.delay > 0:
            self.server.stopping.wait(reply.delay)
        for item in chunks[1:]:
            self._send(item)
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _send(self, item: dict[str, Any] | str) -> None:
        payload = item if isinstance(item, str) else json.dumps(item, separators=(",", ":"))
        data = f"data: {payload}\n\n".encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _cut(self) -> None:
        """Close mid-body: the chunked stream never ends, as a dropped connection's does."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def _json(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, script: Any) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.script = script
        self.lock = threading.Lock()
        self.requests = 0
        self.stopping = threading.Event()


class ScriptedChatServer:
    """The server on a free loopback port, in a thread of the demo's process; `stop` ends it."""

    def __init__(self, redis_url: str, cues: Mapping[str, Cue]) -> None:
        from tasks.execution.wiring import RedisCounter  # the scripted provider's counters, which the demo resets

        self._redis = redis.Redis.from_url(redis_url)
        self._server = _Server(directive_script(RedisCounter(self._redis), cues))
        self._thread = threading.Thread(target=self._server.serve_forever, name="demo-openai", daemon=True)

    @property
    def url(self) -> str:
        """The base URL the SDK takes (`OPENAI_BASE_URL`); it appends `/chat/completions`."""
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    @property
    def requests(self) -> int:
        return self._server.requests

    def start(self) -> ScriptedChatServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._redis.close()
