"""Tests for tests/support/fake_anthropic.py, driven through the REAL anthropic SDK over loopback HTTP.

They pin down the contract other tests rely on: what arrives whole, and exactly which exception the SDK
raises for each injected fault.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import pytest

from tests.support.fake_anthropic import (
    ByConversation,
    FakeMessagesServer,
    Fault,
    Reply,
    Script,
    failing,
    text,
    tool_call,
)

MODEL = "claude-test-model"
REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def server() -> Iterator[FakeMessagesServer]:
    with FakeMessagesServer() as s:
        yield s


def client_for(server: FakeMessagesServer, **kwargs: Any) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key="test", max_retries=0, **kwargs)


def user(content: Any) -> dict[str, Any]:
    return {"role": "user", "content": content}


def ask(client: anthropic.Anthropic, messages: list[dict[str, Any]] | None = None, **kwargs: Any) -> Any:
    """Non-streaming create with the fixed test model."""
    return client.messages.create(model=MODEL, max_tokens=100, messages=messages or [user("hi")], **kwargs)


def stream_raw(client: anthropic.Anthropic, seen: list[Any], messages: list[dict[str, Any]] | None = None
               ) -> None:
    """Iterate raw stream events into `seen` (so a test can inspect what arrived before a failure)."""
    with client.messages.create(model=MODEL, max_tokens=100, messages=messages or [user("hi")],
                                stream=True) as stream:
        for event in stream:
            seen.append(event)


def final_message(client: anthropic.Anthropic, messages: list[dict[str, Any]] | None = None, **kwargs: Any) -> Any:
    with client.messages.stream(model=MODEL, max_tokens=100, messages=messages or [user("hi")], **kwargs) as stream:
        return stream.get_final_message()


BASH = {"name": "bash", "description": "run a command", "input_schema": {"type": "object"}}


def test_text_reply_streams_in_real_wire_format(server: FakeMessagesServer) -> None:
    """A text reply arrives whole, as the real event sequence (start, ping skipped by SDK, deltas, stop)."""
    answer = "The quick brown fox jumps over the lazy dog."
    server.set_handler(Script([text(answer)]))
    seen: list[Any] = []
    with client_for(server) as client:
        stream_raw(client, seen)
    types = [e.type for e in seen]
    assert types[0] == "message_start" and types[-2:] == ["message_delta", "message_stop"]
    deltas = [e.delta.text for e in seen if e.type == "content_block_delta"]
    assert len(deltas) > 1 and "".join(deltas) == answer
    start = seen[0].message
    assert start.id.startswith("msg_") and start.model == MODEL and start.role == "assistant"
    assert start.content == [] and start.usage.input_tokens == 10 and start.usage.output_tokens == 1
    assert seen[-2].delta.stop_reason == "end_turn" and seen[-2].usage.output_tokens == 5
    assert server.requests[0]["stream"] is True and server.requests[0]["model"] == MODEL


def test_tool_use_reply_is_reassembled_by_stream_helper(server: FakeMessagesServer) -> None:
    """messages.stream() rebuilds text + tool_use from input_json_delta chunks; input parses back equal."""
    tool_input = {"cmd": "ls -la", "cwd": "/tmp/work", "nested": {"n": [1, 2, 3]}}
    server.set_handler(Script([tool_call("bash", tool_input, text="Let me look.")]))
    with client_for(server) as client:
        message = final_message(client)
    assert [b.type for b in message.content] == ["text", "tool_use"]
    assert message.content[0].text == "Let me look."
    assert message.content[1].name == "bash" and message.content[1].input == tool_input
    assert message.content[1].id.startswith("toolu_")
    assert message.stop_reason == "tool_use"


def test_non_streaming_request_gets_whole_message(server: FakeMessagesServer) -> None:
    """Without "stream": true the server returns one Message JSON; explicit tool ids are kept."""
    server.set_handler(Script([tool_call("grep", {"pattern": "x"}, id="toolu_fixed")]))
    with client_for(server) as client:
        message = ask(client)
    assert message.content[0].id == "toolu_fixed" and message.content[0].input == {"pattern": "x"}
    assert message.stop_reason == "tool_use" and message.usage.output_tokens == 5


# What the SDK raises when the transport fails mid-stream: the transport's own error up to anthropic 2.16, its
# connection error (a timeout one for a read timeout) with the transport's error as the cause from 2.17 on.
MID_STREAM = (httpx2.TransportError, anthropic.APIConnectionError)


def transport_error(raised: BaseException) -> BaseException | None:
    """The transport's error behind what the SDK raised mid-stream (see `MID_STREAM`)."""
    return raised if isinstance(raised, httpx2.TransportError) else raised.__cause__


