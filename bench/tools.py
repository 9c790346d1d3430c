"""A tool with no I/O of its own, so Redis counts measure Baton's overhead and not the tool's.

Loaded by benchmark workers through `BATON_TOOLS=bench.tools:TOOLS`.
"""

from __future__ import annotations

from agent.tools import tool


@tool(effect="read")
def peek(key: str) -> str:
    """Return a fixed value for a key (touches nothing)."""
    return f"value-of-{key}"


TOOLS = [peek]
