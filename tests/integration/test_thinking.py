"""Models that think, through real workers and the real SDKs against the fakes, which sign each thinking block and
refuse, as the real APIs do, a tool loop whose thinking came back altered or dropped: a thinking tool loop on both
providers (the reasoning back exactly, usage counting it); a stream dropped after its thinking (the discarded
attempt's thinking never reaches history); a drain between a thinking step and its tool (the resumed unit sends the
journaled thinking back byte for byte); a chat that moves to another model (its old thinking is not sent)."""

from __future__ import annotations

import pytest
import redis

from tests.conftest import PROVIDERS, Stack
from tests.support import counting_tools
from tests.support.fake_anthropic import Fault, Script, failing, text, thought, tool_call
from tests.support.fake_anthropic_sse import sign
from tests.support.fake_openai import FakeChatServer

pytestmark = pytest.mark.integration

THINKING = {"BATON_AGENTS": "tests.support.agents_thinking:AGENTS"}
STALL = failing(Fault(kind="stall", seconds=60, after_events=2), like=text("thinking about it for a long time"))


def thinking_blocks(message: dict) -> list[dict]:
    return [b for b in message["content"] if isinstance(b, dict) and b.get("type") == "thinking"]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_thinking_tool_loop_sends_its_reasoning_back_exactly(stack: Stack, provider):
    """Thinking on (`thinking="high"`): Anthropic gets adaptive thinking at effort high, an OpenAI-compatible server
    `reasoning_effort`; the answer's reasoning is kept in the transcript and goes back in the tool loop's next
    request exactly (signature included on Anthropic; as `reasoning_content` on the compatible server); usage
    counts the reasoning tokens."""
    fake = stack.fake_api
    fake.set_handler(Script([thought("Let me look that up first.", tool_call("lookup", {"key": "a"})),
                             text("A is found.")]))
    stack.worker("w1", **THINKING)
    client = stack.client()
    result = client.wait(client.send_message("think-1", "what is a?"), timeout=60)
    assert (result.status, result.reply, result.agent) == ("completed", "A is found.", "thinker")
    assert result.usage.reasoning_tokens == len("Let me look that up first.") // 4
    assert fake.rejections == [] and fake.request_count == 2

    if isinstance(fake, FakeChatServer):
        first, second = fake.wire_requests
        assert first["reasoning_effort"] == "high" and "thinking" not in first
        carried = [m for m in second["messages"] if m["role"] == "assistant"]
        assert carried[0]["reasoning_content"] == "Let me look that up first."
    else:
        first, second = fake.requests
        assert (first["thinking"], first["output_config"]) == ({"type": "adaptive"}, {"effort": "high"})
        assistant = next(m for m in second["messages"] if m["role"] == "assistant")
        assert assistant["content"][0] == {"type": "thinking", "thinking": "Let me look that up first.",
                                           "signature": sign("Let me look that up first.")}
    kept = client.transcript("think-1")[1].content[0]
    assert kept.type == "thinking" and kept.thinking == "Let me look that up first."
    assert (kept.signature is None) == isinstance(fake, FakeChatServer)


@pytest.mark.parametrize("provider", ["anthropic"])
def test_a_stream_dropped_after_its_thinking_keeps_only_the_replayed_attempts(stack: Stack, provider):
    """The first attempt streams its whole thinking block (signed) and breaks before its tool call: discarded, its
    thinking with it; the replayed attempt's thinking is the one the transcript keeps and the tool loop sends back."""
    fake = stack.fake_api
    first = thought("First thoughts, never finished.", tool_call("lookup", {"key": "b"}))
    fake.set_handler(Script([
        failing(Fault("drop", after_events=8), like=first),  # start, ping, thinking start, 3 deltas, signature, stop
        thought("Second thoughts.", tool_call("lookup", {"key": "b"})),
        text("B is found."),
    ]))
    stack.worker("w1", **THINKING)
    client = stack.client()
    result = client.wait(client.send_message("think-2", "what is b?"), timeout=60)
    assert (result.status, result.usage.discarded_attempts) == ("completed", 1)
    assert fake.rejections == []
    sent_back = [b["thinking"] for m in fake.requests[-1]["messages"] for b in thinking_blocks(m)]
    assert sent_back == ["Second thoughts."]
    kept = [b.thinking for m in client.transcript("think-2") for b in m.content if b.type == "thinking"]
    assert kept == ["Second thoughts."]


@pytest.mark.parametrize("provider", ["anthropic"])
def test_a_drain_between_a_thinking_step_and_its_tool_sends_the_journaled_thinking_back(stack: Stack, provider):
    """The thinking step is journaled, its write tool starts, the worker drains (the write finishes in its grace, the
    next attempt is cut): the other worker replays the step from the journal and its requests carry the same
    thinking block, byte for byte (the fake checks the signature), and the write ran once."""
    fake = stack.fake_api
    fake.set_handler(Script([thought("Write it, then wait.", tool_call("blocking_write", {"note": "t"})), STALL,
                             text("Written.")]))
    worker_a = stack.worker("a", concurrency=1, **THINKING)
    client = stack.client()
    ref = client.send_message("think-3", "write t")
    r = redis.Redis.from_url(stack.redis_server.url)
    assert r.blpop([counting_tools.STARTED_KEY], timeout=30) is not None
    worker_a.terminate()
    r.rpush(counting_tools.RELEASE_KEY, "go")  # finishes inside the drain grace
    assert worker_a.wait_exit(timeout=20) == 0
    stack.worker("b", **THINKING)
    result = client.wait(ref, timeout=60)
    assert (result.status, result.reply) == ("completed", "Written.")
    assert counting_tools.calls(r, "blocking_write") == 1
    assert fake.rejections == []
    after = [[b["thinking"] for m in req["messages"] for b in thinking_blocks(m)] for req in fake.requests[1:]]
    assert after == [["Write it, then wait."]] * (len(fake.requests) - 1) and len(after) >= 2