def test_drop_mid_stream_raises_remote_protocol_error(server: FakeMessagesServer) -> None:
    """A dropped socket mid-stream surfaces as httpx2.RemoteProtocolError (incomplete chunked read; from 2.17 as the
    cause of the SDK's connection error),
    never as a silently truncated message; the events before the drop were delivered."""
    like = text("a long answer that will be cut off")
    server.set_handler(Script([failing(Fault("drop", after_events=4), like)] * 2))
    seen: list[Any] = []
    with client_for(server) as client:
        with pytest.raises(MID_STREAM) as raised:
            stream_raw(client, seen)
        assert isinstance(transport_error(raised.value), httpx2.RemoteProtocolError)
        assert not isinstance(raised.value, anthropic.APITimeoutError)
        assert [e.type for e in seen] == ["message_start", "content_block_start", "content_block_delta"]
        with pytest.raises(MID_STREAM) as raised:
            final_message(client)
        assert isinstance(transport_error(raised.value), httpx2.RemoteProtocolError)


def test_drop_without_stream_is_api_connection_error(server: FakeMessagesServer) -> None:
    """For a non-streaming request a drop happens before any response, so the SDK wraps it in
    APIConnectionError (not a timeout)."""
    server.set_handler(Script([failing(Fault("drop"))]))
    with client_for(server) as client, pytest.raises(anthropic.APIConnectionError) as info:
        ask(client)
    assert not isinstance(info.value, anthropic.APITimeoutError)


def test_stall_trips_client_read_timeout(server: FakeMessagesServer) -> None:
    """A 30 s stall with a 0.5 s read timeout raises httpx2.ReadTimeout in well under the stall length."""
    server.set_handler(Script([failing(Fault("stall", after_events=3, seconds=30))]))
    timeout = httpx2.Timeout(connect=5, read=0.5, write=5, pool=5)
    seen: list[Any] = []
    began = time.monotonic()
    with client_for(server, timeout=timeout) as client, pytest.raises(MID_STREAM) as raised:
        stream_raw(client, seen)
    assert isinstance(transport_error(raised.value), httpx2.ReadTimeout)
    assert time.monotonic() - began < 5
    assert [e.type for e in seen] == ["message_start", "content_block_start"]


def test_short_stall_then_close_is_a_drop(server: FakeMessagesServer) -> None:
    """When the stall ends before the client gives up, the server closes the socket: RemoteProtocolError."""
    server.set_handler(Script([failing(Fault("stall", after_events=2, seconds=0.2))]))
    with client_for(server) as client, pytest.raises(MID_STREAM) as raised:
        stream_raw(client, [])
    assert isinstance(transport_error(raised.value), httpx2.RemoteProtocolError)


def test_stop_during_stall_returns_promptly() -> None:
    """stop() releases a stalled stream at once instead of waiting out the stall; the client sees a drop."""
    server = FakeMessagesServer(Script([failing(Fault("stall", after_events=1, seconds=60))])).start()
    errors: list[BaseException] = []
    got_start = threading.Event()

    def consume() -> None:
        try:
            with client_for(server) as client, client.messages.create(
                    model=MODEL, max_tokens=10, messages=[user("hi")], stream=True) as stream:
                for _ in stream:
                    got_start.set()
        except Exception as exc:
            errors.append(exc)

    worker = threading.Thread(target=consume)
    worker.start()
    try:
        assert got_start.wait(10)
        began = time.monotonic()
        server.stop()
        assert time.monotonic() - began < 2
    finally:
        server.stop()
        worker.join(10)
    assert not worker.is_alive()
    assert len(errors) == 1 and isinstance(transport_error(errors[0]), httpx2.RemoteProtocolError)


