"""Thinking bound to its prefix (agent/history/binding.py): a request sends back a thinking block only if nothing
before it changed since it was produced; a stale block is left out where the API allows it, and left to the API to
drop (`drop_block`) where the request cannot do without it."""

from __future__ import annotations

from typing import Any

from agent.history.binding import bind_thinking, prefix_digest
from agent.history.context import elide
from agent.history.request import RequestShape, build_request
from agent.messages import BOUND

SYSTEM, TOOLS = "Be brief.", [{"name": "lookup", "description": "Look up.", "input_schema": {"type": "object"}}]


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}]}


def results(call: str, text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call, "content": text}]}


def step(sent_before: list[dict[str, Any]], thought: str, *, call: str | None, system: str = SYSTEM) -> dict[str, Any]:
    """An assistant message as to_api gives it: its thinking bound to the request it was produced after."""
    bound = prefix_digest(system, TOOLS, sent_before)
    content: list[dict[str, Any]] = [{"type": "thinking", "thinking": thought, "signature": f"s-{thought}",
                                      BOUND: bound}]  # fmt: skip
    content.append({"type": "tool_use", "id": call, "name": "lookup", "input": {}} if call else
                   {"type": "text", "text": "done"})  # fmt: skip
    return {"role": "assistant", "content": content}


def thoughts(messages: list[dict[str, Any]]) -> list[str]:
    return [b["thinking"] for m in messages for b in m["content"] if b.get("type") == "thinking"]


def a_tool_loop(n: int) -> list[dict[str, Any]]:
    """A tool loop of `n` thinking steps, each bound to exactly what was sent before it (nothing elided)."""
    messages = [user("go")]
    for i in range(n):
        messages.append(step(messages, f"t{i}", call=f"c{i}"))
        messages.append(results(f"c{i}", "x" * 50))
    return messages


def test_an_append_only_history_sends_every_block_back_as_it_came_without_its_digest():
    messages = a_tool_loop(3)
    bound = bind_thinking(SYSTEM, TOOLS, messages, thinking_on=True)
    assert thoughts(bound.messages) == ["t0", "t1", "t2"] and not bound.drop_stale and bound.left_out == 0
    assert all(BOUND not in b for m in bound.messages for b in m["content"])
    assert all(BOUND in m["content"][0] for m in messages if m["role"] == "assistant")  # the input is left as it was


def test_cache_marks_are_not_part_of_the_prefix():
    messages = a_tool_loop(2)
    marked = [*messages[:2], {**messages[2], "content": [{**messages[2]["content"][0],
                                                           "cache_control": {"type": "ephemeral"}}]}, *messages[3:]]
    system = [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}]
    assert thoughts(bind_thinking(system, TOOLS, marked, thinking_on=True).messages) == ["t0", "t1"]
    assert prefix_digest(system, TOOLS, []) != prefix_digest(SYSTEM, TOOLS, [])  # a string is not a block list


def test_a_stale_block_of_a_finished_turn_is_left_out_with_every_later_one():
    """A new turn after elision changed what came before the second step: that step's thinking and every later one
    are left out (the API does not need them back: the last assistant message answered in text); the first step's,
    whose prefix is unchanged, goes back."""
    messages = a_tool_loop(2)
    messages.append(step(messages, "final", call=None))
    messages.append(user("and now?"))
    bound = bind_thinking(SYSTEM, TOOLS, elide(messages, 3), thinking_on=True)
    assert thoughts(bound.messages) == ["t0"] and bound.left_out == 2 and not bound.drop_stale
    assert [b["type"] for b in bound.messages[3]["content"]] == ["tool_use"]


def test_a_stale_block_the_tool_loop_needs_back_is_left_to_the_api_to_drop():
    """Elision inside a tool loop changes the prefix of the last step's thinking, which the API requires back: nothing
    is left out, and the request asks the API to drop what is stale."""
    bound = bind_thinking(SYSTEM, TOOLS, elide(a_tool_loop(3), 3), thinking_on=True)
    assert thoughts(bound.messages) == ["t0", "t1", "t2"] and bound.drop_stale and bound.left_out == 0


def test_without_thinking_on_the_request_needs_no_block_back_so_stale_ones_are_left_out():
    bound = bind_thinking(SYSTEM, TOOLS, elide(a_tool_loop(3), 3), thinking_on=False)
    assert thoughts(bound.messages) == ["t0"] and not bound.drop_stale


def test_a_block_produced_after_a_stale_one_was_left_out_is_valid_and_the_next_requests_agree():
    """Turn 2 left turn 1's stale thinking out; its own step is bound to that shorter prefix, so turn 2's next request
    keeps it (and leaves the same stale block out again): the request only grows."""
    messages = a_tool_loop(2)
    messages.append(step(messages, "final", call=None))
    messages.append(user("next"))
    history = elide(messages, 3)
    first = bind_thinking(SYSTEM, TOOLS, history, thinking_on=True)
    history = [*history, step(first.messages, "turn 2", call="c9"), results("c9", "y")]
    second = bind_thinking(SYSTEM, TOOLS, history, thinking_on=True)
    assert thoughts(second.messages) == ["t0", "turn 2"] and not second.drop_stale
    assert second.messages[: len(first.messages)] == first.messages


def test_a_changed_system_prompt_invalidates_every_block_and_the_loop_keeps_going_through_drop_block():
    """An agent upgraded mid-run: every block is stale. Its first request asks the API to drop them; the step it gets
    is bound to that request, so the next request is valid up to it and asks again for the older ones."""
    messages = a_tool_loop(2)
    first = bind_thinking("New instructions.", TOOLS, messages, thinking_on=True)
    assert first.drop_stale and thoughts(first.messages) == ["t0", "t1"]
    messages = [*messages, step(first.messages, "after", call="c7", system="New instructions."), results("c7", "z")]
    second = bind_thinking("New instructions.", TOOLS, messages, thinking_on=True)
    assert second.drop_stale and second.messages[: len(first.messages)] == first.messages
    assert thoughts(second.messages) == ["t0", "t1", "after"]


def test_unbound_reasoning_is_kept_and_a_history_without_digests_is_the_same_list():
    messages = [user("go"), {"role": "assistant", "content": [{"type": "thinking", "thinking": "mine"},
                                                             {"type": "text", "text": "ok"}]}]  # fmt: skip
    assert bind_thinking("other", TOOLS, messages, thinking_on=True).messages is messages


def test_build_request_carries_the_binding_decision_to_the_provider():
    shape = RequestShape("m", TOOLS, SYSTEM, prompt_cache=False, context_tokens=100_000, thinking="high")
    sent = build_request(shape, a_tool_loop(3), cut=3)
    assert sent.drop_stale_thinking and all(BOUND not in b for m in sent.messages for b in m["content"])
    assert not build_request(shape, a_tool_loop(3), cut=0).drop_stale_thinking
