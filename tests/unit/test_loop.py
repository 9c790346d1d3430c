"""The turn loop over the in-memory Edge with the scripted provider: rounds, dedup, journal, ledger, replay, stop."""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from dataclasses import replace

import pytest

from agent.errors import Cancelled
from agent.history.context import result_cap_chars
from agent.loop.cancel import CancelToken
from agent.loop.edge import LoopConfig, LoopFailure
from agent.loop.failures import FailureClass
from agent.loop.memory_edge import MemoryEdge
from agent.loop.policy import Backoff, Driver
from agent.loop.run import run_loop
from agent.loop.state import LoopState
from agent.messages import INTERRUPTED_RESULT, Message, ToolResultBlock, ToolUseBlock, user_text
from agent.provider.replay import RequestFailed
from agent.provider.scripted import ScriptedProvider, ScriptedReply, reply_fault, reply_text, reply_tool
from agent.tools import RESULT_CAP_CHARS, by_name, tool
from agent.tools.threads import tool_threads

CONFIG = LoopConfig(
    owner_id="chat-1",
    turn_id="turn-1",
    driver=Driver.CHAT_TURN,
    model="claude-test",
    max_rounds=5,
    retry_budget=3,
    backoff=Backoff(scale=0.0),
    stop_grace=0.05,
)
HISTORY = [user_text("what is a?", turn_id="turn-1")]


class Kit:
    """Counting tools, one journal and helpers to run the loop against a script."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.keys: list[str | None] = []
        self.edge = MemoryEdge()

        @tool(effect="read")
        def lookup(key: str) -> str:
            """Look a key up."""
            self.calls["lookup"] += 1
            return f"value-of-{key}"

        @tool(effect="write")
        def note(text: str) -> str:
            """Write a note."""
            self.calls["note"] += 1
            return f"noted {text}"

        @tool(effect="write", idempotent=True)
        def charge(amount: int, idempotency_key: str | None = None) -> str:
            """Charge once per key."""
            self.calls["charge"] += 1
            self.keys.append(idempotency_key)
            return f"charged {amount}"

        self.tools = by_name([lookup, note, charge])

    def run(self, script: list[ScriptedReply], *, config: LoopConfig = CONFIG, cancel: CancelToken | None = None):
        provider = ScriptedProvider(script)
        state = LoopState()
        try:
            run_loop(
                list(HISTORY),
                state,
                provider=provider,
                tools=self.tools,
                edge=self.edge,
                cancel=cancel or CancelToken(),
                config=config,
            )
        finally:
            self.state, self.provider = state, provider
        return state, provider


@pytest.fixture
def kit() -> Kit:
    return Kit()


def test_a_tool_round_then_a_reply(kit):
    """The model calls a tool, gets its result, and answers; the turn's messages are call, result, reply."""
    state, provider = kit.run([reply_tool("lookup", {"key": "a"}, call_id="c1"), reply_text("a is value-of-a")])
    assert state.reply == "a is value-of-a"
    assert kit.calls == {"lookup": 1}
    assert [m.role for m in state.messages] == ["assistant", "user", "assistant"]
    assert state.rounds_used == 1 and state.executed == ["lookup"]
    assert len(provider.requests) == 2
    assert kit.edge.types() == ["tool.called", "tool.result"]


def test_structured_tool_result_blocks_are_fed_back(kit):
    """The second request carries the tool_use and its tool_result as blocks with matching ids, not prose."""
    _, provider = kit.run([reply_tool("lookup", {"key": "a"}, call_id="c1"), reply_text("done")])
    messages = provider.requests[1].messages
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[1]["content"] == [{"type": "tool_use", "id": "c1", "name": "lookup", "input": {"key": "a"}}]
    # The last block carries the rolling cache breakpoint (agent/history/caching.py); the block is otherwise the result.
    assert messages[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "c1", "content": "value-of-a", "cache_control": {"type": "ephemeral"}}
    ]
    assert [t["name"] for t in provider.requests[0].tools] == ["lookup", "note", "charge"]


def test_identical_read_is_deduplicated(kit):
    """A second identical read in a later round is answered from the first result; the tool runs once."""
    state, _ = kit.run(
        [
            reply_tool("lookup", {"key": "a"}, call_id="c1"),
            reply_tool("lookup", {"key": "a"}, call_id="c2"),
            reply_text("done"),
        ]
    )
    assert kit.calls == {"lookup": 1}
    assert [e.status for e in state.tool_log] == ["ok", "deduplicated"]
    assert state.messages[3].tool_results[0].content == "value-of-a"


