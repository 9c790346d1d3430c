"""Cache breakpoints and the context budget inside the loop: placement, byte-identical replays, old results
elided under a small budget, one compaction after "prompt is too long", and usage that counts every attempt."""

from __future__ import annotations

import json
from dataclasses import replace

import anthropic
import httpx2
import openai
import pytest

import agent.provider.anthropic_errors
import agent.provider.openai_errors  # noqa: F401 - and the OpenAI SDK's
from agent.history.caching import count_breakpoints, message_breakpoints, with_breakpoints
from agent.history.context import ELIDED, request_tokens
from agent.loop.cancel import CancelToken
from agent.loop.edge import LoopConfig, LoopFailure
from agent.loop.failures import FailureClass
from agent.loop.memory_edge import MemoryEdge
from agent.loop.model_step import answer_from_record
from agent.loop.policy import Backoff, Driver
from agent.loop.run import run_loop
from agent.loop.state import LoopState
from agent.messages import user_text
from agent.provider.base import AttemptFailed, ProviderRequest, TokenUsage
from agent.provider.replay import RequestFailed
from agent.provider.scripted import ScriptedProvider, reply_fault, reply_text, reply_tool
from agent.tools import by_name, tool
from tests.support.fake_anthropic_sse import validate_request

MARK = {"type": "ephemeral"}
CONFIG = LoopConfig(
    owner_id="run-1",
    turn_id="run-1",
    driver=Driver.CODING_RUN,
    model="claude-test",
    max_rounds=40,
    retry_budget=3,
    backoff=Backoff(scale=0.0),
    system="You are a coding agent.",
)


@tool(effect="read")
def read_file(path: str) -> str:
    """Read a file."""
    return f"{path}:" + "x" * 3000


TOOLS = by_name([read_file])


def reads(n: int):
    return [reply_tool("read_file", {"path": f"f{i}"}, call_id=f"c{i}") for i in range(n)]


def run(script, *, config: LoopConfig = CONFIG, edge: MemoryEdge | None = None, provider=None):
    provider = provider or ScriptedProvider(script)
    edge = edge if edge is not None else MemoryEdge()
    state = LoopState()
    error: Exception | None = None
    try:
        run_loop([user_text("the goal", turn_id="run-1")], state, provider=provider, tools=TOOLS, edge=edge,
                 cancel=CancelToken(), config=config)
    except (RequestFailed, LoopFailure) as err:
        error = err
    return state, provider, edge, error


def wire(request: ProviderRequest) -> str:
    """The JSON the SDK would send for this request, in its own key order (no sorting: bytes as sent)."""
    return json.dumps({"model": request.model, "system": request.system, "tools": request.tools,
                       "messages": request.messages})


def marked(blocks) -> list[int]:
    return [i for i, b in enumerate(blocks) if "cache_control" in b]


# -- placement -----------------------------------------------------------------------------------


def test_first_request_marks_the_system_prefix_and_its_last_block():
    """One user message: the system prompt's block and the message's last block; the tools stay unmarked
    (the system mark caches them too); the inputs are not mutated."""
    tools = [{"name": "a"}, {"name": "b"}]
    messages = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    out_tools, system, out = with_breakpoints(tools, "sys", messages)
    assert system == [{"type": "text", "text": "sys", "cache_control": MARK}]
    assert out_tools == tools and "cache_control" not in tools[-1]
    assert out[0]["content"][0]["cache_control"] == MARK and "cache_control" not in messages[0]["content"][0]
    assert count_breakpoints(out_tools, system, out) == 2


def test_without_a_system_prompt_the_last_tool_is_marked():
    """A chat turn has no system prompt: the tools prefix is marked on the last tool definition."""
    out_tools, system, _ = with_breakpoints([{"name": "a"}, {"name": "b"}], None, [{"role": "user", "content": "q"}])
    assert system is None and marked(out_tools) == [1]


def test_rolling_marks_follow_the_previous_request_and_this_one():
    """After rounds: the previous request's last message (the user message before the last assistant message)
    and this request's last; at most 4 marks whatever the history; a chat's next turn marks the last turn's
    final request too."""
    messages = [{"role": "user", "content": [{"type": "text", "text": "goal"}]}]
    for i in range(5):
        call = {"type": "tool_use", "id": f"t{i}", "name": "r", "input": {}}
        messages.append({"role": "assistant", "content": [call]})
        messages.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i}", "content": "x"}]})
        assert message_breakpoints(messages) == [len(messages) - 3, len(messages) - 1]
        tools, system, out = with_breakpoints([{"name": "r"}], "sys", messages)
        assert count_breakpoints(tools, system, out) == 3 <= 4
        assert validate_request({"model": "m", "max_tokens": 1, "messages": out, "tools": [{"name": "t"}]}) is None
    chat = [*messages, {"role": "assistant", "content": [{"type": "text", "text": "done"}]},
            {"role": "user", "content": [{"type": "text", "text": "and now?"}]}]
    assert message_breakpoints(chat) == [len(messages) - 1, len(chat) - 1]