def test_overloaded_event_mid_stream_raises_api_status_error(server: FakeMessagesServer) -> None:
    """An in-stream `error` event becomes anthropic.APIStatusError with type overloaded_error (status 200,
    since the HTTP response had already begun)."""
    server.set_handler(Script([failing(Fault("overloaded", after_events=3), text("partial"))] * 2))
    with client_for(server) as client:
        with pytest.raises(anthropic.APIStatusError) as info:
            stream_raw(client, [])
        assert type(info.value) is anthropic.APIStatusError
        assert info.value.type == "overloaded_error" and info.value.status_code == 200
        assert info.value.body == {"type": "error",
                                   "error": {"type": "overloaded_error", "message": "Overloaded"}}
        with pytest.raises(anthropic.APIStatusError) as info2:
            final_message(client)
        assert info2.value.type == "overloaded_error"


def test_http_529_raises_overloaded_error(server: FakeMessagesServer) -> None:
    """HTTP 529 before the stream maps to anthropic.OverloadedError with the overloaded_error type."""
    server.set_handler(Script([failing(Fault("http", status=529))]))
    with client_for(server) as client, pytest.raises(anthropic.OverloadedError) as info:
        stream_raw(client, [])
    assert info.value.status_code == 529 and info.value.type == "overloaded_error"
    assert info.value.request_id is not None and info.value.request_id.startswith("req_")


def test_http_429_with_retry_after_raises_rate_limit_error(server: FakeMessagesServer) -> None:
    """HTTP 429 maps to RateLimitError and the retry-after header is readable from err.response.headers."""
    server.set_handler(Script([failing(Fault("http", status=429, retry_after=2.5))]))
    with client_for(server) as client, pytest.raises(anthropic.RateLimitError) as info:
        final_message(client)
    assert info.value.response.headers["retry-after"] == "2.5"
    assert info.value.type == "rate_limit_error"


@pytest.mark.parametrize(("status", "error_class", "error_type"), [
    (500, anthropic.InternalServerError, "api_error"),
    (401, anthropic.AuthenticationError, "authentication_error"),
    (400, anthropic.BadRequestError, "invalid_request_error"),
])
def test_other_http_faults_map_to_sdk_classes(server: FakeMessagesServer, status: int,
                                              error_class: type[Exception], error_type: str) -> None:
    """Injected HTTP statuses carry the error.type the real API uses, so the SDK picks the right class."""
    server.set_handler(Script([Reply([], fault=Fault("http", status=status, message="injected"))]))
    with client_for(server) as client, pytest.raises(error_class) as info:
        ask(client)
    assert info.value.type == error_type and info.value.api_message == "injected"  # type: ignore[attr-defined]


def test_api_key_is_enforced_and_headers_not_recorded() -> None:
    """With api_key set a wrong key gets 401 AuthenticationError; the right key passes whether sent as
    the SDK's bearer token or as x-api-key; recorded bodies hold no key."""
    with FakeMessagesServer(api_key="right") as server:
        with client_for(server) as client, pytest.raises(anthropic.AuthenticationError):
            ask(client)
        with anthropic.Anthropic(base_url=server.url, api_key="right", max_retries=0) as client:
            assert ask(client).content[0].text == "ok"
        with httpx2.Client(base_url=server.url) as http:
            body = {"model": MODEL, "max_tokens": 5, "messages": [user("hi")]}
            assert http.post("/v1/messages", json=body, headers={"x-api-key": "right"}).status_code == 200
            assert http.post("/v1/messages", json=body, headers={"x-api-key": "wrong"}).status_code == 401
        assert server.request_count == 4
        assert "right" not in json.dumps(server.requests)
        assert all(set(body) <= {"model", "max_tokens", "messages", "stream"} for body in server.requests)


def test_unpaired_tool_use_is_rejected_like_the_real_api(server: FakeMessagesServer) -> None:
    """A history whose tool_use is not answered in the next message gets 400 BadRequestError with the real
    API's wording, the message lands in `rejections`, and the request is still recorded."""
    calls = [{"type": "tool_use", "id": f"toolu_{x}", "name": "bash", "input": {}} for x in "ab"]
    history = [
        user("run it"),
        {"role": "assistant", "content": calls},
        user([{"type": "tool_result", "tool_use_id": "toolu_a", "content": "ok"}]),
    ]
    expected = ("messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: "
                "toolu_b. Each `tool_use` block must have a corresponding `tool_result` block in the next "
                "message.")
    with client_for(server) as client, pytest.raises(anthropic.BadRequestError) as info:
        ask(client, history)
    assert info.value.api_message == expected and info.value.type == "invalid_request_error"
    assert server.rejections == [expected]
    assert server.request_count == 1 and server.requests[0]["messages"] == history