@pytest.mark.parametrize("provider", ["anthropic"])
def test_a_chat_that_moves_to_another_model_does_not_send_it_the_old_thinking(stack: Stack, provider):
    """Turn 1 thinks on `thinker`'s model; turn 2 names `plain` (another model, no thinking): its request carries
    turn 1's tool round but none of its thinking (another model cannot verify it); the transcript keeps it."""
    fake = stack.fake_api
    fake.set_handler(Script([thought("Think about c.", tool_call("lookup", {"key": "c"})), text("C."),
                             text("Plainly.")]))
    stack.worker("w1", **THINKING)
    client = stack.client()
    assert client.wait(client.send_message("think-4", "what is c?"), timeout=60).reply == "C."
    moved = client.wait(client.send_message("think-4", "and plainly?", agent="plain"), timeout=60)
    assert (moved.status, moved.model) == ("completed", "claude-other")
    last = fake.requests[-1]
    assert "thinking" not in last and [b for m in last["messages"] for b in thinking_blocks(m)] == []
    assert any(b.get("type") == "tool_use" for m in last["messages"] for b in m["content"] if isinstance(b, dict))
    assert fake.rejections == []
    assert any(b.type == "thinking" for m in client.transcript("think-4") for b in m.content)


@pytest.mark.parametrize("provider", ["anthropic"])
def test_a_chat_that_moves_to_another_provider_does_not_send_it_the_old_thinking(stack: Stack, provider):
    """Turn 1 thinks on Anthropic (signed thinking, a tool round); turn 2 names `elsewhere`, an OpenAI-compatible
    server of its own: its request carries turn 1's tool round as Chat Completions messages, but neither the signed
    thinking nor any `reasoning_content` (that server cannot verify what Anthropic signed); the transcript keeps it."""
    local = FakeChatServer(api_key="local-secret").start()
    try:
        stack.fake_api.set_handler(Script([thought("Think about e.", tool_call("lookup", {"key": "e"})), text("E.")]))
        local.set_handler(Script([text("Elsewhere.")]))
        stack.worker("w1", **THINKING, BATON_TEST_LOCAL_URL=local.url, LOCAL_LLM_KEY="local-secret")
        client = stack.client()
        assert client.wait(client.send_message("think-p", "what is e?"), timeout=60).reply == "E."
        moved = client.wait(client.send_message("think-p", "and elsewhere?", agent="elsewhere"), timeout=60)
        assert (moved.status, moved.reply, moved.model) == ("completed", "Elsewhere.", "local-llm")
        [sent] = local.wire_requests
        assert "Think about e." not in str(sent) and all("reasoning_content" not in m for m in sent["messages"])
        assert any(m.get("tool_calls") for m in sent["messages"])  # the tool round itself goes along
        assert local.rejections == [] and stack.fake_api.rejections == []
        assert any(b.type == "thinking" for m in client.transcript("think-p") for b in m.content)
    finally:
        local.stop()


@pytest.mark.parametrize("provider", ["anthropic"])
def test_a_thinking_block_altered_on_replay_answers_the_fakes_400(stack: Stack, provider):
    """The guard the thinking tests stand on: the journaled thinking of a step is changed (one word) while its unit
    waits for another worker; the resumed unit sends it back altered, and the fake refuses it exactly as the API
    does ("Invalid `signature` in `thinking` block"): the turn fails as provider_bad_request, not silently on."""
    fake = stack.fake_api
    fake.set_handler(Script([thought("Write it, then wait.", tool_call("blocking_write", {"note": "x"})), STALL,
                             text("Written.")]))
    worker_a = stack.worker("a", concurrency=1, **THINKING)
    client = stack.client()
    ref = client.send_message("think-5", "write x")
    r = redis.Redis.from_url(stack.redis_server.url)
    assert r.blpop([counting_tools.STARTED_KEY], timeout=30) is not None
    worker_a.terminate()
    r.rpush(counting_tools.RELEASE_KEY, "go")
    assert worker_a.wait_exit(timeout=20) == 0
    (journal,) = [k for k in r.scan_iter("*think-5*journal:*") if r.hexists(k, "model:0")]
    record = r.hget(journal, "model:0")
    assert record is not None and b"Write it, then wait." in record
    r.hset(journal, "model:0", record.replace(b"Write it, then wait.", b"Write it, then rest."))
    stack.worker("b", **THINKING)
    result = client.wait(ref, timeout=60)
    assert result.status == "failed" and result.failure is not None
    assert result.failure["class"] == "provider_bad_request", result.failure
    assert any("Invalid `signature` in `thinking` block" in reason for reason in fake.rejections), fake.rejections
