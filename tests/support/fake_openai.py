"""A local fake of the OpenAI Chat Completions API (``POST /v1/chat/completions``), beside the Messages API fake.

It is the Anthropic fake's server (tests/support/fake_anthropic.py) speaking another wire format, so tests
drive both the same way and can be parametrized over them: the same handlers (``Script``, ``ByConversation``,
a test's own router) get the same ``Reply`` and ``Fault`` values and see each request in Baton's shape, the
Chat Completions body turned back into Messages-API form (``system``; assistant ``tool_use`` blocks; the
``tool`` messages after an assistant message, and a user text after them, as one user message of
``tool_result`` blocks). ``requests`` holds those neutral bodies, ``wire_requests`` the bodies as sent.

The stream is what OpenAI sends: a role chunk, content deltas, tool-call deltas keyed by ``index`` (the first
with ``id`` and ``function.name``, the arguments split across chunks), a chunk with ``finish_reason``, the usage
chunk (``choices: []``, ``prompt_tokens`` = ``Reply.input_tokens`` + ``Reply.cached_tokens``, the cached ones in
``prompt_tokens_details``) and ``data: [DONE]``. ``Fault.after_events`` counts the Anthropic fake's events, each
mapped to the chunks it becomes (message_start -> the role chunk, ping and block bounds -> none, a delta -> one
chunk, message_delta -> the finish chunk, message_stop -> usage and [DONE]), so one fault means the same point
of an answer on both fakes: 5 is mid-text or mid-arguments, 9 (one tool call) just after ``finish_reason``.
Faults: a dropped or stalled stream, ``http`` (429 with retry-after, 500, 503, ...), ``overloaded`` (an
in-stream error once the stream began, a 503 before). The API's 400s: a ``tool_calls`` entry without its ``tool``
message (pairing), a ``tool`` message answering no call, a request past ``context_limit`` tokens
(``context_length_exceeded``), and ``cache_control`` anywhere (OpenAI knows no such field).
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from collections.abc import Mapping
from typing import Any

from . import fake_anthropic_sse as sse
from .fake_anthropic import FakeMessagesServer, Fault, Reply, _RequestHandler
from .fake_files import data_url_block, file_problem
from .fake_prompt_cache import prompt_tokens
from .fake_rate_limit import Taken, openai_headers

__all__ = ["ERROR_PREFIX", "FakeChatServer", "chat_chunks", "error_body", "neutral_body", "validate_chat"]

ERROR_PREFIX = "[tool error] "  # how Baton's OpenAI edge marks an is_error result (read back into `is_error`)
_ERROR_TYPES = {400: "invalid_request_error", 401: "invalid_request_error", 403: "invalid_request_error",
                404: "invalid_request_error", 429: "requests"}


def error_body(status: int, message: str, code: str | None = None, param: str | None = None) -> dict[str, Any]:
    """OpenAI's error object: ``{"error": {"message", "type", "param", "code"}}``."""
    kind = _ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def validate_chat(body: Mapping[str, Any], enforce_tool_pairing: bool = True) -> tuple[str, str | None] | None:
    """(message, param) of the 400 the API would give this body, or None."""
    if "cache_control" in json.dumps(body):
        return "Unrecognized request argument supplied: cache_control", None
    if not body.get("model"):
        return "you must provide a model parameter", "model"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "[] is too short - 'messages'", "messages"
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant", "tool"):
            return f"Invalid value for 'messages[{i}].role'", f"messages.[{i}].role"
    for j, t in enumerate(body.get("tools") or []):
        if t.get("type") != "function" or not (t.get("function") or {}).get("name"):
            return f"Missing required parameter: 'tools[{j}].function.name'.", f"tools[{j}]"
    problem = _image_problem(messages)
    if problem is not None:
        return problem
    if not enforce_tool_pairing:
        return None
    for i, m in enumerate(messages):
        if m["role"] == "assistant" and m.get("tool_calls"):
            answered: set[str] = set()
            for follower in messages[i + 1 :]:
                if follower.get("role") != "tool":
                    break
                answered.add(follower.get("tool_call_id"))
            missing = [c.get("id") for c in m["tool_calls"] if c.get("id") not in answered]
            if missing:
                return (
                    "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
                    f"'tool_call_id'. The following tool_call_ids did not have response messages: {', '.join(missing)}"
                ), f"messages.[{i}].role"
        if m["role"] == "tool":
            back = i - 1
            while back >= 0 and messages[back].get("role") == "tool":
                back -= 1
            calls = {c.get("id") for c in messages[back].get("tool_calls") or []} if back >= 0 else set()
            if back < 0 or messages[back].get("role") != "assistant" or m.get("tool_call_id") not in calls:
                return (
                    "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with "
                    "'tool_calls'."
                ), f"messages.[{i}].role"
    return None


