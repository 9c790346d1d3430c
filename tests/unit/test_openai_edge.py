"""The OpenAI edge's pure parts: Baton's request as a Chat Completions body (pairing included), the stream
reduced into an answer (split arguments, usage with cached tokens, no answer without a finish_reason), the
SDK's exceptions classified, and the credentials check."""

from __future__ import annotations

import json

import httpx2
import openai
import pytest

from agent.errors import ProviderError
from agent.history.repair import RequestHistory
from agent.history.request import RequestShape, build_request
from agent.loop.cancel import CancelToken
from agent.loop.failures import FailureClass, Overflow, classify
from agent.messages import INTERRUPTED_RESULT, Message, TextBlock, ToolResultBlock, ToolUseBlock, user_text
from agent.provider.base import ProviderRequest, TokenUsage
from agent.provider.openai_provider import NO_CREDENTIALS, OpenAIProvider, credentials_problem
from agent.provider.openai_reducer import ChatSnapshot, MalformedToolCall, accumulate
from agent.provider.openai_request import ERROR_PREFIX, chat_body, unpaired_calls

MARK = {"type": "ephemeral"}


def _request(**kw) -> ProviderRequest:
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "list files", "cache_control": MARK}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Looking."},
                {"type": "tool_use", "id": "toolu_1", "name": "ls", "input": {"path": "."}},
                {"type": "tool_use", "id": "call_2", "name": "cat", "input": {"path": "é.txt"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.txt"},
                {"type": "tool_result", "tool_use_id": "call_2", "content": "denied", "is_error": True,
                 "cache_control": MARK},
                {"type": "text", "text": "and then?"},
            ],
        },
    ]
    tools = [{"name": "ls", "description": "List.", "input_schema": {"type": "object"}, "cache_control": MARK}]
    system = [{"type": "text", "text": "Be brief.", "cache_control": MARK}]
    return ProviderRequest(**{"model": "gpt-test", "messages": messages, "tools": tools, "system": system, **kw})


def test_the_body_carries_system_tool_calls_tool_messages_and_functions_without_cache_marks():
    body = chat_body(_request())
    assert body["model"] == "gpt-test" and body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["max_completion_tokens"] == 4096
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "list files"},
        {
            "role": "assistant",
            "content": "Looking.",
            "tool_calls": [
                {"id": "toolu_1", "type": "function", "function": {"name": "ls", "arguments": '{"path":"."}'}},
                {"id": "call_2", "type": "function", "function": {"name": "cat", "arguments": '{"path":"é.txt"}'}},
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_1", "content": "a.txt"},
        {"role": "tool", "tool_call_id": "call_2", "content": ERROR_PREFIX + "denied"},
        {"role": "user", "content": "and then?"},
    ]
    assert body["tools"] == [
        {"type": "function", "function": {"name": "ls", "description": "List.", "parameters": {"type": "object"}}}
    ]
    assert "cache_control" not in json.dumps(body)
    assert unpaired_calls(body["messages"]) == []
    assert chat_body(_request()) == body  # a pure function: a replay sends the same bytes


def test_an_assistant_message_of_calls_only_has_null_content_and_no_tools_means_no_tools_key():
    request = ProviderRequest(
        model="m",
        messages=[
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "c1", "name": "t", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1", "content": ""}]},
        ],
    )
    body = chat_body(request)
    assert "tools" not in body and body["messages"][0] == {"role": "user", "content": "go"}
    assistant = body["messages"][1]
    assert assistant["content"] is None and assistant["tool_calls"][0]["function"]["arguments"] == "{}"
    assert body["messages"][2] == {"role": "tool", "tool_call_id": "c1", "content": ""}


def test_unpaired_calls_finds_a_call_without_its_tool_message():
    messages = [
        {"role": "user", "content": "x"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "a"}, {"id": "b"}]},
        {"role": "tool", "tool_call_id": "a", "content": "ok"},
        {"role": "user", "content": "next"},
    ]
    assert unpaired_calls(messages) == ["b"]


