"""The turn loop as named steps over one state object: ask the model, run its tools, repeat.

Every step that costs money or has an effect goes through the `Edge` journal: a step already
recorded is replayed from its record, so a redelivered turn or run re-runs only the step that was
in flight. Write tools leave a `committing` entry before their effect (the ledger), so a crash in
the middle of one is known and never blindly repeated.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping

from agent.errors import Cancelled
from agent.history.repair import RequestHistory
from agent.loop.cancel import CancelToken
from agent.loop.edge import Edge, LoopConfig, LoopFailure
from agent.loop.failures import FailureClass
from agent.loop.live import LiveText, NoLiveText
from agent.loop.model_step import model_step, step_message_id
from agent.loop.policy import Driver
from agent.loop.spend import Spend
from agent.loop.state import LoopState
from agent.messages import Message, TextBlock, ToolResultBlock
from agent.messages.media import FileSource
from agent.provider.base import Provider
from agent.tools import Tool
from agent.tools.round import CancelledRound, run_round


def run_loop(
    history: list[Message],
    state: LoopState,
    *,
    provider: Provider,
    tools: Mapping[str, Tool],
    edge: Edge,
    cancel: CancelToken,
    config: LoopConfig,
    live: LiveText | None = None,
    files: FileSource | None = None,
    spend: Spend | None = None,
) -> LoopState:
    """Run rounds until the model answers without tool calls; the reply lands in `state.reply`. `files`: where the
    bytes of the history's file blocks are read; `spend`: the unit's budgets (None: none apply)."""
    tool_specs = [t.to_api() for t in tools.values()]
    servers = ServerOf(tools)
    unasked = {name: t.effect for name, t in tools.items() if not t.approval and not t.unavailable}
    live = live or NoLiveText()
    view = RequestHistory(config.model, files)  # the request's history, grown round by round instead of rebuilt
    while True:
        _stop_unless_replaying(cancel, edge, state)
        if config.deadline is not None and time.monotonic() > config.deadline:
            raise LoopFailure("the run used its wall-clock budget", FailureClass.BUDGET_EXCEEDED)
        answer = model_step(
            history, view, state, provider, tool_specs, edge, cancel, config, live, servers, spend, unasked
        )
        content = answer.content or (TextBlock(text="(no answer)"),)
        message_id = step_message_id(config, state)
        reply = Message(
            role="assistant", content=content, turn_id=config.turn_id, message_id=message_id, model=config.model
        )
        state.messages.append(reply)
        if not answer.tool_uses:
            state.reply = answer.text
            return state
        if state.rounds_used >= config.max_rounds:
            state.messages.append(
                Message(
                    role="user",
                    content=tuple(
                        ToolResultBlock(tool_use_id=b.id, content="Tool round limit reached; not run.", is_error=True)
                        for b in answer.tool_uses
                    ),
                    turn_id=config.turn_id,
                )
            )
            failure = FailureClass.ROUND_CEILING if config.driver is Driver.CHAT_TURN else FailureClass.BUDGET_EXCEEDED
            raise LoopFailure(f"used all {config.max_rounds} tool rounds", failure)
        try:
            results = run_round(answer.tool_uses, state, tools, edge, cancel, config)
        except CancelledRound as stopped:
            state.messages.append(Message(role="user", content=tuple(stopped.results), turn_id=config.turn_id))
            raise Cancelled(stopped.reason) from None
        state.messages.append(Message(role="user", content=tuple(results), turn_id=config.turn_id))
        state.rounds_used += 1
        if edge.recorded(f"model:{state.rounds_used}") is None:  # a journaled next step is replayed: no call
            edge.round_done()
        cancel.look()
        _stop_unless_replaying(cancel, edge, state)


class ServerOf(Mapping[str, str]):
    """Each MCP tool's server, looked up through `tools`: a stand-in for a tool its server does not offer here (it
    is down on this worker) names its server too, though it is not among the tools offered."""

    def __init__(self, tools: Mapping[str, Tool]) -> None:
        self._tools = tools

    def __getitem__(self, name: str) -> str:
        found = self._tools.get(name)
        if found is None or found.server is None:
            raise KeyError(name)
        return found.server

    def __iter__(self) -> Iterator[str]:
        return (name for name, t in self._tools.items() if t.server is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)


def _stop_unless_replaying(cancel: CancelToken, edge: Edge, state: LoopState) -> None:
    """Honour a stop or drain, except while the next model step is journaled: replaying it costs nothing and
    has no effect, and it rebuilds the rounds (a unit parked for approval is stopped with its rounds intact)."""
    if cancel.is_set() and edge.recorded(f"model:{state.rounds_used}") is None:
        cancel.raise_if_set()