def _image_parts(content: Any) -> list[tuple[int, dict[str, Any]]]:
    if not isinstance(content, list):
        return []
    return [(k, p) for k, p in enumerate(content) if isinstance(p, dict) and p.get("type") == "image_url"]


def _data_url(url: str) -> tuple[str, bytes] | None:
    """(media type, bytes) of a base64 data URL; None when it is not one."""
    head, comma, data = url.partition(",")
    if not comma or not head.startswith("data:") or not head.endswith(";base64"):
        return None
    try:
        return head[len("data:") : -len(";base64")], base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None


def _image_problem(messages: list[Any]) -> tuple[str, str | None] | None:
    """The API's 400s for images: an image in a message of another role than `user` (a `tool` message takes text
    only), an image URL that is no base64 data URL (this fake fetches nothing), bytes that are no image."""
    for i, m in enumerate(messages):
        for k, part in _image_parts(m.get("content")):
            if m["role"] != "user":
                return (f"Image URLs are only allowed for messages with role 'user', but this message with role "
                        f"'{m['role']}' contains an image URL."), f"messages.[{i}].content.[{k}].image_url"
            found = _data_url(str((part.get("image_url") or {}).get("url", "")))
            if found is None or sse.sniff_image(found[1]) is None:
                return "Invalid image.", f"messages.[{i}].content.[{k}].image_url"
    return None


def _neutral_parts(content: Any) -> list[dict[str, Any]]:
    """A user message's content as Messages API blocks: text, and each image as a base64 image block."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    out: list[dict[str, Any]] = []
    for part in content if isinstance(content, list) else []:
        if part.get("type") == "text":
            out.append({"type": "text", "text": part.get("text", "")})
        elif part.get("type") == "image_url":
            found = _data_url(str((part.get("image_url") or {}).get("url", "")))
            if found is not None:
                data = base64.b64encode(found[1]).decode()
                out.append({"type": "image", "source": {"type": "base64", "media_type": found[0], "data": data}})
        elif part.get("type") == "file" and (block := data_url_block(part)) is not None:
            out.append(block)
    return out


def neutral_body(body: Mapping[str, Any]) -> dict[str, Any]:
    """The Chat Completions body in the Messages API's form, for handlers written against that form."""
    system = "\n".join(str(m.get("content") or "") for m in body.get("messages", []) if m.get("role") == "system")
    out: list[dict[str, Any]] = []
    open_results = False  # the last neutral message is a user message built from tool messages
    for m in body.get("messages", []):
        role = m.get("role")
        if role == "assistant":
            blocks: list[dict[str, Any]] = []
            if m.get("reasoning_content"):  # sent back, as DeepSeek asks on a turn that made tool calls
                blocks.append({"type": "thinking", "thinking": m["reasoning_content"]})
            if m.get("content"):
                blocks.append({"type": "text", "text": m["content"]})
            for call in m.get("tool_calls") or []:
                function = call.get("function") or {}
                blocks.append({"type": "tool_use", "id": call.get("id"), "name": function.get("name"),
                               "input": json.loads(function.get("arguments") or "{}")})
            out.append({"role": "assistant", "content": blocks})
            open_results = False
        elif role == "tool":
            content = str(m.get("content") or "")
            result = {"type": "tool_result", "tool_use_id": m.get("tool_call_id"),
                      "content": content.removeprefix(ERROR_PREFIX)}
            if content.startswith(ERROR_PREFIX):
                result["is_error"] = True
            if open_results:
                out[-1]["content"].append(result)
            else:
                out.append({"role": "user", "content": [result]})
                open_results = True
        elif role == "user":
            parts = _neutral_parts(m.get("content"))
            if open_results:
                out[-1]["content"].extend(parts)
            else:
                out.append({"role": "user", "content": parts})
            open_results = False
    neutral: dict[str, Any] = {"model": body.get("model"), "messages": out, "stream": body.get("stream", False)}
    if system:
        neutral["system"] = system
    if body.get("tools"):
        neutral["tools"] = [{"name": t["function"]["name"], "description": t["function"].get("description", ""),
                             "input_schema": t["function"].get("parameters", {})} for t in body["tools"]]
    return neutral