def test_a_history_with_a_dangling_call_converts_to_a_request_that_pairs():
    """A stop mid-tool leaves an assistant tool_use with no result in the transcript; the history repair
    answers it with the placeholder, so the Chat Completions body pairs every tool_calls entry."""
    history = [
        user_text("do two things"),
        Message(role="assistant", content=[TextBlock(text="ok"), ToolUseBlock(id="c1", name="w", input={"n": 1}),
                                           ToolUseBlock(id="c2", name="w", input={"n": 2})]),
        Message(role="user", content=[ToolResultBlock(tool_use_id="c1", content="done")]),
        user_text("and now?"),
    ]
    messages = RequestHistory().api(history)
    offered = [{"name": "w", "description": "writes", "input_schema": {"type": "object"}}]
    request = build_request(RequestShape("m", offered, "sys", True, 200_000), messages, cut=0)
    body = chat_body(request)
    assert unpaired_calls(body["messages"]) == []
    tool_messages = [m for m in body["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_messages] == ["c1", "c2"]
    assert INTERRUPTED_RESULT in tool_messages[1]["content"]


def _chunk(delta=None, finish=None, usage=None, choices=True):
    out = {"id": "chatcmpl-1", "object": "chat.completion.chunk"}
    out["choices"] = [{"index": 0, "delta": delta or {}, "finish_reason": finish}] if choices else []
    out["usage"] = usage
    return out


def _call(index, *, id=None, name=None, arguments=None):
    piece = {"index": index, "function": {}}
    if id:
        piece.update(id=id, type="function")
    if name:
        piece["function"]["name"] = name
    if arguments is not None:
        piece["function"]["arguments"] = arguments
    return {"tool_calls": [piece]}


def _fold(chunks):
    snapshot, texts = ChatSnapshot(), []
    for c in chunks:
        added = accumulate(c, snapshot)
        if added:
            texts.append(added)
    return snapshot, texts


USAGE = {"prompt_tokens": 120, "completion_tokens": 7, "prompt_tokens_details": {"cached_tokens": 100}}


def test_text_and_split_tool_arguments_are_reassembled_and_usage_maps_cached_tokens():
    snapshot, texts = _fold([
        _chunk({"role": "assistant", "content": ""}),
        _chunk({"content": "Let me "}),
        _chunk({"content": "look."}),
        _chunk(_call(0, id="call_a", name="ls", arguments="")),
        _chunk(_call(1, id="call_b", name="cat", arguments='{"pa')),
        _chunk(_call(0, arguments='{"path": ')),
        _chunk(_call(1, arguments='th": "x"}')),
        _chunk(_call(0, arguments='"."}')),
        _chunk({}, finish="tool_calls"),
        _chunk(usage=USAGE, choices=False),
    ])
    assert texts == ["Let me ", "look."]
    answer = snapshot.to_answer()
    assert answer.text == "Let me look." and answer.stop_reason == "tool_use" and answer.message_id == "chatcmpl-1"
    assert [(b.id, b.name, b.input) for b in answer.tool_uses] == [("call_a", "ls", {"path": "."}),
                                                                   ("call_b", "cat", {"path": "x"})]
    assert answer.usage == TokenUsage(input_tokens=20, output_tokens=7, cache_read_input_tokens=100)


def test_a_stream_cut_mid_arguments_is_not_finished_and_bad_json_is_no_answer():
    snapshot, _ = _fold([_chunk({"role": "assistant"}), _chunk(_call(0, id="c", name="w", arguments='{"no'))])
    assert not snapshot.finished and snapshot.had_output
    snapshot, _ = _fold([_chunk(_call(0, id="c", name="w", arguments='{"no')), _chunk({}, finish="length")])
    with pytest.raises(MalformedToolCall):
        snapshot.to_answer()


def test_a_plain_answer_maps_stop_and_a_missing_usage_is_zero():
    snapshot, _ = _fold([_chunk({"content": "hi"}), _chunk({}, finish="stop")])
    answer = snapshot.to_answer()
    assert (answer.text, answer.stop_reason, answer.usage) == ("hi", "end_turn", TokenUsage())


def _status(status, *, code=None, message="m", kind=None, headers=None):
    body = {"error": {"message": message, "type": kind, "code": code, "param": None}}
    request = httpx2.Request("POST", "http://x/v1/chat/completions")
    response = httpx2.Response(status, request=request, headers=headers or {}, json=body)
    return openai.APIStatusError(f"Error code: {status}", response=response, body=body["error"])


@pytest.mark.parametrize(
    ("status", "code", "expected"),
    [
        (401, "invalid_api_key", FailureClass.PROVIDER_AUTH),
        (403, None, FailureClass.PROVIDER_AUTH),
        (429, "rate_limit_exceeded", FailureClass.PROVIDER_RATE_LIMITED),
        (429, "insufficient_quota", FailureClass.BUDGET_EXCEEDED),
        (500, None, FailureClass.PROVIDER_SERVER_ERROR),
        (502, None, FailureClass.PROVIDER_SERVER_ERROR),
        (504, None, FailureClass.PROVIDER_SERVER_ERROR),
        (503, None, FailureClass.PROVIDER_OVERLOADED),
        (400, "invalid_value", FailureClass.PROVIDER_BAD_REQUEST),
        (404, "model_not_found", FailureClass.PROVIDER_BAD_REQUEST),
    ],
)
def test_status_errors_are_classified(status, code, expected):
    assert classify(_status(status, code=code)).failure_class is expected


def test_a_429_carries_its_retry_after_and_an_overloaded_500_is_overloaded():
    found = classify(_status(429, headers={"retry-after": "3"}))
    assert (found.failure_class, found.retry_after) == (FailureClass.PROVIDER_RATE_LIMITED, 3.0)
    assert classify(_status(500, message="The server is overloaded")).failure_class is FailureClass.PROVIDER_OVERLOADED


def test_a_context_length_400_is_an_overflow_with_its_figures():
    message = ("This model's maximum context length is 128000 tokens. However, your messages resulted in 130512 "
               "tokens. Please reduce the length of the messages.")
    found = classify(_status(400, code="context_length_exceeded", message=message))
    assert found.failure_class is FailureClass.CONTEXT_OVERFLOW and found.overflow == Overflow(130512, 128000)
    bare = classify(_status(400, code="context_length_exceeded", message="too long"))
    assert bare.failure_class is FailureClass.CONTEXT_OVERFLOW and bare.overflow == Overflow(None, None)


def test_in_stream_errors_timeouts_and_connection_errors():
    request = httpx2.Request("POST", "http://x/v1/chat/completions")
    overloaded = openai.APIError("The server is overloaded", request, body={"message": "overloaded", "type": None})
    assert classify(overloaded).failure_class is FailureClass.PROVIDER_OVERLOADED
    assert classify(openai.APIError("boom", request, body=None)).failure_class is FailureClass.PROVIDER_SERVER_ERROR
    assert classify(openai.APITimeoutError(request)).failure_class is FailureClass.PROVIDER_STALL
    assert classify(openai.APIConnectionError(request=request)).failure_class is FailureClass.INFRA_TRANSIENT


@pytest.fixture
def no_key(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_ADMIN_KEY", raising=False)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9")  # were a request sent, it would fail otherwise


@pytest.mark.parametrize("value", [None, ""])
def test_without_a_key_the_problem_names_the_variable_and_a_request_is_refused_unsent(no_key, monkeypatch, value):
    if value is not None:
        monkeypatch.setenv("OPENAI_API_KEY", value)
    problem = credentials_problem()
    assert problem is not None and problem.startswith(NO_CREDENTIALS) and "OPENAI_API_KEY" in problem
    request = ProviderRequest(model="m", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(ProviderError) as raised:
        OpenAIProvider(idle_timeout=1).stream(request, cancel=CancelToken())
    assert raised.value.failure_class is FailureClass.PROVIDER_AUTH and raised.value.retryable is False
    assert "OPENAI_API_KEY" in str(raised.value)


def test_with_a_key_there_is_no_problem(no_key, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    assert credentials_problem() is None
