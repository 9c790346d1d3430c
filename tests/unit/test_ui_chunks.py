"""The UI message chunks of a turn's stream (web/ui_chunks.py) and the reading of useChat's body (web/ui_request.py).

The items are shaped as a real worker writes them (captured from a tool round, a dropped provider stream, an
approval, a failure and a stop against the fake provider).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from agent.loop.model_step import step_message_id
from agent.loop.state import LoopState
from agent.messages import INTERRUPTED_RESULT, STOPPED_NOTICE
from web.ui_chunks import TurnChunks, advance, chunks_of, first_message_id, parked, step_so_far
from web.ui_request import Decide, Decision, Regenerate, Send, asked

T = "t-1"
M0, M1 = f"{T}:m0", f"{T}:m1"


def delta(message_id: str, attempt: int, index: int, text: str) -> dict[str, Any]:
    return {"type": "text.delta", "turn_id": T, "message_id": message_id, "attempt": attempt, "index": index,
            "text": text}  # fmt: skip


def ev(kind: str, **fields: Any) -> dict[str, Any]:
    return {"type": kind, "turn_id": T, **fields}


def kinds(chunks: list[dict[str, Any]]) -> list[str]:
    return [c["type"] for c in chunks]


def test_a_tool_round_is_one_message_of_two_steps():
    items = [
        ev("turn.queued"),
        ev("turn.started", generation=0),
        delta(M0, 1, 0, "Let me look."),
        ev("tool.called", tool_use_id="toolu_1", name="lookup", input={"key": "a"}),
        ev("tool.result", tool_use_id="toolu_1", name="lookup", status="ok", is_error=False, content="value-of-a"),
        delta(M1, 1, 0, "Found "),
        delta(M1, 1, 1, "it."),
        ev("turn.completed", resumed=False),
    ]
    assert chunks_of(T, items) == [
        {"type": "start", "messageId": M0},
        {"type": "start-step"},
        {"type": "text-start", "id": f"{M0}/a1"},
        {"type": "text-delta", "id": f"{M0}/a1", "delta": "Let me look."},
        {"type": "text-end", "id": f"{M0}/a1"},
        {"type": "tool-input-available", "toolCallId": "toolu_1", "toolName": "lookup", "input": {"key": "a"}},
        {"type": "tool-output-available", "toolCallId": "toolu_1", "output": "value-of-a"},
        {"type": "finish-step"},
        {"type": "start-step"},
        {"type": "text-start", "id": f"{M1}/a1"},
        {"type": "text-delta", "id": f"{M1}/a1", "delta": "Found "},
        {"type": "text-delta", "id": f"{M1}/a1", "delta": "it."},
        {"type": "text-end", "id": f"{M1}/a1"},
        {"type": "finish-step"},
        {"type": "finish", "finishReason": "stop"},
    ]


def test_a_discarded_attempt_is_reset_before_the_replay_streams():
    items = [
        delta(M0, 1, 0, "SENTINEL wor"),
        ev("turn.retry", message_id=M0, attempt=1, discarded=True, **{"class": "infra_transient"}),
        delta(M0, 2, 0, "Final."),
        ev("turn.completed"),
    ]
    out = chunks_of(T, items)
    assert kinds(out) == ["start", "start-step", "text-start", "text-delta", "reset-step", "text-start",
                          "text-delta", "text-end", "finish-step", "finish"]  # fmt: skip
    assert out[5]["id"] == f"{M0}/a2"


def test_a_late_delta_of_a_discarded_attempt_is_never_shown():
    items = [delta(M0, 1, 0, "cut"), ev("turn.retry", message_id=M0, attempt=1, discarded=True), delta(M0, 1, 1, "x")]
    assert kinds(chunks_of(T, items)) == ["start", "start-step", "text-start", "text-delta", "reset-step"]


def test_a_retry_before_any_output_resets_nothing():
    items = [ev("turn.retry", message_id=M0, attempt=1, discarded=True), delta(M0, 2, 0, "ok"), ev("turn.completed")]
    assert "reset-step" not in kinds(chunks_of(T, items))


def test_a_drained_attempt_then_a_new_generation_reuses_the_emptied_step():
    g1 = f"{T}:g1:m0"
    items = [
        delta(M0, 1, 0, "half"),
        ev("turn.retry", message_id=M0, attempt=1, discarded=True, reason="platform interrupt"),
        ev("turn.started", generation=1),
        delta(g1, 1, 0, "whole"),
        ev("turn.completed"),
    ]
    assert kinds(chunks_of(T, items)).count("start-step") == 1


def test_a_stop_mid_answer_voids_the_cut_attempt_and_says_the_notice():
    items = [delta(M0, 1, 0, "never"), ev("turn.stopped", message_id=M0, attempt=1)]
    assert chunks_of(T, items)[1:] == [
        {"type": "start-step"},
        {"type": "text-start", "id": f"{M0}/a1"},
        {"type": "text-delta", "id": f"{M0}/a1", "delta": "never"},
        {"type": "reset-step"},
        {"type": "text-start", "id": "notice"},
        {"type": "text-delta", "id": "notice", "delta": STOPPED_NOTICE},
        {"type": "text-end", "id": "notice"},
        {"type": "finish-step"},
        {"type": "finish", "finishReason": "interrupted"},
    ]


def test_a_stop_while_a_tool_runs_answers_it_with_the_placeholder():
    items = [ev("tool.called", tool_use_id="toolu_1", name="blocking_write", input={}), ev("turn.stopped")]
    out = chunks_of(T, items)
    assert {"type": "tool-output-available", "toolCallId": "toolu_1", "output": INTERRUPTED_RESULT} in out
    assert "reset-step" not in kinds(out)
    assert out[-1] == {"type": "finish", "finishReason": "interrupted"}


def test_an_interrupt_by_a_new_message_says_so():
    out = chunks_of(T, [ev("turn.started"), ev("turn.stopped", reason="interrupt")])
    assert {"type": "text-delta", "id": "notice", "delta": "Interrupted by a new message."} in out


def test_a_failure_is_an_error_naming_its_class_then_finish():
    failed = ev("turn.failed", message="provider_bad_request: BadRequestError: 400", retryable=False,
                **{"class": "provider_bad_request"})  # fmt: skip
    out = chunks_of(T, [ev("turn.started"), failed])
    assert out[-2:] == [
        {"type": "error", "errorText": "Failed (provider_bad_request): provider_bad_request: BadRequestError: 400"},
        {"type": "finish", "finishReason": "error"},
    ]


def test_an_approval_asked_then_parked_then_continued():
    call = ev("tool.called", tool_use_id="toolu_d", name="deploy", input={"env": "prod"})
    ask = ev("tool.approval_requested", tool_use_id="toolu_d", name="deploy", input={"env": "prod"})
    state = TurnChunks(T)
    state, _ = advance(state, call)
    state, b = advance(state, ask)
    parked_state, c = parked(state)
    assert b == [{"type": "tool-approval-request", "approvalId": "toolu_d", "toolCallId": "toolu_d"}]
    assert c == [{"type": "finish-step"}, {"type": "finish", "finishReason": "tool-calls"}]
    assert parked_state.done
    # The continuation folds the same items silently, then goes on from the decision:
    state, d = advance(state, ev("tool.approved", tool_use_id="toolu_d", by="someone"))
    state, e = advance(state, ev("tool.result", tool_use_id="toolu_d", is_error=False, content="deployed"))
    state, f = advance(state, delta(M1, 1, 0, "Deployed."))
    assert d == [{"type": "tool-approval-response", "approvalId": "toolu_d", "approved": True}]
    assert e == [{"type": "tool-output-available", "toolCallId": "toolu_d", "output": "deployed"}]
    assert kinds(f) == ["finish-step", "start-step", "text-start", "text-delta"]


def test_a_denied_call_is_an_error_result_with_the_words():
    items = [
        ev("tool.called", tool_use_id="toolu_d", name="deploy", input={}),
        ev("tool.approval_requested", tool_use_id="toolu_d"),
        ev("tool.denied", tool_use_id="toolu_d", reason="not today"),
        ev("tool.result", tool_use_id="toolu_d", is_error=True, status="denied", content="Denied by user: not today"),
    ]
    out = chunks_of(T, items)
    assert {"type": "tool-approval-response", "approvalId": "toolu_d", "approved": False, "reason": "not today"} in out
    assert out[-1] == {"type": "tool-output-error", "toolCallId": "toolu_d", "errorText": "Denied by user: not today"}


def test_items_the_client_cannot_place_are_left_out():
    """Another turn's items; a result or approval of a call the client was never told of (it would throw)."""
    items = [
        {**delta(M0, 1, 0, "other"), "turn_id": "t-2"},
        ev("tool.result", tool_use_id="toolu_x", is_error=False, content="?"),
        ev("tool.approval_requested", tool_use_id="toolu_x"),
        ev("tool.approved", tool_use_id="toolu_x"),
    ]
    assert chunks_of(T, items) == [{"type": "start", "messageId": M0}]