def test_empty_text_blocks_are_never_marked():
    """The API refuses cache_control on an empty text block, so such a block is skipped."""
    _, _, out = with_breakpoints([], None, [{"role": "user", "content": [{"type": "text", "text": ""}]}])
    assert "cache_control" not in out[0]["content"][0]


# -- in the loop ----------------------------------------------------------------------------------


def test_every_request_of_a_run_carries_marks_and_off_sends_none():
    """On: each request has the system mark and the rolling marks (≤ 4). Off: no cache_control anywhere, and
    the system prompt goes as the plain string it was."""
    _, provider, _, error = run([*reads(3), reply_text("done")])
    assert error is None
    for request in provider.requests:
        assert 2 <= count_breakpoints(request.tools, request.system, request.messages) <= 4
        assert isinstance(request.system, list) and request.system[-1]["cache_control"] == MARK
    _, provider, _, _ = run([*reads(3), reply_text("done")], config=replace(CONFIG, prompt_cache=False))
    assert all("cache_control" not in wire(r) for r in provider.requests)
    assert provider.requests[0].system == "You are a coding agent."


def test_a_replayed_step_sends_the_same_bytes():
    """An execution that died in the middle of step 3 (its journal holds steps 0-2) and the execution that
    replays the journal send byte-identical requests for step 3, marks included, so the replay reads the cache."""
    edge = MemoryEdge()
    _, first, _, error = run([*reads(3), reply_fault("auth")], edge=edge)
    assert isinstance(error, RequestFailed)
    _, second, _, error = run([reply_text("done")], edge=edge)
    assert error is None and len(second.requests) == 1
    assert wire(second.requests[0]) == wire(first.requests[-1])
    # A replay inside one execution (a dropped stream) re-sends the very same request too.
    _, provider, _, _ = run([reads(1)[0], reply_fault("drop", partial="x"), reply_text("done")])
    assert wire(provider.requests[1]) == wire(provider.requests[2])


def test_a_small_budget_elides_old_results_and_every_request_fits():
    """A run whose results add up to several times BATON_CONTEXT_TOKENS completes; every request's estimate is
    within the budget and its pairs are valid; old results carry the marker; the latest round never does."""
    config = replace(CONFIG, context_tokens=4000)
    state, provider, edge, error = run([*reads(20), reply_text("done")], config=config)
    assert error is None and state.reply == "done"
    for request in provider.requests:
        assert request_tokens(request.tools, request.system, request.messages) <= 4000
        body = {"model": "m", "max_tokens": 1, "messages": request.messages, "tools": [{"name": "t"}]}
        assert validate_request(body) is None
        last = request.messages[-1]["content"]
        assert all("elided" not in str(b.get("content")) for b in last)
    assert sum(len(r.messages) for r in provider.requests) > 0
    assert any(ELIDED.split("(")[0] in wire(r) for r in provider.requests)
    # The cut only moves forward, and the journal holds it for replays.
    cuts = [edge.steps[f"model:{i}"]["elided_before"] for i in range(21)]
    assert cuts == sorted(cuts) and cuts[-1] > 0


