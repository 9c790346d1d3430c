"""The demo's OpenAI-compatible server: what it streams is what Baton's OpenAI edge reads back as the script's answer.

The chunks are folded by the edge's own reducer (agent/provider/openai_reducer.py), and the requests it reads are
built by the edge's own body builder (agent/provider/openai_request.py), so the demo and the edge cannot drift
apart without these failing.
"""

from __future__ import annotations

from typing import Any

from agent.messages import TextBlock, ToolUseBlock
from agent.provider.base import ProviderRequest, TokenUsage
from agent.provider.openai_reducer import ChatSnapshot, accumulate
from agent.provider.openai_request import chat_body
from agent.provider.scripted import MemoryCounter, ScriptedReply, directive_script, reply_fault
from tasks.demo import conversation as said
from tasks.demo.openai_server import neutral_messages, partial_chunks, reply_chunks


def _fold(chunks: list[Any]) -> tuple[ChatSnapshot, list[str]]:
    snapshot, texts = ChatSnapshot(), []
    for chunk in chunks:
        if chunk == "[DONE]":
            continue
        added = accumulate(chunk, snapshot)
        if added:
            texts.append(added)
    return snapshot, texts


def test_a_text_answer_streams_as_several_deltas_and_reads_back_whole_with_its_usage():
    reply = ScriptedReply(content=(TextBlock(text="Yes: Oslo, 18°C, light rain."),), input_tokens=12, output_tokens=7)
    chunks = reply_chunks(reply, "chatcmpl-1", "scripted-agent", 0)
    assert chunks[-1] == "[DONE]" and chunks[-2]["choices"] == []  # the usage chunk, then [DONE]
    snapshot, texts = _fold(chunks)
    assert len(texts) > 1  # live text arrives in pieces, as a model's does
    answer = snapshot.to_answer()
    assert answer.content == reply.content and answer.stop_reason == "end_turn"
    assert answer.usage == TokenUsage(input_tokens=12, output_tokens=7)


def test_tool_calls_stream_with_split_arguments_and_read_back_as_the_scripts_calls():
    calls = (
        ToolUseBlock(id="toolu_a_0", name="save_note", input={"note": "plan: step0.txt, step1.txt"}),
        ToolUseBlock(id="toolu_a_1", name="write_file", input={"path": "step0.txt", "content": "step 0\n"}),
    )
    chunks = reply_chunks(ScriptedReply(content=calls), "chatcmpl-2", "scripted-agent", 0)
    deltas = [choice["delta"] for c in chunks if isinstance(c, dict) for choice in c["choices"]]
    pieces = [p for delta in deltas for p in delta.get("tool_calls", [])]
    assert sum(1 for p in pieces if p["index"] == 0 and "id" not in p) == 2  # the first call's arguments in two
    snapshot, _ = _fold(chunks)
    answer = snapshot.to_answer()
    assert answer.content == calls and answer.stop_reason == "tool_use"


def test_a_dropped_attempt_sends_its_partial_text_and_never_finishes():
    snapshot, texts = _fold(partial_chunks(reply_fault("drop", partial="Here is a partial answ"), "c", "m", 0))
    assert "".join(texts) == "Here is a partial answ"
    assert not snapshot.finished  # the edge discards it and replays


def test_the_script_reads_the_edges_request_as_it_reads_batons_own():
    """The body the OpenAI edge sends, read back, drives the script as the neutral request does: the same next
    step after the user's cued line, a tool round, and the answer built from the tool's result."""
    user = {"role": "user", "content": [{"type": "text", "text": said.WEATHER}]}
    call = {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_x_0", "name": "lookup_weather",
                                              "input": {"city": "Paris"}}]}
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_x_0",
                                           "content": "Paris: 18°C, light rain"}]}
    for messages in ([user], [user, call, result]):
        request = ProviderRequest(model="scripted-agent", messages=messages, system="be brief")
        wire = ProviderRequest(model="scripted-agent", messages=neutral_messages(chat_body(request)))
        assert wire.messages == messages
        direct = directive_script(MemoryCounter(), said.CUES)(request, 0)
        served = directive_script(MemoryCounter(), said.CUES)(wire, 0)
        assert served == direct
    assert served.content == (TextBlock(text="Here's what I found: Paris: 18°C, light rain."),)