@pytest.mark.parametrize(("size", "cut_chars"), [(8_192, 5_219), (20_000, 17_028)])
def test_a_capped_read_served_again_says_the_same_cut(kit, size, cut_chars):
    """Issue 31: under a small budget (`BATON_CONTEXT_TOKENS=6000`, a 3,000-character result cap) an 8 KB read
    reaches the model within the cap, with the exact count of what was cut, and the same read served again
    from the dedup map is the same text: it is not capped a second time into a marker of a few characters.
    A 20 KB read is capped by `execute` (16,000) before it is recorded: the count is still of the original."""
    text = "".join(f"{i:x}." for i in range(size))[:size]

    @tool(effect="read")
    def read_file(path: str) -> str:
        """Read a file."""
        kit.calls["read_file"] += 1
        return text

    kit.tools = {**kit.tools, "read_file": read_file}
    config = replace(CONFIG, context_tokens=6_000)
    cap = result_cap_chars(config.context_tokens, RESULT_CAP_CHARS)
    assert cap == 3_000
    state, provider = kit.run(
        [
            reply_tool("read_file", {"path": "big.txt"}, call_id="c1"),
            reply_tool("read_file", {"path": "big.txt"}, call_id="c2"),
            reply_text("done"),
        ],
        config=config,
    )
    assert kit.calls == {"read_file": 1}
    assert [e.status for e in state.tool_log] == ["ok", "deduplicated"]
    first, second = (m.tool_results[0].content for m in (state.messages[1], state.messages[3]))
    assert first == second
    assert len(first) <= cap
    parts = re.fullmatch(r"(.*)\n\[… (\d+) characters cut …\]\n(.*)", first, re.DOTALL)
    assert parts is not None
    head, cut, tail = parts.group(1), int(parts.group(2)), parts.group(3)
    assert text.startswith(head) and text.endswith(tail)
    assert cut == len(text) - len(head) - len(tail) == cut_chars
    sent = [b for m in provider.requests[2].messages for b in m["content"] if b.get("type") == "tool_result"]
    assert [b["content"] for b in sent] == [first, first]


def test_read_runs_again_after_a_write(kit):
    """A write between two identical reads invalidates the cached result, so the read runs again."""
    kit.run(
        [
            reply_tool("lookup", {"key": "a"}, call_id="c1"),
            reply_tool("note", {"text": "x"}, call_id="c2"),
            reply_tool("lookup", {"key": "a"}, call_id="c3"),
            reply_text("done"),
        ]
    )
    assert kit.calls == {"lookup": 2, "note": 1}


def test_replaying_the_journal_redoes_nothing(kit):
    """A redelivered turn on the same journal re-executes no tool and makes no provider request."""
    script = [
        reply_tool("lookup", {"key": "a"}, call_id="c1"),
        reply_tool("note", {"text": "x"}, call_id="c2"),
        reply_text("done"),
    ]
    first, _ = kit.run(script)
    writes = kit.edge.writes
    second, provider = kit.run(script)
    assert provider.requests == []
    assert kit.calls == {"lookup": 1, "note": 1}
    assert second.messages == first.messages and second.reply == "done"
    assert (second.rounds_used, second.mutations, second.executed) == (
        first.rounds_used,
        first.mutations,
        first.executed,
    )
    assert second.usage == first.usage
    assert kit.edge.writes == writes


def test_committing_write_is_not_rerun(kit):
    """A write whose ledger entry says `committing` may have happened: it is not run again, it gets the placeholder."""
    kit.edge.steps["tool:c1"] = {"kind": "tool", "status": "committing"}
    state, _ = kit.run([reply_tool("note", {"text": "x"}, call_id="c1"), reply_text("done")])
    assert kit.calls == {}
    (block,) = state.messages[1].tool_results
    assert (block.content, block.is_error, block.synthesized) == (INTERRUPTED_RESULT, False, True)
    assert state.tool_log[0].status == "interrupted"
    assert kit.edge.steps["tool:c1"]["status"] == "done"


def test_committing_idempotent_write_is_redriven_with_the_same_key(kit):
    """An idempotent write left `committing` is safely re-driven, under the key it had the first time."""
    kit.edge.steps["tool:c1"] = {"kind": "tool", "status": "committing"}
    state, _ = kit.run([reply_tool("charge", {"amount": 5}, call_id="c1"), reply_text("done")])
    assert kit.calls == {"charge": 1}
    assert kit.keys == ["chat-1:c1"]
    assert state.messages[1].tool_results[0].content == "charged 5"


@pytest.mark.parametrize(
    ("driver", "expected"),
    [(Driver.CHAT_TURN, FailureClass.ROUND_CEILING), (Driver.CODING_RUN, FailureClass.BUDGET_EXCEEDED)],
)
def test_round_ceiling(kit, driver, expected):
    """Past `max_rounds` the loop stops with the driver's class; the unrun calls are answered, not left dangling."""
    config = replace(CONFIG, max_rounds=1, driver=driver)
    script = [reply_tool("lookup", {"key": "a"}, call_id="c1"), reply_tool("lookup", {"key": "b"}, call_id="c2")]
    with pytest.raises(LoopFailure) as info:
        kit.run(script, config=config)
    assert info.value.failure_class is expected
    assert kit.calls == {"lookup": 1}
    last = kit.state.messages[-1]
    assert last.role == "user" and last.tool_results[0].tool_use_id == "c2" and last.tool_results[0].is_error