def _openai_too_long(size: int, maximum: int) -> Exception:
    message = (f"This model's maximum context length is {maximum} tokens. However, your messages resulted in {size} "
               "tokens. Please reduce the length of the messages.")
    body = {"message": message, "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}
    request = httpx2.Request("POST", "http://x/v1/chat/completions")
    response = httpx2.Response(400, request=request, json={"error": body})
    return openai.BadRequestError(f"Error code: 400 - {body}", response=response, body=body)


def _too_long(*limits: int, provider: str = "anthropic"):
    """A provider that refuses a request whose estimate passes the limit, as the API does, stating both figures;
    after each refusal the next limit applies (a window that shrinks under the run)."""
    body = {"type": "error", "error": {"type": "invalid_request_error", "message": ""}}
    window = list(limits)

    class Limited(ScriptedProvider):
        refused: list[ProviderRequest] = []

        def stream(self, request, *, cancel, **sinks):
            size = request_tokens(request.tools, request.system, request.messages)
            if size > window[0]:
                self.requests.append(request)
                self.refused.append(request)
                limit = window[0]
                message = f"prompt is too long: {size} tokens > {limit} maximum"
                if len(window) > 1:
                    window.pop(0)
                response = httpx2.Response(400, request=httpx2.Request("POST", "http://x/v1/messages"),
                                           json={**body, "error": {**body["error"], "message": message}})
                err: Exception = anthropic.BadRequestError(
                    f"Error code: 400 - {message}", response=response, body=response.json()
                )
                if provider == "openai":
                    err = _openai_too_long(size, limit)
                raise AttemptFailed(err, TokenUsage(), had_output=False)
            return super().stream(request, cancel=cancel, **sinks)

    return Limited


def _size(request: ProviderRequest) -> int:
    return request_tokens(request.tools, request.system, request.messages)


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_prompt_too_long_compacts_once_and_succeeds(provider):
    """The provider refuses a step as too long: the loop elides old results to half the stated window, journals
    that decision, re-sends once and goes on; each refused attempt counts as a discarded attempt."""
    script = [*reads(12), reply_text("done")]
    limited = _too_long(8000, provider=provider)(list(script))
    state, limited, edge, error = run(script, provider=limited)
    assert error is None and state.reply == "done"
    refused = [i for i, r in enumerate(limited.requests) if _size(r) > 8000]
    assert refused
    for i in refused:  # each refusal is followed by one compacted request within half the window
        assert _size(limited.requests[i + 1]) <= 4000 and i + 1 not in refused
    compactions = [k for k in edge.steps if k.startswith("compact:")]
    assert len(compactions) == len(refused)
    assert all(edge.steps[k]["status"] == "decided" for k in compactions)
    discards = [d for k, d in edge.events if k == "run.step" and d.get("discarded")]
    assert [d["class"] for d in discards] == ["context_overflow"] * len(refused)
    assert state.usage.attempts == len(limited.requests) and state.usage.discarded_attempts == len(refused)


def test_a_replay_after_a_compaction_sends_the_compacted_bytes():
    """An execution that compacted step N and died before the answer: the next one reads the journaled
    decision and sends the compacted request first, byte for byte, with no second refusal."""
    script = [*reads(12), reply_text("done")]
    edge = MemoryEdge()
    first = _too_long(8000)(list(script))
    _, first, edge, _ = run(script, provider=first, edge=edge)
    step = max(int(k.partition(":")[2]) for k in edge.steps if k.startswith("compact:"))
    sent = next(r for r in first.requests[::-1] if _size(r) <= 4000 and len(r.messages) == 2 * step + 1)
    for later in [k for k in edge.steps if k.startswith(("model:", "tool:"))]:
        if later.startswith("model:") and int(later.partition(":")[2]) >= step:
            del edge.steps[later]
    _, again, _, error = run([reply_text("done")], edge=edge, provider=_too_long(8000)([reply_text("done")]))
    assert error is None and wire(again.requests[0]) == wire(sent)


def test_an_unfittable_request_fails_as_context_overflow_after_one_compaction():
    """When even the compacted request is refused, the step fails as context_overflow (not retryable) after
    exactly two sends of that step: one compaction, never a retry loop."""
    script = [*reads(12), reply_text("done")]
    limited = _too_long(8000, 100)(list(script))
    _, limited, edge, error = run(script, provider=limited)
    assert isinstance(error, RequestFailed) and FailureClass(error.failure_class) is FailureClass.CONTEXT_OVERFLOW
    assert error.retryable is False and error.attempts == 1
    assert limited.requests[-2:] == limited.refused and len(limited.refused) == 2
    assert len([k for k in edge.steps if k.startswith("compact:")]) == 1


def test_nothing_left_to_elide_fails_without_a_resend():
    """A refusal when no old result is left to elide fails at once as context_overflow: one send, no re-send."""
    script = [*reads(2), reply_text("done")]
    limited = _too_long(600)(list(script))
    _, limited, _, error = run(script, provider=limited)
    assert isinstance(error, RequestFailed) and FailureClass(error.failure_class) is FailureClass.CONTEXT_OVERFLOW
    assert len(limited.requests) == 2 and _size(limited.requests[-1]) > 600


def test_a_budget_that_cannot_hold_the_first_message_fails_before_sending():
    """When eliding every old result still leaves the request over BATON_CONTEXT_TOKENS (here the goal alone is
    bigger, and a person's words are never elided), the step fails as context_overflow without a request."""
    config = replace(CONFIG, context_tokens=1000)
    provider = ScriptedProvider([reply_text("done")])
    state = LoopState()
    with pytest.raises(LoopFailure) as info:
        run_loop([user_text("g" * 5000, turn_id="run-1")], state, provider=provider, tools=TOOLS, edge=MemoryEdge(),
                 cancel=CancelToken(), config=config)
    assert info.value.failure_class is FailureClass.CONTEXT_OVERFLOW and provider.requests == []


def test_a_model_record_from_before_the_cache_fields_still_loads():
    """Journal records written before this change (usage without cache fields, no elided_before) replay."""
    old = {"kind": "model", "status": "done", "message_id": "m", "content": [{"type": "text", "text": "hi"}],
           "stop_reason": "end_turn", "usage": {"input_tokens": 7, "output_tokens": 3}, "attempts": 1,
           "discarded_attempts": 0}
    answer = answer_from_record(old)
    assert answer.usage.input_tokens == 7 and answer.usage.cache_read_input_tokens == 0
    edge = MemoryEdge(steps={"model:0": old})
    state, provider, _, error = run([], edge=edge)
    assert error is None and state.reply == "hi" and provider.requests == []
    assert state.usage.model_dump() == {"input_tokens": 7, "output_tokens": 3, "cache_creation_input_tokens": 0,
                                        "cache_read_input_tokens": 0, "attempts": 1, "discarded_attempts": 0}


def test_usage_sums_cache_fields_per_attempt():
    """Usage carries the cache figures the provider reported, summed over attempts (the reducer reads them)."""
    from agent.provider.reducer import Snapshot, accumulate

    snap = Snapshot()
    start = {"input_tokens": 5, "cache_creation_input_tokens": 100, "cache_read_input_tokens": 900, "output_tokens": 1}
    accumulate({"type": "message_start", "message": {"id": "m", "usage": start}}, snap)
    accumulate({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 9}}, snap)
    usage = snap.usage
    assert (usage.input_tokens, usage.cache_creation_input_tokens, usage.cache_read_input_tokens) == (5, 100, 900)
    assert usage.output_tokens == 9 and usage.prompt_tokens == 1005
    assert (usage + usage).cache_read_input_tokens == 1800