def test_nothing_after_the_end():
    state, _ = advance(TurnChunks(T), ev("turn.completed"))
    assert advance(state, delta(M0, 1, 0, "late")) == (state, [])


def test_the_message_id_is_the_first_steps():
    """`first_message_id` follows the loop's naming of a fresh turn's first step."""
    fresh = SimpleNamespace(turn_id=T, message_prefix=None)  # what flow.py gives generation 0
    assert first_message_id(T) == step_message_id(fresh, LoopState()) == M0  # type: ignore[arg-type]


# -- the request ---------------------------------------------------------------------------------------


def user(*texts: str) -> dict[str, Any]:
    return {"id": "u1", "role": "user", "parts": [{"type": "text", "text": t} for t in texts]}


def test_a_submitted_user_message_sends_its_text_parts():
    history = [user("old"), {"id": "a", "role": "assistant", "parts": []}]
    assert asked("submit-message", [*history, user("hello", "world")]) == Send("hello\n\nworld")


def test_regenerate_is_a_retry():
    assert asked("regenerate-message", []) == Regenerate()


def test_approval_responses_are_decisions():
    answered = {
        "id": M0,
        "role": "assistant",
        "parts": [
            {"type": "step-start"},
            {"type": "tool-deploy", "toolCallId": "toolu_a", "state": "approval-responded",
             "approval": {"id": "toolu_a", "approved": True}},
            {"type": "dynamic-tool", "toolName": "x", "toolCallId": "toolu_b", "state": "approval-responded",
             "approval": {"id": "toolu_b", "approved": False, "reason": "no"}},
            {"type": "tool-lookup", "toolCallId": "toolu_c", "state": "output-available"},
        ],
    }  # fmt: skip
    assert asked("submit-message", [user("hi"), answered]) == Decide(
        (Decision("toolu_a", True), Decision("toolu_b", False, "no"))
    )


