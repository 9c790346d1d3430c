"""The fake Chat Completions server, through the real `openai` SDK and Baton's OpenAI provider: what it
streams, the faults it injects, and the API's 400s it gives (pairing, context length, cache marks)."""

from __future__ import annotations

import json

import openai
import pytest

from agent.loop.cancel import CancelToken
from agent.loop.failures import FailureClass, Overflow, classify
from agent.provider.base import AttemptFailed, ProviderRequest, TokenUsage
from agent.provider.openai_provider import OpenAIProvider
from tests.support.fake_anthropic import Fault, Reply, Script, failing, text, tool_call
from tests.support.fake_openai import FakeChatServer, neutral_body

KEY = "sk-test-fake-openai"


@pytest.fixture
def fake():
    server = FakeChatServer(api_key=KEY).start()
    yield server
    server.stop()


def _provider(fake, idle=5.0, **client):
    sdk = openai.OpenAI(base_url=fake.url, api_key=KEY, max_retries=client.pop("max_retries", 0), timeout=idle)
    return OpenAIProvider(idle_timeout=idle, client=sdk)


def _request(messages=None) -> ProviderRequest:
    tools = [{"name": "note", "description": "Note it.", "input_schema": {"type": "object"}}]
    return ProviderRequest(model="gpt-test", messages=messages or [{"role": "user", "content": "hi"}], tools=tools,
                           system="Be brief.")


def test_text_and_a_split_tool_call_arrive_whole_with_usage(fake):
    fake.set_handler(Script([
        Reply([{"type": "text", "text": "Hello there, friend."}], input_tokens=30, cached_tokens=70, output_tokens=4),
        tool_call("note", {"note": "a fairly long argument to split"}, id="call_1"),
    ]))
    texts: list[str] = []
    answer = _provider(fake).stream(_request(), cancel=CancelToken(), on_text=texts.append)
    assert answer.text == "Hello there, friend." and len(texts) == 3 and answer.stop_reason == "end_turn"
    assert answer.usage == TokenUsage(input_tokens=30, output_tokens=4, cache_read_input_tokens=70)
    answer = _provider(fake).stream(_request(), cancel=CancelToken())
    assert [(b.id, b.input) for b in answer.tool_uses] == [("call_1", {"note": "a fairly long argument to split"})]
    wire = fake.wire_requests[0]
    assert wire["stream_options"] == {"include_usage": True} and wire["messages"][0]["role"] == "system"
    assert fake.requests[0]["system"] == "Be brief." and fake.requests[0]["messages"][0]["content"][0]["text"] == "hi"


@pytest.mark.parametrize("after", [5, 9], ids=["mid-arguments", "after-finish-reason"])
def test_a_dropped_tool_call_stream_is_a_failed_attempt_never_a_call(fake, after):
    fake.set_handler(Script([failing(Fault("drop", after_events=after), like=tool_call("note", {"note": "x" * 40}))]))
    with pytest.raises(AttemptFailed) as raised:
        _provider(fake).stream(_request(), cancel=CancelToken())
    assert raised.value.had_output is True
    assert classify(raised.value.cause).failure_class is FailureClass.INFRA_TRANSIENT


def test_a_stall_is_cut_by_the_idle_timeout(fake):
    fake.set_handler(Script([failing(Fault("stall", after_events=4, seconds=10))]))
    with pytest.raises(AttemptFailed) as raised:
        _provider(fake, idle=0.5).stream(_request(), cancel=CancelToken())
    assert classify(raised.value.cause).failure_class is FailureClass.PROVIDER_STALL


@pytest.mark.parametrize(
    ("fault", "expected", "retry_after"),
    [
        (Fault("http", status=429, retry_after=2), FailureClass.PROVIDER_RATE_LIMITED, 2.0),
        (Fault("http", status=500), FailureClass.PROVIDER_SERVER_ERROR, None),
        (Fault("http", status=503), FailureClass.PROVIDER_OVERLOADED, None),
        (Fault("overloaded", after_events=4), FailureClass.PROVIDER_OVERLOADED, None),
    ],
)
def test_http_and_in_stream_faults_are_classified(fake, fault, expected, retry_after):
    fake.set_handler(Script([failing(fault)]))
    with pytest.raises(AttemptFailed) as raised:
        _provider(fake).stream(_request(), cancel=CancelToken())
    found = classify(raised.value.cause)
    assert (found.failure_class, found.retry_after) == (expected, retry_after)


def test_sdk_retries_left_on_would_multiply_the_budget(fake):
    """The guard the provider's `max_retries=0` keeps: with the SDK's default a 500 is sent 3 times."""
    fake.set_handler(lambda body, index: failing(Fault("http", status=500)))
    with pytest.raises(AttemptFailed):
        _provider(fake).stream(_request(), cancel=CancelToken())
    assert fake.request_count == 1
    sdk = openai.OpenAI(base_url=fake.url, api_key=KEY)  # the SDK's default: 2 retries
    with pytest.raises(openai.InternalServerError):
        sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], stream=True)
    assert fake.request_count == 1 + 3


def test_an_unpaired_tool_call_gets_the_api_400(fake):
    messages = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "call_9", "name": "note", "input": {}}]},
        {"role": "user", "content": "no result"},
    ]
    with pytest.raises(AttemptFailed) as raised:
        _provider(fake).stream(_request(messages), cancel=CancelToken())
    assert classify(raised.value.cause).failure_class is FailureClass.PROVIDER_BAD_REQUEST
    assert "must be followed by tool messages responding to each 'tool_call_id'" in fake.rejections[0]
    assert "call_9" in fake.rejections[0]


def test_a_request_past_the_context_limit_is_an_overflow(fake):
    fake.context_limit = 10
    with pytest.raises(AttemptFailed) as raised:
        _provider(fake).stream(_request([{"role": "user", "content": "x" * 400}]), cancel=CancelToken())
    found = classify(raised.value.cause)
    assert found.failure_class is FailureClass.CONTEXT_OVERFLOW and found.overflow is not None
    assert isinstance(found.overflow, Overflow) and found.overflow.maximum == 10 and fake.too_long == [0]


def test_the_neutral_view_folds_tool_messages_and_the_text_after_them_into_one_user_message():
    body = {"model": "m", "messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "t", "arguments": '{"k":1}'}}]},
        {"role": "tool", "tool_call_id": "a", "content": "[tool error] nope"},
        {"role": "user", "content": "then?"},
    ]}
    assert neutral_body(body)["messages"][1:] == [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "t", "input": {"k": 1}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": "nope", "is_error": True},
                                     {"type": "text", "text": "then?"}]},
    ]
    assert json.dumps(neutral_body(body))


def test_a_wrong_key_is_401_auth(fake):
    sdk = openai.OpenAI(base_url=fake.url, api_key="sk-wrong", max_retries=0)
    with pytest.raises(AttemptFailed) as raised:
        OpenAIProvider(idle_timeout=5, client=sdk).stream(_request(), cancel=CancelToken())
    assert classify(raised.value.cause).failure_class is FailureClass.PROVIDER_AUTH
    fake.set_handler(Script([text("fine")]))
    assert _provider(fake).stream(_request(), cancel=CancelToken()).text == "fine"
