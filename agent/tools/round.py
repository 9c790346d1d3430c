"""A tool round: each call journaled, write tools through the ledger, approvals parked, stops answered.

Every call gets a result in the round's user message, whatever happens: a recorded one on replay, the
tool's own, a denial, or a placeholder when a stop or drain abandons it. A call that waits for a person's
approval leaves the round open: the loop raises `AwaitingApproval` once the round's other calls are done.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from agent.errors import AwaitingApproval, Cancelled
from agent.history.context import result_cap_chars
from agent.loop.cancel import CancelToken
from agent.loop.edge import Edge, EventDraft, LoopConfig
from agent.loop.policy import Driver
from agent.loop.state import DedupEntry, LoopState, ToolLogEntry, dedup_key
from agent.messages import (
    DENIED_RESULT,
    DENIED_WITH_REASON,
    EXPIRED_RESULT,
    INTERRUPTED_RESULT,
    ToolContent,
    ToolResultBlock,
    ToolUseBlock,
    result_images,
)
from agent.telemetry import telemetry
from agent.tools import RESULT_CAP_CHARS, Tool, ToolOutcome, execute
from agent.tools.capping import cap_content
from agent.tools.definition import no_longer_available
from agent.tools.threads import tool_threads


def run_round(
    calls: tuple[ToolUseBlock, ...],
    state: LoopState,
    tools: Mapping[str, Tool],
    edge: Edge,
    cancel: CancelToken,
    config: LoopConfig,
) -> list[ToolResultBlock]:
    results: list[ToolResultBlock] = []
    pending: list[str] = []
    for index, call in enumerate(calls):
        if cancel.is_set() and not _journaled(call, edge):
            # Calls after a stop never start; the history still needs an answer for each (a journaled one keeps
            # its recorded result). Journaled calls before that replay as usual: it is free and has no effect.
            results += [_recorded_or_placeholder(c, edge) for c in calls[index:]]
            raise CancelledRound(cancel.reason or "stop", results)
        tool = tools.get(call.name)
        if tool is not None and tool.approval and edge.recorded(f"tool:{call.id}") is None:
            decided = _approval(call, edge, config)
            if decided is None:
                pending.append(call.id)  # the round's other calls still run; it is answered once all are settled
                continue
            if decided["decision"] != "approved":
                results.append(_denied_step(call, state, edge, config, decided, tool.server))
                continue
        block = _tool_step(call, state, tools, edge, cancel, config)
        results.append(block)
        if block.synthesized and cancel.is_set():
            results += [_recorded_or_placeholder(c, edge) for c in calls[index + 1 :]]
            raise CancelledRound(cancel.reason or "stop", results)
    if pending:
        raise AwaitingApproval(pending)
    return results


def _journaled(call: ToolUseBlock, edge: Edge) -> bool:
    recorded = edge.recorded(f"tool:{call.id}")
    return recorded is not None and recorded["status"] == "done"


def _recorded_or_placeholder(call: ToolUseBlock, edge: Edge) -> ToolResultBlock:
    recorded = edge.recorded(f"tool:{call.id}")
    if recorded is not None and recorded["status"] == "done":
        return ToolResultBlock(
            tool_use_id=call.id,
            content=recorded["content"],
            is_error=recorded["is_error"],
            synthesized=recorded.get("synthesized", False),
        )
    return _placeholder(call.id)


def _approval(call: ToolUseBlock, edge: Edge, config: LoopConfig) -> dict[str, Any] | None:
    """The decision on a call that needs approval; None while it waits (asked for once, journaled)."""
    decided = edge.decision(call.id)
    if decided is not None:
        return decided
    if edge.recorded(f"approval:{call.id}") is None:
        asked = {"turn_id": config.turn_id, "tool_use_id": call.id, "name": call.name, "input": call.input}
        edge.record(
            f"approval:{call.id}",
            {"kind": "approval", "status": "requested", "name": call.name, "input": call.input},
            [("tool.approval_requested", asked)],
        )
    return None


def _denied_step(
    call: ToolUseBlock,
    state: LoopState,
    edge: Edge,
    config: LoopConfig,
    decided: dict[str, Any],
    server: str | None = None,
) -> ToolResultBlock:
    """A denied (or expired) call: never run; the model gets the denial as an error result."""
    block = ToolResultBlock(tool_use_id=call.id, content=denial_text(decided), is_error=True)
    _account(state, call, "write", block, status="denied", executed=False)
    record = {
        "kind": "tool",
        "status": "done",
        "name": call.name,
        "content": content_record(block.content),
        "is_error": True,
        "synthesized": False,
        "log_status": "denied",
    }
    ids = {"tool_use_id": call.id, "name": call.name, "status": "denied"}
    where = {"server": server} if server is not None else {}
    events: list[EventDraft] = [("tool.result", {"turn_id": config.turn_id, **ids, "is_error": True, **where})]
    if config.driver is Driver.CODING_RUN:
        events.insert(0, ("run.step", {"step": f"tool:{call.id}", "kind": "tool", **ids}))
    edge.record(f"tool:{call.id}", record, events)
    return block


def denial_text(decided: dict[str, Any]) -> str:
    """The contract's words for a call that did not get to run."""
    if decided.get("expired"):
        return EXPIRED_RESULT
    reason = (decided.get("reason") or "").strip()
    return DENIED_WITH_REASON.format(reason=reason) if reason else DENIED_RESULT


