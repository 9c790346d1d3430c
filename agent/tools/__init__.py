"""The tools and their sandbox: tool definitions (`from agent.tools import tool`), the tool round and its
write-ahead ledger, the threads calls run on, the workspace tools and the bubblewrap sandbox commands run in,
and MCP servers' tools."""


from __future__ import annotations

from agent.tools.content import Image
from agent.tools.definition import (
    IDEMPOTENCY_PARAM,
    RESULT_CAP_CHARS,
    Effect,
    Tool,
    ToolOutcome,
    by_name,
    cap_result,
    execute,
    load_tools,
    tool,
)

__all__ = [
    "IDEMPOTENCY_PARAM",
    "RESULT_CAP_CHARS",
    "Effect",
    "Image",
    "Tool",
    "ToolOutcome",
    "by_name",
    "cap_result",
    "execute",
    "load_tools",
    "tool",
]
