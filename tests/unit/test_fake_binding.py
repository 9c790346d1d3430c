"""The fake Messages API's prefix check (tests/support/fake_anthropic_sse.py), as the real API's preserved thinking
has it: on a binding model a thinking block comes back valid only after the very prefix it was produced after
(cache marks aside); a changed prefix is a 400, or dropped with `drop_block` and its beta header."""

from __future__ import annotations

from typing import Any

from tests.support.fake_anthropic_sse import BINDING_BETA, prefix_binding, sign, validate_request

TOOLS = [{"name": "lookup", "description": "d", "input_schema": {"type": "object"}}]


def loop(model: str, system: str = "S", drop: bool = False) -> dict[str, Any]:
    """A tool loop whose thinking was produced after system `S` (signed by the fake for `model`)."""
    first = [{"role": "user", "content": [{"type": "text", "text": "go"}]}]
    produced = {"model": model, "system": "S", "tools": TOOLS, "messages": first}
    thinking = {"type": "thinking", "thinking": "t", "signature": sign("t", prefix_binding(produced, 1))}
    call = {"type": "tool_use", "id": "c", "name": "lookup", "input": {}}
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c", "content": "v"}]}
    config: dict[str, Any] = {"type": "adaptive"}
    if drop:
        config["block_binding"] = {"prefix_mismatch_behavior": "drop_block"}
    messages = [*first, {"role": "assistant", "content": [thinking, call]}, result]
    return {"model": model, "max_tokens": 10, "system": system, "tools": TOOLS, "messages": messages,
            "thinking": config}  # fmt: skip


def test_an_unchanged_prefix_passes_and_cache_marks_do_not_count():
    assert validate_request(loop("claude-fable-5-1")) is None
    marked = loop("claude-fable-5-1", system=[{"type": "text", "text": "S", "cache_control": {"type": "ephemeral"}}])
    assert validate_request(marked) is None


def test_a_changed_system_prompt_is_bound_to_a_different_conversation_unless_the_api_may_drop_it():
    problem = validate_request(loop("claude-fable-5-1", system="S2"))
    assert problem is not None and "The block is bound to a different conversation" in problem
    assert "anthropic-beta" in (validate_request(loop("claude-fable-5-1", system="S2", drop=True)) or "")
    assert validate_request(loop("claude-fable-5-1", system="S2", drop=True), betas=BINDING_BETA) is None


def test_an_older_model_checks_the_signature_only():
    assert validate_request(loop("claude-test", system="S2")) is None
    altered = loop("claude-test")
    altered["messages"][1]["content"][0]["thinking"] = "t, edited"
    assert "Invalid `signature` in `thinking` block" in (validate_request(altered) or "")