@pytest.mark.parametrize(
    "trigger,messages,why",
    [
        ("submit-message", [], "end with the message"),
        ("submit-message", [user("  ")], "no text part"),
        ("submit-message", [{"role": "assistant", "parts": []}], "no tool approval response"),
        ("submit-message", [{"role": "system", "parts": []}], "role"),
        ("resume-stream", [user("x")], "trigger"),
    ],
)
def test_a_request_that_asks_for_nothing_says_why(trigger, messages, why):
    with pytest.raises(ValueError, match=why):
        asked(trigger, messages)


def test_a_resume_mid_step_knows_the_open_steps_chunks():
    """What a Last-Event-ID resume sends again after `reset-step`: the open step's chunks, from its start."""
    items = [delta(M0, 1, 0, "a"), ev("tool.called", tool_use_id="x", name="n", input={}),
             ev("tool.result", tool_use_id="x", is_error=False, content="r"), delta(M1, 1, 0, "b"),
             delta(M1, 1, 1, "c")]  # fmt: skip
    step: list[dict[str, Any]] = []
    state = TurnChunks(T)
    for item in items:
        state, chunks = advance(state, item)
        step = step_so_far(step, chunks)
    assert step == [
        {"type": "text-start", "id": f"{M1}/a1"},
        {"type": "text-delta", "id": f"{M1}/a1", "delta": "b"},
        {"type": "text-delta", "id": f"{M1}/a1", "delta": "c"},
    ]
    assert step_so_far(step, [{"type": "reset-step"}]) == []


def reasoning(message_id: str, attempt: int, index: int, text: str) -> dict[str, Any]:
    return {**delta(message_id, attempt, index, text), "type": "reasoning.delta"}


def test_reasoning_streams_as_its_own_part_before_the_text_and_a_discard_resets_it_with_the_text():
    """`reasoning.delta` opens a reasoning part (one per attempt, as text's); the text that follows closes it; a
    discarded attempt's reasoning goes with its step (`reset-step`, no `reasoning-end` for a part the client
    forgot), and the replay's reasoning opens a part of its own."""
    items = [
        reasoning(M0, 1, 0, "Doomed "),
        reasoning(M0, 1, 1, "thought."),
        ev("turn.retry", message_id=M0, attempt=1, discarded=True, **{"class": "infra_transient"}),
        reasoning(M0, 2, 0, "Kept thought."),
        delta(M0, 2, 0, "Answer."),
        ev("turn.completed", resumed=False),
    ]
    assert chunks_of(T, items) == [
        {"type": "start", "messageId": M0},
        {"type": "start-step"},
        {"type": "reasoning-start", "id": f"{M0}/reasoning"},
        {"type": "reasoning-delta", "id": f"{M0}/reasoning", "delta": "Doomed "},
        {"type": "reasoning-delta", "id": f"{M0}/reasoning", "delta": "thought."},
        {"type": "reset-step"},
        {"type": "reasoning-start", "id": f"{M0}/reasoning"},
        {"type": "reasoning-delta", "id": f"{M0}/reasoning", "delta": "Kept thought."},
        {"type": "reasoning-end", "id": f"{M0}/reasoning"},
        {"type": "text-start", "id": f"{M0}/a2"},
        {"type": "text-delta", "id": f"{M0}/a2", "delta": "Answer."},
        {"type": "text-end", "id": f"{M0}/a2"},
        {"type": "finish-step"},
        {"type": "finish", "finishReason": "stop"},
    ]


def test_a_call_after_reasoning_closes_the_reasoning_part():
    items = [reasoning(M0, 1, 0, "Look it up."), ev("tool.called", message_id=M0, tool_use_id="c", name="n", input={})]
    assert kinds(chunks_of(T, items)) == [
        "start", "start-step", "reasoning-start", "reasoning-delta", "reasoning-end", "tool-input-available",
    ]  # fmt: skip
