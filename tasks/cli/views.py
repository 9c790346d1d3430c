"""How the CLI shows turns, runs and transcripts to a person, and its exit codes."""

from __future__ import annotations

import sys
import time
from typing import Any

from agent.messages import (
    Message,
    NoticeBlock,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    result_text,
)


def _needs_approval(result: Any) -> bool:
    # `--wait` returns when the unit waits for a person: that is not a failure, it is the caller's turn.
    return bool(result.status == "waiting" and result.waiting_reason == "approval")


def turn_exit(result: Any, waited: bool) -> int:
    if not waited:
        return 0
    return 0 if result.status == "completed" or _needs_approval(result) else 1


def run_exit(status: Any, waited: bool) -> int:
    if not waited:
        return 0 if status.status not in ("failed", "stopped") else 1
    return 0 if status.status == "completed" or _needs_approval(status) else 1


def render_turn(result: Any) -> str:
    lines = [f"turn {result.turn_id} in {result.chat_id}: {result.status}" + (" (resumed)" if result.resumed else "")]
    if result.reply:
        lines.append(result.reply)
    if result.failure:
        lines.append(
            f"failure: {result.failure['class']} (retryable: {result.failure['retryable']}): "
            f"{result.failure['message']}"
        )
    return "\n".join(lines)


def render_message(message: Message) -> str:
    parts = []
    for block in message.content:
        if isinstance(block, TextBlock):
            parts.append(block.text)
        elif isinstance(block, ToolUseBlock):
            parts.append(f"→ {block.name}({block.input})")
        elif isinstance(block, ToolResultBlock):
            parts.append(f"← {'error: ' if block.is_error else ''}{result_text(block.content)[:200]}")
        elif isinstance(block, NoticeBlock):
            parts.append(f"[{block.text}]")
        elif isinstance(block, ThinkingBlock):  # folded: a person reads the answer first
            thought = " ".join(block.thinking.split())
            parts.append(f"(thought: {thought[:80]}{'…' if len(thought) > 80 else ''})")
        elif isinstance(block, RedactedThinkingBlock):
            parts.append("(thought: redacted)")
    return f"{message.role:>9}: " + " ".join(parts)


def live_progress(client: Any, ref: Any, timeout: float) -> None:
    """Print a turn's events as they happen, until it ends or the timeout passes."""
    deadline = time.monotonic() + timeout
    after = None
    while time.monotonic() < deadline:
        for event in client.follow(ref.chat_id, after, block_ms=500):
            after = event.id
            if getattr(event, "turn_id", None) not in (None, ref.turn_id):
                continue
            sys.stderr.write(f"  · {event.type}\n")
            if event.type in ("turn.completed", "turn.failed", "turn.stopped"):
                return


def render_agents(listed: dict[str, Any]) -> str:
    """`baton agents`: one block per agent, the default first; what a person checks after a deploy."""
    agents = listed.get("agents") or []
    if not agents:
        return "no agents: no worker has published its agents (is a worker running on this store?)"
    lines = []
    for a in agents:
        default = " (default)" if a.get("default") else ""
        lines.append(f"{a['name']}{default}  version {a['version']}  {a['provider']}:{a['model']}")
        if len(a.get("models") or []) > 1:
            lines.append(f"  models: {', '.join(a['models'])}")
        tools = [f"{t['name']} ({t['effect']})" for t in a.get("tools") or []]
        lines.append(f"  tools: {', '.join(tools) or 'none'}" + (f"; MCP: {', '.join(a['mcp_servers'])}"
                                                                 if a.get("mcp_servers") else ""))
        if a.get("queue"):
            lines.append(f"  queue: {a['queue']}")
        for w in a.get("workers") or []:
            lines.append(f"  worker {w['hostname']}: version {w['version']}")
    return "\n".join(lines)


def render_page(page: Any) -> str:
    """A listing page, one chat or run a line (newest activity first), and how to get the next page."""
    lines = [
        f"{item['id']:<24} {item['status']:<9} {item['turns']:>4}  {item['user'] or '-':<16} {item['title']}"
        for item in page.items
    ]
    if page.next:
        lines.append(f"(more: --before {page.next})")
    return "\n".join(lines) or "(none)"


def render_deleted(out: dict[str, Any]) -> str:
    if out["deleted"]:
        return f"{out['id']}: deleted"
    return f"{out['id']}: " + ("stopping; deleted once it has settled" if out.get("stopping") else "nothing to delete")