class CancelledRound(Cancelled):
    """A cancellation that carries the results gathered so far, so the round can be closed cleanly."""

    def __init__(self, reason: Any, results: list[ToolResultBlock]) -> None:
        super().__init__(reason)
        self.results = results


def _placeholder(tool_use_id: str) -> ToolResultBlock:
    return ToolResultBlock(tool_use_id=tool_use_id, content=INTERRUPTED_RESULT, synthesized=True)


def _tool_step(
    call: ToolUseBlock,
    state: LoopState,
    tools: Mapping[str, Tool],
    edge: Edge,
    cancel: CancelToken,
    config: LoopConfig,
) -> ToolResultBlock:
    """Answer one call: its journaled result on replay; else decide how (no longer available, interrupted,
    deduplicated, or run), and journal the result with its events."""
    step_id = f"tool:{call.id}"
    tool = tools.get(call.name)
    effect = tool.effect if tool is not None else "read"
    recorded = edge.recorded(step_id)
    if recorded is not None and recorded["status"] == "done":
        telemetry().replayed(step_id, call.name)  # answered from the journal: an event, never a tool span
        return _replayed_call(call, effect, recorded, state)
    if tool is None or tool.unavailable is not None:  # gone, or pinned without its code here: never run
        outcome, status = ToolOutcome(no_longer_available(call.name), is_error=True), "error"
    elif recorded is not None and recorded["status"] == "committing" and not tool.idempotent:
        # The effect may or may not have happened; running it again could do it twice.
        outcome, status = ToolOutcome(INTERRUPTED_RESULT), "interrupted"
    elif effect == "read" and _fresh(state, call):
        entry = state.dedup[dedup_key(call.name, call.input)]
        outcome, status = ToolOutcome(entry.content, entry.is_error), "deduplicated"
    else:
        ran = _run_call(call, tool, effect, recorded, state, edge, cancel, config)
        if isinstance(ran, ToolResultBlock):
            return ran
        outcome, status = ran, "error" if ran.is_error else "ok"
    return _record_result(call, tool, effect, outcome, status, state, edge, config)


def _replayed_call(call: ToolUseBlock, effect: str, recorded: dict[str, Any], state: LoopState) -> ToolResultBlock:
    """The result an earlier execution journaled for the call, counted in the state as it was then."""
    block = ToolResultBlock(
        tool_use_id=call.id,
        content=recorded["content"],
        is_error=recorded["is_error"],
        synthesized=recorded.get("synthesized", False),
    )
    _account(state, call, effect, block, status=recorded.get("log_status", "ok"), executed=True)
    return block


def _run_call(
    call: ToolUseBlock,
    tool: Tool,
    effect: str,
    recorded: dict[str, Any] | None,
    state: LoopState,
    edge: Edge,
    cancel: CancelToken,
    config: LoopConfig,
) -> ToolOutcome | ToolResultBlock:
    """Run the call, a write behind its write-ahead entry; the placeholder, not to be journaled as done, when a
    stop or drain kept it from running to its end here."""
    idempotency_key = f"{config.owner_id}:{call.id}"
    # An entry whose tool never started, so this execution writes it again and runs the tool: `withdrawn` (a
    # drain's grace ended before its thread began it) or `unconfirmed` (the store's replica did not confirm it in
    # time, and the edge raised before the tool could start).
    if effect == "write" and (recorded is None or recorded["status"] in NEVER_STARTED):
        edge.record(f"tool:{call.id}", {"kind": "tool", "status": "committing", "name": call.name}, [])
    with telemetry().tool(call, tool) as traced:  # `execute_tool TOOL`: only a call that runs
        ran = traced.ran(_run_cancellable(tool, call.input, idempotency_key, cancel, config))
    if isinstance(ran, NotStarted):
        # Never run, and never to run here: the write-ahead entry says so, and the execution that resumes the
        # unit runs the call (a drain answers nothing). A stop answers it with the placeholder, as before.
        if effect == "write":
            edge.record(f"tool:{call.id}", {"kind": "tool", "status": "withdrawn", "name": call.name}, [])
        return _placeholder(call.id)
    if ran is None:
        block = _placeholder(call.id)
        _account(state, call, effect, block, status="interrupted", executed=True)
        return block
    return ran