def chat_chunks(reply: Reply, chat_id: str, model: str) -> list[list[dict[str, Any] | str]]:
    """The chunks of a streamed reply, grouped by the Anthropic event each comes from (see the module's doc);
    an entry is a chunk's JSON, or "[DONE]"."""
    content = sse.normalize_content(reply.content)
    stop_reason = reply.stop_reason or sse.default_stop_reason(content)
    events = sse.stream_events("msg", model, content, stop_reason, reply.input_tokens, reply.output_tokens,
                               parts=reply.parts)
    created = int(time.time())

    def chunk(delta: dict[str, Any] | None, finish: str | None = None) -> dict[str, Any]:
        return {"id": chat_id, "object": "chat.completion.chunk", "created": created, "model": model,
                "choices": [{"index": 0, "delta": delta or {}, "logprobs": None, "finish_reason": finish}]}

    tool_index: dict[int, int] = {}  # content block index -> tool_calls index
    grouped: list[list[dict[str, Any] | str]] = []
    for name, data in events:
        out: list[dict[str, Any] | str] = []
        if name == "message_start":
            out.append(chunk({"role": "assistant", "content": "", "refusal": None}))
        elif name == "content_block_start" and data["content_block"]["type"] == "tool_use":
            block = data["content_block"]
            at = tool_index.setdefault(data["index"], len(tool_index))
            out.append(chunk({"tool_calls": [{"index": at, "id": block["id"], "type": "function",
                                              "function": {"name": block["name"], "arguments": ""}}]}))
        elif name == "content_block_delta":
            delta = data["delta"]
            if delta.get("type") == "text_delta":
                out.append(chunk({"content": delta["text"]}))
            elif delta.get("type") == "thinking_delta":  # as DeepSeek and vLLM stream it
                out.append(chunk({"content": None, "reasoning_content": delta["thinking"]}))
            elif delta.get("partial_json"):
                at = tool_index[data["index"]]
                out.append(chunk({"tool_calls": [{"index": at, "function": {"arguments": delta["partial_json"]}}]}))
        elif name == "message_delta":
            finish = "tool_calls" if stop_reason == "tool_use" else "length" if stop_reason == "max_tokens" else "stop"
            out.append(chunk({}, finish))
        elif name == "message_stop":
            prompt = reply.input_tokens + reply.cached_tokens
            usage = {"prompt_tokens": prompt, "completion_tokens": reply.output_tokens,
                     "total_tokens": prompt + reply.output_tokens,
                     "prompt_tokens_details": {"cached_tokens": reply.cached_tokens, "audio_tokens": 0}}
            thinking = sse.thinking_usage(content).get("output_tokens_details")
            if thinking:
                usage["completion_tokens_details"] = {"reasoning_tokens": thinking["thinking_tokens"]}
            out += [{"id": chat_id, "object": "chat.completion.chunk", "created": created, "model": model,
                     "choices": [], "usage": usage}, "[DONE]"]
        grouped.append(out)
    return grouped


def _data(item: dict[str, Any] | str) -> bytes:
    payload = item if isinstance(item, str) else json.dumps(item, separators=(",", ":"))
    return f"data: {payload}\n\n".encode()


