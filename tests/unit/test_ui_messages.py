"""A chat's history as `UIMessage`s (web/ui_messages.py): settled turns read back from the transcript through
the stream's own fold (web/ui_chunks.py), assembled as the AI SDK assembles a stream. (The real SDK reads
these through a live server in tests/integration/test_usechat_history.py.)"""

from __future__ import annotations

from agent.messages import Message, NoticeBlock, TextBlock, ToolResultBlock, ToolUseBlock, notice, user_text
from web.ui_chunks import chunks_of, first_message_id
from web.ui_messages import Turn, assemble, history, turns_of

T1, T2 = "t-1", "t-2"


def assistant(turn_id: str, step: str, *blocks: TextBlock | ToolUseBlock) -> Message:
    return Message(role="assistant", content=blocks, turn_id=turn_id, message_id=f"{turn_id}:{step}")


def results(turn_id: str, *blocks: ToolResultBlock) -> Message:
    return Message(role="user", content=blocks, turn_id=turn_id)


TOOL_ROUND = [
    user_text("look k1 up", T1),
    assistant(T1, "m0", TextBlock(text="Let me look."), ToolUseBlock(id="c1", name="lookup", input={"key": "k1"})),
    results(T1, ToolResultBlock(tool_use_id="c1", content="k1=v")),
    assistant(T1, "m1", TextBlock(text="It is v.")),
]


def test_a_settled_tool_round_is_one_assistant_message_under_its_streams_id():
    got = history(turns_of(TOOL_ROUND, []))
    assert [m["role"] for m in got] == ["user", "assistant"]
    assert got[0] == {"id": f"{T1}:user", "role": "user", "parts": [{"type": "text", "text": "look k1 up"}]}
    assert got[1]["id"] == first_message_id(T1)
    assert got[1]["parts"] == [
        {"type": "step-start"},
        {"type": "text", "text": "Let me look.", "state": "done"},
        {"type": "tool-lookup", "toolCallId": "c1", "state": "output-available", "input": {"key": "k1"},
         "output": "k1=v"},
        {"type": "step-start"},
        {"type": "text", "text": "It is v.", "state": "done"},
    ]  # fmt: skip


def test_an_error_result_and_notices_as_text_a_notice_without_turn_id_in_the_turn_before_it():
    transcript = [
        user_text("deploy", T1),
        assistant(T1, "m0", ToolUseBlock(id="c1", name="deploy", input={})),
        results(T1, ToolResultBlock(tool_use_id="c1", content="Denied by user.", is_error=True)),
        notice("error", "Failed (provider_bad_request): no"),  # as an old writer left it: no turn id
        user_text("again", T2),
    ]
    first, second = turns_of(transcript, [])
    assert (first.text, second.text) == ("deploy", "again")
    parts = history([first])[1]["parts"]
    assert parts[1] == {"type": "tool-deploy", "toolCallId": "c1", "state": "output-error", "input": {},
                        "errorText": "Denied by user."}  # fmt: skip
    assert parts[2] == {"type": "text", "text": "Failed (provider_bad_request): no", "state": "done"}
    assert [m["role"] for m in history([first, second])] == ["user", "assistant", "user"]  # no empty message


def test_an_unfinished_turn_keeps_its_words_and_leaves_its_messages_to_its_stream():
    transcript = [*TOOL_ROUND[:2], user_text("next", T2)]
    first, second = turns_of(transcript, [T1])
    assert first.items == [] and first.text == "look k1 up"  # the route adds its stream's items
    assert second.items == [] and second.text == "next"


def test_the_stream_and_the_history_assemble_one_message_from_the_same_chunks():
    """A stream with a discarded attempt: `reset-step` drops its text, as the SDK does."""
    items = [
        {"type": "text.delta", "turn_id": T1, "message_id": f"{T1}:m0", "attempt": 1, "text": "SENTINEL"},
        {"type": "turn.retry", "turn_id": T1, "discarded": True, "message_id": f"{T1}:m0", "attempt": 1},
        {"type": "text.delta", "turn_id": T1, "message_id": f"{T1}:m0", "attempt": 2, "text": "Whole."},
        {"type": "turn.completed", "turn_id": T1},
    ]
    message = assemble(chunks_of(T1, items))
    assert message["parts"] == [{"type": "step-start"}, {"type": "text", "text": "Whole.", "state": "done"}]
    assert message == history([Turn(T1, items=items, running=True)])[0]


def test_a_waiting_call_is_approval_requested_with_the_calls_id():
    items = [
        {"type": "tool.called", "turn_id": T1, "message_id": f"{T1}:m0", "tool_use_id": "c1", "name": "deploy",
         "input": {"env": "prod"}},
        {"type": "tool.approval_requested", "turn_id": T1, "tool_use_id": "c1"},
    ]  # fmt: skip
    (message,) = history([Turn(T1, items=items, running=True, parked=True)])
    assert message["parts"][1]["state"] == "approval-requested"
    assert message["parts"][1]["approval"] == {"id": "c1"}


def test_notice_blocks_of_a_stop_read_back_as_the_streams_notice():
    transcript = [
        user_text("go", T1),
        Message(role="notice", content=(NoticeBlock(kind="stopped", text="Stopped by user."),), turn_id=T1),
    ]
    parts = history(turns_of(transcript, []))[1]["parts"]
    assert parts == [{"type": "text", "text": "Stopped by user.", "state": "done"}]


def test_thinking_reads_back_as_the_reasoning_part_its_stream_assembled():
    """A settled turn's thinking blocks (with their words) are reasoning parts in the order produced; a redacted block
    or one whose words the API omitted has nothing to show (its stream showed nothing either). The same message as
    the live stream of that turn assembles."""
    from agent.messages import RedactedThinkingBlock, ThinkingBlock

    transcript = [
        user_text("think", T1),
        assistant(T1, "m0", ThinkingBlock(thinking="Look k1 up.", signature="s"), RedactedThinkingBlock(data="x"),
                  ToolUseBlock(id="c1", name="lookup", input={"key": "k1"})),
        results(T1, ToolResultBlock(tool_use_id="c1", content="k1=v")),
        assistant(T1, "m1", ThinkingBlock(thinking="", signature="omitted"), TextBlock(text="It is v.")),
    ]  # fmt: skip
    (_, message) = history(turns_of(transcript, []))
    rid = f"{T1}:m0/reasoning"
    assert message["parts"][:2] == [{"type": "step-start"},
                                    {"type": "reasoning", "id": rid, "text": "Look k1 up.", "state": "done"}]
    assert [p["type"] for p in message["parts"]] == ["step-start", "reasoning", "tool-lookup", "step-start", "text"]
    live = [
        {"type": "reasoning.delta", "turn_id": T1, "message_id": f"{T1}:m0", "attempt": 1, "text": "Look k1 up."},
        {"type": "tool.called", "turn_id": T1, "message_id": f"{T1}:m0", "tool_use_id": "c1", "name": "lookup",
         "input": {"key": "k1"}},
        {"type": "tool.result", "turn_id": T1, "tool_use_id": "c1", "is_error": False, "content": "k1=v"},
        {"type": "text.delta", "turn_id": T1, "message_id": f"{T1}:m1", "attempt": 1, "text": "It is v."},
        {"type": "turn.completed", "turn_id": T1},
    ]  # fmt: skip
    assert assemble(chunks_of(T1, live)) == message