def test_the_providers_count_calibrates_the_budget():
    """A provider that counts twice the estimate: from the second step on, the loop measures against its count
    (journaled as token_scale), so every request the provider counts stays within the budget."""
    replies = [*reads(20), reply_text("done")]
    provider = ScriptedProvider(lambda request, i: replace(replies[i], input_tokens=2 * _size(request)))
    config = replace(CONFIG, context_tokens=8000)
    state, provider, edge, error = run([], config=config, provider=provider)
    assert error is None and state.reply == "done"
    assert all(2 * _size(r) <= 8000 for r in provider.requests)
    # ~2 (the estimate of a request includes an allowance for its cache marks, so the ratio is a little less)
    assert all(1.9 < edge.steps[f"model:{i}"]["token_scale"] <= 2.0 for i in range(1, 21))
    unscaled = run(list(replies), config=config)[1]
    assert max(_size(r) for r in unscaled.requests) > 4000  # without the count it would have sent more


def test_an_attempt_cut_by_a_drain_is_billed_by_the_next_execution():
    """A drain cuts step 1's attempt after the provider reported its usage: the execution that picks the step up
    (same journal) counts that attempt, as discarded, in the step's record and in the unit's usage."""
    from agent.errors import Cancelled
    from agent.provider.base import AttemptCut

    billed = TokenUsage(input_tokens=3, cache_read_input_tokens=500, output_tokens=1)

    class Drained(ScriptedProvider):
        def stream(self, request, *, cancel, **sinks):
            if len(self.requests) == 1:
                self.requests.append(request)
                raise AttemptCut("drain", billed)
            return super().stream(request, cancel=cancel, **sinks)

    edge = MemoryEdge()
    first = Drained(reads(1))
    with pytest.raises(Cancelled):
        run_loop([user_text("the goal", turn_id="run-1")], LoopState(), provider=first, tools=TOOLS, edge=edge,
                 cancel=CancelToken(), config=CONFIG)
    assert edge.steps["spent:1"]["attempts"] == 1
    state, second, edge, error = run([reply_text("done")], edge=edge)
    assert error is None and state.reply == "done" and len(second.requests) == 1
    assert edge.steps["model:1"]["attempts"] == 2 and edge.steps["model:1"]["discarded_attempts"] == 1
    assert edge.steps["model:1"]["usage"]["cache_read_input_tokens"] == 500
    assert (state.usage.attempts, state.usage.discarded_attempts) == (3, 1)
    assert state.usage.cache_read_input_tokens == 500 and state.usage.input_tokens == 10 + 3 + 10
