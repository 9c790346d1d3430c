"""The provider edge, end to end through real workers and the real SDKs against the fakes over HTTP: usage
with cached prompt tokens in Baton's fields on both providers, missing OpenAI credentials, and a chat that
changes provider between turns with tool rounds in its history (each fake refuses a request that does not pair).
"""

from __future__ import annotations

import pytest

from tests.conftest import PROVIDERS, Stack, provider_env
from tests.support.fake_anthropic import FakeMessagesServer, Fault, Reply, Script, failing, text, tool_call
from tests.support.fake_openai import FakeChatServer

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("provider", PROVIDERS)
def test_usage_counts_cached_prompt_tokens_as_cache_reads_and_every_attempt(stack, provider):
    """OpenAI reports `prompt_tokens` with the cached ones inside; Anthropic reports them apart. Either way the
    turn's usage says 30 uncached input tokens, 70 read from the cache, 5 output, over 2 attempts (1 discarded)."""
    stack.fake_api.set_handler(Script([
        failing(Fault("http", status=500)),
        Reply([{"type": "text", "text": "Cached."}], input_tokens=30, cached_tokens=70, output_tokens=5),
    ]))
    stack.worker()
    client = stack.client()
    result = client.wait(client.send_message("u1", "hello"), timeout=60)
    assert result.status == "completed" and result.reply == "Cached."
    usage = result.usage
    assert (usage.input_tokens, usage.cache_read_input_tokens, usage.cache_creation_input_tokens) == (30, 70, 0)
    assert (usage.output_tokens, usage.attempts, usage.discarded_attempts) == (5, 2, 1)


@pytest.mark.parametrize("provider", ["openai"])
def test_without_an_openai_key_the_worker_warns_and_a_turn_fails_as_provider_auth_unsent(stack, provider):
    worker = stack.worker(OPENAI_API_KEY="")
    assert "BATON_PROVIDER=openai, but no OpenAI credentials are configured: set OPENAI_API_KEY" in worker.log()
    client = stack.client()
    result = client.wait(client.send_message("k1", "hello"), timeout=60)
    assert result.status == "failed" and result.failure is not None
    assert result.failure["class"] == "provider_auth" and result.failure["retryable"] is False
    assert "OPENAI_API_KEY" in result.failure["message"]
    assert (result.usage.attempts, result.usage.discarded_attempts) == (0, 0)
    assert stack.fake_api.request_count == 0


@pytest.fixture
def openai_fake():
    server = FakeChatServer().start()
    yield server
    server.stop()


def _pairs(request: dict) -> list[tuple[str, str]]:
    """(tool_use id, the tool_result id right after it) of every call in a request in Baton's shape."""
    out = []
    messages = request["messages"]
    for i, m in enumerate(messages):
        for b in m["content"] if isinstance(m["content"], list) else []:
            if b.get("type") == "tool_use":
                answer = messages[i + 1]["content"]
                out += [(b["id"], r["tool_use_id"]) for r in answer if r.get("tool_use_id") == b["id"]]
    return out


def test_a_chat_changes_provider_between_turns_with_tool_rounds_in_its_history(stack: Stack, openai_fake):
    """Turn 1 on Anthropic (a tool round), turn 2 on OpenAI (another), turn 3 on Anthropic again: each provider
    gets the whole history in its own form, every call paired with its result, and neither fake refuses a
    request; the transcript keeps Baton's shape throughout."""
    anthropic_fake: FakeMessagesServer = stack.fake_api
    anthropic_fake.set_handler(Script([tool_call("lookup", {"key": "a"}, id="toolu_first"), text("A done."),
                                       text("Back on Claude.")]))
    openai_fake.set_handler(Script([tool_call("lookup", {"key": "b"}, id="call_second"), text("B done.")]))
    client = stack.client()

    first = stack.worker("w1")
    assert client.wait(client.send_message("sw", "look up a"), timeout=60).reply == "A done."
    first.discard()
    second = stack.worker("w2", **provider_env("openai", openai_fake))
    assert client.wait(client.send_message("sw", "now b"), timeout=60).reply == "B done."
    second.discard()
    stack.worker("w3")
    assert client.wait(client.send_message("sw", "and back"), timeout=60).reply == "Back on Claude."

    assert anthropic_fake.rejections == [] and openai_fake.rejections == []
    assert anthropic_fake.request_count == 3 and openai_fake.request_count == 2
    wire = openai_fake.wire_requests[0]["messages"]  # the OpenAI body carries turn 1's Anthropic call, paired
    calls = [m for m in wire if m.get("tool_calls")]
    assert calls[0]["tool_calls"][0]["id"] == "toolu_first"
    assert wire[wire.index(calls[0]) + 1] == {"role": "tool", "tool_call_id": "toolu_first",
                                              "content": wire[wire.index(calls[0]) + 1]["content"]}
    assert "cache_control" not in str(openai_fake.wire_requests)
    last = anthropic_fake.requests[-1]  # and Anthropic's last request carries turn 2's OpenAI call, paired
    assert _pairs(last) == [("toolu_first", "toolu_first"), ("call_second", "call_second")]
    transcript = client.transcript("sw")
    assert [m.role for m in transcript] == ["user", "assistant", "user", "assistant"] * 2 + ["user", "assistant"]
    assert [b.id for m in transcript for b in m.tool_uses] == ["toolu_first", "call_second"]
