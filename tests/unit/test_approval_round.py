"""A tool round with calls that wait for approval, over the in-memory Edge: park, decide, resume, stop."""

from __future__ import annotations

from collections import Counter

import pytest

from agent.errors import AwaitingApproval, Cancelled, ToolDefinitionError
from agent.loop.cancel import CancelToken
from agent.loop.edge import LoopConfig
from agent.loop.memory_edge import MemoryEdge
from agent.loop.policy import Backoff, Driver
from agent.loop.run import run_loop
from agent.loop.state import LoopState
from agent.messages import INTERRUPTED_RESULT, ToolUseBlock, user_text
from agent.provider.scripted import ScriptedProvider, ScriptedReply, reply_text
from agent.tools import by_name, tool

CONFIG = LoopConfig(
    owner_id="chat-1",
    turn_id="turn-1",
    driver=Driver.CHAT_TURN,
    model="claude-test",
    max_rounds=5,
    retry_budget=3,
    backoff=Backoff(scale=0.0),
)
BOTH = ScriptedReply(
    content=(
        ToolUseBlock(id="toolu_read", name="lookup", input={"key": "a"}),
        ToolUseBlock(id="toolu_deploy", name="deploy", input={"env": "prod"}),
    )
)


class Kit:
    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.edge = MemoryEdge()

        @tool(effect="read")
        def lookup(key: str) -> str:
            """Look a key up."""
            self.calls["lookup"] += 1
            return f"value-of-{key}"

        @tool(effect="write", approval=True)
        def deploy(env: str) -> str:
            """Deploy to an environment."""
            self.calls["deploy"] += 1
            return f"deployed {env}"

        self.tools = by_name([lookup, deploy])

    def run(self, script: list[ScriptedReply], cancel: CancelToken | None = None) -> tuple[LoopState, ScriptedProvider]:
        provider = ScriptedProvider(script)
        state = LoopState()
        run_loop(
            [user_text("ship it", turn_id="turn-1")],
            state,
            provider=provider,
            tools=self.tools,
            edge=self.edge,
            cancel=cancel or CancelToken(),
            config=CONFIG,
        )
        return state, provider


def _park(kit: Kit) -> None:
    with pytest.raises(AwaitingApproval) as parked:
        kit.run([BOTH])
    assert parked.value.pending == ["toolu_deploy"]


def test_a_call_that_needs_approval_parks_the_round_after_the_others_ran():
    kit = Kit()
    _park(kit)
    assert kit.calls == Counter({"lookup": 1})
    assert kit.edge.types().count("tool.approval_requested") == 1
    # Replayed without a decision (a redelivery, a stray wake-up): nothing runs again, nothing is asked twice.
    with pytest.raises(AwaitingApproval):
        kit.run([])
    assert kit.calls == Counter({"lookup": 1}) and kit.edge.types().count("tool.approval_requested") == 1


def test_approved_runs_once_and_the_model_goes_on():
    kit = Kit()
    _park(kit)
    kit.edge.decisions["toolu_deploy"] = {"decision": "approved"}
    state, provider = kit.run([reply_text("Deployed.")])
    assert state.reply == "Deployed." and kit.calls == Counter({"lookup": 1, "deploy": 1})
    results = {b["tool_use_id"]: b for b in provider.requests[0].messages[-1]["content"]}
    assert results["toolu_deploy"]["content"] == "deployed prod" and "is_error" not in results["toolu_deploy"]
    assert results["toolu_read"]["content"] == "value-of-a"


@pytest.mark.parametrize(
    ("decision", "words"),
    [
        ({"decision": "denied", "reason": "not on a Friday"}, "Denied by user: not on a Friday"),
        ({"decision": "denied"}, "Denied by user."),
        ({"decision": "denied", "expired": True, "reason": "approval expired"}, "Denied: approval expired."),
    ],
)
def test_denied_never_runs_and_the_model_reads_the_denial(decision, words):
    kit = Kit()
    _park(kit)
    kit.edge.decisions["toolu_deploy"] = decision
    state, provider = kit.run([reply_text("Understood, not deploying.")])
    assert kit.calls["deploy"] == 0 and state.reply == "Understood, not deploying."
    # (the last block also carries the rolling prompt-cache mark, agent/history/caching.py; not what this test is about)
    results = {b["tool_use_id"]: {k: v for k, v in b.items() if k != "cache_control"}
               for b in provider.requests[0].messages[-1]["content"]}
    assert results["toolu_deploy"] == {"type": "tool_result", "tool_use_id": "toolu_deploy", "content": words,
                                       "is_error": True}


def test_a_stop_while_waiting_closes_the_round_with_what_ran_and_a_placeholder():
    """The journaled model step is replayed even though the stop is set; then the round is closed."""
    kit = Kit()
    _park(kit)
    cancel = CancelToken()
    cancel.cancel("stop")
    provider = ScriptedProvider([])
    state = LoopState()
    with pytest.raises(Cancelled):
        run_loop([user_text("ship it", turn_id="turn-1")], state, provider=provider, tools=kit.tools,
                 edge=kit.edge, cancel=cancel, config=CONFIG)
    assert provider.requests == [] and kit.calls == Counter({"lookup": 1})
    (results,) = [m for m in state.messages if m.role == "user"]
    by_id = {b.tool_use_id: b for b in results.tool_results}
    assert by_id["toolu_read"].content == "value-of-a"
    assert by_id["toolu_deploy"].content == INTERRUPTED_RESULT and by_id["toolu_deploy"].synthesized


def test_approval_is_for_write_tools():
    with pytest.raises(ToolDefinitionError):

        @tool(effect="read", approval=True)
        def peek(key: str) -> str:
            """Peek."""
            return key