@pytest.mark.parametrize(("messages", "fragment"), [
    ([user("x"), {"role": "assistant", "content": "y"},
      user([{"type": "tool_result", "tool_use_id": "toolu_ghost", "content": "?"}])],
     "messages.2.content.0: unexpected `tool_use_id` found in `tool_result` blocks: toolu_ghost"),
    ([{"role": "assistant", "content": "hello"}], 'first message must use the "user" role'),
    ([user("x"), {"role": "system", "content": "y"}], "messages.1.role: Input should be"),
    ([user("")], "messages.0: all messages must have non-empty content"),
])
def test_other_invalid_histories_are_rejected(server: FakeMessagesServer, messages: list[dict[str, Any]],
                                              fragment: str) -> None:
    """Orphan tool_results, a non-user first message, unknown roles and empty content are 400s too."""
    with client_for(server) as client, pytest.raises(anthropic.BadRequestError):
        ask(client, messages)
    assert len(server.rejections) == 1 and fragment in server.rejections[0]


def test_properly_paired_tool_round_trip_passes(server: FakeMessagesServer) -> None:
    """The SDK's own assistant content plus matching tool_results is accepted; the script moves on."""
    script = Script([tool_call("bash", {"cmd": "ls"}), text("done")])
    server.set_handler(script)
    with client_for(server) as client:
        history: list[dict[str, Any]] = [user("list files")]
        first = final_message(client, history)
        history.append({"role": "assistant", "content": [b.model_dump() for b in first.content]})
        history.append(user([{"type": "tool_result", "tool_use_id": first.content[0].id, "content": "a b"}]))
        second = final_message(client, history, tools=[BASH])
    assert second.content[0].text == "done"
    assert server.rejections == [] and script.remaining == 0 and not script.exhausted


def test_tool_blocks_without_tools_are_refused_like_the_real_api(server: FakeMessagesServer) -> None:
    """A paired history with tool calls, sent with no tools defined, is the real API's 400 (a chat whose agent
    had tools and has none now must tell its old calls another way: agent/history/request.py)."""
    history = [user("x"), {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "bash",
                                                             "input": {}}]},
               user([{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}])]
    with client_for(server) as client, pytest.raises(anthropic.BadRequestError) as info:
        ask(client, history)
    assert info.value.api_message == "Requests which include `tool_use` or `tool_result` blocks must define tools."
    assert ask(client_for(server), history, tools=[BASH]).content[0].text == "ok"


def test_pairing_check_can_be_disabled() -> None:
    """enforce_tool_pairing=False lets deliberately broken histories through (for tests of other layers)."""
    history = [user("x"), {"role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_1", "name": "t", "input": {}}]}, user("no result")]
    with FakeMessagesServer(enforce_tool_pairing=False) as server, client_for(server) as client:
        assert ask(client, history).content[0].text == "ok"
        assert server.rejections == []


def test_script_past_the_end_is_a_clear_500(server: FakeMessagesServer) -> None:
    """An unscripted extra request gets InternalServerError naming the problem, and `exhausted` flips."""
    script = Script([text("only one")])
    server.set_handler(script)
    with client_for(server) as client:
        ask(client)
        assert not script.exhausted
        with pytest.raises(anthropic.InternalServerError) as info:
            ask(client)
    assert script.exhausted and "Script exhausted" in (info.value.api_message or "")


def test_wait_for_requests_blocks_until_requests_arrive(server: FakeMessagesServer) -> None:
    """wait_for_requests returns True as soon as the Nth request arrives, False after its timeout."""
    with client_for(server) as client:
        sender = threading.Timer(0.2, lambda: ask(client))
        sender.start()
        try:
            assert server.wait_for_requests(1, timeout=10)
        finally:
            sender.join(10)
        began = time.monotonic()
        assert not server.wait_for_requests(2, timeout=0.2)
        assert 0.15 < time.monotonic() - began < 2
    assert server.request_count == 1


