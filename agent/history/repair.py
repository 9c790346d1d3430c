"""History repair: ordered, pure, idempotent passes run whenever a history is loaded for a request.

Each pass returns its input unchanged (the same list object) when there is nothing to fix, and
marks what it synthesizes (`ToolResultBlock.synthesized`), so a repaired history is explainable.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agent.history.context import Sizes
from agent.messages import (
    INTERRUPTED_RESULT,
    Message,
    ToolResultBlock,
    to_api,
)
from agent.messages.media import FileSource

Pass = Callable[[list[Message]], list[Message]]


def _model_view(messages: list[Message]) -> list[Message]:
    """The messages the model sees (notices carry no model content)."""
    return [m for m in messages if m.role != "notice"]


def collect_parallel_results(messages: list[Message]) -> list[Message]:
    """Move tool results that landed later (after notices or other entries) next to their call.

    Results of parallel calls written by separate steps may be interleaved with notices or split
    over several user messages; they are kept and gathered, never swallowed.
    """
    changed = False
    out: list[Message] = []
    for message in messages:
        if message.role == "user" and message.tool_results and out:
            target = _answering_index(out, message)
            # Even right after its target: a split result message would otherwise read as an orphan.
            if target is not None:
                keep = tuple(b for b in message.content if not isinstance(b, ToolResultBlock))
                merged = out[target].model_copy(update={"content": out[target].content + message.tool_results})
                out[target] = merged
                if keep:
                    out.append(message.model_copy(update={"content": keep}))
                changed = True
                continue
        out.append(message)
    return out if changed else messages


def _answering_index(out: list[Message], message: Message) -> int | None:
    """Index of the user message right after the assistant message that issued these results' calls."""
    ids = {b.tool_use_id for b in message.tool_results}
    for i in range(len(out) - 1, -1, -1):
        candidate = out[i]
        if candidate.role == "assistant" and ids & {b.id for b in candidate.tool_uses}:
            nxt = next((j for j in range(i + 1, len(out)) if out[j].role != "notice"), None)
            if nxt is not None and out[nxt].role == "user" and out[nxt].tool_results:
                return nxt
            return None
    return None


def drop_orphaned_results(messages: list[Message]) -> list[Message]:
    """Remove tool results whose call is not in the assistant message right before them."""
    changed = False
    out: list[Message] = []
    previous_ids: set[str] = set()
    answered: set[str] = set()
    for message in messages:
        if message.role == "notice":
            out.append(message)
            continue
        if message.role == "user" and message.tool_results:
            kept = []
            for block in message.content:
                if isinstance(block, ToolResultBlock) and (
                    block.tool_use_id not in previous_ids or block.tool_use_id in answered
                ):
                    changed = True
                    continue
                if isinstance(block, ToolResultBlock):
                    answered.add(block.tool_use_id)
                kept.append(block)
            if kept:
                out.append(message.model_copy(update={"content": tuple(kept)}))
            elif len(kept) != len(message.content):
                changed = True
        else:
            out.append(message)
        if message.role == "assistant":
            previous_ids = {b.id for b in message.tool_uses}
            answered = set()
        elif message.role == "user":
            previous_ids = set()
    return out if changed else messages


def backfill_dangling_calls(messages: list[Message]) -> list[Message]:
    """Answer every tool call that has no result with the interrupted placeholder (not an error)."""
    model = [i for i, m in enumerate(messages) if m.role != "notice"]
    replace: dict[int, Message] = {}
    insert_after: dict[int, Message] = {}
    for position, index in enumerate(model):
        message = messages[index]
        if message.role != "assistant" or not message.tool_uses:
            continue
        nxt_index = model[position + 1] if position + 1 < len(model) else None
        nxt = messages[nxt_index] if nxt_index is not None else None
        have = {b.tool_use_id for b in nxt.tool_results} if nxt is not None and nxt.role == "user" else set()
        missing = [b for b in message.tool_uses if b.id not in have]
        if not missing:
            continue
        fill = tuple(ToolResultBlock(tool_use_id=b.id, content=INTERRUPTED_RESULT, synthesized=True) for b in missing)
        if nxt is not None and nxt_index is not None and nxt.role == "user":
            rest = tuple(b for b in nxt.content if not isinstance(b, ToolResultBlock))
            replace[nxt_index] = nxt.model_copy(update={"content": nxt.tool_results + fill + rest})
        else:
            insert_after[index] = Message(role="user", content=fill, turn_id=message.turn_id)
    if not replace and not insert_after:
        return messages
    out: list[Message] = []
    for i, message in enumerate(messages):
        out.append(replace.get(i, message))
        if i in insert_after:
            out.append(insert_after[i])
    return out