class _ChatHandler(_RequestHandler):
    server_version = "fake-openai"

    def do_POST(self) -> None:
        if self.path.split("?", 1)[0].rstrip("/") != "/v1/chat/completions":
            self._send_json(404, error_body(404, f"Invalid URL ({self.command} {self.path})"))
            return
        fake = self.server.fake
        assert isinstance(fake, FakeChatServer)
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
            problem = None if isinstance(body, dict) else ("request body must be a JSON object", None)
        except ValueError as exc:
            body, problem = None, (f"We could not parse the JSON body of your request: {exc}", None)
        authorized = fake.api_key is None or self.headers.get("authorization", "") == f"Bearer {fake.api_key}"
        if problem is None and authorized:
            problem = validate_chat(body, fake.enforce_tool_pairing)
        neutral = neutral_body(body) if problem is None and isinstance(body, dict) else None
        if neutral is not None and authorized and (unreadable := file_problem(neutral)) is not None:
            problem = (unreadable, "messages")
        with fake._cond:
            if isinstance(body, dict):
                fake.wire_requests.append(body)
        index = fake._record(neutral if neutral is not None else body, problem[0] if problem and authorized else None)
        size = prompt_tokens(neutral) if neutral is not None and authorized and fake.context_limit is not None else 0
        if not authorized:
            message = "Incorrect API key provided. You can find your API key at https://platform.openai.com/account."
            self._send_json(401, error_body(401, message, "invalid_api_key"))
        elif problem is not None:
            self._send_json(400, error_body(400, problem[0], None, problem[1]))
        elif fake.context_limit is not None and size > fake.context_limit:
            with fake._cond:
                fake.too_long.append(index)
            message = (f"This model's maximum context length is {fake.context_limit} tokens. However, your messages "
                       f"resulted in {size} tokens. Please reduce the length of the messages.")
            self._send_json(400, error_body(400, message, "context_length_exceeded", "messages"))
        elif not body.get("stream"):
            self._send_json(400, error_body(400, "fake_openai: only streaming requests are served"))
        elif not self._rate_refused():
            assert neutral is not None
            try:
                reply = fake._handler(neutral, index)
            except Exception as exc:
                reply = Reply([], fault=Fault("http", status=500, message=f"fake_openai: handler raised {exc!r}"))
            self._index = index
            self._stream(body, reply)

    def _rate_refusal(self) -> dict[str, Any]:
        return error_body(429, "Rate limit reached for requests", "rate_limit_exceeded")

    def _rate_headers(self, taken: Taken, now: float) -> dict[str, str]:
        return openai_headers(taken, now)

    def _stream(self, body: dict[str, Any], reply: Reply) -> None:
        fault = reply.fault
        if fault is not None and fault.kind == "http":
            message = fault.message or f"fake_openai: injected HTTP {fault.status}"
            code = "rate_limit_exceeded" if fault.status == 429 else None
            self._send_json(fault.status, error_body(fault.status, message, code), fault.retry_after)
            return
        if fault is not None and fault.kind == "overloaded" and fault.after_events <= 0:
            self._send_json(503, error_body(503, "The server is overloaded or not ready yet."))
            return
        grouped = chat_chunks(reply, sse.new_id("chatcmpl"), str(body.get("model", "gpt-fake")))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("cache-control", "no-cache")
        self.send_header("x-request-id", sse.new_id("req"))
        self.send_header("transfer-encoding", "chunked")
        self._rate_header_lines()
        self._connection_header()
        self.end_headers()
        fake = self.server.fake
        for items in grouped if fault is None else grouped[: fault.after_events]:
            for item in items:
                self.wfile.write(sse.chunk(_data(item)))
                if isinstance(item, dict) and item["choices"] and item["choices"][0]["delta"].get("content"):
                    self.wfile.flush()
                    fake.text_sent.append((time.time(), item["choices"][0]["delta"]["content"]))
            if reply.pace and items:
                self.wfile.flush()
                time.sleep(reply.pace)  # the pace of a real model's stream, not a wait for a condition
        if fault is None:
            self.wfile.write(sse.LAST_CHUNK)
        elif fault.kind == "overloaded":
            error = {"error": {"message": "The server is overloaded or not ready yet.", "type": "server_error",
                               "param": None, "code": "overloaded"}}
            self.wfile.write(sse.chunk(_data(error)) + sse.LAST_CHUNK)
        else:
            if fault.kind == "stall":
                fake._release.wait(fault.seconds)
            self._abort()


class FakeChatServer(FakeMessagesServer):
    """The fake Chat Completions server; the Anthropic fake's API (handlers, ``requests``, ``rejections``,
    ``wait_for_requests``, ``context_limit``, ``api_key`` as a bearer token) plus ``wire_requests``."""

    handler_class = _ChatHandler

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.wire_requests: list[dict[str, Any]] = []  # the bodies as sent (``requests`` holds the neutral form)

    @property
    def url(self) -> str:
        """``http://HOST:PORT/v1``, for ``base_url`` / OPENAI_BASE_URL (the SDK appends ``/chat/completions``)."""
        return f"{super().url}/v1"