def test_by_conversation_routes_interleaved_conversations(server: FakeMessagesServer) -> None:
    """Two conversations interleaved on one server each follow their own script (keyed by the first user
    message), and a key that is a prefix of another ("chat-1" in "chat-10") is not misrouted."""
    router = ByConversation({
        "chat-1": [text("one:first"), text("one:second")],
        "chat-10": [text("ten:first"), text("ten:second")],
    })
    server.set_handler(router)
    with client_for(server) as client:
        def turn(chat: str, n: int) -> str:
            return final_message(client, [user(f"[{chat}] turn {n}")]).content[0].text
        got = [turn("chat-10", 1), turn("chat-1", 1), turn("chat-1", 2), turn("chat-10", 2)]
        with pytest.raises(anthropic.InternalServerError) as info:
            turn("chat-99", 1)
    assert got == ["ten:first", "one:first", "one:second", "ten:second"]
    assert "no script" in (info.value.api_message or "") and not router.exhausted


def test_by_conversation_concurrent_streams(server: FakeMessagesServer) -> None:
    """Several threads streaming at once each get their own conversation's replies (threaded server)."""
    chats = [f"run-{i}" for i in range(6)]
    server.set_handler(ByConversation({c: [text(f"{c} done")] for c in chats}))
    results: dict[str, str] = {}

    def run(chat: str) -> None:
        with client_for(server) as client:
            results[chat] = final_message(client, [user(f"goal: {chat}!")]).content[0].text

    threads = [threading.Thread(target=run, args=(c,)) for c in chats]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert results == {c: f"{c} done" for c in chats}


def test_broken_client_does_not_hurt_server(server: FakeMessagesServer, capfd: pytest.CaptureFixture[str]
                                            ) -> None:
    """A client that walks away mid-stream leaves no traceback on stderr and the server keeps serving."""
    long_text = "word " * 20000
    server.set_handler(Script([text(long_text), text("still alive")]))
    with client_for(server) as client:
        with client.messages.create(model=MODEL, max_tokens=10, messages=[user("hi")], stream=True) as stream:
            next(iter(stream))
        assert ask(client).content[0].text == "still alive"
    server.stop()
    assert capfd.readouterr().err == ""


def test_unknown_path_is_404_json(server: FakeMessagesServer) -> None:
    """Unknown paths and methods get a 404 with an error JSON body, not a hang or an HTML page."""
    with httpx2.Client(base_url=server.url) as http:
        for response in (http.post("/v1/complete", json={}), http.get("/v1/messages")):
            assert response.status_code == 404
            assert response.json()["error"]["type"] == "not_found_error"
    assert server.request_count == 0


def test_module_runs_standalone_with_script_file(tmp_path: Path) -> None:
    """`python -m tests.support.fake_anthropic --script FILE` prints its URL first and serves the script."""
    script = tmp_path / "replies.json"
    script.write_text(json.dumps([
        {"content": [{"type": "text", "text": "from file"}]},
        {"content": [], "fault": {"kind": "http", "status": 529}},
    ]))
    with subprocess.Popen([sys.executable, "-m", "tests.support.fake_anthropic", "--port", "0",
                           "--script", str(script)], cwd=REPO_ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None
            url = proc.stdout.readline().strip()
            assert url.startswith("http://127.0.0.1:")
            with anthropic.Anthropic(base_url=url, api_key="x", max_retries=0) as client:
                assert ask(client).content[0].text == "from file"
                with pytest.raises(anthropic.OverloadedError):
                    ask(client)
        finally:
            proc.terminate()
            _, err = proc.communicate(timeout=10)
    assert proc.returncode == 0 and err == ""


@pytest.mark.parametrize("keep_alive", [False, True])
def test_keep_alive_serves_a_client_s_requests_on_one_connection(keep_alive: bool) -> None:
    """Kept alive, streamed and whole responses leave the connection for the next request; otherwise each
    response closes it. `connections` counts what the server accepted."""
    with FakeMessagesServer(keep_alive=keep_alive) as s, client_for(s) as client:
        for _ in range(2):
            assert ask(client).content[0].text == "ok"
            assert final_message(client).content[0].text == "ok"
        assert s.connections == (1 if keep_alive else 4)