def test_replay_inside_the_budget_counts_discarded_usage(kit):
    """A stream dropped after partial output is discarded and re-sent; its tokens and attempt are still counted."""
    state, provider = kit.run([reply_fault("drop", partial="Hel"), reply_text("Hello")])
    assert state.reply == "Hello"
    assert len(provider.requests) == 2
    assert state.usage.model_dump() == {
        "input_tokens": 20,
        "output_tokens": 6,  # 1 from the dropped stream's start, 5 from the answer
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "attempts": 2,
        "discarded_attempts": 1,
    }
    (retry,) = [data for kind, data in kit.edge.events if kind == "turn.retry"]
    assert retry["discarded"] is True and retry["class"] == "infra_transient" and retry["had_output"] is True
    assert [m.text for m in state.messages] == ["Hello"]


def test_budget_exhausted_raises_request_failed(kit):
    """When every attempt of the budget breaks, the request fails with the class and attempts == budget."""
    with pytest.raises(RequestFailed) as info:
        kit.run([reply_fault("stall")] * 5)
    assert info.value.failure_class == FailureClass.PROVIDER_STALL
    assert info.value.retryable is True
    assert info.value.attempts == CONFIG.retry_budget
    assert len(kit.provider.requests) == CONFIG.retry_budget


def test_auth_failure_is_not_retried(kit):
    """A non-retryable class ends the request after one attempt."""
    with pytest.raises(RequestFailed) as info:
        kit.run([reply_fault("auth"), reply_text("never")])
    assert info.value.failure_class == FailureClass.PROVIDER_AUTH
    assert info.value.retryable is False
    assert info.value.attempts == 1
    assert len(kit.provider.requests) == 1


def test_cancel_while_a_tool_blocks_closes_the_round(kit):
    """A stop during a blocked tool ends the turn with `Cancelled`; that call and the later ones get placeholders."""
    started, release = threading.Event(), threading.Event()

    @tool(effect="write")
    def block(text: str) -> str:
        """Wait to be released."""
        started.set()
        release.wait(10)
        return "too late"

    kit.tools = {**kit.tools, "block": block}
    cancel = CancelToken()
    calls = (
        ToolUseBlock(id="c1", name="block", input={"text": "x"}),
        ToolUseBlock(id="c2", name="lookup", input={"key": "a"}),
    )
    stopper = threading.Thread(target=lambda: started.wait(10) and cancel.cancel("stop"))
    stopper.start()
    try:
        with pytest.raises(Cancelled) as info:
            kit.run([ScriptedReply(content=calls), reply_text("never")], cancel=cancel)
    finally:
        release.set()
        stopper.join(10)
    assert info.value.reason == "stop"
    assert kit.calls == {}
    last = kit.state.messages[-1]
    assert last.role == "user"
    assert last.content == tuple(
        ToolResultBlock(tool_use_id=i, content=INTERRUPTED_RESULT, synthesized=True) for i in ("c1", "c2")
    )
    assert isinstance(kit.state.messages[-2], Message) and kit.state.messages[-2].role == "assistant"
    assert kit.edge.steps["tool:c1"]["status"] == "committing"  # the ledger still knows the effect is uncertain
    assert len(kit.provider.requests) == 1


def test_a_stop_flagged_while_the_tools_ran_is_read_before_the_next_model_step(kit):
    """The watcher polls every 0.5 s; a write that finishes and a fast model step fit between two polls. So after a
    round of tools the loop asks the flags itself (`CancelToken.look`): a stop set meanwhile ends the turn there,
    the write's result kept, with no second model call."""
    cancel = CancelToken()
    looks: list[int] = []

    def look() -> None:
        looks.append(kit.calls["note"])
        cancel.cancel("stop")  # what the watcher's read does when the stop key names the unit

    cancel.look_with(look)
    with pytest.raises(Cancelled) as info:
        kit.run([reply_tool("note", {"text": "x"}, call_id="c1"), reply_text("never")], cancel=cancel)
    assert info.value.reason == "stop"
    assert looks == [1]  # once, after the write ran
    assert kit.calls == {"note": 1} and len(kit.provider.requests) == 1
    assert kit.state.messages[-1].content == (ToolResultBlock(tool_use_id="c1", content="noted x"),)


def test_tool_calls_one_after_another_reuse_one_thread_off_the_loop():
    """Each call runs off the loop's thread (a stop can abandon it), on a thread kept for the next call rather than
    started per call: starting one cost a tenth of a millisecond per tool call."""
    ran_on: list[threading.Thread] = []

    @tool(effect="read")
    def where(key: str) -> str:
        """Say where it ran."""
        ran_on.append(threading.current_thread())
        return key

    threads = tool_threads()
    for turn in range(3):  # a fresh journal each time, so every call runs
        kit = Kit()
        kit.tools = by_name([where])
        kit.run([reply_tool("where", {"key": f"k{turn}"}, call_id=f"c{turn}"), reply_text("done")])
        # The round ends when the call's result is in; its thread parks itself a moment later (a loaded machine
        # showed the gap): the next call takes a parked thread, which is what is measured here.
        deadline = time.monotonic() + 5
        while not threads._idle and time.monotonic() < deadline:
            time.sleep(0.001)
    assert len(ran_on) == 3 and threading.current_thread() not in ran_on
    assert len(set(ran_on)) == 1
