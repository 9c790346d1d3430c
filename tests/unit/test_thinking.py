"""Reasoning as data: the stream reducers keep it exactly and in order, a request sends it back only to the model
that produced it, each provider maps an agent's thinking to its API, and a setting the API refuses is refused at
start."""

from __future__ import annotations

import pytest

from agent import Agent
from agent.agents import AgentError, Registry
from agent.messages import Message, TextBlock, ThinkingBlock, ToolUseBlock, to_api
from agent.provider.anthropic_provider import signed_only, thinking_params
from agent.provider.base import ProviderRequest
from agent.provider.openai_reducer import ChatSnapshot
from agent.provider.openai_reducer import accumulate as chat_accumulate
from agent.provider.openai_request import chat_body
from agent.provider.reducer import Snapshot, accumulate


def test_the_anthropic_reducer_keeps_thinking_and_its_signature_in_order():
    snapshot = Snapshot()
    for event in [
        {"type": "message_start", "message": {"id": "m1", "usage": {"input_tokens": 3}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Hmm, "}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "yes."}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "SIG"}},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "redacted_thinking", "data": "xx"}},
        {"type": "content_block_start", "index": 2, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 2, "delta": {"type": "text_delta", "text": "Answer."}},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
         "usage": {"output_tokens": 9, "output_tokens_details": {"thinking_tokens": 4}}},
        {"type": "message_stop"},
    ]:
        accumulate(event, snapshot)
    answer = snapshot.to_answer()
    assert [b.type for b in answer.content] == ["thinking", "redacted_thinking", "text"]
    assert answer.content[0] == ThinkingBlock(thinking="Hmm, yes.", signature="SIG")
    assert (answer.usage.output_tokens, answer.usage.reasoning_tokens) == (9, 4)


def test_the_chat_completions_reducer_reads_reasoning_content_or_reasoning():
    snapshot = ChatSnapshot()
    for delta in ({"reasoning_content": "Think "}, {"reasoning": "more."}, {"content": "Done."}):
        chat_accumulate({"id": "c", "choices": [{"index": 0, "delta": delta}]}, snapshot)
    chat_accumulate({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}, snapshot)
    chat_accumulate({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 7,
                                              "completion_tokens_details": {"reasoning_tokens": 3}}}, snapshot)
    answer = snapshot.to_answer()
    assert answer.content == (ThinkingBlock(thinking="Think more."), TextBlock(text="Done."))
    assert answer.usage.reasoning_tokens == 3


def test_reasoning_goes_back_only_to_the_model_that_produced_it():
    thought = ThinkingBlock(thinking="plan", signature="S")
    call = ToolUseBlock(id="t1", name="lookup", input={})
    messages = [Message(role="assistant", content=(thought, call), model="claude-a")]
    assert to_api(messages, "claude-a")[0]["content"][0] == {"type": "thinking", "thinking": "plan", "signature": "S"}
    assert [b["type"] for b in to_api(messages, "claude-b")[0]["content"]] == ["tool_use"]


def test_each_provider_maps_thinking_to_its_api():
    assert thinking_params(None) == {}
    assert thinking_params("low") == {"thinking": {"type": "adaptive"}, "output_config": {"effort": "low"}}
    assert thinking_params(2048) == {"thinking": {"type": "enabled", "budget_tokens": 2048}}
    body = chat_body(ProviderRequest(model="m", messages=[{"role": "user", "content": "hi"}], thinking="medium"))
    assert body["reasoning_effort"] == "medium"
    blocks = [{"type": "thinking", "thinking": "x"}, {"type": "text", "text": "y"}]
    unsigned = [{"role": "assistant", "content": blocks}]
    assert signed_only(unsigned) == [{"role": "assistant", "content": [{"type": "text", "text": "y"}]}]
    signed = [{"role": "assistant", "content": [{"type": "thinking", "thinking": "x", "signature": "s"}]}]
    assert signed_only(signed) is signed


@pytest.mark.parametrize(
    ("agent", "provider", "words"),
    [
        (Agent(name="hot", thinking="high", temperature=0.5), "anthropic", "temperature other than 1"),
        (Agent(name="tokens", thinking=2048), "openai", "not a number of tokens"),
    ],
)
def test_a_thinking_setting_its_api_refuses_is_refused_at_start_naming_the_agent(agent, provider, words):
    with pytest.raises(AgentError, match=f"agent '{agent.name}': .*{words}"):
        Registry.build([agent], provider=provider, model="m", servers=[])


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_each_provider_streams_reasoning_live_apart_from_the_text(provider):
    """Through the real SDK against its fake: the thinking deltas (a compatible server's `reasoning_content`) go to
    `on_reasoning`, in order, before the text goes to `on_text`; together they are the answer's blocks."""
    import anthropic
    import openai

    from agent.loop.cancel import CancelToken
    from agent.provider.anthropic_provider import AnthropicProvider
    from agent.provider.openai_provider import OpenAIProvider
    from tests.support.fake_anthropic import FakeMessagesServer, Script, text, thought
    from tests.support.fake_openai import FakeChatServer

    fake = FakeMessagesServer() if provider == "anthropic" else FakeChatServer(api_key="k")
    fake.start()
    try:
        fake.set_handler(Script([thought("First this, then that.", text("The answer."))]))
        live: list[tuple[str, str]] = []
        stream: AnthropicProvider | OpenAIProvider
        if provider == "anthropic":
            sdk = anthropic.Anthropic(base_url=fake.url, api_key="k", max_retries=0)
            stream = AnthropicProvider(idle_timeout=5, client=sdk)
        else:
            stream = OpenAIProvider(idle_timeout=5, client=openai.OpenAI(base_url=fake.url, api_key="k", max_retries=0))
        answer = stream.stream(
            ProviderRequest(model="m", messages=[{"role": "user", "content": "hi"}], thinking="low"),
            cancel=CancelToken(),
            on_text=lambda t: live.append(("text", t)),
            on_reasoning=lambda t: live.append(("reasoning", t)),
        )
    finally:
        fake.stop()
    kinds = [k for k, _ in live]
    assert kinds == sorted(kinds, key=lambda k: k == "text") and len(kinds) > 2  # every piece of reasoning first
    assert "".join(t for k, t in live if k == "reasoning") == answer.content[0].thinking == "First this, then that."
    assert "".join(t for k, t in live if k == "text") == answer.text == "The answer."