def merge_same_role(messages: list[Message]) -> list[Message]:
    """Merge consecutive model messages of one role (a failed turn's prompt, then the next prompt).

    Tool results stay first in a merged user message, as the API expects them right after the call.
    """
    changed = False
    out: list[Message] = []
    last_model: int | None = None
    for message in messages:
        if message.role == "notice":
            out.append(message)
            continue
        if last_model is not None and out[last_model].role == message.role:
            previous = out[last_model]
            blocks = previous.content + message.content
            results = tuple(b for b in blocks if isinstance(b, ToolResultBlock))
            rest = tuple(b for b in blocks if not isinstance(b, ToolResultBlock))
            out[last_model] = previous.model_copy(update={"content": results + rest})
            changed = True
            continue
        out.append(message)
        last_model = len(out) - 1
    return out if changed else messages


PASSES: tuple[Pass, ...] = (
    collect_parallel_results,
    drop_orphaned_results,
    backfill_dangling_calls,
    merge_same_role,
)


def repair(messages: list[Message]) -> list[Message]:
    """Run every pass in order; a valid history comes out unchanged."""
    for step in PASSES:
        messages = step(messages)
    return messages


class RequestHistory:
    """`to_api(repair(messages))` for a loop's growing history, paying for the whole only when it must.

    Each round of a loop appends the same shape: an assistant message with tool calls, then a user message
    answering exactly those calls. After a repaired history whose last model message is the user's, such a
    pair goes through every pass unchanged (no result to move or drop, no call left dangling before it or
    in it, no two roles to merge), and the passes never change an earlier message because of a later one
    of this shape; so the repaired history and its API form just grow by the pair. Anything else (the
    first request, a seeded or resumed state) is repaired whole. Without this, a run of N rounds repaired
    and converted N growing histories: quadratic in its length.
    """

    def __init__(self, model: str | None = None, files: FileSource | None = None) -> None:
        self._model = model  # the request's model: reasoning goes back only to the model that produced it
        self._files = files  # where file blocks' bytes are read (once per request build: a round's pair is cheap)
        self._seen: list[Message] = []
        self._repaired: list[Message] = []
        self._api: list[dict[str, Any]] = []
        self.sizes = Sizes()  # the estimates of these dicts, for the context budget

    def api(self, messages: list[Message]) -> list[dict[str, Any]]:
        """The request's messages: equal to `to_api(repair(messages))`."""
        n = len(self._seen)
        if (
            n
            and len(messages) == n + 2
            and all(a is b for a, b in zip(self._seen, messages, strict=False))
            and _ends_with_user(self._repaired)
            and _answered_round(messages[-2], messages[-1])
        ):
            self._repaired.extend(messages[-2:])
            self._api.extend(to_api(messages[-2:], self._model, self._files))
        else:
            self._repaired = list(repair(messages))
            self._api = to_api(self._repaired, self._model, self._files)
        self._seen = list(messages)
        return list(self._api)


def _ends_with_user(messages: list[Message]) -> bool:
    last = next((m for m in reversed(messages) if m.role != "notice"), None)
    return last is not None and last.role == "user"


def _answered_round(ask: Message, answer: Message) -> bool:
    """An assistant message with tool calls, then a user message of results for exactly those calls, once each."""
    if ask.role != "assistant" or answer.role != "user" or not answer.content:
        return False
    calls = [b.id for b in ask.tool_uses]
    results = [b.tool_use_id for b in answer.content if isinstance(b, ToolResultBlock)]
    return (
        bool(calls)
        and len(results) == len(answer.content)
        and len(set(calls)) == len(calls)
        and len(set(results)) == len(results)
        and set(results) == set(calls)
    )


def problems(messages: list[Message]) -> list[str]:
    """What the Messages API would reject in this history (empty when valid). Used by tests and chaos."""
    found: list[str] = []
    model = _model_view(messages)
    if model and model[0].role != "user":
        found.append("the first message is not the user's")
    for i, message in enumerate(model):
        if not message.content:
            found.append(f"message {i} is empty")
        if i and model[i - 1].role == message.role:
            found.append(f"messages {i - 1} and {i} have the same role")
        if message.role == "assistant" and message.tool_uses:
            nxt = model[i + 1] if i + 1 < len(model) else None
            have = {b.tool_use_id for b in nxt.tool_results} if nxt is not None else set()
            missing = [b.id for b in message.tool_uses if b.id not in have]
            if missing:
                found.append(f"message {i}: tool_use without tool_result: {missing}")
        if message.role == "user" and message.tool_results:
            previous = {b.id for b in model[i - 1].tool_uses} if i and model[i - 1].role == "assistant" else set()
            orphans = [b.tool_use_id for b in message.tool_results if b.tool_use_id not in previous]
            if orphans:
                found.append(f"message {i}: tool_result without tool_use: {orphans}")
    return found