def _record_result(
    call: ToolUseBlock,
    tool: Tool | None,
    effect: str,
    outcome: ToolOutcome,
    status: str,
    state: LoopState,
    edge: Edge,
    config: LoopConfig,
) -> ToolResultBlock:
    """Journal the call's result (capped) with its `tool.result` event, and count it in the state."""
    step_id = f"tool:{call.id}"
    synthesized = status == "interrupted"
    # Capped when recorded (head and tail kept), tighter under a small context budget.
    content = cap_content(outcome.content, result_cap_chars(config.context_tokens, RESULT_CAP_CHARS), outcome.files)
    block = ToolResultBlock(tool_use_id=call.id, content=content, is_error=outcome.is_error, synthesized=synthesized)
    _account(state, call, effect, block, status=status, executed=status in ("ok", "error"))
    kept = {sha: data for sha, data in outcome.files.items() if sha in {i.sha256 for i in result_images(content)}}
    if kept:
        # The images' bytes go to the chat's file store before the result that refers to them is journaled: a
        # crash between the two leaves bytes no message names (deleted with the chat), never a reference to none.
        edge.keep_files(kept)
    record = {
        "kind": "tool",
        "status": "done",
        "name": call.name,
        "content": content_record(block.content),
        "is_error": block.is_error,
        "synthesized": synthesized,
        "log_status": status,
    }
    events: list[EventDraft] = [
        (
            "tool.result",
            {
                "turn_id": config.turn_id,
                "tool_use_id": call.id,
                "name": call.name,
                "status": status,
                "is_error": block.is_error,
                **({"server": tool.server} if tool is not None and tool.server is not None else {}),
            },
        )
    ]
    if config.driver is Driver.CODING_RUN:
        events.insert(0, ("run.step", {"step": step_id, "kind": "tool", "name": call.name, "status": status}))
    edge.record(step_id, record, events)
    return block


def content_record(content: ToolContent) -> str | list[dict[str, Any]]:
    """A result's content as the journal holds it: its text, or its parts (images by reference, never bytes)."""
    return content if isinstance(content, str) else [part.model_dump() for part in content]


def _fresh(state: LoopState, call: ToolUseBlock) -> bool:
    entry = state.dedup.get(dedup_key(call.name, call.input))
    return entry is not None and entry.mutations == state.mutations


def _account(
    state: LoopState, call: ToolUseBlock, effect: str, block: ToolResultBlock, *, status: str, executed: bool
) -> None:
    """The bookkeeping every path shares, so a replayed step leaves the same state as a live one."""
    if executed:
        state.executed.append(call.name)
    if effect == "write" and status != "deduplicated":
        state.mutations += 1
    elif status in ("ok", "error"):
        state.dedup[dedup_key(call.name, call.input)] = DedupEntry(
            content=block.content, is_error=block.is_error, mutations=state.mutations
        )
    state.tool_log.append(ToolLogEntry(id=call.id, name=call.name, effect=effect, status=status))


NEVER_STARTED = ("withdrawn", "unconfirmed")  # write-ahead entries of calls known never to have started


class NotStarted:
    """A call whose thread had not begun the tool when a drain's grace ended: withdrawn, so it never runs here."""


def _run_cancellable(
    tool: Tool, arguments: dict[str, Any], key: str, cancel: CancelToken, config: LoopConfig
) -> ToolOutcome | NotStarted | None:
    """Run a tool in a thread; on stop or drain give it a grace period, then abandon it (None).

    A call whose thread has not begun the tool by then (a thread starved of the CPU, as hundreds of a threads pool's
    units are when a drain wakes them all) is withdrawn instead (`NotStarted`): claiming the call and withdrawing it
    are decided under one lock, so either the tool runs or it never will, and the caller knows which.
    """
    box: list[ToolOutcome] = []
    settled = threading.Event()
    woken = threading.Event()  # set by the tool finishing or by a stop/drain, whichever comes first
    claim = threading.Lock()
    state = {"started": False, "withdrawn": False}

    def target() -> None:
        try:
            with claim:
                if state["withdrawn"]:
                    return
                state["started"] = True
            box.append(execute(tool, arguments, idempotency_key=key))
        finally:  # even a tool's SystemExit must not leave the round waiting forever
            settled.set()
            woken.set()

    unregister = cancel.on_cancel(woken.set)
    tool_threads().run(target, name=f"tool:{tool.name}")
    try:
        woken.wait()
        if not settled.is_set():
            settled.wait(config.drain_grace if cancel.reason == "drain" else config.stop_grace)
    finally:
        unregister()
    if box:
        return box[0]
    with claim:
        if not state["started"]:
            state["withdrawn"] = True
            return NotStarted()
    return None
